"""Property tests of the direct ltorch VJP rules and of the ``torch.call`` autograd fallback.

Each rule goes through `thunder_ir.testing.check_vjp_property`: hypothesis draws inputs
from the op's VJP strategy (``op_inputs(op, for_vjp=True)``: shapes and the variants each
op has, masks, GQA, ignored targets, label smoothing, affine or not…); the op and its rule
form one program that the reference interpreter runs, checked in float64 against
``torch.autograd.grad`` of the op's reference. The fallback is checked on torch functions
that have no ltorch op, through the interpreter, through generated Python, and inside
`build_joint`.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from thunder_ir.dialects import ltorch_activation as A
from thunder_ir.dialects import ltorch_core as C
from thunder_ir.dialects import ltorch_nn as N
from thunder_ir.dialects.base import OperandRef, ThunderOp, from_attr
from thunder_ir.dialects.ltorch_base import LTORCH
from thunder_ir.dialects.prims import ConstantOp
from thunder_ir.dialects.program import Program
from thunder_ir.dialects.torch import CallOp, make_call, resolve_callee, substitute
from thunder_ir.dialects.types import is_float, type_of_tensor
from thunder_ir.passes import vjp_ltorch, vjp_ltorch_core
from thunder_ir.passes.vjp import VJP_RULES, Grad, direct_rules, load_vjp_rules
from thunder_ir.runtime.interpreter import run
from thunder_ir.testing import OpSample, check_vjp, check_vjp_property, op_inputs, values

DIRECT_RULES = tuple(op for op in direct_rules(vjp_ltorch, vjp_ltorch_core)
                     if op not in vjp_ltorch_core.NO_DERIVATIVE_RULES)
"""The ltorch ops autodiff differentiates whole, read off the VJP table (each is
property-tested against torch.autograd below)."""

SETTINGS = settings(max_examples=8, deadline=None)
MAX_EXAMPLES = 8
F64 = torch.float64


def rand(shape: tuple[int, ...], seed: int, low: float = -2.0, high: float = 2.0
         ) -> torch.Tensor:
    """A float64 tensor with values in ``[low, high)``."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g, dtype=F64) * (high - low) + low


seeds = st.integers(0, 2**31 - 1)
side = st.integers(1, 4)


# --------------------------------------------------------------------------- table


def test_direct_rule_table() -> None:
    """The ltorch ops with direct rules (registered from `vjp_ltorch`, nn ops, and
    `vjp_ltorch_core`, core ops), read off the table: each rule says what it does, each op
    has an input strategy for its property test."""
    from thunder_ir.testing.inputs import INPUT_STRATEGIES

    rules = load_vjp_rules()
    assert len(DIRECT_RULES) >= 50
    assert {"ltorch.cumsum", "ltorch.linear", "ltorch.getitem"} <= {op.name for op in DIRECT_RULES}
    for op in (*DIRECT_RULES, *vjp_ltorch_core.NO_DERIVATIVE_RULES):
        assert rules[op].__doc__, f"{op.name}'s rule has no docstring"
    missing = [op.name for op in DIRECT_RULES if op not in INPUT_STRATEGIES]
    assert not missing, f"ops with a direct VJP rule but no input strategy: {missing}"
    assert VJP_RULES[CallOp] is vjp_ltorch.torch_call


# --------------------------------------------------------------------------- properties


@pytest.mark.parametrize("op", DIRECT_RULES, ids=lambda o: o.name)
def test_vjp_matches_autograd(op: type[ThunderOp]) -> None:
    """Whatever the op's VJP strategy draws: 1-D and broadcast batched matmuls, 1-D or 2-D
    linear weights, gelu's approximations, softmax dims, dropout probabilities and training
    flags, norms with or without affine params and eps, embedding padding and frequency
    scaling, attention masks, causal and GQA, class-index and probability targets."""
    check_vjp_property(op, max_examples=MAX_EXAMPLES)


# --------------------------------------------------------------------------- edge cases


def test_matmul_folds_batch_rows_for_a_2d_rhs() -> None:
    """A batched lhs times a matrix: db is one 2-D matmul, with no batch reduction."""
    check_vjp(N.MatmulOp, [rand((2, 3, 4, 5), 0), rand((5, 6), 1)])
    prog = Program("p", [type_of_tensor(rand((2, 3, 4, 5), 0)),
                         type_of_tensor(rand((5, 6), 1))])
    y = prog.emitter.emit(N.MatmulOp, *prog.args)
    before = len(prog.block.ops)
    db = vjp_ltorch.matmul(Grad(prog.emitter), [y], [y], *prog.args)[1]
    names = [op.name for op in list(prog.block.ops)[before:]]
    assert "prims.sum" not in names and "ltorch.sum" not in names
    assert db.type.sizes == (5, 6)


def test_activations_of_int_tensors_have_no_cotangent() -> None:
    prog = Program("p", [type_of_tensor(torch.zeros(3, dtype=torch.int64))])
    x = prog.args[0]
    y = prog.emitter.emit(A.SigmoidOp, x)
    assert vjp_ltorch.sigmoid(Grad(prog.emitter), [y], [y], x) == [None]


@pytest.mark.parametrize("op", [N.SoftmaxOp, N.LogSoftmaxOp], ids=lambda o: o.name)
def test_softmax_dtype_param(op: type[ThunderOp]) -> None:
    """A float32 ``dtype`` on a float64 input: the cotangent comes back as float64."""
    check_vjp(op, [rand((3, 5), 0)], {"dim": 1, "dtype": torch.float32}, atol=1e-5,
              rtol=1e-5)


@pytest.mark.parametrize("op", [N.DropoutOp, N.FeatureDropoutOp, N.AlphaDropoutOp,
                                N.FeatureAlphaDropoutOp], ids=lambda o: o.name)
def test_dropout_family_is_differentiated_through_its_draw(op: type[N.DropoutFamilyOp]
                                                           ) -> None:
    """The dropout family has no rule of its own: its decomposition (one bernoulli draw,
    then elementwise math) is differentiated, so the backward multiplies by the forward's
    noise. Output and gradient equal eager's for the same seed."""
    import thunder_ir

    x = rand((4, 6, 5), 0, 1.0, 2.0).requires_grad_(True)
    fn = op.TORCH_FN

    def f(t: torch.Tensor) -> torch.Tensor:
        return fn(t, 0.25, True)

    xe = x.detach().clone().requires_grad_(True)
    torch.manual_seed(3)
    ye = f(xe)
    (ge,) = torch.autograd.grad(ye, xe, torch.ones_like(ye))
    torch.manual_seed(3)
    yj = thunder_ir.jit(f)(x)
    (gj,) = torch.autograd.grad(yj, x, torch.ones_like(yj))
    assert torch.equal(yj, ye) and torch.equal(gj, ge)
    assert op not in load_vjp_rules()


def test_attention_fully_masked_rows_get_zero_gradients() -> None:
    """torch gives fully masked rows zero probabilities; the rule gives them zero grads."""
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False
    check_vjp(N.ScaledDotProductAttentionOp,
              [rand((1, 2, 3, 4), 0), rand((1, 2, 4, 4), 1), rand((1, 2, 4, 4), 2), mask])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_attention_rule_with_dropout_computes_its_forward(dtype: torch.dtype) -> None:
    """With dropout the rule replaces the forward op. In float32: by the steps of eager's
    math kernel, whose probabilities and noise the backward reads; in bfloat16: by eager's
    math kernel itself, which also returns the weights after dropout."""
    q = rand((1, 1, 2, 2), 0).to(dtype)
    prog = Program("p", [type_of_tensor(q)] * 3)
    y = prog.emitter.emit(N.ScaledDotProductAttentionOp, *prog.args, None, dropout_p=0.1)
    g = Grad(prog.emitter)
    grads = vjp_ltorch.scaled_dot_product_attention(g, [y], [y], *prog.args, None,
                                                    dropout_p=0.1)
    ops = list(prog.block.ops)
    assert not any(isinstance(o, N.ScaledDotProductAttentionOp) for o in ops)
    n_forward = 1 + g.forward_inserted  # the attention op, replaced
    forward = ops[:n_forward]
    if dtype == torch.float32:
        names = [o.name for o in forward]
        assert "ltorch.safe_softmax" in names and "prims.bernoulli_like" in names
        assert not any(isinstance(o, CallOp) for o in ops)
        assert not any(o.name == "ltorch.safe_softmax" for o in ops[n_forward:])
    else:
        (call,) = forward
        assert isinstance(call, CallOp) and call.callee.data == vjp_ltorch.SDPA_DROPOUT_FORWARD
    assert all(gr is not None for gr in grads[:3])


def _cross_entropy_const_weight(input: torch.Tensor, target: torch.Tensor,
                                weight: torch.Tensor | None = None, **params: Any
                                ) -> torch.Tensor:
    return F.cross_entropy(input, target, None if weight is None else weight.detach(),
                           **params)


class CrossEntropyConstWeightOp(N.CrossEntropyOp):
    """``ltorch.cross_entropy`` whose reference treats the class weights as constants, as
    torch's ``nll_loss`` demands of class-index targets (its weight grad is an error).

    A plain subclass: it reuses the op's IRDL definition, shape rule and verifier.
    """

    name = "test.cross_entropy_const_weight"

    @classmethod
    def ref(cls, *operands: Any, **params: Any) -> Any:
        return _cross_entropy_const_weight(*operands, **params)


@st.composite
def class_indices_with_weights(draw: st.DrawFn) -> OpSample:
    """Class-index samples of cross_entropy's VJP strategy, given class weights (which that
    strategy leaves out: torch cannot differentiate them)."""
    sample = draw(op_inputs(N.CrossEntropyOp, for_vjp=True).filter(
        lambda s: not is_float(s.operands[1].dtype)))
    x, target, _ = sample.operands
    classes = x.shape[0 if x.ndim == 1 else 1]
    weight = values(draw, (classes,), F64, 0.2, 2.0)
    return OpSample([x, target, weight], sample.params)


def test_cross_entropy_class_indices_with_weights() -> None:
    """The rule's input cotangent with class weights, against a reference that holds the
    weights constant."""
    check_vjp_property(CrossEntropyConstWeightOp, rule=vjp_ltorch.cross_entropy,
                       inputs=class_indices_with_weights(), max_examples=MAX_EXAMPLES)


@pytest.mark.filterwarnings("ignore:size_average and reduce args")
def test_cross_entropy_legacy_reduction() -> None:
    x, t = rand((4, 3), 0), torch.tensor([0, 2, 1, 1])
    check_vjp(N.CrossEntropyOp, [x, t, None], {"size_average": False})


# --------------------------------------------------------------------------- low precision


LOW_PRECISION_CASES: list[tuple[type[ThunderOp], list[Any], dict[str, Any]]] = [
    (N.LinearOp, [(2, 3, 4), (5, 4), (5,)], {}),
    (N.MatmulOp, [(2, 3, 4), (4, 2)], {}),
    (A.GeluOp, [(3, 4)], {"approximate": "tanh"}),
    (A.SiluOp, [(3, 4)], {}),
    (C.TanhOp, [(3, 4)], {}),
    (N.SoftmaxOp, [(3, 4)], {"dim": -1}),
    (N.LogSoftmaxOp, [(3, 4)], {"dim": 0, "dtype": torch.float32}),
    (N.LayerNormOp, [(2, 3, 8), (8,), (8,)], {"normalized_shape": (8,)}),
    (N.RmsNormOp, [(2, 8), (8,)], {"normalized_shape": (8,)}),
    (N.ScaledDotProductAttentionOp, [(1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4), None],
     {"is_causal": True}),
    (N.CrossEntropyOp, [(4, 5), "target", None], {"label_smoothing": 0.1}),
    (N.EmbeddingOp, ["indices", (6, 3)], {}),
]


@pytest.mark.parametrize(("op", "shapes", "params"), LOW_PRECISION_CASES,
                         ids=[c[0].name for c in LOW_PRECISION_CASES])
def test_bfloat16_cotangents(op: type[ThunderOp], shapes: list[Any],
                             params: dict[str, Any]) -> None:
    """On bfloat16 inputs each cotangent has its operand's exact type (the rule contract)
    and is close to the float64 gradient (the math runs in float32)."""
    operands: list[Any] = []
    for i, sh in enumerate(shapes):
        if sh == "target":
            operands.append(torch.tensor([0, 4, 2, -100]))
        elif sh == "indices":
            operands.append(torch.tensor([[0, 5], [3, 3]]))
        else:
            operands.append(None if sh is None else rand(sh, i).to(torch.bfloat16))
    tensors = [v for v in operands if v is not None]
    out = op.ref(*operands, **params)
    ct = rand(tuple(out.shape), 99).to(out.dtype)
    prog = Program("p", [type_of_tensor(t) for t in [*tensors, ct]])
    args = iter(prog.args)
    vals = [None if v is None else next(args) for v in operands]
    y = prog.emitter.emit(op, *vals, **params)
    grads = load_vjp_rules()[op](Grad(prog.emitter), [y], [prog.args[-1]], *vals, **params)
    pairs = [(v, gv) for v, gv in zip(vals, grads) if v is not None and gv is not None]
    for v, gv in pairs:
        assert gv.type == v.type, f"{op.name}: cotangent {gv.type} for operand {v.type}"
    module = prog.finish([gv for _, gv in pairs])
    module.verify()
    got = run(module, *tensors, ct)

    req = [v.to(F64).requires_grad_(True) if isinstance(v, torch.Tensor) and is_float(v.dtype)
           else v for v in operands]
    ref = op.ref(*req, **params)
    leaves = [r for r, (v, gv) in zip(req, zip(vals, grads)) if gv is not None]
    expected = torch.autograd.grad(ref, leaves, ct.to(ref.dtype))
    for g_bf16, e64 in zip(got, expected):
        scale = max(e64.abs().max().item(), 1.0)
        torch.testing.assert_close(g_bf16.to(F64), e64, atol=3e-2 * scale, rtol=3e-2)


# --------------------------------------------------------------------------- torch.call


def _call_params(op: CallOp) -> dict[str, Any]:
    """``op.params()`` (what `build_joint` passes) where it works, else read by hand."""
    try:
        return op.params()
    except TypeError:  # kwargs is a DictionaryAttr, which from_attr does not convert
        return {"callee": op.callee.data, "args": from_attr(op.args), "kwargs": None,
                "multi": None}


def check_call_vjp(callee: str, operands: list[Any], args: list[Any],
                   kwargs: dict[str, Any] | None = None, *, same: bool = False,
                   seed: int = 0) -> None:
    """The torch.call rule against ``torch.autograd`` of the callee, in float64.

    ``operands`` are tensors (program arguments) or numbers (constants); ``same`` binds
    every tensor argument to one runtime tensor object.
    """
    fn = resolve_callee(callee)

    def call(vals: list[Any]) -> tuple[Any, ...]:
        out = fn(*substitute(tuple(args), vals),
                 **{k: substitute(v, vals) for k, v in (kwargs or {}).items()})
        return tuple(out) if isinstance(out, tuple | list) else (out,)

    values = [v.to(F64) if isinstance(v, torch.Tensor) and is_float(v.dtype) else v
              for v in operands]
    tensor_at = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    if same:
        values = [values[tensor_at[0]] if i in tensor_at else v for i, v in enumerate(values)]
    gen = torch.Generator().manual_seed(seed)
    cts = [torch.randn(o.shape, generator=gen, dtype=o.dtype)
           if isinstance(o, torch.Tensor) and is_float(o.dtype) else None
           for o in call(values)]
    ct_list = [c for c in cts if c is not None]
    leaves = [values[i] for i in tensor_at]
    prog = Program("vjp", [type_of_tensor(t) for t in leaves + ct_list])
    e = prog.emitter
    targs, ct_args = iter(prog.args[:len(leaves)]), iter(prog.args[len(leaves):])
    vals = [next(targs) if isinstance(v, torch.Tensor) else e.emit(ConstantOp, value=v)
            for v in values]
    op = make_call(callee, vals, args, kwargs)
    prog.block.add_op(op)
    ct_vals = [next(ct_args) if c is not None else None for c in cts]
    (grads,) = vjp_ltorch.torch_call(Grad(e), list(op.results), ct_vals, vals,
                                     **_call_params(op))
    diff = [i for i in tensor_at if is_float(values[i].dtype)]
    assert [i for i, gv in enumerate(grads) if gv is not None] == diff
    module = prog.finish([grads[i] for i in diff])
    module.verify()
    got = run(module, *leaves, *ct_list)

    req = {i: values[i].detach().requires_grad_(True) for i in diff}
    outs = call([req.get(i, v) for i, v in enumerate(values)])
    pairs = [(o, c) for o, c in zip(outs, cts) if c is not None and o.requires_grad]
    expected = torch.autograd.grad([o for o, _ in pairs], list(req.values()),
                                   [c for _, c in pairs], allow_unused=True)
    assert len(got) == len(expected) == len(diff)
    for gv, ev in zip(got, expected):
        torch.testing.assert_close(gv, torch.zeros_like(gv) if ev is None else ev)


R = OperandRef


@SETTINGS
@given(shape=st.lists(side, min_size=1, max_size=3), data=st.data(), seed=seeds)
def test_fallback_cumulative(shape: list[int], data: st.DataObject, seed: int) -> None:
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    fn = data.draw(st.sampled_from(["torch.cumsum", "torch.cumprod"]))
    x = rand(tuple(shape), seed, 0.5, 1.5)
    check_call_vjp(fn, [x], [R(0), dim], seed=seed)
    check_call_vjp(fn, [x], [R(0)], {"dim": dim}, seed=seed)


@SETTINGS
@given(shape=st.lists(side, min_size=1, max_size=3), repeats=st.integers(1, 3),
       data=st.data(), seed=seeds)
def test_fallback_repeat_interleave(shape: list[int], repeats: int, data: st.DataObject,
                                    seed: int) -> None:
    dim = data.draw(st.integers(0, len(shape) - 1))
    x = rand(tuple(shape), seed)
    check_call_vjp("torch.repeat_interleave", [x], [R(0), repeats], {"dim": dim}, seed=seed)
    # An int tensor of repeats: an operand that gets no cotangent (output_size lets the
    # meta kernel give the result's shape).
    reps = torch.randint(0, 3, (shape[dim],), generator=torch.Generator().manual_seed(seed))
    check_call_vjp("torch.repeat_interleave", [x, reps], [R(0), R(1)],
                   {"dim": dim, "output_size": int(reps.sum())}, seed=seed)


def test_fallback_several_results_and_number_operands() -> None:
    x = rand((3, 5), 0)
    # torch.sort: a float result with a cotangent and an int result without one.
    check_call_vjp("torch.sort", [x], [R(0), 1])
    # torch.split: a sequence of results.
    check_call_vjp("torch.split", [x], [R(0), 2], {"dim": 1})
    # A number operand (no cotangent) in the kwargs.
    check_call_vjp("torch.add", [x, rand((3, 5), 1), 0.5], [R(0), R(1)], {"alpha": R(2)})
    # An unused differentiable input gets zeros.
    check_call_vjp("torch.where", [x > 0, x, rand((3, 5), 1)], [R(0), R(1), R(1)])


def test_fallback_same_tensor_twice() -> None:
    """Two operands bound to one tensor object get separate cotangents (not doubled)."""
    check_call_vjp("torch.mul", [rand((4,), 0), rand((4,), 1)], [R(0), R(1)], same=True)
    check_call_vjp("torch.cat", [rand((2, 3), 0), rand((2, 3), 1)], [(R(0), R(1))],
                   {"dim": 0}, same=True)


def test_fallback_generated_python() -> None:
    """The forward call records torch's graph (`call_with_grad`) and the backward runs
    through it (`handle_vjp`), as printed Python that runs."""
    from thunder_ir.lowering.codegen import compile_program

    x = rand((2, 3), 0)
    ct = rand((2, 3), 1)
    prog = Program("bwd", [type_of_tensor(x), type_of_tensor(ct)])
    call = make_call("torch.cumprod", [prog.args[0]], [R(0)], {"dim": 1})
    prog.block.add_op(call)
    (grads,) = vjp_ltorch.torch_call(Grad(prog.emitter), list(call.results), [prog.args[1]],
                                     [prog.args[0]], **_call_params(call))
    fn, source = compile_program(prog.finish([grads[0]]))
    assert "tir.call_with_grad(" in source
    assert "tir.handle_vjp(" in source
    with torch.no_grad():
        got = fn(x, ct)
    xr = x.detach().requires_grad_(True)
    (expected,) = torch.autograd.grad(torch.cumprod(xr, dim=1), xr, ct)
    torch.testing.assert_close(got, expected)


def test_fallback_inside_build_joint() -> None:
    """build_joint differentiates a program mixing direct rules and a torch.call."""
    from thunder_ir.passes.autodiff import build_joint

    x, w = rand((3, 4), 0), rand((5, 4), 1)
    prog = Program("f", [type_of_tensor(x), type_of_tensor(w)], ["x", "w"])
    e = prog.emitter
    h = e.emit(N.LinearOp, prog.args[0], prog.args[1], None)
    call = make_call("torch.cumsum", [h], [R(0), 1])
    prog.block.add_op(call)
    y = e.emit(N.LayerNormOp, call.results[0], None, None, normalized_shape=(5,))
    joint = build_joint(prog.finish([y]), [True, True])
    joint.module.verify()
    ct = rand((3, 5), 2)
    y_got, dx, dw = run(joint.module, x, w, ct)

    xr, wr = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    y_ref = F.layer_norm(torch.cumsum(F.linear(xr, wr), 1), (5,))
    ex, ew = torch.autograd.grad(y_ref, [xr, wr], ct)
    torch.testing.assert_close(y_got, y_ref.detach())
    torch.testing.assert_close(dx, ex)
    torch.testing.assert_close(dw, ew)


# --------------------------------------------------------------------------- core ops


@pytest.mark.parametrize("index", [
    (0, slice(1, 3)), (Ellipsis, None, slice(None, -1)), (slice(None), slice(None, None, 2)),
    (R(0), slice(1, None)), (slice(None), R(0)),
], ids=["int_slice", "ellipsis_none", "strided", "tensor_first", "tensor_second"])
def test_getitem_basic_and_decomposed_indices(index: Any) -> None:
    """Basic indices scatter with zeros and cat; tensor indices and strided slices take the
    decomposition's path."""
    idx = [torch.tensor([2, 0, -1, 0])] if any(isinstance(i, OperandRef) for i in index) \
        else []
    check_vjp(C.GetitemOp, [rand((3, 4, 5), 0), idx], {"index": index})


def test_split_with_a_missing_cotangent() -> None:
    """A piece that does not reach the loss contributes zeros."""
    x = rand((5, 3), 0)
    prog = Program("p", [type_of_tensor(x), type_of_tensor(rand((2, 3), 1))])
    ys = prog.emitter.emit(C.SplitOp, prog.args[0], split_size_or_sections=(2, 3), dim=0)
    (dx,) = vjp_ltorch_core.split(Grad(prog.emitter), ys, [prog.args[1], None], prog.args[0],
                             split_size_or_sections=(2, 3), dim=0)
    (got,) = run(prog.finish([dx]), x, rand((2, 3), 1))
    torch.testing.assert_close(got, torch.cat([rand((2, 3), 1), torch.zeros(3, 3, dtype=F64)]))


@pytest.mark.parametrize("op", LTORCH, ids=lambda o: o.name)
def test_differentiability_matches_eager(op: type[ThunderOp]) -> None:
    """The tracer marks an ltorch op's float results as requiring grad exactly when eager
    does: torch's function run on meta inputs that require grad says which."""
    from hypothesis import HealthCheck, find

    from thunder_ir.dialects.traits import has_no_derivative

    def has_float(s: Any) -> bool:
        return any(isinstance(t, torch.Tensor) and t.is_floating_point()
                   for g in s.operands for t in (g if isinstance(g, list) else [g]))

    try:
        sample = find(op_inputs(op), has_float, settings=settings(
            max_examples=50, database=None, suppress_health_check=list(HealthCheck)))
    except Exception:  # no float operand at all (creation, bitwise ops): nothing to ask
        pytest.skip(f"{op.name} takes no floating-point tensor")

    def meta(t: Any, grad: bool = True) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        m = torch.empty(t.shape, dtype=t.dtype, device="meta")
        return m.requires_grad_() if grad and t.is_floating_point() else m

    # operands eager refuses to see requiring grad (an op's NO_GRAD_OPERANDS) stay constant
    constant = getattr(op, "NO_GRAD_OPERANDS", ())
    names = [n for n, _ in op.operand_layout()]
    operands = [[meta(t) for t in g] if isinstance(g, list) else meta(g, n not in constant)
                for n, g in zip(names, sample.operands, strict=True)]
    with torch.enable_grad():
        out = op.ref(*operands, **sample.params)
    outs = out if isinstance(out, list | tuple) else [out]
    no_grad = getattr(op, "NO_GRAD_RESULTS", ())
    ours = [not has_no_derivative(op) and i not in no_grad
            and (o.dtype.is_floating_point or o.dtype.is_complex) for i, o in enumerate(outs)]
    assert [o.requires_grad for o in outs] == ours
