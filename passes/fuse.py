"""``fuse``: group the prims a fusion executor can compile into ``fusion.region`` ops.

Why this pass exists: run eagerly, every prim is its own kernel that reads its inputs from
memory and writes its result back. A fusion executor (Inductor, nvFuser, Triton) compiles a
group of elementwise, shape and reduction ops into one kernel that keeps the intermediates
in registers and cache. This pass decides the groups; the lowering
(`thunder_ir.lowering.regions.compile_kernels`) has each region's executor compile it,
once per distinct region.

Rules (see ``docs/fusion.md``):

* Fusion executors are tried in priority order; an op belongs to the first whose
  ``can_fuse`` accepts it (its *color*). Only side-effect-free ops are ever fused, and an
  op claimed by an executor other than the torch fallback is fused only by an executor
  whose ``fuses_claimed`` consents (it runs the op with the claimer's kernels).
* Regions form along the **dataflow**: producer/consumer chains and siblings (consumers of
  one value) join even when unrelated ops sit between them in program order; the pass then
  reorders the block so that every region sits where its inputs are ready.
* Regions **never create cycles**. Every op gets a level: along an edge ``u -> v`` the level
  does not decrease, and it increases unless ``u`` and ``v`` are fusible by the same
  executor. A region only holds ops of one color, one level and one *segment* (below).
  Any path that leaves a region and comes back would have to pass through an op of
  another color (raising the level) or stay inside that color and level, which makes it
  part of the region: so the graph of regions is acyclic by construction. Levels start as
  early as possible and then sink towards their consumers, so that a chain that only
  waits for its consumer's other inputs joins the consumer's region.
* RNG and side effects keep their order. Non-``Pure`` ops (``prims.uniform``,
  ``ltorch.dropout``, ``torch.call``) are never fused, and they cut the program into
  segments: no op crosses one, since a region's ops all lie in one segment and the final
  order emits every segment's ops before the op that closes it. But a draw a fusion
  executor makes (``fuses_draw``: its kernel calls eager's random op) changes only the
  generator: it cuts no segment, and each such draw reads the one before it (an
  ordering edge), so the draws run in program order. And a call whose one effect is
  raising eager's error on some values (`only_checks`: ``setitem`` with a tensor index,
  a router's ``inv[perm] = arange``) cuts no segment either: pure ops move across it,
  and it reads the last cut and draw before it and the next cut reads it (edges).
* A region needs ``min_size`` ops that compute (views and copies, the ops whose trait is
  ``ViewLike``, such as reshape and broadcast, do not count); smaller groups stay unfused.
  An orphan (a fusible op reading only arguments and constants, whose results only the
  block returns: a batch norm's ``num_batches_tracked + 1``) joins the largest region of
  its color and segment, where its executor ``adopts_orphans`` (Inductor's).
* A region's inputs are the values defined outside and used inside; its outputs are the
  values defined inside and used outside (or returned). ``prims.constant`` numbers used
  inside are cloned into the region instead of being passed in.
* A **returned view stays out** (`returned_views`): a value the caller sees (not a
  residual a forward saves for its backward, nor a gradient: `user_results`) that a
  view op made (``ViewLike`` but a copy, or a ``Movement`` op such as ``getitem`` or
  ``split``), and the view ops that made its operand back to the first op that computes,
  run unfused. Eager returns such a value as a view of its base (``_base``, storage,
  strides, storage offset, a write through it seen in the base); a region's output is a
  tensor the kernel made, at best sharing the memory but no view of the caller's tensor.
  The region's consumers of the view read it as an input.

Cost: building the graph, the levels and the union-find is linear in ops and uses; the
final order is a topological sort with a heap, O(n log n).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import IsTerminator
from xdsl.utils.arg_spec import ArgSpec

from thunder_ir.dialects import prims as PC
from thunder_ir.dialects.autograd import LAYOUT, BackwardLayoutAttr, JointLayoutAttr
from thunder_ir.dialects.base import Emitter, ThunderOp
from thunder_ir.dialects.fusion import RegionOp, YieldOp, claimed_by
from thunder_ir.dialects.ltorch_base import LtorchOp
from thunder_ir.dialects.ltorch_core import JoinOp
from thunder_ir.dialects.prims import ConstantOp
from thunder_ir.dialects.program import program_functions
from thunder_ir.dialects.torch import CHECKING_CALLEES, CallOp
from thunder_ir.dialects.traits import Movement, ViewLike, computes_nothing, side_effect_free
from thunder_ir.passes.context import resolve, spec_with_names

FRESH_MOVES: tuple[type[Operation], ...] = (JoinOp, PC.CatOp, PC.PadOp, PC.FlipOp)
"""``Movement`` ops whose result is never a view of an operand (``cat``, ``stack``,
``pad``, ``flip``: eager copies): `may_view` is false for them."""

FALLBACK_EXECUTOR = "torch"
"""The executor that runs what nobody else does. It comes last in priority, so a fusion
executor may still fuse an ltorch op that only the fallback claimed."""



# --------------------------------------------------------------------------- the pass


@dataclass(frozen=True)
class FusePass(ModulePass):
    """Groups fusible ops into ``fusion.region`` ops, one per future kernel.

    Args:
        executors: fusion executors (objects, or names of registered executors) in
            priority order; others are ignored.
        min_size: a region needs at least this many ops that compute.
    """

    name = "fuse"

    executors: tuple[Any, ...] = ()
    min_size: int = 2

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        executors = tuple(e for e in resolve(ctx, self.executors) if e.is_fusion)
        if not executors:
            return
        fns = program_functions(op)
        for fn in fns:
            fuse_block(fn.body.block, executors, self.min_size, user_results(fn, fns))

    def spec(self, *, include_default: bool = False) -> ArgSpec:
        return spec_with_names(self, include_default=include_default)


# --------------------------------------------------------------------------- grouping


def _color(op: Operation, executors: Sequence[Any]) -> int:
    """The index of the first executor that may fuse ``op``, or -1."""
    if isinstance(op, ConstantOp | RegionOp) or op.regions or not op.results:
        return -1
    claimer = claimed_by(op)
    pure = side_effect_free(op)
    for k, ex in enumerate(executors):
        if claimer not in (None, FALLBACK_EXECUTOR) and not ex.fuses_claimed(op, claimer):
            continue
        if ex.can_fuse(op) if pure else ex.fuses_draw(op):
            return k
    return -1


def _uses_of(op: Operation) -> Iterable[SSAValue]:
    """The values ``op`` reads, counting the ops nested in its regions."""
    if not op.regions:
        return op.operands
    return [v for nested in op.walk() for v in nested.operands]


class _Groups:
    """Union-find over op indices (path halving, union by size)."""

    __slots__ = ("parent", "size")

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self.size = [1] * n

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a == b:
            return
        if self.size[a] < self.size[b]:
            a, b = b, a
        self.parent[b] = a
        self.size[a] += self.size[b]


def only_checks(op: Operation) -> bool:
    """Whether ``op``'s one effect is raising eager's error on some values (a call of
    `thunder_ir.dialects.torch.CHECKING_CALLEES`): it cuts no segment, so pure ops
    (regions) move across it, while ops with effects keep their order with it (edges)."""
    return isinstance(op, CallOp) and op.callee.data in CHECKING_CALLEES


def may_view(op: Operation) -> bool:
    """Whether ``op``'s results may be views of its operand (eager returns a view):
    ``ViewLike`` ops but copies, and ``Movement`` ops (``getitem`` with basic indices,
    ``split``, ``chunk``; the others copy, and staying unfused only costs them a kernel)
    but the joins, pads and flips, whose result eager always makes anew (`FRESH_MOVES`:
    a returned cache's ``cat`` is fused)."""
    view = op.get_trait(ViewLike)
    if view is not None:
        return view.free
    return op.has_trait(Movement) and not isinstance(op, FRESH_MOVES)


def user_results(fn: Operation, fns: Sequence[Operation]) -> int | None:
    """How many of ``fn``'s results lead to the caller's outputs (None: all): none of a
    backward's (gradients), the forward outputs (`n_outputs` of the program's autograd
    layout) of a forward or joint function, whose residuals follow."""
    lay = fn.attributes.get(LAYOUT)
    if isinstance(lay, BackwardLayoutAttr):
        return 0
    if isinstance(lay, JointLayoutAttr):
        return lay.n_outputs
    for other in fns:
        lay = other.attributes.get(LAYOUT)
        if isinstance(lay, BackwardLayoutAttr):
            return lay.n_outputs
    return None


def returned_views(term: Operation | None, n_returned: int | None = None) -> set[Operation]:
    """The view ops that must run unfused for the values ``term`` returns to the caller
    (its first ``n_returned`` operands; None: all) to be eager's views: the op that made
    each returned value where it `may_view`, then the one that made its first operand, and
    so on up to the first op that computes (or an argument)."""
    keep: set[Operation] = set()
    if term is None:
        return keep
    returned = term.operands if n_returned is None else term.operands[:n_returned]
    for v in returned:
        op = v.owner
        while isinstance(op, Operation) and op not in keep and may_view(op) and op.operands:
            keep.add(op)
            op = op.operands[0].owner
    return keep


def plan_groups(
    ops: Sequence[Operation], executors: Sequence[Any], min_size: int = 2,
    keep_out: set[Operation] | frozenset[Operation] = frozenset(),
) -> tuple[list[list[int]], list[int], list[list[int]]]:
    """Decides the regions of a straight-line list of ops (see the module doc).

    Args:
        ops: the ops of a block in program order, without its terminator.
        executors: fusion executors in priority order.
        min_size: a region needs this many ops that compute.
        keep_out: ops that stay unfused whatever their executors say (`returned_views`).

    Returns:
        ``(groups, colors, preds)``: each group is a list of op indices in program order
        (the ops of one future region); ``colors[i]`` is the executor index of op ``i``
        (-1: not fusible); ``preds[i]`` lists the ops op ``i`` reads from.
    """
    n = len(ops)
    index: dict[SSAValue, int] = {}
    for i, op in enumerate(ops):
        for r in op.results:
            index[r] = i
    is_const = [isinstance(op, ConstantOp) for op in ops]
    colors = [-1 if op in keep_out else _color(op, executors) for op in ops]
    preds: list[list[int]] = []
    seg = [0] * n
    barriers = 0
    last_draw = -1
    last_cut = -1
    checks: list[int] = []
    for i, op in enumerate(ops):
        ps: list[int] = []
        for v in _uses_of(op):
            j = index.get(v)
            if j is not None and j != i and j not in ps:
                ps.append(j)
        seg[i] = barriers
        if not is_const[i] and not side_effect_free(op):
            if colors[i] < 0 and only_checks(op):  # no cut: after the last effect
                ps.extend(j for j in (last_cut, last_draw) if j >= 0 and j not in ps)
                checks.append(i)
                last_draw = i  # (a fused draw after it waits for it, as for a draw)
            elif colors[i] < 0:  # a cut, after the checks before it
                ps.extend(j for j in checks if j not in ps)
                checks = []
                last_cut = i
                barriers += 1
            else:  # a draw a region makes: after the one before it, as an operand would
                if last_draw >= 0 and last_draw not in ps:
                    ps.append(last_draw)
                last_draw = i
        preds.append(ps)
    if all(c < 0 for c in colors):
        return [], colors, preds

    # Levels: as early as possible, then sunk towards the consumers.
    level = [0] * n
    succs: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        ci = colors[i]
        best = 0
        for p in preds[i]:
            if is_const[p]:
                continue
            succs[p].append(i)
            lv = level[p] if ci >= 0 and colors[p] == ci else level[p] + 1
            if lv > best:
                best = lv
        level[i] = best
    for i in range(n - 1, -1, -1):
        ss = succs[i]
        if not ss:
            continue
        ci = colors[i]
        level[i] = min(level[s] if ci >= 0 and colors[s] == ci else level[s] - 1 for s in ss)

    # Components: producer/consumer edges and siblings of one color, level and segment.
    groups = _Groups(n)
    first_reader: dict[tuple[SSAValue, int, int, int], int] = {}
    for i, op in enumerate(ops):
        ci = colors[i]
        if ci < 0:
            continue
        li, si = level[i], seg[i]
        for p in preds[i]:
            if colors[p] == ci and level[p] == li and seg[p] == si:
                groups.union(i, p)
        for v in op.operands:
            j = index.get(v)
            if j is not None and is_const[j]:
                continue
            key = (v, ci, li, si)
            other = first_reader.setdefault(key, i)
            if other != i:
                groups.union(i, other)

    members: dict[int, list[int]] = {}
    for i in range(n):
        if colors[i] >= 0:
            members.setdefault(groups.find(i), []).append(i)
    out = [
        m
        for m in members.values()
        if sum(1 for i in m if not computes_nothing(ops[i])) >= min_size
    ]
    _adopt_orphans(out, [getattr(e, "adopts_orphans", False) for e in executors], colors,
                   seg, preds, succs, is_const)
    out.sort(key=lambda m: m[0])
    return out, colors, preds


def _adopt_orphans(groups: list[list[int]], adopts: Sequence[bool], colors: Sequence[int],
                   seg: Sequence[int], preds: Sequence[Sequence[int]],
                   succs: Sequence[Sequence[int]], is_const: Sequence[bool]) -> None:
    """Puts each *orphan* into the largest group of its color and segment (in place),
    for the executors that take them (``adopts``, by color: `Executor.adopts_orphans`):
    a fusible op left out of every group that reads only arguments and constants and
    whose results only the block returns (each batch norm's ``num_batches_tracked + 1``,
    a kernel call of its own otherwise). No op of the block reaches it or is reached
    from it, so the group stays acyclic; and it stays within its segment."""
    if not groups:
        return
    host: dict[tuple[int, int], list[int]] = {}
    for m in groups:
        key = (colors[m[0]], seg[m[0]])
        if key not in host or len(host[key]) < len(m):
            host[key] = m
    grouped = {i for m in groups for i in m}
    for i, c in enumerate(colors):
        if c < 0 or not adopts[c] or i in grouped or succs[i] \
                or any(not is_const[p] for p in preds[i]):
            continue
        into = host.get((c, seg[i]))
        if into is not None:
            into.append(i)
            into.sort()


# --------------------------------------------------------------------------- rewriting


def _schedule(
    n: int,
    groups: Sequence[Sequence[int]],
    preds: Sequence[Sequence[int]],
    ops: Sequence[Operation],
) -> list[int | list[int]]:
    """A topological order of the ops and groups: each node as early as its inputs allow,
    ties broken by original position (an unfused program keeps its order)."""
    node_of = list(range(n))  # node ids: op index for single ops, n + k for group k
    for k, g in enumerate(groups):
        for i in g:
            node_of[i] = n + k
    key: dict[int, int] = {}
    for i in range(n):
        nd = node_of[i]
        if nd not in key:
            key[nd] = i  # members are visited in program order: the first is the minimum
    out_edges: dict[int, list[int]] = {}
    indeg: dict[int, int] = dict.fromkeys(key, 0)
    seen: set[tuple[int, int]] = set()
    for i in range(n):
        b = node_of[i]
        for p in preds[i]:
            a = node_of[p]
            if a == b or (b >= n and isinstance(ops[p], ConstantOp)):
                continue  # inside one group; or a constant a region clones
            if (a, b) in seen:
                continue
            seen.add((a, b))
            out_edges.setdefault(a, []).append(b)
            indeg[b] += 1
    heap = [(k, nd) for nd, k in key.items() if indeg[nd] == 0]
    heapq.heapify(heap)
    order: list[int | list[int]] = []
    while heap:
        _, nd = heapq.heappop(heap)
        order.append(list(groups[nd - n]) if nd >= n else nd)
        for b in out_edges.get(nd, ()):
            indeg[b] -= 1
            if indeg[b] == 0:
                heapq.heappush(heap, (key[b], b))
    if len(order) != len(key):
        raise RuntimeError("fuse: the regions form a cycle (internal error)")
    return order


def _next_numbers(block: Block) -> dict[str, int]:
    """Per kernel-name prefix, the first number not yet used by a region in ``block``."""
    nums: dict[str, int] = {}
    for op in block.ops:
        if isinstance(op, RegionOp):
            m = re.fullmatch(r"(.*?)(\d+)", op.kernel.data)
            if m:
                nums[m[1]] = max(nums.get(m[1], 0), int(m[2]) + 1)
    return nums


def _build_region(members: list[Operation], executor: Any, kernel: str) -> RegionOp:
    """Moves ``members`` (detached, in program order) into a new ``fusion.region``."""
    inside = set(members)
    inputs: list[SSAValue] = []
    consts: list[ConstantOp] = []
    seen: set[SSAValue] = set()
    for op in members:
        for v in op.operands:
            if v in seen or v.owner in inside:
                continue
            seen.add(v)
            if isinstance(v.owner, ConstantOp):
                consts.append(v.owner)
            else:
                inputs.append(v)
    outputs = [
        r for op in members for r in op.results if any(u.operation not in inside for u in r.uses)
    ]
    body = Block(arg_types=[v.type for v in inputs])
    mapping: dict[SSAValue, SSAValue] = dict(zip(inputs, body.args, strict=True))
    for c in consts:
        clone = c.clone()
        body.add_op(clone)
        mapping[c.results[0]] = clone.results[0]
    for op in members:
        body.add_op(op)
        if any(v in mapping for v in op.operands):
            op.operands = [mapping.get(v, v) for v in op.operands]
    body.add_op(YieldOp.create(operands=outputs))
    region = RegionOp.create(
        operands=inputs,
        result_types=[v.type for v in outputs],
        properties={"executor": StringAttr(executor.name), "kernel": StringAttr(kernel)},
        regions=[Region(body)],
    )
    for v, r in zip(outputs, region.results, strict=True):
        v.replace_uses_with_if(r, lambda use: use.operation.parent is not body)
    return region


def _has_outputs(members: Sequence[Operation]) -> bool:
    inside = set(members)
    return any(u.operation not in inside for op in members for r in op.results for u in r.uses)


def _copy_kept_views(block: Block, keep: set[Operation], term: Operation | None,
                     executors: Sequence[Any]) -> None:
    """Gives the fusible ops that read a returned view's chain (`returned_views`) a copy
    of it, placed after the original (in place; views compute nothing), so they may share
    a region with the op that made the chain's base instead of being cut there: Jamba's
    convolution and SSM states, returned as views, cut its Mamba layers in three. The
    originals stay out and make the returned views."""
    copies: dict[Operation, Operation] = {}

    def copy_of(v: SSAValue) -> SSAValue:
        op = v.owner
        if not isinstance(op, Operation) or op not in keep:
            return v
        new = copies.get(op)
        if new is None:
            mapping = {o: copy_of(o) for o in op.operands}
            new = copies[op] = op.clone(value_mapper=mapping)
            block.insert_op_after(new, op)
        return new.results[op.results.index(v)]  # type: ignore[arg-type]

    for op in list(block.ops):
        if op is term or op in keep or not any(
                isinstance(v.owner, Operation) and v.owner in keep for v in op.operands):
            continue
        if _color(op, executors) >= 0:
            op.operands = [copy_of(v) for v in op.operands]


def fuse_block(block: Block, executors: Sequence[Any], min_size: int = 2,
               n_returned: int | None = None) -> list[RegionOp]:
    """Forms the fusion regions of a straight-line block in place (see the module doc).
    ``n_returned``: how many of the block's results the caller sees (`user_results`;
    None: all), whose views stay unfused (`returned_views`).

    Returns:
        The new ``fusion.region`` ops, in program order.
    """
    term = block.last_op if block.last_op is not None and block.last_op.has_trait(
        IsTerminator) else None
    keep = returned_views(term, n_returned)
    if keep:
        _copy_kept_views(block, keep, term, executors)
    ops = list(block.ops)
    if term is not None:
        ops.pop()
    groups, colors, preds = plan_groups(ops, executors, min_size, keep)
    if not groups:
        return []
    # Regions that would return nothing (dead code) are left to DCE.
    live = [g for g in groups if _has_outputs([ops[i] for i in g])]
    if not live:
        return []
    order = _schedule(len(ops), live, preds, ops)
    consts_used = [op for op in ops if isinstance(op, ConstantOp) and op.results[0].uses]
    numbers = _next_numbers(block)
    for op in ops:
        block.detach_op(op)
    if term is not None:
        block.detach_op(term)
    made: list[RegionOp] = []
    for item in order:
        if isinstance(item, int):
            block.add_op(ops[item])
            continue
        ex = executors[colors[item[0]]]
        prefix = ex.kernel_prefix
        k = numbers.get(prefix, 0)
        numbers[prefix] = k + 1
        region = _build_region([ops[i] for i in item], ex, f"{prefix}{k}")
        block.add_op(region)
        made.append(region)
    if term is not None:
        block.add_op(term)
    for c in consts_used:  # constants that only regions read are cloned there now
        if not c.results[0].uses:
            block.erase_op(c)
    return made


# --------------------------------------------------------------------------- ltorch ops in regions


def decomposition_key(op: Operation) -> tuple[Any, ...]:
    """What decides whether an ltorch op decomposes into fusible prims: its name, operand
    types (and constant numbers: a constant exponent fuses, a traced one does not) and
    properties. Fusion executors that compile prims only (Triton, nvFuser) cache their
    ``can_fuse`` answer for an ltorch op under this key."""
    operands = tuple(
        (v.type, v.owner.properties["value"] if isinstance(v.owner, ConstantOp) else None)
        for v in op.operands)
    return (op.name, operands, tuple(sorted(op.properties.items())))


def decompose_detached(op: Operation) -> list[Operation]:
    """The prims ``op`` decomposes into, built on a detached copy (the program's values
    gain no uses); ``[op]`` itself (not fusible) for an op without a decomposition."""
    from thunder_ir.passes.decompositions import decompose_op, load_rules

    if type(op) not in load_rules():
        return [op]
    scratch = Block()
    mapping: dict[SSAValue, SSAValue] = {}
    for v in op.operands:
        if v in mapping:
            continue
        if isinstance(v.owner, ConstantOp):
            c = v.owner.clone()
            scratch.add_op(c)
            mapping[v] = c.results[0]
        else:
            mapping[v] = scratch.insert_arg(v.type, len(scratch.args))
    clone = op.clone(value_mapper=mapping)
    scratch.add_op(clone)
    assert isinstance(clone, ThunderOp)
    emitter = Emitter()
    decompose_op(clone, emitter)
    return emitter.ops


def fuses_decomposed(op: Operation, prim_ok: Callable[[Operation], bool],
                     cache: dict[tuple[Any, ...], bool]) -> bool:
    """For an executor that compiles prims only (Triton, nvFuser): whether the
    side-effect-free ltorch ``op`` decomposes into prims that ``prim_ok`` all accepts.
    The answer is kept in ``cache`` under `decomposition_key`."""
    if not side_effect_free(op):
        return False
    key = decomposition_key(op)
    # With symbolic sizes the answer may hold guards of this compilation (a row's length
    # against a kernel's limit): asked again in each.
    symbolic = any(getattr(v.type, "symbolic", False) for v in op.operands)
    ok = None if symbolic else cache.get(key)
    if ok is None:
        try:
            ok = all(p is not op and prim_ok(p) for p in decompose_detached(op))
        except Exception:  # a rule that rejects these inputs: leave the op to torch
            ok = False
        if not symbolic:
            cache[key] = ok
    return ok


def prims_body(region: RegionOp) -> Block:
    """The region's body with its ltorch ops decomposed into prims (a copy, if any): what
    an executor that compiles prims only translates."""
    block = region.body.block
    if not any(isinstance(op, LtorchOp) for op in block.ops):
        return block
    from thunder_ir.passes.decompositions import decompose_op, load_rules

    load_rules()
    block = region.body.clone().block
    for op in list(block.ops):
        if not isinstance(op, LtorchOp):
            continue
        emitter = Emitter()
        out = decompose_op(op, emitter)
        for new in emitter.ops:
            block.insert_op_before(new, op)
        for old, value in zip(op.results, out if isinstance(out, list) else [out]):
            old.replace_all_uses_with(value)
        block.erase_op(op)
    return block


__all__ = [
    "FALLBACK_EXECUTOR",
    "FusePass",
    "fuse_block",
    "may_view",
    "plan_groups",
    "returned_views",
    "user_results",
]
