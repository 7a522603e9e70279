"""The nvFuser executor: translation coverage, the definitions it builds, and (where nvFuser
and CUDA exist) its kernels against the reference interpreter.

Without nvFuser, `RecordingDefinition` records the FusionDefinition calls the translator
makes; the golden tests compare that recorded definition with the text nvFuser's own
printer would show for the same calls. Running the kernels needs nvFuser and a GPU: those
tests skip with the reason here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Block, Region

from thunder_ir.dialects import prims
from thunder_ir.dialects.base import Emitter, ShapeError, ThunderOp
from thunder_ir.dialects.fusion import RegionOp, YieldOp
from thunder_ir.dialects.prims import PRIMS
from thunder_ir.dialects.types import NumberType, TensorType, number_type, tensor_type
from thunder_ir.lowering.executors import (
    get_default_executors,
    get_executor,
    resolve_executors,
)
from thunder_ir.lowering.nvfuser_executor import (
    NOT_FUSIBLE,
    TRANSLATIONS,
    NotFusibleError,
    NvFuserExecutor,
    RecordingDefinition,
    definition_source,
    record_region,
)
from thunder_ir.runtime.interpreter import run_block

CUDA = "cuda:0"
F32, F16 = torch.float32, torch.float16
NVFUSER_RUNS = NvFuserExecutor().is_available()
needs_nvfuser = pytest.mark.skipif(
    not NVFUSER_RUNS,
    reason="running nvFuser kernels needs `import nvfuser` and a CUDA device "
           "(this machine lacks one or both); the definitions are checked without them")


def region_of(types: Sequence[Any], build: Callable[[Any, Sequence[Any]], list[Any]],
              kernel: str = "nvFusion0") -> RegionOp:
    """A verified nvfuser ``fusion.region`` over inputs of ``types`` whose body
    ``build(prims_namespace, block_args)`` makes; it yields what ``build`` returns."""
    body = Block(arg_types=list(types))
    outs = build(Emitter(body.add_op).ns(prims.OPS), body.args)
    body.add_op(YieldOp.create(operands=outs))
    outer = Block(arg_types=list(types))  # the values the region reads
    region = RegionOp.create(
        operands=list(outer.args), result_types=[o.type for o in outs],
        properties={"executor": StringAttr("nvfuser"), "kernel": StringAttr(kernel)},
        regions=[Region(body)])
    region.verify()
    return region


def elementwise_region() -> RegionOp:
    """``f16(tanh((f32(x) + broadcast(b)) * 0.5))``: a chain with a broadcast and casts."""
    def build(Q: Any, a: Sequence[Any]) -> list[Any]:
        x, b = a
        xf = Q.convert_element_type(x, dtype=F32)
        bb = Q.broadcast_in_dim(b, shape=(4, 8), broadcast_dims=(1,))
        y = Q.tanh(Q.mul(Q.add(xf, bb), Q.constant(value=0.5)))
        return [Q.convert_element_type(y, dtype=F16)]

    return region_of([tensor_type((4, 8), F16, CUDA), tensor_type((8,), F32, CUDA)], build)


def softmax_region() -> RegionOp:
    """A row softmax as prims: max, subtract, exp, sum, divide (two row reductions)."""
    def build(Q: Any, a: Sequence[Any]) -> list[Any]:
        (x,) = a
        m = Q.broadcast_in_dim(Q.amax(x, dims=(1,)), shape=(4, 8), broadcast_dims=(0,))
        e = Q.exp(Q.sub(x, m))
        s = Q.broadcast_in_dim(Q.sum(e, dims=(1,)), shape=(4, 8), broadcast_dims=(0,))
        return [Q.div(e, s)]

    return region_of([tensor_type((4, 8), F32, CUDA)], build, "nvFusion1")


# --------------------------------------------------------------------------- coverage


def test_every_prim_is_translated_or_declared_not_fusible() -> None:
    missing = sorted(p.name for p in PRIMS if p not in TRANSLATIONS and p not in NOT_FUSIBLE)
    both = sorted(p.name for p in PRIMS if p in TRANSLATIONS and p in NOT_FUSIBLE)
    assert not missing, f"prims with neither an nvFuser translation nor a reason: {missing}"
    assert not both, f"prims both translated and declared not fusible: {both}"
    assert all(reason.strip() for reason in NOT_FUSIBLE.values())


def test_table_holds_only_prims() -> None:
    assert set(TRANSLATIONS) <= set(PRIMS) and set(NOT_FUSIBLE) <= set(PRIMS)


def _one_op_region(cls: type[ThunderOp]) -> RegionOp:
    """A region holding one ``cls`` op on small CUDA tensors (for the smoke test)."""
    t = lambda shape, dtype=F32: tensor_type(shape, dtype, CUDA)  # noqa: E731
    short = cls.name.split(".", 1)[1]
    special: dict[str, tuple[list[Any], Callable[[Any, Sequence[Any]], Any]]] = {
        "where": ([t((2, 3), torch.bool), t((2, 3)), t((2, 3))],
                  lambda Q, a: Q.where(a[0], a[1], a[2])),
        "convert_element_type": ([t((2, 3))], lambda Q, a: Q.convert_element_type(a[0], dtype=F16)),
        "broadcast_in_dim": ([t((3,))], lambda Q, a: Q.broadcast_in_dim(
            a[0], shape=(2, 3), broadcast_dims=(1,))),
        "reshape": ([t((2, 3))], lambda Q, a: Q.reshape(a[0], shape=(3, 2))),
        "transpose": ([t((2, 3))], lambda Q, a: Q.transpose(a[0], permutation=(1, 0))),
        "squeeze": ([t((2, 1))], lambda Q, a: Q.squeeze(a[0], dims=(1,))),
        "slice": ([t((4, 3))], lambda Q, a: Q.slice(a[0], start_indices=(1, 0),
                                                     end_indices=(3, 2))),
        "pad": ([t((2, 3))], lambda Q, a: Q.pad(a[0], padding_value=0.0,
                                                 padding_config=((1, 2, 0), (0, 3, 0)))),
        "cat": ([t((2, 3)), t((1, 3))], lambda Q, a: Q.cat([a[0], a[1]], dim=0)),
        "var": ([t((2, 3))], lambda Q, a: Q.var(a[0], dims=(1,), correction=1.0)),
        "full": ([], lambda Q, a: Q.full(shape=(2, 3), fill_value=1.5, device=CUDA,
                                         dtype=F32)),
        "iota": ([], lambda Q, a: Q.iota(length=5, start=0, step=2, device=CUDA,
                                         dtype=torch.int64)),
        "constant": ([t((2,))], lambda Q, a: Q.mul(a[0], Q.constant(value=2.0))),
    }
    if short in special:
        types, build = special[short]
        return region_of(types, lambda Q, a: [build(Q, a)])
    if issubclass(cls, prims.ReductionOp):
        return region_of([t((2, 3))], lambda Q, a: [getattr(Q, short)(a[0], dims=(1,))])
    arity = 1 if issubclass(cls, prims.UnaryOp) else 2
    for dtype in (F32, torch.int64, torch.bool):
        try:
            return region_of([t((2, 3), dtype)] * arity,
                             lambda Q, a: [getattr(Q, short)(*a)])
        except ShapeError:
            continue
    raise AssertionError(f"no sample for {cls.name}")


TRANSLATED = sorted(TRANSLATIONS, key=lambda c: c.name)


@pytest.mark.parametrize("cls", TRANSLATED, ids=[c.name for c in TRANSLATED])
def test_every_translation_records_a_definition(cls: type[ThunderOp]) -> None:
    region = _one_op_region(cls)
    op = next(o for o in region.body.block.ops if isinstance(o, cls))
    assert NvFuserExecutor().can_fuse(op), f"{cls.name} sample should be fusible"
    source = definition_source(region)
    assert "fd.ops." in source and source.rstrip().endswith(")")
    assert source.count("fd.add_output(") == 1
    compile(source, "<nvfuser definition>", "exec")  # valid Python


# --------------------------------------------------------------------------- golden


def test_golden_elementwise_chain_with_broadcast_and_casts() -> None:
    assert definition_source(elementwise_region()) == (
        "def nvFusion0(fd: FusionDefinition) -> None:\n"
        "    T0 = fd.define_tensor(shape=[4, 8], contiguity=[True, True], dtype=DataType.Half, "
        "is_cpu=False, stride_order=[1, 0])\n"
        "    T1 = fd.define_tensor(shape=[8], contiguity=[True], dtype=DataType.Float, "
        "is_cpu=False, stride_order=[0])\n"
        "    T2 = fd.ops.cast(T0, dtype=DataType.Float)\n"
        "    T3 = fd.ops.broadcast_in_dim(T1, shape=[4, 8], broadcast_dims=[1])\n"
        "    T4 = fd.ops.add(T2, T3)\n"
        "    S5 = fd.define_scalar(0.5, dtype=DataType.Double)\n"
        "    T6 = fd.ops.mul(T4, S5)\n"
        "    T7 = fd.ops.tanh(T6)\n"
        "    T8 = fd.ops.cast(T7, dtype=DataType.Half)\n"
        "    fd.add_output(T8)\n")


def test_golden_softmax_row_reduction() -> None:
    assert definition_source(softmax_region()) == (
        "def nvFusion1(fd: FusionDefinition) -> None:\n"
        "    T0 = fd.define_tensor(shape=[4, 8], contiguity=[True, True], dtype=DataType.Float, "
        "is_cpu=False, stride_order=[1, 0])\n"
        "    T1 = fd.ops.max(T0, dims=[1], keepdim=False, dtype=DataType.Null)\n"
        "    T2 = fd.ops.broadcast_in_dim(T1, shape=[4, 8], broadcast_dims=[0])\n"
        "    T3 = fd.ops.sub(T0, T2)\n"
        "    T4 = fd.ops.exp(T3)\n"
        "    T5 = fd.ops.sum(T4, dims=[1], keepdim=False, dtype=DataType.Null)\n"
        "    T6 = fd.ops.broadcast_in_dim(T5, shape=[4, 8], broadcast_dims=[0])\n"
        "    T7 = fd.ops.div(T4, T6)\n"
        "    fd.add_output(T7)\n")


def test_golden_shape_ops_scalar_input_and_size_one_dims() -> None:
    """A number input becomes an input scalar; size-1 dims have no contiguity; pad widths
    run from the last dim; transpose is permute; a value yielded twice is one output."""
    def build(Q: Any, a: Sequence[Any]) -> list[Any]:
        x, s = a
        y = Q.transpose(Q.squeeze(x, dims=(1,)), permutation=(1, 0))
        z = Q.pad(Q.mul(y, s), padding_value=0.0, padding_config=((1, 2, 0), (0, 3, 0)))
        w = Q.reshape(Q.slice(z, start_indices=(0, 1), end_indices=(4, 5)), shape=(16,))
        return [w, w, Q.cat([w, w], dim=0)]

    region = region_of([tensor_type((2, 1, 3), F32, CUDA), number_type(float)], build)
    source, out_index = record_region(region)
    assert out_index == [0, 0, 1]
    assert source == (
        "def nvFusion0(fd: FusionDefinition) -> None:\n"
        "    T0 = fd.define_tensor(shape=[2, 1, 3], contiguity=[True, None, True], "
        "dtype=DataType.Float, is_cpu=False, stride_order=[2, 1, 0])\n"
        "    S1 = fd.define_scalar(None, dtype=DataType.Double)\n"
        "    T2 = fd.ops.squeeze(T0, dims=[1])\n"
        "    T3 = fd.ops.permute(T2, dims=[1, 0])\n"
        "    T4 = fd.ops.mul(T3, S1)\n"
        "    S5 = fd.define_scalar(0.0, dtype=DataType.Double)\n"
        "    T6 = fd.ops.pad(T4, [0, 3, 1, 2], S5)\n"
        "    T7 = fd.ops.slice(T6, start_indices=[0, 1], end_indices=[4, 5], strides=[1, 1])\n"
        "    T8 = fd.ops.reshape(T7, new_shape=[16])\n"
        "    T9 = fd.ops.cat([T8, T8], dim=0)\n"
        "    fd.add_output(T8)\n"
        "    fd.add_output(T9)\n")


def test_golden_input_passed_through_is_copied_and_float_iota_casts() -> None:
    def build(Q: Any, a: Sequence[Any]) -> list[Any]:
        i = Q.iota(length=3, start=0, step=1, device=CUDA, dtype=F32)
        return [a[0], Q.var(Q.add(a[0], i), dims=(0,), correction=0.0)]

    source = definition_source(region_of([tensor_type((3,), F32, CUDA)], build))
    assert source.splitlines()[1:] == [
        "    T0 = fd.define_tensor(shape=[3], contiguity=[True], dtype=DataType.Float, "
        "is_cpu=False, stride_order=[0])",
        "    S1 = fd.define_scalar(3, dtype=DataType.Int)",
        "    S2 = fd.define_scalar(0.0, dtype=DataType.Double)",
        "    S3 = fd.define_scalar(1.0, dtype=DataType.Double)",
        "    T4 = fd.ops.iota(S1, S2, S3, dtype=DataType.Double)",
        "    T5 = fd.ops.cast(T4, dtype=DataType.Float)",
        "    T6 = fd.ops.add(T0, T5)",
        "    T7 = fd.ops.var(T6, dims=[0], correction=0, keepdim=False)",
        "    T8 = fd.ops.set(T0)",
        "    fd.add_output(T8)",
        "    fd.add_output(T7)",
    ]


def test_recording_definition_renders_special_floats() -> None:
    fd = RecordingDefinition()
    a = fd.define_scalar(float("-inf"), dtype=None)
    fd.add_output(fd.ops.where(fd.define_scalar(True, dtype=None), a, fd.define_scalar(
        float("nan"), dtype=None)))
    assert "float('-inf')" in fd.source() and "float('nan')" in fd.source()
    assert "S3 = fd.ops.where(S1, S0, S2)" in fd.source()


# --------------------------------------------------------------------------- can_fuse


def _op(types: Sequence[Any], build: Callable[[Any, Sequence[Any]], Any]) -> ThunderOp:
    region = region_of(types, lambda Q, a: [build(Q, a)])
    return next(o for o in region.body.block.ops if isinstance(o, ThunderOp)
                and not isinstance(o, prims.ConstantOp))


def test_can_fuse_needs_cuda_and_a_supported_dtype() -> None:
    ex = NvFuserExecutor()
    assert ex.can_fuse(_op([tensor_type((2,), F32, CUDA)] * 2, lambda Q, a: Q.add(*a)))
    assert not ex.can_fuse(_op([tensor_type((2,), F32, "cpu")] * 2, lambda Q, a: Q.add(*a)))
    assert not ex.can_fuse(_op([tensor_type((2,), torch.int8, CUDA)] * 2,
                               lambda Q, a: Q.add(*a)))
    assert not ex.can_fuse(_op([], lambda Q, a: Q.full(shape=(2,), fill_value=0.0,
                                                       device="cpu", dtype=F32)))


def test_can_fuse_rejects_what_the_frontend_cannot_express() -> None:
    ex = NvFuserExecutor()
    t = tensor_type((4, 4), F32, CUDA)
    assert not ex.can_fuse(_op([t], lambda Q, a: Q.slice(a[0], start_indices=(0, 0),
                                                         end_indices=(4, 4), strides=(2, 1))))
    assert not ex.can_fuse(_op([t], lambda Q, a: Q.pad(a[0], padding_value=0.0,
                                                       padding_config=((0, 0, 1), (0, 0, 0)))))
    assert not ex.can_fuse(_op([t], lambda Q, a: Q.pad(a[0], padding_value=0.0,
                                                       padding_config=((-1, 0, 0), (0, 0, 0)))))
    assert not ex.can_fuse(_op([tensor_type((4, 4), F16, CUDA)],
                               lambda Q, a: Q.sum(a[0], dims=(1,))))
    assert not ex.can_fuse(_op([t], lambda Q, a: Q.var(a[0], dims=(1,), correction=0.5)))
    assert not ex.can_fuse(_op([t, t], lambda Q, a: Q.matmul(*a)))
    assert not ex.can_fuse(_op([tensor_type((4,), torch.bool, CUDA)],
                               lambda Q, a: Q.where(a[0], Q.constant(value=1.0),
                                                    Q.constant(value=2.0))))


def test_translating_a_non_fusible_op_names_the_reason() -> None:
    t = tensor_type((4, 4), F32, CUDA)
    region = region_of([t, t], lambda Q, a: [Q.matmul(*a)])
    with pytest.raises(NotFusibleError, match=r"prims.matmul has no nvFuser translation "
                                              r"\(linear algebra stays with torch"):
        definition_source(region)


# --------------------------------------------------------------------------- the executor


def test_executor_is_registered_and_default_only_where_it_runs() -> None:
    ex = get_executor("nvfuser")
    assert isinstance(ex, NvFuserExecutor)
    assert ex.is_fusion and ex.kernel_prefix == "nvFusion"
    in_default = any(e.name == "nvfuser" for e in get_default_executors())
    assert in_default == ex.is_available()
    if not ex.is_available():
        with pytest.raises(ValueError, match="cannot run on this machine"):
            resolve_executors(["nvfuser"])


@pytest.mark.skipif(NVFUSER_RUNS, reason="checks the error raised where nvFuser is missing")
def test_compile_region_without_nvfuser_shows_the_definition() -> None:
    with pytest.raises(RuntimeError, match=r"(?s)not importable or no CUDA.*"
                                           r"T4 = fd.ops.add\(T2, T3\)"):
        NvFuserExecutor().compile_region(elementwise_region())


# --------------------------------------------------------------------------- execution


def _inputs_for(region: RegionOp) -> list[Any]:
    out: list[Any] = []
    for v in region.inputs:
        t = v.type
        if isinstance(t, TensorType):
            out.append(torch.randn(t.sizes, device=t.dev).to(t.dtype))
        else:
            assert isinstance(t, NumberType)
            out.append(t.python_type(1.5) if t.python_type is float else t.python_type(1))
    return out


@needs_nvfuser
@pytest.mark.parametrize("make", [elementwise_region, softmax_region])
def test_nvfuser_kernel_matches_the_reference(make: Callable[[], RegionOp]) -> None:
    region = make()
    kernel = NvFuserExecutor().compile_region(region)
    inputs = _inputs_for(region)
    out = kernel(*inputs)
    got = list(out) if isinstance(out, tuple) else [out]  # one output itself, or a tuple
    expected = run_block(region.body.block, inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e)


@needs_nvfuser
def test_nvfuser_kernel_handles_non_contiguous_inputs_and_repeated_outputs() -> None:
    def build(Q: Any, a: Sequence[Any]) -> list[Any]:
        y = Q.exp(a[0])
        return [y, y, a[0]]

    region = region_of([tensor_type((4, 6), F32, CUDA)], build)
    kernel = NvFuserExecutor().compile_region(region)
    x = torch.randn(6, 4, device=CUDA).t()  # non-contiguous
    got = kernel(x)
    assert isinstance(got, tuple) and len(got) == 3
    torch.testing.assert_close(got[0], x.exp())
    torch.testing.assert_close(got[1], x.exp())
    torch.testing.assert_close(got[2], x)


@needs_nvfuser
def test_regions_of_the_same_structure_share_a_kernel() -> None:
    ex = NvFuserExecutor()
    assert ex.compile_region(softmax_region()) is ex.compile_region(softmax_region())


def test_ltorch_ops_the_torch_executor_claimed_fuse_through_their_decomposition() -> None:
    """On CUDA the torch executor claims ``silu`` and ``softmax`` whole; nvFuser still fuses
    them (its ``can_fuse`` looks at their decompositions) and the definition it builds
    holds their prims. A matmul stays outside."""
    from xdsl.context import Context

    from thunder_ir.dialects import ltorch
    from thunder_ir.dialects.program import Program, main_function
    from thunder_ir.lowering.torch_executor import ClaimPass, TorchExecutor
    from thunder_ir.passes.fuse import FusePass

    t = tensor_type((4, 8), F32, CUDA)
    p = Program("f", [t, t, tensor_type((8, 8), F32, CUDA)])
    L = p.emitter.ns(ltorch.OPS)
    x, y, w = p.args
    h = L.mul(L.silu(x), y)
    m = p.finish([L.tanh(L.softmax(L.matmul(h, w), dim=-1))])
    ClaimPass((TorchExecutor(),)).apply(Context(), m)
    ex = NvFuserExecutor()
    FusePass((ex,)).apply(Context(), m)
    regions = [op for op in main_function(m).body.block.ops if isinstance(op, RegionOp)]
    assert len(regions) == 2, str(m)
    names = [{o.name for o in r.body.block.ops} for r in regions]
    assert {"ltorch.silu", "ltorch.mul"} <= names[0] and "ltorch.softmax" in names[1]
    assert not any("ltorch.matmul" in n for n in names)
    src = definition_source(regions[0])
    assert "fd.ops.exp(" in src and "fd.ops.mul(" in src, src
    assert "fd.ops.sum(" in definition_source(regions[1])
