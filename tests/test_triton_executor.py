"""The Triton executor on the CPU, through Triton's interpreter (``TRITON_INTERPRET=1``).

* Generated kernels against the prims reference interpreter and eager torch: elementwise
  regions with broadcasts, casts, bools and numbers; softmax, layer_norm and rms_norm
  forward and backward (their decompositions and VJP rules wrapped into one region);
  row and column reductions; ltorch ops inside a region.
* Snapshots of the generated source (``tests/snapshots/triton``): a refactor that means
  to change nothing shows no diff. ``THUNDER_IR_UPDATE_SNAPSHOTS=1`` rewrites them.
* The hand-written cross-entropy kernel, forward and backward, and its claim, lowering and
  VJP rule.
* ``thunder_ir.jit(fn, executors=["triton"])`` end to end, forward and backward.

The interpreter runs one program at a time in numpy: shapes stay tiny. It also rounds
float32 to bfloat16 by truncation, so bfloat16 results get a tolerance of two ulps.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("triton", reason="the Triton executor needs the triton package")

import torch
import torch.nn.functional as F
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Region, SSAValue

import thunder_ir
from thunder_ir.dialects import ltorch_activation as A
from thunder_ir.dialects import ltorch_nn as N
from thunder_ir.dialects import prims as P
from thunder_ir.dialects.base import Emitter
from thunder_ir.dialects.fusion import RegionOp, YieldOp
from thunder_ir.dialects.program import Program, main_function
from thunder_ir.dialects.torch import CallOp
from thunder_ir.dialects.types import number_type, tensor_type, type_of_tensor
from thunder_ir.lowering.executors import get_default_executors, get_executor
from thunder_ir.lowering.triton_codegen import MAX_REDUCTION, plan
from thunder_ir.lowering.triton_executor import TritonExecutor
from thunder_ir.passes.vjp import Grad, load_vjp_rules
from thunder_ir.runtime.interpreter import run_block
from thunder_ir.testing import build_one_op, decompose

# A module imported before this file set TRITON_INTERPRET holds compiled-mode kernels.
if "thunder_ir.lowering.triton_kernels" in sys.modules:
    importlib.reload(sys.modules["thunder_ir.lowering.triton_kernels"])
from thunder_ir.lowering import triton_kernels as K

SNAPSHOTS = Path(__file__).parent / "snapshots" / "triton"
EX = get_executor("triton")
assert isinstance(EX, TritonExecutor)


# --------------------------------------------------------------------------- helpers


def region_of(module: ModuleOp, kernel: str = "tritonFusion0") -> RegionOp:
    """Every op of the program's function, moved into one ``fusion.region``."""
    fn = main_function(module)
    block = fn.body.block
    ret = block.last_op
    assert ret is not None
    body = Block(arg_types=[a.type for a in block.args])
    mapping: dict[SSAValue, SSAValue] = dict(zip(block.args, body.args))
    for op in block.ops:
        if op is not ret:
            body.add_op(op.clone(value_mapper=mapping))
    body.add_op(YieldOp.create(operands=[mapping[v] for v in ret.operands]))
    region = RegionOp.create(
        operands=list(block.args), result_types=[v.type for v in ret.operands],
        properties={"executor": StringAttr("triton"), "kernel": StringAttr(kernel)},
        regions=[Region(body)])
    region.verify()
    return region


def prims_region(arg_types: Sequence[Any], body: Callable[..., list[SSAValue]],
                 kernel: str = "tritonFusion0") -> RegionOp:
    """A region built by ``body(p, *args)`` with ``p.<prim>(...)`` (``p.c(v)``: a constant)."""
    prog = Program("f", list(arg_types))
    p = prog.emitter.ns(P.OPS)
    p.c = lambda v: p.constant(value=v)  # type: ignore[attr-defined]
    module = prog.finish(body(p, *prog.args))
    module.verify()
    return region_of(module, kernel)


def run(region: RegionOp, *inputs: Any) -> list[Any]:
    """The region's Triton launcher on ``inputs``; its outputs as a list."""
    out = EX.compile_region(region)(*inputs)
    return list(out) if isinstance(out, tuple) else [out]


def reference(region: RegionOp, *inputs: Any) -> list[Any]:
    """The region's body run op by op with the prims' torch references."""
    return list(run_block(region.body.block, list(inputs)))


def close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    if got.dtype == torch.bool:
        assert torch.equal(got, want)
        return
    tol = 2e-2 if got.dtype in (torch.bfloat16, torch.float16) else 2e-5
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol, equal_nan=True)


def check_region(region: RegionOp, *inputs: Any) -> list[Any]:
    """Generated kernels agree with the reference interpreter; no interpreter fallback."""
    n = len(EX.fallbacks)
    got = run(region, *inputs)
    assert len(EX.fallbacks) == n, EX.fallbacks[n:]
    for g, w in zip(got, reference(region, *inputs), strict=True):
        close(g, w)
    return got


def vjp_region(op: type, tensors: list[torch.Tensor], params: dict[str, Any],
               seed: int = 0) -> tuple[RegionOp, list[torch.Tensor]]:
    """The op's VJP rule (ltorch) decomposed into prims, wrapped into one region:
    ``(inputs..., cotangent) -> gradients``."""
    gen = torch.Generator().manual_seed(seed)
    out_t = op.infer(*[type_of_tensor(t) for t in tensors],
                     *([None] * (len(op.operand_layout()) - len(tensors))), **params)
    ct = torch.randn(out_t.sizes, generator=gen).to(out_t.dtype)
    prog = Program("vjp", [type_of_tensor(t) for t in [*tensors, ct]])
    e = prog.emitter
    grouped: list[Any] = list(prog.args[:len(tensors)])
    grouped += [None] * (len(op.operand_layout()) - len(grouped))
    res = e.emit(op, *grouped, **params)
    grads = load_vjp_rules()[op](Grad(e), [res], [prog.args[-1]], *grouped, **params)
    module = prog.finish([g for g in grads if g is not None])
    decompose(module)
    return region_of(module), [*tensors, ct]


def decomposed_region(op: type, tensors: list[Any], params: dict[str, Any]) -> RegionOp:
    module, _ = build_one_op(op, tensors, params)
    return region_of(decompose(module))


# --------------------------------------------------------------------------- regions


def _pointwise(p: Any, x: SSAValue, y: SSAValue, s: SSAValue) -> list[SSAValue]:
    """bf16 (3,1,5) and f32 (5,) broadcast to (3,4,5); relu, scale, tanh; a bool mask;
    a transposed second output."""
    xf = p.convert_element_type(x, dtype=torch.float32)
    xb = p.broadcast_in_dim(xf, shape=(3, 4, 5), broadcast_dims=(0, 1, 2))
    yb = p.broadcast_in_dim(y, shape=(3, 4, 5), broadcast_dims=(2,))
    z = p.add(xb, yb)
    pos = p.gt(z, p.c(0.0))
    r = p.where(pos, z, p.c(0.0))
    e = p.mul(r, s)
    h = p.convert_element_type(p.tanh(e), dtype=torch.bfloat16)
    return [h, pos, p.transpose(e, permutation=(2, 0, 1))]


POINTWISE_TYPES = [tensor_type((3, 1, 5), torch.bfloat16), tensor_type((5,), torch.float32),
                   number_type(float)]


def _softmax_bf16(p: Any, x: SSAValue) -> list[SSAValue]:
    """softmax over the last dim of a bf16 (4, 8), computed in f32."""
    xf = p.convert_element_type(x, dtype=torch.float32)
    m = p.broadcast_in_dim(p.amax(xf, dims=(1,)), shape=(4, 8), broadcast_dims=(0,))
    e = p.exp(p.sub(xf, m))
    s = p.broadcast_in_dim(p.sum(e, dims=(1,)), shape=(4, 8), broadcast_dims=(0,))
    return [p.convert_element_type(p.div(e, s), dtype=torch.bfloat16)]


def _norm_backward(p: Any, x: SSAValue, g: SSAValue, w: SSAValue) -> list[SSAValue]:
    """layer_norm backward on (6, 8): dx needs row statistics, dw and db sum columns."""
    def rows(v: SSAValue) -> SSAValue:  # mean over the last dim, broadcast back
        mean = p.div(p.sum(v, dims=(1,)), p.c(8.0))
        return p.broadcast_in_dim(mean, shape=(6, 8), broadcast_dims=(0,))

    xc = p.sub(x, rows(x))
    rstd = p.rsqrt(p.add(rows(p.mul(xc, xc)), p.c(1e-5)))
    xhat = p.mul(xc, rstd)
    gw = p.mul(g, p.broadcast_in_dim(w, shape=(6, 8), broadcast_dims=(1,)))
    dx = p.mul(rstd, p.sub(p.sub(gw, rows(gw)), p.mul(xhat, rows(p.mul(gw, xhat)))))
    return [dx, p.sum(p.mul(g, xhat), dims=(0,)), p.sum(g, dims=(0,))]


NORM_BACKWARD_TYPES = [tensor_type((6, 8), torch.float32)] * 2 + [tensor_type((8,),
                                                                              torch.float32)]


def test_pointwise_broadcasts_casts_bools_numbers() -> None:
    region = prims_region(POINTWISE_TYPES, _pointwise)
    sched = plan(region.body.block, "k")
    assert [(k.shape, k.reduced) for k in sched.kernels] == [((3, 4, 5), ()), ((5, 3, 4), ())]
    x = torch.randn(3, 1, 5).bfloat16()
    y = torch.randn(5)
    h, pos, moved = check_region(region, x, y, 0.7)
    z = x.float() + y
    close(h, torch.tanh(z.relu() * 0.7).expand(3, 4, 5).bfloat16())
    assert torch.equal(pos, (z > 0).expand(3, 4, 5))
    close(moved, (z.relu() * 0.7).expand(3, 4, 5).permute(2, 0, 1))


def test_int_and_bool_ops() -> None:
    def body(p: Any, a: SSAValue, b: SSAValue) -> list[SSAValue]:
        e = p.logical_and(p.gt(p.add(a, p.c(3)), p.c(4)), b)
        f = p.where(e, a, p.c(-1))
        return [p.convert_element_type(f, dtype=torch.float32), p.bitwise_xor(b, e), f,
                p.convert_element_type(p.convert_element_type(a, dtype=torch.bool),
                                       dtype=torch.int32)]

    region = prims_region([tensor_type((2, 5), torch.int64), tensor_type((2, 5), torch.bool)],
                          body)
    a = torch.arange(10).reshape(2, 5) - 2
    b = torch.tensor([True, False] * 5).reshape(2, 5)
    g, h, f, z = check_region(region, a, b)
    e = (a + 3 > 4) & b
    assert torch.equal(f, torch.where(e, a, -1)) and torch.equal(g, f.float())
    assert torch.equal(h, b ^ e) and torch.equal(z, (a != 0).int())


def test_softmax_bf16_region() -> None:
    region = prims_region([tensor_type((4, 8), torch.bfloat16)], _softmax_bf16)
    x = torch.randn(4, 8).bfloat16()
    (got,) = check_region(region, x)
    close(got, torch.softmax(x.float(), -1).bfloat16())


def test_norm_backward_region_stores_row_statistics_for_column_sums() -> None:
    region = prims_region(NORM_BACKWARD_TYPES, _norm_backward)
    sched = plan(region.body.block, "k")
    assert [k.reduced for k in sched.kernels] == [(1,), (0,)]  # rows, then columns
    assert len(sched.kernels[0].stores) == 3  # dx and the two row sums the columns need
    x, g, w = torch.randn(6, 8), torch.randn(6, 8), torch.randn(8)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    br = torch.zeros(8, requires_grad=True)
    F.layer_norm(xr, (8,), wr, br).backward(g)
    dx, dw, db = check_region(region, x, g, w)
    for got, want in ((dx, xr.grad), (dw, wr.grad), (db, br.grad)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_chained_reductions_across_kernels() -> None:
    """Column sums, then row sums of the centered input, then column sums again: three
    kernels, each storing what the next reads; a dead reduction gets no kernel."""
    def body(p: Any, x: SSAValue) -> list[SSAValue]:
        q = p.broadcast_in_dim(p.sum(x, dims=(0,)), shape=(4, 8), broadcast_dims=(1,))
        r = p.sum(p.sub(x, q), dims=(1,))
        p.amax(x, dims=(0, 1))  # unused
        z = p.mul(x, p.broadcast_in_dim(r, shape=(4, 8), broadcast_dims=(0,)))
        return [p.sum(z, dims=(0,)), p.exp(x)]

    region = prims_region([tensor_type((4, 8), torch.float32)], body)
    sched = plan(region.body.block, "k")
    assert [k.reduced for k in sched.kernels] == [(0,), (1,), (0,)]
    x = torch.randn(4, 8)
    got, _ = check_region(region, x)
    torch.testing.assert_close(got, (x * (x - x.sum(0)).sum(1, keepdim=True)).sum(0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_decomposed_forward(case: str, dtype: torch.dtype) -> None:
    x = torch.randn(4, 3, 8, dtype=dtype)
    w, b = torch.randn(3, 8, dtype=dtype), torch.randn(3, 8, dtype=dtype)
    op, args, params, eager = {
        "softmax": (N.SoftmaxOp, [x], {"dim": -1}, lambda: torch.softmax(x, -1)),
        "log_softmax": (N.LogSoftmaxOp, [x], {"dim": 1}, lambda: torch.log_softmax(x, 1)),
        "layer_norm": (N.LayerNormOp, [x, w, b], {"normalized_shape": (3, 8), "eps": 1e-5},
                       lambda: F.layer_norm(x, (3, 8), w, b)),
        "rms_norm": (N.RmsNormOp, [x, w[0]], {"normalized_shape": (8,), "eps": 1e-6},
                     lambda: F.rms_norm(x, (8,), w[0], 1e-6)),
    }[case]
    region = decomposed_region(op, args, params)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    (got,) = check_region(region, *tensors)
    close(got, eager())


@pytest.mark.parametrize("case", ["softmax", "layer_norm", "rms_norm_bf16"])
def test_decomposed_backward(case: str) -> None:
    x = torch.randn(5, 8)
    w, b = torch.randn(8), torch.randn(8)
    op, args, params = {
        "softmax": (N.SoftmaxOp, [x], {"dim": -1}),
        "layer_norm": (N.LayerNormOp, [x, w, b], {"normalized_shape": (8,), "eps": 1e-5}),
        "rms_norm_bf16": (N.RmsNormOp, [x.bfloat16(), w.bfloat16()],
                          {"normalized_shape": (8,), "eps": 1e-6}),
    }[case]
    region, inputs = vjp_region(op, args, params)
    assert any(k.is_reduction for k in plan(region.body.block, "k").kernels)
    grads = check_region(region, *inputs)
    # Against torch.autograd of the op itself, in float32.
    req = [t.float().requires_grad_() for t in args]
    out = op.ref(*req, *([None] * (len(op.operand_layout()) - len(req))), **params)
    want = torch.autograd.grad(out, req, inputs[-1].float())
    for g, w_ in zip(grads, want, strict=True):
        tol = 3e-2 if g.dtype == torch.bfloat16 else 1e-5
        torch.testing.assert_close(g.float(), w_, rtol=tol, atol=tol)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy, inside the interpreter
def test_reductions_nan_var_and_math_helpers() -> None:
    """amax/amin propagate NaN as torch does; var with a correction; tanh, expm1, log1p
    keep their accuracy near 0; reductions over leading and trailing dims of a 3-D input."""
    t = tensor_type((2, 3, 4), torch.float32)

    def body(p: Any, x: SSAValue) -> list[SSAValue]:
        return [p.amax(x, dims=(2,)), p.amin(x, dims=(0, 2)), p.var(x, dims=(0, 1),
                                                                    correction=1.0),
                p.tanh(x), p.expm1(x), p.log1p(p.abs(x)), p.sum(x, dims=(0, 1, 2))]

    region = prims_region([t], body)
    x = torch.randn(2, 3, 4) * torch.tensor([1.0, 1e-3, 1e-7, 30.0])
    x[1, 2, 1] = float("nan")
    got = check_region(region, x)
    assert torch.isnan(got[0][1, 2]) and not torch.isnan(got[0][0]).any()
    for g, want in zip(got[3:6], (torch.tanh(x), torch.expm1(x), torch.log1p(x.abs()))):
        torch.testing.assert_close(g, want, rtol=2e-6, atol=0.0, equal_nan=True)


def test_ltorch_ops_inside_a_region_are_decomposed() -> None:
    prog = Program("f", [tensor_type((3, 8), torch.float32)])
    e = prog.emitter
    y = e.emit(N.SoftmaxOp, prog.args[0], dim=-1)
    module = prog.finish([e.emit(A.GeluOp, y, approximate="tanh")])
    assert all(EX.can_fuse(op) for op in main_function(module).body.block.ops
               if not op.name.startswith("func."))
    region = region_of(module)
    x = torch.randn(3, 8)
    (got,) = check_region(region, x)
    close(got, F.gelu(torch.softmax(x, -1), approximate="tanh"))


def test_kernels_are_cached_by_structure() -> None:
    t = [tensor_type((4, 8), torch.bfloat16)]
    a = EX.compile_region(prims_region(t, _softmax_bf16, "tritonFusion7"))
    b = EX.compile_region(prims_region(t, _softmax_bf16, "tritonFusion8"))
    other = EX.compile_region(prims_region([tensor_type((2, 8), torch.bfloat16)],
                                           lambda p, x: [p.exp(x), p.neg(x)]))
    assert a is b and a is not other


def test_unschedulable_region_falls_back_to_the_interpreter() -> None:
    t = tensor_type((6,), torch.float32)
    region = prims_region([t], lambda p, x: [p.reshape(p.exp(x), shape=(2, 3))])
    n = len(EX.fallbacks)
    with pytest.warns(RuntimeWarning, match="reference interpreter"):
        fn = EX.compile_region(region)
    assert len(EX.fallbacks) == n + 1
    x = torch.randn(6)
    torch.testing.assert_close(fn(x), x.exp().reshape(2, 3))


def test_can_fuse(monkeypatch: pytest.MonkeyPatch) -> None:
    def one(types: Sequence[Any], body: Callable[..., SSAValue]) -> Any:
        prog = Program("f", list(types))
        p = prog.emitter.ns(P.OPS)
        return body(p, *prog.args).owner

    f32, f64 = tensor_type((4, 8), torch.float32), tensor_type((4, 8), torch.float64)
    i64 = tensor_type((4, 8), torch.int64)
    assert EX.can_fuse(one([f32], lambda p, x: p.exp(x)))
    assert not EX.can_fuse(one([f64], lambda p, x: p.exp(x)))
    assert EX.can_fuse(one([i64], lambda p, x: p.add(x, x)))
    assert not EX.can_fuse(one([i64], lambda p, x: p.div(x, x)))  # int division: torch's
    assert EX.can_fuse(one([f32], lambda p, x: p.pow(x, p.constant(value=2.0))))
    assert not EX.can_fuse(one([f32, number_type(float)], lambda p, x, n: p.pow(x, n)))
    big = tensor_type((2, MAX_REDUCTION + 1), torch.float32)
    assert not EX.can_fuse(one([big], lambda p, x: p.sum(x, dims=(1,))))
    assert not EX.can_fuse(one([f32], lambda p, x: p.reshape(x, shape=(8, 4))))
    assert EX.can_fuse(one([f32], lambda p, x: p.reshape(x, shape=(4, 1, 8))))
    cuda = tensor_type((4, 8), torch.float32, "cuda:0")
    assert EX.can_fuse(one([cuda], lambda p, x: p.exp(x)))
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not EX.can_fuse(one([f32], lambda p, x: p.exp(x)))  # the CPU needs the interpreter
    assert EX.is_available() == torch.cuda.is_available()


def test_registration() -> None:
    assert EX.name == "triton" and EX.kernel_prefix == "tritonFusion" and EX.is_fusion
    assert EX.is_available()
    assert (EX in get_default_executors()) == torch.cuda.is_available()


# --------------------------------------------------------------------------- snapshots


@pytest.mark.parametrize("name", ["pointwise_bf16", "softmax_bf16", "norm_backward"])
def test_generated_source_snapshot(name: str) -> None:
    types, body = {"pointwise_bf16": (POINTWISE_TYPES, _pointwise),
                   "softmax_bf16": ([tensor_type((4, 8), torch.bfloat16)], _softmax_bf16),
                   "norm_backward": (NORM_BACKWARD_TYPES, _norm_backward)}[name]
    source = EX.source(prims_region(types, body)).source
    path = SNAPSHOTS / f"{name}.py"
    if os.environ.get("THUNDER_IR_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    assert path.exists(), f"no snapshot {path}; run with THUNDER_IR_UPDATE_SNAPSHOTS=1"
    assert source == path.read_text(), (
        f"generated source differs from {path}; if the change is meant, rerun with "
        "THUNDER_IR_UPDATE_SNAPSHOTS=1 and review the diff")


# --------------------------------------------------------------------------- symbolic sizes


def _symbolic_rows(p: Any, x: SSAValue, w: SSAValue) -> list[SSAValue]:
    """(s0, s1, 8) rows: an RMS norm over the last dim times ``w``; column sums of the
    result over the symbolic dims; a transposed copy."""
    n, t, _ = x.type.sizes
    ms = p.div(p.sum(p.mul(x, x), dims=(2,)), p.c(8.0))
    r = p.broadcast_in_dim(p.rsqrt(p.add(ms, p.c(1e-6))), shape=(n, t, 8),
                           broadcast_dims=(0, 1))
    y = p.mul(p.mul(x, r), p.broadcast_in_dim(w, shape=(n, t, 8), broadcast_dims=(2,)))
    return [y, p.sum(y, dims=(0, 1)), p.transpose(y, permutation=(2, 0, 1))]


def _with_symbols(fn: Callable[[Any, Any], Any], n: int = 3, t: int = 5) -> Any:
    """``fn(s0, s1)`` inside a symbolic compilation whose sizes ``s0``, ``s1`` were traced
    as ``n`` and ``t``."""
    from thunder_ir.dialects.symbols import SymbolSource, SymbolTable

    table = SymbolTable()
    with table.active():
        return fn(table.size(n, SymbolSource(0, 0)), table.size(t, SymbolSource(0, 1)))


def _symbolic_region(kernel: str = "tritonFusion0") -> RegionOp:
    return _with_symbols(lambda s0, s1: prims_region(
        [tensor_type((s0, s1, 8), torch.float32), tensor_type((8,), torch.float32)],
        _symbolic_rows, kernel))


def _check_symbolic_rows(fn: Callable[..., Any], n: int, t: int) -> None:
    gen = torch.Generator().manual_seed(n * 100 + t)
    x, w = torch.randn(n, t, 8, generator=gen), torch.randn(8, generator=gen)
    y, cols, moved = fn(x, w)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(y, want)
    torch.testing.assert_close(cols, want.sum((0, 1)))
    torch.testing.assert_close(moved, want.permute(2, 0, 1))


def test_symbolic_kernels_take_sizes_as_arguments() -> None:
    """One launcher for every size: kernels take the symbols they use, the launcher binds
    them from its inputs' shapes and picks each launch's block."""
    region = _symbolic_region()
    fn = _with_symbols(lambda *_: EX.compile_region(region))
    src = EX.source(region).source
    assert "def tritonFusion0_k0(a0, a1, out0, s0, s1, RBLOCK: tl.constexpr, WIDE: " in src
    assert "    s0 = a0.shape[0]\n    s1 = a0.shape[1]\n" in src
    assert "torch.empty((s0, s1, 8), dtype=torch.float32" in src
    assert "B1 = triton.next_power_of_2(s0*s1)" in src  # the column sums' rows
    for n, t in ((3, 5), (2, 2), (7, 3), (4, 40)):
        _check_symbolic_rows(fn, n, t)


def test_symbolic_kernels_with_64_bit_indices(monkeypatch: pytest.MonkeyPatch) -> None:
    """``WIDE``: the launch that needs 64-bit indices gets them (from ``WIDE_INDEX``
    elements; lowered here so that a small tensor takes that path)."""
    from thunder_ir.lowering import triton_codegen

    monkeypatch.setattr(triton_codegen, "WIDE_INDEX", 100)
    region = _symbolic_region("tritonFusion9")
    src = EX.source(region)
    assert "WIDE=(8*s0*s1) >= 100" in src.source
    fn = EX._load(src)
    _check_symbolic_rows(fn, 2, 3)  # 48 elements: 32-bit
    _check_symbolic_rows(fn, 3, 7)  # 168: 64-bit


def test_symbolic_source_snapshot() -> None:
    source = EX.source(_symbolic_region()).source
    path = SNAPSHOTS / "symbolic_rows.py"
    if os.environ.get("THUNDER_IR_UPDATE_SNAPSHOTS") == "1":
        path.write_text(source)
    assert source == path.read_text(), (
        f"generated source differs from {path}; if the change is meant, rerun with "
        "THUNDER_IR_UPDATE_SNAPSHOTS=1 and review the diff")


def test_symbolic_sizes_kernels_cannot_compute() -> None:
    from thunder_ir.dialects.symbols import SymbolicError
    from thunder_ir.lowering.triton_codegen import _sym

    assert str(_sym("2*s0 + s1")) == "2*s0 + s1"
    for text in ("s0//2", "Mod(s0, 2)", "s0**2", "x + 1"):
        with pytest.raises(SymbolicError, match="sums and products"):
            _sym(text)


def test_jit_one_program_for_every_length() -> None:
    """``jit`` with the Triton executor, forward and backward, over lengths and batch
    sizes: automatic dynamic compiles twice, and the second program's regions are
    symbolic Triton kernels."""
    from models import Config, LlamaGPT

    torch.manual_seed(0)
    cfg = Config(n_layer=1)
    model = LlamaGPT(cfg)
    jm = thunder_ir.jit(model, executors=["triton"])
    for b, t in ((2, 8), (3, 13), (2, 5), (3, 24)):
        idx = torch.randint(0, cfg.vocab_size, (b, t))
        loss = jm(idx).float().pow(2).mean()
        loss.backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        ref = model(idx).float().pow(2).mean()
        ref.backward()
        torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
        for g, p in zip(got, model.parameters(), strict=True):
            torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)
        model.zero_grad(set_to_none=True)
    assert thunder_ir.cache_misses(jm) == 2
    assert jm._compiled.symbolic_failures == []
    fwd = str(thunder_ir.last_traces(jm)[-1])
    bwd = str(thunder_ir.last_backward_traces(jm)[-1])
    assert '"cpu i64[2, s0]"' in fwd or "s0" in fwd
    assert "tritonFusion" in fwd and "tritonFusion" in bwd


def test_a_row_past_the_kernel_limit_is_another_program() -> None:
    """A reduction over a symbolic length fuses under a guard (``s0 <= MAX_REDUCTION``):
    a longer row compiles a program without that fusion, and shorter rows go back to the
    first."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 2, -1) + 1

    jf = thunder_ir.jit(f, executors=["triton"])
    fused = []
    for n in (6, 10, 12, MAX_REDUCTION + 8, 20):
        x = torch.randn(2, n)
        torch.testing.assert_close(jf(x), f(x))
        fused.append("tritonFusion" in str(thunder_ir.last_traces(jf)[-1]))
    assert fused == [True, True, True, False, True]
    assert thunder_ir.cache_misses(jf) == 3 and jf.symbolic_failures == []
    assert f"<= {MAX_REDUCTION}" in thunder_ir.last_prologue_traces(jf)[0]


# --------------------------------------------------------------------------- cross entropy


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype,ls", [(torch.float32, 0.0), (torch.float32, 0.1),
                                      (torch.bfloat16, 0.0)], ids=["f32", "f32-ls", "bf16"])
def test_cross_entropy_kernel(reduction: str, dtype: torch.dtype, ls: float) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 11, generator=gen).to(dtype)
    t = torch.randint(0, 11, (6,), generator=gen)
    t[2] = 3  # an ignored row
    xr = x.clone().requires_grad_()
    want = F.cross_entropy(xr, t, ignore_index=3, reduction=reduction, label_smoothing=ls)
    got = K.cross_entropy_forward(x, t, 3, reduction, ls)
    ct = torch.randn(want.shape, generator=gen).to(dtype)
    want.backward(ct)
    grad = K.cross_entropy_backward(ct, x, t, 3, reduction, ls)
    close(got, want.detach())
    close(grad, xr.grad)
    assert not grad[2].any()


def test_cross_entropy_kernel_streams_wide_rows() -> None:
    """More classes than one block: the online log-sum-exp loops."""
    x = torch.randn(2, 5000) * 4
    t = torch.tensor([17, 4999])
    xr = x.clone().requires_grad_()
    want = F.cross_entropy(xr, t)
    want.backward()
    torch.testing.assert_close(K.cross_entropy_forward(x, t), want.detach())
    torch.testing.assert_close(K.cross_entropy_backward(torch.tensor(1.0), x, t), xr.grad)


def _ce_op(x_shape: tuple[int, ...], target_dtype: torch.dtype = torch.int64,
           weight: bool = False, **params: Any) -> N.CrossEntropyOp:
    tshape = x_shape[:1] + x_shape[2:] if target_dtype == torch.int64 else x_shape
    types = [tensor_type(x_shape, torch.float32), tensor_type(tshape, target_dtype)]
    if weight:
        types.append(tensor_type(x_shape[-1:], torch.float32))
    prog = Program("f", types)
    w = prog.args[2] if weight else None
    out = prog.emitter.emit(N.CrossEntropyOp, prog.args[0], prog.args[1], w, **params)
    op = out.owner
    assert isinstance(op, N.CrossEntropyOp)
    return op


def test_cross_entropy_claim_lower_and_vjp_rule() -> None:
    op = _ce_op((4, 7), ignore_index=1, reduction="sum", label_smoothing=0.2)
    assert EX.can_claim(op)
    assert not EX.can_claim(_ce_op((4, 7), weight=True))
    assert not EX.can_claim(_ce_op((4, 7, 2)))
    assert not EX.can_claim(_ce_op((4, 7), target_dtype=torch.float32))
    (call,) = EX.lower(op) or []
    assert isinstance(call, CallOp) and call.callee.data.endswith("triton_cross_entropy_forward")
    x, t = torch.randn(4, 7), torch.tensor([0, 1, 6, 2])
    want = F.cross_entropy(x, t, ignore_index=1, reduction="sum", label_smoothing=0.2)
    torch.testing.assert_close(call.run([x, t]), want)

    rule = EX.vjp_rule(op)
    assert rule is not None
    e = Emitter()
    ct = Block(arg_types=[op.results[0].type]).args[0]
    dx, dt, dw = rule(Grad(e), list(op.results), [ct], *op.grouped_operands(), **op.params())
    (bwd,) = e.ops
    assert isinstance(bwd, CallOp) and dx is bwd.results[0] and dt is None and dw is None
    assert bwd.callee.data.endswith("triton_cross_entropy_backward")


# --------------------------------------------------------------------------- end to end


def test_jit_forward_and_backward() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, t: torch.Tensor) -> Any:
        h = F.layer_norm(x, (8,), w, b)
        return F.cross_entropy(torch.tanh(h) * 2.0, t, ignore_index=0)

    gen = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(s, generator=gen, requires_grad=True) for s in ((5, 8), (8,), (8,)))
    t = torch.tensor([1, 0, 7, 3, 3])
    jfn = thunder_ir.jit(fn, executors=["triton"])
    loss = jfn(x, w, b, t)
    loss.backward()
    got = [v.grad for v in (x, w, b)]
    for v in (x, w, b):
        v.grad = None
    want = fn(x, w, b, t)
    want.backward()
    torch.testing.assert_close(loss, want)
    for g, v in zip(got, (x, w, b)):
        torch.testing.assert_close(g, v.grad)
    fwd = str(thunder_ir.last_traces(jfn)[-1])
    bwd = str(thunder_ir.last_backward_traces(jfn)[-1])
    assert "tritonFusion0(" in fwd and "tir.triton_cross_entropy_forward(" in fwd
    assert "tritonFusion" in bwd and "tir.triton_cross_entropy_backward(" in bwd
