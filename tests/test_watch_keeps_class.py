"""While a trace watches a module's plain attributes (`thunder_ir.frontend.attr_reads`),
the user's code sees its own class: every observable of ``type(self)`` is compared with
eager's, inside ``forward``, on every call; the class's ``__dict__``, a custom metaclass,
``__init_subclass__`` and a class's own ``__getattribute__`` are as they were after every
call, a failing one included, and no metaclass code of the user's runs for the watch.
"""

from __future__ import annotations

import copy
import pickle
import threading
from typing import Any

import pytest
import torch
from torch import nn

import thunder_ir

REGISTRY: dict[str, type] = {}
META_CALLS: list[str] = []


class Meta(type):
    """Records every class it makes or attribute set through it."""

    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any],
                **kw: Any) -> Meta:
        META_CALLS.append(f"new {name}")
        return super().__new__(mcls, name, bases, ns, **kw)

    def __setattr__(cls, name: str, value: Any) -> None:
        META_CALLS.append(f"setattr {name}")
        super().__setattr__(name, value)

    def __delattr__(cls, name: str) -> None:
        META_CALLS.append(f"delattr {name}")
        super().__delattr__(name)


class Base(nn.Module, metaclass=Meta):
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        REGISTRY[cls.__name__] = cls

    def scale(self) -> float:
        return 1.0


class Observed(Base):
    """Writes ``last`` before reading it (watched, free) and reports what it sees of its
    own class."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = 0.0

    def scale(self) -> float:
        return super().scale() + 1.0  # zero-argument super(): the __class__ cell

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[Any]]:
        y = self.lin(x).sum()
        self.last = y.item()
        cls = type(self)
        seen = [cls is Observed, cls.__name__, cls.__qualname__, cls.__module__,
                [c.__name__ for c in cls.__mro__], self.__class__ is Observed,
                isinstance(self, Observed), type(self) in {Observed: 1},
                REGISTRY[cls.__name__] is cls, self.scale(), super(Observed, self).scale(),  # noqa: UP008
                pickle.loads(pickle.dumps(cls)) is cls, type(copy.copy(cls)) is type(cls),
                type(cls) is Meta, not hasattr(cls, "last"), _class_read(cls)]
        return y * self.scale(), seen


def _class_read(cls: type) -> str:
    """What reading a watched name on the class itself says (eager: no such attribute)."""
    try:
        return repr(cls.last)  # type: ignore[attr-defined]
    except AttributeError as e:
        return f"{e} {e.name}"


def _class_state(cls: type) -> dict[str, Any]:
    return dict(vars(cls))


def test_the_class_is_the_users_inside_forward() -> None:
    """``type(self) is M``, names, ``__mro__``, ``__class__``, ``super()``, a registry
    lookup by ``type(self)``, pickling the class: as eager's on every call, one program
    (``last`` written first stays free); the class, its registry and metaclass untouched."""
    torch.manual_seed(0)
    m = Observed()
    e = copy.deepcopy(m)
    before, registry = _class_state(Observed), dict(REGISTRY)
    META_CALLS.clear()
    jm = thunder_ir.jit(m)
    torch.manual_seed(1)
    for _ in range(4):
        x = torch.randn(3, 4)
        (got, seen), (want, eager_seen) = jm(x), e(x)
        torch.testing.assert_close(got, want)
        assert seen == eager_seen
        assert all(v is True for v in eager_seen if isinstance(v, bool))
        assert m.last == pytest.approx(e.last, rel=1e-5)
        assert _class_state(Observed) == before and type(m) is Observed
    assert thunder_ir.cache_misses(jm) == 1
    assert META_CALLS == [] and registry == REGISTRY


class CopiesItself(Base):
    """Reads its own ``__dict__`` through ``copy.copy(self)`` before writing ``last``: a
    read first, so ``last`` stays keyed by value (each call's value is eager's)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        twin = copy.copy(self)
        y = self.lin(x).sum() * twin.last
        self.last = round(y.item(), 3)
        return y, type(twin) is type(self)  # type: ignore[return-value]


def test_copy_of_self_reads_the_state() -> None:
    torch.manual_seed(0)
    m = CopiesItself()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    torch.manual_seed(1)
    for _ in range(3):
        x = torch.randn(3, 4)
        (got, same), (want, eager_same) = jm(x), e(x)
        torch.testing.assert_close(got, want)
        assert same is eager_same is True and m.last == e.last
    assert thunder_ir.cache_misses(jm) == 3  # read first: a program per value, as keyed


class OwnGetattribute(nn.Module):
    """A class with a ``__getattribute__`` of its own (counting reads of ``last``)."""

    reads = 0

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = 0.0

    def __getattribute__(self, name: str) -> Any:
        if name == "last":
            type(self).reads += 1
        return super().__getattribute__(name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x).sum()
        self.last = y.item()
        return y + self.last  # read after the write: free


class Failing(Base):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = 0.0
        self.fail = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x).sum()
        self.last = 1.0
        if self.fail:
            raise ValueError("the user's error")
        return y


def test_own_getattribute_and_failure_leave_the_class_as_it_was() -> None:
    """A class's own ``__getattribute__`` still runs (as many reads as eager's) and is
    the class's again after each call; a forward that raises leaves the class as it was."""
    torch.manual_seed(0)
    m = OwnGetattribute()
    e = copy.deepcopy(m)
    own = OwnGetattribute.__dict__["__getattribute__"]
    jm = thunder_ir.jit(m)
    x = torch.randn(3, 4)
    for _ in range(3):
        OwnGetattribute.reads = 0
        want = e(x)
        eager_reads = OwnGetattribute.reads
        OwnGetattribute.reads = 0
        torch.testing.assert_close(jm(x), want)
        assert OwnGetattribute.__dict__["__getattribute__"] is own
        assert m.last == pytest.approx(e.last, rel=1e-5)
    assert eager_reads == 1  # (a cached call runs the program: no Python reads)
    assert thunder_ir.cache_misses(jm) == 1

    f = Failing()
    before = _class_state(Failing)
    META_CALLS.clear()
    jf = thunder_ir.jit(f)
    jf(x)
    f.fail = True
    with pytest.raises(ValueError, match="the user's error"):
        jf(x)
    assert _class_state(Failing) == before and type(f) is Failing and META_CALLS == []


class ReadsAnother(nn.Module):
    """While traced, runs another instance of its own class eagerly in another thread
    (which reads and writes ``last`` there): that thread sees the class as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = 0.0
        self.other: list[nn.Module] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x).sum()
        self.last = y.item()
        if self.other:
            box: list[Any] = []
            other = self.other[0]
            t = threading.Thread(target=lambda: box.append(
                (other(torch.ones(2, 4)), other.last, type(other) is ReadsAnother)))
            t.start()
            t.join()
            assert box and box[0][2]
            return y + box[0][0] + box[0][1]
        return y


def test_another_thread_runs_the_class_eagerly_meanwhile() -> None:
    torch.manual_seed(0)
    m = ReadsAnother()
    helper = ReadsAnother()
    e = copy.deepcopy(m)
    helper_e = copy.deepcopy(helper)
    m.other.append(helper)
    e.other.append(helper_e)
    jm = thunder_ir.jit(m)
    x = torch.randn(3, 4)
    torch.testing.assert_close(jm(x), e(x))
    assert helper.last == pytest.approx(helper_e.last, rel=1e-5)
    assert m.last == pytest.approx(e.last, rel=1e-5)
    assert "last" not in vars(ReadsAnother)
