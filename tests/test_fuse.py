"""The ``fuse`` pass: how regions form, and that they stay correct.

Programs are built by hand from prims and fused with a test fusion executor whose kernels
run the region body with the reference interpreter. That keeps the tests fast and checks
the pass and the code generator end to end:

* goldens: dataflow-adjacent ops fuse across an unrelated op in between, siblings fuse,
  constants are cloned in, kernels are numbered per program, small groups stay unfused;
* safety: no cycle where a naive merge would make one, RNG and side effects keep their
  order and nothing crosses them; random programs keep their values and stay well formed;
* training: regions form in the forward and the backward traces of ``jit``; outputs and
  gradients match eager;
* kernels: identical regions compile once (the structural key).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.traits import Pure

import thunder_ir
from thunder_ir.dialects import prims
from thunder_ir.dialects.fusion import RegionOp, claim
from thunder_ir.dialects.program import Program, main_function
from thunder_ir.dialects.traits import computes_nothing
from thunder_ir.dialects.types import number_type, tensor_type
from thunder_ir.lowering.codegen import compile_program
from thunder_ir.lowering.executors import Executor
from thunder_ir.lowering.inductor_executor import region_program
from thunder_ir.lowering.python_printer import print_python
from thunder_ir.lowering.regions import compile_kernels, region_key
from thunder_ir.passes.fuse import FusePass, fuse_block
from thunder_ir.passes.pipeline import verify_module
from thunder_ir.runtime.interpreter import run

F32 = torch.float32
T = tensor_type((4, 8), F32)
W = tensor_type((8, 8), F32)
I64 = number_type(int)
NOT_FUSIBLE = frozenset({"prims.linear", "prims.matmul", "prims.constant"})


class InterpretingFuser(Executor):
    """A fusion executor for tests: fuses pure prims (and the ltorch ops the torch
    executor would run) except matmul/linear; its kernels interpret the region body."""

    name = "test_fuser"
    kernel_prefix = "testFusion"

    def __init__(self) -> None:
        self.compiled: list[str] = []

    @property
    def is_fusion(self) -> bool:
        return True

    def can_fuse(self, op: Operation) -> bool:
        return (
            op.name.startswith(("prims.", "ltorch."))
            and op.has_trait(Pure)
            and op.name not in NOT_FUSIBLE
            and not op.name.startswith(
                (
                    "ltorch.linear",
                    "ltorch.matmul",
                    "ltorch.scaled_dot",
                    "ltorch.embedding",
                    "ltorch.cross_entropy",
                )
            )
        )

    def compile_region(self, region: Operation) -> Callable[..., Any]:
        assert isinstance(region, RegionOp)
        self.compiled.append(region.kernel.data)
        program = region_program(region)
        single = len(region.results) == 1

        def kernel(*args: Any) -> Any:
            outs = run(program, *args)
            return outs[0] if single else tuple(outs)

        return kernel


def make(
    body: Callable[..., Any], arg_types: Sequence[Any] = (T, W), names: Sequence[str] = ("x", "w")
) -> ModuleOp:
    p = Program("computation", list(arg_types), list(names))
    out = body(p.emitter.ns(prims.OPS), *p.args)
    return p.finish(list(out) if isinstance(out, list | tuple) else [out])


def fuse(m: ModuleOp, min_size: int = 2, ex: Executor | None = None) -> ModuleOp:
    FusePass((ex or InterpretingFuser(),), min_size=min_size).apply(Context(), m)
    verify_module(m)
    return m


def top_ops(m: ModuleOp) -> list[Operation]:
    return list(main_function(m).body.block.ops)[:-1]


def regions(m: ModuleOp) -> list[RegionOp]:
    return [op for op in top_ops(m) if isinstance(op, RegionOp)]


def body_names(r: RegionOp) -> list[str]:
    return [op.name for op in r.body.block.ops][:-1]


def seeded_run(module: ModuleOp, *args: Any) -> list[Any]:
    """Runs a program with torch's generator at a fixed seed (its random draws repeat)."""
    torch.manual_seed(0)
    return run(module, *args)


def assert_same_values(before: ModuleOp, after: ModuleOp, args: Sequence[Any]) -> None:
    for a, b in zip(seeded_run(before, *args), seeded_run(after, *args), strict=True):
        torch.testing.assert_close(a, b)


def inputs(*shapes: tuple[int, ...], seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in shapes]


# --------------------------------------------------------------------------- goldens


def test_dataflow_neighbours_fuse_across_an_unrelated_op() -> None:
    def body(P: Any, x: SSAValue, w: SSAValue) -> Any:
        a = P.exp(x)
        m = P.linear(x, w, None)  # unrelated to the chain, in between in program order
        b = P.sin(P.mul(a, P.constant(value=2.0)))
        return [b, P.tanh(m), P.neg(m)]

    m = fuse(make(body))
    assert (
        print_python(m)
        == """\
import torch
from thunder_ir.runtime import namespace as tir
from thunder_ir.runtime.namespace import prims

@tir.no_grad
def computation(x, w):
  # x: "cpu f32[4, 8]"
  # w: "cpu f32[8, 8]"
  t0 = testFusion0(x)
    # t1 = prims.exp(x)  # t1: "cpu f32[4, 8]"
    # t2 = prims.mul(t1, 2.0)  # t2: "cpu f32[4, 8]"
    # t0 = prims.sin(t2)  # t0: "cpu f32[4, 8]"
  t3 = prims.linear(x, w, None)  # t3: "cpu f32[4, 8]"
  (t4, t5) = testFusion1(t3)
    # t4 = prims.tanh(t3)  # t4: "cpu f32[4, 8]"
    # t5 = prims.neg(t3)  # t5: "cpu f32[4, 8]"
  return (t0, t4, t5)
"""
    )
    assert_same_values(make(body), m, inputs((4, 8), (8, 8)))


def test_a_region_prints_as_its_own_function_or_through_region_program() -> None:
    """A region whose body reads only its arguments prints as a function straight from
    the body, exactly as `region_program` (which clones the body into a program) prints;
    one whose body reads a value from outside (CSE may merge a cloned constant with one
    outside) is not self-contained, and its function comes from `region_program`,
    which recomputes that value. Both compute the region's values."""
    from thunder_ir.lowering.inductor_executor import _self_contained, region_function

    def body(P: Any, x: SSAValue, w: SSAValue) -> Any:
        a = P.exp(x)
        m = P.linear(x, w, None)
        return [P.sin(P.mul(a, P.constant(value=2.0))), P.tanh(m), P.neg(m)]

    m = fuse(make(body))
    args = inputs((4, 8), (8, 8))
    x = args[0]
    for region in regions(m):
        assert _self_contained(region)
        assert print_python(region, free_after_last_use=True) == print_python(
            region_program(region), free_after_last_use=True)
    first = regions(m)[0]
    torch.testing.assert_close(region_function(first)(x), (x.exp() * 2.0).sin())

    # the body's constant swapped for an equal one outside the region
    const = next(op for op in first.body.block.ops if isinstance(op, prims.ConstantOp))
    outside = const.clone()
    first.parent_block().insert_op_before(outside, first)
    const.results[0].replace_all_uses_with(outside.results[0])
    assert not _self_contained(first)
    torch.testing.assert_close(region_function(first)(x), (x.exp() * 2.0).sin())


def test_region_moves_after_an_input_defined_later_in_program_order() -> None:
    def body(P: Any, x: SSAValue, w: SSAValue) -> Any:
        a = P.exp(x)  # first in program order
        m = P.linear(x, w, None)
        b = P.add(P.cos(a), m)  # joins a's chain, so the region must follow the linear
        return [b]

    m = fuse(make(body))
    assert [op.name for op in top_ops(m)] == ["prims.linear", "fusion.region"]
    assert body_names(regions(m)[0]) == ["prims.exp", "prims.cos", "prims.add"]
    assert_same_values(make(body), m, inputs((4, 8), (8, 8)))


def test_constants_are_cloned_into_regions() -> None:
    def body(P: Any, x: SSAValue, w: SSAValue) -> Any:
        two = P.constant(value=2.0)
        a = P.add(P.mul(x, two), two)
        return [P.linear(a, w, None), P.mul(w, two)]  # two is also read outside

    m = fuse(make(body), min_size=1)
    r0, r1 = regions(m)
    assert all(v.type == T for v in r0.inputs) and len(r0.inputs) == 1  # x only
    assert body_names(r0)[0] == "prims.constant"
    assert body_names(r1)[0] == "prims.constant"
    consts = [op for op in top_ops(m) if isinstance(op, prims.ConstantOp)]
    assert consts == []  # only regions read it now
    assert_same_values(make(body), m, inputs((4, 8), (8, 8)))


def test_kernels_are_numbered_per_program_and_small_groups_stay_unfused() -> None:
    def body(P: Any, x: SSAValue, w: SSAValue) -> Any:
        a = P.exp(P.exp(x))
        b = P.linear(a, w, None)
        c = P.reshape(P.neg(b), shape=(32,))  # one op that computes: left unfused
        d = P.linear(a, w, None)
        return [c, P.tanh(P.sin(d))]

    m = fuse(make(body))
    assert [r.kernel.data for r in regions(m)] == ["testFusion0", "testFusion1"]
    assert [op.name for op in top_ops(m)].count("prims.neg") == 1
    fuse(m, min_size=1)  # fusing again: the new region gets a fresh number
    assert [r.kernel.data for r in regions(m)] == ["testFusion0", "testFusion2", "testFusion1"]


def test_claimed_ops_stay_whole_unless_claimed_by_the_torch_fallback() -> None:
    def body(P: Any, x: SSAValue, w: SSAValue) -> Any:
        a, b = P.exp(x), P.sin(x)
        return [P.tanh(a), P.cos(b)]

    m = make(body)
    ops = top_ops(m)
    claim(ops[0], "torch")
    claim(ops[1], "my_executor")
    fuse(m, min_size=1)
    fused = [n for r in regions(m) for n in body_names(r)]
    assert "prims.exp" in fused and "prims.sin" not in fused


def test_executors_are_tried_in_priority_order() -> None:
    class TrigFuser(InterpretingFuser):
        name = "trig_fuser"
        kernel_prefix = "trigFusion"

        def can_fuse(self, op: Operation) -> bool:
            return op.name in ("prims.sin", "prims.cos")

    def body(P: Any, x: SSAValue, w: SSAValue) -> Any:
        a = P.cos(P.sin(x))
        return [P.sin(P.exp(P.neg(a)))]

    m = make(body)
    FusePass((TrigFuser(), InterpretingFuser())).apply(Context(), m)
    verify_module(m)
    got = [(r.kernel.data, r.executor.data, body_names(r)) for r in regions(m)]
    assert got == [
        ("trigFusion0", "trig_fuser", ["prims.sin", "prims.cos"]),
        ("testFusion0", "test_fuser", ["prims.neg", "prims.exp"]),
    ]  # the last sin alone is below the minimum size


# --------------------------------------------------------------------------- safety


def test_no_cycle_where_a_naive_merge_would_make_one() -> None:
    # a -> linear (not fusible) -> b, and a -> b: {a, b} in one region would both feed and
    # depend on the linear.
    def body(P: Any, x: SSAValue, w: SSAValue) -> Any:
        a = P.exp(P.neg(x))
        y = P.linear(a, w, None)
        return [P.add(P.sin(a), P.cos(y))]

    m = fuse(make(body))
    names = [op.name for op in top_ops(m)]
    assert names == ["fusion.region", "prims.linear", "fusion.region"]
    first, second = regions(m)
    assert body_names(first) == ["prims.neg", "prims.exp"]
    assert body_names(second) == ["prims.sin", "prims.cos", "prims.add"]
    assert_same_values(make(body), m, inputs((4, 8), (8, 8)))


def _rng_program(P: Any, x: SSAValue, w: SSAValue, seed: SSAValue, off: SSAValue) -> Any:
    a = P.exp(x)
    b = P.sin(a)
    u1 = P.bernoulli(shape=(4, 8), p=0.5, device="cpu", dtype=F32)
    c = P.mul(P.cos(a), u1)  # after the draw: may not join {a, b}
    u2 = P.bernoulli(shape=(4, 8), p=0.5, device="cpu", dtype=F32)
    d = P.add(P.tanh(b), u2)
    return [c, d, P.neg(P.exp(b))]


def test_rng_keeps_its_order_and_nothing_crosses_it() -> None:
    def build() -> ModuleOp:
        return make(_rng_program, (T, W, I64, I64), ("x", "w", "seed", "off"))

    before = build()
    seg_before = _segments(before)
    m = fuse(build(), min_size=1)
    ops = top_ops(m)
    assert sum(isinstance(op, prims.BernoulliOp) for op in ops) == 2
    assert not any(isinstance(o, prims.BernoulliOp) for r in regions(m) for o in r.walk())
    assert _segments(m) == seg_before
    assert_same_values(before, m, [*inputs((4, 8), (8, 8)), 7, 3])


def _segments(m: ModuleOp) -> list[list[str]]:
    """Per stretch between RNG ops, the sorted names of the prims computed there (views,
    which compute nothing, left out: a region may hold a copy of a returned view's)."""
    out: list[list[str]] = [[]]
    for op in top_ops(m):
        if isinstance(op, prims.BernoulliOp):
            out.append([])
        else:
            out[-1].extend(o.name for o in op.walk()
                           if o.name.startswith("prims.") and not computes_nothing(o))
    return [sorted(s) for s in out]


_UNARY = ("exp", "sin", "cos", "tanh", "neg", "abs")
_BINARY = ("add", "mul", "sub", "maximum")


def _random_program(rng: random.Random, n: int) -> ModuleOp:
    def body(P: Any, x: SSAValue, w: SSAValue, seed: SSAValue, off: SSAValue) -> Any:
        vals = [x, P.exp(w)]
        for _ in range(n):
            r = rng.random()
            a, b = rng.choice(vals), rng.choice(vals)
            if r < 0.12:
                v = P.linear(a, b, None)
            elif r < 0.18:
                v = P.mul(
                    a,
                    P.bernoulli(shape=(8, 8), p=0.5, device="cpu", dtype=F32),
                )
            elif r < 0.25:
                v = P.broadcast_in_dim(P.amax(a, dims=(1,)), shape=(8, 8), broadcast_dims=(0,))
            elif r < 0.6:
                v = getattr(P, rng.choice(_UNARY))(a)
            elif r < 0.7:
                v = P.mul(a, P.constant(value=0.5))
            else:
                v = getattr(P, rng.choice(_BINARY))(a, b)
            vals.append(v)
        return [vals[-1], *rng.sample(vals[2:], 3)]

    sq = tensor_type((8, 8), F32)
    return make(body, (sq, sq, I64, I64), ("x", "w", "seed", "off"))


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_keep_their_values_and_rng_order(seed: int) -> None:
    before = _random_program(random.Random(seed), 40)
    after = _random_program(random.Random(seed), 40)
    fuse(after, min_size=1 + seed % 2)
    assert regions(after)
    assert _segments(after) == _segments(before)
    args = [*inputs((8, 8), (8, 8), seed=seed), 11, 5]
    for a, b in zip(seeded_run(before, *args), seeded_run(after, *args), strict=True):
        torch.testing.assert_close(a, b, equal_nan=True)
    fn, _ = compile_program(after, compile_kernels(after, [InterpretingFuser()]))
    expected = seeded_run(before, *args)
    torch.manual_seed(0)
    out = fn(*args)
    for a, b in zip(expected, out if isinstance(out, tuple) else [out], strict=True):
        torch.testing.assert_close(a, b, equal_nan=True)


def test_fusing_a_10k_op_program_is_fast() -> None:
    rng = random.Random(0)
    m = _random_program(rng, 8200)
    n = len(top_ops(m))
    assert n >= 10_000
    t = time.perf_counter()
    made = fuse_block(main_function(m).body.block, [InterpretingFuser()])
    dt = time.perf_counter() - t
    assert made
    assert dt < 5.0, f"fuse took {dt:.2f} s for {n} ops"  # about 0.3 s when quiet


# --------------------------------------------------------------------------- kernels


def test_identical_regions_compile_once() -> None:
    def body(P: Any, x: SSAValue, w: SSAValue) -> Any:
        outs = []
        h = x
        for _ in range(3):  # three "layers" of the same shape
            h = P.linear(P.tanh(P.mul(h, P.constant(value=0.5))), w, None)
            outs.append(h)
        return outs

    m = fuse(make(body))
    assert len(regions(m)) == 3
    assert len({region_key(r) for r in regions(m)}) == 1
    ex = InterpretingFuser()
    kernels = compile_kernels(m, [ex])
    assert sorted(kernels) == ["testFusion0", "testFusion1", "testFusion2"]
    assert ex.compiled == ["testFusion0"]
    compile_kernels(m, [ex])  # a second program with the same regions: cached too
    assert ex.compiled == ["testFusion0"]
    fn, _ = compile_program(m, kernels)
    args = inputs((4, 8), (8, 8))
    for a, b in zip(fn(*args), run(make(body), *args), strict=True):
        torch.testing.assert_close(a, b)


# --------------------------------------------------------------------------- jit


def _kernel_calls(source: str) -> list[str]:
    return re.findall(r"^  (?:\(.*\)|\w+) = (testFusion\d+)\(", source, flags=re.M)


def test_regions_in_forward_and_backward_of_a_training_function() -> None:
    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.linear(torch.tanh(x) * 2.0 + 1.0, w)
        s = torch.softmax(h, dim=-1) * torch.sigmoid(h + b)
        return (s.exp() * h).sum(-1)

    ex = InterpretingFuser()
    jf = thunder_ir.jit(f, executors=[ex])
    x, w, b = inputs((6, 8), (5, 8), (5,), seed=1)
    args = [t.clone().requires_grad_() for t in (x, w, b)]
    out = jf(*args)
    out.sum().backward()
    ref_args = [t.clone().requires_grad_() for t in (x, w, b)]
    ref = f(*ref_args)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    for a, r in zip(args, ref_args, strict=True):
        torch.testing.assert_close(a.grad, r.grad)
    fwd = str(thunder_ir.last_traces(jf)[-1])
    bwd = str(thunder_ir.last_backward_traces(jf)[-1])
    assert _kernel_calls(fwd) and _kernel_calls(bwd)
    assert "    # " in fwd  # the region's prims print as comments beneath its call


def test_llama_mlp_and_block_train_like_eager() -> None:
    from models import Block, Config, LLaMAMLP

    torch.manual_seed(0)
    cfg = Config(n_embd=32, n_head=4, n_query_groups=2, intermediate_size=48, block_size=8)
    for model, make_args in (
        (LLaMAMLP(32, 48), lambda: (torch.randn(2, 8, 32),)),
        (Block(cfg), lambda: (torch.randn(2, 8, 32), torch.randn(8, 8), torch.randn(8, 8))),
    ):
        args = make_args()
        jm = thunder_ir.jit(model, executors=[InterpretingFuser()])
        out = jm(*args)
        out.square().sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        model.zero_grad()
        ref = model(*args)
        ref.square().sum().backward()
        torch.testing.assert_close(out, ref)
        for n, p in model.named_parameters():
            torch.testing.assert_close(grads[n], p.grad, msg=n)
        assert _kernel_calls(str(thunder_ir.last_backward_traces(jm)[-1]))


def test_a_check_cuts_no_segment_but_keeps_its_order_with_effects() -> None:
    """A call whose one effect is raising eager's error (``setitem`` with a tensor
    index, `passes.fuse.only_checks`): pure ops on both sides of it join one region, and
    it stays between the draws around it."""
    from thunder_ir.dialects.base import OperandRef
    from thunder_ir.dialects.torch import CallOp, make_call, runtime_callee

    idx_t = tensor_type((4,), torch.int64)

    def build() -> ModuleOp:
        p = Program("computation", [T, idx_t], ["x", "idx"])
        P = p.emitter.ns(prims.OPS)
        x, idx = p.args
        u0 = P.bernoulli(shape=(4, 8), p=0.5, device="cpu", dtype=F32)
        a = P.exp(x)
        chk = p.emitter.insert(make_call(
            runtime_callee("setitem"), [x, idx, a], [OperandRef(0), OperandRef(1),
                                                     OperandRef(2)], result_types=[T]))
        c = P.tanh(P.cos(a))  # after the check, independent of it
        u1 = P.bernoulli(shape=(4, 8), p=0.5, device="cpu", dtype=F32)
        return p.finish([c, P.mul(chk.results[0], P.add(u0, u1))])

    before = build()
    m = fuse(build(), min_size=1)
    regs = regions(m)
    assert any({"prims.exp", "prims.cos", "prims.tanh"} <= set(body_names(r)) for r in regs)
    order = [type(op).__name__ for op in top_ops(m)
             if isinstance(op, CallOp | prims.BernoulliOp)]
    assert order == ["BernoulliOp", "CallOp", "BernoulliOp"], order
    args = [*inputs((4, 8)), torch.tensor([3, 0, 2, 1])]
    assert_same_values(before, m, args)
