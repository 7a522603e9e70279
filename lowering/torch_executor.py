"""The torch executor: it claims ltorch ops it runs directly and lowers ops to torch calls.

* Claiming (the ``claim`` pass, `thunder_ir.passes.claim`) marks (``#fusion.executor<"torch">``)
  the ltorch ops this executor implements with one torch call, so ``decompose-ltorch``
  leaves them whole. Without fusion, one eager kernel (``F.softmax``) beats the five prims
  it decomposes into, so by default the torch executor claims every ltorch op it has a
  direct implementation for; ``claims`` narrows it.
* ``lower-to-torch`` rewrites each remaining ``ltorch``/``prims`` op into a ``torch.call``:
  the op's torch function when its reference *is* that call (``torch.exp(t0)``,
  ``torch.nn.functional.linear(x, w, None)``), else the op's Python call
  (`thunder_ir.dialects.base.ThunderOp.python_call`, what the op namespaces and the
  interpreter call too), registered in the generated-code namespace as ``<dialect>_<op>``
  (``tir.prims_sum``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from thunder_ir.dialects.base import OperandRef, ThunderOp, to_attr
from thunder_ir.dialects.construct import new_op
from thunder_ir.dialects.fusion import RegionOp
from thunder_ir.dialects.prims import ConstantOp, FullOp, IndexAddOp
from thunder_ir.dialects.torch import CallOp, make_call, torch_name
from thunder_ir.lowering.executors import Executor
from thunder_ir.passes.claim import ClaimPass  # noqa: F401  (its home before passes/claim.py)
from thunder_ir.passes.rewrite import replace_each
from thunder_ir.runtime import namespace
from thunder_ir.runtime.namespace import helper_name, is_dialect_helper, wrapper_name

_CALLEES: dict[type, str] = {}


def python_callee(cls: type[ThunderOp]) -> str:
    """The callee path of ``cls.python_call()``: for the op's torch function itself, its
    own path (`torch_callee`); else the op's entry in the generated-code namespace,
    registered on first use (``tir.prims_sum`` in generated code)."""
    path = _CALLEES.get(cls)
    if path is None:
        fn = cls.python_call()
        torch_fn = getattr(cls, "TORCH_FN", None)
        path = torch_callee(fn) if torch_fn is not None and fn is torch_fn else \
            namespace.register(wrapper_name(cls), fn)
        _CALLEES[cls] = path
    return path


def torch_callee(fn: Callable[..., Any]) -> str:
    """The callee path of a direct call of an op's torch function: its import path, or for
    a helper of thunder_ir's dialects, its path in the generated-code namespace."""
    if is_dialect_helper(fn):
        return namespace.register(helper_name(fn), fn)
    return torch_name(fn)


def _definer(cls: type, attr: str) -> type:
    return next(c for c in cls.__mro__ if attr in c.__dict__)


_DIRECT_FAMILY: dict[type, bool] = {}


def direct_call(op: ThunderOp, args: list[Any], params: dict[str, Any]
                ) -> tuple[list[Any], dict[str, Any]] | None:
    """The direct torch call ``op``'s reference makes, as (args, kwargs), or None.

    Each family says it beside its `ref` (``ThunderOp.torch_call``). A class whose `ref` is
    defined below the family that answers (a leaf with a reference of its own) is called
    through `python_callee` instead.
    """
    cls = type(op)
    if getattr(cls, "TORCH_FN", None) is None:
        return None
    ok = _DIRECT_FAMILY.get(cls)
    if ok is None:
        ok = _DIRECT_FAMILY[cls] = issubclass(_definer(cls, "torch_call"), _definer(cls, "ref"))
    if not ok:
        return None
    return cls.torch_call(op, args, params)


def lower_op(op: ThunderOp) -> CallOp:
    """The ``torch.call`` that computes ``op``."""
    args: list[Any] = []
    flat = list(op.operands)
    i = 0
    variadic_start = 0
    for g in op.grouped_operands():
        if g is None:
            args.append(None)
        elif isinstance(g, list):
            variadic_start = i
            args.append(tuple(OperandRef(i + k) for k in range(len(g))))
            i += len(g)
        else:
            args.append(OperandRef(i))
            i += 1
    # Inside an op's params an OperandRef counts within its variadic operand group (getitem's
    # tensor indices); inside torch.call it counts among all operands.
    params = {k: _shift_refs(v, variadic_start) for k, v in op.params().items()}
    direct = direct_call(op, args, params)
    if direct is not None:
        callee = torch_callee(type(op).TORCH_FN)  # type: ignore[attr-defined]
        args, params = direct
        defaults = getattr(type(op), "DEFAULTS", {})
        # Defaults are left out, except dim=None next to keepdim (sum(x, None, keepdim=True)
        # is valid, sum(x, keepdim=True) is not).
        params = {k: v for k, v in params.items()
                  if not (k in defaults and type(defaults[k]) is type(v) and defaults[k] == v)
                  or (k == "dim" and params.get("keepdim"))}
    else:
        callee = python_callee(type(op))
    call = make_call(callee, flat, args, params, result_types=[r.type for r in op.results])
    if _returns_sequence(type(op)):
        call.properties["multi"] = to_attr(True)
    call.location = op.location
    return call


def _returns_sequence(cls: type[ThunderOp]) -> bool:
    """True for ops with a variadic result (their callee returns a sequence)."""
    from xdsl.irdl import VariadicDef

    return any(isinstance(d, VariadicDef) for _, d in cls.get_irdl_definition().results)


def _shift_refs(v: Any, offset: int) -> Any:
    if isinstance(v, OperandRef):
        return OperandRef(v + offset)
    if isinstance(v, tuple):
        return tuple(_shift_refs(x, offset) for x in v)
    return v


class TorchExecutor(Executor):
    """The executor that runs everything through eager torch calls.

    Args:
        claims: narrows which ltorch ops it claims whole (default: every op with a
            torch function); unclaimed ops are decomposed into prims first.
    """

    name = "torch"
    version = "torch"

    def __init__(self, claims: Callable[[ThunderOp], bool] | None = None) -> None:
        self.claims = claims

    def can_claim(self, op: ThunderOp) -> bool:
        """True for ltorch ops this executor runs with one torch call: those with a torch
        function, unless the op says it does not run whole here (``runs_whole()``: a
        quantized linear on a device without its kernel decomposes for the fusion
        executors)."""
        if self.claims is not None:
            return self.claims(op)
        if getattr(type(op), "TORCH_FN", None) is None:
            return False
        runs_whole = getattr(op, "runs_whole", None)
        return runs_whole is None or bool(runs_whole())


class _Lower(RewritePattern):
    """Rewrites an ltorch/prims op into the ``torch.call`` that computes it.

    Ops alike lower alike: `lower_op` reads only an op's class, properties and operand
    types, so the call's properties are kept per such key for the rest of the pass
    (the layers of a model repeat their ops; a hit costs a hash and `new_op`)."""

    def __init__(self) -> None:
        self.calls: dict[Any, dict[str, Attribute]] = {}

    def lowered(self, op: Operation) -> CallOp | None:
        """The call that replaces ``op``, or None for an op that stays."""
        if not isinstance(op, ThunderOp) or isinstance(op, CallOp | ConstantOp):
            return None
        if isinstance(op.parent_op(), RegionOp):
            return None  # a fusion region's body: its executor compiles it
        if getattr(type(op), "EXECUTABLE", False):
            return None  # generated code calls it through its namespace (extension operators)
        call = _into_fresh(op)
        if call is not None:
            return call
        try:
            key: Any = (type(op), tuple(op.properties.items()),
                        tuple([v.type for v in op.operands]))
            props = self.calls.get(key)
        except TypeError:  # an unhashable attribute: no reuse
            key, props = None, None
        if props is None:
            call = lower_op(op)
            if key is not None:
                self.calls[key] = dict(call.properties)
            return call
        made = new_op(CallOp, list(op.operands), [r.type for r in op.results], dict(props))
        made.location = op.location
        return cast(CallOp, made)

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        call = self.lowered(op)
        if call is not None:
            rewriter.replace(op, [call], list(call.results))


def index_add_into(x: torch.Tensor, index: torch.Tensor, source: torch.Tensor,
                   dim: int) -> torch.Tensor:
    """``prims.index_add`` into a buffer no one else reads (see `_into_fresh`)."""
    return x.index_add_(dim, index, source)


INDEX_ADD_INTO = namespace.register("index_add_into", index_add_into)


def _into_fresh(op: ThunderOp) -> CallOp | None:
    """An out-of-place ``prims.index_add`` whose target is a fresh ``prims.full`` read by
    nothing else updates that buffer in place: eager's embedding backward (zeros, then
    ``index_add_``), without copying the zeros first."""
    if not isinstance(op, IndexAddOp):
        return None
    target = op.operands[0]
    owner = target.owner
    fresh = isinstance(owner, FullOp) or (
        isinstance(owner, CallOp) and owner.callee.data == python_callee(FullOp))
    if not fresh or not target.has_one_use():
        return None
    call = make_call(INDEX_ADD_INTO, list(op.operands),
                     [OperandRef(0), OperandRef(1), OperandRef(2)], {"dim": op.params()["dim"]},
                     result_types=[op.results[0].type])
    call.location = op.location
    return call


@dataclass(frozen=True)  # registered by name in `thunder_ir.lowering.pass_names`
class LowerToTorchPass(ModulePass):
    """Every ltorch/prims op becomes the ``torch.call`` that computes it."""

    name = "lower-to-torch"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        replace_each(op, _Lower().lowered)
