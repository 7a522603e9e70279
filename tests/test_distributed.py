"""Data parallelism on two gloo processes (``torch.multiprocessing``, 127.0.0.1), against one
process on the whole batch: every step's loss and the parameters after three SGD steps.

Each test spawns two processes that each train on half of every batch; rank 0 saves what
it saw, and the test compares it with an eager run of the same model on the whole batch
in this process.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import thunder_ir
from thunder_ir.distributed import (
    FSDPBucketingStrategy,
    FSDPType,
    ddp,
    fsdp,
    sharded_state_dict,
)

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")

WORLD = 2
STEPS = 3
LR = 0.05


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- models


def _llama(vocab_size: int = 64) -> nn.Module:
    sys.path.insert(0, str(Path(__file__).parent))
    from models import Config, LlamaGPT

    return LlamaGPT(Config(n_layer=2, n_embd=32, n_head=4, n_query_groups=2,
                           intermediate_size=64, vocab_size=vocab_size, block_size=16))


def _gpt2() -> nn.Module:
    sys.path.insert(0, str(Path(__file__).parent))
    from models import GPT2, Config

    return GPT2(Config(n_layer=2, n_embd=32, n_head=4, n_query_groups=4, vocab_size=64,
                       block_size=16, bias=True))


def _checkpointed_llama() -> nn.Module:
    """The Llama with each block under ``torch.utils.checkpoint``."""
    from torch.utils.checkpoint import checkpoint

    model = _llama()

    def forward(idx: torch.Tensor) -> torch.Tensor:
        T = idx.size(1)
        cos, sin = model.cos[:T], model.sin[:T]
        x = model.transformer.wte(idx)
        for block in model.transformer.h:
            x = checkpoint(block, x, cos, sin, None, use_reentrant=False)
        return model.lm_head(model.transformer.ln_f(x))

    model.forward = forward  # type: ignore[method-assign]
    return model


def _llama_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    idx = torch.randint(0, 64, (4, 9), generator=g)
    return idx[:, :-1], idx[:, 1:]


def _llama_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _hf_llama() -> nn.Module:
    import transformers as T

    cfg = T.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
                        max_position_embeddings=32)
    return T.LlamaForCausalLM(cfg)


def _hf_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return model(input_ids=x, labels=x).loss


CASES: dict[str, tuple[Callable[[], nn.Module], Callable[..., torch.Tensor]]] = {
    "llama": (_llama, _llama_loss),
    "hf_llama": (_hf_llama, _hf_loss),
    "checkpointed": (_checkpointed_llama, _llama_loss),
    "llama_odd": (lambda: _llama(vocab_size=67), _llama_loss),
    "gpt2": (_gpt2, lambda model, x, y: model(x, y.contiguous())[1]),  # biases, tied weights
}

JIT_OPTIONS: dict[str, dict[str, Any]] = {
    "inductor": {"executors": ["torch_compile", "torch"]},  # fusion regions beside collectives
    "save_all": {"remat": "save-all"},
    "zero2_inductor": {"executors": ["torch_compile", "torch"]},
}


def _model(case: str) -> nn.Module:
    torch.manual_seed(0)
    return CASES[case][0]()


# --------------------------------------------------------------------------- processes


def _init(rank: int, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=60))


@contextmanager
def _group(rank: int, port: int) -> Iterator[None]:
    """A worker's process group: made, then torn down on both sides together (a barrier:
    one side closing first can abort the other). A worker that finished leaves with
    ``os._exit(0)``, skipping interpreter finalization, where gloo's threads have aborted
    a spawned process after its work was done and checked ("terminate called without an
    active exception", once in CI); a worker that failed raises as before."""
    _init(rank, port)
    try:
        yield
        dist.barrier()
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _wrap(model: nn.Module, mode: str) -> nn.Module:
    if mode.startswith("zero"):
        strategy = FSDPType.ZERO3 if mode.startswith("zero3") else FSDPType.ZERO2
        bucketing = (FSDPBucketingStrategy.BLOCK if "block" in mode else
                     FSDPBucketingStrategy.LAYER if "layer" in mode else
                     FSDPBucketingStrategy.NONE)
        return fsdp(model, sharding_strategy=strategy, bucketing_strategy=bucketing)
    return ddp(model, bucket_size_in_mb=0.01)


def _step(loss: torch.Tensor, opt: torch.optim.Optimizer) -> float:
    """Backward and an SGD step; the loss averaged over the processes (the whole batch's)."""
    loss.backward()
    opt.step()
    opt.zero_grad()
    t = loss.detach().clone()
    dist.all_reduce(t)
    return float(t) / WORLD


def _train_worker(rank: int, port: int, case: str, mode: str, out: str) -> None:
    with _group(rank, port):
        model = _model(case)
        if rank == 1:  # ddp broadcasts rank 0's parameters: rank 1's own do not matter
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1.0)
        loss_fn = CASES[case][1]
        jm = thunder_ir.jit(_wrap(model, mode), **JIT_OPTIONS.get(mode, {}))
        opt = torch.optim.SGD(jm.parameters(), lr=LR)
        losses = []
        for step in range(STEPS):
            x, y = _llama_batch(step)
            xs, ys = x.chunk(WORLD)[rank], y.chunk(WORLD)[rank]
            if mode == "no_sync":  # two micro-batches, the first without communication
                with jm.no_sync():
                    loss_fn(jm, xs[:1], ys[:1]).backward()
                loss = loss_fn(jm, xs[1:], ys[1:])
            elif mode == "zero3_accum":  # two micro-batches, each reduce-scattered
                loss_fn(jm, xs[:1], ys[:1]).backward()
                loss = loss_fn(jm, xs[1:], ys[1:])
            else:
                loss = loss_fn(jm, xs, ys)
            losses.append(_step(loss, opt))
        result: dict[str, Any] = {"losses": losses,
                                  "params": {k: v.detach().clone()
                                             for k, v in jm.state_dict().items()}}
        if mode in ("checkpoint", "zero3_checkpoint"):  # a fresh wrapped model continues alike
            fresh = _wrap(_model(case), mode)
            fresh.load_state_dict(jm.state_dict())
            jf = thunder_ir.jit(fresh)
            x, y = _llama_batch(STEPS)
            a = loss_fn(jm, x.chunk(WORLD)[rank], y.chunk(WORLD)[rank])
            b = loss_fn(jf, x.chunk(WORLD)[rank], y.chunk(WORLD)[rank])
            result["continued"] = (float(a), float(b))
            if mode == "zero3_checkpoint":  # this process's shards load back too
                again = _wrap(_model(case), mode)
                again.load_state_dict(sharded_state_dict(jm))
                c = loss_fn(thunder_ir.jit(again), x.chunk(WORLD)[rank], y.chunk(WORLD)[rank])
                result["continued"] = (float(a), float(b), float(c))
        result["backward"] = str(thunder_ir.last_backward_traces(jm)[-1])
        result["forward"] = str(thunder_ir.last_traces(jm)[-1])
        result["shard_shapes"] = [tuple(p.shape) for p in jm.parameters()]
        if rank == 0:
            torch.save(result, out)


def _single(case: str, mode: str) -> dict[str, Any]:
    """The same training, eagerly, in one process on the whole batch."""
    torch.manual_seed(0)
    model = _model(case)
    loss_fn = CASES[case][1]
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        x, y = _llama_batch(step)
        if mode == "no_sync":  # rank r's micro-batches are rows 2r and 2r + 1
            first = sum(loss_fn(model, x[2 * r:2 * r + 1], y[2 * r:2 * r + 1])
                        for r in range(WORLD)) / WORLD
            loss = sum(loss_fn(model, x[2 * r + 1:2 * r + 2], y[2 * r + 1:2 * r + 2])
                       for r in range(WORLD)) / WORLD
            (first + loss).backward()
        else:
            halves = [loss_fn(model, xs, ys) for xs, ys in zip(x.chunk(WORLD), y.chunk(WORLD))]
            loss = sum(halves) / WORLD
            loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return {"losses": losses, "params": dict(model.state_dict())}


def _spawn(worker: Callable[..., None], *args: Any) -> None:
    mp.spawn(worker, args=(_free_port(), *args), nprocs=WORLD, join=True)


@pytest.mark.parametrize(("case", "mode"), [
    ("llama", "plain"), ("hf_llama", "plain"), ("llama", "no_sync"), ("llama", "checkpoint"),
    ("llama", "inductor"), ("llama", "save_all"), ("checkpointed", "plain")])
def test_ddp_trains_as_one_process_on_the_whole_batch(case: str, mode: str,
                                                      tmp_path: Path) -> None:
    out = tmp_path / "rank0.pt"
    _spawn(_train_worker, case, mode, str(out))
    got = torch.load(out)
    want = _single(case, mode)
    torch.testing.assert_close(got["losses"], want["losses"], rtol=1e-5, atol=1e-6)
    assert got["params"].keys() == want["params"].keys()
    for k, v in want["params"].items():
        torch.testing.assert_close(got["params"][k], v, rtol=1e-5, atol=1e-6, msg=k)
    if mode == "checkpoint":
        a, b = got["continued"]
        assert a == b
    if mode == "inductor":  # Inductor's regions run between the collectives
        assert "inductorFusion" in got["backward"]
    # The collectives are in @backward: all-reduces start before its last computation,
    # the waits come just before the return.
    lines = got["backward"].splitlines()
    starts = [i for i, ln in enumerate(lines) if "dist.all_reduce(" in ln]
    waits = [i for i, ln in enumerate(lines) if "dist.wait(" in ln]
    assert len(starts) > 1 and len(waits) == len(starts)
    computes_after = [i for i, ln in enumerate(lines[starts[0]:], starts[0])
                      if " = torch." in ln or " = ltorch." in ln]
    assert computes_after and starts[0] < computes_after[0] < waits[0]


@pytest.mark.parametrize(("case", "mode"), [
    ("llama", "zero2"), ("llama", "zero3"), ("llama_odd", "zero3_checkpoint"),
    ("hf_llama", "zero3"), ("llama", "zero3_accum"), ("llama", "zero2_inductor"),
    ("llama_odd", "zero3_block"), ("gpt2", "zero2_layer"), ("checkpointed", "zero3")])
def test_fsdp_trains_as_one_process_on_the_whole_batch(case: str, mode: str,
                                                       tmp_path: Path) -> None:
    """Parameters sharded along dim 0 (padded: ``llama_odd``'s vocabulary is odd), the
    forward all-gathers them ahead of use, the backward reduce-scatters their gradients;
    ZERO3 gathers them again in the backward. Losses, full parameters (``state_dict``)
    and a checkpoint's continuation equal one process on the whole batch."""
    out = tmp_path / "rank0.pt"
    _spawn(_train_worker, case, mode, str(out))
    got = torch.load(out)
    want = _single(case, "no_sync" if mode == "zero3_accum" else "plain")
    torch.testing.assert_close(got["losses"], want["losses"], rtol=1e-5, atol=1e-6)
    assert got["params"].keys() == want["params"].keys()
    for k, v in want["params"].items():  # full and unpadded, under the original names
        torch.testing.assert_close(got["params"][k], v, rtol=1e-5, atol=1e-6, msg=k)
    full = {tuple(v.shape) for v in want["params"].values()}
    assert any(shape not in full for shape in got["shard_shapes"])  # the optimizer's shards
    if mode == "zero3_checkpoint":
        a, b, c = got["continued"]
        assert a == b == c
    if mode == "zero2_inductor":
        assert "inductorFusion" in got["backward"]
    fwd, bwd = got["forward"].splitlines(), got["backward"]
    gathers = [i for i, ln in enumerate(fwd) if "dist.all_gather(" in ln]
    waits = [i for i, ln in enumerate(fwd) if "dist.wait(" in ln]
    assert len(gathers) > 2 and len(waits) == len(gathers)
    if "block" in mode or "layer" in mode:  # fewer, larger all-gathers
        assert len(gathers) < len(got["shard_shapes"])
    assert gathers[1] < waits[0]  # the next layer's gather starts before the first wait
    uses = [i for i, ln in enumerate(fwd) if " = torch." in ln or " = ltorch." in ln]
    assert uses[0] < waits[-1]  # and the last wait comes after computing has begun
    assert "dist.reduce_scatter(" in bwd
    assert ("dist.all_gather(" in bwd) == mode.startswith("zero3")


# --------------------------------------------------------------------------- bad use


def test_ddp_without_a_process_group_says_what_to_do() -> None:
    if dist.is_initialized():
        pytest.skip("a process group is initialized in this process")
    with pytest.raises(RuntimeError, match="init_process_group"):
        ddp(nn.Linear(2, 2))


def _differ_worker(rank: int, port: int, out: str) -> None:
    with _group(rank, port):
        model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
        torch.manual_seed(rank)  # different on each rank
        for p in model.parameters():
            nn.init.normal_(p)
        try:
            ddp(model, broadcast_from=None)
        except ValueError as e:
            Path(f"{out}.{rank}").write_text(str(e))


def test_ddp_names_a_parameter_that_differs_without_broadcast(tmp_path: Path) -> None:
    out = str(tmp_path / "msg")
    _spawn(_differ_worker, out)
    for rank in range(WORLD):
        msg = Path(f"{out}.{rank}").read_text()
        assert "'0.weight' differs across the 2 processes" in msg and "broadcast_from=0" in msg


def _dying_worker(rank: int, port: int, out: str) -> None:
    _init(rank, port)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    jm = thunder_ir.jit(ddp(model))
    jm(torch.randn(2, 4)).sum().backward()
    if rank == 1:
        os._exit(3)  # dies after the first step
    try:
        jm(torch.randn(2, 4)).sum().backward()
        Path(out).write_text("no error")
    except Exception:
        Path(out).write_text(traceback.format_exc())


def test_a_process_that_dies_makes_the_others_fail_not_hang(tmp_path: Path) -> None:
    out = tmp_path / "rank0.txt"
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_dying_worker, args=(r, port, str(out))) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
    assert not alive, "a process hung after its peer died"
    msg = out.read_text()
    assert "thunder_ir.distributed" in msg and "another process" in msg


# --------------------------------------------------------------------------- torch.compile


def _fx_worker(rank: int, port: int, out: str) -> None:
    from thunder_ir.dynamo import ThunderCompiler

    with _group(rank, port):
        model = _model("llama")
        backend = ThunderCompiler()
        ddp_model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
        compiled = torch.compile(ddp_model, backend=backend)
        opt = torch.optim.SGD(ddp_model.parameters(), lr=LR)
        losses = []
        for step in range(STEPS):
            x, y = _llama_batch(step)
            loss = _llama_loss(compiled, x.chunk(WORLD)[rank], y.chunk(WORLD)[rank])
            losses.append(_step(loss, opt))
        if rank == 0:
            torch.save({"losses": losses,
                        "params": {k: v.detach().clone() for k, v in model.state_dict().items()},
                        "graphs": len(backend.subgraph_infos),
                        "thunder": sum(len(s.thunder_compiled_fns)
                                       for s in backend.subgraph_infos)}, out)


def test_torch_ddp_under_the_thunderfx_backend_trains_as_torch_ddp(tmp_path: Path) -> None:
    """torch's own DistributedDataParallel, compiled with ThunderCompiler: Dynamo's DDP
    optimizer splits the graph at bucket boundaries and each piece is a thunder
    partition; training equals one process on the whole batch."""
    out = tmp_path / "rank0.pt"
    _spawn(_fx_worker, str(out))
    got = torch.load(out)
    want = _single("llama", "plain")
    torch.testing.assert_close(got["losses"], want["losses"], rtol=1e-5, atol=1e-6)
    for k, v in want["params"].items():
        torch.testing.assert_close(got["params"][k], v, rtol=1e-5, atol=1e-6, msg=k)
    assert got["thunder"] >= 1


# --------------------------------------------------------------------------- the dialect


def test_collectives_type_check_print_and_parse_back() -> None:
    from thunder_ir.dialects import dist as D
    from thunder_ir.dialects.base import ShapeError
    from thunder_ir.dialects.location import print_mlir
    from thunder_ir.dialects.program import Program, parse
    from thunder_ir.dialects.traits import Collective
    from thunder_ir.dialects.types import tensor_type

    t = tensor_type((6, 4), torch.float32)
    p = Program("backward", [t], ["x"])
    ops = p.emitter.ns(D.OPS)
    gathered = ops.wait(ops.all_gather(p.args[0], group="world", world=2))
    scattered = ops.wait(ops.reduce_scatter(p.args[0], reduce="sum", group="world", world=3))
    reduced = ops.wait(ops.all_reduce(p.args[0], reduce="max", group="world"))
    assert [v.type.sizes for v in (gathered, scattered, reduced)] == [(12, 4), (2, 4), (6, 4)]
    m = p.finish([gathered, scattered, reduced])
    assert print_mlir(parse(print_mlir(m))) == print_mlir(m)
    assert all(op.has_trait(Collective) for op in m.walk() if op.name.startswith("dist."))
    with pytest.raises(ShapeError, match="does not split into 4 equal parts"):
        ops.reduce_scatter(p.args[0], reduce="sum", group="world", world=4)
    with pytest.raises(ShapeError, match="reduce must be one of"):
        ops.all_reduce(p.args[0], reduce="avg", group="world")


def test_collectives_survive_cse_and_dce() -> None:
    from thunder_ir.dialects import dist as D
    from thunder_ir.dialects.program import Program
    from thunder_ir.dialects.types import tensor_type
    from thunder_ir.passes.cse_dce import CSEPass, DCEPass
    from thunder_ir.passes.pipeline import Pipeline

    p = Program("backward", [tensor_type((4,), torch.float32)], ["x"])
    ops = p.emitter.ns(D.OPS)
    a = ops.wait(ops.all_reduce(p.args[0], reduce="sum", group="world"))
    ops.all_reduce(p.args[0], reduce="sum", group="world")  # unused, and equal to the first
    m = p.finish([a])
    Pipeline([CSEPass(), DCEPass()], record=False).run(m)
    assert [op.name for op in m.walk()].count("dist.all_reduce") == 2
