"""The ``torch`` dialect: executable calls into PyTorch.

``torch.call`` names its callee by its import path (``torch.nn.functional.linear``) and
carries the call's static arguments. Tensor arguments are the op's operands; inside
``args``/``kwargs`` the attribute ``#prims.operand<i>`` stands for operand ``i``, so one op
expresses any mix of tensors and constants::

    %y = "torch.call"(%x, %w) <{callee = "torch.nn.functional.linear",
                               args = [#prims.operand<0>, #prims.operand<1>, none]}>

It is the torch executor's target, and the frontend's fallback for functions with no
``ltorch`` op (result types then come from torch's meta kernels). It is not ``Pure``:
an arbitrary torch function may draw random numbers or mutate, so CSE/DCE leave it alone
and fusion regions never move across it. A call whose builder knows the callee is a pure
function of its operands says so with the ``pure`` property (``make_call(..., pure=True)``,
as the SDPA executor's attention calls do); then it has no effects (`PureIfMarked`).

``nograd`` lists operands that eager's autograd leaves without a gradient although the
result requires grad (``torch.linalg.norm(x, ord=0)``, a loss's float ``target``): autodiff
sends them no cotangent, and their gradient stays ``None`` as eager's does.

A callee that returns a sequence has the ``multi`` property: ``true`` when every entry is a
tensor (one result each), or an array with one entry per element of the sequence, 1 for
a tensor (a result) and 0 for ``None`` (``multi_head_attention_forward``'s absent weights).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    IntAttr,
    IntegerAttr,
    NoneAttr,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute
from xdsl.irdl import (
    irdl_attr_definition,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import EffectInstance, MemoryEffect

from thunder_ir.dialects import symbols
from thunder_ir.dialects.base import OperandRef, ShapeError, ThunderOp, from_attr, to_attr
from thunder_ir.dialects.construct import new_op
from thunder_ir.dialects.modes import mode_key, neutral
from thunder_ir.dialects.traits import Opaque
from thunder_ir.dialects.types import (
    HandleType,
    NumberType,
    TensorType,
    canonical_device,
    pretty_type,
    tensor_type,
    type_of_tensor,
)


def resolve_callee(path: str) -> Callable[..., Any]:
    """Imports ``a.b.c`` and returns ``c``; also walks attributes (``torch.Tensor.add_``)."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(f"cannot resolve torch.call callee {path!r}")


class UnnamedCallableError(ValueError):
    """A callable has no import path a ``torch.call`` could name."""


PURE_CALLEES: frozenset[str] = frozenset({
    "torch.nn.functional.interpolate", "torch.nn.functional.upsample",
    "torch.nn.functional.avg_pool1d", "torch.nn.functional.avg_pool2d",
    "torch.nn.functional.avg_pool3d", "torch.nn.functional.adaptive_avg_pool2d",
    "torch.nn.functional.normalize", "torch.group_norm", "torch.nn.functional.group_norm",
    "torch.nn.functional.instance_norm", "torch.instance_norm",
    "torch.nn.functional.grid_sample", "torch.diff", "torch.cdist", "torch.sort",
    "torch.Tensor.sort", "torch.einsum",
    "torch.histc", "torch.Tensor.histc",
    "thunder_ir.runtime.namespace.scatter_strided",
})
"""Torch functions whose opaque calls the frontend marks ``pure`` where they write into
no operand and return no view: deterministic, no random draws, no side effects, fresh
results, and no error that depends on the values. (``one_hot`` is not: eager checks its
indices' range; nor ``unbind``, whose results are views of its operand.) A fusion
region may hold such a call (the Inductor executor's regions do:
``thunder_ir.lowering.traced_calls``)."""

CHECKING_CALLEES: frozenset[str] = frozenset({"thunder_ir.runtime.namespace.setitem"})
"""Functional calls that write into no operand, return fresh tensors and draw nothing, but
raise eager's error on some values (`setitem` with a tensor index: an index out of
range), so they are not ``pure`` (DCE must keep one whose result is unused). The fuse
pass lets pure ops move across them (`thunder_ir.passes.fuse.only_checks`) but keeps
them in order with every op that has effects."""

RUNTIME_NAMESPACE = "thunder_ir.runtime.namespace"
"""The one module whose callables generated code calls besides torch's (as ``tir.<name>``):
`thunder_ir.runtime.namespace`, where whoever defines such a callable registers it."""


def runtime_callee(name: str) -> str:
    """The callee path of ``name`` in the runtime namespace (``"call_with_grad"`` ->
    ``"thunder_ir.runtime.namespace.call_with_grad"``), for a pass to name in the IR."""
    return f"{RUNTIME_NAMESPACE}.{name}"


_NAMED: dict[int, tuple[Any, str]] = {}


def name_callee(func: Any, path: str) -> None:
    """Makes `torch_name` answer ``path`` for ``func`` (a callable registered in the runtime
    namespace is named there, not where it is defined)."""
    _NAMED[id(func)] = (func, path)


_TORCH_NAMES: dict[int, str] = {}
_GETTER_NAMES: dict[Any, str] = {
    getattr(torch.Tensor, p).__get__: n for p, n in (
        ("real", "torch.real"), ("imag", "torch.imag"), ("H", "torch.Tensor.adjoint"),
        ("mH", "torch.Tensor.adjoint"))}
"""Computed Tensor properties without a handler, named as the torch function they equal."""


def torch_name(func: Any) -> str:
    """The import path of a torch callable (``torch.nn.functional.linear``,
    ``torch.ops.aten.add.Tensor``): the inverse of `resolve_callee`.

    Raises:
        UnnamedCallableError: ``func`` has no importable name.
    """
    named = _NAMED.get(id(func))
    if named is not None:
        return named[1]
    if not _TORCH_NAMES:
        for mod_name, namespace in (("torch.nn.functional", torch.nn.functional),
                                    ("torch.special", torch.special), ("torch.fft", torch.fft),
                                    ("torch.linalg", torch.linalg), ("torch", torch)):
            for k in dir(namespace):
                if k.startswith("__"):
                    continue
                try:
                    obj = getattr(namespace, k)
                except Exception:
                    continue
                if callable(obj):
                    _TORCH_NAMES.setdefault(id(obj), f"{mod_name}.{k}")
        for k in dir(torch.Tensor):
            obj = getattr(torch.Tensor, k, None)
            if callable(obj):
                _TORCH_NAMES.setdefault(id(obj), f"torch.Tensor.{k}")
        import operator

        _TORCH_NAMES[id(operator.getitem)] = "operator.getitem"  # not `_operator.getitem`
    name = _TORCH_NAMES.get(id(func))
    if name is None:
        if func in _GETTER_NAMES:
            return _GETTER_NAMES[func]
        if isinstance(func, torch._ops.OpOverload):
            name = f"torch.ops.{func.namespace}.{func._opname}.{func._overloadname}"
        elif isinstance(func, torch._ops.OpOverloadPacket):
            name = f"torch.ops.{func._qualified_op_name.replace('::', '.')}"
        else:
            mod = getattr(func, "__module__", None)
            qual: Any = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
            if not mod or not qual or "<" in qual:
                raise UnnamedCallableError(f"cannot name torch function {func!r}")
            name = f"{mod}.{qual}"
        _TORCH_NAMES[id(func)] = name
    return name


OPERAND = "$operand"
"""Tag of an encoded operand reference: ``("$operand", i)`` stands for input ``i``."""


def encode_refs(value: Any, tag: str = OPERAND) -> Any:
    """Replaces each `OperandRef` inside a static argument by ``(tag, i)`` (what
    ``thunder_ir.runtime.autograd_fallback.call_with_grad`` reads)."""
    if isinstance(value, OperandRef):
        return (tag, int(value))
    if isinstance(value, tuple | list):
        return tuple(encode_refs(v, tag) for v in value)
    return value


def substitute(value: Any, operands: Sequence[Any]) -> Any:
    """Replaces every `OperandRef` inside a static argument by the operand it names."""
    if isinstance(value, OperandRef):
        return operands[value]
    if isinstance(value, tuple):
        return tuple(substitute(v, operands) for v in value)
    return value


class PureIfMarked(MemoryEffect):
    """No effects when the op carries the ``pure`` property; unknown effects otherwise."""

    @classmethod
    def get_effects(cls, op: Operation) -> set[EffectInstance] | None:
        return set() if "pure" in op.properties else None


@irdl_op_definition
class CallOp(ThunderOp):
    """`%r = "torch.call"(%a, ...) <{callee = "torch.nn.functional.linear", args, kwargs}>`"""

    name = "torch.call"

    inputs = var_operand_def(TensorType | NumberType | HandleType)
    callee = prop_def(StringAttr)
    args = prop_def(ArrayAttr)
    kwargs = opt_prop_def(DictionaryAttr)
    multi = opt_prop_def(Attribute)  # the callee returns a sequence (even of one)
    pure = opt_prop_def(UnitAttr)  # the callee is a pure function of its operands
    nograd = opt_prop_def(DenseArrayBase)  # operands eager's autograd gives no gradient
    outs = var_result_def(TensorType | NumberType | HandleType)

    traits = traits_def(PureIfMarked(), Opaque())

    def call_args(self, values: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The positional and keyword arguments of the call, given the operand values."""
        args = substitute(from_attr(self.args), values)
        kw = {} if self.kwargs is None else {
            k: substitute(from_attr(v), values) for k, v in self.kwargs.data.items()}
        return args, kw

    @classmethod
    def infer(cls, inputs: Sequence[Any], **params: Any) -> list[Attribute]:
        raise ShapeError("torch.call: result types come from the callee's meta kernel; "
                         "build it with make_call")

    def verify_(self) -> None:
        """Result types of an opaque call cannot be re-derived cheaply; check the refs."""
        n = len(self.inputs)

        def walk(v: Any) -> None:
            if isinstance(v, OperandRef) and not 0 <= v < n:
                from xdsl.utils.exceptions import VerifyException
                raise VerifyException(f"torch.call {self.callee.data}: #prims.operand<{int(v)}> "
                                      f"but only {n} operands")
            if isinstance(v, tuple):
                for x in v:
                    walk(x)
        walk(from_attr(self.args))

    def layout(self) -> tuple[int, ...] | None:
        """Per element of the sequence the callee returns, 1 for a tensor and 0 for
        ``None``; ``None`` when every element is a result (or the callee returns one)."""
        m = self.multi
        if m is None:
            return None
        v = from_attr(m)
        return None if v is True else tuple(v)

    def run(self, values: Sequence[Any], bind: Callable[[Any], Any] | None = None) -> Any:
        """Calls the callee on concrete operand values (``None`` entries of a returned
        sequence dropped, so the result has one value per op result). ``bind``: applied
        to each argument first (a symbolic program's sizes, as their values in a call)."""
        args, kw = self.call_args(values)
        if bind is not None:
            args, kw = tuple(map(bind, args)), {k: bind(v) for k, v in kw.items()}
        out = resolve_callee(self.callee.data)(*args, **kw)
        layout = self.layout()
        if layout is not None:
            return [o for o, k in zip(out, layout, strict=True) if k]
        return out


def make_call(callee: str, operands: Sequence[Any], args: Sequence[Any],
              kwargs: dict[str, Any] | None = None,
              result_types: Sequence[Attribute] | None = None,
              pure: bool = False, layout: tuple[int, ...] | bool | None = None,
              nograd: Sequence[int] = ()) -> CallOp:
    """Builds a ``torch.call``. Without ``result_types`` they (and ``layout``) come from a
    meta run (`meta_call`). ``pure``: the callee draws no random numbers, mutates nothing
    and returns fresh values, so the call may be deduplicated, dropped when unused, and
    fused around. ``layout``: the callee returns a sequence (``True``), with ``None``
    entries where the tuple has a 0 (see the module doc)."""
    if result_types is None:
        meta = meta_call(callee, operands, args, kwargs)
        result_types, layout = meta.result_types, meta.layout
    props: dict[str, Attribute] = {"callee": StringAttr(callee),
                                   "args": ArrayAttr([to_attr(a) for a in args])}
    if pure:
        props["pure"] = UnitAttr()
    if kwargs:
        props["kwargs"] = DictionaryAttr({k: to_attr(v) for k, v in kwargs.items()})
    if layout is not None and layout is not False:
        props["multi"] = to_attr(True if layout is True or all(layout) else tuple(layout))
    if nograd:
        props["nograd"] = DenseArrayBase.from_list(i64, list(nograd))
    return new_op(CallOp, list(operands), list(result_types),  # type: ignore[return-value]
                  props)


@dataclass
class MetaCall:
    """What a meta run of a torch function says about its results.

    Attributes:
        result_types: one type per tensor it returns.
        layout: ``None`` for one tensor; for a sequence, 1 per tensor and 0 per ``None``.
        requires_grad: per result, whether eager marks it as requiring grad (when asked).
        kind: the sequence's type (``tuple``, ``list`` or a ``torch.return_types`` class).
        nograd: operands that require grad but get no gradient from eager's backward.
        mutated: operands the callee writes into (``out=``, running statistics).
        views: per result, the operand it is a view of (``None``: a fresh tensor).
        strides: per result, its strides and storage offset in the meta run (eager's,
            given stand-ins with the operands' layouts).
    """

    result_types: list[Attribute]
    layout: tuple[int, ...] | None
    requires_grad: list[bool]
    kind: type
    nograd: tuple[int, ...] = ()
    mutated: tuple[int, ...] = ()
    views: tuple[int | None, ...] = ()
    strides: tuple[tuple[tuple[int, ...], int], ...] = ()

    def rebuild(self, results: Sequence[Any]) -> Any:
        """The callee's output structure with ``results`` in place of its tensors."""
        if self.layout is None:
            return results[0]
        it = iter(results)
        items = [next(it) if k else None for k in self.layout]
        if self.kind is list:
            return items
        return tuple(items) if self.kind is tuple else self.kind(items)


def meta_call(callee: str, operands: Sequence[Any], args: Sequence[Any],
              kwargs: dict[str, Any] | None = None,
              requires_grad: Sequence[bool] | None = None,
              stand_ins: Sequence[Any] | Callable[[], Sequence[Any]] | None = None,
              layouts: Sequence[Any] | None = None) -> MetaCall:
    """Runs ``callee`` on meta stand-ins of ``operands`` (SSA values; ``stand_ins``: the
    caller's, with the operands' layouts, else contiguous ones; or a function making them,
    called only where a symbolic compilation's memo has no answer, which is keyed by
    ``layouts``, the operands' strides and offsets, None for a number).

    With ``requires_grad`` (one flag per operand) the stand-ins of flagged operands
    require grad and the run records autograd in the caller's grad mode, so each result
    says whether eager would mark it as requiring grad (``torch.special.bessel_j0`` does
    not; ``torch.floor`` does; a view made under no-grad does).
    """
    dev: str | None = next(
        (v.type.dev for v in operands if isinstance(v.type, TensorType)), None)
    factory = dev is None  # (torch.rand(()): made on the meta device, so nothing is drawn
    if factory:            # or allocated while tracing; its type says the real device)
        kwargs = dict(kwargs or {})
        dev = canonical_device(kwargs.get("device") or torch.get_default_device())
        if "device" in kwargs:
            kwargs["device"] = "meta"
    props: dict[str, Attribute] = {"callee": StringAttr(callee),
                                   "args": ArrayAttr([to_attr(a) for a in args])}
    if kwargs:
        props["kwargs"] = DictionaryAttr({k: to_attr(v) for k, v in kwargs.items()})
    if callable(stand_ins):  # (made on a miss only: over symbols each costs symbolic
        assert layouts is not None  # storage arithmetic; the key reads ``layouts``)
        memo, key = _compilation_memo(callee, operands, layouts, props, requires_grad,
                                      factory, given=True)
        metas: list[Any] = []
    else:
        metas = list(stand_ins) if stand_ins is not None else [meta_value(v.type)
                                                                 for v in operands]
        memo, key = _compilation_memo(callee, operands, metas, props, requires_grad, factory)
    if key is not None:
        hit = memo.get(key)
        if hit is None:  # (the same call at another storage offset: q and k of one qkv)
            hit = memo.get(_offsets_left_out(key))
        if hit is not None:
            return hit  # type: ignore[no-any-return]
    if callable(stand_ins):
        metas = list(stand_ins())
    if symbols.current() is not None:
        unbound = unbind_call(callee, operands, args, kwargs, metas, requires_grad)
        if unbound is not None:
            return unbound
    op = CallOp.create(operands=list(operands), result_types=(), properties=props)
    if requires_grad is not None:  # run in the caller's grad mode (views under no_grad)
        metas = [m.requires_grad_() if f else m for m, f in zip(metas, requires_grad)]
    with neutral(), _WriteSpy(metas) as spy, torch.device("meta") if factory else _NO_DEVICE, \
            symbols.stand_in_mode():  # (neutral: under inference_mode views have no _base)
        out = op.run(metas)
    if isinstance(out, tuple | list):
        items, layout, kind = list(out), tuple(0 if o is None else 1 for o in out), type(out)
    else:
        items, layout, kind = [out], None, tuple
    results = [o for o in items if o is not None]
    if layout is not None and not results and items:
        raise TypeError("returned no tensors")
    rg = [isinstance(o, torch.Tensor) and o.requires_grad for o in results]
    nograd: tuple[int, ...] = ()
    if requires_grad is not None and any(rg) and torch.is_grad_enabled():
        nograd = _operands_without_gradient(metas, requires_grad,
                                            [o for o, f in zip(results, rg) if f])
    bases = {id(m): i for i, m in enumerate(metas) if isinstance(m, torch.Tensor)}
    for i, m in enumerate(metas):  # (a symbolic stand-in past offset 0 views a storage of
        if isinstance(m, torch.Tensor) and m._base is not None:  # its own: its views'
            bases.setdefault(id(m._base), i)                     # base is that one)
    views = tuple(bases.get(id(o._base)) if isinstance(o, torch.Tensor) and o._base is not None
                  else None for o in results)
    strides = tuple((tuple(o.stride()), _offset(o)) if isinstance(o, torch.Tensor)
                    else ((), 0) for o in results)
    assert dev is not None
    found = MetaCall([type_of_meta(o, dev) for o in results], layout, rg, kind, nograd,
                     tuple(sorted(spy.written)), views, strides)
    if key is not None:
        memo[key] = found
        if not any(v is not None for v in views) and not spy.written and all(
                type(off) is int and off == 0 for _, off in strides) and not any(
                o is m for o in results for m in metas):
            memo[_offsets_left_out(key)] = found
    return found


def _offsets_left_out(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A `_compilation_memo` key without its stand-ins' storage offsets: the key of an
    answer whose results were all fresh allocations (none an operand, none viewing one,
    each at offset 0), where nothing was written. An allocation's layout is computed from
    sizes and strides (TensorIterator's, ``empty_like``'s); an operand's storage offset
    reaches only results that view it, or it itself: those answers keep their offsets."""
    callee, types, layouts, *rest = key
    return ("fresh", callee, types,
            tuple(None if lay is None else (lay[0], None) for lay in layouts), *rest)


def unbind_call(callee: str, operands: Sequence[Any], args: Sequence[Any],
                kwargs: dict[str, Any] | None, metas: Sequence[Any],
                requires_grad: Sequence[bool] | None) -> MetaCall | None:
    """``unbind`` of one tensor along a dim of static size, in closed form (a symbolic
    compile's meta run goes through ``tensor_split``, slices and squeezes, deciding dozens
    of expressions: Swin's ``q, k, v = qkv.unbind(0)``): one result per index, each of the
    tensor's type without that dim, a view of it at its offset plus the index times the
    dim's stride, with its other strides; requiring grad where the tensor does (in any
    grad mode, as eager's views do). None for anything else (the meta run)."""
    if callee not in ("torch.Tensor.unbind", "torch.unbind") or len(operands) != 1 \
            or not args or not isinstance(args[0], OperandRef) or int(args[0]) != 0 \
            or len(args) > 2 or any(k != "dim" for k in kwargs or {}):
        return None
    dim = args[1] if len(args) == 2 else (kwargs or {}).get("dim", 0)
    t, m = operands[0].type, metas[0]
    if not isinstance(t, TensorType) or not isinstance(m, torch.Tensor) \
            or type(dim) is not int or not -t.rank <= dim < t.rank:
        return None
    dim %= t.rank
    n = t.sizes[dim]
    if type(n) is not int or n == 0:
        return None
    with torch._C.DisableTorchFunction():
        strides, offset = tuple(m.stride()), _offset(m)
    step = strides[dim]
    kept = (*strides[:dim], *strides[dim + 1:])
    sizes = (*t.sizes[:dim], *t.sizes[dim + 1:])
    rt = tensor_type(sizes, t.dtype, t.dev)
    rg = bool(requires_grad and requires_grad[0])  # (views keep it under no_grad too)
    return MetaCall([rt] * n, (1,) * n, [rg] * n, tuple, (), (), (0,) * n,
                    tuple((kept, offset if i == 0 else offset + i * step) for i in range(n)))


def _compilation_memo(callee: str, operands: Sequence[Any], metas: Sequence[Any],
                      props: dict[str, Attribute], requires_grad: Sequence[bool] | None,
                      factory: bool, given: bool = False) -> tuple[dict[Any, Any], Any]:
    """In a symbolic compilation, its memo of `meta_call` answers for torch's own functions
    (``torch.group_norm`` of each block of a model: a fake run decides dozens of symbolic
    expressions, and the guards the first recorded hold for the next), and this call's key
    in it: the callee, its operands' types, its stand-ins' layouts (``SymInt``s by
    expression), its other arguments, which operands require grad and every global mode
    that changes a torch call's answer (`mode_key`: grad, inference, autocast, default
    dtype and device, deterministic algorithms). Key None (no memo): a static
    compilation, a factory, a callee of user code (it may read state of its own), sizes
    over unbacked symbols, unhashable arguments. ``given``: ``metas`` are the stand-ins'
    layouts themselves (strides and offset, None for a number), not the stand-ins."""
    table = symbols.current()
    if table is None or factory or not callee.startswith("torch."):
        return {}, None
    types = tuple(v.type for v in operands)
    if any(isinstance(t, TensorType) and t.symbolic and symbols.unbacked(*t.sizes)
           for t in types):
        return {}, None

    def expr(x: Any) -> Any:
        return ("sym", x.node.expr) if isinstance(x, torch.SymInt) else x

    memo = table.__dict__.setdefault("_meta_calls", {})
    try:
        with torch._C.DisableTorchFunction():
            layouts = tuple(None if m is None else (tuple(expr(s) for s in m[0]), expr(m[1]))
                            for m in metas) if given else tuple(
                (tuple(expr(s) for s in m.stride()), expr(m.storage_offset()))
                if isinstance(m, torch.Tensor) else None for m in metas)
        kwargs = props.get("kwargs")
        key = (callee, types, layouts, props["args"],
               None if kwargs is None else tuple(sorted(kwargs.data.items())),  # type: ignore[attr-defined]
               None if requires_grad is None else tuple(requires_grad),
               mode_key())
        hash(key)
    except (TypeError, RuntimeError):
        return memo, None
    return memo, key


_NO_DEVICE = contextlib.nullcontext()


class _WriteSpy(TorchDispatchMode):
    """Watches a meta run for ATen ops that write into one of the call's operands (an
    ``out=`` tensor, ``batch_norm``'s running statistics): schemas mark such arguments
    ``Tensor(a!)``; ``native_batch_norm`` writes its statistics without saying so."""

    def __init__(self, metas: Sequence[Any]) -> None:
        super().__init__()
        self.ids = {id(m): i for i, m in enumerate(metas) if isinstance(m, torch.Tensor)}
        self.written: set[int] = set()

    def _saw(self, v: Any) -> None:
        if isinstance(v, torch.Tensor):
            i = self.ids.get(id(v._base if v._base is not None else v))
            if i is not None:
                self.written.add(i)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        kwargs = kwargs or {}
        for a, v in zip(func._schema.arguments, args):
            if a.alias_info is not None and a.alias_info.is_write:
                self._saw(v)
        for a in func._schema.arguments:
            if a.name in kwargs and a.alias_info is not None and a.alias_info.is_write:
                self._saw(kwargs[a.name])
        if func in _WRITES_STATISTICS and len(args) > 5 and args[5]:  # training=True
            self._saw(args[3])
            self._saw(args[4])
        return func(*args, **kwargs)


_WRITES_STATISTICS = {torch.ops.aten.native_batch_norm.default}


def _operands_without_gradient(metas: Sequence[Any], requires_grad: Sequence[bool],
                               outs: Sequence[torch.Tensor]) -> tuple[int, ...]:
    """Operands (among the flagged) whose gradient eager's backward leaves undefined: one
    meta backward from every result that requires grad. ``()`` if it cannot run."""
    from thunder_ir.dialects.symbols import current

    pos = [i for i, f in enumerate(requires_grad) if f]
    table = current()  # over symbolic sizes: the probe's decisions are no guards (an
    # ``as_strided`` backward sizes its storage: ``Eq(Max(...), 1024)`` fixed the length)
    quiet = table.env.suppress_guards() if table is not None else contextlib.nullcontext()
    try:
        with quiet:
            grads = torch.autograd.grad(list(outs), [metas[i] for i in pos],
                                        [torch.ones_like(o) for o in outs], allow_unused=True)
    except Exception:  # a backward without meta kernels: assume every gradient is defined
        return ()
    return tuple(i for i, g in zip(pos, grads) if g is None)


def _offset(t: torch.Tensor) -> Any:
    """A meta result's storage offset: an int, or a ``SymInt`` kept as it is (``int()``
    would record a guard, and refuse an unbacked one: ``torch.where(mask)``'s second
    index starts ``u0`` elements into ``nonzero``'s result)."""
    off = t.storage_offset()
    return off if isinstance(off, torch.SymInt) else int(off)


def meta_value(t: Attribute) -> Any:
    """A stand-in value of a type for a meta run: a meta tensor or a sample number."""
    if isinstance(t, TensorType):
        table = symbols.current()
        if table is not None:  # a symbolic compilation: a fake tensor of its ShapeEnv
            return table.meta(t.sizes, t.dtype)
        return torch.empty(t.sizes, dtype=t.dtype, device="meta")
    if isinstance(t, NumberType):
        return t.python_type(1)
    raise TypeError(f"no meta value for {pretty_type(t)}")


def type_of_meta(v: Any, device: str) -> Attribute:
    """The type of a meta-run result, placed on ``device``."""
    from thunder_ir.dialects.types import number_type, tensor_type

    if isinstance(v, torch.Tensor):
        return tensor_type(tuple(v.shape), v.dtype, device) if v.device.type == "meta" \
            else type_of_tensor(v)
    if type(v) in (bool, int, float):
        return number_type(type(v))
    raise TypeError(f"unsupported result {type(v).__name__} from a meta run")


OUTPUT_STRIDES = "torch.output_strides"
"""The forward function's attribute: eager's strides of the user's results."""


@irdl_attr_definition
class OutputStridesAttr(ParametrizedAttribute):
    """``#torch.output_strides<[[8, 1], none]>``: per program output, the strides eager
    gives the user's result it is (``none``: not a tensor, or nothing to say). Tracing
    records it on ``@forward`` (eager's layout of each result, a meta run says it);
    ``restride-outputs`` reads it."""

    name = "torch.output_strides"

    strides: ArrayAttr[Attribute]

    @staticmethod
    def make(strides: Sequence[Sequence[int] | None]) -> OutputStridesAttr:
        return OutputStridesAttr(ArrayAttr([
            NoneAttr() if s is None else ArrayAttr([_stride_attr(x) for x in s])
            for s in strides]))

    def values(self) -> list[tuple[int, ...] | None]:
        """The strides per output, as Python values (a symbolic one: `from_attr`'s)."""
        return [None if isinstance(a, NoneAttr) else tuple(
            x.data if isinstance(x, IntAttr) else from_attr(x) for x in a.data)  # type: ignore[attr-defined]
                for a in self.strides.data]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<[" + ", ".join(
            "none" if s is None else "[" + ", ".join(map(str, s)) + "]"
            for s in self.values()) + "]>")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        def one() -> Attribute:
            if parser.parse_optional_keyword("none") is not None:
                return NoneAttr()
            return ArrayAttr(parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE, lambda: IntAttr(parser.parse_integer())))

        with parser.in_angle_brackets():
            items = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, one)
        return (ArrayAttr(items),)


def _stride_attr(x: Any) -> Attribute:
    """A stride: an int, or a symbolic one's text (``#prims.sym``)."""
    if type(x) is int:
        return IntAttr(x)
    a = to_attr(x)
    return IntAttr(a.value.data) if isinstance(a, IntegerAttr) else a


SYMBOL_ARGS = "torch.symbol_args"
"""The forward function's attribute: a symbolic ``int`` argument's symbol -> the index of
the function argument it is (`thunder_ir.dialects.symbols`): the generated code binds the
symbol from it."""


def set_symbol_args(fn: Operation, args: dict[str, int]) -> None:
    """Records which of ``fn``'s arguments are symbolic ``int``s (see `SYMBOL_ARGS`)."""
    fn.attributes[SYMBOL_ARGS] = DictionaryAttr({k: IntAttr(i) for k, i in args.items()})


def symbol_args(fn: Operation) -> dict[str, int]:
    """``fn``'s symbolic ``int`` arguments (symbol -> argument index)."""
    a = fn.attributes.get(SYMBOL_ARGS)
    return {k: v.data for k, v in a.data.items()} if isinstance(a, DictionaryAttr) else {}  # type: ignore[attr-defined]


WRITTEN_OUTPUTS = "torch.written_outputs"
"""The forward function's attribute: the user's results that stand for memory an in-place
write changed (``y[0] = 1; return y``). The program computes such a value out of place (a
``cat``, a scatter), laid out as that op lays it out, not as the written tensor is:
`restride-outputs` gives them eager's strides whoever computes them."""


def set_written_outputs(fn: Operation, outputs: Sequence[int]) -> None:
    """Records which of ``fn``'s results in-place writes made (see `WRITTEN_OUTPUTS`)."""
    fn.attributes[WRITTEN_OUTPUTS] = DenseArrayBase.from_list(i64, list(outputs))


def written_outputs(fn: Operation) -> frozenset[int]:
    """``fn``'s results that in-place writes made (`WRITTEN_OUTPUTS`)."""
    attr = fn.attributes.get(WRITTEN_OUTPUTS)
    return frozenset(attr.get_values()) if isinstance(attr, DenseArrayBase) else frozenset()


def set_output_strides(fn: Operation, strides: Sequence[Sequence[int] | None]) -> None:
    """Records eager's strides of ``fn``'s results (see `OutputStridesAttr`)."""
    fn.attributes[OUTPUT_STRIDES] = OutputStridesAttr.make(strides)


def output_strides(fn: Operation) -> list[tuple[int, ...] | None] | None:
    """Eager's strides of ``fn``'s results, if tracing recorded them."""
    attr = fn.attributes.get(OUTPUT_STRIDES)
    return attr.values() if isinstance(attr, OutputStridesAttr) else None


Torch = Dialect("torch", [CallOp], [OutputStridesAttr])

__all__ = ["CHECKING_CALLEES", "OUTPUT_STRIDES", "PURE_CALLEES", "RUNTIME_NAMESPACE",
           "WRITTEN_OUTPUTS", "CallOp",
           "MetaCall", "OutputStridesAttr", "Torch", "make_call", "meta_call", "meta_value",
           "name_callee",
           "output_strides", "resolve_callee", "runtime_callee", "set_output_strides",
           "set_written_outputs", "substitute", "type_of_meta", "written_outputs"]
