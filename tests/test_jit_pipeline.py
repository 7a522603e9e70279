"""The pipeline ``jit`` runs is `jit_pipeline`'s list of registered passes: printed as a
spec, ``thunder-ir-opt -p`` replays it on the traced program's IR, and ``last_traces``
shows a trace per pass under the same names."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from xdsl.dialects import func

import thunder_ir
from thunder_ir.dialects.program import parse
from thunder_ir.lowering.codegen import CODEGEN
from thunder_ir.lowering.executors import resolve_executors
from thunder_ir.opt import main
from thunder_ir.passes.registry import get_pass, make_passes
from thunder_ir.pipeline import JitOptions, jit_pipeline, pipeline_spec


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 16)
        self.proj = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.nn.functional.gelu(self.fc(x))).softmax(-1)


def _functions(text: str) -> dict[str, str]:
    return {f.sym_name.data: str(f) for f in parse(text).ops if isinstance(f, func.FuncOp)}


def _prologue(trace: thunder_ir.Trace) -> str:
    return _functions(trace.mlir())["prologue"]


def _replay(mlir: str, spec: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
            ) -> dict[str, str]:
    src = tmp_path / "trace0.mlir"
    src.write_text(mlir)
    capsys.readouterr()
    assert main(["-p", spec, str(src)]) in (0, None)
    return _functions(capsys.readouterr().out)


def test_every_pass_of_the_jit_pipeline_is_registered() -> None:
    ex = tuple(resolve_executors(None))
    for training in (False, True):
        passes = jit_pipeline(JitOptions(executors=ex, training=training,
                                         requires_grad=(True,)))
        spec = pipeline_spec(passes)
        assert [type(p) for p in make_passes(spec)] == [type(p) for p in passes]
        assert all(get_pass(p.name) is type(p) for p in passes)


def test_opt_replays_what_jit_runs_for_inference(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    m = MLP().eval().requires_grad_(False)
    jm = thunder_ir.jit(m)
    jm(torch.randn(2, 8))
    traces = thunder_ir.last_traces(jm)
    passes = jit_pipeline(JitOptions(executors=tuple(resolve_executors(None))))
    # the passes, then code generation (not a pass of jit's: it returns the program)
    assert [t.pass_name for t in traces] == ["trace", *(p.name for p in passes), CODEGEN]
    got = _replay(traces[0].mlir(), pipeline_spec(passes), tmp_path, capsys)
    # the program module: @forward, then the cache key's @prologue, which no pass changes
    assert list(_functions(traces[0].mlir())) == ["forward", "prologue"]
    assert got == {**_functions(traces[-1].mlir()), "prologue": _prologue(traces[0])}


def test_opt_replays_what_jit_runs_for_training(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    m = MLP()
    jm = thunder_ir.jit(m)
    x = torch.randn(2, 8)
    jm(x).sum().backward()
    fwd, bwd = thunder_ir.last_traces(jm), thunder_ir.last_backward_traces(jm)
    rg = (False, *(True for _ in m.parameters()))
    passes = jit_pipeline(JitOptions(executors=tuple(resolve_executors(None)),
                                     training=True, requires_grad=rg))
    names = [p.name for p in passes] + [CODEGEN]
    assert [t.pass_name for t in fwd] == ["trace", *names]
    assert [t.pass_name for t in bwd] == names[names.index("remat-split"):]
    got = _replay(fwd[0].mlir(), pipeline_spec(passes), tmp_path, capsys)
    assert got == {**_functions(fwd[-1].mlir()), **_functions(bwd[-1].mlir()),
                   "prologue": _prologue(fwd[0])}
    assert list(got) == ["forward", "backward", "prologue"]


def test_training_steps_are_dumped_and_verified(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("THUNDER_IR_DUMP", "1")
    monkeypatch.setenv("THUNDER_IR_VERIFY", "1")
    jf = thunder_ir.jit(lambda x: (x.sin() * x).sum())
    x = torch.randn(3, requires_grad=True)
    jf(x).backward()
    err = capsys.readouterr().err
    for name in ("decompose-for-grad", "autodiff", "remat-split", "lower-to-torch",
                 "del-last-used"):
        assert f"// ----- IR after {name} (" in err
    assert "func.func @joint(" in err and "func.func @backward(" in err
    # after code generation the program module holds @forward, @backward and @prologue
    last = err[err.index("// ----- IR after del-last-used"):]
    assert [f in last for f in ("@forward(", "@backward(", "@prologue(")] == [True] * 3
    assert last.index("@backward(") < last.index("@prologue(")
    torch.testing.assert_close(x.grad, x.detach().sin() + x.detach() * x.detach().cos())


def test_lower_to_torch_reuses_the_lowering_of_ops_alike() -> None:
    """``lower-to-torch`` lowers each op in one sweep and reuses the call's properties for
    ops alike (class, properties, operand types): the IR equals what xDSL's worklist
    driver gives with every op lowered afresh, on a model whose layers repeat."""
    import sys

    from xdsl.pattern_rewriter import GreedyRewritePatternApplier, PatternRewriteWalker

    from thunder_ir.lowering.torch_executor import LowerToTorchPass, _Lower

    sys.path.insert(0, str(Path(__file__).parent))
    from models import Config, LlamaGPT

    class Afresh(_Lower):
        def lowered(self, op: object) -> object:  # type: ignore[override]
            self.calls.clear()
            return super().lowered(op)  # type: ignore[arg-type]

    cfg = Config(n_layer=3, n_embd=32, n_head=4, n_query_groups=2, intermediate_size=64,
                 block_size=16, vocab_size=64)
    jm = thunder_ir.jit(LlamaGPT(cfg))
    jm(torch.randint(0, 64, (2, 16))).sum().backward()
    for traces in (thunder_ir.last_traces(jm), thunder_ir.last_backward_traces(jm)):
        names = [t.pass_name for t in traces]
        before = traces[names.index("lower-to-torch") - 1]
        swept, walked = parse(before.mlir()), parse(before.mlir())
        LowerToTorchPass().apply(None, swept)  # type: ignore[arg-type]
        PatternRewriteWalker(GreedyRewritePatternApplier([Afresh()], dce_enabled=False),
                             apply_recursively=False).rewrite_module(walked)
        assert str(swept) == str(walked) == str(parse(traces[names.index("lower-to-torch")].mlir()))
        rule = _Lower()
        lowered = [rule.lowered(op) for op in parse(before.mlir()).walk()]
        assert len(rule.calls) < sum(c is not None for c in lowered) / 2  # most ops reuse


class _Detached(torch.autograd.Function):
    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x * 2

    @staticmethod
    def backward(ctx: object, g: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return g * 2


def _markers_and_dead_code(x: torch.Tensor) -> torch.Tensor:
    unused = x.exp()  # noqa: F841  (dead: dce erases it)
    with torch.no_grad():
        scale = x.abs().mean()
    return _Detached.apply(x).tanh() * scale + x.detach().sin()


def test_a_pass_that_reports_no_change_left_the_ir_as_it_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A `ReportsChange` pass that reports False left the module's text as it was, so
    that the recorder may share the previous record; over jit's pipelines (inference and
    training) of programs where each such pass finds work and where it finds none."""
    import sys

    from thunder_ir.passes import pipeline
    from thunder_ir.passes.change import ReportsChange, apply_pass

    sys.path.insert(0, str(Path(__file__).parent))
    from models import Config, LlamaGPT

    seen: dict[str, set[bool]] = {}

    def checked(p: object, ctx: object, module: object) -> bool:
        before = str(module)
        changed = apply_pass(p, ctx, module)  # type: ignore[arg-type]
        if isinstance(p, ReportsChange):
            seen.setdefault(p.name, set()).add(changed)
            assert changed or str(module) == before, p.name
        return changed

    monkeypatch.setattr(pipeline, "apply_pass", checked)
    cfg = Config(n_layer=2, n_embd=32, n_head=4, n_query_groups=2, intermediate_size=64,
                 block_size=16, vocab_size=64)
    llama = thunder_ir.jit(LlamaGPT(cfg))
    llama(torch.randint(0, 64, (2, 16))).sum().backward()
    x = torch.randn(4, 8, requires_grad=True)
    for arg in (x, x.detach()):  # training, then inference
        jf = thunder_ir.jit(_markers_and_dead_code)
        out = jf(arg)
        torch.testing.assert_close(out, _markers_and_dead_code(arg))
    assert set(seen) == {"decompose-for-grad", "strip-autograd", "decompose-ltorch", "dce",
                         "restride-outputs", "lower-claimed", "join-padded-sums",
                         "flatten-cat-chains"} \
        and all(False in s for s in seen.values()), seen


def test_passes_that_find_work_report_a_change() -> None:
    """Run on the traced program (autograd markers, unclaimed ltorch ops, a dead op, an op
    differentiated through its decomposition: ``abs``), ``decompose-for-grad``,
    ``strip-autograd``, ``decompose-ltorch`` and ``dce`` report a change and make one; run
    again, they report none and make none."""
    from thunder_ir.passes.autodiff import DecomposeForGradPass
    from thunder_ir.passes.cse_dce import DCEPass
    from thunder_ir.passes.decompose_ltorch import DecomposeLtorchPass
    from thunder_ir.passes.strip_autograd import StripAutogradPass

    jf = thunder_ir.jit(_markers_and_dead_code)
    jf(torch.randn(4, 8, requires_grad=True))
    module = parse(thunder_ir.last_traces(jf)[0].mlir())
    for p in (DecomposeForGradPass(), StripAutogradPass(), DCEPass(), DecomposeLtorchPass()):
        before = str(module)
        assert p.apply_and_report(None, module) and str(module) != before, p.name  # type: ignore[arg-type]
        again = str(module)
        assert not p.apply_and_report(None, module) and str(module) == again, p.name  # type: ignore[arg-type]


def test_traces_of_passes_that_changed_nothing_share_the_record() -> None:
    """``last_traces``: a pass that left the function as it was shows the same program
    as the pass before it (one record, frozen once), under its own name."""
    x = torch.randn(4, 8, requires_grad=True)
    jf = thunder_ir.jit(_markers_and_dead_code)
    jf(x).sum().backward()
    for traces in (thunder_ir.last_traces(jf), thunder_ir.last_backward_traces(jf)):
        names = [t.pass_name for t in traces]
        i = names.index("dce")
        records = [t.__dict__["_ir"] for t in traces]
        assert any(records[j] is records[j - 1] for j in range(1, len(traces)))
        for j in range(1, len(traces)):
            if records[j] is records[j - 1]:
                assert traces[j].mlir() == traces[j - 1].mlir()
                assert traces[j].ir is not traces[j - 1].ir  # each reads its own module
        assert names[i - 1] == "cse"
