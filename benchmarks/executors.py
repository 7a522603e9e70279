"""Executor benchmarks: LLaMAMLP forward and the seed's RoPE comparison.

Variants, each checked against eager and then timed in the same run:

* LLaMAMLP forward: eager, torch.compile, thunder_ir with the default executors, and
  thunder_ir with each fusion executor that can run here put first in front of the
  defaults (``torch_compile`` on CPU; ``nvfuser`` and ``triton`` on CUDA);
* RoPE (``apply_rope`` of the "Extending Thunder" example): eager, torch.compile,
  thunder_ir with the default executors, thunder_ir with each fusion executor, and the
  custom Triton kernel registered through ``thunder_ir.extend``
  (``examples/extend_rope.py``). Triton variants need CUDA: under the CPU interpreter a
  timing means nothing, so they are reported as skipped there.

Labels say what runs: "thunder_ir default (sdpa, torch)" lists the default executors. On
CPU none of them fuses, so that row runs the same torch calls as eager.

Correctness first: before any timing, every variant's output must match eager's
(``torch.allclose``) on the benchmark inputs, on fresh inputs of the same shapes, and on
inputs mutated in place after a first call. A compiled function that folded its inputs
into constants or returned a cached result fails there. A variant that fails is reported
as such, not timed, and the script exits with status 1.

Timing: CPU timings on a shared machine drift by tens of percent over seconds (other
processes, other tenants of the host, memory placement). So the variants are timed
*interleaved*: ``--rounds`` rounds, each running every variant for an equal slice (the
order rotating), and a variant's figure is the median over rounds of its per-round median
call time, with the range over rounds shown beside it. Ratios compare figures of the same
run; they are times (below 1.00x is faster). The CPU time that other processes used while
timing is measured (``/proc/stat``) and printed; under load the figures mostly measure the
scheduler (an OpenMP kernel waits for its slowest thread), so many small kernels (eager)
suffer more than one fused kernel, and the script says so.

Memory: glibc's malloc may hand freed memory back to the kernel (heap trimming; ``mmap``
for blocks above a threshold it adapts as the process runs). Whether it does so for a
variant's intermediates depends on what the process allocated before, and when it does,
every call faults its buffers in again. Unpinned, the LLaMAMLP rows swung between 12 and
15.5 ms from run to run, the slow ones with ~3,150 page faults a call (the call's 12 MB of
intermediates), and RoPE eager took 1.5 ms instead of 0.1 ms (~1,150 faults a call) right
after a ``thunder_ir.jit``: the earlier "eager 1.4x slower than torch.compile" (LLaMAMLP)
and "torch.compile 12x faster than eager" (RoPE) came from this, not from compute. So the
script first pins glibc's thresholds (``mallopt``: never trim, ``mmap`` only above 32 MB)
and prints page faults per call for each variant (0 when pinned).
``--glibc-malloc-defaults`` leaves malloc alone.

With that, what remains is real. On CPU, RoPE's torch.compile and thunder_ir +
torch_compile run one fused pass where eager runs five kernels (thunder_ir + torch_compile
also skips Dynamo: ~6 µs less a call on tiny inputs). The LLaMAMLP forward is three GEMMs
(~97% of its time, the same MKL calls in every variant); its silu * mul, the only part a
fusion executor can fuse, takes ~0.2 ms, so all its variants are within a few percent.

On a GPU machine: run as is (it picks ``cuda`` and the seed's sizes in bf16). Usage::

    python benchmarks/executors.py [--device cpu|cuda] [--no-compile]
                                   [--seconds S] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

from harness import Timing, pin_malloc, time_interleaved  # noqa: E402

import thunder_ir  # noqa: E402
from thunder_ir.lowering.executors import get_all_executors  # noqa: E402

Fn = Callable[..., torch.Tensor]

# allclose tolerances against eager: fp32 results differ by summation order only; bf16 and
# fp16 results also differ where a fused kernel keeps an intermediate in fp32.
TOLERANCES = {torch.float32: {"rtol": 1e-4, "atol": 1e-5},
              torch.float64: {"rtol": 1e-7, "atol": 1e-9}}
LOW_PRECISION_TOLERANCE = {"rtol": 2e-2, "atol": 2e-2}

# --------------------------------------------------------------------------- correctness


def check(fn: Fn, ref: Fn, args: Sequence[torch.Tensor], fresh: Sequence[torch.Tensor]
          ) -> str | None:
    """None if ``fn`` matches ``ref`` on ``args``, on ``fresh`` (other values, same shapes)
    and on a copy of ``args`` whose first tensor is changed in place between two calls;
    otherwise what went wrong."""
    mutated = [a.clone() for a in args]
    cases: list[tuple[str, Callable[[], None] | None, Sequence[torch.Tensor]]] = [
        ("benchmark inputs", None, args),
        ("fresh inputs", None, fresh),
        ("inputs mutated in place", lambda: mutated[0].mul_(-0.5).add_(0.25), mutated),
    ]
    for what, before, inputs in cases:
        if before is not None:
            fn(*inputs)  # a first call on these very tensors, then change them
            before()
        out, exp = fn(*inputs), ref(*inputs)
        if not isinstance(out, torch.Tensor) or out.shape != exp.shape \
                or out.dtype != exp.dtype:
            got = (tuple(out.shape), out.dtype) if isinstance(out, torch.Tensor) else type(out)
            return f"{what}: got {got}, eager gives {(tuple(exp.shape), exp.dtype)}"
        tol = TOLERANCES.get(exp.dtype, LOW_PRECISION_TOLERANCE)
        if not torch.allclose(out, exp, **tol):
            diff = (out.float() - exp.float()).abs().max().item()
            return f"{what}: max |diff| {diff:.2e} vs eager (rtol {tol['rtol']}, " \
                   f"atol {tol['atol']})"
    return None


# --------------------------------------------------------------------------- one benchmark


def run_section(title: str, ref: Fn, candidates: dict[str, Fn | str],
                args: Sequence[torch.Tensor], fresh: Sequence[torch.Tensor],
                device: str, seconds: float, rounds: int) -> bool:
    """Checks, times and reports one benchmark. ``candidates`` maps labels to functions of
    ``args`` (``"eager"`` first) or to a reason they are skipped. True if all matched."""
    print(f"\n{title}")
    rows: dict[str, Timing | str] = {}
    timed: dict[str, Callable[[], Any]] = {}
    ok = True
    for label, fn in candidates.items():
        if isinstance(fn, str):
            rows[label] = fn
            continue
        try:
            problem = None if fn is ref else check(fn, ref, args, fresh)
            if problem is not None:
                problem = f"MISMATCH, not timed: {problem}"
        except Exception as e:  # a compiler that fails: report it, time the rest
            msg = str(e).splitlines()[0] if str(e) else ""
            problem = f"FAILED, not timed: {type(e).__name__}: {msg}"
        if problem is not None:
            rows[label] = problem
            ok = False
            continue
        rows[label] = ""  # keep the candidates' order
        timed[label] = lambda fn=fn: fn(*args)
    timings, others = time_interleaved(timed, device, seconds, rounds)
    rows.update(timings)

    eager, comp = rows.get("eager"), rows.get("torch.compile")
    width = max(len(n) for n in rows) + 2
    print(f"  {'':<{width}} {'median':>9}    {'range over rounds':<19} {'faults/call':>11}   "
          "time / eager, time / torch.compile")
    for name, v in rows.items():
        if isinstance(v, str):
            print(f"  {name:<{width}} {v}")
            continue
        ratios = [f"{v.ms / e.ms:.2f}x eager" for e in (eager,) if isinstance(e, Timing)]
        ratios += [f"{v.ms / c.ms:.2f}x torch.compile" for c in (comp,) if isinstance(c, Timing)]
        spread = f"({min(v.rounds):.3f}-{max(v.rounds):.3f})"
        print(f"  {name:<{width}} {v.ms:9.3f} ms {spread:<19} {v.faults:11.0f}   "
              f"{', '.join(ratios)}")
    if ok:
        print(f"  all {len(timed)} timed variants match eager (allclose; benchmark, fresh "
              "and in-place-mutated inputs)")
    if others is not None:
        ncpu = os.cpu_count() or 1
        line = f"  other processes kept {others:.2f} of {ncpu} CPUs busy while timing"
        if device == "cpu" and others > 0.25:
            line += ": these figures are distorted (small-kernel variants suffer most)"
        print(line)
    return ok


# --------------------------------------------------------------------------- main


def thunder_variants(fn: Any, device: str, compile_baseline: bool) -> dict[str, Fn | str]:
    """torch.compile, thunder_ir with the default executors, and thunder_ir with each
    fusion executor in front of the defaults (or why it is skipped)."""
    out: dict[str, Fn | str] = {}
    if compile_baseline:
        out["torch.compile"] = torch.compile(fn)
    defaults = thunder_ir.get_default_executors()
    out[f"thunder_ir default ({', '.join(e.name for e in defaults)})"] = thunder_ir.jit(
        fn, tiered=False)
    for ex in get_all_executors():
        if not ex.is_fusion:
            continue
        label = f"thunder_ir + {ex.name}"
        if ex.name in ("triton", "nvfuser") and device != "cuda":
            out[label] = "skipped: needs CUDA tensors"
        elif not ex.is_available():
            out[label] = "skipped: not available here"
        else:
            executors = [ex, *(e for e in defaults if e.name != ex.name)]
            out[label] = thunder_ir.jit(fn, executors=executors)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--seconds", type=float, default=2.0,
                    help="timing per variant and benchmark (default 2)")
    ap.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    ap.add_argument("--glibc-malloc-defaults", action="store_true",
                    help="do not pin glibc's trim and mmap thresholds (see the module doc)")
    a = ap.parse_args()
    pinned = not a.glibc_malloc_defaults and pin_malloc()
    dev = a.device
    torch.manual_seed(0)
    torch.set_flush_denormal(True)
    name = (torch.cuda.get_device_name() if dev == "cuda"
            else f"{os.cpu_count()}-core CPU, {torch.get_num_threads()} threads")
    print(f"device: {name}, torch {torch.__version__}; malloc: "
          + ("trim and mmap thresholds pinned" if pinned else "as is"))
    ok = True

    # LLaMAMLP forward (smaller than the seed's 4096 -> 11008 on CPU).
    from models import LLaMAMLP

    n_embd, inter, tokens = (4096, 11008, 2048) if dev == "cuda" else (512, 1376, 256)
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    mlp = LLaMAMLP(n_embd, inter).to(dev, dtype).requires_grad_(False)
    x, x_fresh = (torch.randn(2, tokens, n_embd, device=dev, dtype=dtype) for _ in range(2))
    ok &= run_section(
        f"LLaMAMLP forward ({n_embd} -> {inter}, 2x{tokens} tokens, {dtype})", mlp,
        {"eager": mlp, **thunder_variants(mlp, dev, not a.no_compile)},
        [x], [x_fresh], dev, a.seconds, a.rounds)

    # RoPE comparison.
    import extend_rope as R

    rope = R.apply_rope  # the plain function: eager, and what the others compile
    b, h, t, d = (8, 32, 2048, 128) if dev == "cuda" else (2, 8, 256, 64)
    q, q_fresh = (torch.randn(b, h, t, d, device=dev, dtype=dtype) for _ in range(2))
    cos, sin = (c.to(dev, dtype) for c in R.rope_cache(t, d))
    rope_rows: dict[str, Fn | str] = {"eager": rope, **thunder_variants(rope, dev,
                                                                         not a.no_compile)}
    if dev == "cuda":
        # Registering makes later traces of apply_rope record the operator; the variants
        # above trace (on their first call, in the check) before this one does.
        def custom(*xs: torch.Tensor) -> torch.Tensor:
            if "jk" not in compiled:
                parts = R.register("bench_ex")
                compiled["jk"] = thunder_ir.jit(
                    rope, executors=(parts["executor"], *thunder_ir.get_default_executors()))
            return compiled["jk"](*xs)

        compiled: dict[str, Any] = {}
        rope_rows["thunder_ir + custom Triton kernel"] = custom
    else:
        rope_rows["thunder_ir + custom Triton kernel"] = "skipped: needs CUDA (interpreter only)"
    ok &= run_section(f"RoPE ({b}x{h}x{t}x{d}, {dtype})", rope, rope_rows,
                      [q, cos, sin], [q_fresh, cos, sin], dev, a.seconds, a.rounds)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
