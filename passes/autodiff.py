"""Autodiff: a joint forward/backward program from VJP rules, then a forward/backward split.

Why: thunder_ir computes the backward itself, as IR, so that the same passes (claiming,
decomposition, fusion, remat) work on it, and so the user sees it in
``last_backward_traces``.

Steps (each a function here; `thunder_ir.api` records a trace after each):

1. `decompose_for_grad`: ltorch ops without a direct VJP rule are decomposed into prims,
   which all have rules (or are declared not differentiable).
2. `build_joint`: the forward ops are copied into a new program whose extra arguments are
   the cotangents of the differentiable outputs. Walking the forward ops in reverse, each
   op's rule adds backward ops; cotangents of values used several times are summed. The
   joint program returns the outputs and the gradients of the inputs that require grad.
3. `split`: the joint program becomes an augmented forward (outputs + residuals) and a
   backward (residuals + cotangents -> gradients). Which forward values become residuals
   and which are recomputed in the backward is the remat pass's decision
   (`thunder_ir.passes.remat`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.traits import is_side_effect_free
from xdsl.utils.arg_spec import ArgSpec

from thunder_ir.dialects.autograd import (
    LAYOUT,
    BackwardLayoutAttr,
    FunctionOp,
    JointLayoutAttr,
    SavedAsOp,
    StopGradientOp,
)
from thunder_ir.dialects.base import Emitter
from thunder_ir.dialects.location import location_text
from thunder_ir.dialects.prims import ConstantOp
from thunder_ir.dialects.program import BACKWARD, FORWARD, Program, main_function
from thunder_ir.dialects.symbols import SYMBOL_NAME, SymExprAttr, sym_exprs
from thunder_ir.dialects.torch import (
    OUTPUT_STRIDES,
    SYMBOL_ARGS,
    WRITTEN_OUTPUTS,
    CallOp,
    set_symbol_args,
    symbol_args,
)
from thunder_ir.dialects.traits import has_no_derivative
from thunder_ir.dialects.types import TensorType, number_type
from thunder_ir.passes.change import ReportsChange
from thunder_ir.passes.context import VjpLookup, resolve, spec_with_names, vjp_overrides
from thunder_ir.passes.decompositions import decompose_op, load_rules
from thunder_ir.passes.snapshot import clone_op
from thunder_ir.passes.strip_autograd import strip_autograd
from thunder_ir.passes.vjp import (
    Cotangents,
    Grad,
    backpropagate,
    is_differentiable_value,
    load_vjp_rules,
    raising_rule,
)


class AutodiffError(RuntimeError):
    """An op on the path from an input that requires grad to an output has no VJP rule."""


# --------------------------------------------------------------------------- 1. decompose


class _DecomposeWithoutRule(RewritePattern):
    def __init__(self, overriding: Sequence[VjpLookup] = ()) -> None:
        self.rules = load_rules()
        self.vjps = load_vjp_rules()
        self.overriding = overriding

    def wants(self, op: Operation) -> bool:
        """Whether ``op`` is an ltorch op to decompose: no VJP rule, a decomposition."""
        from thunder_ir.dialects.ltorch_base import LtorchOp

        if not isinstance(op, LtorchOp) or type(op) in self.vjps or type(op) not in self.rules:
            return False
        if "saved_modified" in op.attributes or "saved_as" in op.attributes:
            return False  # its backward raises, or reads a later value: keep it whole
        if has_no_derivative(op):
            return False
        # (an executor in use may differentiate it whole)
        return not any(lookup(op) is not None for lookup in self.overriding)

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not self.wants(op):
            return
        emitter = Emitter()
        emitter.loc = op.location
        out = decompose_op(op, emitter)
        rewriter.replace(op, emitter.ops, out if isinstance(out, list) else [out])


def decompose_for_grad(module: ModuleOp, overriding: Sequence[VjpLookup] = ()) -> bool:
    """Decomposes the ltorch ops that have no direct VJP rule into prims (neither in the
    VJP table nor from one of the ``overriding`` executor lookups); False if there were
    none (the common case: one look at each op, without xDSL's walker)."""
    pattern = _DecomposeWithoutRule(overriding)
    if not any(pattern.wants(op) for op in module.walk()):
        return False
    PatternRewriteWalker(GreedyRewritePatternApplier([pattern], dce_enabled=False),
                         apply_recursively=False).rewrite_module(module)
    return True


# --------------------------------------------------------------------------- 2. joint


@dataclass
class Joint:
    """The joint program and where its parts are.

    Attributes:
        module: ``joint(inputs..., cotangents...) -> (outputs..., grads...)``.
        n_inputs: how many forward inputs lead the argument list.
        n_outputs: how many forward outputs lead the result list.
        n_forward_ops: the first ``n_forward_ops`` ops of the body are the forward.
        grad_inputs: forward input positions whose gradients are returned, in order: the
            inputs that require grad and that some differentiable output depends on (eager
            leaves the others' gradients ``None``).
        ct_outputs: forward output positions that take a cotangent, in order.
        reaches: per grad input, the positions in ``ct_outputs`` of the outputs that depend
            on it (a gradient is ``None`` when none of them gets one).
    """

    module: ModuleOp
    n_inputs: int
    n_outputs: int
    n_forward_ops: int
    grad_inputs: list[int]
    ct_outputs: list[int]
    reaches: list[tuple[int, ...]] = field(default_factory=list)


def _saved_as(ops: Sequence[Operation]) -> dict[Operation, dict[SSAValue, SSAValue]]:
    """Per op, the values its backward reads in place of its operands
    (``autograd.saved_as``, a later note for the same saved tensor winning: written twice
    through ``.data``); the notes are erased."""
    out: dict[Operation, dict[SSAValue, SSAValue]] = {}
    for op in ops:
        if isinstance(op, SavedAsOp):
            made = op.made.owner
            if isinstance(made, Operation):
                seen = out.setdefault(made, {})
                for k, v in seen.items():  # x -> x1 and now x1 -> x2: x -> x2
                    if v is op.saved:
                        seen[k] = op.now
                seen.setdefault(op.saved, op.now)
            op.detach()
            op.erase()
    return out


def _active(fn_ops: Sequence[Operation], sources: Sequence[SSAValue]) -> dict[SSAValue, int]:
    """Values that require grad: those computed from a source by ops that carry gradients,
    each with the set of sources its gradient reaches (bit ``k`` for ``sources[k]``; it can
    be empty where eager's gradient is undefined). An op's ``NO_GRAD_RESULTS`` (positions)
    never require grad, as eager's (layer norm's statistics)."""
    active = {v: 1 << k for k, v in enumerate(sources)}
    for op in fn_ops:
        if has_no_derivative(op) or not any(o in active for o in op.operands):
            continue
        deps = 0
        for o in _gradient_operands(op):
            deps |= active.get(o, 0)
        no_grad = getattr(op, "NO_GRAD_RESULTS", ())
        for i, r in enumerate(op.results):
            if is_differentiable_value(r) and i not in no_grad:
                active[r] = deps
    return active


def _gradient_operands(op: Operation) -> Sequence[SSAValue]:
    """The operands an op's gradient reaches. Most ops: all. An opaque call whose operand
    eager leaves without a gradient (``nograd``), or an ``autograd.function`` whose backward
    gives some primals none (``grad_mask``): their results still require grad, but do not
    depend on those operands' sources."""
    if isinstance(op, CallOp) and op.nograd:
        skip = op.nograd.get_values()
        return [o for i, o in enumerate(op.operands) if i not in skip]
    if isinstance(op, FunctionOp):
        primals = op.primals
        return [primals[i] for i in op.grad_mask.get_values()]
    return op.operands


def build_joint(module: ModuleOp, requires_grad: Sequence[bool],
                overriding: Sequence[VjpLookup] = ()) -> Joint:
    """Builds the joint forward/backward program (see the module doc).

    ``overriding``: the executors' own VJP lookups, in priority order
    (`thunder_ir.passes.context.vjp_overrides`); the first rule one returns for an op replaces the
    VJP table's.

    The forward's ops move into the joint: ``module``'s function is left with its return
    only (``autodiff`` replaces it by the joint).
    """
    rules = load_vjp_rules()
    fwd = main_function(module)
    block = fwd.body.block
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    ops = [op for op in block.ops if op is not ret]
    sources = [a for a, rg in zip(block.args, requires_grad) if rg and is_differentiable_value(a)]
    active = _active(ops, sources)
    outs = list(ret.operands)
    ct_outputs = [i for i, o in enumerate(outs) if o in active]
    source_pos = {a: k for k, a in enumerate(sources)}
    reached = 0
    for i in ct_outputs:
        reached |= active[outs[i]]
    grad_inputs = [i for i, a in enumerate(block.args)
                   if a in source_pos and reached >> source_pos[a] & 1]
    reaches = [tuple(k for k, i in enumerate(ct_outputs)
                     if active[outs[i]] >> source_pos[block.args[j]] & 1) for j in grad_inputs]

    arg_types = [a.type for a in block.args] + [outs[i].type for i in ct_outputs]
    names = [a.name_hint for a in block.args] + [f"ct_{i}" for i in range(len(ct_outputs))]
    prog = Program("joint", arg_types, names)
    vm: dict[SSAValue, SSAValue] = dict(zip(block.args, prog.args))  # the rest: themselves
    for op in ops:
        op.detach()
        prog.block.add_op(op)
    for a in block.args:
        a.replace_all_uses_with(vm[a])
    saved_as = _saved_as(ops)
    ops = [op for op in ops if op.parent is not None]
    n_forward_ops = len(ops)
    g = Grad(prog.emitter)

    cts = Cotangents(g)
    for k, i in enumerate(ct_outputs):
        cts.accumulate(vm.get(outs[i], outs[i]), prog.args[len(block.args) + k])
    active_new = {vm.get(v, v) for v in active}
    g.active = active_new.__contains__
    for op in reversed(ops):
        if not op.results or not any(r in cts for r in op.results):
            continue
        if not any(o in active_new for o in op.operands):
            continue
        modified = op.attributes.get("saved_modified")
        if modified is not None:  # eager's backward of this op raises: so does ours
            rule = raising_rule(modified.data)  # type: ignore[attr-defined]
        else:
            rule = next((r for lookup in overriding if (r := lookup(op)) is not None), None) \
                or rules.get(type(op))
        if rule is None:
            if has_no_derivative(op):
                continue
            loc = location_text(op)
            where = f" (at {loc})" if loc else ""
            raise AutodiffError(f"{op.name}{where} has no VJP rule, so thunder_ir cannot "
                                "differentiate through it; register one with "
                                "thunder_ir.passes.vjp.vjp")
        g.emitter.loc = op.location
        backpropagate(g, op, rule, cts, active_new.__contains__, saved_as.get(op))
    g.emitter.loc = None
    grads_out: list[SSAValue] = []
    for i in grad_inputs:
        a = prog.args[i]
        ct = cts.get(a)
        if ct is None:
            t = a.type
            assert isinstance(t, TensorType)
            ct = g.prims.full(shape=t.sizes, fill_value=0.0, device=t.dev, dtype=t.dtype)
        grads_out.append(ct)
    fwd_outs = [g.replaced.get(o, o) for o in (vm.get(o, o) for o in outs)]
    joint = prog.finish(fwd_outs + grads_out)
    # The backward is built: autograd's markers are only their values from here on.
    n_fwd = n_forward_ops + g.forward_inserted
    n_markers = sum(isinstance(op, StopGradientOp | FunctionOp)
                    for op, _ in zip(prog.block.ops, range(n_fwd)))
    strip_autograd(joint)
    return Joint(joint, len(block.args), len(outs), n_fwd - n_markers, grad_inputs,
                 ct_outputs, reaches)


# --------------------------------------------------------------------------- 3. split


@dataclass
class Split:
    """The augmented forward and the backward.

    Attributes:
        forward: ``forward(inputs...) -> (outputs..., residuals...)``.
        backward: ``backward(residuals..., cotangents...) -> grads``.
        n_outputs: the number of user-visible forward outputs.
        n_residuals: how many residuals follow them.
    """

    forward: ModuleOp
    backward: ModuleOp
    n_outputs: int
    n_residuals: int


def split(joint: Joint, policy: Any = None) -> Split:
    """Splits a joint program into forward and backward, with a remat plan."""
    from thunder_ir.passes.remat import note_plan, plan_remat

    fn = main_function(joint.module)
    block = fn.body.block
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    body = [op for op in block.ops if op is not ret]
    fwd_ops, bwd_ops = body[:joint.n_forward_ops], body[joint.n_forward_ops:]
    fwd_args = list(block.args[:joint.n_inputs])
    ct_args = list(block.args[joint.n_inputs:])
    outs = list(ret.operands)
    user_outs, grads = outs[:joint.n_outputs], outs[joint.n_outputs:]

    bwd_ops = live_ops(bwd_ops, grads)
    plan = plan_remat(fwd_args, fwd_ops, bwd_ops, grads, policy)
    note_plan(plan)  # (`thunder_ir.examine` reports it)

    # The joint's ops move into the new functions (the joint is dropped): the forward's
    # into @forward (DCE later drops those nothing needs), the live backward's into
    # @backward; only the forward ops the backward recomputes are copied there.
    fprog = Program(FORWARD, [a.type for a in fwd_args],
                    [a.name_hint for a in fwd_args])
    fvm: dict[SSAValue, SSAValue] = dict(zip(fwd_args, fprog.args))
    for op in fwd_ops:
        op.detach()
        fprog.block.add_op(op)
    residuals = list(plan.saved)
    carried = _symbol_residuals(symbol_args(fn), fwd_args, [*plan.recompute, *bwd_ops],
                                [*residuals, *ct_args], fprog, fvm)
    residuals += [v for v in carried.values() if v not in residuals]

    # Backward: residuals and cotangents in; recomputed forward ops, then the backward ops.
    bprog = Program(BACKWARD, [v.type for v in residuals] + [c.type for c in ct_args],
                    [v.name_hint for v in residuals] + [c.name_hint for c in ct_args])
    bvm: dict[SSAValue, SSAValue] = dict(zip(residuals + ct_args, bprog.args))
    for op in plan.recompute:  # (before the joint's arguments are replaced below)
        bprog.block.add_op(clone_op(op, bvm))
    for op in bwd_ops:
        op.detach()
        bprog.block.add_op(op)
        for inner in op.walk():  # what it reads from the forward: residuals, recomputed
            if any(v in bvm for v in inner.operands):
                inner.operands = [bvm.get(v, v) for v in inner.operands]
    for a, new in zip(fwd_args, fprog.args, strict=True):
        a.replace_all_uses_with(new)  # the forward ops' (the backward's were mapped)
    forward = fprog.finish([fvm.get(v, v) for v in (*user_outs, *residuals)])
    backward = bprog.finish([bvm.get(g, g) for g in grads])
    if carried:
        set_symbol_args(main_function(backward),
                        {s: residuals.index(v) for s, v in carried.items()})
    return Split(forward, backward, len(user_outs), len(residuals))


def _symbol_residuals(sym_args: dict[str, int], fwd_args: Sequence[SSAValue],
                      bwd_ops: Sequence[Operation], bwd_args: Sequence[SSAValue],
                      fprog: Program, fvm: dict[SSAValue, SSAValue]
                      ) -> dict[str, SSAValue]:
    """The symbols the backward computes with (``ct * (s0 + 1)``, a slice's gradient
    padded to the input's length ``s0``) that no tensor it takes has in its shape: each is
    saved as a residual (a number), from which ``@backward`` binds the symbol. A symbolic
    ``int`` argument (``torch.symbol_args``) is saved itself; a size is saved as a
    ``prims.constant`` of the symbol, added to ``fprog`` (``@forward`` binds it from its
    arguments' shapes) and mapped to itself in ``fvm``."""
    used: set[str] = set()
    for a in sym_exprs(a for op in bwd_ops for o in op.walk() for a in o.properties.values()):
        used.update(SYMBOL_NAME.findall(a.text))
    shapes = {d for v in bwd_args if isinstance(v.type, TensorType)
              for d in v.type.dims_text if isinstance(d, str)}
    out: dict[str, SSAValue] = {}
    for s in sorted(used - shapes):
        i = sym_args.get(s)
        if i is not None and i < len(fwd_args):
            out[s] = fwd_args[i]
            continue
        const = ConstantOp.create(properties={"value": SymExprAttr(StringAttr(s))},
                                  result_types=[number_type(int)])
        fprog.block.add_op(const)
        out[s] = fvm[const.out] = const.out
    return out


def live_ops(ops: Sequence[Operation], outputs: Sequence[SSAValue]) -> list[Operation]:
    """The ops of ``ops`` (in order) that ``outputs`` depend on, and those with effects.

    VJP rules compute every operand's cotangent and leave the unwanted ones dead (the
    gradient of ``q * cos`` with respect to a constant ``cos`` reads ``q``). Pruning them
    before the remat plan keeps their operands from counting as values the backward needs:
    otherwise the plan saves ``q`` for a dead op and recomputes ``q * cos`` from it.
    One reverse sweep, linear in ops and operands.
    """
    needed = set(outputs)
    keep: list[Operation] = []
    for op in reversed(ops):
        if any(r in needed for r in op.results) or not is_side_effect_free(op):
            keep.append(op)
            needed.update(op.operands)
    keep.reverse()
    return keep


# --------------------------------------------------------------------------- the passes
#
# The program is one module. Before ``autodiff`` it holds the traced function; ``autodiff``
# replaces it by ``@joint`` (its layout a `JointLayoutAttr`), and ``remat-split``
# replaces that by ``@forward`` and ``@backward``, which every later pass and the
# code generation handle function by function.

def _replace_function(module: ModuleOp, old: func.FuncOp, new: Sequence[func.FuncOp]) -> None:
    """Puts ``new`` (functions of other modules) where ``old`` was, and erases ``old``."""
    block = module.body.block
    for fn in new:
        fn.detach()
        block.insert_op_before(fn, old)
    block.erase_op(old)


def _keep_output_strides(old: func.FuncOp, new: func.FuncOp) -> None:
    """Eager's strides of the user's results (``torch.output_strides``, which tracing
    sets and `restride-outputs` reads) stay on the function that returns them first, and
    so do its symbolic ``int`` arguments (``torch.symbol_args``: ``@joint`` and
    ``@forward`` take the program's arguments first, in order)."""
    for name in (OUTPUT_STRIDES, WRITTEN_OUTPUTS, SYMBOL_ARGS):
        value = old.attributes.get(name)
        if value is not None:
            new.attributes[name] = value


def grad_layout_of(fn: func.FuncOp) -> JointLayoutAttr | BackwardLayoutAttr | None:
    """The layout ``autodiff`` (on ``@joint``) or ``remat-split`` (on ``@backward``) gave
    a function, or None."""
    lay = fn.attributes.get(LAYOUT)
    return lay if isinstance(lay, JointLayoutAttr | BackwardLayoutAttr) else None


def joint_of(module: ModuleOp) -> Joint:
    """The `Joint` that ``autodiff`` left in ``module`` (its ``@joint`` function)."""
    fn = main_function(module)
    lay = grad_layout_of(fn)
    if fn.sym_name.data != "joint" or not isinstance(lay, JointLayoutAttr):
        raise ValueError("remat-split needs the @joint function autodiff makes, with its "
                         f"{LAYOUT} = #autograd.joint<...> attribute")
    return Joint(module, lay.n_inputs, lay.n_outputs, lay.n_forward_ops,
                 lay.grad_input_list(), lay.ct_output_list(), lay.reach_list())


@dataclass(frozen=True)
class DecomposeForGradPass(ReportsChange):
    """Decomposes the ltorch ops that have no direct VJP rule into prims.

    Args:
        executors: executors (objects or names) whose own VJP rules count as direct ones
            (the ops they differentiate are kept whole for ``autodiff``).
    """

    name = "decompose-for-grad"
    executors: tuple[Any, ...] = ()

    def apply_and_report(self, ctx: Context, op: ModuleOp) -> bool:
        return decompose_for_grad(op, vjp_overrides(resolve(ctx, self.executors)))

    def spec(self, *, include_default: bool = False) -> ArgSpec:
        return spec_with_names(self, include_default=include_default)


@dataclass(frozen=True)
class AutodiffPass(ModulePass):
    """Replaces the program's function by the joint forward/backward ``@joint``.

    Args:
        requires_grad: per function argument, whether it requires grad (empty: all do).
        executors: executors (objects or names) whose own VJP rules apply.
    """

    name = "autodiff"
    requires_grad: tuple[bool, ...] = ()
    executors: tuple[Any, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        fn = main_function(op)
        rg = self.requires_grad or (True,) * len(fn.args)
        executors = resolve(ctx, self.executors)
        joint = build_joint(op, rg, vjp_overrides(executors))
        jfn = main_function(joint.module)
        jfn.attributes[LAYOUT] = JointLayoutAttr.make(
            joint.n_inputs, joint.n_outputs, joint.n_forward_ops, joint.grad_inputs,
            joint.ct_outputs, joint.reaches)
        _keep_output_strides(fn, jfn)
        _replace_function(op, fn, [jfn])

    def spec(self, *, include_default: bool = False) -> ArgSpec:
        return spec_with_names(self, include_default=include_default)


@dataclass(frozen=True)
class RematSplitPass(ModulePass):
    """Splits ``@joint`` into ``@forward`` and ``@backward`` with a remat plan.

    Args:
        policy: a remat policy name (``auto``, ``min-cut``, ``save-all``) or a
            `thunder_ir.passes.remat.RematPolicy`.
        executors: the executors in use (objects or names; ``auto`` asks their fusers).
    """

    name = "remat-split"
    policy: Any = "auto"
    executors: tuple[Any, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from thunder_ir.passes.remat import POLICIES

        policy = POLICIES[self.policy] if isinstance(self.policy, str) else self.policy
        joint = joint_of(op)
        parts = split(joint, policy.bound(resolve(ctx, self.executors)))
        fwd, bwd = main_function(parts.forward), main_function(parts.backward)
        bwd.attributes[LAYOUT] = BackwardLayoutAttr.make(
            joint.n_inputs, joint.n_outputs, parts.n_residuals, joint.grad_inputs,
            joint.ct_outputs, joint.reaches)
        _keep_output_strides(main_function(op), fwd)
        _replace_function(op, main_function(op), [fwd, bwd])

    def spec(self, *, include_default: bool = False) -> ArgSpec:
        policy = self.policy if isinstance(self.policy, str) else self.policy.name
        return spec_with_names(replace(self, policy=policy), include_default=include_default)
