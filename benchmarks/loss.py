"""Language-model loss benchmark: ``F.cross_entropy`` over ``[tokens, vocabulary]`` logits,
forward + backward, under eager, thunder_ir and torch.compile, from one run.

The loss of every causal language model; its cost is passes over the logits, so it shows
whether a compiler's backward recomputes the forward's ``log_softmax`` (eager's autograd
saves it). Each step builds a fresh leaf from the same logits and runs the loss and its
backward; steps are timed interleaved (`harness.time_interleaved`) with malloc pinned.

Prints, per vocabulary size, the median step of each variant and the ratios to eager.
Usage::

    python benchmarks/loss.py [--tokens 512] [--vocab 4096,32000] [--seconds 1]
                              [--rounds 5] [--no-compile]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import pin_malloc, time_interleaved  # noqa: E402


def main() -> None:
    import torch
    import torch.nn.functional as F

    import thunder_ir

    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--vocab", default="4096,32000")
    ap.add_argument("--seconds", type=float, default=1.0, help="time per variant")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    a = ap.parse_args()
    pinned = pin_malloc()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__},"
          f" malloc {'pinned' if pinned else 'default'}; {a.tokens} tokens")

    def loss(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x, t)

    variants: dict[str, Any] = {"eager": loss, "thunder_ir": thunder_ir.jit(loss, tiered=False)}
    if not a.no_compile:
        variants["torch.compile"] = torch.compile(loss)
    for vocab in (int(v) for v in a.vocab.split(",")):
        g = torch.Generator().manual_seed(0)
        logits = torch.randn(a.tokens, vocab, generator=g)
        target = torch.randint(0, vocab, (a.tokens,), generator=g)

        def step(fn: Any, logits: torch.Tensor = logits, target: torch.Tensor = target
                 ) -> Callable[[], None]:
            def run() -> None:
                fn(logits.detach().requires_grad_(), target).backward()
            return run

        ref = None
        for fn in variants.values():  # each variant's loss and gradient are eager's
            x = logits.detach().requires_grad_()
            out = fn(x, target)
            out.backward()
            ref = (out, x.grad) if ref is None else ref
            torch.testing.assert_close(out, ref[0])
            torch.testing.assert_close(x.grad, ref[1])
        timings, _ = time_interleaved({n: step(fn) for n, fn in variants.items()}, "cpu",
                                      a.seconds, a.rounds)
        cells = "  ".join(f"{n} {t.ms:.2f} ms" for n, t in timings.items())
        ratios = ", ".join(f"{n} {timings[n].ms / timings['eager'].ms:.2f}x"
                           for n in variants if n != "eager")
        print(f"vocabulary {vocab:>6}: {cells}  ({ratios} eager)", flush=True)


if __name__ == "__main__":
    main()
