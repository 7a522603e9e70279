"""CPU fusion benchmark: does the torch.compile (Inductor) fusion executor pay off?

Times a training step (forward, cross-entropy, backward, Adam step) of the Llama-style
model of ``tests/models.py`` for:

* ``eager``: the model itself;
* ``thunder_ir``: ``thunder_ir.jit(model)`` with the default executors;
* ``thunder_ir+inductor``: ``thunder_ir.jit(model, executors=["torch_compile"])``, fusion
  regions compiled by Inductor;
* ``torch.compile``: ``torch.compile(model)``.

Each variant runs in a fresh process, so first-call costs are its own (the Inductor on-disk
cache may still hold kernels from earlier runs, unless ``--cold`` gives each variant a fresh
cache directory).
The decision it informs — whether ``torch_compile`` is in the CPU default executor list —
and the figures are recorded in ``docs/fusion.md``. ``--scaling`` instead times the fuse
pass alone on synthetic prims programs of 1k to 20k ops. Usage::

    python benchmarks/fusion_cpu.py [--layers 2] [--embd 256] [--seq 256] [--batch 2]
                                    [--steps 10] [--variants eager,thunder_ir,...]
    python benchmarks/fusion_cpu.py --scaling
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ("eager", "thunder_ir", "thunder_ir+inductor", "torch.compile")


def run_variant(variant: str, a: argparse.Namespace) -> dict[str, Any]:
    """Times one variant in this process; returns its figures."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    from models import Config, LlamaGPT

    torch.manual_seed(0)
    torch.set_flush_denormal(True)
    cfg = Config(
        n_layer=a.layers,
        n_embd=a.embd,
        n_head=4,
        n_query_groups=2,
        intermediate_size=int(a.embd * 2.6875),
        block_size=a.seq,
        vocab_size=4096,
    )
    model = LlamaGPT(cfg)
    regions = 0
    if variant.startswith("thunder_ir"):
        import thunder_ir

        executors = ["torch_compile"] if variant.endswith("inductor") else None
        fn: Any = thunder_ir.jit(model, executors=executors)
    elif variant == "torch.compile":
        fn = torch.compile(model)
    else:
        fn = model
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), generator=g)

    def step() -> float:
        logits = fn(idx)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    t = time.perf_counter()
    step()
    first = time.perf_counter() - t
    if variant.startswith("thunder_ir"):
        import thunder_ir

        for tr in (thunder_ir.last_traces(fn)[-1], thunder_ir.last_backward_traces(fn)[-1]):
            regions += sum(
                1
                for line in str(tr).splitlines()
                if "= inductorFusion" in line and not line.lstrip().startswith("#")
            )
    for _ in range(2):
        step()
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return {
        "first_s": first,
        "step_ms": statistics.median(times) * 1e3,
        "min_ms": min(times) * 1e3,
        "regions": regions,
    }


def scaling() -> None:
    """Times the fuse pass on synthetic programs (linear, elementwise chains, RNG)."""
    import gc

    import torch
    from xdsl.context import Context
    from xdsl.traits import Pure

    from thunder_ir.dialects import prims
    from thunder_ir.dialects.fusion import RegionOp
    from thunder_ir.dialects.program import Program
    from thunder_ir.dialects.types import number_type, tensor_type
    from thunder_ir.lowering.executors import Executor
    from thunder_ir.passes.fuse import FusePass

    class Fuser(Executor):
        name = "bench_fuser"

        @property
        def is_fusion(self) -> bool:
            return True

        def can_fuse(self, op: Any) -> bool:
            return op.has_trait(Pure) and op.name not in ("prims.linear", "prims.matmul")

    t_ = tensor_type((4, 8), torch.float32)
    w_ = tensor_type((8, 8), torch.float32)
    n_ = number_type(int)
    for n in (1000, 5000, 10000, 20000):
        p = Program("computation", [t_, w_, n_, n_], ["x", "w", "s", "o"])
        P = p.emitter.ns(prims.OPS)
        x, w, s, o = p.args
        cur, prev, k = x, x, 0
        while len(p.block.ops) < n:
            k += 1
            cur = P.linear(cur, w, None)
            a_ = P.exp(cur)
            d = P.add(P.tanh(P.mul(a_, prev)), cur)
            if k % 7 == 0:
                d = P.mul(
                    d,
                    P.uniform(
                        s,
                        o,
                        shape=(4, 8),
                        minval=0.0,
                        maxval=1.0,
                        device="cpu",
                        dtype=torch.float32,
                    ),
                )
            e = P.broadcast_in_dim(P.sum(d, dims=(1,)), shape=(4, 8), broadcast_dims=(0,))
            cur, prev = P.sub(d, e), a_
        m = p.finish([cur])
        n_ops = len(p.block.ops)
        gc.disable()
        t = time.perf_counter()
        FusePass((Fuser(),)).apply(Context(), m)
        dt = time.perf_counter() - t
        gc.enable()
        regions = sum(isinstance(op, RegionOp) for op in m.walk())
        print(
            f"{n_ops:>6} ops: fuse {dt * 1e3:7.1f} ms, {dt / n_ops * 1e6:5.1f} us/op, "
            f"{regions} regions"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--scaling", action="store_true")
    ap.add_argument(
        "--cold", action="store_true", help="a fresh Inductor cache directory per variant"
    )
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.scaling:
        scaling()
        return
    if a.variant:
        print(json.dumps(run_variant(a.variant, a)))
        return
    import torch

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"load {os.getloadavg()[0]:.2f}; Llama {a.layers} layers, n_embd {a.embd}, "
        f"seq {a.seq}, batch {a.batch}"
    )
    results: dict[str, dict[str, Any]] = {}
    for v in a.variants.split(","):
        cmd = [
            sys.executable,
            __file__,
            "--variant",
            v,
            "--layers",
            str(a.layers),
            "--embd",
            str(a.embd),
            "--seq",
            str(a.seq),
            "--batch",
            str(a.batch),
            "--steps",
            str(a.steps),
        ]
        env = dict(os.environ)
        if a.cold:
            env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="fusion_cpu_inductor_")
        out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        if out.returncode != 0:
            print(f"{v}: failed\n{out.stderr[-2000:]}")
            continue
        results[v] = json.loads(out.stdout.strip().splitlines()[-1])
    cols = list(results)
    print(f"{'':<22}" + "".join(f"{c:>21}" for c in cols))
    for key, label in (
        ("first_s", "first step (s)"),
        ("step_ms", "steady step (ms)"),
        ("min_ms", "fastest step (ms)"),
        ("regions", "fusion regions"),
    ):
        print(f"{label:<22}" + "".join(f"{results[c][key]:>21.2f}" for c in cols))
    if "eager" in results:
        base = results["eager"]["step_ms"]
        print(
            f"{'step vs eager':<22}"
            + "".join(f"{results[c]['step_ms'] / base:>21.2f}" for c in cols)
        )


if __name__ == "__main__":
    main()
