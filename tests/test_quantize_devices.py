"""`QuantizeWeights` per device (issue 55): which kernel a quantized linear runs on each
device (`thunder_ir.dialects.quant_devices.LINEAR_KERNELS`), checked on the CPU.

What the CPU can check of the CUDA lowering is checked here: the rule table's choices,
the shapes torch's CUDA int4 ops give for the packing chosen (their meta kernels), the
nibble order tinygemm reads, and the program a CUDA-typed model becomes (printed, not
run). The CUDA runs, against the dequantized model and torchao, are in
``tests/test_cuda.py``.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from thunder_ir.dialects import quant as Q
from thunder_ir.dialects import quant_devices as QD

DEVICES = ("cpu", "cuda:0", "mps", "meta")
CAPABILITIES = (None, (7, 5), (8, 0), (9, 0))


def test_rule_table_covers_every_device_and_each_row_is_used() -> None:
    """Every (bits, device, dtype, capability) gets a choice; every row of the table is
    the choice of some input; the CUDA choices are what torch provides (module doc)."""
    used: set[QD.KernelRule] = set()
    for bits, dev, dtype, cap in itertools.product((8, 4), DEVICES, Q.FLOATS, CAPABILITIES):
        kernel = QD.linear_kernel(bits, dev, dtype, cap)
        row = next((r for r in QD.LINEAR_KERNELS if r.kernel == kernel and r.bits == bits
                    and r.device == dev.split(":")[0]), None)
        if row is not None:
            used.add(row)
        if dev == "cpu":
            assert kernel == QD.CPU_KERNELS
        elif dev.startswith("cuda") and bits == 4 and dtype == torch.bfloat16 \
                and cap is not None and cap >= (8, 0):
            assert kernel == QD.TINYGEMM
        else:  # CUDA int8 (torch's kernel is naive), fp32/fp16 int4, pre-sm80, others
            assert kernel == QD.DEQUANTIZE, (bits, dev, dtype, cap)
    assert used == set(QD.LINEAR_KERNELS)
    for row in QD.LINEAR_KERNELS:
        assert row.why and set(row.dtypes) <= set(Q.FLOATS)
    assert hasattr(torch.ops.aten, "_weight_int4pack_mm")
    assert hasattr(torch.ops.aten, "_convert_weight_to_int4pack")


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.parametrize("n,k,g", [(16, 32, 32), (48, 64, 32), (32, 128, 64),
                                   (64, 256, 256), (16, 96, 32)])
def test_tinygemm_shapes_on_fake_cuda(n: int, k: int, g: int) -> None:
    """torch's CUDA int4 ops, by their meta kernels on fake CUDA tensors, through
    `int4_linear_cuda`: the packed codes are ``int32[N / 8, K / (16 t), 32, t / 2]`` (the
    CUDA kernel checks ``K / (16 t)``), and the product is ``[M, N]`` bfloat16 on the
    input's device, the shape the op's own rule gives."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from thunder_ir.dialects.types import tensor_type

    t = QD.inner_k_tiles(k)
    assert t in (2, 4, 8) and k % (16 * t) == 0
    mode = FakeTensorMode()

    def fake(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        meta = torch.empty(shape, dtype=dtype, device="meta")
        return mode.fake_tensor_converter.from_meta_and_device(mode, meta,
                                                               torch.device("cuda:0"))

    with mode:
        codes = fake((n, k // 2), torch.uint8)
        packed = QD.tinygemm_layout(codes)
        assert packed.dtype == torch.int32
        assert packed.shape == (n // 8, k // (16 * t), 32, t // 2)
        x, sz = fake((5, k), torch.bfloat16), fake((k // g, n, 2), torch.bfloat16)
        kept = Q.Quantized()
        y = QD.int4_linear_cuda(x, codes, sz, g, kept)
    assert y.shape == (5, n) and y.dtype == torch.bfloat16 and y.device.type == "cuda"
    assert len(kept) == 1  # the packing, kept beside the codes
    rule = Q.Int4LinearOp.SHAPE_RULE(
        [tensor_type((5, k), torch.bfloat16, "cuda:0"),
         tensor_type((n, k // 2), torch.uint8, "cuda:0"),
         tensor_type((k // g, n, 2), torch.bfloat16, "cuda:0"), None], {"group_size": g})
    assert tuple(rule.sizes) == tuple(y.shape) and rule.dtype == y.dtype


def test_tinygemm_nibble_order() -> None:
    """`tinygemm_codes`: the scheme's codes with the even column in the high nibble, as
    torchao forms them for ``_convert_weight_to_int4pack`` from one code per column."""
    w = torch.randn(32, 64)
    codes, _ = Q.int4_qparams(w, 32)
    each = torch.stack([codes & 15, codes >> 4], dim=2).reshape(32, 64)  # one per column
    want = (each[:, ::2] << 4 | each[:, 1::2]).to(torch.uint8)
    assert torch.equal(QD.tinygemm_codes(codes), want)


def _program(dev: str, dtype: torch.dtype, bits: int, compute: str = "") -> str:
    """The Python program `jit`'s pipeline (the torch executor) makes of one ``linear``
    on a weight ``fc.weight`` typed on ``dev``, with ``QuantizeWeights(bits)``: printed,
    not run (no tensor of that device is made)."""
    from thunder_ir.dialects.ltorch_nn import LinearOp
    from thunder_ir.dialects.program import Program
    from thunder_ir.dialects.types import tensor_type
    from thunder_ir.lowering.executors import compile_context
    from thunder_ir.lowering.python_printer import print_python
    from thunder_ir.passes import Pipeline
    from thunder_ir.passes.quantize import QuantizeWeightsPass
    from thunder_ir.pipeline import JitOptions, jit_pipeline

    prog = Program("forward", [tensor_type((3, 64), dtype, dev),
                               tensor_type((32, 64), dtype, dev), tensor_type((32,), dtype, dev)],
                   ["x", "t_fc_weight", "t_fc_bias"])
    module = prog.finish([prog.emitter.emit(LinearOp, *prog.args)])
    opts = JitOptions(executors=("torch",), user={
        "ltorch": [QuantizeWeightsPass(bits=bits, compute_dtype=compute)]})
    Pipeline(jit_pipeline(opts), verify=True).run(module, compile_context(["torch"]))
    return print_python(module)


@pytest.mark.parametrize("bits", [8, 4])
def test_cuda_program_dequantizes_then_multiplies(bits: int) -> None:
    """On CUDA (typed, not run) the weight is quantized once (a kernel call), and where
    the table names no kernel the linear is the scheme's dequantization then ``linear``
    (the ops the fusion executors take); on the CPU it is the op's kernel. int4 in
    bfloat16 is tinygemm only on an sm80+ device this process has: here, with no CUDA,
    it dequantizes too."""
    cpu = _program("cpu", torch.float32, bits)
    assert f"tir.quantize_int{bits}(" in cpu and f"tir.int{bits}_linear(" in cpu
    for dtype, compute in [(torch.float32, ""), (torch.float32, "bfloat16"),
                           (torch.bfloat16, "")]:
        cuda = _program("cuda:0", dtype, bits, compute)
        assert f"tir.quantize_int{bits}(" in cuda, cuda
        tiny = QD.linear_kernel(bits, "cuda:0", torch.bfloat16 if compute else dtype,
                                QD.device_capability("cuda:0")) == QD.TINYGEMM
        if tiny:
            assert "tir.int4_linear(" in cuda
        else:
            assert f"int{bits}_linear" not in cuda, cuda
            assert "torch.nn.functional.linear(" in cuda
            assert "convert_element_type" in cuda  # the codes made floats
            assert '"cuda:0 ' in cuda


def test_freed_weight_is_not_quantized_again() -> None:
    """After `free_float_weights`, a weight whose float data is gone cannot be quantized
    again (here: another scheme on the same model): a clear error naming what to do, not a
    read of freed memory (it crashed the process); the first scheme's program still runs."""
    import thunder_ir
    from thunder_ir.transforms import QuantizeWeights, free_float_weights

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=8)])
    x = torch.randn(3, 64)
    with torch.no_grad():
        y = jm(x)
        assert free_float_weights(jm) == (32 * 64 + 16 * 32) * 4
        other = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=4)])
        with pytest.raises(RuntimeError, match="free_float_weights freed it"):
            other(x)
        torch.testing.assert_close(jm(x), y, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_region_dequantizes_the_codes(dtype: torch.dtype) -> None:
    """Where a quantized linear decomposes (CUDA int8; here an executor that does not
    claim it, with Triton in its CPU interpreter), the Triton executor fuses the
    dequantization into one region: the int8 codes loaded and converted, times the
    scales; then ``linear``. Values: eager's on the dequantized model (bfloat16: within
    its rounding; the interpreter rounds its stores toward zero)."""
    import os

    import thunder_ir
    from thunder_ir.lowering.executors import get_executor
    from thunder_ir.lowering.torch_executor import TorchExecutor
    from thunder_ir.transforms import QuantizeWeights

    pytest.importorskip("triton", reason="the Triton executor needs the triton package")
    if os.environ.get("TRITON_INTERPRET") != "1" or not get_executor("triton").is_available():
        pytest.skip("the Triton executor runs on the CPU only in its interpreter")
    from test_quantize import dequantized_copy, mlp

    m = mlp().to(dtype)
    ref = dequantized_copy(m, 8)
    torch_ex = TorchExecutor(claims=lambda op: getattr(op, "BITS", None) is None
                             and getattr(type(op), "TORCH_FN", None) is not None)
    jm = thunder_ir.jit(m, executors=["triton", torch_ex], transforms=[QuantizeWeights(bits=8)])
    x = torch.randn(4, 64, dtype=dtype)
    with torch.no_grad():
        y, want = jm(x), ref(x)
    if dtype == torch.float32:
        assert torch.equal(y, want)
    else:
        torch.testing.assert_close(y, want, atol=2e-2, rtol=2e-2)
    trace = str(thunder_ir.last_traces(jm)[-1])
    assert trace.count("tir.quantize_int8(") == 2 and "int8_linear" not in trace
    assert trace.count("= tritonFusion") == 2, trace
    assert "prims.convert_element_type(t_0_weight_q" in trace
