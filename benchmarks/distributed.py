"""Data-parallel training benchmark: torch's DistributedDataParallel (eager and under
torch.compile) vs ``thunder_ir.jit(thunder_ir.distributed.ddp(model))``, on 2 gloo
processes of this machine.

Every process trains the Llama-style model of ``tests/models.py`` on its own batch
(forward, cross-entropy, backward with the gradients averaged across the processes, SGD
step), with one torch thread (``OMP_NUM_THREADS=1``) and glibc's malloc pinned
(``benchmarks/harness.py``). In one run:

* the loss of every variant after the warm-up steps, against torch DDP eager's (all
  start from the same parameters and see the same batches);
* the bytes each variant all-reduces per step and process, and its buckets: ours counted
  by a wrapper around ``torch.distributed.all_reduce`` (the ``dist`` dialect calls it
  through the module at run time), torch DDP's by a comm hook around torch's default
  ``allreduce_hook`` (on an untimed copy: the timed torch DDP keeps its built-in C++
  all-reduce; under torch.compile the timed one has the hook);
* the median step time over interleaved rounds (each round runs every variant for
  ``--steps`` steps, the order rotating, a barrier before each), split into forward,
  backward (which, for the DDP variants, ends when the gradients are averaged) and
  optimizer, and the ratio against torch DDP eager. Two variants without communication,
  ``local eager`` and ``local thunder_ir`` (the same model, not data-parallel), give the
  compute time of a step;
* gloo's all-reduce on this machine: latency and bandwidth fitted to
  ``t(n) = 2(N-1) a + 2(N-1)/N n / B`` (ring all-reduce over N processes) from a tiny and a
  large tensor, checked on a medium one and on the step's own buckets run back to back;
  the communication a step exposes, predicted from that fit and the overlap model (every
  bucket but the last overlaps the rest of the backward) against what was measured (the
  DDP step's time minus the local one's), with the time ours' ``dist.wait``s were
  blocked and the CPU time the all-reduces take;
* a projection of the step to 8, 64, 256 and 1,024 GPUs from the measured compute time and
  buckets with assumed link figures (``--nvlink-gbs``, ``--ib-gbs``, ``--hop-us``; see
  ``docs/distributed.md``).

``--fsdp`` compares sharded training instead: torch's ``fully_shard`` (FSDP2, each block
and the root, eager) against ``thunder_ir.distributed.fsdp`` with ZERO2 and ZERO3, and the
same model without sharding (``local``): step time, ratio against ``fully_shard``, and the
bytes all-gathered and reduce-scattered per step and process (counted by wrappers around
``torch.distributed.all_gather_single`` and ``reduce_scatter_single``, which both call;
each call counted at its full, unsharded size).

Usage::

    python benchmarks/distributed.py --fsdp [--layers 4] [--width 256] ...
    python benchmarks/distributed.py [--layers 4] [--width 256] [--seq 128] [--batch 2]
                                     [--rounds 5] [--steps 3] [--bucket-mb 4]
                                     [--no-compile]
    python benchmarks/distributed.py --project-only STEP_MS:BACKWARD_MS:GRAD_MB
                                     [--bucket-mb 25]   # the projection alone
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from harness import cpu_busy_s, llama_config, pin_malloc  # noqa: E402

WORLD = 2
VOCAB = 4096
LR = 1e-3
TORCH_DDP = "torch DDP"
TORCH_DDP_COMPILE = "torch DDP+compile"
OURS = "thunder_ir ddp"
LOCAL_EAGER = "local eager"
LOCAL_OURS = "local thunder_ir"


# --------------------------------------------------------------------------- counting bytes


class Counter:
    """The all-reduces seen while ``on``: each one's bytes, in call order."""

    def __init__(self) -> None:
        self.on = False
        self.sizes: list[int] = []

    def add(self, t: Any) -> None:
        if self.on:
            self.sizes.append(t.numel() * t.element_size())


def count_all_reduce(counter: Counter) -> None:
    """Replaces ``torch.distributed.all_reduce`` by a wrapper that counts its tensors'
    bytes (the ``dist`` dialect looks the function up on the module at every call)."""
    import torch.distributed as dist

    inner = dist.all_reduce

    def all_reduce(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        counter.add(tensor)
        return inner(tensor, *args, **kwargs)

    dist.all_reduce = all_reduce


def counting_hook(counter: Counter) -> Callable[[Any, Any], Any]:
    """A DDP comm hook: counts each bucket's bytes and delegates to torch's default
    all-reduce hook (sum, then divide by the world size)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def hook(state: Any, bucket: Any) -> Any:
        counter.add(bucket.buffer())
        return allreduce_hook(state, bucket)

    # register_comm_hook checks the annotations as objects (this module's are strings).
    hook.__annotations__ = {"state": object, "bucket": dist.GradBucket,
                            "return": torch.futures.Future[torch.Tensor]}
    return hook


class WaitTimer:
    """Seconds ours' ``dist.wait``s spent blocked (the communication a step exposes, seen
    from inside the program): wraps `thunder_ir.dialects.dist.Pending.wait`."""

    def __init__(self) -> None:
        from thunder_ir.dialects.dist import Pending

        self.s = 0.0
        inner = Pending.wait

        def wait(pending: Pending) -> Any:
            t = time.perf_counter()
            try:
                return inner(pending)
            finally:
                self.s += time.perf_counter() - t

        Pending.wait = wait  # type: ignore[method-assign]


# --------------------------------------------------------------------------- the variants


Step = Callable[[], tuple[float, float, float, float]]


def build(a: argparse.Namespace, rank: int, counters: dict[str, Counter],
          use_compile: bool) -> tuple[dict[str, Step], Step]:
    """Each variant's step: ``step()`` runs forward + loss, backward, SGD step and
    returns ``(loss, forward s, backward s, optimizer s)``; and the step of a torch DDP
    with the counting comm hook (the timed torch DDP has none: torch's built-in
    all-reduce; under torch.compile the hook stays, as nothing else counts there)."""
    import torch
    import torch.nn.functional as F
    from models import LlamaGPT
    from torch.nn.parallel import DistributedDataParallel

    import thunder_ir
    from thunder_ir.distributed import ddp

    cfg = llama_config(a, vocab_size=VOCAB)
    g = torch.Generator().manual_seed(1000 + rank)  # each process its own batch
    idx = torch.randint(0, VOCAB, (a.batch, a.seq), generator=g)
    tgt = torch.randint(0, VOCAB, (a.batch, a.seq), generator=g)

    def fresh() -> torch.nn.Module:
        torch.manual_seed(0)  # every variant, on every process, starts from these values
        return LlamaGPT(cfg)

    def make(fn: Callable[..., Any], params: Any) -> Step:
        opt = torch.optim.SGD(params, lr=LR)

        def step() -> tuple[float, float, float, float]:
            t0 = time.perf_counter()
            logits = fn(idx)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=True)
            t3 = time.perf_counter()
            return loss.item(), t1 - t0, t2 - t1, t3 - t2

        return step

    steps: dict[str, Step] = {}
    model = fresh()
    steps[TORCH_DDP] = make(DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb),
                            model.parameters())
    model = fresh()
    hooked = DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb)
    hooked.register_comm_hook(None, counting_hook(counters[TORCH_DDP]))
    counted = make(hooked, model.parameters())
    if use_compile:
        model = fresh()
        compiled_ddp = DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb)
        compiled_ddp.register_comm_hook(None, counting_hook(counters[TORCH_DDP_COMPILE]))
        steps[TORCH_DDP_COMPILE] = make(torch.compile(compiled_ddp), model.parameters())
    model = fresh()
    ours = thunder_ir.jit(ddp(model, bucket_size_in_mb=a.bucket_mb))
    steps[OURS] = make(ours, ours.parameters())
    model = fresh()
    steps[LOCAL_EAGER] = make(model, model.parameters())
    model = fresh()
    local = thunder_ir.jit(model, tiered=False)
    steps[LOCAL_OURS] = make(local, local.parameters())
    return steps, counted


# --------------------------------------------------------------------------- gloo's figures


def time_all_reduce(nbytes: int, reps: int) -> float:
    """Median seconds of one blocking all-reduce of ``nbytes`` of float32 (the original
    ``all_reduce``: the wrapper counts nothing then anyway)."""
    import torch
    import torch.distributed as dist

    t = torch.ones(max(1, nbytes // 4))
    for _ in range(3):
        dist.all_reduce(t)
    out = []
    for _ in range(reps):
        dist.barrier()
        s = time.perf_counter()
        dist.all_reduce(t)
        out.append(time.perf_counter() - s)
    return statistics.median(out)


def time_buckets(sizes: list[int], reps: int) -> tuple[float, float]:
    """The step's buckets all-reduced back to back, asynchronously (all started, then all
    waited for), without any computation: median seconds, and the CPU seconds this
    process (its gloo threads and the kernel's loopback TCP included) spent on them."""
    import torch
    import torch.distributed as dist

    bufs = [torch.ones(max(1, n // 4)) for n in sizes]
    out, cpu = [], []
    for r in range(reps + 2):
        dist.barrier()
        s, c = time.perf_counter(), time.process_time()
        works = [dist.all_reduce(b, async_op=True) for b in bufs]
        for w in works:
            w.wait()
        if r >= 2:
            out.append(time.perf_counter() - s)
            cpu.append(time.process_time() - c)
    return statistics.median(out), statistics.median(cpu)


# --------------------------------------------------------------------------- the processes


def worker(rank: int, port: int, a: argparse.Namespace, out: str) -> None:
    import torch
    import torch.distributed as dist

    pin_malloc()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=600))
    try:
        names = [TORCH_DDP, *([TORCH_DDP_COMPILE] if a.compile else []), OURS]
        counters = {n: Counter() for n in names}
        count_all_reduce(counters[OURS])
        waited = WaitTimer()
        steps, counted = build(a, rank, counters, a.compile)

        # Warm up (compiles); every variant has then taken a.warmup SGD steps alike.
        first: dict[str, float] = {}
        losses: dict[str, float] = {}
        for name, step in steps.items():
            t = time.perf_counter()
            loss = step()[0]
            first[name] = time.perf_counter() - t
            for _ in range(a.warmup - 1):
                loss = step()[0]
            losses[name] = loss
        # The local variants do not average their gradients: only the DDPs must agree.
        diff = torch.tensor([max(abs(losses[n] - losses[TORCH_DDP]) for n in names)])
        dist.all_reduce(diff, op=dist.ReduceOp.MAX)

        from models import LlamaGPT

        buffer_bytes = sum(b.numel() * b.element_size()
                           for b in LlamaGPT(llama_config(a, VOCAB)).buffers())

        # One counted step each: the bytes (and buckets) a step all-reduces.
        buckets: dict[str, list[int]] = {}
        for _ in range(2):  # torch DDP rebuilds its buckets after the first step
            counted()
        for name in names:
            counters[name].on = True
            (counted if name == TORCH_DDP else steps[name])()
            counters[name].on = False
            buckets[name] = counters[name].sizes

        # Interleaved rounds.
        phases: dict[str, list[tuple[float, float, float]]] = {n: [] for n in steps}
        waits: list[float] = []

        def each(name: str, result: Any, seconds: float) -> None:
            phases[name].append(result[1:])
            if name == OURS:
                waits.append(waited.s)  # ours' dist.waits blocked this long in the step
            waited.s = 0.0

        busy0, own0, t0 = cpu_busy_s(), time.process_time(), time.perf_counter()
        waited.s = 0.0
        rounds = interleaved(steps, a.rounds, a.steps, dist.barrier, each)
        busy1, own1, t1 = cpu_busy_s(), time.process_time(), time.perf_counter()
        own = torch.tensor([own1 - own0])  # both processes' CPU time
        dist.all_reduce(own)
        others = None if busy0 is None or busy1 is None else \
            max(0.0, busy1 - busy0 - float(own)) / (t1 - t0)

        # gloo on this machine.
        total = sum(buckets[OURS])
        tiny = time_all_reduce(4, 200)
        medium = time_all_reduce(1 << 20, 30)
        large = time_all_reduce(total, 15)
        ours_back_to_back = time_buckets(buckets[OURS], 15)
        torch_back_to_back = time_buckets(buckets[TORCH_DDP], 15)
        if rank == 0:
            result = {
                "first_s": first, "loss_diff": float(diff), "losses": losses,
                "buckets": buckets,
                "step_ms": {n: statistics.median(v) * 1e3 for n, v in rounds.items()},
                "buffer_bytes": buffer_bytes, "others": others,
                "wait_ms": statistics.median(waits) * 1e3,
                "phases_ms": {n: [statistics.median(p[i] for p in v) * 1e3 for i in range(3)]
                              for n, v in phases.items()},
                "gloo": {"tiny_s": tiny, "medium_s": medium, "large_s": large,
                         "large_bytes": total, "ours_buckets_s": ours_back_to_back[0],
                         "ours_buckets_cpu_s": ours_back_to_back[1],
                         "torch_buckets_s": torch_back_to_back[0],
                         "torch_buckets_cpu_s": torch_back_to_back[1]},
            }
            with open(out, "w") as f:
                json.dump(result, f)
        dist.barrier()  # tear gloo down together: one side closing first can abort the other
    finally:
        dist.destroy_process_group()


# --------------------------------------------------------------------------- the models


def ring_s(nbytes: float, n: int, bus_bytes_s: float, hop_s: float) -> float:
    """Ring all-reduce of ``nbytes`` over ``n`` processes: ``2(n-1)/n`` of the bytes through
    each link, ``2(n-1)`` steps of one hop's latency each."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bus_bytes_s + 2 * (n - 1) * hop_s


def exposed_s(buckets: list[int], backward_s: float, comm: Callable[[int], float]) -> float:
    """The communication a step waits for, under the overlap model: each bucket's
    all-reduce starts when its last gradient is computed and all but the last overlap the
    rest of the backward (``backward_s`` at most; what exceeds it is exposed), one after
    the other on the one link; the last bucket is started when the backward is done."""
    if not buckets:
        return 0.0
    hidden = sum(comm(n) for n in buckets[:-1])
    return comm(buckets[-1]) + max(0.0, hidden - backward_s)


def report(res: dict[str, Any], a: argparse.Namespace) -> None:
    step = res["step_ms"]
    base = step[TORCH_DDP]
    print(f"{'':<20}{'step ms':>9}{'fwd':>8}{'bwd':>8}{'opt':>8}{'vs torch DDP':>14}"
          f"{'first s':>9}{'MB/step':>9}  buckets (MB, in order)")
    for name in step:
        f, b, o = res["phases_ms"][name]
        sizes = res["buckets"].get(name)
        mb = f"{sum(sizes) / 1e6:>9.2f}" if sizes is not None else f"{'-':>9}"
        blist = ", ".join(f"{s / 1e6:.2f}" for s in sizes) if sizes else "-"
        print(f"{name:<20}{step[name]:>9.1f}{f:>8.1f}{b:>8.1f}{o:>8.1f}"
              f"{step[name] / base:>13.2f}x{res['first_s'][name]:>9.1f}{mb}  {blist}")
    if res["others"] is not None:
        print(f"(other processes kept {res['others']:.2f} CPUs busy during the rounds)")
    print(f"torch DDP also broadcasts the model's buffers from rank 0 before every forward "
          f"({res['buffer_bytes'] / 1e3:.1f} kB, not counted above); ours broadcasts them "
          "once, in ddp()")
    print(f"loss of warm-up step {a.warmup} (rank 0): max |difference| to torch DDP "
          f"{res['loss_diff']:.2e} (" + ", ".join(
              f"{n} {v:.8f}" for n, v in res["losses"].items() if not n.startswith("local"))
          + ")")

    g = res["gloo"]
    hop = g["tiny_s"] / (2 * (WORLD - 1))
    bus = (2 * (WORLD - 1) / WORLD) * g["large_bytes"] / max(g["large_s"] - 2 * (WORLD - 1) * hop,
                                                             1e-9)

    def gloo(n: int) -> float:
        return ring_s(n, WORLD, bus, hop)

    print(f"gloo all-reduce, {WORLD} processes (loopback): tiny {g['tiny_s'] * 1e6:.0f} µs -> "
          f"latency {hop * 1e6:.0f} µs a hop; {g['large_bytes'] / 1e6:.2f} MB "
          f"{g['large_s'] * 1e3:.2f} ms -> bus bandwidth {bus / 1e9:.2f} GB/s")
    print(f"  check: 1.05 MB predicted {gloo(1 << 20) * 1e3:.2f} ms, measured "
          f"{g['medium_s'] * 1e3:.2f} ms; ours' buckets back to back predicted "
          f"{sum(gloo(n) for n in res['buckets'][OURS]) * 1e3:.2f} ms, measured "
          f"{g['ours_buckets_s'] * 1e3:.2f} ms; torch DDP's predicted "
          f"{sum(gloo(n) for n in res['buckets'][TORCH_DDP]) * 1e3:.2f} ms, measured "
          f"{g['torch_buckets_s'] * 1e3:.2f} ms")
    print("communication a step exposes (DDP step - local step), predicted by the overlap "
          "model from the fit:")
    for name, local, key in ((TORCH_DDP, LOCAL_EAGER, "torch"), (OURS, LOCAL_OURS, "ours")):
        bwd = res["phases_ms"][local][1] / 1e3
        pred = exposed_s(res["buckets"][name], bwd, gloo)
        print(f"  {name:<16} predicted {pred * 1e3:.2f} ms (no overlap: "
              f"{sum(gloo(n) for n in res['buckets'][name]) * 1e3:.2f} ms; CPU time of its "
              f"all-reduces {g[key + '_buckets_cpu_s'] * 1e3:.2f} ms a process), measured "
              f"{step[name] - step[local]:.2f} ms")
    print(f"  (ours' dist.waits were blocked {res['wait_ms']:.2f} ms a step: the rest of the "
          "difference is computation slowed by the communication and by waiting for the "
          "other process)")

    print(f"projection from ours' buckets and the compute measured here ({LOCAL_OURS}):")
    project(step[LOCAL_OURS] / 1e3, res["phases_ms"][LOCAL_OURS][1] / 1e3, res["buckets"][OURS],
            a)


def project(compute: float, bwd: float, buckets: list[int], a: argparse.Namespace) -> None:
    """The step at 8 to 1,024 GPUs: ``compute`` seconds of computation (``bwd`` of them
    the backward) and the exposed communication of ``buckets`` (bytes, in the order they
    start) under the ring model with the assumed link figures."""
    nv, ib, hop_s = a.nvlink_gbs * 1e9, a.ib_gbs * 1e9, a.hop_us * 1e-6
    print(f"  compute {compute * 1e3:.1f} ms a step (backward {bwd * 1e3:.1f} ms), "
          f"{len(buckets)} buckets, {sum(buckets) / 1e6:.1f} MB; ring all-reduce, "
          f"{a.nvlink_gbs:g} GB/s (NVLink) within 8 GPUs, {a.ib_gbs:g} GB/s a GPU across "
          f"nodes, {a.hop_us:g} µs a hop")
    print(f"{'GPUs':>8}{'bandwidth':>12}{'all-reduce ms':>15}{'of it latency':>15}"
          f"{'exposed ms':>12}{'step ms':>10}{'efficiency':>12}")
    for n in (8, 64, 256, 1024):
        bw = nv if n <= 8 else ib

        def comm(nbytes: int, n: int = n, bw: float = bw) -> float:
            return ring_s(nbytes, n, bw, hop_s)

        total = sum(comm(b) for b in buckets)
        exp = exposed_s(buckets, bwd, comm)
        latency = len(buckets) * 2 * (n - 1) * hop_s
        print(f"{n:>8}{bw / 1e9:>9.0f} GB/s{total * 1e3:>15.3f}{latency * 1e3:>15.3f}"
              f"{exp * 1e3:>12.3f}"
              f"{(compute + exp) * 1e3:>10.1f}{compute / (compute + exp):>11.1%}")


# --------------------------------------------------------------------------- sharded


FSDP2 = "fully_shard"  # reshard_after_forward=True: ZERO3's memory
FSDP2_KEEP = "fully_shard keep"  # reshard_after_forward=False: ZERO2's
ZERO2 = "thunder_ir ZERO2"
ZERO3 = "thunder_ir ZERO3"
PEER = {ZERO3: FSDP2, ZERO2: FSDP2_KEEP}


def count_sharded(counter: Counter) -> None:
    """Counts the all-gathers and reduce-scatters of both libraries at their full size (an
    all-gather's output, a reduce-scatter's input)."""
    import torch.distributed as dist

    for name, full, keys in (("all_gather_single", 0, ("output_tensor", "output")),
                             ("reduce_scatter_single", 1, ("input", "input_tensor")),
                             ("all_gather_into_tensor", 0, ("output_tensor",)),
                             ("reduce_scatter_tensor", 1, ("input",))):
        inner = getattr(dist, name, None)
        if inner is None:
            continue

        def wrapped(*args: Any, _inner: Any = inner, _full: int = full,
                    _keys: tuple[str, ...] = keys, **kwargs: Any) -> Any:
            t = args[_full] if len(args) > _full else next(kwargs[k] for k in _keys
                                                          if k in kwargs)
            counter.add(t)
            return _inner(*args, **kwargs)

        setattr(dist, name, wrapped)


def sgd_step(fn: Callable[..., Any], params: Any, idx: Any, tgt: Any) -> Callable[[], float]:
    """A training step of ``fn`` (a language model): forward on the token tensor ``idx``,
    cross entropy against ``tgt``, backward and an SGD step on ``params``; returns the
    loss. (torch is imported in the worker processes, as everywhere in this script.)"""
    import torch
    import torch.nn.functional as F

    opt = torch.optim.SGD(params, lr=LR)

    def step() -> float:
        logits = fn(idx)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step


def interleaved(steps: dict[str, Callable[[], Any]], n_rounds: int, n_steps: int,
                barrier: Callable[[], Any],
                each: Callable[[str, Any, float], None] | None = None
                ) -> dict[str, list[float]]:
    """Median seconds of ``n_steps`` steps per variant and round, the variants' order
    rotating each round and every process meeting at ``barrier`` before each variant;
    ``each(name, result, seconds)`` sees every step."""
    order = list(steps)
    rounds: dict[str, list[float]] = {n: [] for n in order}
    for r in range(n_rounds):
        for k in range(len(order)):
            name = order[(r + k) % len(order)]
            barrier()
            times = []
            for _ in range(n_steps):
                t = time.perf_counter()
                result = steps[name]()
                times.append(time.perf_counter() - t)
                if each is not None:
                    each(name, result, times[-1])
            rounds[name].append(statistics.median(times))
    return rounds


def fsdp_worker(rank: int, port: int, a: argparse.Namespace, out: str) -> None:
    import torch
    import torch.distributed as dist
    from models import LlamaGPT
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import thunder_ir
    from thunder_ir.distributed import FSDPBucketingStrategy, FSDPType, fsdp

    pin_malloc()
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=600))
    try:
        counters = {n: Counter() for n in (FSDP2, FSDP2_KEEP, ZERO2, ZERO3)}
        shared = Counter()
        count_sharded(shared)
        cfg = llama_config(a, vocab_size=VOCAB)
        g = torch.Generator().manual_seed(1000 + rank)
        idx = torch.randint(0, VOCAB, (a.batch, a.seq), generator=g)
        tgt = torch.randint(0, VOCAB, (a.batch, a.seq), generator=g)

        def fresh() -> torch.nn.Module:
            torch.manual_seed(0)
            return LlamaGPT(cfg)

        def make(fn: Callable[..., Any], params: Any) -> Callable[[], float]:
            return sgd_step(fn, params, idx, tgt)

        steps: dict[str, Callable[[], float]] = {}
        mesh = init_device_mesh("cpu", (WORLD,))
        for name, reshard in ((FSDP2, True), (FSDP2_KEEP, False)):
            model = fresh()
            for block in model.transformer.h:
                fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
            fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
            steps[name] = make(model, model.parameters())
        bucketing = FSDPBucketingStrategy[a.bucketing.upper()]
        for name, strategy in ((ZERO2, FSDPType.ZERO2), (ZERO3, FSDPType.ZERO3)):
            m = fresh()
            jm = thunder_ir.jit(fsdp(m, sharding_strategy=strategy,
                                     bucketing_strategy=bucketing))
            steps[name] = make(jm, jm.parameters())
        local = fresh()
        steps[LOCAL_EAGER] = make(local, local.parameters())
        first: dict[str, float] = {}
        losses: dict[str, float] = {}
        for name, step in steps.items():
            t = time.perf_counter()
            losses[name] = step()
            first[name] = time.perf_counter() - t
            for _ in range(a.warmup - 1):
                losses[name] = step()
        sharded = [FSDP2, FSDP2_KEEP, ZERO2, ZERO3]
        diff = torch.tensor([max(abs(losses[n] - losses[FSDP2]) for n in sharded)])
        dist.all_reduce(diff, op=dist.ReduceOp.MAX)
        for name in sharded:  # one counted step each
            shared.sizes = []
            shared.on = True
            steps[name]()
            shared.on = False
            counters[name].sizes = list(shared.sizes)
        rounds = interleaved(steps, a.rounds, a.steps, dist.barrier)
        if rank == 0:
            with open(out, "w") as f:
                json.dump({"step_ms": {n: statistics.median(v) * 1e3
                                       for n, v in rounds.items()},
                           "first_s": first, "loss_diff": float(diff), "losses": losses,
                           "bytes": {n: sum(c.sizes) for n, c in counters.items()},
                           "calls": {n: len(c.sizes) for n, c in counters.items()}}, f)
        dist.barrier()  # tear gloo down together: one side closing first can abort the other
    finally:
        dist.destroy_process_group()


def fsdp_report(res: dict[str, Any], a: argparse.Namespace) -> None:
    step = res["step_ms"]
    print(f"bucketing of ours: {a.bucketing}; fully_shard wraps each block and the root")
    print(f"{'':<20}{'step ms':>9}{'vs peer':>10}{'first s':>9}{'MB/step':>9}"
          f"{'collectives':>13}")
    for name in step:
        b = res["bytes"].get(name)
        mb = f"{b / 1e6:>9.2f}" if b is not None else f"{'-':>9}"
        calls = f"{res['calls'][name]:>13}" if name in res["calls"] else f"{'-':>13}"
        peer = PEER.get(name)
        ratio = f"{step[name] / step[peer]:>9.2f}x" if peer else f"{'-':>10}"
        print(f"{name:<20}{step[name]:>9.1f}{ratio}"
              f"{res['first_s'][name]:>9.1f}{mb}{calls}")
    print("(peer: ZERO3 against fully_shard, which reshards after the forward; ZERO2 against "
          "fully_shard keep, which does not)")
    print(f"loss of warm-up step {a.warmup} (rank 0): max |difference| to fully_shard "
          f"{res['loss_diff']:.2e} (" + ", ".join(
              f"{n} {v:.8f}" for n, v in res["losses"].items() if n != LOCAL_EAGER) + ")")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description="Data-parallel training step on 2 gloo "
                                 "processes: torch DDP vs thunder_ir ddp")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", "--embd", dest="embd", metavar="WIDTH", type=int,
                    default=256)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2, help="per process")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--steps", type=int, default=3, help="steps per variant and round")
    ap.add_argument("--warmup", type=int, default=3, help="steps before the loss check")
    ap.add_argument("--bucket-mb", type=float, default=4.0,
                    help="bucket size of both DDPs (torch's bucket_cap_mb, ours' "
                         "bucket_size_in_mb; both default to 25 MB, sized for models "
                         "larger than this one: 4 MB cuts its 20 MB of gradients into 4-6)")
    ap.add_argument("--fsdp", action="store_true",
                    help="compare sharded training (torch fully_shard vs ours ZERO2/ZERO3)")
    ap.add_argument("--bucketing", choices=("none", "layer", "block"), default="block",
                    help="--fsdp: ours' FSDPBucketingStrategy")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                    help="also torch DDP under torch.compile (compiles for a while)")
    ap.add_argument("--nvlink-gbs", type=float, default=150.0,
                    help="projection: all-reduce bus bandwidth within a node of 8 GPUs")
    ap.add_argument("--ib-gbs", type=float, default=50.0,
                    help="projection: bandwidth per GPU across nodes")
    ap.add_argument("--hop-us", type=float, default=10.0, help="projection: latency a hop")
    ap.add_argument("--project-only", metavar="STEP_MS:BACKWARD_MS:GRAD_MB",
                    help="measure nothing: project a step of that compute time (that much "
                         "of it the backward) and gradient size, in buckets of --bucket-mb")
    a = ap.parse_args()
    if a.project_only:
        step_ms, bwd_ms, grad_mb = (float(v) for v in a.project_only.split(":"))
        whole, rest = divmod(grad_mb * 1e6, a.bucket_mb * 2**20)
        buckets = [int(a.bucket_mb * 2**20)] * int(whole) + ([int(rest)] if rest else [])
        project(step_ms / 1e3, bwd_ms / 1e3, buckets, a)
        return
    os.environ["OMP_NUM_THREADS"] = "1"  # the spawned processes inherit it
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        raise SystemExit("torch.distributed with gloo is not available")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}; {WORLD} gloo processes, 1 thread each, malloc pinned; "
          f"Llama {a.layers} layers, width {a.embd}, seq {a.seq}, batch {a.batch} a process, "
          f"vocab {VOCAB}; buckets {a.bucket_mb:g} MB; {a.rounds} rounds x {a.steps} steps")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        mp.spawn(fsdp_worker if a.fsdp else worker, args=(free_port(), a, out),
                 nprocs=WORLD, join=True)
        with open(out) as f:
            res = json.load(f)
    (fsdp_report if a.fsdp else report)(res, a)


if __name__ == "__main__":
    main()
