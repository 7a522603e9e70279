"""Tier-up under data parallelism: ``thunder_ir.jit(ddp(model))`` (the default, tier-up on
CPU) trained on 2 gloo processes until its fused program is swapped in, then its steady
step against torch DDP (eager and under torch.compile) and against its own unfused
program (``tiered=False``).

Every process trains the Llama-style model of ``tests/models.py`` (``benchmarks/harness
.llama_config``) on its own batch, one torch thread each, glibc's malloc pinned. It prints:

* for ours: the step at which both processes swapped (they agree on it:
  ``lowering/tier_up_ranks.py``), the seconds of training until then (from the first
  step, its compile included), each process's background compile seconds, and whether
  both swapped at the same step;
* the first step of torch DDP under torch.compile (its compile);
* the median step of each variant over interleaved rounds (each round runs every variant
  for ``--steps`` steps, the order rotating, a barrier before each), and its ratio
  against torch DDP + torch.compile.

Run it twice to see the second run of the same script (Inductor's on-disk caches warm).

Usage::

    python benchmarks/distributed_tier_up.py [--layers 4] [--width 256] [--seq 128]
        [--batch 2] [--bucket-mb 4] [--rounds 5] [--steps 3] [--after SECONDS]
        [--max-seconds 600] [--no-compile]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from distributed import VOCAB, WORLD, free_port, interleaved, sgd_step  # noqa: E402
from harness import llama_config, pin_malloc  # noqa: E402

TORCH_DDP = "torch DDP"
TORCH_DDP_COMPILE = "torch DDP+compile"
OURS = "thunder_ir ddp (tiered up)"
OURS_UNFUSED = "thunder_ir ddp, tiered=False"


def worker(rank: int, port: int, a: argparse.Namespace, out: str) -> None:
    import torch
    import torch.distributed as dist
    from models import LlamaGPT
    from torch.nn.parallel import DistributedDataParallel

    import thunder_ir
    from thunder_ir.distributed import ddp

    pin_malloc()
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if a.after is not None:
        os.environ["THUNDER_IR_TIER_UP_AFTER"] = str(a.after)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=a.max_seconds + 300))
    try:
        cfg = llama_config(a, vocab_size=VOCAB)
        g = torch.Generator().manual_seed(1000 + rank)
        idx = torch.randint(0, VOCAB, (a.batch, a.seq), generator=g)
        tgt = torch.randint(0, VOCAB, (a.batch, a.seq), generator=g)

        def fresh() -> torch.nn.Module:
            torch.manual_seed(0)
            return LlamaGPT(cfg)

        def make(fn: Any, params: Any) -> Any:
            return sgd_step(fn, params, idx, tgt)

        steps: dict[str, Any] = {}
        ours = thunder_ir.jit(ddp(fresh(), bucket_size_in_mb=a.bucket_mb))
        steps[OURS] = make(ours, ours.parameters())
        # Ours until swapped: every process swaps at the same step (agreed), so the loop
        # ends at the same step on both.
        start, n, swapped = time.perf_counter(), 0, False
        while True:
            steps[OURS]()
            n += 1
            if thunder_ir.compile_status(ours)["swapped"]:
                swapped = True
                break
            if n % 20 == 0:  # out of time: decided together, so both stop at one step
                late = torch.tensor([float(time.perf_counter() - start > a.max_seconds)])
                dist.all_reduce(late, op=dist.ReduceOp.MAX)
                if late.item():
                    break
        swap_s = time.perf_counter() - start
        status = thunder_ir.compile_status(ours)
        mine = torch.tensor([float(n if swapped else -1)])
        seen = [torch.zeros(1) for _ in range(WORLD)]
        dist.all_gather(seen, mine)
        result: dict[str, Any] = {
            "swap_step": n if swapped else None, "swap_s": swap_s,
            "same_step": len({float(s) for s in seen}) == 1,
            "compile_s": status["seconds"], "kernels": status["compiled"],
            "kept_unfused": status["unfused"], "first_s": {}}
        if not swapped:  # (both processes reach here: the loop's end is agreed)
            raise SystemExit(f"rank {rank}: not swapped after {a.max_seconds} s: {status}")
        model = fresh()
        steps[TORCH_DDP] = make(DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb),
                                model.parameters())
        if a.compile:
            model = fresh()
            compiled = torch.compile(DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb))
            steps[TORCH_DDP_COMPILE] = make(compiled, model.parameters())
        unfused = thunder_ir.jit(ddp(fresh(), bucket_size_in_mb=a.bucket_mb), tiered=False)
        steps[OURS_UNFUSED] = make(unfused, unfused.parameters())
        for name, step in steps.items():  # warm up (torch.compile compiles here)
            t = time.perf_counter()
            step()
            result["first_s"][name] = time.perf_counter() - t
            for _ in range(2):
                step()
        rounds = interleaved(steps, a.rounds, a.steps, dist.barrier)
        result["step_ms"] = {k: statistics.median(v) * 1e3 for k, v in rounds.items()}
        result["still_fused"] = "inductorFusion" in str(
            thunder_ir.last_backward_traces(ours)[-1])
        if rank == 0:
            with open(out, "w") as f:
                json.dump(result, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def report(res: dict[str, Any]) -> None:
    print(f"ours swapped at step {res['swap_step']} on both processes "
          f"(same step: {res['same_step']}), after {res['swap_s']:.1f} s of training; "
          f"{res['kernels']} kernels compiled in {res['compile_s']:.1f} s in the background "
          f"(rank 0), {res['kept_unfused']} kept unfused")
    if TORCH_DDP_COMPILE in res["first_s"]:
        print(f"torch DDP + torch.compile: first step {res['first_s'][TORCH_DDP_COMPILE]:.1f} s")
    base = res["step_ms"].get(TORCH_DDP_COMPILE)
    print("| variant | step (ms) | vs torch DDP + torch.compile |")
    print("|---|---|---|")
    for name, ms in res["step_ms"].items():
        ratio = f"{ms / base:.2f}x" if base else "-"
        print(f"| {name} | {ms:.1f} | {ratio} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", "--embd", dest="embd", metavar="WIDTH", type=int,
                    default=256)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2, help="per process")
    ap.add_argument("--bucket-mb", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--after", type=float, default=None,
                    help="THUNDER_IR_TIER_UP_AFTER (default: the library's)")
    ap.add_argument("--max-seconds", type=float, default=600.0,
                    help="give up on the swap after this long")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch.multiprocessing as mp

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}; {WORLD} gloo processes, 1 thread each; Llama "
          f"{a.layers} layers, width {a.embd}, seq {a.seq}, batch {a.batch} a process, "
          f"buckets {a.bucket_mb:g} MB")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        mp.spawn(worker, args=(free_port(), a, out), nprocs=WORLD, join=True)
        with open(out) as f:
            res = json.load(f)
    report(res)


if __name__ == "__main__":
    main()
