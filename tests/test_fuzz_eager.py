"""A differential fuzzer: random small PyTorch programs, run eagerly and through the jit.

Hypothesis draws a program: 2-3 float32 inputs (small shapes, some requiring grad) and 3-10
steps, each taken from a table of constructs and written as one (or a few) lines of ordinary
Python over the values ``v0, v1, ...``:

* elementwise unary and binary ops, with tensors and Python scalars, with broadcasting;
* reductions (``sum``, ``mean``, ``amax``, ``var`` with dims and keepdim), softmax;
* views and reshapes (``reshape``, ``view``, ``transpose``, ``permute``, ``unsqueeze``,
  ``squeeze``, ``flatten``, ``expand``, indexing, ``cat``, ``stack``, ``split``...);
* in-place updates (``add_``, ``mul_``, ``y[0] = 1.0``, ``clamp_``, ``copy_``,
  ``y[i].mul_(2)``...) of intermediates, views of them and tensors others view (the write
  reaches every alias), never of an input or where eager refuses the write;
* ``detach()``, ``.data``, ``torch.no_grad()`` blocks and ``torch.enable_grad()`` nested
  inside them;
* random ops (dropout, ``rand_like``, ``bernoulli``, ``uniform_``...);
* custom ``torch.autograd.Function``s (defined below) and ops thunder_ir runs through its
  torch fallback (``cumsum``, ``sort``, ``topk``, ``batch_norm`` with running stats...).

Each step runs on an eager copy of the program while it is drawn (under the seed the check
uses), so the generator knows every value's shape, aliasing and ``requires_grad`` and only
draws valid programs. The program is a closure over the list of compiled steps, so the same
object runs eagerly and under ``thunder_ir.jit``; `check_against_eager` compares outputs,
``requires_grad``, the inputs after the call, random draws and gradients. A failing example
prints as the Python function it is.

Values are kept bounded (``tanh`` before ``exp`` and powers, division by ``|x| + 1``, ``log``
and ``sqrt`` of ``|x| + 1``) so the default float32 tolerances hold, and sort-like ops and
``amax`` see a small increasing ramp added first, so there are no ties.

The programs are the same every run (``derandomize``); ``THUNDER_IR_FUZZ_SCALE=20`` runs 20
times as many.

Counterexamples: a real mismatch the fuzzer finds once becomes a regular test at the end of
this file, ``test_counterexample_<what>``, written as a user would write it; where one bug
would keep failing the fuzzer, only that narrow case is left out of the generator, with a
comment naming its test.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

import thunder_ir
from thunder_ir.testing_eager import check_against_eager

# --------------------------------------------------------------------------- custom Functions


class STRound(torch.autograd.Function):
    """Straight-through rounding: rounds forward, passes the gradient through unchanged."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def]
        return g


class ScaledMul(torch.autograd.Function):
    """``a * b * scale``: saves both tensors and keeps a non-tensor argument on ctx."""

    @staticmethod
    def forward(ctx, a, b, scale):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(a, b)
        ctx.scale = scale
        return a * b * scale

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def]
        a, b = ctx.saved_tensors
        return g * b * ctx.scale, g * a * ctx.scale, None


class DoubleWithArgmax(torch.autograd.Function):
    """``(2 * x, x.argmax(-1))``, the index marked non-differentiable."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        idx = x.argmax(dim=-1)
        ctx.mark_non_differentiable(idx)
        return x * 2, idx

    @staticmethod
    def backward(ctx, g, g_idx):  # type: ignore[no-untyped-def]
        return g * 2


NAMESPACE: dict[str, Any] = {"torch": torch, "F": F, "STRound": STRound,
                             "ScaledMul": ScaledMul, "DoubleWithArgmax": DoubleWithArgmax}
"""The globals a fuzzed program's steps run with."""

FILENAME = "<fuzzed program>"

# --------------------------------------------------------------------------- programs


@dataclass
class Program:
    """A drawn program: its inputs, its steps as Python source, and what it returns."""

    shapes: list[tuple[int, ...]]
    requires_grad: list[bool]
    data_seed: int
    seed: int
    body: list[str]
    returns: str
    layouts: list[str] | None = None

    def inputs(self) -> list[torch.Tensor]:
        """The program's input tensors (the same each call), each laid out as its entry
        of ``layouts`` says (`LAYOUTS`)."""
        g = torch.Generator().manual_seed(self.data_seed)
        layouts = self.layouts or ["contiguous"] * len(self.shapes)
        return [eval(LAYOUTS[lay].format(s=s), {"torch": torch, "g": g}).requires_grad_(rg)
                for s, rg, lay in zip(self.shapes, self.requires_grad, layouts)]

    def function(self) -> Callable[..., Any]:
        """The program as a closure over its compiled steps."""
        steps: list[CodeType] = [compile(line, FILENAME, "exec") for line in self.body]
        returns = compile(self.returns, FILENAME, "eval")

        def program(*args: torch.Tensor) -> Any:
            env: dict[str, Any] = {f"v{i}": a for i, a in enumerate(args)}
            for step in steps:
                exec(step, NAMESPACE, env)
            return eval(returns, NAMESPACE, env)

        return program

    def __repr__(self) -> str:
        args = ", ".join(f"v{i}" for i in range(len(self.shapes)))
        lines = [f"def program({args}):"]
        lines += ["    " + ln for step in self.body for ln in step.splitlines()]
        lines.append(f"    return {self.returns}")
        g = f"torch.Generator().manual_seed({self.data_seed})"
        layouts = self.layouts or ["contiguous"] * len(self.shapes)
        ins = ", ".join(f"{LAYOUTS[lay].format(s=s)}.requires_grad_({rg})"
                        for s, rg, lay in zip(self.shapes, self.requires_grad, layouts))
        lines.append(f"g = {g}")
        lines.append(f"check_against_eager(program, {ins}, seed={self.seed})")
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        """How hypothesis prints a failing example: the program's source."""
        p.text("\n" + repr(self) + "\n")


LAYOUTS: dict[str, str] = {
    "contiguous": "torch.randn({s}, generator=g)",
    "transposed": "torch.randn({s}[::-1], generator=g).permute(*reversed(range(len({s}))))",
    "sliced": "torch.randn(({s}) + (2,), generator=g)[..., 0]",
}
"""How an input of shape ``s`` is made: row-major, with its dims' order reversed
(column-major), or every other element of a larger tensor (a storage with gaps)."""


def _broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """True if shapes ``a`` and ``b`` broadcast together."""
    try:
        torch.broadcast_shapes(a, b)
    except RuntimeError:
        return False
    return True


def _shape(s: tuple[int, ...] | torch.Size) -> str:
    """A shape as Python source: ``(2, 3)``, ``(3,)``, ``()``."""
    return repr(tuple(s))


class _Recorder(TorchFunctionMode):
    """Keeps every tensor a step makes or reads alive, so that no storage address is reused
    (the builder tells aliases apart by their storage's address).

    Args:
        keep: the list the tensors go to.
    """

    def __init__(self, keep: list[torch.Tensor]) -> None:
        super().__init__()
        self.keep = keep

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.keep.extend(x for x in pytree.tree_leaves([args, kwargs, out])
                         if isinstance(x, torch.Tensor))
        return out


def _overlaps(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` share a memory location (an expanded view)."""
    dims = sorted((s, n) for n, s in zip(t.shape, t.stride()) if n > 1)
    reach = 0
    for s, n in dims:
        if s <= reach:
            return True
        reach += s * (n - 1)
    return False


def _storage(t: torch.Tensor) -> int:
    """The address of ``t``'s storage (equal for tensors that share memory)."""
    return t.untyped_storage().data_ptr()


class Builder:
    """Draws a program step by step, running each step eagerly as it is drawn.

    Args:
        draw: hypothesis' draw function.
        inputs: the program's inputs (copied: the builder's eager run mutates its own).
    """

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any],
                 inputs: list[torch.Tensor]) -> None:
        self.draw = draw
        self.n_inputs = len(inputs)
        self.env: dict[str, Any] = {}
        for i, x in enumerate(inputs):
            self.env[f"v{i}"] = x.detach().clone().requires_grad_(x.requires_grad)
        self.body: list[str] = []
        self.counter = len(inputs)
        self.keep: list[torch.Tensor] = []  # every tensor seen, so no storage is reused
        self.no_grad = False  # drawing the steps of a torch.no_grad() block

    # ----------------------------------------------------------------- values

    def name(self) -> str:
        """A fresh value name."""
        n = f"v{self.counter}"
        self.counter += 1
        return n

    def t(self, name: str) -> torch.Tensor:
        """The eager value of ``name`` after the steps so far."""
        return self.env[name]

    def floats(self, pred: Callable[[torch.Tensor], bool] | None = None) -> list[str]:
        """The names of the non-empty floating-point values (satisfying ``pred``)."""
        return [k for k, v in self.env.items()
                if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel() > 0
                and (pred is None or pred(v))]

    def pick(self, pred: Callable[[torch.Tensor], bool] | None = None) -> str | None:
        """Draws a floating-point value (satisfying ``pred``), or None if there is none:
        recent values more often (so steps build on each other), the newest when shrunk."""
        names = self.floats(pred)
        if not names:
            return None
        n = len(names)
        back = min(self.draw(st.integers(0, n - 1)), self.draw(st.integers(0, n - 1)))
        return names[n - 1 - back]

    def mutable(self, name: str) -> bool:
        """True for a value eager lets the program update in place: not an input, not a
        leaf requiring grad nor a view of one, no tensor whose elements overlap (an
        expanded view), and no view that eager forbids writing to (one of several views a
        function returns; one made under no_grad of a tensor requiring grad). Views of
        other values and values that others view are allowed: the write reaches every
        alias (test_counterexample_view_sees_write_to_its_base)."""
        t = self.t(name)
        if int(name[1:]) < self.n_inputs or (t.is_leaf and t.requires_grad):
            return False
        if _overlaps(t):
            return False
        if t._is_view():
            base = t._base
            assert base is not None
            if base.is_leaf and base.requires_grad:
                return False
            if torch._C._autograd._get_creation_meta(t) != torch._C._autograd.CreationMeta.DEFAULT:
                return False
        return True

    def operand(self, target: tuple[int, ...], into: bool = False, avoid: str = "") -> str:
        """Draws a second operand that broadcasts with ``target`` (``into``: to it), not
        sharing memory with ``avoid`` (the target of an in-place write, which eager refuses
        to read a partly overlapping source into)."""
        ptr = _storage(self.env[avoid]) if avoid else None
        name = self.pick(lambda t: ptr is None or _storage(t) != ptr)
        if name is None:
            return "torch.full((), 1.5)"
        assert name is not None
        s = tuple(self.t(name).shape)
        ok = (_broadcastable(s, target) and
              (not into or tuple(torch.broadcast_shapes(s, target)) == target))
        if ok and self.draw(st.integers(0, 5)) != 5:
            return name
        if target and self.t(name).numel() >= target[-1] and self.draw(st.booleans()):
            return f"{name}.flatten()[:{target[-1]}]"
        return f"{name}.mean()"

    def ramp(self, name: str) -> str:
        """``name`` plus a small increasing ramp, so that it has no ties."""
        t = self.t(name)
        return f"({name} + torch.arange({t.numel()}.).reshape({_shape(t.shape)}) * 1e-3)"

    def dim(self, name: str) -> int:
        """Draws a dimension of ``name`` (which has at least one)."""
        nd = self.t(name).ndim
        return self.draw(st.integers(-nd, nd - 1))

    # ----------------------------------------------------------------- steps

    def run(self, code: str) -> None:
        """Runs source on the builder's eager values."""
        with _Recorder(self.keep):
            exec(compile(code, FILENAME, "exec"), NAMESPACE, self.env)

    def emit(self, code: str) -> None:
        """Runs a step on the builder's eager values and appends it to the program."""
        self.run(code)
        self.body.append(code)


Construct = Callable[[Builder], str | None]
"""Draws one step's source (or returns None where it does not apply to the values)."""

# --------------------------------------------------------------------------- elementwise

UNARY = [
    "torch.sin({a})", "torch.cos({a})", "torch.tanh({a})", "torch.relu({a})",
    "torch.sigmoid({a})", "torch.exp(torch.tanh({a}))", "-{a}", "{a}.abs()",
    "torch.tanh({a}).pow(2)", "torch.pow(torch.tanh({a}), 3)", "torch.sqrt({a}.abs() + 1)",
    "torch.log({a}.abs() + 1)", "torch.clamp({a}, -0.5, 0.5)", "{a}.clamp(min=0.1)",
    "F.gelu({a})", "F.silu({a})", "torch.rsqrt({a} * {a} + 1)", "torch.erf({a})",
    "F.softplus({a})", "F.leaky_relu({a}, 0.1)", "torch.atan({a})",
]
BINARY = [
    "{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / ({b}.abs() + 1)",
    "torch.add({a}, {b}, alpha=0.5)", "torch.mul({a}, {b})", "torch.sub({b}, {a})",
    "torch.where({a} > 0, {a}, {b})", "torch.where({b} < 0.3, {a} * 2, {b})",
    "torch.lerp({a}, {b}, 0.3)", "torch.clamp({a}, min={b})",
]
SCALAR = [
    "{a} + 2.5", "1.5 - {a}", "{a} * -0.75", "{a} / 3.0", "2.0 / ({a}.abs() + 1)",
    "torch.tanh({a}) ** 2", "2.0 ** torch.tanh({a})", "0.5 * {a} + 1", "{a} - 1",
    "torch.where({a} > 0.5, {a}, 0.0)", "torch.clamp({a}, -1.0, 2.0) * 3",
    "torch.pow({a}.abs() + 1, 0.5)",
]


def c_unary(b: Builder) -> str:
    """An elementwise unary op (bounded: ``tanh`` before ``exp``, ``log`` of ``|x| + 1``)."""
    a = b.pick()
    assert a is not None
    return f"{b.name()} = " + b.draw(st.sampled_from(UNARY)).format(a=a)


def c_binary(b: Builder) -> str:
    """An elementwise binary op of two values, broadcasting."""
    a = b.pick()
    assert a is not None
    other = b.operand(tuple(b.t(a).shape))
    return f"{b.name()} = " + b.draw(st.sampled_from(BINARY)).format(a=a, b=other)


def c_scalar(b: Builder) -> str:
    """An elementwise op of a value and a Python number."""
    a = b.pick()
    assert a is not None
    return f"{b.name()} = " + b.draw(st.sampled_from(SCALAR)).format(a=a)


def c_matmul(b: Builder) -> str | None:
    """``a @ a.mT``, scaled."""
    a = b.pick(lambda t: t.ndim >= 2)
    if a is None:
        return None
    return f"{b.name()} = {a} @ {a}.transpose(-1, -2) / {b.t(a).shape[-1]}"


# --------------------------------------------------------------------------- reductions


def c_reduce(b: Builder) -> str | None:
    """``sum``, ``mean``, ``amax`` (of a ramped value) or ``var``, over all, one or two dims."""
    a = b.pick(lambda t: t.ndim >= 1)
    if a is None:
        return None
    t = b.t(a)
    op = b.draw(st.sampled_from(["sum", "mean", "amax", "var"]))
    form = b.draw(st.sampled_from(["all", "dim", "dims"]))
    dims: list[int] = list(range(t.ndim))
    if form == "dim":
        dims = [b.dim(a)]
    elif form == "dims" and t.ndim >= 2:
        dims = sorted(b.draw(st.lists(st.integers(0, t.ndim - 1), min_size=2, max_size=2,
                                      unique=True)))
    count = 1
    for d in dims:
        count *= t.shape[d]
    if op == "var" and count < 2:
        op = "sum"
    src = b.ramp(a) if op == "amax" else a
    keep = b.draw(st.booleans())
    if form == "all":
        return f"{b.name()} = {src}.{op}()"
    dim = str(dims[0]) if len(dims) == 1 else repr(tuple(dims))
    return f"{b.name()} = {src}.{op}(dim={dim}, keepdim={keep})"


def c_softmax(b: Builder) -> str | None:
    """``softmax`` or ``log_softmax`` over a dim."""
    a = b.pick(lambda t: t.ndim >= 1)
    if a is None:
        return None
    fn = b.draw(st.sampled_from(["torch.softmax", "torch.log_softmax", "F.softmax",
                                 "F.log_softmax"]))
    return f"{b.name()} = {fn}({a}, dim={b.dim(a)})"


# --------------------------------------------------------------------------- views


def _reshapes(shape: tuple[int, ...]) -> list[str]:
    """Arguments of ``reshape``/``view`` to other shapes with ``shape``'s element count."""
    n = 1
    for s in shape:
        n *= s
    out = ["-1", f"{n}, 1", "1, -1", "()" if n == 1 else f"{n}"]
    if len(shape) >= 2:
        out += [f"{shape[0]}, -1", f"-1, {shape[-1]}", ", ".join(map(str, reversed(shape)))]
    if n % 2 == 0 and n > 2:
        out += [f"2, {n // 2}", "2, -1, 1"]
    return out


def _viewable(b: Builder) -> Callable[[torch.Tensor], bool]:
    """Which values a view may be taken of. Left out: a view, under ``no_grad``, of a tensor
    that requires grad (eager's view requires grad too, thunder_ir's does not); see
    test_counterexample_view_made_under_no_grad."""
    return lambda t: not (b.no_grad and t.requires_grad)


def c_view(b: Builder) -> str | None:
    """A view or reshape of a value."""
    a = b.pick(_viewable(b))
    if a is None:
        return None
    t = b.t(a)
    shape, nd = tuple(t.shape), t.ndim
    out = b.name()
    kind = b.draw(st.sampled_from(["reshape", "view", "transpose", "permute", "unsqueeze",
                                   "squeeze", "flatten", "expand", "getitem", "narrow",
                                   "select", "unflatten", "movedim", "diagonal", "t"]))
    if kind == "view" and not t.is_contiguous():
        kind = "reshape"
    if kind in ("reshape", "view"):
        return f"{out} = {a}.{kind}({b.draw(st.sampled_from(_reshapes(shape)))})"
    if kind == "unsqueeze" or nd == 0:
        return f"{out} = {a}.unsqueeze({b.draw(st.integers(-nd - 1, nd))})"
    if kind == "squeeze":
        if b.draw(st.booleans()):
            return f"{out} = {a}.squeeze()"
        return f"{out} = {a}.squeeze({b.dim(a)})"
    if kind == "flatten":
        if nd >= 2 and b.draw(st.booleans()):
            return f"{out} = {a}.flatten(0, 1)"
        return f"{out} = {a}.flatten()"
    if kind == "expand":
        ones = [i for i, s in enumerate(shape) if s == 1]
        if ones:
            new = list(shape)
            new[b.draw(st.sampled_from(ones))] = b.draw(st.integers(2, 3))
            return f"{out} = {a}.expand{_shape(tuple(new))}"
        return f"{out} = {a}.expand(2, {', '.join(['-1'] * nd)})"
    if kind == "getitem":
        d = b.draw(st.integers(0, nd - 1))
        size = shape[d]
        idx = b.draw(st.sampled_from([  # never empty
            str(b.draw(st.integers(-size, size - 1))), "::2", "None", f"{size - 1}:",
            *(["1:", ":-1", "1::2"] if size > 1 else []),
        ]))
        prefix = "..., " if d == nd - 1 and nd > 1 and b.draw(st.booleans()) else ":, " * d
        return f"{out} = {a}[{prefix}{idx}]"
    d = b.dim(a)
    size = shape[d]
    if kind == "narrow":
        start = b.draw(st.integers(0, size - 1))
        return f"{out} = {a}.narrow({d}, {start}, {b.draw(st.integers(1, size - start))})"
    if kind == "select":
        return f"{out} = {a}.select({d}, {b.draw(st.integers(-size, size - 1))})"
    if kind == "unflatten":
        return f"{out} = {a}.unflatten({d}, (1, {size}))"
    if nd < 2:
        return f"{out} = {a}.unsqueeze(0)"
    if kind == "transpose":
        return f"{out} = {a}.transpose({d}, {b.dim(a)})"
    if kind == "permute":
        perm = b.draw(st.permutations(list(range(nd))))
        return f"{out} = {a}.permute({', '.join(map(str, perm))})"
    if kind == "movedim":
        return f"{out} = {a}.movedim({d}, {b.dim(a)})"
    if kind == "diagonal":
        return f"{out} = {a}.diagonal(dim1=0, dim2=-1)"
    return f"{out} = {a}.transpose(0, 1)" if nd > 2 else f"{out} = {a}.t()"


def c_join(b: Builder) -> str | None:
    """``cat``, ``stack``, ``split``, ``chunk``, ``unbind``."""
    viewable = _viewable(b)
    kind = b.draw(st.sampled_from(["cat", "stack", "split", "chunk", "unbind"]))
    a = b.pick(lambda t: t.ndim >= 1 and (kind in ("cat", "stack") or viewable(t)))
    if a is None:
        return None
    t = b.t(a)
    d = b.dim(a)
    out = b.name()
    if kind in ("cat", "stack"):
        def fits(u: torch.Tensor) -> bool:
            if u.ndim != t.ndim:
                return False
            return all(x == y or (kind == "cat" and i == d % t.ndim)
                       for i, (x, y) in enumerate(zip(u.shape, t.shape)))

        other = b.pick(fits) or a
        if kind == "cat":
            return f"{out} = torch.cat([{a}, {other}], dim={d})"
        sd = b.draw(st.integers(-t.ndim - 1, t.ndim))
        return f"{out} = torch.stack([{a}, {other}], dim={sd})"
    size = t.shape[d]
    if kind == "unbind":
        return f"{out} = {a}.unbind({d})[{b.draw(st.integers(-size, size - 1))}]"
    k = b.draw(st.integers(1, max(size, 1)))
    pieces = len(t.split(k, d)) if kind == "split" else len(t.chunk(k, d))
    fn = f"torch.split({a}, {k}, dim={d})" if kind == "split" else f"{a}.chunk({k}, dim={d})"
    if pieces == 2 and b.draw(st.booleans()):
        return f"{out}, {b.name()} = {fn}"
    return f"{out} = {fn}[{b.draw(st.integers(0, pieces - 1))}]"


# --------------------------------------------------------------------------- in place

MUTATIONS = [
    "{y}.add_({b})", "{y}.mul_(2)", "{y}.mul_({b})", "{y}.sub_({b}, alpha=0.5)",
    "{y}.div_({b}.abs() + 1)", "{y}.clamp_(min=0)", "{y}.copy_({b})", "{y}.sigmoid_()",
    "{y}.masked_fill_({y} > 0, 0.5)", "{y}.zero_()", "{y}.fill_(0.25)", "{y} += {b}",
    "{y} *= 0.5", "{y}.tanh_()", "{y}.mul_({y})",
    "{y}.reshape(-1)[::2].zero_()", "{y}.unsqueeze(0).add_(1)",
]
INDEXED = ["{y}[{i}] = 1.0", "{y}[{i}] = {row}", "{y}[{i}].mul_(2)", "{y}.select(0, {i}).fill_(-1)"]
"""Mutations of a tensor of at least one dim (writes through views of it among them)."""


def _mutation(b: Builder, y: str) -> str:
    """Draws an in-place update of ``y``."""
    t = b.t(y)
    shape = tuple(t.shape)
    template = b.draw(st.sampled_from(MUTATIONS + INDEXED if t.ndim else MUTATIONS))
    i = b.draw(st.integers(-shape[0], shape[0] - 1)) if t.ndim else 0
    return template.format(y=y, i=i, b=b.operand(shape, True, y) if "{b}" in template else "",
                           row=b.operand(shape[1:], True, y) if "{row}" in template else "")


def c_inplace_fresh(b: Builder) -> str:
    """``y = x * 1`` (or a clone, or zeros), then an in-place update of ``y``."""
    a = b.pick()
    assert a is not None
    y = b.name()
    make = b.draw(st.sampled_from(["{a} * 1", "{a}.clone()", "torch.zeros_like({a})",
                                   "{a}.exp() - 1"])).format(a=a)
    b.emit(f"{y} = {make}")
    return _mutation(b, y)


def c_inplace_existing(b: Builder) -> str | None:
    """An in-place update of an earlier intermediate that nothing else aliases."""
    names = [n for n in b.floats() if b.mutable(n)]
    if not names:
        return None
    y = b.draw(st.sampled_from(names))
    return _mutation(b, y)


# --------------------------------------------------------------------------- grad modes


def c_stop_gradient(b: Builder) -> str:
    """``detach()``, ``.data`` or ``torch.detach``, alone or beside the value itself."""
    a = b.pick()
    form = b.draw(st.sampled_from(["{a}.detach()", "{a}.data", "torch.detach({a})",
                                   "{a}.detach() * {a}", "{a} * {a}.data.sin()"]))
    return f"{b.name()} = " + form.format(a=a)


PURE_INNER: list[Construct] = []  # filled below: what a grad-mode block may contain


def _indent(code: str, depth: int = 1) -> str:
    """``code`` indented ``depth`` levels."""
    return "\n".join("    " * depth + ln for ln in code.splitlines())


def _inner(b: Builder) -> str:
    """Draws a step for inside a ``with`` block (not emitted)."""
    while True:
        code = b.draw(st.sampled_from(PURE_INNER))(b)
        if code is not None:
            return code


def c_grad_block(b: Builder) -> str:
    """A step under ``no_grad``, maybe with ``enable_grad`` nested inside (and then a second
    step under ``no_grad`` again)."""
    form = b.draw(st.sampled_from(["no_grad", "nested", "nested_then", "enable_grad"]))
    b.no_grad = form == "no_grad"
    first = _inner(b)
    b.no_grad = False
    if form == "no_grad":
        return "with torch.no_grad():\n" + _indent(first)
    if form == "enable_grad":
        return "with torch.enable_grad():\n" + _indent(first)
    code = "with torch.no_grad():\n    with torch.enable_grad():\n" + _indent(first, 2)
    if form == "nested":
        return code
    b.emit(code)
    b.no_grad = True
    second = _inner(b)
    b.no_grad = False
    return "with torch.no_grad():\n" + _indent(second)


# --------------------------------------------------------------------------- random ops


def c_random(b: Builder) -> str | None:
    """A random op: the dropout family, ``*_like`` draws, ``bernoulli``, ``normal``."""
    a = b.pick()
    assert a is not None
    t = b.t(a)
    out = b.name()
    p = b.draw(st.sampled_from([0.0, 0.2, 0.5, 0.9]))
    kind = b.draw(st.sampled_from(["dropout", "rand_like", "randn_like", "bernoulli",
                                   "dropout2d", "uniform_", "dropout_inplace", "normal"]))
    if kind == "dropout":
        return f"{out} = F.dropout({a}, p={p}, training=True)"
    if kind == "rand_like":
        return f"{out} = {a} * torch.rand_like({a})"
    if kind == "randn_like":
        return f"{out} = {a} + torch.randn_like({a}) * 0.1"
    if kind == "bernoulli":
        return f"{out} = torch.bernoulli(torch.sigmoid({a})) * {a}"
    if kind == "uniform_":
        return f"{out} = torch.empty_like({a}).uniform_() * {a}"
    if kind == "normal":
        return f"{out} = torch.normal({a}, 0.5)"
    if kind == "dropout_inplace":
        b.emit(f"{out} = {a} * 1")
        return f"F.dropout({out}, p={p}, training=True, inplace=True)"
    if t.ndim > 4:
        return None
    four = a if t.ndim == 4 else f"{a}.reshape{_shape((1,) * (4 - t.ndim) + tuple(t.shape))}"
    return f"{out} = F.dropout2d({four}, p={p}, training=True)"


# --------------------------------------------------------------------------- Functions


def c_function(b: Builder) -> str | None:
    """One of the custom ``autograd.Function``s above."""
    a = b.pick()
    assert a is not None
    t = b.t(a)
    out = b.name()
    kind = b.draw(st.sampled_from(["round", "scaled_mul", "argmax"]))
    if kind == "round":
        return f"{out} = STRound.apply({a} * 4) / 4"
    if kind == "scaled_mul":
        other = b.operand(tuple(t.shape))
        return f"{out} = ScaledMul.apply({a}, {other}, {b.draw(st.sampled_from([0.5, 2.0]))})"
    if t.ndim == 0:
        return None
    idx = b.name()
    code = f"{out}, {idx} = DoubleWithArgmax.apply({b.ramp(a)})"
    if b.draw(st.booleans()):
        code += f"\n{b.name()} = {out}.gather(-1, {idx}.unsqueeze(-1))"
    return code


# --------------------------------------------------------------------------- fallbacks


def c_fallback(b: Builder) -> str | None:
    """An op thunder_ir runs through its torch fallback (sort-like ops on ramped values)."""
    a = b.pick(lambda t: t.ndim >= 1)
    if a is None:
        return None
    t = b.t(a)
    d = b.dim(a)
    size = t.shape[d]
    out = b.name()
    kind = b.draw(st.sampled_from(["cumsum", "sort", "topk", "logcumsumexp", "hardswish",
                                   "i0", "flip", "roll", "batch_norm", "kthvalue"]))
    if kind == "cumsum":
        return f"{out} = torch.cumsum({a}, dim={d})"
    if kind == "logcumsumexp":
        return f"{out} = torch.logcumsumexp({a}, dim={d})"
    if kind == "hardswish":
        return f"{out} = F.hardswish({a})"
    if kind == "i0":
        return f"{out} = torch.special.i0({a})"
    if kind == "flip":
        return f"{out} = torch.flip({a}, dims=({d},))"
    if kind == "roll":
        return f"{out} = torch.roll({a}, {b.draw(st.integers(-2, 2))}, dims={d})"
    if kind == "sort":
        desc = b.draw(st.booleans())
        if b.draw(st.booleans()):
            return f"{out}, {b.name()} = torch.sort({b.ramp(a)}, dim={d}, descending={desc})"
        return f"{out} = torch.sort({b.ramp(a)}, dim={d}, descending={desc}).values"
    k = b.draw(st.integers(1, size))
    if kind == "topk":
        if b.draw(st.booleans()):
            return f"{out}, {b.name()} = torch.topk({b.ramp(a)}, {k}, dim={d})"
        return f"{out} = torch.topk({b.ramp(a)}, {k}, dim={d}).values"
    if kind == "kthvalue":
        return f"{out} = torch.kthvalue({b.ramp(a)}, {k}, dim={d}).values"
    # batch_norm in training on an (N, C) value, with fresh running stats
    shape = tuple(t.shape)
    if t.ndim == 2 and shape[0] >= 2:
        x2 = a
    elif t.ndim >= 2 and shape[0] >= 2:
        x2 = f"{a}.reshape({shape[0]}, -1)"
    elif t.numel() >= 2:
        x2 = f"{a}.reshape(-1, 1)"
    else:
        return None
    c = t.numel() // shape[0] if x2 != f"{a}.reshape(-1, 1)" else 1
    mean, var = out, b.name()
    return (f"{mean} = torch.zeros({c})\n{var} = torch.ones({c})\n"
            f"{b.name()} = F.batch_norm({x2}, {mean}, {var}, training=True, momentum=0.1)")


# --------------------------------------------------------------------------- tables

PURE: list[Construct] = [c_unary, c_unary, c_binary, c_binary, c_scalar, c_matmul, c_reduce,
                         c_softmax, c_view, c_view, c_join, c_inplace_fresh, c_inplace_existing]
PURE_INNER.extend([c_unary, c_binary, c_scalar, c_reduce, c_view, c_inplace_fresh,
                   c_inplace_existing])
GRAD: list[Construct] = [*PURE, c_stop_gradient, c_stop_gradient, c_grad_block, c_grad_block,
                         c_grad_block]
RANDOM: list[Construct] = [*PURE, c_random, c_random, c_random, c_random]
FUNCTIONS: list[Construct] = [*PURE, c_function, c_function, c_function, c_fallback,
                              c_fallback, c_fallback]
EVERYTHING: list[Construct] = [*PURE, c_stop_gradient, c_grad_block, c_random, c_function,
                               c_fallback]

SHAPES: list[tuple[int, ...]] = [(2, 3), (3,), (2, 3, 4), (1, 3), (2, 1), (4,), (3, 4)]


@st.composite
def programs(draw: Callable[[st.SearchStrategy[Any]], Any], table: list[Construct]
             ) -> Program:
    """Draws a `Program` whose steps come from ``table``."""
    n = draw(st.integers(2, 3))
    shapes = [draw(st.sampled_from(SHAPES)) for _ in range(n)]
    rg = [draw(st.booleans()) for _ in range(n)]
    data_seed, seed = draw(st.integers(0, 2**16)), draw(st.integers(0, 2**16))
    layouts = [draw(st.sampled_from(["contiguous", "contiguous", "transposed", "sliced"]))
               for _ in range(n)]
    prog = Program(shapes, rg, data_seed, seed, [], "", layouts)
    b = Builder(draw, prog.inputs())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # the builder's eager run draws what the check's runs draw
        for i in range(10):
            if i >= 3 and draw(st.integers(0, 3)) == 0:  # shrinks toward short programs
                break
            while True:
                code = draw(st.sampled_from(table))(b)
                if code is not None:
                    break
            b.emit(code)
    values = [k for k, t in b.env.items() if isinstance(t, torch.Tensor)]
    last = [k for k in values if b.env[k].is_floating_point()][-1]
    others = draw(st.lists(st.sampled_from(values), max_size=2, unique=True))
    names = [last] + [o for o in others if o != last]
    form = draw(st.sampled_from(["one", "tuple", "dict", "list"]))
    if form == "one" or len(names) == 1:
        ret = names[0]
    elif form == "tuple":
        ret = "(" + ", ".join(names) + ")"
    elif form == "list":
        ret = "[" + ", ".join(names) + "]"
    else:
        ret = "{" + ", ".join(f"'{k}': {k}" for k in names) + "}"
    prog.body, prog.returns = b.body, ret
    return prog


def run(prog: Program) -> None:
    """Checks ``prog`` against eager."""
    check_against_eager(prog.function(), *prog.inputs(), seed=prog.seed)


_FUZZ = settings(deadline=None, derandomize=True, database=None, print_blob=False,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                        HealthCheck.filter_too_much])


def fuzz(max_examples: int) -> settings:
    """Deterministic settings (the same programs every run) with ``max_examples``, times
    ``$THUNDER_IR_FUZZ_SCALE`` (to fuzz longer by hand: ``THUNDER_IR_FUZZ_SCALE=20``)."""
    scale = float(os.environ.get("THUNDER_IR_FUZZ_SCALE", "1"))
    return settings(_FUZZ, max_examples=max(1, round(max_examples * scale)))

# --------------------------------------------------------------------------- fuzz tests


@fuzz(max_examples=100)
@given(programs(PURE))
def test_fuzz_pure_programs(prog: Program) -> None:
    run(prog)


@fuzz(max_examples=100)
@given(programs(GRAD))
def test_fuzz_grad_modes(prog: Program) -> None:
    run(prog)


@fuzz(max_examples=100)
@given(programs(RANDOM))
def test_fuzz_random_ops(prog: Program) -> None:
    run(prog)


@fuzz(max_examples=100)
@given(programs(FUNCTIONS))
def test_fuzz_functions_and_fallbacks(prog: Program) -> None:
    run(prog)


@fuzz(max_examples=100)
@given(programs(EVERYTHING))
def test_fuzz_everything(prog: Program) -> None:
    run(prog)


# --------------------------------------------------------------------------- counterexamples


def rand(*shape: int, seed: int = 0, rg: bool = True) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).requires_grad_(rg)


def test_program_repr_is_runnable() -> None:
    """A drawn program prints as the Python it runs."""
    prog = Program([(2, 3), (3,)], [True, False], 1, 2, ["v2 = v0 * v1", "v2.add_(1)"], "v2")
    assert "def program(v0, v1):\n    v2 = v0 * v1\n    v2.add_(1)\n    return v2" in repr(prog)
    run(prog)


def test_counterexample_zero_keeps_requires_grad() -> None:
    """Eager: ``y`` still requires grad after ``zero_()`` (its gradient to ``x`` is zero)."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1
        y.zero_()
        return y

    check_against_eager(f, rand(2, 3))


def test_counterexample_copy_gives_a_zero_gradient_to_what_it_overwrites() -> None:
    """Eager: ``z`` gets a zero gradient through ``y`` (the copy overwrote it), not None."""
    def f(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        y = z * 1
        y.copy_(x)
        return y.sin()

    check_against_eager(f, rand(2, 3), rand(2, 3, seed=1))


def test_counterexample_write_to_saved_tensor() -> None:
    """Eager's backward raises: tanh saved its result, which ``mul_`` then changed."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(x)
        y.mul_(2)
        return y

    check_against_eager(f, rand(2, 3))


def test_counterexample_write_after_temporary_view() -> None:
    """The view ``y.flatten()[:3]`` is gone when ``y`` is written: eager allows the write."""
    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.sin(x)
        z = w * y.flatten()[:3]
        y.mul_(2)
        return z, y

    check_against_eager(f, rand(2, 3), rand(3, seed=1))


@pytest.mark.parametrize("view", [
    lambda y: y.narrow(1, 0, 2),
    lambda y: y.select(0, 1),
    lambda y: y.unbind(0)[1],
    lambda y: y.movedim(0, 1),
    lambda y: y.diagonal(),
    lambda y: y.unflatten(1, (1, 3)),
], ids=["narrow", "select", "unbind", "movedim", "diagonal", "unflatten"])
def test_counterexample_view_sees_write_to_its_base(
        view: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Eager: a view shows a later in-place write to its base (the views are re-derived
    from the written base: view replay), and a write through the view reaches the base."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x)
        v = view(y)
        y.mul_(2)
        return v

    def g(x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x)
        view(y).mul_(3)
        return y

    check_against_eager(f, rand(2, 3).requires_grad_())
    check_against_eager(g, rand(2, 3).requires_grad_())


@pytest.mark.parametrize("fn", [
    lambda x: x.detach(),
    lambda x: x.data,
    lambda x: x.detach().reshape(-1),
    lambda x: (x * 2, x.detach()[0]),
], ids=["detach", "data", "detach_reshape", "with_a_differentiable_result"])
def test_counterexample_detached_input_is_returned(
        fn: Callable[[torch.Tensor], Any]) -> None:
    """Eager: a detached alias of an input does not require grad."""
    check_against_eager(fn, rand(2, 3))


@pytest.mark.parametrize("fn", [
    lambda x: (x.sin(), x.sin().detach()),
    lambda x: (x * 2, x.detach() * 2),
], ids=["result_and_its_detach", "detached_recomputation"])
def test_counterexample_detached_twin_of_a_result(
        fn: Callable[[torch.Tensor], Any]) -> None:
    """Eager: the first result requires grad (``x`` gets a gradient); the second does not."""
    check_against_eager(fn, rand(3))


def test_counterexample_view_made_under_no_grad() -> None:
    """Eager: a view made under no_grad of a tensor that requires grad requires grad, and
    no gradient flows back through it (``x.grad`` stays None). (Eager's backward called on
    that view itself raises, thunder_ir's returns None gradients: a known difference.)"""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x)
        with torch.no_grad():
            v = y.view(-1)
        return v.sum() * 2

    check_against_eager(f, rand(2, 3))
    jf = thunder_ir.jit(lambda x: f(x) / 2)
    x = rand(2, 3)
    out = jf(x)
    assert out.requires_grad
    out.backward()
    assert x.grad is None


def test_counterexample_two_batch_norms_with_fresh_running_stats() -> None:
    """Eager: each batch_norm updates its own running mean."""
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean1, var1 = torch.zeros(3), torch.ones(3)
        y = F.batch_norm(x, mean1, var1, training=True)
        mean2, var2 = torch.zeros(3), torch.ones(3)
        F.batch_norm(y.sin(), mean2, var2, training=True)
        return mean1, mean2

    check_against_eager(f, rand(4, 3))


def test_counterexample_dropout_of_a_transposed_tensor() -> None:
    """Eager draws the mask into memory laid out as ``x.t()`` is (column-major)."""
    check_against_eager(lambda x: F.dropout(x.t(), 0.5, training=True), rand(2, 3))


def test_counterexample_write_after_reshape_that_copied() -> None:
    """``y`` is laid out transposed, so eager's reshape copies and nothing aliases ``y``:
    the write to ``y`` leaves ``v`` as it was (traced layouts tell a copying reshape from
    a viewing one)."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x.t())
        v = y.reshape(-1)
        y.mul_(2)
        return v

    check_against_eager(f, rand(2, 3))


def test_counterexample_copy_under_no_grad_carries_no_gradient() -> None:
    """Eager: ``z`` takes ``y``'s values, not its gradient: ``x.grad`` is ``cos(x)``."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x)
        z = torch.zeros_like(y)
        with torch.no_grad():
            z.copy_(y)
        return y + z

    check_against_eager(f, rand(2, 3))


def test_counterexample_write_after_copy_from_a_leaf() -> None:
    """Eager: after ``copy_`` from ``x``, ``y`` is not a leaf: writing to it is allowed."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.zeros_like(x)
        y.copy_(x)
        y.add_(x)
        return y

    check_against_eager(f, rand(2, 3))


@pytest.mark.parametrize("view", [
    lambda x: x.narrow(0, 0, 1),
    lambda x: x.select(0, 1),
    lambda x: x.unbind(0)[0],
    lambda x: x.movedim(0, 1),
], ids=["narrow", "select", "unbind", "movedim"])
def test_counterexample_detached_view_of_an_input(
        view: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Eager: a detached view does not require grad."""
    check_against_eager(lambda x: view(x).detach(), rand(2, 3))


def test_counterexample_write_after_a_batched_matmul_saved_it() -> None:
    """Eager's backward raises: the batched matmul saved ``y``, which ``mul_`` changed."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        z = y @ y.transpose(-1, -2)
        y.mul_(0.5)
        return z

    check_against_eager(f, rand(2, 3, 4))


def test_counterexample_write_to_running_var() -> None:
    """Eager's backward raises: batch_norm saved its running variance, changed by ``mul_``."""
    def f(x: torch.Tensor) -> torch.Tensor:
        mean, var = torch.zeros(3), torch.ones(3)
        y = F.batch_norm(x, mean, var, training=True)
        var.mul_(2)
        return y

    check_against_eager(f, rand(4, 3))


def test_counterexample_unrelated_write_after_many_temporaries() -> None:
    """Eager: nothing this program's backward needs is ever written in place. thunder_ir's
    backward raises (most runs) that ``tanh``'s saved result was modified by ``y.mul_``."""
    def f(x: torch.Tensor) -> torch.Tensor:
        total = x.sum()
        for i in range(30):
            total = total + torch.tanh(x * i).sum()
            y = x * 2
            y.mul_(2)
            total = total + y.sum()
        return total

    for seed in range(5):
        check_against_eager(f, rand(3, seed=seed))


def test_counterexample_clamp_gradient_at_the_bound() -> None:
    """Eager's clamp passes the gradient where ``x`` equals the bound: ``[0, 1, 1]``."""
    x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    check_against_eager(lambda x: torch.clamp(x, min=0.0), x)


def test_counterexample_copy_from_a_result_that_saved_the_target() -> None:
    """Eager's backward raises: ``sin`` saved ``y``, which ``copy_`` then overwrote."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x)
        z = torch.sin(y)
        y.copy_(z)
        return z

    check_against_eager(f, rand(2, 3))
