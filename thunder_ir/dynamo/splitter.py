"""Which nodes of a Dynamo FX graph thunder_ir runs, and the split around the others.

`find_unsupported` runs the graph once under thunder_ir's tracing (the frontend's
`thunder_ir.frontend.subtrace`, as user code), node by node, with tensor proxies built from
the graph's fake-tensor metadata (``node.meta["example_value"]``), so it asks exactly what
``thunder_ir.jit`` would do with each node. A node is unsupported
when its call becomes a ``torch.call`` (an op that only torch runs: the automatic
fallback) or when tracing it raises. `split` cuts the graph with ``torch.fx``'s
``split_module`` into ``thunder_0``, ``inductor_1``, ``thunder_2``, ...: a new partition
starts wherever support changes.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
import re
from typing import Any

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.split_module import split_module

_GRAD = torch._C._set_grad_enabled
_AUTOCAST = (torch.amp._enter_autocast, torch.amp._exit_autocast)


class SplitReasonType(enum.Enum):
    """Why a node of the graph does not run on thunder_ir."""

    UNSUPPORTED_NODE = 1
    """A node thunder_ir does not take (a node of a graph that enters an autocast region,
    another of whose nodes does not run on thunder_ir)."""
    MISSING_OP_SUPPORT = 2
    """The op has no native thunder_ir op: only torch runs it (the automatic fallback)."""
    EXCEPTION_PROXY_THUNDER_OP = 3
    """Tracing the node with thunder_ir's proxies raised."""


@dataclasses.dataclass(frozen=True)
class SplitReason:
    """A node sent to Inductor, and why.

    Attributes:
        reason_type: the kind of reason.
        info: which node (its name and target) and what thunder_ir lacks.
        exception: the error tracing it raised, for `EXCEPTION_PROXY_THUNDER_OP`.
    """

    reason_type: SplitReasonType
    info: str
    exception: BaseException | None = None


def _hint(x: Any) -> Any:
    """A concrete int for a symbolic size (Dynamo's dynamic shapes), else ``x``."""
    if isinstance(x, torch.SymInt):
        from torch.fx.experimental.symbolic_shapes import optimization_hint

        return optimization_hint(x)
    if isinstance(x, torch.SymFloat | torch.SymBool):
        return x.node.hint
    return x


def _probe_value(v: Any) -> Any:
    """What the probe passes for a graph value: Dynamo's fake tensor itself (it has the
    metadata and the real device), a meta tensor where sizes are symbolic (made concrete
    with their hints), a number for a symbolic number."""
    if isinstance(v, torch.Tensor):
        if not any(isinstance(s, torch.SymInt) for s in (*v.shape, *v.stride())):
            return v
        shape = [_hint(s) for s in v.shape]
        stride = [_hint(s) for s in v.stride()]
        t = torch.empty_strided(shape, stride, dtype=v.dtype, device="meta")
        return t.requires_grad_(v.requires_grad) if v.requires_grad else t
    if isinstance(v, list | tuple) and not hasattr(v, "_fields"):
        return type(v)(_probe_value(x) for x in v)
    return _hint(v)


_ORIGIN = "thunder_ir_origin"
"""Node meta key: the node of Dynamo's graph that a partition's node was copied from."""


def _example(node: Node) -> Any:
    return node.meta.get("example_value", node.meta.get("val"))


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _describe(node: Node) -> str:
    """The node, and the user's line that made it (the innermost frame Dynamo recorded)."""
    where = _FRAME.findall(node.meta.get("stack_trace") or "")
    at = f" (at {where[-1][0]}:{where[-1][1]})" if where else ""
    return f"node with name: {node.name} and target: {node.target}{at}"


def find_unsupported(gm: GraphModule, examples: dict[str, Any] | None = None
                     ) -> dict[Node, SplitReason]:
    """The nodes of ``gm`` that thunder_ir does not run natively, each with its reason.

    ``examples`` gives the placeholders' example values by name, for a graph (a partition
    made by ``split_module``) whose placeholders carry none."""
    from thunder_ir.frontend import subtrace
    from thunder_ir.frontend.context import current

    reasons: dict[Node, SplitReason] = {}
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    inputs = [_probe_value(examples[n.name] if examples is not None and n.name in examples
                           else _example(n)) for n in placeholders]

    def stand_in(node: Node) -> Any:
        """A fresh program input with the node's metadata: later nodes still get probed."""
        ctx = current()

        def make(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                return ctx.tensor_input(v, node.name, ("probe", None))
            if isinstance(v, list | tuple) and not hasattr(v, "_fields"):
                return type(v)(make(x) for x in v)
            return v

        with torch._C.DisableTorchFunction():  # reading the example's metadata: no op
            return make(_probe_value(_example(node)))

    def run(*args: Any) -> None:
        ctx = current()
        env: dict[Node, Any] = dict(zip(placeholders, args))
        for node in graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            if node.op == "get_attr":
                env[node] = _fetch_attr(gm, str(node.target))
                continue
            a, kw = torch.fx.node.map_arg((node.args, node.kwargs), env.__getitem__)  # type: ignore[misc]
            start = ctx.build.block.last_op
            try:
                if node.op == "call_function":
                    out = node.target(*a, **kw)  # type: ignore[operator]
                elif node.op == "call_method":
                    out = getattr(a[0], str(node.target))(*a[1:], **kw)
                else:  # call_module
                    out = gm.get_submodule(str(node.target))(*a, **kw)
            except Exception as e:
                reasons[node] = SplitReason(
                    SplitReasonType.EXCEPTION_PROXY_THUNDER_OP,
                    f"{_describe(node)} raised while thunder_ir traced it: "
                    f"{type(e).__name__}: {e}", e)
                env[node] = stand_in(node)
                continue
            op = start.next_op if start is not None else ctx.build.block.first_op
            while op is not None:
                if op.name == "torch.call":
                    callee = op.properties["callee"].data  # type: ignore[attr-defined]
                    reasons[node] = SplitReason(
                        SplitReasonType.MISSING_OP_SUPPORT,
                        f"{_describe(node)} only has an automatic torch fallback in "
                        f"thunder_ir (it runs as the opaque call {callee}).")
                    break
                op = op.next_op
            env[node] = out

    subtrace(run, inputs, names=[n.name for n in placeholders])
    if reasons and any(n.op == "call_function" and n.target in _AUTOCAST for n in graph.nodes):
        # The graph enters an autocast region (Dynamo's enter/exit nodes), which must stay
        # in one piece: traced whole by thunder_ir when every node is supported (the
        # region's __enter__ runs while traced, as in any function), else run whole by
        # Inductor.
        first = next(iter(reasons.values()))
        for n in graph.nodes:
            if n.op not in ("placeholder", "get_attr", "output") and n not in reasons:
                reasons[n] = SplitReason(
                    SplitReasonType.UNSUPPORTED_NODE,
                    f"{_describe(n)}: the graph enters torch.autocast, whose region stays "
                    f"whole, and another of its nodes does not run on thunder_ir "
                    f"({first.info})")
    return reasons


def _fetch_attr(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def assign_partitions(gm: GraphModule, unsupported: dict[Node, SplitReason]
                      ) -> tuple[dict[Node, int], dict[int, bool]]:
    """A partition id per node (in graph order, a new one wherever support changes) and
    whether each partition runs on thunder_ir. ``getitem`` and grad-mode nodes follow their
    neighbours, so that a tuple or a no-grad block is not cut from what uses it."""
    part: dict[Node, int] = {}
    on_thunder: dict[int, bool] = {}
    pid, current_kind = -1, None
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        if node.op == "call_function" and node.target is operator.getitem and \
                isinstance(node.args[0], Node) and node.args[0] in part:
            kind = on_thunder[part[node.args[0]]]
        elif node.op == "call_function" and node.target is _GRAD and current_kind is not None:
            kind = current_kind
        else:
            kind = node not in unsupported
        if kind != current_kind:
            pid += 1
            current_kind = kind
            on_thunder[pid] = kind
        part[node] = pid
    return part, on_thunder


def split(gm: GraphModule, unsupported: dict[Node, SplitReason]
          ) -> tuple[GraphModule, dict[str, bool]]:
    """``gm`` cut into submodules ``thunder_i`` / ``inductor_i``; returns the split module
    and, per submodule name, whether thunder_ir runs it."""
    part, on_thunder = assign_partitions(gm, unsupported)
    if not part:  # a graph of no ops (it returns its inputs)
        return gm, {}
    split_gm = split_module(gm, gm, lambda n: part[n], keep_original_order=True)
    names: dict[str, bool] = {}
    renames: dict[str, str] = {}
    for pid, thunder in on_thunder.items():
        new = f"{'thunder' if thunder else 'inductor'}_{pid}"
        renames[f"submod_{pid}"] = new
        names[new] = thunder
    for node in split_gm.graph.nodes:
        if node.op == "call_module" and node.target in renames:
            new = renames[node.target]
            sub = getattr(split_gm, node.target)
            delattr(split_gm, node.target)
            split_gm.add_submodule(new, sub)
            node.target = new
            node._rename(new)
    split_gm.recompile()
    return split_gm, names


def partition(gm: GraphModule, max_rounds: int = 8
              ) -> tuple[GraphModule, dict[str, bool], dict[Node, SplitReason]]:
    """Splits ``gm`` until every thunder partition traces on its own.

    A node can trace inside the whole graph and fail as the input of a partition (an
    in-place write to a tensor that another partition made is a write to an argument), so
    each thunder partition is probed again with its own inputs; what fails there joins the
    unsupported nodes, and the graph is split again."""
    reasons = find_unsupported(gm)
    examples = {n.name: _example(n) for n in gm.graph.nodes}
    for n in gm.graph.nodes:  # split_module copies meta: a partition's node names its origin
        n.meta[_ORIGIN] = n
    for _ in range(max_rounds):
        split_gm, kinds = split(gm, reasons)
        if not reasons:  # one partition, whose inputs are the graph's: already probed
            return split_gm, kinds, reasons
        new: dict[Node, SplitReason] = {}
        for name, on_thunder in kinds.items():
            if on_thunder:
                sub = getattr(split_gm, name)
                for node, r in find_unsupported(sub, examples).items():
                    origin = node.meta.get(_ORIGIN)
                    if origin is not None and origin not in reasons:
                        new[origin] = r
        if not new:
            return split_gm, kinds, reasons
        reasons.update(new)
    raise RuntimeError(f"thunder_ir.dynamo: no stable split after {max_rounds} rounds")


__all__ = ["partition", "SplitReason", "SplitReasonType", "assign_partitions", "find_unsupported",
           "split"]
