"""thunder_ir as a torch.compile backend (``thunder_ir.dynamo``), against eager.

The seed's example (an op with only the torch fallback splits the graph into
``thunder_0``, ``inductor_1``, ``thunder_2``), the project's Llama- and GPT-2-style models,
graph breaks (``print``, ``if x.sum() > 0``, ``torch.no_grad()``), a mixture of experts
with data-dependent routing, Hugging Face models, dynamic shapes, results' types and
structure in static and dynamic graphs, ``thunderfx``, the named backend and ``report``'s
scripts. Every check compares outputs and gradients (``None``
where eager has ``None``) with eager PyTorch.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import models as M
import pytest
import torch
from torch import nn

import thunder_ir
from thunder_ir.dynamo import (
    InductorPartition,
    SplitReasonType,
    ThunderCompiler,
    report,
    thunderfx,
)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    """Dynamo keeps compiled frames per code object (and stops compiling a code object
    after a few recompiles): each test starts from a clean slate."""
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    torch._dynamo.reset()


def _close(a: Any, b: Any, what: str = "") -> None:
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=what or None)


def _same_grads(model: nn.Module, eager: nn.Module) -> None:
    for (k, p), (_, q) in zip(model.named_parameters(), eager.named_parameters(),
                              strict=True):
        assert (p.grad is None) == (q.grad is None), f"{k}: None gradient differs"
        if p.grad is not None:
            _close(p.grad, q.grad, k)


def _train_against_eager(model: nn.Module, inputs: Callable[[], dict[str, Any]],
                         loss_of: Callable[[Any], torch.Tensor], steps: int = 2,
                         **options: Any) -> ThunderCompiler:
    """``steps`` training steps through ThunderCompiler and eager; returns the backend."""
    eager = copy.deepcopy(model)
    backend = ThunderCompiler(**options)
    compiled = torch.compile(model, backend=backend)
    for step in range(steps):
        kw = inputs()
        torch.manual_seed(step)
        loss = loss_of(compiled(**kw))
        loss.backward()
        torch.manual_seed(step)
        expected = loss_of(eager(**kw))
        expected.backward()
        _close(loss, expected, f"loss at step {step}")
        _same_grads(model, eager)
        model.zero_grad(set_to_none=True)
        eager.zero_grad(set_to_none=True)
    return backend


# ---- the seed's example


def foo(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = torch.sin(x)
    return a + torch.sinc(a) + torch.cos(y)


def test_seed_example_splits_around_the_fallback_op() -> None:
    backend = ThunderCompiler()
    opt_foo = torch.compile(foo, backend=backend)
    x = torch.randn(4, 4, requires_grad=True)
    y = torch.randn(4, 4, requires_grad=True)
    out = opt_foo(x, y)
    assert type(out.grad_fn).__name__ == "ThunderFunctionBackward"
    xe, ye = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    expected = foo(xe, ye)
    _close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    _close((x.grad, y.grad), (xe.grad, ye.grad))

    assert len(backend.subgraph_infos) == 1
    info = backend.subgraph_infos[0]
    assert "torch.sinc" in str(info.original_graph_module)
    assert len(info.submodule_to_compiled_functions) == 3
    assert len(info.thunder_compiled_fns) == 2
    printed = str(info.split_graph_module)
    for part in ("(thunder_0): ThunderModule", "(inductor_1): InductorPartition",
                 "(thunder_2): ThunderModule", "self.thunder_0(", "self.inductor_1(",
                 "self.thunder_2("):
        assert part in printed, part
    subgraphs = [str(g) for g in info.submodule_to_compiled_functions]
    assert "torch.sin(" in subgraphs[0] and "torch.sinc(" in subgraphs[1]
    assert "torch.cos(" in subgraphs[2]
    (reason,) = info.split_reasons
    assert reason.reason_type is SplitReasonType.MISSING_OP_SUPPORT
    assert reason.reason_type.value == 2
    assert "node with name: sinc" in reason.info and "sinc" in str(reason)
    assert re.search(r"\(at .*test_dynamo.py:\d+\)", reason.info)  # the user's line
    assert "automatic torch fallback" in reason.info and reason.exception is None

    first, second = info.thunder_compiled_fns
    assert "torch.sin(" in str(thunder_ir.last_traces(first)[-1])
    assert "torch.cos(" in str(thunder_ir.last_backward_traces(first)[-1])
    fwd2 = str(thunder_ir.last_traces(second)[-1])
    assert "torch.cos(" in fwd2 and "torch.add(" in fwd2
    assert "torch.sin(" in str(thunder_ir.last_backward_traces(second)[-1])


def test_supported_graph_is_one_thunder_partition_called_without_the_prologue() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2 + x.exp()

    backend = ThunderCompiler()
    cf = torch.compile(f, backend=backend)
    for _ in range(3):
        x = torch.randn(3, 5, requires_grad=True)
        out = cf(x)
        _close(out, f(x))
    (info,) = backend.subgraph_infos
    (tm,) = info.thunder_compiled_fns
    assert not info.split_reasons
    # the first call compiled; the next two ran the program directly (Dynamo guarded them)
    assert thunder_ir.cache_misses(tm) == 1 and thunder_ir.cache_hits(tm) == 0
    with torch.no_grad():  # another grad mode: Dynamo recompiles, the program differs
        _close(cf(x), f(x))


def test_options_reach_thunder_and_inductor_partitions() -> None:
    with pytest.raises(TypeError, match="unsupported options"):
        ThunderCompiler(bogus=1)
    backend = ThunderCompiler(remat="save-all", executors=["torch"],
                              torch_inductor_options={"epilogue_fusion": False})
    x = torch.randn(8, requires_grad=True)
    out = torch.compile(lambda t: torch.sinc(t.sin()).cos(), backend=backend)(x)
    out.sum().backward()
    xe = x.detach().clone().requires_grad_()
    torch.sinc(xe.sin()).cos().sum().backward()
    _close(x.grad, xe.grad)
    info = backend.subgraph_infos[0]
    tm = info.thunder_compiled_fns[0]
    assert tm._compiled.compiler.remat_policy.name == "save-all"
    inductor = info.split_graph_module.inductor_1
    assert isinstance(inductor, InductorPartition)
    assert backend.torch_inductor_options == {"epilogue_fusion": False}
    assert inductor.options == {"epilogue_fusion": False}


def test_inductor_partitions_are_compiled_by_inductor() -> None:
    """An unsupported partition runs Inductor's compiled code (its counters move; one
    compiled callable per input signature), with eager's values and gradients. A
    ``torch.compile``d partition called inside Dynamo's frame would run eagerly."""
    from torch._dynamo.utils import counters

    backend = ThunderCompiler()
    f = torch.compile(lambda t: torch.sinc(t.sin()).cos(), backend=backend)
    counters.clear()
    # (seeded: Inductor's sinc gradient differs from eager's by about 1e-3 relative where
    # the gradient is near 0, which some draws hit)
    x = torch.randn(8, generator=torch.Generator().manual_seed(0), requires_grad=True)
    out = f(x)
    out.sum().backward()
    xe = x.detach().clone().requires_grad_()
    expected = torch.sinc(xe.sin()).cos()
    expected.sum().backward()
    _close(out, expected)
    _close(x.grad, xe.grad)
    assert sum(counters["inductor"].values()) > 0
    inductor = backend.subgraph_infos[0].split_graph_module.inductor_1
    assert len(inductor.compiled) == 1
    with torch.no_grad():  # another grad mode: Inductor compiles that one too
        _close(f(x), expected.detach())


# ---- the project's models


def test_llama_style_model_trains_as_eager() -> None:
    torch.manual_seed(0)
    model = M.LlamaGPT(M.Config())
    backend = _train_against_eager(
        model, lambda: {"idx": torch.randint(0, 96, (2, 16))},
        lambda logits: logits.float().pow(2).mean())
    (info,) = backend.subgraph_infos
    assert len(info.thunder_compiled_fns) == 1 and not info.split_reasons


def test_gpt2_style_model_trains_as_eager() -> None:
    torch.manual_seed(0)
    model = M.GPT2(M.Config())
    _train_against_eager(
        model, lambda: {"idx": torch.randint(0, 96, (2, 16)),
                        "targets": torch.randint(0, 96, (2, 16))}, lambda out: out[1])


class GraphBreaks(nn.Module):
    """A print, a branch on a tensor's value and a no-grad block: Dynamo's graph breaks."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        print("hidden norm computed")
        if h.sum() > 0:
            h = h * 2
        else:
            h = h - 1
        with torch.no_grad():
            scale = h.abs().mean()
        return self.b(h) / (1 + scale)


def test_graph_breaks_run_and_train_as_eager(capsys: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(0)
    model = GraphBreaks()
    backend = _train_against_eager(model, lambda: {"x": torch.randn(4, 8)},
                                   lambda y: y.pow(2).sum(), steps=3)
    assert len(backend.subgraph_infos) >= 2  # Dynamo broke the graph
    assert capsys.readouterr().out.count("hidden norm computed") == 6  # eager's 3 and ours
    # the other branch
    eager = copy.deepcopy(model)
    with torch.no_grad():
        model.a.bias.fill_(-100.0)
        eager.a.bias.fill_(-100.0)
    compiled = torch.compile(model, backend=ThunderCompiler())
    x = torch.randn(4, 8)
    _close(compiled(x), eager(x))


class MoE(nn.Module):
    """A mixture of experts routed with data-dependent shapes (``torch.where(mask)``)."""

    def __init__(self, dim: int = 16, n_experts: int = 4, top_k: int = 2) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, n_experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(dim, 2 * dim), nn.SiLU(),
                                                   nn.Linear(2 * dim, dim))
                                     for _ in range(n_experts))
        self.top_k = top_k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = self.gate(x).softmax(-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == i)
            if token.numel() == 0:
                continue
            out = out.index_add(0, token, expert(x[token]) * weights[token, slot, None])
        return out


def test_mixture_of_experts_with_data_dependent_routing_trains_as_eager() -> None:
    torch.manual_seed(0)
    _train_against_eager(MoE(), lambda: {"x": torch.randn(10, 16)},
                         lambda y: y.pow(2).sum())


def test_in_place_write_to_another_partitions_result_goes_to_inductor() -> None:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        acc = torch.zeros_like(x) * x.sum()  # requires grad: not a leaf
        (rows,) = torch.where(idx > 0)  # graph break: acc enters the next graph
        acc.index_add_(0, rows, x[rows] * 2)
        return acc.sin()

    x = torch.randn(6, 3, requires_grad=True)
    idx = torch.tensor([1, 0, 1, 1, 0, 1])
    xe = x.detach().clone().requires_grad_()
    out = torch.compile(f, backend=ThunderCompiler())(x, idx)
    expected = f(xe, idx)
    _close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    _close(x.grad, xe.grad)


def test_jit_writes_in_place_to_a_non_leaf_argument_as_eager() -> None:
    """The argument takes the write's history (tests/test_detached_writes.py)."""
    def f(x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x * 3

    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    with torch.no_grad():
        b.copy_(a)
    xa, xb = a * 1, b * 1
    out, expected = thunder_ir.jit(f)(xa), f(xb)
    _close(out, expected)
    _close(xa, xb)
    assert xa.grad_fn is not None and not xa.is_leaf
    (out.sum() + xa.sum()).backward()
    (expected.sum() + xb.sum()).backward()
    _close(a.grad, b.grad)


def test_data_dependent_error_points_at_the_backend() -> None:
    def route(x: torch.Tensor) -> torch.Tensor:
        return x * float(x.abs().max().numpy())  # a NumPy read of the data (an ``.item()``,
        # its arithmetic or a size would be a symbol: tests/test_data_dependent.py,
        # tests/test_value_reads.py, tests/test_float_item_operands.py)

    with pytest.raises(thunder_ir.DataDependentError,
                       match=r"backend=thunder_ir.dynamo.ThunderCompiler\(\)"):
        thunder_ir.jit(route)(torch.randn(4))
    x = torch.randn(8)
    _close(torch.compile(route, backend=ThunderCompiler())(x), route(x))


# ---- one-call helper, named backend, report


def test_thunderfx_and_the_named_backend() -> None:
    torch.manual_seed(0)
    model = M.LLaMAMLP(64, 172)
    x = torch.randn(2, 4, 64, requires_grad=True)
    cfx = thunderfx(model)
    out = cfx(x)
    _close(out, model(x))
    out.sum().backward()
    (fwd,) = cfx.last_traces
    (bwd,) = cfx.last_backward_traces
    assert "def forward" in str(fwd) and "def backward" in str(bwd)
    assert len(cfx.backend.subgraph_infos) == 1

    torch._dynamo.reset()
    named = torch.compile(model, backend="thunder_ir")
    y = named(x)
    _close(y, model(x))
    assert type(y.grad_fn).__name__ == "ThunderFunctionBackward"


def test_report_writes_scripts_that_reproduce_each_graph(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = GraphBreaks()
    paths = report(model, torch.randn(4, 8), folder=tmp_path)
    assert len(paths) >= 2
    text = paths[0].read_text()
    assert "class Graph(torch.nn.Module)" in text and "INPUTS = [" in text
    for path in paths:
        run = subprocess.run([sys.executable, str(path), "--no-benchmark"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        assert "thunder_ir matches eager" in run.stdout
    seed = report(foo, torch.randn(4, 4, requires_grad=True), torch.randn(4, 4),
                  folder=tmp_path / "seed")
    text = seed[0].read_text()
    assert "thunder_0, inductor_1, thunder_2" in text and "MISSING_OP_SUPPORT" in text
    run = subprocess.run([sys.executable, str(seed[0])], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    for label in ("eager", "inductor", "thunder_ir"):
        assert f"{label}:" in run.stdout


# ---- Hugging Face models


T = pytest.importorskip("transformers", reason="transformers is in the test extra")


@pytest.mark.parametrize("family", ["llama", "gpt2", "bert", "mixtral"])
def test_hugging_face_family_trains_through_the_backend(family: str) -> None:
    from test_hf_models import FAMILIES, L

    build, inputs = FAMILIES[family]
    torch.manual_seed(0)
    model = build()
    model.eval()
    eager = copy.deepcopy(model)
    kw = inputs(L)
    with torch.no_grad():
        _close(torch.compile(model, backend=ThunderCompiler())(**kw).logits,
               eager(**kw).logits, "inference logits")
    torch._dynamo.reset()
    model.train()
    _train_against_eager(model, lambda: inputs(L), lambda out: out.loss)


def test_graphs_called_under_autocast_run_on_thunder_ir() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).relu().sum(-1)

    x, w = torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)
    backend = ThunderCompiler()
    cf = torch.compile(f, backend=backend)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, expected = cf(x, w), f(x, w)
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected)
    info = backend.subgraph_infos[0]
    assert len(info.thunder_compiled_fns) == 1 and not info.split_reasons
    out.float().sum().backward()
    assert w.grad is not None and w.grad.dtype == torch.float32
    out = cf(x, w)  # outside autocast: Dynamo compiles again
    _close(out, f(x, w))
    assert out.dtype == torch.float32


def test_autocast_regions_inside_the_graph_run_on_thunder_ir() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            with torch.autocast("cpu", enabled=False):
                z = x.sin() @ w
        return y.relu().sum(-1) + z.sum(-1)

    x, w = torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)
    backend = ThunderCompiler()
    out = torch.compile(f, backend=backend)(x, w)
    want = f(x, w)
    assert out.dtype == want.dtype == torch.float32
    torch.testing.assert_close(out, want)
    assert sum(len(i.thunder_compiled_fns) for i in backend.subgraph_infos) == 1
    assert not any(i.split_reasons for i in backend.subgraph_infos)
    out.sum().backward()
    assert w.grad is not None and w.grad.dtype == torch.float32


def test_inference_mode_bf16_fullgraph_and_named_backend_options() -> None:
    torch.manual_seed(0)
    model = M.LlamaGPT(M.Config())
    idx = torch.randint(0, 96, (2, 16))
    with torch.inference_mode():
        _close(torch.compile(model, backend=ThunderCompiler())(idx), model(idx))
    torch._dynamo.reset()
    _close(torch.compile(model, backend=ThunderCompiler(), fullgraph=True)(idx), model(idx))
    torch._dynamo.reset()
    named = torch.compile(model, backend="thunder_ir", options={"remat": "save-all"})
    _close(named(idx), model(idx))
    torch._dynamo.reset()
    bf16 = M.LlamaGPT(M.Config()).bfloat16()
    out = torch.compile(bf16, backend=ThunderCompiler())(idx)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, bf16(idx), atol=2e-2, rtol=2e-2)


def test_parameters_after_adamw_steps_match_eager() -> None:
    torch.manual_seed(0)
    model = M.LlamaGPT(M.Config())
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend=ThunderCompiler())
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, eager)]
    for _ in range(3):
        idx = torch.randint(0, 96, (2, 16))
        for fn, opt in ((compiled, opts[0]), (eager, opts[1])):
            opt.zero_grad(set_to_none=True)
            fn(idx).float().pow(2).mean().backward()
            opt.step()
    for (k, p), (_, q) in zip(model.named_parameters(), eager.named_parameters(),
                              strict=True):
        _close(p, q, k)


def test_dynamo_symbolic_sizes_are_one_program_per_partition() -> None:
    """With Dynamo's dynamic shapes, a partition's inputs that Dynamo traced as symbols
    (and its ``SymInt`` inputs) are symbolic in thunder_ir from the first call: one program
    serves every size, forward and backward matching eager."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x.sin() * x.shape[0]).reshape(-1, 2).sum(0)

    backend = ThunderCompiler()
    cf = torch.compile(f, backend=backend, dynamic=True)
    for n in (4, 6, 8, 10, 12):
        x = torch.randn(n, 2, requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        out, expected = cf(x), f(xe)
        _close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        _close(x.grad, xe.grad)
    (info,) = backend.subgraph_infos
    (part,) = info.thunder_compiled_fns
    assert thunder_ir.cache_misses(part) == 1
    assert part._compiled.symbolic_failures == []


# ---- output structure


def _sinc_last(x: torch.Tensor) -> torch.Tensor:
    return torch.sinc(x * 2 + 1)


def _sinc_inside(x: torch.Tensor) -> torch.Tensor:
    return torch.sinc(x) * 2 + 1


def _two_outputs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.sinc(x).cos(), x.sin() * 2


def _nested_outputs(x: torch.Tensor) -> dict[str, Any]:
    s = torch.sinc(x)
    return {"sinc": s, "pair": [s.exp(), (x * 3, torch.sinc(s))]}


def _thunder_only(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.sin() * 2, x.cos()


STRUCTURE_CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "Inductor partition last": _sinc_last,
    "Inductor partition first": _sinc_inside,
    "two outputs": _two_outputs,
    "nested outputs": _nested_outputs,
    "no Inductor partition": _thunder_only,
    "Inductor only": torch.sinc,
}


def _real_tensors(value: Any) -> None:
    for t in torch.utils._pytree.tree_leaves(value):
        if isinstance(t, torch.Tensor):
            assert type(t) in (torch.Tensor, nn.Parameter), f"a {type(t).__name__} came back"


@pytest.mark.parametrize("dynamic", [None, True, False], ids=["automatic", "dynamic", "static"])
@pytest.mark.parametrize("case", list(STRUCTURE_CASES))
def test_results_have_eagers_structure_in_static_and_dynamic_graphs(
        case: str, dynamic: bool | None) -> None:
    """What a call returns is what eager returns (a tensor, not a one-element list; the
    same tuples, lists and dicts), with eager's values and gradients, whether the graph is
    static or Dynamo made it dynamic, with and without Inductor partitions. (Inductor
    rewrites a one-output partition to return a list and unwraps it only for the first
    signature it compiled: a dynamic graph's next size got ``[tensor]``.)"""
    fn = STRUCTURE_CASES[case]
    backend = ThunderCompiler()
    compiled = torch.compile(fn, backend=backend, dynamic=dynamic)
    gen = torch.Generator().manual_seed(0)
    for n in (3, 4, 5, 6):
        x = torch.randn(n, generator=gen, requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        out, expected = compiled(x), fn(xe)
        assert torch.utils._pytree.tree_structure(out) == \
            torch.utils._pytree.tree_structure(expected), (n, out)
        assert type(out) is type(expected)
        _real_tensors(out)
        _close(out, expected, f"size {n}")
        leaves = torch.utils._pytree.tree_leaves(out)
        sum(t.sum() for t in leaves).backward()
        sum(t.sum() for t in torch.utils._pytree.tree_leaves(expected)).backward()
        _real_tensors(x.grad)
        _close(x.grad, xe.grad, f"gradient at size {n}")
        with torch.no_grad():  # inference: another signature of each partition
            _close(compiled(x), fn(xe), f"no_grad at size {n}")
    if case != "no Inductor partition":
        assert any(not k for info in backend.subgraph_infos
                   for k in _kinds(info.split_graph_module)), "no Inductor partition ran"


def _kinds(split_gm: torch.fx.GraphModule) -> list[bool]:
    return [isinstance(m, thunder_ir.ThunderModule) for _, m in split_gm.named_children()]


def test_a_module_with_an_inductor_partition_trains_with_dynamic_shapes() -> None:
    """A model whose graph has an Inductor partition and several outputs, trained through
    sizes that make Dynamo's graph dynamic: loss, outputs and gradients are eager's."""
    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = torch.sinc(self.proj(x))
            return h.tanh(), h.sum(-1)

    torch.manual_seed(0)
    model = Head()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend=ThunderCompiler())
    for n in (2, 3, 5, 7):
        x = torch.randn(n, 4)
        out, expected = compiled(x), eager(x)
        assert type(out) is tuple and all(type(t) is torch.Tensor for t in out)
        _close(out, expected, f"size {n}")
        (out[0].pow(2).mean() + out[1].mean()).backward()
        (expected[0].pow(2).mean() + expected[1].mean()).backward()
        _same_grads(model, eager)
        model.zero_grad(set_to_none=True)
        eager.zero_grad(set_to_none=True)
