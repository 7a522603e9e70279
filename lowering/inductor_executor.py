"""The torch.compile (Inductor) fusion executor: CPU fusion through PyTorch's own compiler.

Why this executor exists: on CPU there is no nvFuser or Triton, but Inductor generates C++
(OpenMP, vectorized) kernels for chains of pointwise ops and reductions, and plans the
buffers of a whole graph. This executor's regions take elementwise math, casts,
broadcasts and views, ``where``, reductions and softmax-like compositions, and also the
library calls between them: linear, matmul, embedding, ``index_add`` and the SDPA
executor's pure CPU flash-attention calls (`FUSIBLE_CALLS`). Inside a region Inductor
calls the same BLAS and attention kernels as eager but plans the buffers of the whole
graph and drops the per-op Python dispatch, so a Llama training step's forward and
backward are one region call each, as under ``torch.compile``.

A region compiles in three steps (`compile_region`), on its first call: its body becomes
a small program of its own (`region_program`), that program is printed and executed as
Python by `thunder_ir.lowering.codegen` like any other trace (`region_function`), and the
function is traced to an ATen graph (``make_fx`` with Inductor's decompositions, over fake
tensors with a static ``ShapeEnv``) and compiled by Inductor's graph compiler
(``compile_fx_inner``). Neither Dynamo nor AOTAutograd is involved (regions are pure and
run without grad): a call costs a few µs, with no guards and no runtime wrappers. The
kernel is specialized to its inputs' strides, so each stride layout gets its own compiled
variant. Compiling is slow (about a second per region
on 2 CPU cores; Inductor's on-disk FX graph cache makes a later process load it instead),
so `thunder_ir.lowering.regions.compile_kernels` caches kernels by the region's structure: the
repeated layers of a model compile once. Should tracing or Inductor fail on a region, that
region runs the Python function eagerly, with a warning.

Whether this executor is on by default is a measured decision: see ``docs/fusion.md``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import warnings
from collections.abc import Callable
from typing import Any

import torch
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.traits import ConstantLike, is_side_effect_free

from thunder_ir.dialects import ltorch_core as C
from thunder_ir.dialects import ltorch_nn as N
from thunder_ir.dialects import ltorch_scan as S
from thunder_ir.dialects import prims as P
from thunder_ir.dialects import symbols
from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.fusion import RegionOp, YieldOp
from thunder_ir.dialects.prims import ConstantOp
from thunder_ir.dialects.program import Program
from thunder_ir.dialects.torch import RUNTIME_NAMESPACE, CallOp, resolve_callee, runtime_callee
from thunder_ir.dialects.traits import (
    Creation,
    Elementwise,
    Movement,
    OpKind,
    Reduction,
    ViewLike,
    side_effect_free,
)
from thunder_ir.dialects.types import NumberType, TensorType
from thunder_ir.lowering import traced_calls
from thunder_ir.lowering.compile_helper import (
    Compiled,
    Request,
    TensorMeta,
    cache_env,
    op_class_names,
)
from thunder_ir.lowering.executors import Executor, register_executor
from thunder_ir.lowering.symbolic_regions import (
    KERNELS_PER_LAYOUT,
    Plan,
    SymbolicCall,
    guarded,
    symbolic_fakes,
    symbolic_options,
)
from thunder_ir.lowering.symbolic_regions import plan as symbolic_plan
from thunder_ir.lowering.tiered import (
    HELPER_ENV,
    BackgroundCompiler,
    measured,
    shared_helper,
    warn_failures,
)
from thunder_ir.passes.snapshot import clone_op
from thunder_ir.runtime.python_printer import sanitize

FUSED_KINDS: tuple[type[OpKind], ...] = (Elementwise, ViewLike, Movement, Creation, Reduction)
"""The kinds of op (`thunder_ir.dialects.traits`) this executor fuses: pointwise math, views
and copies, data movement, creation and reductions to values (``Reduction(indices=True)``,
argmax and the like, stay out but for `INDEX_REDUCTIONS`). RNG (never fused) and opaque
calls stay out; the torch executor runs them."""

LIBRARY_OPS: tuple[type[Operation], ...] = (
    P.LinearOp, P.MatmulOp, P.TakeOp, P.IndexAddOp,
    N.LinearOp, N.MatmulOp, N.BmmOp, N.EmbeddingOp, N.ScaledDotProductAttentionOp,
    N.LayerNormBackwardOp, N.EmbeddingBackwardOp, N.NllLossBackwardOp, S.CumsumOp,
    N.ConvolutionOp, N.ConvolutionBackwardOp, N.NativeBatchNormOp, N.NativeBatchNormBackwardOp,
    N.MaxPool2dWithIndicesOp, N.MaxPool2dWithIndicesBackwardOp,
    N.LayerNormOp, N.NativeLayerNormOp, N.NllLossForwardOp, N.NativeGroupNormOp,
    N.NativeGroupNormBackwardOp, P.GatherOp, P.ScatterAddOp, N.GroupedMmOp,
)
"""`Library` ops Inductor schedules around (see the module doc): ``make_fx`` turns them into
the ATen calls eager makes, and Inductor calls the same kernels (matmuls, attention,
convolutions and their backward) or decomposes them into the loops it fuses with their
neighbours (layer norm, the forward that saves its statistics and the backward kernel;
the embedding and nll loss kernels; batch norm, with its running statistics, group norm,
and their backward; max pooling); ``cumsum`` is one of Inductor's scans. Taking the convolutional
ops took ResNet's tiered step from 1.30x to 1.04x torch.compile's, and layer norm's
forward made Falcon's and Whisper's forwards one region each (``docs/performance.md``). A
rule of this executor, keyed by op class: which library kernels it takes is its own
choice, not a fact of the op. ``topk``, ``gather`` and ``scatter_add`` (a router's choice
of experts, its weights, and ``topk``'s backward) keep a mixture-of-experts layer's
regions whole, as does ``grouped_mm`` (the experts' products): ``make_fx`` records it as
one call of the custom op `thunder_ir.dialects.ltorch_nn.grouped_mm_op`, which reads the
group sizes when it runs (its result's shape does not depend on them), and Inductor calls
it between its loops. Other library ops (cross entropy) run eagerly."""

INDEX_REDUCTIONS: tuple[type[Operation], ...] = (C.TopkOp,)
"""Reductions with indices this executor takes (other reductions with indices run eagerly):
``topk`` (a router's choice of experts), which ``make_fx`` turns into ``aten.topk`` and
Inductor runs as its kernel inside the region, so the region does not split there."""

KEPT_OUT: tuple[type[Operation], ...] = (C.ArangeOp, C.EmptyOp, C.MaxOp, C.MinOp)
"""Ops of a fused kind that this executor leaves to eager torch: ``arange`` and ``empty``
(creation without a fill value) and the whole-tensor ``max``/``min`` were never given to
Inductor; fusing them is a decision to measure first."""

RANDOM_CALLS: frozenset[str] = frozenset({"torch.rand", "torch.randn"})
"""Random factories whose calls this executor's regions hold (`InductorExecutor.fuses_draw`:
drop-path's ``torch.rand``). Their regions compile with Inductor's ``fallback_random``,
under which the kernel calls eager's ``aten.rand``/``aten.randn`` on the default
generator, in program order (Inductor chains its random ops), so the draws and the
generator's state after the call are eager's. ``*_like`` forms are not taken (Inductor's
decompositions draw them in the result's order, eager in the operand's memory order),
nor calls with a ``generator`` or ``out``."""

FUSIBLE_CLAIMS: frozenset[tuple[str, type[Operation]]] = frozenset(
    {("sdpa", N.ScaledDotProductAttentionOp)}
)
"""``(claimer, op class)`` pairs a region may take although another executor claimed the op,
because Inductor runs it with the same kernels: ``make_fx`` turns attention into torch's
fused attention op (flash attention on CPU), which Inductor calls as a library kernel."""

FUSIBLE_CALLS: frozenset[str] = frozenset(
    {
        runtime_callee("sdpa_forward_cpu"),
        runtime_callee("sdpa_backward_cpu"),
        runtime_callee("sdpa_backward"),
    }
)
"""Pure ``torch.call`` callees a region may hold: functions of ATen ops that ``make_fx``
traces and Inductor runs as library kernels (CPU flash attention's forward and backward;
``sdpa_backward``, the backward that recomputes the forward's statistics, where the
forward saved none: grouped-query attention in OLMoE and Jamba, whose key/value heads it
repeats and whose gradients it sums back, or a mask that needs a gradient, through the
math kernel's autograd, which ``make_fx`` traces too)."""


def region_program(region: RegionOp) -> ModuleOp:
    """The body of a fusion region as a program of its own (``func.func @<kernel>``).

    The body's ops are cloned; the program's arguments are the region's inputs and it
    returns what the region yields. A value the body reads from outside without passing
    it in (CSE may swap a cloned constant for an equal one outside) is recomputed from
    its defining ops, which are then side-effect free and read no region input.
    """
    body = region.body.block
    prog = Program(region.kernel.data, [a.type for a in body.args])
    mapping: dict[SSAValue, SSAValue] = dict(zip(body.args, prog.block.args, strict=True))
    outs: list[SSAValue] = []
    for op in body.ops:
        if isinstance(op, YieldOp):
            outs = [mapping[v] for v in op.values]
            break
        for v in op.operands:
            if v not in mapping:
                _clone_outside(v, mapping, prog)
        prog.block.add_op(clone_op(op, mapping))
    return prog.finish(outs)


def _clone_outside(v: SSAValue, mapping: dict[SSAValue, SSAValue], prog: Program) -> None:
    owner = v.owner
    if not isinstance(owner, Operation) or not is_side_effect_free(owner):
        raise ValueError(
            f"fusion.region {prog.name}: its body reads a value from outside "
            "that is not a side-effect-free computation"
        )
    for o in owner.operands:
        if o not in mapping:
            _clone_outside(o, mapping, prog)
    prog.block.add_op(clone_op(owner, mapping))


def region_function(region: RegionOp) -> Callable[..., Any]:
    """A plain Python function computing a region: its body printed and executed by
    `thunder_ir.lowering.codegen`. Returns the one output itself, or a tuple. A body that
    reads only its arguments prints as it is; one that reads a value from outside prints
    from `region_program` (which recomputes that value)."""
    return region_function_and_source(region)[0]


def region_function_and_source(region: RegionOp) -> tuple[Callable[..., Any], str]:
    """`region_function` and the source it was executed from (what the tiered compile
    helper rebuilds it from)."""
    from thunder_ir.lowering.codegen import compile_program

    fn, source = compile_program(region if _self_contained(region)
                                 else region_program(region))
    return getattr(fn, "__wrapped__", fn), source  # without no_grad: callers set it


def _self_contained(region: RegionOp) -> bool:
    """Whether every value the region's body reads is defined in the body."""
    body = region.body.block
    for op in region.walk():
        if op is region:
            continue
        for v in op.operands:
            owner = v.owner
            if owner is not body and not (isinstance(owner, Operation)
                                          and owner is not region
                                          and region.is_ancestor(owner)):
                return False
    return True


@functools.cache
def _fused_op(cls: type[Operation]) -> bool:
    """True if the kind (or, for library ops, the class) of op class ``cls`` is one this
    executor fuses (once per class)."""
    if issubclass(cls, LIBRARY_OPS):
        return True
    kind = cls.get_trait(OpKind)
    if not isinstance(kind, FUSED_KINDS) or issubclass(cls, KEPT_OUT):
        return False
    if isinstance(kind, Reduction):
        return not kind.indices or issubclass(cls, INDEX_REDUCTIONS)
    return not cls.has_trait(ConstantLike)  # number constants are cloned into regions


def _has_cxx_compiler() -> bool:
    cxx = os.environ.get("CXX")
    return any(shutil.which(c) for c in ((cxx,) if cxx else ()) + ("g++", "c++", "clang++"))


class InductorExecutor(Executor):
    """Fuses elementwise, shape and reduction ops into ``torch.compile`` (Inductor) kernels.

    Args:
        options: passed to ``torch.compile`` as ``options`` (Inductor config), if any.
        tiered: compile kernels in the background (`thunder_ir.lowering.tiered`): a region
            runs unfused until its kernel is ready (``jit(fn, tiered=True)``).
    """

    name = "torch_compile"
    version = torch.__version__
    kernel_prefix = "inductorFusion"
    adopts_orphans = True  # (an Inductor graph computes unrelated values side by side)

    def __init__(self, options: dict[str, Any] | None = None, *, tiered: bool = False
                 ) -> None:
        self.options = options
        self.background = BackgroundCompiler() if tiered else None

    def is_available(self) -> bool:
        """Inductor must be installed; on CPU it also needs a C++ compiler. (Found without
        importing it: Inductor loads sympy and Dynamo, which a first call must not.)"""
        if importlib.util.find_spec("torch._inductor") is None:
            return False
        return torch.cuda.is_available() or _has_cxx_compiler()

    @property
    def is_fusion(self) -> bool:
        """True: this executor compiles ``fusion.region`` ops."""
        return True

    def can_fuse(self, op: Operation) -> bool:
        """Side-effect-free ops of a kind in `FUSED_KINDS` (or in `LIBRARY_OPS`) on tensors
        of a real device, reading only tensors and constant numbers (a traced number would
        specialize the kernel)."""
        if not _fused_op(type(op)) and not (
            isinstance(op, CallOp) and (op.callee.data in FUSIBLE_CALLS or traced_calls.takes(op))
        ):
            return False
        if not side_effect_free(op):
            return False
        for r in op.results:
            if not isinstance(r.type, TensorType) or r.type.dev == "meta":
                return False
        for v in op.operands:
            t = v.type
            if isinstance(t, NumberType):
                if not isinstance(v.owner, ConstantOp):
                    return False
            elif not isinstance(t, TensorType):
                return False
        return True

    def fuses_draw(self, op: Operation) -> bool:
        """A call of `RANDOM_CALLS` with static sizes (no operand) and no ``generator`` or
        ``out``, making a tensor on a real device."""
        if not (isinstance(op, CallOp) and op.callee.data in RANDOM_CALLS) or op.operands:
            return False
        if op.kwargs is not None and ({"generator", "out"} & set(op.kwargs.data)):
            return False
        return len(op.results) == 1 and isinstance(t := op.results[0].type, TensorType) \
            and t.dev != "meta"

    def vjp_rule(self, op: Operation) -> Callable[..., Any] | None:
        """For a call of `thunder_ir.lowering.traced_calls.TRACED_CALLS` (``F.interpolate``,
        ``avg_pool2d``, ...): a pure forward and a pure ``torch.func.vjp`` backward that
        this executor's regions hold, where ``call_with_grad`` would split them."""
        return traced_calls.rule_for(op)

    def fuses_claimed(self, op: Operation, claimer: str) -> bool:
        """True for the claims of `FUSIBLE_CLAIMS` (attention claimed by the SDPA executor)."""
        return (claimer, type(op)) in FUSIBLE_CLAIMS

    def compile_region(self, region: Operation) -> Callable[..., Any]:
        """An Inductor kernel for the region, compiled on its first call.

        Dynamo is bypassed: the region's function is traced to an ATen graph with
        ``make_fx`` and handed to Inductor (``compile_fx_inner``), so a call costs a
        few µs instead of a Dynamo guard evaluation. Inductor specializes the kernel to the
        inputs' strides, so the kernel keeps one compiled variant per stride signature.
        Should tracing or compiling fail, the region runs its Python function eagerly,
        with a warning. A tiered executor runs the function until the background thread
        has compiled the kernel (`thunder_ir.lowering.tiered`).
        """
        if not isinstance(region, RegionOp):
            raise TypeError(f"{self.name} compiles fusion.region ops, got {region.name}")
        if any(isinstance(op, N.GroupedMmOp) for op in region.walk()):
            N.grouped_mm_op()  # (the kernel calls it by name: defined before it loads)
        fn, source = region_function_and_source(region)
        name = region.kernel.data
        single = len(region.results) == 1
        variants: dict[tuple[Any, ...], Callable[..., Any]] = {}
        options = self.options
        # a region that draws (`fuses_draw`) calls eager's random ops in its kernel
        draws = any(self.fuses_draw(op) for op in region.walk())
        if draws:
            options = {**(options or {}), "fallback_random": True}
        # A region of a symbolic program: one kernel for every size (Inductor's dynamic
        # shapes), per contiguity of the inputs rather than per strides.
        dynamic = any(isinstance(t, TensorType) and t.symbolic
                      for t in (*(v.type for v in region.operands),
                                *(r.type for r in region.results)))
        # Over the program's own symbols where its inputs' sizes name them all
        # (`thunder_ir.lowering.symbolic_regions`); else a symbol per dimension.
        plan = symbolic_plan([v.type for v in region.operands], symbols.current()) \
            if dynamic else None
        if not dynamic:  # each variant is keyed by its inputs' strides (``kernel`` below)
            # and their sizes are the program's: Inductor's checks of both on every call
            # (``assert_size_stride`` per input: ResNet's step made 132) check nothing more
            options = {**(options or {}), "size_asserts": False}

        def otherwise(sig: Any, depth: int) -> Callable[..., Any]:
            """What a symbolic kernel of variant ``sig`` runs where its checks fail:
            another kernel, compiled at such a call (a decision the other way), up to
            `KERNELS_PER_LAYOUT`; then the unfused function."""
            if depth >= KERNELS_PER_LAYOUT:
                return fn
            key = (sig, depth)

            def call(*args: Any) -> Any:
                impl = variants.get(key)
                if impl is None:
                    impl = variants[key] = (compile_for(args, key, depth)
                                            if background is None
                                            else in_background(key, args, depth))
                return impl(*args)

            return call

        def compile_for(args: tuple[Any, ...], sig: Any = None, depth: int = 0
                        ) -> Callable[..., Any]:
            try:
                compiled = (_symbolic_compile(fn, plan, args, single, options,
                                              otherwise(sig, depth + 1))
                            if plan is not None
                            else _inductor_compile(fn, args, single, options, dynamic))
            except Exception as e:  # make_fx or Inductor could not compile this region
                warnings.warn(
                    f"{self.name}: compiling {name} failed, it runs eagerly "
                    f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})",
                    RuntimeWarning,
                    stacklevel=3,
                )
                return fn
            return compiled

        background = self.background
        imports = _helper_imports(region) if background is not None else None

        def in_background(sig: Any, args: tuple[Any, ...], depth: int = 0
                          ) -> Callable[..., Any]:
            """Runs unfused now; the kernel replaces ``fn`` once compiled."""
            assert background is not None
            symbolic: SymbolicCall | None = None
            meta: Any = ()
            made: Any = None
            if plan is not None:  # metadata: the helper compiles it as a static region
                meta, symbolic = plan.call(args)
            elif dynamic:  # a symbol per dimension needs the tensors themselves: here
                made = _fake_inputs(args, dynamic)
            else:  # only the metadata: the fake mode is made on the compiling thread
                meta = [TensorMeta(tuple(a.shape), a.stride(), a.dtype, a.device)
                        if isinstance(a, torch.Tensor) else a for a in args]

            def compile() -> Callable[..., Any]:  # (from metadata: ``args`` are not kept)
                if plan is not None and symbolic is not None:
                    mode, fake, new_guards = symbolic_fakes(meta, symbolic)
                    kernel = _compile_graph(fn, mode, fake, single,
                                            symbolic_options(options))
                    return guarded(kernel, otherwise(sig, depth + 1), plan.at,
                                   new_guards())
                mode, fake = made if dynamic else fake_from_metadata(meta)
                return _compile_graph(fn, mode, fake, single, options)

            request = None
            if imports is not None and (not dynamic or plan is not None) \
                    and os.environ.get(HELPER_ENV, "process") != "thread":
                request = Request(name, source, sanitize(name), *imports, tuple(meta),
                                  single, options, shared_helper().artifact_path(name),
                                  cache_env(), symbolic)

            def install(impl: Callable[..., Any]) -> None:
                variants[sig] = impl

            def done(compiled: Callable[..., Any] | None, error: BaseException | None
                     ) -> None:
                if compiled is not None:  # timed against ``fn`` at its first call
                    install(measured(name, compiled, fn, install, background.status,
                                     draws=draws))

            def load(compiled: Compiled) -> Callable[..., Any]:
                kernel = _load_kernel(compiled, single)
                return kernel if plan is None else guarded(
                    kernel, otherwise(sig, depth + 1), plan.at, compiled.checks)

            background.submit(name, compile, done, request, load, _warm_loading)
            return fn

        # (static sizes, tensors only: the strides, one C call each, 5 µs a call less
        # than the general form on ResNet's 54 inputs)
        strides_only = not dynamic and all(isinstance(v.type, TensorType)
                                           for v in region.operands)

        def kernel(*args: Any) -> Any:
            # (dynamic: per contiguity, and per which sizes are 0 or 1, which the fake
            # inputs specialize: an unbacked count is 1 on one call and 3 on the next)
            sig = tuple(map(_STRIDE, args)) if strides_only else plan.key(args) \
                if plan is not None else tuple([
                    (a.is_contiguous() or a.stride(),
                     tuple(n if n < 2 else 2 for n in a.shape))
                    if dynamic else a.stride()
                    if isinstance(a, torch.Tensor) else None for a in args])
            impl = variants.get(sig)
            if impl is None:
                impl = variants[sig] = (compile_for(args) if background is None
                                        else in_background(sig, args))
            elif background is not None and background._warnings:
                warn_failures(background, self.name)
            return impl(*args)

        kernel.__name__ = kernel.__qualname__ = name
        kernel.__doc__ = f"{name}: a torch.compile (Inductor) kernel."
        return kernel


_STRIDE = torch.Tensor.stride


def _inductor_compile(
    fn: Callable[..., Any], args: tuple[Any, ...], single: bool, options: dict[str, Any] | None,
    dynamic: bool = False,
) -> Callable[..., Any]:
    """Traces ``fn`` at the ATen level on ``args`` and compiles it with Inductor.

    The graph is what AOTAutograd would hand Inductor for a pure function without grad:
    Inductor's decompositions applied, inputs as fake tensors of a static ``ShapeEnv``
    (``dynamic``: with symbolic sizes, so the kernel serves every size) inside a
    ``TracingContext``, where the FX graph cache looks for it. The compiled graph takes a
    list of inputs; the returned callable takes them positionally."""
    mode, fake = _fake_inputs(args, dynamic)
    return _compile_graph(fn, mode, fake, single, options)


def _symbolic_compile(fn: Callable[..., Any], plan: Plan, args: tuple[Any, ...],
                      single: bool, options: dict[str, Any] | None,
                      otherwise: Callable[..., Any]) -> Callable[..., Any]:
    """`_inductor_compile` of a region of a symbolic program over the program's symbols
    (`thunder_ir.lowering.symbolic_regions`), at the call of ``args``: the kernel checks
    the decisions the compile took beyond the program's guards, and runs ``otherwise``
    where one fails (`guarded`)."""
    meta, call = plan.call(args)
    mode, fake, new_guards = symbolic_fakes(meta, call)
    kernel = _compile_graph(fn, mode, fake, single, symbolic_options(options))
    return guarded(kernel, otherwise, plan.at, new_guards())


def _fake_inputs(args: tuple[Any, ...], dynamic: bool) -> tuple[Any, list[Any]]:
    """Fake tensors of ``args``' metadata, in a mode of their own (symbolic sizes with
    ``dynamic``)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    # (dynamic: a symbol per size, as the program's own table makes them; duck shapes
    # would give two sizes equal on this call one symbol, and the kernel would assert
    # them equal: unbacked counts of routed tokens differ from call to call)
    env = ShapeEnv(duck_shape=False) if dynamic else ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    return mode, [mode.from_tensor(a, static_shapes=not dynamic)
                  if isinstance(a, torch.Tensor) else a for a in args]


def fake_from_metadata(meta: list[Any]) -> tuple[Any, list[Any]]:
    """`_fake_inputs` (static sizes) from each tensor's `TensorMeta`: no real tensor is
    read, so any thread may make them."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())
    with mode:
        fake = [torch.empty_strided(m.shape, m.stride, dtype=m.dtype, device=m.device)
                if isinstance(m, TensorMeta) else m for m in meta]
    return mode, fake


def compile_graph(fn: Callable[..., Any], mode: Any, fake: list[Any], single: bool,
                  options: dict[str, Any] | None) -> Any:
    """Traces ``fn`` on fake inputs to an ATen graph and compiles it with Inductor's graph
    compiler: the ``CompiledFxGraph``, which takes a list of inputs (any thread or
    process: nothing here reads a real tensor)."""
    import torch._inductor
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    def as_tuple(*xs: Any) -> tuple[Any, ...]:
        out = fn(*xs)
        return (out,) if single else tuple(out)

    with torch.no_grad(), torch._inductor.config.patch(options or {}), \
            torch._guards.tracing(torch._guards.TracingContext(mode)):
        gm = make_fx(as_tuple, decomposition_table=select_decomp_table(),
                     tracing_mode="fake")(*fake)
        return compile_fx_inner(gm, fake)


def _compile_graph(fn: Callable[..., Any], mode: Any, fake: list[Any], single: bool,
                   options: dict[str, Any] | None) -> Callable[..., Any]:
    """`_inductor_compile`'s trace and compile, on fake inputs: `compile_graph`, called
    positionally."""
    compiled = compile_graph(fn, mode, fake, single, options)
    if single:
        return lambda *xs: compiled(list(xs))[0]
    return lambda *xs: compiled(list(xs))


def _helper_imports(region: RegionOp) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """What the tiered compile helper needs besides a region's printed function: the op
    classes it calls by name (`codegen.bind_op`) and the modules that registered the
    runtime functions it calls. None when one of them lives in ``__main__``, which the
    helper cannot import (the region then compiles on the thread)."""
    classes = {type(op) for op in region.walk()
               if isinstance(op, ThunderOp) and not isinstance(op, CallOp | ConstantOp)}
    modules = {resolve_callee(op.callee.data).__module__ for op in region.walk()
               if isinstance(op, CallOp) and op.callee.data.startswith(RUNTIME_NAMESPACE + ".")}
    if "__main__" in modules | {c.__module__ for c in classes}:
        return None
    return op_class_names(classes), tuple(sorted(modules))


def _warm_loading() -> None:
    """Imports what `_load_kernel` imports, and probes the CPU's vector extensions (a C++
    compile, once per process), so that the first load is quick."""
    import torch._inductor.codecache  # noqa: F401
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    pick_vec_isa()


def _load_kernel(compiled: Compiled, single: bool) -> Callable[..., Any]:
    """The kernel whose output code the tiered compile helper wrote: loaded as Inductor
    loads a cached graph (``PyCodeCache``; its C++ is in the shared cache), with the same
    input realignment. Loading traces nothing."""
    from torch._inductor.codecache import PyCodeCache

    module = PyCodeCache.load_by_key_path(compiled.key, compiled.path, compiled.linemap,
                                          compiled.attrs or None)
    call = module.call
    if compiled.realign:
        from torch._inductor.utils import align_inputs_from_check_idxs
        from torch.utils._ordered_set import OrderedSet

        call = align_inputs_from_check_idxs(call, compiled.realign,
                                            OrderedSet(compiled.mutated))
    if single:
        return lambda *xs: call(list(xs))[0]
    return lambda *xs: tuple(call(list(xs)))


register_executor(InductorExecutor(), default=False)


def tiered_executors(executors: Any) -> list[Any]:
    """``executors`` (None: the defaults) with a tiered Inductor executor of its own
    first, in place of the registered one: ``jit(fn, tiered=True)``."""
    from thunder_ir.lowering.executors import get_default_executors

    given = list(get_default_executors() if executors is None else executors)
    rest = [e for e in given if (e if isinstance(e, str) else e.name) != InductorExecutor.name]
    return [InductorExecutor(tiered=True), *rest]


__all__ = ["FUSED_KINDS", "FUSIBLE_CALLS", "FUSIBLE_CLAIMS", "INDEX_REDUCTIONS", "KEPT_OUT",
           "LIBRARY_OPS", "RANDOM_CALLS",
           "InductorExecutor", "compile_graph", "fake_from_metadata", "region_function",
           "region_function_and_source", "region_program", "tiered_executors"]
