"""`TensorProxy`: what user code holds while it is traced.

A proxy is a real ``torch.Tensor`` subclass with no storage (``_make_wrapper_subclass``):
``isinstance(x, torch.Tensor)`` holds and ``.shape``, ``.dtype``, ``.device``, ``.ndim``,
``.size()``, ``.dim()``, ``.numel()``, ``.requires_grad`` and ``.is_cuda`` answer from its
metadata. Everything else reaches the tracer's ``TorchFunctionMode`` and becomes IR.

Each proxy stands for an SSA value (``_value``). An in-place op rebinds ``_value`` to the
op's functional result, which is how in-place code is functionalized. ``_base_proxy`` links a
view to the tensor it aliases and the tensor keeps its live views (weakly), so in-place
writes through aliases, or to a tensor whose views are still in use, can be rejected.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import torch
from xdsl.ir import SSAValue

from thunder_ir.dialects.types import TensorType


class TensorProxy(torch.Tensor):
    """A storage-less tensor standing for an SSA value during tracing."""

    _value: SSAValue
    _base_proxy: TensorProxy | None
    _views: weakref.WeakSet[TensorProxy] | None
    _storage: int
    _name: str

    @staticmethod
    def __new__(cls, value: SSAValue, requires_grad: bool = False,
                base: TensorProxy | None = None) -> TensorProxy:
        t = value.type
        assert isinstance(t, TensorType)
        r = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
            cls, t.sizes, dtype=t.dtype, device=_DEVICES.get(t.dev) or _device(t.dev),
            requires_grad=requires_grad,
        )
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
