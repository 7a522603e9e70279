"""The VJP rule tables: how each op's cotangents flow back to its operands.

A rule is registered per op class with ``@vjp(OpClass)``::

    @vjp(prims.ExpOp)
    def exp_vjp(g: Grad, out: list[SSAValue], ct: list[SSAValue | None], x):
        return [g.prims.mul(ct[0], out[0])]

It receives the builder ``g`` (``g.prims.<op>`` and ``g.ltorch.<op>`` build ops in the
backward program), the op's results ``out``, their cotangents ``ct`` (``None`` where a
result does not reach the loss; never all ``None``), then the op's operands grouped as in
its definition and its params as keywords. It returns one entry per operand group: the
cotangent of that operand (same type as the operand), ``None`` (no gradient: a number, an
int or bool tensor, an index), or a list for a variadic group.

Ops that have no derivative (comparisons, integer ops, RNG…) carry the
`thunder_ir.dialects.traits.NoDerivative` trait, declared on the op. A coverage test
keeps every prim either in the rule table or carrying the trait.
Rule modules register on import; `load_vjp_rules` imports them all from one place.

Like JAX's ``ad.primitive_transposes`` and tinygrad's gradient table (STYLE.md), rules are
small functions next to their siblings, in dialect order.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any

from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects.base import Emitter, OpNamespace, ThunderOp
from thunder_ir.dialects.dist import PendingType
from thunder_ir.dialects.symbols import same_sizes
from thunder_ir.dialects.tables import RuleTable, is_builtin
from thunder_ir.dialects.torch import runtime_callee
from thunder_ir.dialects.traits import has_no_derivative
from thunder_ir.dialects.types import TensorType, ttype
from thunder_ir.passes.context import overlays

VjpRule = Callable[..., list[Any]]
VJP_RULES: RuleTable[type[ThunderOp], VjpRule] = RuleTable("VJP rule")
"""Op class -> rule (`thunder_ir.dialects.tables.RuleTable`: built-in rules frozen)."""


def vjp(op: type[ThunderOp], *, replace: bool = False) -> Callable[[VjpRule], VjpRule]:
    """Registers ``fn`` as the VJP rule of ``op`` (a built-in rule where ``fn`` is
    thunder_ir's, else an addition; ``replace``: an addition replacing an addition)."""

    def wrap(fn: VjpRule) -> VjpRule:
        VJP_RULES.register(op, fn, builtin=is_builtin(fn), replace=replace)
        return fn

    return wrap


class Grad:
    """What a VJP rule builds with: ``g.prims.<op>(...)``, ``g.ltorch.<op>(...)``."""

    def __init__(self, emitter: Emitter) -> None:
        from thunder_ir.dialects import ltorch, prims

        self.emitter = emitter
        self.prims: OpNamespace = emitter.ns(prims.OPS)
        self.ltorch: OpNamespace = emitter.ns(ltorch.OPS)
        self.forward_inserted = 0
        self.replaced: dict[SSAValue, SSAValue] = {}
        self.active: Callable[[SSAValue], bool] = _always
        """Whether a forward value needs a gradient (depends on an input that requires
        grad); rules of opaque ops ask it so as to differentiate only what they must."""

    def in_forward(self, before: Operation) -> Grad:
        """A builder whose ops go into the forward, just before the forward op ``before``
        (with its source location): for a rule that computes its op's results itself, in
        steps whose intermediates its backward reads. Finish with `replace_forward`."""
        block = before.parent_block()
        assert block is not None

        def insert(op: Operation) -> None:
            block.insert_op_before(op, before)
            self.forward_inserted += 1

        fwd = Grad(Emitter(insert))
        fwd.emitter.loc = before.location
        return fwd

    def replace_forward(self, old: Operation, new: Operation | None,
                        results: Sequence[SSAValue], erase: bool = False) -> None:
        """Changes what the forward computes: puts ``new`` (if any: ops built with
        `in_forward` are in place already) just before the forward op ``old`` and sends
        every use of ``old``'s results to ``results`` (program outputs too). For a rule
        whose backward wants more than the forward op gives, such as attention's
        log-sum-exp. ``old`` is left dead for DCE, or erased (``erase``: an op with
        effects, which DCE keeps, must not run twice)."""
        block = old.parent_block()
        assert block is not None
        if new is not None:
            block.insert_op_before(new, old)
            self.forward_inserted += 1
        for o, n in zip(old.results, results, strict=True):
            o.replace_all_uses_with(n)
            self.replaced[o] = n
        if erase:
            block.erase_op(old)
            self.forward_inserted -= 1

    def const(self, value: Any) -> SSAValue:
        """A Python number as an SSA value."""
        return self.prims.constant(value=value)

    def sum_to(self, v: SSAValue, shape: tuple[int, ...]) -> SSAValue:
        """Sums a broadcast cotangent back to ``shape`` (numpy broadcasting rules)."""
        t = v.type
        assert isinstance(t, TensorType)
        if same_sizes(t.sizes, shape):
            return v
        lead = t.rank - len(shape)
        dims = list(range(lead)) + [lead + i for i, s in enumerate(shape)
                                    if s == 1 and t.sizes[lead + i] != 1]
        out = self.prims.sum(v, dims=dims) if dims else v
        if not same_sizes(ttype(out).sizes, shape):
            out = self.prims.reshape(out, shape=tuple(shape))
        return out


def _always(v: SSAValue) -> bool:
    return True


class Cotangents(dict[SSAValue, SSAValue]):
    """Cotangents of values during reverse mode; a second contribution is summed in."""

    def __init__(self, g: Grad) -> None:
        super().__init__()
        self.g = g

    def accumulate(self, v: SSAValue, ct: SSAValue) -> None:
        prev = self.get(v)
        self[v] = ct if prev is None else self.g.prims.add(prev, ct)


def backpropagate(g: Grad, op: Operation, rule: VjpRule, cts: Cotangents,
                  wants: Callable[[SSAValue], bool],
                  saved_as: Mapping[SSAValue, SSAValue] | None = None) -> None:
    """One reverse-mode step: runs ``rule`` on the cotangents of ``op``'s results and adds
    each operand's cotangent to ``cts`` where ``wants(operand)``. ``saved_as``: operands
    the rule reads as other values (``autograd.saved_as``: what eager's backward finds in
    the saved tensor's memory then), their cotangents still the operands'."""
    if isinstance(op, ThunderOp):
        grouped: list[Any] = op.grouped_operands()
        params = op.params()
    else:
        grouped, params = list(op.operands), {}
    read = grouped
    if saved_as:
        read = [[saved_as.get(v, v) for v in vs] if isinstance(vs, list)
                else saved_as.get(vs, vs) if vs is not None else None for vs in grouped]
    grads = rule(g, list(op.results), [cts.get(r) for r in op.results], *read, **params)
    for vals, grs in zip(grouped, grads):
        if vals is None or grs is None:
            continue
        vs = vals if isinstance(vals, list) else [vals]
        gs = grs if isinstance(grs, list) else [grs]
        for v, gv in zip(vs, gs):
            if gv is not None and wants(v):
                cts.accumulate(v, gv)


RAISE = runtime_callee("no_derivative")
"""The callee of a backward that raises eager's error (`raising_rule`)."""


def raising_rule(message: str) -> VjpRule:
    """A rule whose backward raises ``RuntimeError(message)`` when a gradient reaches the
    op, as eager's does there (a derivative eager does not implement; a saved tensor
    written in place afterwards). Elsewhere the program runs as usual."""

    def rule(g: Grad, out: list[SSAValue], ct: list[SSAValue | None], *grouped: Any,
             **params: Any) -> list[Any]:
        from thunder_ir.dialects.base import OperandRef
        from thunder_ir.dialects.torch import make_call

        flat = [v for gr in grouped for v in (gr if isinstance(gr, list) else [gr])
                if v is not None]
        diff = [v for v in flat if is_differentiable_value(v) and g.active(v)]
        cts = [c for c in ct if c is not None]
        call = make_call(RAISE, cts, [message, *(OperandRef(i) for i in range(len(cts)))],
                         result_types=[v.type for v in diff],
                         layout=True if len(diff) > 1 else None)
        g.emitter.insert(call)
        grads = dict(zip(diff, call.results))
        return [[grads.get(v) for v in gr] if isinstance(gr, list) else
                (None if gr is None else grads.get(gr)) for gr in grouped]

    return rule


def is_differentiable_value(v: SSAValue) -> bool:
    """Floating-point and complex tensors carry gradients (and a started collective of
    one, ``!dist.pending``, whose cotangent is its tensor's); numbers, ints and bools do
    not."""
    t = v.type
    if isinstance(t, PendingType):
        t = t.tensor
    return isinstance(t, TensorType) and (t.dtype.is_floating_point or t.dtype.is_complex)


def load_vjp_rules() -> Mapping[type[ThunderOp], VjpRule]:
    """Imports every VJP rule module (registering its rules) and returns the rules this
    thread's compilation uses: its context's own
    (`thunder_ir.passes.context.CompileContext.vjp_rules`) ahead of the built-in table."""
    import thunder_ir.passes.quant_rules
    import thunder_ir.passes.vjp_autograd
    import thunder_ir.passes.vjp_dist
    import thunder_ir.passes.vjp_ltorch
    import thunder_ir.passes.vjp_ltorch_core
    import thunder_ir.passes.vjp_prims  # noqa: F401

    own = overlays()[1]
    return VJP_RULES if not own else ChainMap(dict(own), VJP_RULES)


def direct_rules(*modules: ModuleType) -> tuple[type[ThunderOp], ...]:
    """The ltorch ops whose VJP rule one of ``modules`` defines (rules registered there:
    the table itself says which ops autodiff differentiates whole rather than decomposed;
    no list is kept by hand beside it), in the dialect's order."""
    from thunder_ir.dialects.ltorch_base import LTORCH

    names = {m.__name__ for m in modules}
    rules = load_vjp_rules()
    return tuple(op for op in LTORCH
                 if op in rules and getattr(rules[op], "__module__", None) in names)


def missing_rules(ops: Iterable[type[ThunderOp]]) -> list[str]:
    """Ops with neither a VJP rule nor the `NoDerivative` trait."""
    load_vjp_rules()
    return sorted(o.name for o in ops if o not in VJP_RULES and not has_no_derivative(o))
