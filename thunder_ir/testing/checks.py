"""Checks of decompositions and VJP rules against eager torch, and small strategies.

See `thunder_ir.testing` for the overview.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import hypothesis
import torch
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from thunder_ir.dialects import ltorch_core
from thunder_ir.dialects.base import Emitter, ThunderOp
from thunder_ir.dialects.program import FORWARD, Program
from thunder_ir.dialects.types import is_float, number_type, type_of_tensor
from thunder_ir.testing.inputs import (
    OpSample,
    op_inputs,
)

# Absolute tolerance added to eager's error, per result dtype.
ATOL: dict[torch.dtype, float] = {
    torch.float64: 1e-10,
    torch.float32: 1e-5,
    torch.float16: 1e-2,
    torch.bfloat16: 5e-2,
}
RTOL: dict[torch.dtype, float] = {
    torch.float64: 1e-9,
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}


def _flat(groups: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for g in groups:
        if isinstance(g, list | tuple):
            out.extend(g)
        elif g is not None:
            out.append(g)
    return out


def _operand_values(e: Emitter, groups: Sequence[Any], args: Iterator[SSAValue]) -> list[Any]:
    """IR values for grouped operands: each tensor takes the next program argument, a Python
    number becomes a ``prims.constant``, ``None`` stays ``None``."""
    from thunder_ir.dialects.prims import ConstantOp

    def value(v: Any) -> Any:
        return next(args) if isinstance(v, torch.Tensor) else e.emit(ConstantOp, value=v)

    return [[value(v) for v in g] if isinstance(g, list | tuple) else
            None if g is None else value(g) for g in groups]


def build_one_op(op: type[ThunderOp], operands: Sequence[Any], params: dict[str, Any]
                 ) -> tuple[ModuleOp, list[torch.Tensor]]:
    """A program computing ``op`` on ``operands`` (grouped; tensors become arguments,
    Python numbers become ``prims.constant``). Returns it with its tensor arguments."""
    tensors = [v for v in _flat(operands) if isinstance(v, torch.Tensor)]
    prog = Program(FORWARD, [type_of_tensor(t) for t in tensors],
                   [f"a{i}" for i in range(len(tensors))])
    e: Emitter = prog.emitter
    grouped = _operand_values(e, operands, iter(prog.args))
    out = e.emit(op, *grouped, **params)
    return prog.finish(out if isinstance(out, list) else [out]), tensors


def decompose(module: ModuleOp, rule: Callable[..., Any] | None = None,
              op: type[ThunderOp] | None = None) -> ModuleOp:
    """Decomposes ``module`` in place (with ``rule`` standing in for ``op``'s, if given)."""
    from thunder_ir.passes.context import CompileContext, compiling
    from thunder_ir.passes.decompose_ltorch import DecomposeLtorchPass
    from thunder_ir.passes.decompositions import load_rules

    load_rules()
    own = {op: rule} if rule is not None and op is not None else {}
    ctx = CompileContext.over(Context(), decompositions=own)  # this compilation's rule only
    with compiling(ctx):
        DecomposeLtorchPass().apply(ctx, module)
    module.verify()
    return module


def _upcast(v: Any) -> Any:
    if isinstance(v, torch.Tensor) and is_float(v.dtype):
        return v.to(torch.float64)
    if isinstance(v, list | tuple):
        return [_upcast(x) for x in v]
    return v


def _as_list(out: Any) -> list[Any]:
    return list(out) if isinstance(out, list | tuple) else [out]


def compare(name: str, got: Any, eager: Any, ref64: Any | None,
            atol: float | None = None, rtol: float | None = None) -> None:
    """Asserts the float64-reference rule for one result (exact for int/bool results)."""
    if not isinstance(eager, torch.Tensor):
        assert got == eager, f"{name}: got {got!r}, eager gives {eager!r}"
        return
    assert isinstance(got, torch.Tensor), f"{name}: got {type(got).__name__}, expected a tensor"
    assert got.shape == eager.shape, (
        f"{name}: shape {tuple(got.shape)} != eager {tuple(eager.shape)}")
    assert got.dtype == eager.dtype, f"{name}: dtype {got.dtype} != eager {eager.dtype}"
    if not is_float(eager.dtype) or ref64 is None:
        assert torch.equal(got, eager), f"{name}: values differ from eager:\n{got}\n{eager}"
        return
    ref = ref64.to(torch.float64)
    g, e = got.to(torch.float64), eager.to(torch.float64)
    a = ATOL[eager.dtype] if atol is None else atol
    r = RTOL[eager.dtype] if rtol is None else rtol
    same_nan = torch.isnan(g) == torch.isnan(e)
    assert bool(same_nan.all()), f"{name}: NaN pattern differs from eager"
    finite = ~torch.isnan(ref) & ~torch.isnan(g)
    err_got = torch.where(finite, (g - ref).abs(), 0.0)
    err_eager = torch.where(finite, (e - ref).abs(), 0.0)
    inf = torch.isinf(ref) | torch.isinf(g) | torch.isinf(e)
    bound = err_eager + a + r * torch.where(finite, ref.abs(), 0.0)
    ok = torch.where(inf, (g == e) | (g == ref), err_got <= bound)
    if not bool(ok.all()):
        worst = int(torch.argmax(torch.where(ok, 0.0, err_got - bound).flatten()))
        raise AssertionError(
            f"{name}: decomposition error {err_got.flatten()[worst].item():.3g} exceeds eager's "
            f"{err_eager.flatten()[worst].item():.3g} + tolerance at flat index {worst} "
            f"(got {g.flatten()[worst].item()!r}, eager {e.flatten()[worst].item()!r}, "
            f"float64 {ref.flatten()[worst].item()!r})")


def _zeros_reference(*operands: Any, **params: Any) -> torch.Tensor:
    """``torch.empty``'s contents are unspecified: compare shape and dtype against zeros."""
    return torch.zeros_like(ltorch_core.EmptyOp.ref(*operands, **params))


DEFAULT_REFERENCES: dict[type[ThunderOp], Callable[..., Any]] = {
    ltorch_core.EmptyOp: _zeros_reference,
}
"""Expected-result functions `check_decomposition` uses instead of ``op.ref`` (ops whose
eager values are unspecified)."""


@contextlib.contextmanager
def _seeded(seed: int = 0) -> Iterator[None]:
    """Runs with torch's CPU generator at ``seed`` (restored afterwards): random ops (the
    dropout family) draw the same numbers in eager and in the decomposed program."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def check_decomposition(op: type[ThunderOp], operands: Sequence[Any],
                        params: dict[str, Any] | None = None, *,
                        rule: Callable[..., Any] | None = None,
                        atol: float | None = None, rtol: float | None = None,
                        reference: Callable[..., Any] | None = None) -> ModuleOp:
    """Checks a decomposition of ``op`` on these inputs against eager torch.

    Args:
        op: the op class (an ltorch op, or your own op with a rule).
        operands: grouped like the op's operand definitions: tensors, Python numbers,
            ``None`` for an absent optional operand, lists for variadic ones.
        params: the op's static arguments.
        rule: a decomposition to test instead of the registered one.
        atol, rtol: override the per-dtype tolerances.
        reference: computes the expected result (default: ``op.ref``, or the op's entry
            in `DEFAULT_REFERENCES`).

    Returns:
        The decomposed module, for further inspection.
    """
    params = dict(params or {})
    ref_fn = reference or DEFAULT_REFERENCES.get(op) or (lambda *a, **k: op.ref(*a, **k))
    with _seeded():
        eager = _as_list(ref_fn(*operands, **params))
    try:
        with _seeded():
            ref64 = _as_list(ref_fn(*[_upcast(g) for g in operands], **params))
    except RuntimeError:  # e.g. a float64 reference is not implemented
        ref64 = [None] * len(eager)
    module, tensors = build_one_op(op, operands, params)
    decompose(module, rule, op)
    from thunder_ir.runtime.interpreter import run

    with _seeded():
        got = run(module, *tensors)
    assert len(got) == len(eager), f"{op.name}: {len(got)} results, eager gives {len(eager)}"
    for i, (g, e, r) in enumerate(zip(got, eager, ref64)):
        compare(f"{op.name} result {i}", g, e, r, atol, rtol)
    return module


def _cotangent_msg(name: str, i: int) -> Callable[[str], str]:
    """The ``assert_close`` message for operand ``i``'s cotangent."""
    return lambda m: f"{name}: cotangent of operand {i}: {m}"


def check_vjp(op: type[ThunderOp], operands: Sequence[Any],
              params: dict[str, Any] | None = None, *,
              rule: Callable[..., Any] | None = None, atol: float = 1e-7, rtol: float = 1e-6,
              seed: int = 0) -> None:
    """Checks ``op``'s VJP rule (or ``rule``) against ``torch.autograd`` in float64.

    Floating-point tensor operands are upcast to float64. Random cotangents are drawn for
    every floating-point result; the rule's operand cotangents must match
    ``torch.autograd.grad`` of the op's reference implementation.

    Args:
        op: the op class.
        operands: grouped like the op's operand definitions (tensors, Python numbers,
            ``None`` for an absent optional operand, lists for variadic ones).
        params: the op's static arguments.
        rule: a VJP rule to test instead of the registered one.
        atol, rtol: tolerances of the float64 comparison.
        seed: seeds the cotangents.
    """
    from thunder_ir.passes.vjp import Grad, load_vjp_rules
    from thunder_ir.runtime.interpreter import run

    params = dict(params or {})
    rule = rule or load_vjp_rules()[op]
    groups = [_upcast(g) for g in operands]
    leaves = [v for v in _flat(groups) if isinstance(v, torch.Tensor)]
    # operands eager refuses to see requiring grad (the op's NO_GRAD_OPERANDS: running
    # statistics, a loss's total weight) stay constant, and the rule must give them none
    names = [n for n, _ in op.operand_layout()]
    constant = set(getattr(op, "NO_GRAD_OPERANDS", ()))
    fixed = {id(v) for n, g in zip(names, groups, strict=True) if n in constant
             for v in _flat([g]) if isinstance(v, torch.Tensor)}
    diff = [v for v in leaves if is_float(v.dtype) and id(v) not in fixed]
    req = [v.detach().requires_grad_(True) for v in diff]
    swap = {id(a): b for a, b in zip(diff, req)}

    def with_req(g: Any) -> Any:
        if isinstance(g, list | tuple):
            return [with_req(x) for x in g]
        return swap.get(id(g), g)

    outs = _as_list(op.ref(*[with_req(g) for g in groups], **params))
    gen = torch.Generator().manual_seed(seed)
    cts = [torch.randn(o.shape, generator=gen, dtype=o.dtype)
           if isinstance(o, torch.Tensor) and is_float(o.dtype) else None for o in outs]
    pairs = [(o, c) for o, c in zip(outs, cts) if c is not None and o.requires_grad]
    expected: tuple[torch.Tensor | None, ...]
    if pairs:
        expected = torch.autograd.grad([o for o, _ in pairs], req, [c for _, c in pairs],
                                       allow_unused=True)
    else:
        expected = tuple(None for _ in req)

    ct_list = [c for c in cts if c is not None]
    prog = Program("vjp", [type_of_tensor(t) for t in leaves + ct_list],
                   [f"a{i}" for i in range(len(leaves))] + [f"ct{i}" for i in range(len(ct_list))])
    ct_args = iter(prog.args[len(leaves):])
    e = prog.emitter
    grouped = _operand_values(e, groups, iter(prog.args[:len(leaves)]))
    res = e.emit(op, *grouped, **params)
    res_list = res if isinstance(res, list) else [res]
    ct_vals = [next(ct_args) if c is not None else None for c in cts]
    grads = rule(Grad(e), res_list, ct_vals, *grouped, **params)
    assert len(grads) == len(grouped), (
        f"{op.name}: the rule returned {len(grads)} entries for {len(grouped)} operand groups")
    # Pair each differentiable tensor operand with the rule's cotangent for it.
    got_vals: list[Any] = []
    for name, g, gr in zip(names, grouped, grads, strict=True):
        vals = g if isinstance(g, list) else [g]
        grs = gr if isinstance(gr, list) else [gr] * len(vals) if gr is None else [gr]
        if name in constant:
            assert all(x is None for x in grs), (
                f"{op.name}: the rule gives {name} a cotangent; eager gives it none")
            continue
        for v, gv in zip(vals, grs):
            if v is not None and v in prog.args and is_float(v.type.dtype):
                got_vals.append(gv)
    outputs = [v for v in got_vals if v is not None]
    module = prog.finish(outputs)
    module.verify()
    computed = iter(run(module, *leaves, *ct_list))
    for i, (gv, exp) in enumerate(zip(got_vals, expected)):
        if gv is None:
            assert exp is None or not bool(exp.any()), (
                f"{op.name}: the rule gives no cotangent for operand {i}, torch gives {exp}")
            continue
        got = next(computed)
        if exp is None:
            exp = torch.zeros_like(got)
        assert got.shape == exp.shape, f"{op.name}: cotangent {i} shape {tuple(got.shape)} " \
                                       f"!= {tuple(exp.shape)}"
        torch.testing.assert_close(got, exp.to(got.dtype), atol=atol, rtol=rtol,
                                   msg=_cotangent_msg(op.name, i))


# --------------------------------------------------------------------------- properties

_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
               HealthCheck.large_base_example]


def _property(name: str, key: str, test: Callable[..., None], strategies: dict[str, Any],
              base: hypothesis.settings | None, max_examples: int) -> None:
    """Runs ``test`` under ``@given(**strategies)`` with its own database key."""
    test.__name__ = test.__qualname__ = re.sub(r"\W", "_", name)
    # One database entry per op and mode, as pytest's parametrize would give.
    test._hypothesis_internal_add_digest = key.encode()  # type: ignore[attr-defined]
    conf = hypothesis.settings(base, max_examples=max_examples, deadline=None,
                               suppress_health_check=_SUPPRESSED)
    conf(given(**strategies)(test))()


def _key(kind: str, op: type[ThunderOp], dtypes: Any, rule: Any, inputs: Any) -> str:
    """The database key of a property: saved failures replay for the same check only."""
    rule_name = "" if rule is None else (
        f"{getattr(rule, '__module__', '')}.{getattr(rule, '__qualname__', type(rule).__name__)}")
    return f"{kind}:{op.name}:{dtypes}:{rule_name}:{inputs is not None}"


def _failure(kind: str, op: type[ThunderOp], sample: OpSample, e: AssertionError
             ) -> AssertionError:
    return AssertionError(f"{op.name}: {kind} on\n    {sample!r}\n{e}")


def check_decomposition_property(
        op: type[ThunderOp], *, rule: Callable[..., Any] | None = None,
        dtypes: Sequence[torch.dtype] | None = None,
        inputs: st.SearchStrategy[OpSample] | None = None, max_examples: int = 20,
        settings: hypothesis.settings | None = None, atol: float | None = None,
        rtol: float | None = None, reference: Callable[..., Any] | None = None,
        inspect: Callable[[ModuleOp, OpSample], None] | None = None) -> None:
    """`check_decomposition` on inputs that hypothesis draws from ``op_inputs(op)``.

    On failure hypothesis shrinks the input; the `AssertionError` names the op and shows
    the shrunk `OpSample` (hypothesis adds its "Falsifying example" note too).

    Args:
        op: the op class (it needs an input strategy: `register_inputs` for your own).
        rule: a decomposition to test instead of the registered one.
        dtypes: the data dtypes to draw (default `DEFAULT_DTYPES`).
        inputs: a strategy of `OpSample` to draw from instead of ``op_inputs(op)``.
        max_examples: how many inputs to try.
        settings: hypothesis settings to start from (``max_examples`` and ``deadline``
            given here win).
        atol, rtol, reference: as for `check_decomposition`.
        inspect: called with the decomposed module and the sample after each passing
            check (to assert more, e.g. that only prims are left).
    """
    strategy = inputs if inputs is not None else op_inputs(op, dtypes=dtypes)

    def test(sample: OpSample) -> None:
        try:
            module = check_decomposition(op, sample.operands, sample.params, rule=rule,
                                         atol=atol, rtol=rtol, reference=reference)
            if inspect is not None:
                inspect(module, sample)
        except AssertionError as e:
            raise _failure("the decomposition disagrees with eager", op, sample, e) from e
        except Exception as e:
            e.add_note(f"while checking the decomposition of {op.name} on {sample!r}")
            raise

    _property(f"check_decomposition_of_{op.name}",
              _key("decomposition", op, dtypes, rule, inputs), test, {"sample": strategy},
              settings, max_examples)


def check_vjp_property(
        op: type[ThunderOp], *, rule: Callable[..., Any] | None = None,
        dtypes: Sequence[torch.dtype] | None = None,
        inputs: st.SearchStrategy[OpSample] | None = None, max_examples: int = 10,
        settings: hypothesis.settings | None = None, atol: float = 1e-7,
        rtol: float = 1e-6) -> None:
    """`check_vjp` on inputs that hypothesis draws from ``op_inputs(op, for_vjp=True)``
    (float64, differentiable values), with drawn cotangent seeds.

    On failure hypothesis shrinks the input; the `AssertionError` names the op and shows
    the shrunk `OpSample`.

    Args:
        op: the op class.
        rule: a VJP rule to test instead of the registered one.
        dtypes: the data dtypes to draw (default float64).
        inputs: a strategy of `OpSample` to draw from instead of ``op_inputs(op, ...)``.
        max_examples: how many inputs to try.
        settings: hypothesis settings to start from.
        atol, rtol: as for `check_vjp`.

    Raises:
        KeyError: ``op`` has no registered VJP rule and no ``rule`` was given.
    """
    from thunder_ir.passes.vjp import load_vjp_rules

    if rule is None and load_vjp_rules().get(op) is None:
        raise KeyError(f"{op.name} has no VJP rule (pass rule= to check one)")
    strategy = inputs if inputs is not None else op_inputs(op, dtypes=dtypes, for_vjp=True)

    def test(sample: OpSample, seed: int) -> None:
        try:
            check_vjp(op, sample.operands, sample.params, rule=rule, atol=atol, rtol=rtol,
                      seed=seed)
        except AssertionError as e:
            raise _failure("the VJP rule disagrees with torch.autograd", op, sample,
                           e) from e
        except Exception as e:
            e.add_note(f"while checking the VJP rule of {op.name} on {sample!r}")
            raise

    _property(f"check_vjp_of_{op.name}", _key("vjp", op, dtypes, rule, inputs), test,
              {"sample": strategy, "seed": st.integers(0, 2**16 - 1)}, settings,
              max_examples)


# --------------------------------------------------------------------------- strategies

float_dtypes = st.sampled_from([torch.float32, torch.float64, torch.bfloat16])
"""Floating-point dtypes that CPU torch computes in."""

all_dtypes = st.sampled_from([torch.bool, torch.int64, torch.int32, torch.float32,
                              torch.float64, torch.bfloat16])


@st.composite
def shapes(draw: st.DrawFn, min_rank: int = 0, max_rank: int = 4, min_side: int = 1,
           max_side: int = 5) -> tuple[int, ...]:
    """A tensor shape."""
    rank = draw(st.integers(min_rank, max_rank))
    return tuple(draw(st.integers(min_side, max_side)) for _ in range(rank))


@st.composite
def broadcast_shapes(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with ``shape`` (some dims 1, some leading dims dropped)."""
    drop = draw(st.integers(0, len(shape)))
    out = list(shape[drop:])
    for i in range(len(out)):
        if draw(st.booleans()):
            out[i] = 1
    return tuple(out)


@st.composite
def tensors(draw: st.DrawFn, shape: tuple[int, ...] | st.SearchStrategy[tuple[int, ...]] | None
            = None, dtype: torch.dtype | st.SearchStrategy[torch.dtype] | None = None,
            low: float = -3.0, high: float = 3.0) -> torch.Tensor:
    """A tensor with values in ``[low, high]`` (ints: rounded; bool: random)."""
    if shape is None:
        shape = shapes()
    if isinstance(shape, st.SearchStrategy):
        shape = draw(shape)
    if dtype is None:
        dtype = float_dtypes
    if isinstance(dtype, st.SearchStrategy):
        dtype = draw(dtype)
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.5
    x = torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low
    if not is_float(dtype):
        x = x.round()
    return x.to(dtype)


def type_of(value: Any) -> Any:
    """The IR type of a sample value: a tensor's `TensorType`, a Python number's number
    type, a list of types for a list or tuple, None for None."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return [type_of(v) for v in value]
    if isinstance(value, torch.Tensor):
        return type_of_tensor(value)
    if type(value) not in (bool, int, float):
        raise TypeError(f"no IR type for a {type(value).__name__}")
    return number_type(type(value))


def number_of(value: Any) -> Any:
    """The number type of a Python scalar (handy when building programs by hand)."""
    return number_type(type(value))


__all__ = [
    "ATOL",
    "DEFAULT_REFERENCES",
    "RTOL",
    "all_dtypes",
    "broadcast_shapes",
    "build_one_op",
    "check_decomposition",
    "check_decomposition_property",
    "check_vjp",
    "check_vjp_property",
    "compare",
    "decompose",
    "float_dtypes",
    "number_of",
    "shapes",
    "tensors",
    "type_of",
]
