"""Data-parallel training on ``torch.distributed``: ``thunder_ir.distributed.ddp``.

``model = thunder_ir.jit(thunder_ir.distributed.ddp(model))`` in every process of a group
that ``torch.distributed.init_process_group`` made (``torchrun`` or
``torch.multiprocessing``; NCCL on GPUs, gloo on CPU). ``ddp`` makes every process start
from the same parameters and marks the module; ``jit`` then compiles each training
program with the ``ddp-allreduce`` pass (`thunder_ir.passes.ddp`), which averages the
parameters' gradients across the processes inside ``@backward``, bucket by bucket, as
soon as each bucket's last gradient is computed. The trace shows the collectives
(``dist.all_reduce``, ``dist.wait``, `thunder_ir.dialects.dist`). No transport of our
own: the collectives are ``torch.distributed``'s, with ``async_op=True``.

Gradient accumulation: ``with thunder_ir.distributed.no_sync(model):`` (or
``jitted.no_sync()``) runs backwards without communication (a program compiled without
the collectives: the sync flag is module state, which the cache guards); the gradients
accumulated in it are averaged when the block exits, so the next synchronized backward
adds the average of its own: the sum is what one big batch gives, as with torch's DDP.
(Torch's DDP averages them during that next backward instead; a model whose
accumulated gradients are used without another synchronized backward sees averaged
gradients here, local ones there.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from thunder_ir.dialects.dist import communicate, register_group
from thunder_ir.stages.policies import set_data_parallel

DDP_ATTR = "_thunder_ddp"
"""The attribute of the user's module holding its `DDPConfig`."""
SYNC_ATTR = "_thunder_ddp_sync"
"""The module attribute that says whether backwards synchronize (False in `no_sync`)."""


@dataclass(frozen=True)
class DDPConfig:
    """How a module is data-parallel: its process group (by name), that group's size and
    the bucket size of the gradients' all-reduces."""

    group: str
    world: int
    bucket_bytes: int


def _module(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module (a jitted module's original)."""
    return getattr(model, "_model", model) if type(model).__name__ == "ThunderModule" \
        else model


def require_group(what: str, group: Any) -> Any:
    """``torch.distributed``, once a process group is initialized (else a clear error
    naming ``what`` needs it)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            f"thunder_ir.distributed.{what}: no torch.distributed process group is "
            "initialized; call torch.distributed.init_process_group(backend=...) in every "
            "process first (torchrun sets MASTER_ADDR, RANK and WORLD_SIZE for it)")
    return dist


def ddp(model: torch.nn.Module, *, broadcast_from: int | None = 0,
        bucket_size_in_mb: float = 25.0, process_group: Any = None) -> torch.nn.Module:
    """Makes ``model`` data-parallel over ``process_group`` (default: the whole world).

    Args:
        model: the module (or a jitted module).
        broadcast_from: the rank whose parameters and buffers every process starts from;
            None: they must already be equal (checked, with the first that differs named).
        bucket_size_in_mb: the most gradient bytes one all-reduce carries.
        process_group: a ``torch.distributed`` process group; None: the default group.

    Returns:
        ``model`` itself, marked; ``thunder_ir.jit`` it (before or after).

    Raises:
        RuntimeError: no process group is initialized.
        ValueError: ``broadcast_from=None`` and the processes' parameters differ.
    """
    dist = require_group("ddp", process_group)
    target = _module(model)
    same_start(target, broadcast_from, process_group, "ddp")
    setattr(target, DDP_ATTR, DDPConfig(register_group(process_group),
                                        dist.get_world_size(process_group),
                                        int(bucket_size_in_mb * 2**20)))
    setattr(target, SYNC_ATTR, True)
    set_data_parallel(target, POLICY)
    return model


def same_start(module: torch.nn.Module, broadcast_from: int | None, process_group: Any,
               what: str) -> None:
    """Makes every process's parameters and buffers rank ``broadcast_from``'s (or checks
    that they are equal, for None)."""
    import torch.distributed as dist

    named = [*module.named_parameters(), *module.named_buffers()]
    if broadcast_from is None:
        _check_equal(named, process_group, dist.get_world_size(process_group), what)
        return
    src = broadcast_from if process_group is None else \
        dist.get_global_rank(process_group, broadcast_from)
    group = register_group(process_group)
    step = f"{what}'s broadcast of the parameters"
    with torch.no_grad():
        works = [communicate(step, group, lambda t=t: dist.broadcast(
            t.detach(), src, group=process_group, async_op=True)) for _, t in named]
        for w in works:
            communicate(step, group, w.wait)


def _check_equal(named: list[tuple[str, torch.Tensor]], group: Any, world: int,
                 what: str) -> None:
    """Raises naming the first tensor whose values differ between processes."""
    import torch.distributed as dist

    if not named:
        return
    flat = torch.cat([t.detach().reshape(-1).to(torch.float64, copy=True) for _, t in named])
    hi, lo = flat.clone(), flat
    name = register_group(group)
    communicate(f"{what}'s check of the parameters", name,
                lambda: dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=group))
    communicate(f"{what}'s check of the parameters", name,
                lambda: dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=group))
    if torch.equal(hi, lo):
        return
    offset = 0
    for name, t in named:
        n = t.numel()
        if not torch.equal(hi[offset:offset + n], lo[offset:offset + n]):
            raise ValueError(
                f"thunder_ir.distributed.{what}(broadcast_from=None): {name!r} differs across "
                f"the {world} processes; seed every process alike, or pass "
                "broadcast_from=0 to start all from rank 0's values")
        offset += n


def config_of(model: torch.nn.Module) -> DDPConfig | None:
    """The module's `DDPConfig` while its backwards synchronize; None otherwise (not
    data-parallel, or inside `no_sync`)."""
    cfg = getattr(model, DDP_ATTR, None)
    if isinstance(cfg, DDPConfig) and getattr(model, SYNC_ATTR, True):
        return cfg
    return None


@contextmanager
def no_sync(model: torch.nn.Module) -> Iterator[None]:
    """Backwards inside the block accumulate gradients locally, without communication;
    on a normal exit the accumulated gradients are averaged across the processes (see the
    module doc), so accumulation over micro-batches equals one big batch."""
    target = _module(model)
    cfg = getattr(target, DDP_ATTR, None)
    if not isinstance(cfg, DDPConfig):
        if hasattr(target, "_thunder_fsdp"):
            raise ValueError(
                f"no_sync: {type(target).__name__} is sharded (fsdp), whose backwards "
                "reduce-scatter every gradient (each process keeps only its shard's); "
                "accumulating over micro-batches needs no no_sync: call backward on each")
        raise ValueError(f"no_sync: {type(target).__name__} is not data-parallel; wrap it "
                         "with thunder_ir.distributed.ddp(model) first")
    before = getattr(target, SYNC_ATTR, True)
    setattr(target, SYNC_ATTR, False)
    try:
        yield
    except BaseException:
        setattr(target, SYNC_ATTR, before)
        raise
    setattr(target, SYNC_ATTR, before)
    if before:
        average_gradients(target, cfg)


def average_gradients(model: torch.nn.Module, cfg: DDPConfig) -> None:
    """Averages the parameters' ``.grad`` across the processes (bucketed, in place)."""
    from thunder_ir.dialects.dist import process_group

    dist = require_group("no_sync", None)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    group = process_group(cfg.group)
    buckets: list[list[torch.Tensor]] = []
    size = 0
    for g in grads:
        if not buckets or size + g.nbytes > cfg.bucket_bytes or \
                (g.dtype, g.device) != (buckets[-1][0].dtype, buckets[-1][0].device):
            buckets.append([])
            size = 0
        buckets[-1].append(g)
        size += g.nbytes
    with torch.no_grad():
        for bucket in buckets:
            flat = torch.cat([g.reshape(-1) for g in bucket])
            communicate("no_sync's average of the accumulated gradients", cfg.group,
                        lambda flat=flat: dist.all_reduce(flat, group=group))
            flat /= cfg.world
            offset = 0
            for g in bucket:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()


class _DataParallelPolicy:
    """What a data-parallel module's compiles do (`thunder_ir.stages.policies
    .DataParallel`): its training programs get the collectives (`training_passes`), and a
    sharded module's parameters are traced gathered (`thunder_ir.distributed.fsdp`)."""

    def passes(self, module: torch.nn.Module, input_kinds: Sequence[Any]) -> tuple[Any, ...]:
        return training_passes(module, input_kinds)

    def unshard(self, module: torch.nn.Module) -> Any:
        from thunder_ir.distributed.fsdp import config_of as fsdp_config_of
        from thunder_ir.distributed.fsdp import unshard_in_trace

        cfg = fsdp_config_of(module)
        return None if cfg is None else unshard_in_trace(cfg)


POLICY = _DataParallelPolicy()
"""The data-parallel policy `ddp` and `fsdp` register for their modules."""


def training_passes(module: torch.nn.Module, input_kinds: Sequence[Any]) -> tuple[Any, ...]:
    """The passes of a data-parallel module's training program, whose arguments come
    from ``input_kinds`` (`thunder_ir.runtime.origins`): ``ddp-allreduce`` of its
    parameters' gradients while its backwards synchronize; for a sharded module,
    ``fsdp-grad-scale`` of the shards' gradients (their reduce-scatter is autodiff's),
    ``ddp-allreduce`` of the parameters it does not shard, ZERO3's gathering again in the
    backward, and the prefetching schedule."""
    from thunder_ir.distributed.fsdp import config_of as fsdp_config_of
    from thunder_ir.passes.collectives import ScheduleCollectivesPass
    from thunder_ir.passes.ddp import DDPAllReducePass
    from thunder_ir.passes.fsdp import FSDPGradScalePass, Zero3Pass
    from thunder_ir.runtime.origins import Captured, StateEntry

    named = dict(module.named_parameters())
    ids = {id(p) for p in named.values()}
    # a parameter reaches the program by name, or captured (a checkpointed region's
    # closure): each of its inputs' gradients is averaged, so their sum is too
    positions = [i for i, kind in enumerate(input_kinds)
                 if (isinstance(kind, StateEntry) and kind.name in named)
                 or (isinstance(kind, Captured) and id(kind.tensor) in ids)]
    sharded = fsdp_config_of(module)
    if sharded is not None:
        shard_pos = tuple(i for i in positions if isinstance(kind := input_kinds[i], StateEntry)
                          and kind.name in sharded.shards)
        rest = tuple(i for i in positions if i not in shard_pos)
        passes: list[Any] = [FSDPGradScalePass(shard_pos, sharded.world)]
        if rest:
            passes.append(DDPAllReducePass(rest, sharded.world, sharded.group))
        if sharded.strategy is FSDPType.ZERO3:
            passes.append(Zero3Pass())
        passes.append(ScheduleCollectivesPass())
        return tuple(passes)
    cfg = config_of(module)
    if cfg is None:
        return ()
    return (DDPAllReducePass(tuple(positions), cfg.world, cfg.group, cfg.bucket_bytes),)


from thunder_ir.distributed.fsdp import (  # noqa: E402
    FSDPBucketingStrategy,
    FSDPType,
    fsdp,
    sharded_state_dict,
)

__all__ = ["DDPConfig", "FSDPBucketingStrategy", "FSDPType", "average_gradients",
           "config_of", "ddp", "fsdp", "no_sync", "require_group", "same_start",
           "sharded_state_dict", "training_passes", "POLICY"]
