"""Module attributes that ``forward`` writes before reading them are not in the cache key
(`thunder_ir.runtime.free_attrs`, `thunder_ir.frontend.attr_reads`).

Each test runs the jitted module next to an eager copy and compares the outputs, the
attribute's value and type after each call (and parameters after optimizer steps), and
asserts the compile count: one program for six calls where the attribute is written first,
and still correct (keyed by value) where a trace reads it first.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import thunder_ir


def _same(a: Any, b: Any) -> None:
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _same_attr(a: nn.Module, b: nn.Module, name: str) -> None:
    va, vb = a.__dict__.get(name, "<missing>"), b.__dict__.get(name, "<missing>")
    assert type(va) is type(vb), (name, va, vb)
    if isinstance(va, float):
        assert abs(va - vb) <= 1e-5 * max(1.0, abs(vb)), (name, va, vb)
    else:
        assert va == vb, (name, va, vb)


def _run(make: Callable[[], nn.Module], names: list[str], calls: list[tuple[Any, ...]],
         kwargs: list[dict[str, Any]] | None = None) -> nn.Module:
    torch.manual_seed(0)
    m = make()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for i, args in enumerate(calls):
        kw = kwargs[i] if kwargs else {}
        _same(jm(*args, **kw), e(*args, **kw))
        for n in names:
            _same_attr(m, e, n)
    return jm


class Item(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x).sum()
        self.last = y.item()
        return y


def _xs(n: int = 6) -> list[tuple[torch.Tensor]]:
    torch.manual_seed(1)
    return [(torch.randn(3, 4),) for _ in range(n)]


def test_item_written_first_compiles_once() -> None:
    jm = _run(Item, ["last"], _xs())
    assert thunder_ir.cache_misses(jm) == 1


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        loss = self.lin(x).pow(2).mean()
        self.aux = 0.5 * loss.item()  # (not set in __init__: absent before the first call)
        n = (x > 0).sum()
        self.count = n.item()  # (``int(n.item())`` is speculated: a program per value)
        self.note = "seen"
        return loss


def test_float_int_str_written_first_compile_once() -> None:
    jm = _run(Scaled, ["aux", "count", "note"], _xs())
    assert thunder_ir.cache_misses(jm) == 1


def test_training_step_written_first() -> None:
    torch.manual_seed(0)
    m = Scaled()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    opt_j = torch.optim.SGD(m.parameters(), lr=0.1)
    opt_e = torch.optim.SGD(e.parameters(), lr=0.1)
    for (x,) in _xs():
        for call, opt in ((jm, opt_j), (e, opt_e)):
            opt.zero_grad()
            call(x).backward()
            opt.step()
        for n in ("aux", "count", "note"):
            _same_attr(m, e, n)
        for p, q in zip(m.parameters(), e.parameters(), strict=True):
            _same(p, q)
    assert thunder_ir.cache_misses(jm) == 1


class FromSizes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.inv = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inv = 1.0 / x.shape[0] + 0.25
        return self.lin(x) * 2


def test_float_from_sizes_written_first() -> None:
    jm = _run(FromSizes, ["inv"], [(torch.randn(n, 4),) for n in (2, 3, 4, 5, 3, 2)])
    assert thunder_ir.cache_misses(jm) == 2  # the first size, then one symbolic program
    assert thunder_ir.compile_status(jm)["static"] == []


class ReadFirst(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x).sum()
        if self.last is not None:  # a read before the write: the value is keyed
            y = y + self.last
        self.last = y.item()
        return y


def test_read_first_stays_keyed_and_correct() -> None:
    jm = _run(ReadFirst, ["last"], _xs())
    assert thunder_ir.cache_misses(jm) == 6  # each value a program: it is read


class SomePaths(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = 0.0

    def forward(self, x: torch.Tensor, use_last: bool = False) -> torch.Tensor:
        y = self.lin(x).sum()
        if use_last:  # only this path reads it: then its value is keyed again
            y = y * self.last
        self.last = y.item()
        return y


def test_read_on_one_path_is_guarded() -> None:
    flags = [False, False, False, True, True, False, True, False]
    xs = _xs(len(flags))
    _run(SomePaths, ["last"], xs, [{"use_last": f} for f in flags])


class DictRead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x).sum() * vars(self)["last"]  # read through __dict__: keyed
        self.last = getattr(self, "la" + "st") + 1.0  # (getattr: a read too)
        return y


def test_read_through_dict_or_getattr_is_guarded() -> None:
    jm = _run(DictRead, ["last"], _xs())
    assert thunder_ir.cache_misses(jm) == 6


class Deleted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x).sum()
        self.tmp = y.item()
        out = y * 2
        del self.tmp
        self.done = True
        return out


def test_written_then_deleted() -> None:
    jm = _run(Deleted, ["tmp", "done"], _xs())
    assert thunder_ir.cache_misses(jm) == 1


class ReadScale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


def test_a_miss_from_an_attribute_value_is_named() -> None:
    """A module attribute that forward reads and the user changes between calls: each
    value compiles (eager reads the current value), and ``compile_status`` says which."""
    torch.manual_seed(0)
    m = ReadScale()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for i in range(3):
        m.scale = e.scale = 0.5 + i
        x = torch.randn(2, 4)
        _same(jm(x), e(x))
    assert thunder_ir.cache_misses(jm) == 3
    static = thunder_ir.compile_status(jm)["static"]
    assert len(static) == 1 and "self.scale (0.5 -> 1.5)" in static[0], static


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        self.last = y.sum().item()
        return y


class Outer(nn.Module):
    def __init__(self, before: bool) -> None:
        super().__init__()
        self.inner = Inner()
        self.before = before

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.before:  # the parent reads the child's attribute before the child writes it
            x = x * self.inner.last
        y = self.inner(x)
        return y * self.inner.last  # after the write: the value this call computed


def test_a_submodules_attribute_read_after_its_write() -> None:
    jm = _run(lambda: Outer(False), [], _xs())
    assert thunder_ir.cache_misses(jm) == 1


def test_a_submodules_attribute_read_before_its_write_is_guarded() -> None:
    torch.manual_seed(0)
    m = Outer(True)
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for (x,) in _xs():
        _same(jm(x), e(x))
        _same_attr(m.inner, e.inner, "last")


def test_a_hook_reading_the_attribute_is_a_read() -> None:
    torch.manual_seed(0)
    m = Item()
    m.last = 2.0
    m.register_forward_pre_hook(lambda mod, args: (args[0] * mod.last,))
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for (x,) in _xs():
        _same(jm(x), e(x))
        _same_attr(m, e, "last")


REGISTRY: dict[str, type] = {}


class Registered(nn.Module):
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        REGISTRY[cls.__name__] = cls


class Writer(Registered):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x).sum()
        self.last = y.item()
        assert type(self).__name__ == "Writer" and self.__class__ is Writer
        assert isinstance(self, Writer)
        return y


def test_the_users_class_is_left_as_it_was() -> None:
    """The traced copy's class records reads: the user's registry of subclasses and the
    class itself are as they were, and the copy answers ``__class__`` as the module."""
    before = dict(REGISTRY)
    had = "__init_subclass__" in Writer.__dict__
    jm = _run(Writer, ["last"], _xs())
    assert thunder_ir.cache_misses(jm) == 1
    assert before == REGISTRY and REGISTRY["Writer"] is Writer
    assert ("__init_subclass__" in Writer.__dict__) == had


def test_the_guard_says_what_it_leaves_out() -> None:
    """The module guard's source (what a program's validity rests on) names the free
    attribute as not checked, and checks the others."""
    jm = _run(Item, ["last"], _xs(2))
    src = jm._compiled.keyer.guards[0].source()
    assert "# self.last: not checked (forward writes it before reading it)" in src
    assert "check(self.training == True)" in src and "check(self.last" not in src


class ResetState(nn.Module):
    """A recurrent state (a rebound tensor) that some calls reset to None before use."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.h = None

    def forward(self, x: torch.Tensor, reset: bool = False) -> torch.Tensor:
        if reset:
            self.h = None
        h = self.lin(x) if self.h is None else self.lin(x) + self.h
        self.h = torch.tanh(h).detach()
        return h


def test_a_rebound_state_reset_to_none_stays_keyed() -> None:
    flags = [False, False, True, False, False, True, False]
    _run(ResetState, [], _xs(len(flags)), [{"reset": f} for f in flags])
    torch.manual_seed(0)
    m = ResetState()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for i, (x,) in enumerate(_xs()):
        if i == 3:
            m.h = e.h = None  # the user resets it between calls
        _same(jm(x), e(x))
        _same(m.h, e.h)


def _record(mod: nn.Module, value: float) -> None:
    mod.seen = value  # written outside forward's own code: learned from the epilogue


class Helper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x).sum()
        _record(self, y.item())
        return y


def test_traces_per_first_compile(monkeypatch: Any) -> None:
    """A name ``forward`` assigns is watched from the first trace; one written elsewhere is
    learned from the epilogue, and the first compile traces again watching it (one trace
    more). Either way one program serves every later call. (``.item()`` makes every
    first compile trace twice: the first trace meets the data-dependent number.)"""
    from thunder_ir.stages.compiler import Compiler

    traces = [0]
    trace = Compiler._trace

    def counted(self: Any, *a: Any, **k: Any) -> Any:
        traces[0] += 1
        return trace(self, *a, **k)

    monkeypatch.setattr(Compiler, "_trace", counted)
    for make, want in ((Item, 2), (Helper, 3)):
        traces[0] = 0
        jm = _run(make, ["last"] if make is Item else ["seen"], _xs())
        assert thunder_ir.cache_misses(jm) == 1 and traces[0] == want, (make, traces)


class ReadsThroughAnotherReference(nn.Module):
    """Reads ``last`` through a reference to the user's module that is not ``self`` (a
    closure or a global holding the model), before writing it through ``self``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = 1.0
        self.peek: Callable[[], float] = lambda: 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x).sum() * self.peek()
        self.last = y.item() * 0.5 + 1.0
        return y


_MODEL: nn.Module | None = None


def _read_global() -> float:
    assert _MODEL is not None
    return _MODEL.last  # type: ignore[return-value]


def _closure_over(model: nn.Module) -> Callable[[], float]:
    return lambda: model.last  # type: ignore[return-value]


def test_a_read_through_a_closure_or_a_global_is_a_read() -> None:
    """The user's module itself (not the traced copy) records reads while a trace runs:
    the value read through a closure or a global stays keyed, each call as eager's, and
    the module's class is its own again after every call."""
    global _MODEL
    for how in ("closure", "global"):
        torch.manual_seed(0)
        m = ReadsThroughAnotherReference()
        e = copy.deepcopy(m)
        if how == "closure":
            m.peek = _closure_over(m)
            e.peek = _closure_over(e)
        else:
            m.peek = e.peek = _read_global
        jm = thunder_ir.jit(m)
        for args in _xs(4):
            _MODEL = m
            got = jm(*args)
            _MODEL = e
            _same(got, e(*args))
            _same_attr(m, e, "last")
            assert type(m) is ReadsThroughAnotherReference
        assert thunder_ir.cache_misses(jm) == 4  # read first: each value a program
    _MODEL = None
