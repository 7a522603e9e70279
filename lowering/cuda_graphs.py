"""The CUDA-graph policy of tier-up (issue 53): a launch-bound fused program on CUDA
replays a captured ``torch.cuda.CUDAGraph`` when that measures faster.

A small program on the GPU spends its time launching kernels (microseconds of Python and
driver work per kernel, the kernels themselves shorter). Once tier-up has swapped in a
CUDA program's fused version (`thunder_ir.lowering.tier_up`), `GraphTrial` wraps its
function:

1. its first call takes the call's inputs as the graph's (`StaticInputs`): the tensors
   that are the same objects on every call (parameters, buffers) by their address, the
   others copied into buffers of their own; runs the program three times on a side
   stream (torch's warm-up before a capture) and captures one run with
   ``torch.cuda.graph`` (Inductor's kernels and the library calls between them);
2. the next `MEASURE_CALLS` calls alternate the replay and the plain function, each
   timed between two ``torch.cuda.synchronize()``;
3. `choose` keeps the replay only where its median is below `MARGIN` times the plain
   function's, and the program's function becomes the one kept, for good.

Every guard is still checked: the cache's prologue runs before the program's function as
before, and a replay first checks that every input has the captured address (a
parameter the user replaced) or the buffer's sizes, strides and dtype (else that call
runs the plain function). A replay's outputs are copies of the graph's (the next replay
overwrites its own), so a caller may keep them, as eager's. `blockers` names what keeps a
program from being captured (checked before any capture): a training program (its
backward runs under autograd, outside the graph), writes into its inputs, a speculative
check, symbolic sizes, random draws, an opaque call, a collective, tensors on the CPU.
``THUNDER_IR_CUDA_GRAPHS=0`` turns the policy off.

The policy's bookkeeping (`blockers`, `StaticInputs`, `choose`) is tested on the CPU
(tests/test_cuda_graph_policy.py); capturing and replaying needs a GPU
(tests/test_cuda.py).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map

from thunder_ir.dialects.torch import CallOp
from thunder_ir.dialects.traits import OpKind, Random
from thunder_ir.lowering.tiered import LOG

GRAPHS_ENV = "THUNDER_IR_CUDA_GRAPHS"
"""``0``: no fused program is captured."""
MEASURE_CALLS = 6
"""Calls of each (replay, plain function) timed before the choice."""
MARGIN = 0.9
"""The replay is kept where its median call takes under this fraction of the plain one's
(a replay copies its inputs in and its outputs out: it must win clearly)."""
WARMUP_RUNS = 3
"""Runs on a side stream before the capture (torch's advice: lazy initializations and
autotuning happen outside the graph)."""


def enabled() -> bool:
    """Whether the policy is on (``THUNDER_IR_CUDA_GRAPHS`` is not ``0``)."""
    return os.environ.get(GRAPHS_ENV) != "0"


def blockers(entry: Any, args: Sequence[Any]) -> list[str]:
    """Why the program of ``entry`` (`thunder_ir.runtime.cache.Entry`, its fused
    version) cannot be captured, for a call of ``args`` (its function's arguments): empty
    where it can."""
    why: list[str] = []
    if entry.backward_traces:
        why.append("a training program (its backward runs under autograd)")
    if entry.writebacks or entry.epilogue:
        why.append("it writes into its inputs or Python state")
    if entry.speculative:
        why.append("a speculative program (its checks read values)")
    if entry.shape_guard is not None:
        why.append("symbolic sizes")
    tensors = [a for a in tree_leaves(list(args)) if isinstance(a, torch.Tensor)]
    devices = {t.device for t in tensors}
    if not devices or any(d.type != "cuda" for d in devices) or len(devices) > 1:
        why.append("its tensors are not all on one CUDA device")
    for op in entry.traces[0].ir.walk():  # (as traced: later calls are lowered ops)
        kind = op.get_trait(OpKind)
        if isinstance(kind, Random):
            why.append(f"it draws random numbers ({op.name})")
        elif isinstance(op, CallOp) and "pure" not in op.properties:
            why.append(f"an opaque call ({op.callee.data})")
        elif op.name.startswith("dist."):
            why.append(f"a collective ({op.name})")
    return list(dict.fromkeys(why))


def choose(plain_s: Sequence[float], replay_s: Sequence[float], margin: float = MARGIN
           ) -> bool:
    """Whether the replay wins: its median call under ``margin`` times the plain one's."""
    if not plain_s or not replay_s:
        return False
    return statistics.median(replay_s) < margin * statistics.median(plain_s)


class StaticInputs:
    """The inputs of a captured graph: a call's tensors that keep their object from call
    to call (``same``: parameters and buffers) by address, the others in buffers of
    their own, with the first call's sizes, strides, dtype and device."""

    def __init__(self, args: Sequence[Any], same: Sequence[bool]) -> None:
        self.values: list[Any] = []
        self.addresses: list[int | None] = []
        for a, keep in zip(args, same, strict=True):
            if not isinstance(a, torch.Tensor):
                self.values.append(a)
                self.addresses.append(None)
            elif keep:
                self.values.append(a)
                self.addresses.append(a.data_ptr())
            else:
                self.values.append(torch.empty_strided(a.shape, a.stride(), dtype=a.dtype,
                                                       device=a.device))
                self.addresses.append(None)
        self.loads = 0

    def load(self, args: Sequence[Any]) -> bool:
        """Copies a call's inputs into the buffers: False (nothing copied) where one
        differs from what was captured (another address for a kept tensor; other sizes,
        strides or dtype for a buffered one; another number)."""
        if len(args) != len(self.values):
            return False
        for a, v, addr in zip(args, self.values, self.addresses, strict=True):
            if not isinstance(v, torch.Tensor):
                if not (a is v or (type(a) is type(v) and a == v)):
                    return False
            elif not isinstance(a, torch.Tensor):
                return False
            elif addr is not None:
                if a.data_ptr() != addr:
                    return False
            elif a.shape != v.shape or a.stride() != v.stride() or a.dtype != v.dtype \
                    or a.device != v.device:
                return False
        for a, v, addr in zip(args, self.values, self.addresses, strict=True):
            if isinstance(v, torch.Tensor) and addr is None:
                v.copy_(a)
        self.loads += 1
        return True


def outputs_alias_inputs(out: Any, inputs: Sequence[Any]) -> bool:
    """Whether a tensor of ``out`` shares memory with a tensor of ``inputs`` (a replay
    would then hand back the graph's buffer, not the caller's tensor)."""
    storages = {a.untyped_storage().data_ptr() for a in inputs if isinstance(a, torch.Tensor)}
    found = [False]

    def visit(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.untyped_storage().data_ptr() in storages:
            found[0] = True
        return x

    tree_map(visit, out)
    return found[0]


class GraphTrial:
    """A fused CUDA program's function while the policy captures and measures it (see the
    module doc). ``install(fn)`` makes ``fn`` the program's function for good."""

    def __init__(self, fn: Callable[..., Any], name: str,
                 install: Callable[[Callable[..., Any]], None]) -> None:
        self.fn, self.name, self.install = fn, name, install
        self.graph: Any = None
        self.inputs: StaticInputs | None = None
        self.static_out: Any = None
        self.first: list[Any] | None = None
        self.plain_s: list[float] = []
        self.replay_s: list[float] = []
        self.kept: str | None = None

    def __call__(self, *args: Any) -> Any:
        if self.first is None:  # a call first: which tensors keep their object
            self.first = list(args)
            return self.fn(*args)
        if self.graph is None:
            return self._capture(args)
        replay = len(self.replay_s) <= len(self.plain_s)
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = self._replay(args) if replay else self.fn(*args)
        torch.cuda.synchronize()
        (self.replay_s if replay else self.plain_s).append(time.perf_counter() - start)
        if len(self.plain_s) >= MEASURE_CALLS and len(self.replay_s) >= MEASURE_CALLS:
            self._decide()
        return out

    def _capture(self, args: tuple[Any, ...]) -> Any:
        assert self.first is not None
        same = [a is b for a, b in zip(args, self.first, strict=False)] \
            if len(args) == len(self.first) else [False] * len(args)
        self.first = []  # (the first call's tensors are not kept alive)
        inputs = StaticInputs(args, same)
        if not inputs.load(args):
            return self._give_up("its inputs changed between the first calls", args)
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(WARMUP_RUNS):
                    self.fn(*inputs.values)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = self.fn(*inputs.values)
        except Exception as e:  # an op that cannot be captured: the plain function stays
            return self._give_up(f"capture failed ({type(e).__name__}: {e})", args)
        if outputs_alias_inputs(static_out, inputs.values):
            return self._give_up("an output is (a view of) an input", args)
        self.graph, self.inputs, self.static_out = graph, inputs, static_out
        LOG.info("tiered: %s captured as a CUDA graph; measuring it", self.name)
        return self._replay(args)

    def _replay(self, args: tuple[Any, ...]) -> Any:
        assert self.inputs is not None
        if not self.inputs.load(args):
            return self.fn(*args)
        self.graph.replay()
        return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t,
                        self.static_out)

    def _decide(self) -> None:
        plain = statistics.median(self.plain_s) * 1e3
        graph = statistics.median(self.replay_s) * 1e3
        if choose(self.plain_s, self.replay_s):
            self.install(self._replay)
            LOG.info("tiered: %s replays its CUDA graph (%.3f ms against %.3f ms)",
                     self.name, graph, plain)
        else:
            self.kept = f"the replay did not pay ({graph:.3f} ms against {plain:.3f} ms)"
            self._release()
            self.install(self.fn)
            LOG.info("tiered: %s keeps its launches: %s", self.name, self.kept)

    def _give_up(self, why: str, args: tuple[Any, ...]) -> Any:
        self.kept = why
        self._release()
        self.install(self.fn)
        LOG.info("tiered: %s is not captured: %s", self.name, why)
        return self.fn(*args)

    def _release(self) -> None:
        self.graph = self.inputs = self.static_out = None


def maybe_graphed(entry: Any, fn: Callable[..., Any], name: str,
                  install: Callable[[Callable[..., Any]], None], args: Sequence[Any]
                  ) -> Callable[..., Any]:
    """``fn`` (the fused program's function), or a `GraphTrial` of it where the policy is
    on, CUDA is here, and `blockers` finds nothing for the call of ``args``."""
    if not enabled() or not torch.cuda.is_available():
        return fn
    why = blockers(entry, args)
    if why:
        LOG.info("tiered: %s is not captured as a CUDA graph: %s", name, "; ".join(why))
        return fn
    return GraphTrial(fn, name, install)


__all__ = ["GRAPHS_ENV", "MARGIN", "MEASURE_CALLS", "WARMUP_RUNS", "GraphTrial",
           "StaticInputs", "blockers", "choose", "enabled", "maybe_graphed",
           "outputs_alias_inputs"]
