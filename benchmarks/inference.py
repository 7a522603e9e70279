"""Inference benchmark: thunder_ir vs eager vs torch.compile, from one run.

Measures:
* the cached per-call time of ``x + 1`` on a (4,) tensor and of the LLaMAMLP on a tiny input;
* the first call (trace + compile) of the Llama-style model, in this process (after the
  others' first calls: torch's lazy imports done) and in a fresh process of its own
  (``import thunder_ir``, ``jit`` and the first call; eager's first call alone);
* the steady forward of the Llama-style model, and its cached call on a 1x4 input.

The Llama rows also time ``thunder_ir + torch_compile`` (column ``+torch_compile``): the
Inductor fusion executor first (`executors=["torch_compile", *get_default_executors()]`),
which is not in the CPU defaults (see ``docs/fusion.md``).

Every variant's output is checked against eager's before timing. Steady figures are timed
*interleaved* (`harness.time_interleaved`: rounds in which every variant runs for an
equal slice, so a slow spell of the machine hits them alike) with glibc's malloc
thresholds pinned (`harness.pin_malloc`); ratios are times (below 1.00x is faster)
against eager and torch.compile from the same run. Usage::

    python benchmarks/inference.py [--layers 4] [--embd 256] [--seq 256] [--batch 2]
                                   [--seconds 2] [--rounds 10] [--no-compile]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from harness import add_llama_args, llama_config, pin_malloc, time_interleaved  # noqa: E402
from models import LlamaGPT, LLaMAMLP  # noqa: E402

import thunder_ir  # noqa: E402

FUSED = "thunder_ir+torch_compile"
COLUMNS = ("eager", "thunder_ir", FUSED, "torch.compile")
HEADERS = {FUSED: "+torch_compile"}


def first_call_s(make: Callable[[], Callable[..., Any]], *args: Any) -> float:
    """Seconds for building ``make()`` and its first call on ``args``."""
    t = time.perf_counter()
    fn = make()
    fn(*args)
    return time.perf_counter() - t


_FRESH = """
import json, sys, time
import torch
from harness import llama_config
from models import LlamaGPT
a = json.loads(sys.argv[1])
cfg = llama_config(type("A", (), a), vocab_size=512)
torch.manual_seed(0)
model = LlamaGPT(cfg).eval().requires_grad_(False)
idx = torch.randint(0, cfg.vocab_size, (a["batch"], a["seq"]))
t = time.perf_counter()
if a["variant"] == "thunder_ir":
    import thunder_ir
    fn = thunder_ir.jit(model, tiered=False)
else:
    fn = model
setup = time.perf_counter() - t
fn(idx)
total = time.perf_counter() - t
print(json.dumps({"setup": setup, "total": total,
                  "loaded": [m for m in ("sympy", "torch._dynamo") if m in sys.modules]}))
"""


def fresh_first_call(a: argparse.Namespace, variant: str) -> dict[str, Any]:
    """In a process of its own (Python and torch loaded, the model built): the seconds to
    ``import thunder_ir`` and ``jit`` (``setup``; 0 for eager) and, with them, the first
    call (``total``), and which of sympy and torch._dynamo the process loaded."""
    import json
    import subprocess

    args = {"variant": variant, "layers": a.layers, "embd": a.embd, "seq": a.seq,
            "batch": a.batch}
    path = os.pathsep.join([os.path.join(HERE, "..", "tests"), HERE,  # (tests' models)
                            os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", _FRESH, json.dumps(args)],
                          capture_output=True, text=True, env={**os.environ,
                                                               "PYTHONPATH": path})
    if done.returncode:
        raise SystemExit(f"fresh-process run of {variant} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def fresh_rows(a: argparse.Namespace, runs: int = 3) -> None:
    """The first call in a fresh process, eager and thunder_ir alternating, medians."""
    import statistics

    got: dict[str, list[dict[str, Any]]] = {"eager": [], "thunder_ir": []}
    for _ in range(runs):
        for variant, runs_ in got.items():
            runs_.append(fresh_first_call(a, variant))
    med = {k: {f: statistics.median(r[f] for r in v) for f in ("setup", "total")}
           for k, v in got.items()}
    row("fresh process: import, jit", {"thunder_ir": med["thunder_ir"]["setup"] * 1e3}, "ms")
    row("fresh process: and first call", {k: v["total"] * 1e3 for k, v in med.items()},
        "ms")
    loaded = sorted({m for r in got["thunder_ir"] for m in r["loaded"]})
    print(f"{'':<32}(medians of {runs} processes each; thunder_ir's loaded "
          f"{', '.join(loaded) if loaded else 'neither sympy nor torch._dynamo'})")


def check(name: str, variants: dict[str, Callable[[], Any]]) -> None:
    """Every variant's output equals eager's (fp32: summation order only)."""
    ref = variants["eager"]()
    for label, fn in variants.items():
        out = fn()
        if not torch.allclose(out, ref, rtol=1e-4, atol=1e-5):
            diff = (out - ref).abs().max().item()
            raise SystemExit(f"{name}: {label} differs from eager (max |diff| {diff:.2e})")


def row(name: str, figures: dict[str, float], unit: str) -> None:
    """One line: each column's figure, then the ratios to eager and to torch.compile."""
    scale = {"ms": 1.0, "µs": 1e3}[unit]
    cells = "".join(f"{figures[c] * scale:>15.1f}" if c in figures else f"{'-':>15}"
                    for c in COLUMNS)
    ratios = []
    for c in ("thunder_ir", FUSED):
        if c in figures:
            vs = [f"{figures[c] / figures[ref]:.2f}x {short}"
                  for ref, short in (("eager", "eager"), ("torch.compile", "compile"))
                  if ref in figures]
            if vs:
                ratios.append(f"{'+torch_compile' if c == FUSED else 'thunder_ir'}: "
                              f"{', '.join(vs)}")
    print(f"{name:<32}{cells} {unit:<3} {'; '.join(ratios)}")


def timed_row(name: str, variants: dict[str, Callable[[], Any]], unit: str,
              seconds: float, rounds: int) -> None:
    """Checks, times interleaved and prints one row."""
    check(name, variants)
    timings, others = time_interleaved(variants, "cpu", seconds, rounds)
    row(name, {k: t.ms for k, t in timings.items()}, unit)
    if others is not None and others > 0.25:
        print(f"{'':<32}(other processes kept {others:.1f} CPUs busy meanwhile)")


def main() -> None:
    ap = argparse.ArgumentParser()
    add_llama_args(ap)
    ap.add_argument("--seconds", type=float, default=2.0, help="time per variant and row")
    ap.add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    ap.add_argument("--no-compile", action="store_true",
                    help="skip torch.compile and thunder_ir+torch_compile")
    a = ap.parse_args()
    pinned = pin_malloc()
    torch.manual_seed(0)
    use_compile = not a.no_compile
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"malloc {'pinned' if pinned else 'default'}")
    print(f"{'':<32}" + "".join(f"{HEADERS.get(c, c):>15}" for c in COLUMNS))

    # x + 1
    x = torch.randn(4)

    def add1(t: torch.Tensor) -> torch.Tensor:
        return t + 1

    small: dict[str, Callable[[], Any]] = {"eager": lambda: add1(x)}
    j = thunder_ir.jit(add1, tiered=False)
    small["thunder_ir"] = lambda: j(x)
    if use_compile:
        c = torch.compile(add1)
        small["torch.compile"] = lambda: c(x)
    timed_row("cached call: x + 1", small, "µs", a.seconds / 4, a.rounds)

    # LLaMAMLP, tiny input
    mlp = LLaMAMLP(64, 172).requires_grad_(False)
    xm = torch.randn(1, 4, 64)
    jm = thunder_ir.jit(mlp, tiered=False)
    small = {"eager": lambda: mlp(xm), "thunder_ir": lambda: jm(xm)}
    if use_compile:
        cm = torch.compile(mlp)
        small["torch.compile"] = lambda: cm(xm)
    timed_row("cached call: LLaMAMLP 1x4x64", small, "µs", a.seconds / 4, a.rounds)

    # Llama-style model
    fresh_rows(a)
    cfg = llama_config(a, vocab_size=512)
    model = LlamaGPT(cfg).eval().requires_grad_(False)
    idx = torch.randint(0, cfg.vocab_size, (a.batch, a.seq))
    fused_executors = ["torch_compile", *thunder_ir.get_default_executors()]
    makers: dict[str, Callable[[], Callable[..., Any]]] = {
        "eager": lambda: model,
        "thunder_ir": lambda: thunder_ir.jit(model, tiered=False),
    }
    if use_compile:
        makers[FUSED] = lambda: thunder_ir.jit(model, executors=fused_executors)
        makers["torch.compile"] = lambda: torch.compile(model)
    first = {k: first_call_s(m, idx) for k, m in makers.items()}
    row(f"first call: Llama {a.layers}L/{a.embd}/{a.seq}", {k: v * 1e3 for k, v in
                                                          first.items()}, "ms")
    if use_compile:
        print(f"{'':<32}(compilers' on-disk caches as this machine left them)")
    fns = {k: m() for k, m in makers.items()}
    timed_row("steady forward: Llama", {k: (lambda f=f: f(idx)) for k, f in fns.items()},
              "ms", a.seconds, a.rounds)
    traces = thunder_ir.last_traces(fns["thunder_ir"])
    n_ops = len(list(traces[0].ir.body.block.first_op.body.block.ops))
    breakdown = ", ".join(f"{t.pass_name} {t.duration_s * 1e3:.0f} ms" for t in traces)
    tiny = torch.randint(0, cfg.vocab_size, (1, 4))
    timed_row("cached call: Llama, 1x4", {k: (lambda f=f: f(tiny)) for k, f in fns.items()},
              "µs", a.seconds / 2, a.rounds)
    print(f"(Llama trace: {n_ops} ops; thunder_ir's first-call breakdown: {breakdown})")


if __name__ == "__main__":
    main()
