"""Eager semantics of Python state: what a jitted function reads from and writes to Python
objects, over several calls, against eager.

Sections: argument objects read (tensor attributes are inputs, plain fields keyed); state
objects carried across calls (an RNN's hidden state); writes to argument dicts and lists;
the module's own Python state (counters, flags, caches, lists); Python's ``random``;
lazy modules; no traced tensor left in user-visible state; the user's Hugging Face model
left as eager leaves it; generation (dynamic and static caches, three families); torch.func
over jitted code. Every check compares values *and* the objects' contents after each call.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import types
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, jacrev, jvp, vmap

import thunder_ir
from thunder_ir.frontend.proxy import TensorProxy
from thunder_ir.testing_eager import check_against_eager


def _no_proxy(value: Any, where: str = "value", depth: int = 0,
              seen: set[int] | None = None) -> None:
    """Asserts that no traced tensor is reachable from ``value``."""
    seen = set() if seen is None else seen
    assert type(value) is not TensorProxy, f"a TensorProxy at {where}"
    if depth > 6 or id(value) in seen or isinstance(value, torch.Tensor | str | int | float):
        return
    seen.add(id(value))
    if isinstance(value, dict):
        for k, v in value.items():
            _no_proxy(v, f"{where}[{k!r}]", depth + 1, seen)
    elif isinstance(value, list | tuple | set):
        for i, v in enumerate(value):
            _no_proxy(v, f"{where}[{i}]", depth + 1, seen)
    elif hasattr(value, "__dict__") and not callable(value):
        for k, v in vars(value).items():
            _no_proxy(v, f"{where}.{k}", depth + 1, seen)


def _same(a: Any, b: Any) -> None:
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- argument objects


@dataclasses.dataclass
class Weights:
    w: torch.Tensor
    scale: float
    inner: Any = None


def _use_weights(x: torch.Tensor, p: Weights) -> torch.Tensor:
    out = x * p.w * p.scale
    return out + p.inner.bias if p.inner is not None else out


def test_argument_object_tensors_are_inputs_and_its_numbers_are_keyed() -> None:
    """A tensor attribute replaced, or changed in place, between calls is used; a changed
    number recompiles; a dataclass, a SimpleNamespace and objects inside objects alike."""
    j = thunder_ir.jit(_use_weights)
    x = torch.randn(3)
    p = Weights(torch.ones(3), 2.0, types.SimpleNamespace(bias=torch.zeros(3)))
    _same(j(x, p), _use_weights(x, p))
    p.w = torch.full((3,), 5.0)  # a new tensor
    _same(j(x, p), _use_weights(x, p))
    p.w.mul_(3)  # the same tensor, new values
    p.inner.bias = torch.ones(3)
    _same(j(x, p), _use_weights(x, p))
    assert thunder_ir.cache_misses(j) == 1
    p.scale = 3.0  # a number the trace baked in: a new program
    _same(j(x, p), _use_weights(x, p))
    assert thunder_ir.cache_misses(j) == 2
    p.scale = 2.0  # back: the first program again
    _same(j(x, p), _use_weights(x, p))
    assert thunder_ir.cache_misses(j) == 2


# --------------------------------------------------------------------------- state objects


def _rnn_step(x: torch.Tensor, state: Any) -> torch.Tensor:
    state.h = torch.tanh(state.h * 0.5 + x)
    state.steps = state.steps + 1
    return state.h * 2


def test_a_state_object_is_carried_across_calls_as_in_eager() -> None:
    j = thunder_ir.jit(_rnn_step)
    se = types.SimpleNamespace(h=torch.zeros(4), steps=0)
    sj = types.SimpleNamespace(h=torch.zeros(4), steps=0)
    for i in range(4):
        x = torch.randn(4, generator=torch.Generator().manual_seed(i))
        _same(j(x, sj), _rnn_step(x, se))
        assert type(sj.h) is torch.Tensor
        _same(sj.h, se.h)
        assert sj.steps == se.steps
    _no_proxy(sj)


def test_a_state_object_in_training_gives_eagers_gradients() -> None:
    check_against_eager(_rnn_step, torch.randn(4, requires_grad=True),
                        types.SimpleNamespace(h=torch.zeros(4), steps=0))


# --------------------------------------------------------------------------- dicts and lists


def _fill(x: torch.Tensor, d: dict[str, Any], items: list[Any], nested: dict[str, Any]
          ) -> torch.Tensor:
    d["double"] = x * 2
    d.update(half=x / 2)
    d.pop("old", None)
    items.append(x + 1)
    items.extend([x.sum(), 7])
    nested["log"].append(x.mean())
    return x * 3


def test_writes_to_dict_and_list_arguments_reach_the_callers() -> None:
    j = thunder_ir.jit(_fill)
    for i in range(3):
        x = torch.randn(3, generator=torch.Generator().manual_seed(i))
        de, dj = {"old": 1}, {"old": 1}
        le, lj = [torch.zeros(1)], [torch.zeros(1)]
        ne, nj = {"log": []}, {"log": []}
        _same(j(x, dj, lj, nj), _fill(x, de, le, ne))
        assert list(dj) == list(de) and len(lj) == len(le) and len(nj["log"]) == 1
        for k in de:
            _same(dj[k], de[k])
        for a, b in zip(lj, le, strict=True):
            assert type(a) is type(b)
            if isinstance(b, torch.Tensor):
                _same(a, b)
        _no_proxy((dj, lj, nj))


def test_an_argument_tensor_stored_is_the_callers_tensor() -> None:
    def keep(x: torch.Tensor, box: dict[str, Any]) -> torch.Tensor:
        box["x"] = x
        return x + 1

    box: dict[str, Any] = {}
    x = torch.randn(2)
    thunder_ir.jit(keep)(x, box)
    assert box["x"] is x


# --------------------------------------------------------------------------- module state


class Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.lin(x) * self.calls


def test_attribute_writes_in_forward_reach_the_module() -> None:
    """``self.calls += 1`` counts every call, and each call computes with the current
    value (from its second value on a symbolic number: see the next section)."""
    torch.manual_seed(0)
    m = Counter()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for _ in range(3):
        x = torch.randn(2, 3)
        _same(jm(x), e(x))
    assert m.calls == e.calls == 3


class Rescaled(nn.Module):
    """A one-time in-place weight update under a Python flag (a model that rescales some
    weights on its first eval call)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.layers_are_rescaled = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.layers_are_rescaled:
            with torch.no_grad():
                self.lin.weight.div_(2.0)
            self.layers_are_rescaled = True
        return self.lin(x)


def test_a_one_time_update_under_a_flag_happens_once() -> None:
    torch.manual_seed(0)
    m = Rescaled().eval()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for _ in range(4):
        x = torch.randn(2, 4)
        _same(jm(x), e(x))
    assert m.layers_are_rescaled
    _same(m.lin.weight, e.lin.weight)  # divided once, not once per call


class ShapeCache(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[Any, torch.Tensor] = {}
        self.mask: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = tuple(x.shape)
        if key not in self.cache:
            self.cache[key] = torch.arange(x.shape[-1], dtype=x.dtype) * x.shape[0]
        self.mask = self.cache[key] > 1
        return x + self.cache[key]


def test_a_cache_filled_in_forward_holds_real_tensors_per_shape() -> None:
    """A dict of tensors keyed by shape, filled in eval mode: after each call it holds
    real tensors, and a later trace at another shape never reuses the first one's."""
    m, e = ShapeCache(), ShapeCache()
    jm = thunder_ir.jit(m)
    with torch.no_grad():
        for shape in ((2, 3), (4, 3), (2, 3), (4, 5), (4, 3)):
            x = torch.randn(shape)
            _same(jm(x), e(x))
    assert list(m.cache) == list(e.cache)
    for k in e.cache:
        assert type(m.cache[k]) is torch.Tensor
        _same(m.cache[k], e.cache[k])
    assert type(m.mask) is torch.Tensor and torch.equal(m.mask, e.mask)
    _no_proxy(m)


class Coefs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.coefs = [1.0, 2.0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.coefs[0] + self.coefs[1]


def test_a_list_on_the_module_changed_in_place_is_guarded() -> None:
    m = Coefs()
    jm = thunder_ir.jit(m)
    x = torch.ones(2)
    _same(jm(x), m(x))
    m.coefs[0] = 10.0
    _same(jm(x), m(x))
    m.coefs.append(5.0)
    m.coefs[1] = -1.0
    _same(jm(x), m(x))


def test_pythons_random_inside_traced_code_is_refused_with_the_line() -> None:
    def coin(x: torch.Tensor) -> torch.Tensor:
        return x * 0 if random.random() < 0.5 else x

    with pytest.raises(thunder_ir.ThunderTraceError,
                       match=r"test_python_state\.py:\d+: Python's random\.random\(\)"):
        thunder_ir.jit(coin)(torch.ones(2))
    assert isinstance(random.random(), float)  # the real one again, outside the trace


@pytest.mark.parametrize("seed", [lambda: torch.seed(), lambda: torch.random.seed()],
                         ids=["torch.seed", "torch.random.seed"])
def test_torch_seed_inside_traced_code_reseeds_on_every_call(
        seed: Callable[[], int]) -> None:
    """``torch.seed()`` reseeds with a nondeterministic number, a new one on every eager
    call (Reformer's training: ``torch.manual_seed(int(torch.seed() % sys.maxsize))``):
    the program draws it on every call (`thunder_ir.frontend.seeds`). Each call's result
    is ``randn(3)`` after ``manual_seed(k)`` for some ``k < 1000``, and the generator is
    left as that reseeding and draw leave it; the calls draw different seeds; one
    program."""
    def reseeded(x: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(seed() % 1000)
        return x + torch.randn(3)

    def draws(k: int) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(k)
        return torch.randn(3), torch.get_rng_state()

    expected = [draws(k) for k in range(1000)]
    jf = thunder_ir.jit(reseeded)
    found = []
    for _ in range(3):
        y = jf(torch.zeros(3))
        after = torch.get_rng_state()
        k = next(k for k, (d, _) in enumerate(expected) if torch.equal(d, y))
        assert torch.equal(after, expected[k][1])
        found.append(k)
    assert len(set(found)) > 1
    assert thunder_ir.cache_misses(jf) == 1
    assert isinstance(torch.seed(), int)  # the real one again, outside the trace
    torch.manual_seed(0)


def test_a_draw_through_a_name_imported_from_random_is_refused_too() -> None:
    draw = random.random  # bound before the trace: not the module attribute it reads
    state = random.getstate()

    def coin(x: torch.Tensor) -> torch.Tensor:
        return x * 0 if draw() < 0.5 else x

    with pytest.raises(thunder_ir.ThunderTraceError, match="Python's random generator drew"):
        thunder_ir.jit(coin)(torch.ones(2))
    assert random.getstate() == state


@pytest.mark.parametrize("build", [
    lambda: nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.LazyLinear(2)),
    lambda: nn.Sequential(nn.LazyConv2d(4, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2)),
], ids=["linear", "conv2d"])
def test_lazy_modules_initialize_on_the_first_call_as_in_eager(
        build: Callable[[], nn.Module]) -> None:
    torch.manual_seed(0)
    m = build()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    shape = (2, 3) if isinstance(m[0], nn.LazyLinear) else (2, 3, 6, 6)
    for i in range(3):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(i))
        torch.manual_seed(i)
        a = jm(x)
        torch.manual_seed(i)
        _same(a, e(x))
    assert thunder_ir.cache_misses(jm) == 1  # the first call ran eagerly, as eager's does


# ------------------------------------------------------------------- numbers the module keeps
#
# An ``int`` attribute that changes between calls (``self.calls += 1``) is a symbolic number
# from its second value on, as an ``int`` argument is (`thunder_ir.runtime.symbolic_attrs`):
# 0 and 1 get programs of their own, every other value runs one program, which reads the
# attribute on each call and writes back what the call computed.


def _misses(jm: Any) -> int:
    return thunder_ir.cache_misses(jm)  # type: ignore[no-any-return]


def test_a_counter_in_module_state_is_one_symbolic_program() -> None:
    torch.manual_seed(0)
    m = Counter()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(20):
            x = torch.randn(2, 3)
            _same(jm(x), e(x))
            assert type(m.calls) is int and m.calls == e.calls == i + 1
    assert not [w for w in caught if "thunder_ir.jit" in str(w.message)]
    assert _misses(jm) == 3  # calls == 0, calls == 1, then one program for every value
    assert jm._compiled.symbolic_failures == []
    assert "self_calls" in thunder_ir.last_traces(jm)[-1].source  # a program input
    assert "m0.calls" in thunder_ir.last_prologue_traces(jm)[0]  # its value: in the key
    m.calls = 1000  # set from outside: read on the next call, no compile
    e.calls = 1000
    x = torch.randn(2, 3)
    _same(jm(x), e(x))
    assert m.calls == e.calls == 1001 and _misses(jm) == 3


class Stepper(nn.Module):
    """A step counter used as a size-free scalar (int and float) and in ``arange``, a
    number computed from it and stored, and a constant ``int`` attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.step = 0
        self.width = 3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.step += 1
        self.double = self.step * 2
        return x * (self.step / 4) + torch.arange(self.step, self.step + self.width)


def test_a_counter_in_arange_and_as_a_scalar() -> None:
    m = Stepper()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for _ in range(10):
        x = torch.randn(3)
        _same(jm(x), e(x))
        assert vars(m).keys() == vars(e).keys()
        assert m.step == e.step and type(m.double) is int and m.double == e.double
    assert _misses(jm) == 3 and jm._compiled.symbolic_failures == []
    # the constant attribute stays a guarded constant: not read by the key
    assert {a.label for a in jm._compiled.keyer.attrs.attrs} == {"self.step", "self.double"}
    assert "width" not in thunder_ir.last_prologue_traces(jm)[0].split("# The key")[0]


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Stepper()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        return self.lin(self.inner(x)), self.inner.step


def test_a_counter_in_a_submodule_and_returned() -> None:
    torch.manual_seed(0)
    m = Outer()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    with torch.no_grad():
        for _ in range(8):
            x = torch.randn(2, 3)
            (a, n), (b, k) = jm(x), e(x)
            _same(a, b)
            assert type(n) is int and n == k == m.inner.step == e.inner.step
    assert _misses(jm) == 3 and jm._compiled.symbolic_failures == []


def test_a_counter_in_training() -> None:
    """Forward and backward with the counter: the backward's scalar is this call's too
    (the symbolic number is a residual)."""
    torch.manual_seed(0)
    m = Counter()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for _ in range(8):
        x = torch.randn(2, 3, requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        jm(x).pow(2).sum().backward()
        e(xe).pow(2).sum().backward()
        _same(x.grad, xe.grad)
        _same(m.lin.weight.grad, e.lin.weight.grad)
        _same(m.lin.bias.grad, e.lin.bias.grad)
    assert m.calls == e.calls == 8
    assert _misses(jm) == 3 and jm._compiled.symbolic_failures == []


def test_a_static_cache_compiles_per_value() -> None:
    torch.manual_seed(0)
    m = Counter()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m, cache="static")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the recompile warning: expected here
        for _ in range(10):
            x = torch.randn(2, 3)
            _same(jm(x), e(x))
    assert m.calls == e.calls == 10
    assert _misses(jm) == 10 and jm._compiled.keyer.attrs.attrs == []


class Threshold(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 5:
            return x * 2
        return x - self.calls


def test_a_counter_in_control_flow_recompiles_at_the_threshold() -> None:
    """``if self.calls > 5`` is a guard of the symbolic program: the value that crosses
    it compiles the other branch, once."""
    m = Threshold()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for _ in range(12):
        x = torch.randn(3)
        _same(jm(x), e(x))
        assert m.calls == e.calls
    assert _misses(jm) == 4  # 0, 1, the symbolic program up to 4, the one from 5 on
    assert "a1" in thunder_ir.last_prologue_traces(jm)[0].split("def shape_guard")[1]


class Branchy(nn.Module):
    """A counter next to a data-dependent branch (speculated: `tir.assume`)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if x.sum() > 0:
            return x * self.calls
        return x - self.calls


def test_a_counter_next_to_a_data_dependent_branch() -> None:
    """A symbolic program's speculation variants are symbolic too (each run where its
    shape guard holds): the branch a call takes computes with that call's counter."""
    torch.manual_seed(0)
    m = Branchy()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)

    def f(x: torch.Tensor, step: int) -> torch.Tensor:
        return x * step if x.sum() > 0 else x - step

    jf = thunder_ir.jit(f)
    for i in range(20):
        x = torch.randn(3) + (2.0 if i % 3 else -2.0)
        _same(jm(x), e(x))
        _same(jf(x, i), f(x, i))
        assert m.calls == e.calls
    assert _misses(jm) <= 5 and jm._compiled.symbolic_failures == []


class Failing(nn.Module):
    """Counts, remembers, then raises for long inputs (after its writes, as eager does)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.history: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.history.append(self.calls + 10)
        if x.shape[0] > 3:
            raise ValueError("too long")
        return x * self.calls


def test_the_module_is_left_as_eager_leaves_it_after_an_exception() -> None:
    m = Failing()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for n in (2, 2, 2, 5, 2, 5, 2, 2):
        x = torch.randn(n)
        if n > 3:
            with pytest.raises(ValueError, match="too long"):
                jm(x)
            with pytest.raises(ValueError, match="too long"):
                e(x)
        else:
            _same(jm(x), e(x))
        assert vars(m).keys() == vars(e).keys()
        assert m.calls == e.calls and m.history == e.history
        assert type(m.calls) is int and all(type(v) is int for v in m.history)
        _no_proxy(m, "m")
    assert jm._compiled.symbolic_failures == []  # the user's error is not symbolic's


def test_a_symbolic_int_argument_written_or_returned_is_an_int() -> None:
    """What a call computes from a symbolic ``int`` argument and stores or returns is that
    call's number (not the trace's ``SymInt``)."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor, step: int) -> tuple[torch.Tensor, int]:
            self.last = step + 1
            return x * step, step * 2

    m = M()
    jm = thunder_ir.jit(m)
    for step in range(2, 7):
        x = torch.randn(3)
        out, twice = jm(x, step)
        _same(out, x * step)
        assert type(twice) is int and twice == 2 * step
        assert type(m.last) is int and m.last == step + 1
    # step 2; step 3 (symbolic); ``self.last`` is written before it is read, so it is not
    # in the key (`thunder_ir.runtime.free_attrs`): then one program
    assert _misses(jm) == 2 and jm._compiled.symbolic_failures == []


# --------------------------------------------------------------------------- no proxy escapes


GLOBAL_STASH: dict[str, Any] = {}


def test_a_traced_tensor_written_to_a_global_raises_naming_where() -> None:
    def leak(x: torch.Tensor) -> torch.Tensor:
        GLOBAL_STASH["a"] = x * 2
        return x

    GLOBAL_STASH.clear()
    with pytest.raises(thunder_ir.ThunderTraceError,
                       match=r"a traced tensor was left in the global .*GLOBAL_STASH\['a'\]"):
        thunder_ir.jit(leak)(torch.ones(2))
    assert GLOBAL_STASH == {}  # the traced tensor was taken out again


COUNT = 0
FLAG = False
LAST: torch.Tensor | None = None


def test_global_writes_happen_on_every_call_as_in_eager() -> None:
    """``global g; g = ...``: a counter, a flag and a tensor written to module globals
    reach them on every call (cached calls included), with real tensors."""
    global COUNT, FLAG, LAST

    def step(x: torch.Tensor) -> torch.Tensor:
        global COUNT, FLAG, LAST
        COUNT += 1
        FLAG = True
        LAST = x * 2
        return x * COUNT

    COUNT, FLAG, LAST = 0, False, None
    jf = thunder_ir.jit(step)
    for i in range(1, 4):
        x = torch.randn(3)
        FLAG = False
        _same(jf(x), x * i)
        assert i == COUNT and FLAG is True
        assert type(LAST) is torch.Tensor
        _same(LAST, x * 2)


def test_a_failed_trace_leaves_no_traced_tensor_in_a_global() -> None:
    global LAST
    before = LAST = torch.zeros(1)

    def bad(x: torch.Tensor) -> torch.Tensor:
        global LAST
        LAST = x * 3
        raise ValueError("the user's own error")

    with pytest.raises(ValueError, match="the user's own error"):
        thunder_ir.jit(bad)(torch.ones(2))
    assert LAST is before


def test_a_returned_object_holding_tensors_is_made_on_each_call() -> None:
    def pack(x: torch.Tensor) -> Any:
        out = types.SimpleNamespace(y=x * 2, parts=[x + 1])
        return out

    j = thunder_ir.jit(pack)
    for i in range(2):
        x = torch.full((2,), float(i))
        got = j(x)
        _no_proxy(got)
        _same(got.y, x * 2)
        _same(got.parts[0], x + 1)


# --------------------------------------------------------------------------- Hugging Face

T = pytest.importorskip("transformers")
H, V, L = 64, 128, 8
_DEC = {"hidden_size": H, "intermediate_size": 2 * H, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": V,
        "max_position_embeddings": 64, "pad_token_id": 0}


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _families() -> dict[str, Callable[[], nn.Module]]:
    return {
        "llama": lambda: T.LlamaForCausalLM(T.LlamaConfig(**_DEC)),
        "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(
            n_embd=H, n_layer=2, n_head=4, vocab_size=V, n_positions=64, pad_token_id=0)),
        "bert": lambda: T.BertForMaskedLM(T.BertConfig(
            hidden_size=H, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=2 * H, vocab_size=V, max_position_embeddings=64)),
    }


@pytest.mark.parametrize("family", ["llama", "gpt2", "bert"])
def test_the_users_model_is_left_as_eager_leaves_it(family: str) -> None:
    """After jitted calls with output_hidden_states / output_attentions / return_dict
    variants at several lengths, the model called eagerly behaves as a model only ever
    called eagerly."""
    torch.manual_seed(0)
    model = _families()[family]().eval()
    fresh = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    ids = torch.randint(1, V, (2, L), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for n, kw in ((L, {"output_hidden_states": True}),
                      (L - 2, {"output_hidden_states": True, "output_attentions": True}),
                      (L, {"return_dict": False}), (L - 3, {"output_hidden_states": True})):
            got, want = jm(input_ids=ids[:, :n], **kw), fresh(input_ids=ids[:, :n], **kw)
            got, want = (got.to_tuple(), want.to_tuple()) if kw.get("return_dict", True) \
                else (got, want)
            assert len(got) == len(want)
            torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5)
            if kw.get("output_hidden_states"):
                assert len(got[-1 if "output_attentions" not in kw else -2]) == len(
                    want[-1 if "output_attentions" not in kw else -2])
        after, ref = model(input_ids=ids, output_hidden_states=True), \
            fresh(input_ids=ids, output_hidden_states=True)
        assert len(after.hidden_states) == len(ref.hidden_states)
        torch.testing.assert_close(after.logits, ref.logits, rtol=1e-5, atol=1e-6)
    _no_proxy(model)


def _generation_models() -> dict[str, Callable[[], nn.Module]]:
    return {
        "llama": lambda: T.LlamaForCausalLM(T.LlamaConfig(**_DEC)),
        "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(
            n_embd=H, n_layer=2, n_head=4, vocab_size=V, n_positions=64,
            pad_token_id=0)),
        "t5": lambda: T.T5ForConditionalGeneration(T.T5Config(
            d_model=H, d_ff=2 * H, num_layers=2, num_heads=4, d_kv=16, vocab_size=V,
            pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)),
    }


@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize("family", ["llama", "gpt2", "t5"])
def test_generate_gives_eagers_tokens(family: str, sample: bool) -> None:
    """``jit(model).generate(...)`` (each step's forward compiled) and
    ``model.forward = thunder_ir.jit(model.forward)`` give eager's tokens with the default
    dynamic cache (the encoder-decoder cache for T5), greedy and sampled with a seed."""
    torch.manual_seed(0)
    model = _generation_models()[family]().eval()
    model.generation_config.pad_token_id = 0
    ids = torch.randint(2, V, (1, 5), generator=torch.Generator().manual_seed(1))
    kw = {"max_new_tokens": 6, "do_sample": sample, "top_k": 8}
    torch.manual_seed(3)
    ref = model.generate(ids, **kw)
    jm = thunder_ir.jit(copy.deepcopy(model))
    torch.manual_seed(3)
    assert torch.equal(jm.generate(ids, **kw), ref)
    assert thunder_ir.cache_misses(jm.__dict__["_forward_jit"]) > 0  # it compiled
    assert "forward" not in jm._model.__dict__  # the model's own forward again
    other = copy.deepcopy(model)
    other.forward = thunder_ir.jit(other.forward)
    torch.manual_seed(3)
    assert torch.equal(other.generate(ids, **kw), ref)


@pytest.mark.parametrize("family", ["llama", "gpt2", "t5"])
def test_a_static_cache_compiles_prefill_and_decode_once_each(family: str) -> None:
    """Eager's tokens, and two programs for the whole loop (T5's encoder runs outside the
    decoder's forward, as in eager)."""
    torch.manual_seed(0)
    model = _generation_models()[family]().eval()
    model.generation_config.pad_token_id = 0
    ids = torch.randint(2, V, (1, 5), generator=torch.Generator().manual_seed(1))
    ref = model.generate(ids, max_new_tokens=8, do_sample=False, cache_implementation="static")
    jm = thunder_ir.jit(copy.deepcopy(model))
    out = jm.generate(ids, max_new_tokens=8, do_sample=False, cache_implementation="static")
    assert torch.equal(out, ref)
    assert thunder_ir.cache_misses(jm.__dict__["_forward_jit"]) == 2


def test_jit_of_a_modules_forward_is_guarded_like_jit_of_the_module() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    m.forward = thunder_ir.jit(m.forward)
    x = torch.randn(2, 3)
    _same(m(x), nn.Sequential.forward(m, x))
    m[0] = nn.Linear(3, 3)  # a new submodule: a new program
    _same(m(x), nn.Sequential.forward(m, x))
    assert thunder_ir.cache_misses(m.forward) == 2


# --------------------------------------------------------------------------- torch.func


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


class TinyAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.out = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, dim=-1) @ v
        return self.out(torch.nn.functional.layer_norm(a + x, (8,))).mean(-2)


@pytest.mark.parametrize("build,shape", [(_mlp, (4,)), (TinyAttention, (3, 8))],
                         ids=["mlp", "transformer"])
def test_per_sample_gradients_through_functional_call_of_a_jitted_module(
        build: Callable[[], nn.Module], shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = build()
    jm = thunder_ir.jit(copy.deepcopy(model))
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = torch.randn(5, *shape)
    y = torch.randn(5, 1)

    def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor,
             m: nn.Module) -> torch.Tensor:
        return ((functional_call(m, p, (xi.unsqueeze(0),)) - yi) ** 2).sum()

    want = vmap(grad(loss), in_dims=(None, 0, 0, None))(params, x, y, model)
    got = vmap(grad(loss), in_dims=(None, 0, 0, None))(params, x, y, jm)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=1e-5)
    _same(functional_call(jm, params, (x,)), functional_call(model, params, (x,)))


def test_grad_jacrev_and_vmap_over_a_jitted_function() -> None:
    def f(t: torch.Tensor) -> torch.Tensor:
        return torch.sin(t) * t

    jf = thunder_ir.jit(f)
    x = torch.randn(4)
    _same(grad(lambda t: jf(t).sum())(x), grad(lambda t: f(t).sum())(x))
    _same(jacrev(jf)(x), jacrev(f)(x))
    batch = torch.randn(3, 4)
    _same(vmap(jf)(batch), vmap(f)(batch))
    tangent = torch.randn(4)
    _same(jvp(jf, (x,), (tangent,)), jvp(f, (x,), (tangent,)))
    with pytest.raises(RuntimeError, match="higher-order gradients"):
        grad(grad(lambda t: jf(t).sum()))(torch.tensor(0.3))


def test_a_torch_func_transform_inside_jitted_code_is_refused_with_the_line() -> None:
    def inner(x: torch.Tensor) -> torch.Tensor:
        return torch.func.grad(lambda t: (t ** 2).sum())(x) + 1

    with pytest.raises(thunder_ir.ThunderTraceError,
                       match=r"test_python_state\.py:\d+: a torch.func transform"):
        thunder_ir.jit(inner)(torch.ones(3))
