"""Fully sharded data parallelism: ``thunder_ir.distributed.fsdp``.

``model = thunder_ir.jit(thunder_ir.distributed.fsdp(model))`` in every process of a group.
``fsdp`` shards each parameter along dim 0 (padded to a multiple of the world size): the
module keeps only this process's rows, so the optimizer sees and updates only the shards.
Tracing then reads each sharded parameter through ``dist.all_gather`` of its shard and
``dist.wait`` (the padding sliced off): the program's input is the shard, the model code
sees the full parameter. Autodiff transposes the gather into a ``dist.reduce_scatter`` of
the full parameter's gradient, and ``fsdp-grad-scale`` divides it by the world size, so
each shard's gradient is the average over the processes, as one process on the whole
batch computes it.

``sharding_strategy``: `FSDPType.ZERO2` keeps each gathered parameter from the forward for
the backward; `FSDPType.ZERO3` frees it after its last use in the forward and gathers it
again in the backward (``fsdp-zero3``), trading a second all-gather for the memory.
``schedule-collectives`` starts each all-gather one ahead of the one before it (prefetch:
layer i+1's parameters travel while layer i computes) and waits only just before the first
use. 0-d parameters are not sharded: their gradients are all-reduced (``ddp-allreduce``).

``state_dict()`` of the module (or of the jitted module) gives full, unpadded tensors
under the original names (every process must call it: it all-gathers);
``load_state_dict`` takes full tensors (each process keeps its rows) or this process's
shards. `sharded_state_dict` gives the shards.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from thunder_ir.dialects.dist import communicate, register_group

FSDP_ATTR = "_thunder_fsdp"
"""The attribute of the user's module holding its `FSDPConfig`."""


class FSDPType(enum.Enum):
    """What the backward has of the gathered parameters (the reference's names)."""

    ZERO2 = "zero2"
    """Kept from the forward."""
    ZERO3 = "zero3"
    """Freed after the forward's last use; gathered again in the backward."""


@dataclass(frozen=True)
class Shard:
    """One sharded parameter: its full shape and how many rows each process holds."""

    shape: tuple[int, ...]
    rows: int  # per process (the padded dim 0 over the world size)


@dataclass(frozen=True)
class FSDPConfig:
    """How a module is sharded: its process group (by name), that group's size, this
    process's rank in it, the strategy, and each sharded parameter by name."""

    group: str
    world: int
    rank: int
    strategy: FSDPType
    shards: Mapping[str, Shard] = field(default_factory=dict)


def _module(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "_model", model) if type(model).__name__ == "ThunderModule" \
        else model


def fsdp(model: torch.nn.Module, *, sharding_strategy: FSDPType = FSDPType.ZERO2,
         broadcast_from: int | None = 0, process_group: Any = None) -> torch.nn.Module:
    """Shards ``model``'s parameters over ``process_group`` (default: the whole world).

    Args:
        model: the module; create its optimizer afterwards (it then holds the shards).
        sharding_strategy: `FSDPType.ZERO2` or `FSDPType.ZERO3`.
        broadcast_from: the rank whose parameters and buffers every process starts from;
            None: they must already be equal (checked).
        process_group: a ``torch.distributed`` process group; None: the default group.

    Returns:
        ``model`` itself, sharded in place; ``thunder_ir.jit`` it.

    Raises:
        RuntimeError: no process group is initialized.
        ValueError: ``broadcast_from=None`` and the processes' parameters differ.
    """
    from thunder_ir.distributed import require_group, same_start

    dist = require_group("fsdp", process_group)
    target = _module(model)
    if getattr(target, FSDP_ATTR, None) is not None:
        raise ValueError(f"fsdp: {type(target).__name__} is sharded already")
    same_start(target, broadcast_from, process_group, "fsdp")
    world = dist.get_world_size(process_group)
    rank = dist.get_rank(process_group)
    shards: dict[str, Shard] = {}
    with torch.no_grad():
        for name, p in target.named_parameters():
            if p.dim() == 0:
                continue
            rows = -(-p.shape[0] // world)
            shards[name] = Shard(tuple(p.shape), rows)
            full = p.detach()
            if rows * world != p.shape[0]:
                full = torch.cat([full, full.new_zeros((rows * world - p.shape[0],
                                                        *p.shape[1:]))])
            p.data = full[rank * rows:(rank + 1) * rows].clone()
    cfg = FSDPConfig(register_group(process_group), world, rank, sharding_strategy, shards)
    setattr(target, FSDP_ATTR, cfg)
    target._register_state_dict_hook(_full_state_dict_hook)
    target._register_load_state_dict_pre_hook(_shard_on_load_hook, with_module=True)
    return model


def config_of(model: torch.nn.Module) -> FSDPConfig | None:
    """The module's `FSDPConfig`, if `fsdp` sharded it."""
    cfg = getattr(model, FSDP_ATTR, None)
    return cfg if isinstance(cfg, FSDPConfig) else None


def unshard_in_trace(cfg: FSDPConfig) -> Callable[[Any, str, Any], Any]:
    """What tracing reads a sharded parameter as: ``unshard(ctx, name, shard_proxy)``
    emits the all-gather of the shard, its wait and the slice that drops the padding,
    and returns the full parameter's proxy (the shard's own for a parameter not sharded)."""
    from thunder_ir.dialects import dist, prims
    from thunder_ir.frontend.proxy import TensorProxy

    def unshard(ctx: Any, name: str, proxy: Any) -> Any:
        shard = cfg.shards.get(name)
        if shard is None:
            return proxy
        pending = ctx.emit(dist.AllGatherOp, proxy._value, group=cfg.group, world=cfg.world)
        full = ctx.emit(dist.WaitOp, pending)
        if shard.rows * cfg.world != shard.shape[0]:
            rank = len(shard.shape)
            full = ctx.emit(prims.SliceOp, full, start_indices=(0,) * rank,
                            end_indices=shard.shape, strides=(1,) * rank)
        out = TensorProxy(full)
        out._is_param = True  # type: ignore[attr-defined]
        return out

    return unshard


def _gather_full(cfg: FSDPConfig, name: str, shard: torch.Tensor) -> torch.Tensor:
    """The full, unpadded parameter of this process's ``shard`` (every process calls it)."""
    import torch.distributed as dist

    from thunder_ir.dialects.dist import process_group

    info = cfg.shards[name]
    out = shard.new_empty((info.rows * cfg.world, *shard.shape[1:]))
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    communicate("fsdp's state_dict gather", cfg.group, lambda: gather(
        out, shard.detach().contiguous(), group=process_group(cfg.group)))
    return out[:info.shape[0]]


def _full_state_dict_hook(module: torch.nn.Module, state_dict: dict[str, Any], prefix: str,
                          local_metadata: Any) -> dict[str, Any]:
    cfg = config_of(module)
    if cfg is None or getattr(module, "_thunder_fsdp_sharded_dict", False):
        return state_dict
    for name in cfg.shards:
        key = prefix + name
        if key in state_dict:
            state_dict[key] = _gather_full(cfg, name, state_dict[key])
    return state_dict


def _shard_on_load_hook(module: torch.nn.Module, state_dict: dict[str, Any], prefix: str,
                        *args: Any) -> None:
    cfg = config_of(module)
    if cfg is None:
        return
    for name, info in cfg.shards.items():
        key = prefix + name
        value = state_dict.get(key)
        if value is None or tuple(value.shape) != info.shape:
            continue  # absent, or a shard already
        rows = info.rows * cfg.world
        if rows != value.shape[0]:
            value = torch.cat([value, value.new_zeros((rows - value.shape[0],
                                                       *value.shape[1:]))])
        state_dict[key] = value[cfg.rank * info.rows:(cfg.rank + 1) * info.rows]


def sharded_state_dict(model: torch.nn.Module) -> dict[str, Any]:
    """This process's shards (padded rows), under the original names."""
    target = _module(model)
    target._thunder_fsdp_sharded_dict = True  # type: ignore[assignment]
    try:
        return target.state_dict()
    finally:
        del target._thunder_fsdp_sharded_dict


__all__ = ["FSDPConfig", "FSDPType", "Shard", "config_of", "fsdp", "sharded_state_dict",
           "unshard_in_trace"]
