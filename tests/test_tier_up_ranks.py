"""Tier-up of data-parallel programs (`thunder_ir.lowering.tier_up_ranks`) on two gloo
processes: ``ddp`` and ``fsdp`` training programs, hot at once, are fused and swapped in at
the same step on both processes, though the processes run different programs (their
batches differ in size: one program per size); the fused programs keep their collectives
outside the regions, in their order; every step's loss, the gradients and the parameters
after the optimizer's steps are one process's eager on the whole batch. Where one
process's kernels fail to compile, both keep their unfused programs, at the same step."""

from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import thunder_ir
from thunder_ir.distributed import FSDPType, ddp, fsdp
from thunder_ir.lowering import inductor_executor
from thunder_ir.lowering import tier_up as tu
from thunder_ir.lowering import tiered as tiering

pytestmark = [
    pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                       reason="torch.distributed with gloo is not available"),
    pytest.mark.skipif(not inductor_executor.InductorExecutor().is_available(),
                       reason="the Inductor executor needs a C++ compiler on the CPU")]

WORLD = 2
AFTER = 3  # steps of the fused program
MAX_STEPS = 5000
MODES = ("ddp", "fsdp", "ddp_failing")
"""``ddp_failing``: rank 1's kernels fail to compile (an option Inductor does not know):
both processes keep their unfused programs."""
LR = 0.05


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 32),
                         nn.Tanh(), nn.Linear(32, 4))


def _rows(step: int) -> tuple[int, int]:
    """Each process's rows at a step: rank 0 alternates 2 and 6 (two programs), rank 1
    always has 4 (one program), so the processes run different programs, and call them
    unequally often."""
    return (2 if step % 2 else 6), 4


def _batch(step: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each process's inputs and targets at a step."""
    g = torch.Generator().manual_seed(1000 + step)
    rows = _rows(step)
    x, y = torch.randn(sum(rows), 16, generator=g), torch.randn(sum(rows), 4, generator=g)
    return list(x.split(rows)), list(y.split(rows))


def _loss(model: Any, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (model(x) - y).square().mean()


def _wrap(model: nn.Module, mode: str) -> nn.Module:
    if mode.startswith("ddp"):
        return ddp(model, bucket_size_in_mb=0.002)  # several buckets
    return fsdp(model, sharding_strategy=FSDPType.ZERO3)


def _train(rank: int) -> dict[str, dict[str, Any]]:
    """Trains a copy of the jitted model per mode (`MODES`) side by side (their kernels
    compile in one helper session) on this process's rows of each batch, until each has
    run `AFTER` steps fused (``ddp_failing``: kept unfused); returns what the test
    compares, by mode.
    Until the swap rank 0 waits for its own kernels after each step (after it, those of
    its program that was not primed compile meanwhile); rank 1 never waits, and its
    kernels start compiling 2 s after they are asked for: the processes have their
    kernels at different steps."""
    if rank == 1:
        tiering.QUIET_S = 2.0
    jms = {mode: thunder_ir.jit(_wrap(_model(), mode), cache="static") for mode in MODES}
    if rank == 1:
        jms["ddp_failing"]._compiled.tier_up.context().executors[0].options = {
            "no_such_inductor_option": 1}
    opts = {mode: torch.optim.SGD(jm.parameters(), lr=LR) for mode, jm in jms.items()}
    out: dict[str, dict[str, Any]] = {mode: {"losses": [], "swapped_at": None,
                                             "ready_at": None} for mode in MODES}
    step = 0
    while True:
        x, y = _batch(step)
        finished = True
        for mode, jm in jms.items():
            res = out[mode]
            loss = _loss(jm, x[rank], y[rank])
            loss.backward()
            res["grads"] = [p.grad.detach().clone() for p in jm.parameters()]
            opts[mode].step()
            opts[mode].zero_grad()
            t = loss.detach().clone()
            dist.all_reduce(t)
            res["losses"].append(float(t) / WORLD)
            status = thunder_ir.compile_status(jm)
            if status["swapped"] and res["swapped_at"] is None:
                res["swapped_at"] = step
            if status["pending"]:
                res["asked"] = True
                if rank == 0 and res["swapped_at"] is None:
                    status = thunder_ir.compile_status(jm, wait=None)
            if res.get("asked") and not status["pending"] and res["ready_at"] is None:
                res["ready_at"] = step  # (this process has every kernel it asked for)
            if mode == "ddp_failing":
                if status["kept"] and res["swapped_at"] is None:
                    res["swapped_at"] = step  # (here: when it was kept)
                if status["pending"]:
                    thunder_ir.compile_status(jm, wait=None)
            finished &= res["swapped_at"] is not None and step - res["swapped_at"] >= AFTER
        done = torch.tensor(float(finished))
        dist.all_reduce(done, op=dist.ReduceOp.MIN)  # (the loop's length: the same on both)
        step += 1
        if done or step == MAX_STEPS:
            break
    for mode, jm in jms.items():
        out[mode].update(
            status=thunder_ir.compile_status(jm), misses=thunder_ir.cache_misses(jm),
            params={k: v.detach().clone() for k, v in jm.state_dict().items()},
            forward=str(thunder_ir.last_traces(jm)[-1]),
            backward=str(thunder_ir.last_backward_traces(jm)[-1]))
    return out


def _worker(rank: int, port: int, out: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ[tu.AFTER_ENV] = "0"  # hot after `HOT_CALLS` calls
    os.environ.pop(tu.TIER_ENV, None)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=120))
    try:
        torch.save(_train(rank), f"{out}.{rank}")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # (as tests/test_distributed.py: gloo's threads at finalization)


def _eager(steps: int) -> dict[str, Any]:
    """One process, eagerly, on the whole batch."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses: list[float] = []
    grads: list[torch.Tensor] = []
    for step in range(steps):
        x, y = _batch(step)
        loss = sum(_loss(model, xs, ys) for xs, ys in zip(x, y)) / WORLD  # (ddp's mean)
        loss.backward()
        grads = [p.grad.detach().clone() for p in model.parameters()]
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return {"losses": losses, "grads": grads, "params": dict(model.state_dict())}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ddp_and_fsdp_programs_swap_at_the_same_step_and_train_as_eager(
        tmp_path: Path) -> None:
    out = str(tmp_path / "result")
    mp.spawn(_worker, args=(_free_port(), out), nprocs=WORLD, join=True)
    ranks = [torch.load(f"{out}.{r}") for r in range(WORLD)]
    want = _eager(len(ranks[0]["ddp"]["losses"]))  # (the two modes: the same training)
    for mode in MODES:
        got = [r[mode] for r in ranks]
        for g in got:  # every step, before and after the swap: eager's
            torch.testing.assert_close(g["losses"], want["losses"], rtol=1e-5, atol=1e-6,
                                       msg=mode)
        if mode == "ddp_failing":  # kept unfused on both, at the same step
            at = [g["swapped_at"] for g in got]
            assert at[0] is not None and at[0] == at[1], at
            for g in got:
                assert g["status"]["swapped"] == 0 and g["status"]["kept"], g["status"]
                assert "inductorFusion" not in g["forward"] + g["backward"]
            assert got[1]["status"]["failed"] >= 1 and got[0]["status"]["failed"] == 0
            continue
        for g, programs in zip(got, (2, 1), strict=True):
            st = g["status"]
            assert st["swapped"] == programs and not st["kept"] and st["failed"] == 0, (
                mode, st)  # each program fused in place
            assert g["misses"] == programs, mode
        at = [g["swapped_at"] for g in got]
        assert at[0] is not None and at[0] == at[1], (mode, at)  # the same step on both
        for g in got:  # only once each process had its kernels
            assert tu.HOT_CALLS <= g["ready_at"] < at[0], (mode, g["ready_at"], at)
        g0 = got[0]
        for k, v in want["params"].items():
            torch.testing.assert_close(g0["params"][k], v, rtol=1e-5, atol=1e-6,
                                       msg=f"{mode} {k}")
        for mine, full in zip(g0["grads"], want["grads"], strict=True):
            # (fsdp: rank 0's shard, the first rows of the gradient)
            torch.testing.assert_close(mine, full[:mine.shape[0]], rtol=1e-4, atol=1e-6,
                                       msg=mode)
        fwd, bwd = g0["forward"], g0["backward"]
        assert "inductorFusion" in fwd and "inductorFusion" in bwd, mode  # what runs: fused
        lines = bwd.splitlines()
        if mode == "ddp":  # the bucketed all-reduces start amid the backward's regions
            starts = [i for i, ln in enumerate(lines) if "dist.all_reduce(" in ln]
            waits = [i for i, ln in enumerate(lines) if "dist.wait(" in ln]
            assert len(starts) > 1 and len(waits) == len(starts), bwd
            later = [i for i, ln in enumerate(lines)
                     if i > starts[0] and "inductorFusion" in ln and "=" in ln]
            assert later and later[0] < waits[-1], bwd  # computing overlaps a bucket
        else:  # gathered in the forward (and again in the backward: ZERO3)
            assert "dist.all_gather(" in fwd and "dist.all_gather(" in bwd
            assert "dist.reduce_scatter(" in bwd
        for trace in (fwd, bwd):  # no collective inside a region (its body: the comments
            # under its call)
            body = [ln for ln in trace.splitlines() if ln.lstrip().startswith("#")]
            assert body and not any("dist." in ln for ln in body), trace
