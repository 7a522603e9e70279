"""`TensorProxy`: what user code holds while it is traced.

A proxy is a real ``torch.Tensor`` subclass with no storage (``_make_wrapper_subclass``):
``isinstance(x, torch.Tensor)`` holds and ``.shape``, ``.dtype``, ``.device``, ``.ndim``,
``.size()``, ``.dim()``, ``.numel()``, ``.requires_grad``, ``.is_cuda`` and the layout
queries (``.stride()``, ``.storage_offset()``, ``.is_contiguous(memory_format=...)``) answer
from its metadata, which is eager's (`thunder_ir.frontend.layout`). Everything else reaches
the tracer's ``TorchFunctionMode`` and becomes IR.

Each proxy stands for an SSA value (``_value``). An in-place op rebinds ``_value`` to the
op's functional result, which is how in-place code is functionalized. ``_base_proxy`` links a
view to the tensor it aliases and the tensor keeps its live views (weakly), so in-place
writes through aliases, or to a tensor whose views are still in use, can be rejected.

There is one proxy class: `thunder_ir.TensorProxy` and `thunder_ir.extend.TensorProxy` are
this one. Meta functions of the extension API make detached proxies with
``TensorProxy(like=x, shape=..., dtype=..., device=...)``.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Sequence
from typing import Any

import torch
from xdsl.ir import Block, SSAValue

from thunder_ir.dialects import symbols
from thunder_ir.dialects.types import TensorType, canonical_device, tensor_type
from thunder_ir.frontend.numpy_values import ARRAY_OPERATORS, array_operator


def _storage_memo(t: TensorType, sizes: Sequence[Any], strides: Sequence[Any] | None,
                  offset: Any) -> tuple[dict[Any, Any], Any]:
    """A symbolic compilation's memo of proxies' storage sizes (bytes), and the key of one
    of symbolic sizes in it: its sizes', strides' and offset's expressions and its dtype.
    torch computes a wrapper tensor's storage size from its sizes and strides, over
    ``SymInt``s nine symbolic operations (97% of a proxy's making); the layouts repeat
    layer after layer, so the size torch computed for the first proxy of a layout is
    handed to the next (the same ``SymInt``: later bounds checks decide as they would).
    Key None: static sizes (torch's C++ computes it in no time), or no symbol table."""
    if not t.symbolic:
        return _NO_MEMO, None
    table = symbols.current()
    if table is None:
        return _NO_MEMO, None

    def expr(x: Any) -> Any:
        return x.node.expr if isinstance(x, torch.SymInt) else x

    key = (tuple(expr(n) for n in sizes),
           None if strides is None else (tuple(expr(st) for st in strides), expr(offset)),
           t.dtype)
    return table.__dict__.setdefault("_storage_bytes", {}), key


_NO_MEMO: dict[Any, Any] = {}


class TensorProxy(torch.Tensor):
    """A storage-less tensor standing for an SSA value during tracing.

    ``TensorProxy(value, requires_grad=False, base=None, strides=..., offset=...)`` wraps an
    SSA value (``base``: the proxy whose storage it views; ``strides`` and ``offset``: eager's
    layout of the tensor it stands for, contiguous by default), as the tracer does.
    ``TensorProxy(like=x, shape=..., dtype=..., device=...)`` is a proxy with ``x``'s
    metadata (``x`` a proxy or any tensor, meta tensors included), overridden by whichever
    of ``shape``, ``dtype`` and ``device`` are given; it is attached to no program (what
    meta functions of the extension API return). ``TensorProxy(shape=..., dtype=...)``
    needs no ``like``.
    """

    _value: SSAValue
    _base_proxy: TensorProxy | None
    _views: weakref.WeakSet[TensorProxy] | None
    _storage: int
    _name: str

    @staticmethod
    def __new__(cls, value: SSAValue | None = None, requires_grad: bool = False,
                base: TensorProxy | None = None, *, like: torch.Tensor | None = None,
                shape: Sequence[int] | None = None, dtype: torch.dtype | None = None,
                device: str | torch.device | None = None, strides: Sequence[int] | None = None,
                offset: int = 0) -> TensorProxy:
        if value is None:
            value, requires_grad = _detached_value(like, shape, dtype, device, requires_grad)
            if like is not None and shape is None and strides is None:
                with torch._C.DisableTorchFunction():
                    strides, offset = tuple(like.stride()), int(like.storage_offset())
        t = value.type
        assert isinstance(t, TensorType)
        sizes = t.sizes
        memo, key = _storage_memo(t, sizes, strides, offset)
        r = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
            cls, sizes, strides=strides, storage_offset=None if strides is None else offset,
            dtype=t.dtype,
            device=_DEVICES.get(t.dev) or _device(t.dev), requires_grad=requires_grad,
            storage_size=None if key is None else memo.get(key),
        )
        if key is not None and key not in memo:
            with torch._C.DisableTorchFunction():
                memo[key] = torch.Tensor.untyped_storage(r).nbytes()
        r._value = value
        r._base_proxy = base
        r._views = None
        if base is not None:
            base.add_view(r)
            r._storage = base._storage
        else:
            r._storage = next(_STORAGES)
        return r

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (),  # type: ignore[override]
                           kwargs: Any = None) -> Any:
        raise RuntimeError(
            f"thunder_ir: {func} reached torch's dispatcher with a traced tensor. This happens "
            "when code runs outside the tracer's control (for example in a C++ extension or "
            "under torch._C.DisableTorchFunction). Call it outside the jitted function.")

    def set_layout(self, sizes: Sequence[int], strides: Sequence[int], offset: int) -> None:
        """Changes this proxy's sizes, strides and storage offset in place, as eager's
        in-place metadata ops (``t_``, ``unsqueeze_``, ``as_strided_``) change a tensor's
        (torch's own ``as_strided_`` below the Python dispatch key: metadata only)."""
        with torch._C.DisableTorchFunction(), torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEY), \
                torch.no_grad():  # (a proxy that requires grad is a leaf to torch)
            torch.Tensor.as_strided_(self, tuple(sizes), tuple(strides), offset)

    def add_view(self, view: TensorProxy) -> None:
        """Remembers a live view of this tensor (weakly: a view user code dropped, such as
        ``x.flatten()[:3]`` used once, no longer aliases anything)."""
        if self._views is None:
            self._views = weakref.WeakSet()
        self._views.add(view)

    def has_views(self) -> bool:
        """True while a view of this tensor is alive."""
        return bool(self._views)

    def describe(self) -> str:
        """``TensorProxy(x, "cpu f32[2, 3]")``."""
        name = self._value.name_hint or "t"
        t = self._value.type
        return f'TensorProxy({name}, "{t.pretty()}")'  # type: ignore[attr-defined]


for _name, _op in ARRAY_OPERATORS.items():  # ``x * np.array(2.0)`` as eager computes it
    setattr(TensorProxy, _name, array_operator(getattr(torch.Tensor, _name), _op))


def _detached_value(like: torch.Tensor | None, shape: Sequence[int] | None,
                    dtype: torch.dtype | None, device: str | torch.device | None,
                    requires_grad: bool) -> tuple[SSAValue, bool]:
    """The value of a proxy made from metadata (``like=``, ``shape=``, ...): an argument of
    a block of its own, in no program."""
    if like is None and (shape is None or dtype is None):
        raise TypeError("TensorProxy() needs like=<tensor>, or shape= and dtype=")
    if like is not None:
        t = type_of_any(like)
        shape = tuple(t.sizes) if shape is None else tuple(shape)
        dtype = t.dtype if dtype is None else dtype
        dev = t.dev if device is None else canonical_device(device)
        requires_grad = requires_grad or bool(like.requires_grad)
    else:
        dev = canonical_device(device or "cpu")
    assert shape is not None and dtype is not None
    return Block(arg_types=[tensor_type(tuple(shape), dtype, dev)]).args[0], requires_grad


def type_of_any(t: torch.Tensor) -> TensorType:
    """The tensor type of a proxy, or of a real or meta tensor."""
    if is_proxy(t):
        ty = t._value.type  # type: ignore[attr-defined]
        assert isinstance(ty, TensorType)
        return ty
    return tensor_type(tuple(t.shape), t.dtype, canonical_device(t.device))


_PYTHON_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)

_STORAGES = itertools.count()
"""Storage ids: a view has its base's; never reused (unlike ``id`` of a freed proxy)."""

_DEVICES: dict[str, torch.device] = {}


def _device(dev: str) -> torch.device:
    d = torch.device(dev)
    _DEVICES[dev] = d
    return d


def is_proxy(x: Any) -> bool:
    """True for a `TensorProxy`."""
    return type(x) is TensorProxy


def root_proxy(x: Any) -> TensorProxy | None:
    """The proxy whose storage ``x`` views (``x`` itself if it is no view); None for
    anything but a proxy."""
    if type(x) is not TensorProxy:
        return None
    return x._base_proxy if x._base_proxy is not None else x
