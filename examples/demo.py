"""thunder_ir demo: build IR, transform it, print it; then jit a model and inspect it.

Run: ``.venv/bin/python examples/demo.py`` (after ``bash scripts/setup.sh``).

1. Builds a small ltorch program by hand (x * sigmoid(x), a softmax and a linear layer),
   prints it as MLIR and as a Python trace, decomposes it into prims, runs cse/dce, and
   checks the decomposed program against eager torch with the reference interpreter.
2. Jits the LLaMAMLP of the "Zero to Thunder" notebook (smaller widths), checks it
   against eager, and prints the traces thunder_ir recorded.
"""

from __future__ import annotations

import time

import torch

import thunder_ir
from thunder_ir.dialects import ltorch
from thunder_ir.dialects.program import Program
from thunder_ir.dialects.types import tensor_type
from thunder_ir.lowering.python_printer import print_python
from thunder_ir.passes.pipeline import Pipeline
from thunder_ir.runtime.interpreter import run
from thunder_ir.trace import Trace


def build_demo_program() -> Program:
    """x: f32[8, 64], w: f32[32, 64] -> linear(softmax(silu(x) * x), w)."""
    prog = Program("forward", [tensor_type((8, 64), torch.float32),
                                   tensor_type((32, 64), torch.float32)], ["x", "w"])
    L = prog.emitter.ns(ltorch.OPS)
    x, w = prog.args
    h = L.mul(L.silu(x), x)
    p = L.softmax(h, dim=-1)
    y = L.linear(p, w, None)
    prog.outputs = [y]  # type: ignore[attr-defined]
    return prog


def section(title: str) -> None:
    print(f"\n{'=' * 10} {title} {'=' * (68 - len(title))}")


def main() -> None:
    torch.manual_seed(0)
    section("1. an ltorch program, built by hand")
    prog = build_demo_program()
    module = prog.finish(prog.outputs)  # type: ignore[attr-defined]
    module.verify()
    print(Trace(module.clone(), "build").mlir())
    print(Trace(module.clone(), "build"))

    x, w = torch.randn(8, 64), torch.randn(32, 64)
    expected = torch.nn.functional.linear(
        torch.softmax(torch.nn.functional.silu(x) * x, dim=-1), w)

    section("2. decompose-ltorch, cse, dce")
    traces = Pipeline(["decompose-ltorch", "cse", "dce"], verify=True,
                      printer=print_python).run(module)
    for t in traces:
        n_ops = len(list(module.body.block.first_op.body.block.ops))
        print(f"{t.pass_name:<18} {t.duration_s * 1e3:7.2f} ms")
    print(f"the decomposed program has {n_ops} ops:\n")
    print(traces[-1])
    got = run(module, x, w)[0]
    print(f"decomposed vs eager: max |diff| = {(got - expected).abs().max().item():.2e}")

    section("3. thunder_ir.jit on the LLaMAMLP")

    class LLaMAMLP(torch.nn.Module):
        def __init__(self, n_embd: int, intermediate_size: int) -> None:
            super().__init__()
            self.fc_1 = torch.nn.Linear(n_embd, intermediate_size, bias=False)
            self.fc_2 = torch.nn.Linear(n_embd, intermediate_size, bias=False)
            self.proj = torch.nn.Linear(intermediate_size, n_embd, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x_fc_1 = self.fc_1(x)
            x_fc_2 = self.fc_2(x)
            x = torch.nn.functional.silu(x_fc_1) * x_fc_2
            return self.proj(x)

    m = LLaMAMLP(256, 688).requires_grad_(False)
    tm = thunder_ir.jit(m)
    print(tm)
    x = torch.randn(2, 64, 256)
    t0 = time.perf_counter()
    out = tm(x)
    print(f"first call (trace + compile): {time.perf_counter() - t0:.3f} s")
    print(f"deviation from eager: {(out - m(x)).abs().max().item():.2e}")
    for _ in range(3):
        tm(x)
    print(f"cache: {thunder_ir.cache_misses(tm)} miss, {thunder_ir.cache_hits(tm)} hits")
    print("passes:", ", ".join(f"{t.pass_name} ({t.duration_s * 1e3:.1f} ms)"
                              for t in thunder_ir.last_traces(tm)))
    print("\nthe initial trace:")
    print(thunder_ir.last_traces(tm)[0])
    print("the execution trace (what runs):")
    print(thunder_ir.last_traces(tm)[-1])


if __name__ == "__main__":
    main()
