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


class FSDPBucketingStrategy(enum.Enum):
    """How many parameters one all-gather carries (the reference's names)."""

    NONE = "none"
    """One all-gather per parameter."""
    LAYER = "layer"
    """One per module that holds parameters of its own (a linear layer's weight and bias)."""
    BLOCK = "block"
    """One per block: each module of the model's largest ``nn.ModuleList`` (a transformer
    block) and, apart, each other module that holds parameters."""


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
    buckets: tuple[tuple[str, ...], ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)
    """Every name of a sharded parameter (tied weights have several) -> its shard's."""


def _module(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "_model", model) if type(model).__name__ == "ThunderModule" \
        else model


def fsdp(model: torch.nn.Module, *, sharding_strategy: FSDPType = FSDPType.ZERO2,
         bucketing_strategy: FSDPBucketingStrategy = FSDPBucketingStrategy.NONE,
         broadcast_from: int | None = 0, process_group: Any = None) -> torch.nn.Module:
    """Shards ``model``'s parameters over ``process_group`` (default: the whole world).

    Args:
        model: the module; create its optimizer afterwards (it then holds the shards).
        sharding_strategy: `FSDPType.ZERO2` or `FSDPType.ZERO3`.
        bucketing_strategy: how many parameters one all-gather carries
            (`FSDPBucketingStrategy`): fewer, larger collectives for the same bytes.
        broadcast_from: the rank whose parameters and buffers every process starts from;
            None: they must already be equal (checked).
        process_group: a ``torch.distributed`` process group; None: the default group.

    Returns:
        ``model`` itself, sharded in place; ``thunder_ir.jit`` it.

    Raises:
        RuntimeError: no process group is initialized.
        ValueError: ``broadcast_from=None`` and the processes' parameters differ.
    """
    from thunder_ir.distributed import POLICY, require_group, same_start
    from thunder_ir.stages.policies import set_data_parallel

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
    first = {id(p): n for n, p in target.named_parameters()}
    aliases = {n: first[id(p)] for n, p in target.named_parameters(remove_duplicate=False)
               if first[id(p)] in shards}
    cfg = FSDPConfig(register_group(process_group), world, rank, sharding_strategy, shards,
                     _buckets(target, shards, bucketing_strategy), aliases)
    setattr(target, FSDP_ATTR, cfg)
    set_data_parallel(target, POLICY)
    target._register_state_dict_hook(_full_state_dict_hook)
    target._register_load_state_dict_pre_hook(_shard_on_load_hook, with_module=True)
    return model


def config_of(model: torch.nn.Module) -> FSDPConfig | None:
    """The module's `FSDPConfig`, if `fsdp` sharded it."""
    cfg = getattr(model, FSDP_ATTR, None)
    return cfg if isinstance(cfg, FSDPConfig) else None


def _buckets(model: torch.nn.Module, shards: Mapping[str, Shard],
             strategy: FSDPBucketingStrategy) -> tuple[tuple[str, ...], ...]:
    """The sharded parameters' names grouped into all-gathers, in module order; one dtype
    and device per group."""
    names = list(shards)
    if strategy is FSDPBucketingStrategy.NONE:
        return tuple((n,) for n in names)
    owner = {n: n.rpartition(".")[0] for n in names}  # the module holding each parameter
    if strategy is FSDPBucketingStrategy.BLOCK:
        lists = [(prefix, m) for prefix, m in model.named_modules()
                 if isinstance(m, torch.nn.ModuleList)]
        if lists:
            prefix, biggest = max(lists, key=lambda pm: sum(1 for _ in pm[1].parameters()))
            blocks = [f"{prefix}.{i}" if prefix else str(i) for i in range(len(biggest))]
            for n in names:
                block = next((b for b in blocks if n.startswith(b + ".")), None)
                if block is not None:
                    owner[n] = block
    params = dict(model.named_parameters())
    out: list[list[str]] = []
    key: tuple[Any, ...] | None = None
    for n in names:
        k = (owner[n], params[n].dtype, params[n].device)
        if k != key:
            out.append([])
            key = k
        out[-1].append(n)
    return tuple(tuple(b) for b in out)


def unshard_in_trace(cfg: FSDPConfig) -> Callable[[Any, dict[str, Any]], dict[str, Any]]:
    """What tracing reads the sharded parameters as: ``unshard(ctx, inputs)`` emits, per
    bucket, the all-gather of its shards (one shard, or their rows flattened and joined),
    its wait, and the ops that lay the gathered buffer out as each full parameter (the
    bucket's split and reshapes, the padding's slice); it returns the full parameters'
    proxies by name."""
    from thunder_ir.dialects import dist, ltorch, prims
    from thunder_ir.frontend.proxy import TensorProxy

    def full_parameter(ctx: Any, name: str, gathered: Any) -> Any:
        shard = cfg.shards[name]
        if shard.rows * cfg.world != shard.shape[0]:
            rank = len(shard.shape)
            gathered = ctx.emit(prims.SliceOp, gathered, start_indices=(0,) * rank,
                                end_indices=shard.shape, strides=(1,) * rank)
        out = TensorProxy(gathered)
        out._is_param = True  # type: ignore[attr-defined]
        return out

    def gather(ctx: Any, value: Any) -> Any:
        pending = ctx.emit(dist.AllGatherOp, value, group=cfg.group, world=cfg.world)
        return ctx.emit(dist.WaitOp, pending)

    def unshard(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for bucket in cfg.buckets:
            names = [n for n in bucket if n in inputs]
            if len(names) == 1:
                n = names[0]
                out[n] = full_parameter(ctx, n, gather(ctx, inputs[n]._value))
                continue
            if not names:
                continue
            sizes = [inputs[n]._value.type.numel() for n in names]
            flat = [ctx.emit(ltorch.OPS["reshape"], inputs[n]._value, shape=(size,))
                    for n, size in zip(names, sizes)]
            joined = ctx.emit(ltorch.OPS["cat"], flat, dim=0)
            grid = ctx.emit(ltorch.OPS["reshape"], gather(ctx, joined),
                            shape=(cfg.world, sum(sizes)))
            pieces = ctx.emit(ltorch.OPS["split"], grid, split_size_or_sections=tuple(sizes),
                              dim=1)
            for n, piece in zip(names, pieces):
                shard = cfg.shards[n]
                rows = ctx.emit(ltorch.OPS["reshape"], piece,
                                shape=(shard.rows * cfg.world, *shard.shape[1:]))
                out[n] = full_parameter(ctx, n, rows)
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
    gathered: dict[str, torch.Tensor] = {}
    for alias, name in cfg.aliases.items():  # tied weights: gathered once
        key = prefix + alias
        if key in state_dict:
            if name not in gathered:
                gathered[name] = _gather_full(cfg, name, state_dict[key])
            state_dict[key] = gathered[name]
    return state_dict


def _shard_on_load_hook(module: torch.nn.Module, state_dict: dict[str, Any], prefix: str,
                        *args: Any) -> None:
    cfg = config_of(module)
    if cfg is None:
        return
    for alias, name in cfg.aliases.items():
        info = cfg.shards[name]
        key = prefix + alias
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


__all__ = ["FSDPBucketingStrategy", "FSDPConfig", "FSDPType", "Shard", "config_of", "fsdp",
           "sharded_state_dict", "unshard_in_trace"]
