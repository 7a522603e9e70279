"""The Triton executor: generated kernels for fusion regions, and a cross-entropy operator.

* As a **fusion executor** it accepts the prims `thunder_ir.lowering.triton_codegen` can
  generate (elementwise ops with broadcasts and casts, row and column reductions, size-1
  reshapes, transposes) on float16/bfloat16/float32 tensors, with bool and int32/int64 for
  comparisons, masks and ``where``. ``compile_region`` turns a ``fusion.region`` into
  Triton source, executes it and returns its launcher. Compiled launchers are cached by
  the region's structure (ops, params, input types), so the forward of every layer of a
  model shares one kernel.
* As an **operator executor** it claims ``ltorch.cross_entropy`` on (N, C) logits with
  int64 class targets and no class weights, and lowers it to a ``torch.call`` of
  `thunder_ir.lowering.triton_kernels.cross_entropy_forward`; its VJP rule calls
  `~thunder_ir.lowering.triton_kernels.cross_entropy_backward` (one fused kernel each way).

It runs where triton imports and a kernel can launch: on CUDA, or on the CPU with
``TRITON_INTERPRET=1`` (set before triton is imported; slow, for tests). It is registered
always and in the default executors only when CUDA is present.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import torch
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects import ltorch_nn as N
from thunder_ir.dialects.base import OperandRef, ThunderOp
from thunder_ir.dialects.fusion import RegionOp
from thunder_ir.dialects.ltorch_base import LtorchOp
from thunder_ir.dialects.torch import make_call
from thunder_ir.dialects.types import TensorType
from thunder_ir.lowering.executors import Executor, register_executor
from thunder_ir.lowering.triton_codegen import (
    FLOAT_DTYPES,
    TritonSource,
    UnsupportedRegion,
    fusible,
    generate_block,
    structural_key,
)
from thunder_ir.passes.fuse import fuses_decomposed, prims_body
from thunder_ir.runtime import namespace


def _kernel(name: str) -> Any:
    from thunder_ir.lowering import triton_kernels  # needs triton: loaded on first use

    return getattr(triton_kernels, name)


def triton_cross_entropy_forward(*args: Any, **kwargs: Any) -> Any:
    """The cross-entropy forward kernel (`thunder_ir.lowering.triton_kernels`, which needs
    triton: imported on the first call)."""
    return _kernel("cross_entropy_forward")(*args, **kwargs)


def triton_cross_entropy_backward(*args: Any, **kwargs: Any) -> Any:
    """The cross-entropy backward kernel (imported on the first call, as the forward)."""
    return _kernel("cross_entropy_backward")(*args, **kwargs)


_CE_FORWARD = namespace.register("triton_cross_entropy_forward", triton_cross_entropy_forward)
_CE_BACKWARD = namespace.register("triton_cross_entropy_backward",
                                  triton_cross_entropy_backward)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _device_ok(t: Any) -> bool:
    """Tensors on CUDA, or on the CPU under the Triton interpreter."""
    if not isinstance(t, TensorType):
        return True
    return t.dev.startswith("cuda:") or (t.dev == "cpu" and _interpreting())


class TritonExecutor(Executor):
    """Generates Triton kernels for fusion regions; runs cross entropy as one kernel.

    Attributes:
        fallbacks: ``(kernel, reason)`` for each region the generator could not schedule;
            such a region runs its prims with the reference interpreter instead.
    """

    name = "triton"
    version = "triton"
    kernel_prefix = "tritonFusion"

    def __init__(self) -> None:
        self.fallbacks: list[tuple[str, str]] = []
        self._cache: dict[str, Callable[..., Any]] = {}
        self._ltorch_ok: dict[tuple[Any, ...], bool] = {}
        self._dir: str | None = None

    def is_available(self) -> bool:
        """Triton imports, and there is CUDA or ``TRITON_INTERPRET=1``."""
        if importlib.util.find_spec("triton") is None:
            return False
        return torch.cuda.is_available() or _interpreting()

    # ---- operator executor: cross entropy

    def can_claim(self, op: ThunderOp) -> bool:
        """``ltorch.cross_entropy`` on (N, C) float logits, (N,) int64 targets, no weight."""
        if not isinstance(op, N.CrossEntropyOp):
            return False
        x, target, weight = op.grouped_operands()
        xt, tt = x.type, target.type
        if weight is not None or not isinstance(xt, TensorType) \
                or not isinstance(tt, TensorType):
            return False
        p = op.params()
        reduction = N.legacy_reduction(p.get("reduction"), p.get("size_average"),
                                       p.get("reduce"))
        ls = p.get("label_smoothing") or 0.0
        return (xt.rank == 2 and xt.dtype in FLOAT_DTYPES and tt.dtype == torch.int64
                and tt.sizes == xt.sizes[:1] and xt.sizes[0] > 0 and xt.sizes[1] > 0
                and reduction in ("mean", "sum", "none") and 0.0 <= ls <= 1.0
                and _device_ok(xt) and _device_ok(tt))

    def lower(self, op: ThunderOp) -> list[Operation] | None:
        """A ``torch.call`` of `triton_kernels.cross_entropy_forward` for a claimed op."""
        if not isinstance(op, N.CrossEntropyOp):
            return None
        x, target, _ = op.grouped_operands()
        call = make_call(_CE_FORWARD, [x, target], [OperandRef(0), OperandRef(1)],
                         _ce_kwargs(op.params()), result_types=[op.results[0].type])
        return [call]

    def vjp_rule(self, op: Operation) -> Callable[..., Any] | None:
        """For a cross entropy this executor claims: one backward kernel for the logits."""
        if isinstance(op, N.CrossEntropyOp) and self.can_claim(op):
            return _cross_entropy_vjp
        return None

    # ---- fusion executor

    @property
    def is_fusion(self) -> bool:
        """Triton compiles fusion regions."""
        return True

    def can_fuse(self, op: Operation) -> bool:
        """True for the prims the generator supports, on CUDA (or the CPU interpreter), and
        for side-effect-free ltorch ops whose decomposition holds only such prims (regions
        decompose them before generating)."""
        if not all(_device_ok(v.type) for v in (*op.operands, *op.results)):
            return False
        if op.name.startswith("prims."):
            return fusible(op)
        if isinstance(op, LtorchOp):
            return fuses_decomposed(op, fusible, self._ltorch_ok)
        return False

    def source(self, region: RegionOp) -> TritonSource:
        """The generated source of a region (raises `UnsupportedRegion`)."""
        return generate_block(prims_body(region), region.kernel.data)

    def compile_region(self, region: Operation) -> Callable[..., Any]:
        """The launcher of a region's kernels: ``f(*inputs)`` returns the one output itself,
        or a tuple of several.

        Launchers are cached by the region's structure. A region the generator cannot
        schedule runs with the reference interpreter and is listed in `fallbacks`.

        A region with symbolic sizes gets kernels that take them as arguments, so one
        launcher serves every size (`thunder_ir.lowering.triton_codegen`; its structural
        key holds the symbols' relations, not their values), and the interpreter's
        fallback binds them from its inputs' shapes. A size expression kernels cannot
        compute (``s0//2``) raises `SymbolicError`: the program is then compiled for the
        call's sizes.
        """
        assert isinstance(region, RegionOp)
        key = structural_key(region)
        fn = self._cache.get(key)
        if fn is not None:
            return fn
        try:
            src = self.source(region)
        except UnsupportedRegion as e:
            from thunder_ir.lowering.codegen import interpreted_kernel

            kernel = region.kernel.data
            self.fallbacks.append((kernel, str(e)))
            warnings.warn(f"triton: {kernel} runs with the reference interpreter: {e}",
                          RuntimeWarning, stacklevel=2)
            fn = interpreted_kernel(region)
        else:
            fn = self._load(src)
        self._cache[key] = fn
        return fn

    def _load(self, src: TritonSource) -> Callable[..., Any]:
        """Writes the source to a file (triton reads kernel source with ``inspect``) and
        imports it."""
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="thunder_ir_triton_")
        digest = hashlib.sha256(src.source.encode()).hexdigest()[:16]
        path = os.path.join(self._dir, f"{src.launcher}_{digest}.py")
        with open(path, "w") as f:
            f.write(src.source)
        mod_name = f"thunder_ir_triton_{src.launcher}_{digest}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
        fn: Callable[..., Any] = getattr(module, src.launcher)
        return fn


def _ce_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    reduction = N.legacy_reduction(params.get("reduction"), params.get("size_average"),
                                   params.get("reduce"))
    ignore = params.get("ignore_index")
    return {"ignore_index": -100 if ignore is None else int(ignore),
            "reduction": reduction,
            "label_smoothing": float(params.get("label_smoothing") or 0.0)}


def _cross_entropy_vjp(g: Any, out: list[SSAValue], ct: list[SSAValue | None], x: SSAValue,
                       target: SSAValue, weight: SSAValue | None, **params: Any) -> list[Any]:
    """``dx = cross_entropy_backward(ct, x, target, ...)``; targets get no gradient."""
    assert ct[0] is not None
    call = make_call(_CE_BACKWARD, [ct[0], x, target],
                     [OperandRef(0), OperandRef(1), OperandRef(2)], _ce_kwargs(params),
                     result_types=[x.type])
    g.emitter.insert(call)
    return [call.results[0], None, None]


register_executor(TritonExecutor(), default=torch.cuda.is_available())

__all__ = ["TritonExecutor"]
