"""Model-family benchmark: Hugging Face models and torch.nn layers under eager,
torch.compile and thunder_ir, from one run.

For each family of `tests/test_hf_models.py` and `tests/test_hf_families_next.py` (tiny
configs: hidden 64, 2 layers, batch 2, sequence 16), every variant is first checked
against eager (the training loss), then:

* first call: building the variant and its first forward (``fwd``), and its first
  forward + backward on a fresh copy (``fwd+bwd``): trace and compile included, each
  from a collected heap (``gc.collect()`` first: a full collection that the previous
  variant's garbage made due costs 0.5-1.4 s on a heap of 800k objects, and would
  otherwise land in whichever first call came next), with
  Inductor's on-disk and in-memory caches empty for each family (a family whose graphs
  another one compiled already, XLM-RoBERTa after RoBERTa, would otherwise hit them;
  torch.compile uses ``fallback_random`` so that its dropout draws are eager's);
* steady training step (forward, backward, SGD step), timed interleaved
  (`harness.time_interleaved`) with malloc pinned; besides the ratio of the medians, the
  median and range of the per-round ratios (each round runs every variant back to back,
  so a round's ratio is free of the machine's slower and faster spells).

Prints a table and the ratios thunder_ir / torch.compile (first calls) and thunder_ir /
eager (steady step). ``--autocast bf16`` runs every forward and loss under
``torch.autocast("cpu", torch.bfloat16)`` (losses then checked to bfloat16's tolerance).
Usage::

    python benchmarks/models.py [--families llama,bert,...] [--seconds 3] [--rounds 5]
                                [--no-compile] [--autocast bf16] [--tiered] [--no-first]
    python benchmarks/models.py --moe [--families mixtral,qwen2_moe,olmoe] [--steps 20]

``--moe`` (issue 52) measures the mixture-of-experts families (``--families``: default
Mixtral, Qwen2-MoE, OLMoE, and ``sparse_moe``, a sparse block whose sizes follow the
routing) over ``--steps`` training steps whose token ids differ
every step, so every step routes otherwise: the median step (after the first 5) of
eager, torch.compile (default options, and with
``torch._dynamo.config.capture_dynamic_output_shape_ops``) and thunder_ir, with the
graphs torch.compile made (Dynamo's unique graphs) and the programs thunder_ir compiled
(`thunder_ir.cache_misses`); each variant's parameters after the steps are checked
against eager's.

``--tiered`` adds ``jit(model, tiered=True)`` (`thunder_ir.lowering.tiered`): its first
calls are those of the unfused program's plus handing the kernels to the background
thread; its steady step is timed once every kernel is in (the steps that took are shown).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from harness import pin_malloc, time_interleaved  # noqa: E402


def _variant(name: str, model: Any) -> Any:
    import torch

    import thunder_ir

    if name == "thunder_ir":
        return thunder_ir.jit(model, tiered=False)
    if name == "thunder_ir:tiered":
        return thunder_ir.jit(model, tiered=True)
    if name == "torch.compile":
        torch._dynamo.reset()
        return torch.compile(model)
    return model


FIRST: list[bool] = [True]
"""Whether the first calls are timed (``--no-first``: not)."""

AUTOCAST: list[Any] = [None]
"""The dtype of ``--autocast`` (None: no autocast)."""


def _autocast() -> Any:
    import contextlib

    import torch

    dtype = AUTOCAST[0]
    return contextlib.nullcontext() if dtype is None else torch.autocast("cpu", dtype=dtype)


def _loss(fn: Any, kw: dict[str, Any]) -> Any:
    """A Hugging Face model's loss; for a torch.nn layer (a tensor out), its squares' sum."""
    with _autocast():
        out = fn(**kw)
        return out.loss if hasattr(out, "loss") else (out * out).float().sum()


def _families() -> dict[str, tuple[Callable[[], Any], Callable[[int], dict[str, Any]]]]:
    """Every family of `tests/test_hf_models.py`: its Hugging Face families, then its
    torch.nn transformer layers (input ``x``: batch 2, sequence ``L``, width ``H``); then
    the next families (`tests/test_hf_families_next.py`)."""
    import torch
    from test_hf_families_next import FAMILIES as NEXT
    from test_hf_models import _MHA, FAMILIES, H, _CausalEncoder

    def inputs(name: str) -> Callable[[int], dict[str, Any]]:
        def make(n: int) -> dict[str, Any]:
            return {name: torch.randn(2, n, H, generator=torch.Generator().manual_seed(0))}

        return make

    def encoder_layer() -> Any:
        return torch.nn.TransformerEncoderLayer(H, 4, 2 * H, batch_first=True)

    return {**FAMILIES, "nn_mha": (_MHA, inputs("x")),
            "nn_encoder_layer": (encoder_layer, inputs("src")),
            "nn_causal_encoder": (_CausalEncoder, inputs("x")), **NEXT}


def first_calls(variant: str, build: Callable[[], Any], kw: dict[str, Any]
                ) -> tuple[float, float]:
    """Seconds for the first forward (no grad) and the first forward + backward, each on a
    freshly built variant (torch.compile's from cold caches)."""
    if variant == "torch.compile":
        with _cold_inductor():
            return _first_calls(variant, build, kw)
    return _first_calls(variant, build, kw)


def _cold_inductor() -> Any:
    """Inductor's fresh-cache context: a new cache directory, its in-memory caches
    cleared (``fresh_cache``; ``fresh_inductor_cache`` in older torch)."""
    from torch._inductor import utils

    fresh = getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache
    return fresh()


def _first_calls(variant: str, build: Callable[[], Any], kw: dict[str, Any]
                 ) -> tuple[float, float]:
    import torch

    model = build().eval()
    gc.collect()
    t = time.perf_counter()
    fn = _variant(variant, model)
    with torch.no_grad(), _autocast():
        fn(**{k: v for k, v in kw.items() if k != "labels"})
    fwd = time.perf_counter() - t
    _settle(variant, fn)
    model = build().train()
    gc.collect()
    t = time.perf_counter()
    fn = _variant(variant, model)
    _loss(fn, kw).backward()
    both = time.perf_counter() - t
    _settle(variant, fn)
    return fwd, both


def _settle(variant: str, fn: Any) -> None:
    """A tiered variant's background compiles finish before anything else is timed."""
    if variant == "thunder_ir:tiered":
        import thunder_ir

        thunder_ir.compile_status(fn, wait=None)


def _step(fn: Any, opt: Any, kw: dict[str, Any]) -> Callable[[], None]:
    """One training step: forward, backward, optimizer step."""
    def run() -> None:
        opt.zero_grad(set_to_none=True)
        _loss(fn, kw).backward()
        opt.step()

    return run


def main() -> None:
    import tempfile

    # torch.compile's first calls from cold on-disk caches (a warm cache hides its compile)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-"))
    import torch
    from test_hf_models import L

    # Inductor draws dropout with its own generator unless told to call torch's: with
    # fallback_random every variant draws eager's numbers, so all compute one loss
    torch._inductor.config.fallback_random = True

    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default=",".join(_families()))
    ap.add_argument("--seconds", type=float, default=3.0, help="steady-step time per variant")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--no-first", action="store_true",
                    help="steady steps only: leave the first calls (cold compiles) out")
    ap.add_argument("--tiered", action="store_true",
                    help="add jit(model, tiered=True), timed once its kernels are in")
    ap.add_argument("--autocast", choices=("", "bf16"), default="",
                    help="forward and loss under torch.autocast('cpu', torch.bfloat16)")
    ap.add_argument("--moe", action="store_true",
                    help="mixture-of-experts rows: steps with new routings, graphs, programs")
    ap.add_argument("--steps", type=int, default=20, help="--moe: training steps")
    a = ap.parse_args()
    if a.moe:
        families = a.families if a.families != ",".join(_families()) else MOE_FAMILIES
        moe_rows(families.split(","), a.steps, not a.no_compile)
        return
    AUTOCAST[0] = torch.bfloat16 if a.autocast == "bf16" else None
    FIRST[0] = not a.no_first
    warnings.simplefilter("ignore")
    pinned = pin_malloc()
    variants = ["eager", "thunder_ir"] + (["thunder_ir:tiered"] if a.tiered else []) + (
        [] if a.no_compile else ["torch.compile"])
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__},"
          f" malloc {'pinned' if pinned else 'default'}; batch 2, sequence {L}")
    print(f"{'family':<12}" + "".join(f"{v + ' fwd':>18}{v + ' fwd+bwd':>22}" for v in variants)
          + "".join(f"{v + ' step':>20}" for v in variants) + "  ratios")
    failed: list[str] = []
    for family in a.families.split(","):
        try:
            print(f"{family:<12}{_row(family, variants, a.seconds, a.rounds)}", flush=True)
        except Exception as e:  # one family's failure is its row; the run goes on
            failed.append(family)
            print(f"{family:<12}FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


MOE_FAMILIES = "mixtral,qwen2_moe,olmoe,sparse_moe"


def _sparse_moe() -> tuple[Callable[[], Any], Callable[[int], dict[str, Any]]]:
    """``sparse_moe``: Mixtral's sparse block as Mixtral's first Hugging Face release
    wrote it (`tests/test_data_dependent.py`'s ``SparseMoE``: ``torch.where`` per expert,
    ``index_add_`` of the routed tokens: sizes that depend on the routing), width 64, 8
    experts, top-2."""
    import torch
    from test_data_dependent import SparseMoE

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.moe = SparseMoE(d=64, f=128, experts=8, k=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.moe(x)[0]

    return Block, lambda n: {"x": torch.randn(2, n, 64)}


def _moe_variant(name: str, model: Any) -> Any:
    import torch

    if name == "torch.compile capture":
        torch._dynamo.reset()
        return torch.compile(model)  # (the flag is set around its calls: `moe_rows`)
    return _variant(name, model)


def moe_rows(families: list[str], steps: int, compile_: bool) -> None:
    """``--moe``: each family trained ``steps`` steps on new token ids each step (a new
    routing each step) per variant; the median step after the first 5, the graphs or
    programs made, the parameters after the steps against eager's."""
    import contextlib
    import copy

    import torch
    from torch._dynamo.utils import counters

    import thunder_ir

    warnings.simplefilter("ignore")
    torch._inductor.config.fallback_random = True
    fams = {**_families(), "sparse_moe": _sparse_moe()}
    variants = ["eager", "thunder_ir"] + (
        ["torch.compile", "torch.compile capture"] if compile_ else [])
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__};"
          f" {steps} training steps (SGD), new token ids every step, batch 2, sequence 16")
    print(f"{'family':<11} {'variant':<23} {'step ms':>8} {'/eager':>7} {'/compile':>9} "
          f"{'graphs or programs':>19}")
    for family in families:
        build, inputs = fams[family]
        torch.manual_seed(0)
        base = build()
        batches = []
        for k in range(steps):
            torch.manual_seed(1000 + k)
            batches.append(inputs(16))
        medians: dict[str, float] = {}
        params: dict[str, list[torch.Tensor]] = {}
        for name in variants:
            model = copy.deepcopy(base)
            model.train()
            fn = _moe_variant(name, model)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            counters.clear()
            capture = (torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True)
                       if name == "torch.compile capture" else contextlib.nullcontext())
            times = []
            with capture:
                for kw in batches:
                    t0 = time.perf_counter()
                    torch.manual_seed(0)
                    _loss(fn, kw).backward()
                    opt.step()
                    opt.zero_grad()
                    times.append(time.perf_counter() - t0)
            params[name] = [p.detach().clone() for p in model.parameters()]
            if name != "eager":
                for got, want in zip(params[name], params["eager"], strict=True):
                    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-4)
            medians[name] = statistics.median(times[5:] or times)
            made = (thunder_ir.cache_misses(fn) if name.startswith("thunder_ir")
                    else counters["stats"]["unique_graphs"] if "compile" in name else "")
            ref = medians.get("torch.compile")
            print(f"{family:<11} {name:<23} {medians[name] * 1e3:8.2f} "
                  f"{medians[name] / medians['eager']:7.2f} "
                  f"{'' if ref is None else f'{medians[name] / ref:.2f}':>9} {made!s:>19}",
                  flush=True)


def _row(family: str, variants: list[str], seconds: float, rounds: int) -> str:
    """One family's cells: every variant's loss checked against eager's, then its first
    calls and its steady step."""
    import torch
    from test_hf_models import L

    build_raw, inputs = _families()[family]

    def build(b: Callable[[], Any] = build_raw) -> Any:
        torch.manual_seed(0)
        return b()

    kw = inputs(L)
    firsts = {v: first_calls(v, build, kw) if FIRST[0] else (math.nan, math.nan)
              for v in variants}
    models = {v: build().train() for v in variants}
    fns = {v: _variant(v, models[v]) for v in variants}
    ref = None
    wrong: dict[str, str] = {}
    for v in variants:  # every variant's loss is eager's before anything is timed
        torch.manual_seed(0)  # dropout: the same draws for every variant
        loss = _loss(fns[v], kw)
        _settle(v, fns[v])  # before torch.compile traces: make_fx and Dynamo do not mix
        ref = loss if ref is None else ref
        tol = (2e-2, 2e-2) if AUTOCAST[0] is not None else (1e-5, 1e-5)
        if not torch.allclose(loss, ref, rtol=tol[0], atol=tol[1]):
            msg = f"{v}'s loss {loss.item()} is not eager's {ref.item()}"
            if v != "torch.compile":
                raise AssertionError(msg)
            wrong[v] = msg  # torch.compile's own miscompile: reported, not timed
    timed = [v for v in variants if v not in wrong]
    # lr 0: the step runs in full but leaves the weights alone, so every timed step
    # computes what the checked one did
    opts = {v: torch.optim.SGD(models[v].parameters(), lr=0.0) for v in timed}
    if "thunder_ir:tiered" in timed:  # steps until its kernels are in, then timed like all
        import thunder_ir

        step = _step(fns["thunder_ir:tiered"], opts["thunder_ir:tiered"], kw)
        swap = 0
        while not thunder_ir.compile_status(fns["thunder_ir:tiered"])["ready"] or swap < 3:
            step()
            swap += 1

    timings, others = time_interleaved({v: _step(fns[v], opts[v], kw) for v in timed},
                                  "cpu", seconds, rounds)
    cells = "".join(f"{firsts[v][0]:>16.2f} s{firsts[v][1]:>20.2f} s" for v in variants)
    cells += "".join(f"{timings[v].ms:>17.1f} ms" if v in timings else f"{'wrong loss':>20}"
                     for v in variants)
    # each round ran every variant back to back: its ratio cancels the machine's slow drift
    paired = sorted(t / e for t, e in zip(timings["thunder_ir"].rounds, timings["eager"].rounds))
    ratios = [f"step {timings['thunder_ir'].ms / timings['eager'].ms:.2f}x eager (per round "
              f"{statistics.median(paired):.2f}x, {paired[0]:.2f}-{paired[-1]:.2f})"]
    if "torch.compile" in variants and FIRST[0]:
        tc = firsts["torch.compile"]
        ratios.append(f"first fwd+bwd {tc[1] / firsts['thunder_ir'][1]:.0f}x shorter "
                      "than torch.compile")
    if "thunder_ir:tiered" in timings:
        tiered = timings["thunder_ir:tiered"].ms
        per = ""
        if "torch.compile" in timings:  # per round: free of the machine's slow spells
            pr = sorted(t / c for t, c in zip(timings["thunder_ir:tiered"].rounds,
                                              timings["torch.compile"].rounds))
            per = (f", {tiered / timings['torch.compile'].ms:.2f}x torch.compile (per round"
                   f" {statistics.median(pr):.2f}x, {pr[0]:.2f}-{pr[-1]:.2f})")
        ratios.append(f"tiered step {tiered / timings['eager'].ms:.2f}x eager{per}"
                      f" (in after {swap} steps)")
    ratios.extend(wrong.values())
    if others is not None:  # CPU time other processes took while the steps were timed
        ratios.append(f"other processes {others:.2f} CPUs busy")
    return f"{cells}  {'; '.join(ratios)}"

if __name__ == "__main__":
    main()
