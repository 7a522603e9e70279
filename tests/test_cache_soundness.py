"""The cache is sound: state the trace read is guarded, aliasing is keyed, threads, copies.

Each test is written as a user would write the model: call the jitted module, change
something the forward reads, call again, and compare with eager. Changing nothing must not
recompile.
"""

from __future__ import annotations

import copy
import io
import math
import pickle
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import thunder_ir
from thunder_ir.runtime.cache import CACHE_CAPACITY, RECOMPILE_LIMIT

torch.manual_seed(0)


class Config:
    """A config object, as model code reads one (``self.config.use_relu``)."""

    def __init__(self) -> None:
        self.use_relu = True
        self.scale = 2.0


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale = 2.0
        self.use_relu = True
        self.mask_cache: torch.Tensor | None = None
        self.config = Config()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.n_layers = 3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x) * self.scale * self.config.scale
        if self.use_relu:
            h = torch.relu(h)
        if self.config.use_relu:
            h = torch.tanh(h)
        if self.mask_cache is not None:
            h = h + self.mask_cache
        for layer in self.layers[: self.n_layers]:
            h = layer(h)
        if self.training:
            h = h * 3
        return h


def _set(path: str, value: Any) -> Callable[[Net], None]:
    def change(m: Net) -> None:
        *owner, name = path.split(".")
        obj: Any = m
        for p in owner:
            obj = getattr(obj, p)
        setattr(obj, name, value)

    return change


def _hook(m: Net) -> None:
    m.fc.register_forward_hook(lambda mod, args, out: out * 10)


def _pre_hook(m: Net) -> None:
    m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))


def _global_hook(m: Net) -> None:
    handle = nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: out + 1 if isinstance(mod, nn.Linear) else None)
    m._test_handles = [handle]  # type: ignore[attr-defined]


def _removed_hook(m: Net) -> None:
    h = m.fc.register_forward_hook(lambda mod, args, out: out * 10)
    m(torch.randn(2, 4))
    h.remove()
    m.fc.register_forward_hook(lambda mod, args, out: out - 1)


def _hooks_cleared(m: Net) -> None:
    m.fc.register_forward_hook(lambda mod, args, out: out * 10)
    m(torch.randn(2, 4))
    m.fc._forward_hooks.clear()  # no handle involved: the hook count drops


def _new_weight(m: Net) -> None:
    m.fc.weight = nn.Parameter(torch.randn(4, 4))


def _append_layer(m: Net) -> None:
    m.layers.append(nn.Linear(4, 4))
    m.n_layers = 4


def _replace_layer(m: Net) -> None:
    m.layers[1] = nn.Linear(4, 4)


def _weight_no_grad(m: Net) -> None:
    m.fc.weight.requires_grad_(False)


CHANGES: dict[str, Callable[[Net], None]] = {
    "float attribute": _set("scale", 5.0),
    "bool attribute": _set("use_relu", False),
    "tensor attribute from None": _set("mask_cache", torch.ones(4)),
    "bias set to None": _set("fc.bias", None),
    "config object field": _set("config.use_relu", False),
    "config object float field": _set("config.scale", -0.0),
    "config object replaced": _set("config", Config()),
    "submodule replaced": _set("fc", nn.Linear(4, 4)),
    "ModuleList slice bound": _set("n_layers", 1),
    "ModuleList item replaced": _replace_layer,
    "ModuleList append": _append_layer,
    "parameter replaced": _new_weight,
    "parameter stops requiring grad": _weight_no_grad,
    "forward hook on a submodule": _hook,
    "forward pre-hook on the root": _pre_hook,
    "global module hook": _global_hook,
    "hook removed and another added": _removed_hook,
    "hook dict cleared": _hooks_cleared,
    "train to eval": lambda m: m.eval(),
}


@pytest.mark.parametrize("kind", list(CHANGES))
def test_state_changed_after_first_call_matches_eager(kind: str) -> None:
    m = Net()
    jm = thunder_ir.jit(m)
    x = torch.randn(2, 4)
    torch.testing.assert_close(jm(x), m(x))
    try:
        CHANGES[kind](m)
        torch.testing.assert_close(jm(x), m(x))
        misses = thunder_ir.cache_misses(jm)
        for _ in range(3):  # nothing changes: no new compile
            torch.testing.assert_close(jm(x), m(x))
        assert thunder_ir.cache_misses(jm) == misses
    finally:
        for h in getattr(m, "_test_handles", ()):
            h.remove()


def test_hook_present_at_the_first_call_then_removed() -> None:
    m = Net()
    handle = m.fc.register_forward_hook(lambda mod, args, out: out * 10)
    jm = thunder_ir.jit(m)
    x = torch.randn(2, 4)
    torch.testing.assert_close(jm(x), m(x))
    handle.remove()
    torch.testing.assert_close(jm(x), m(x))
    nn.Linear(2, 2).register_forward_hook(lambda *a: None)  # a handle made elsewhere
    misses = thunder_ir.cache_misses(jm)
    torch.testing.assert_close(jm(x), m(x))
    assert thunder_ir.cache_misses(jm) == misses


def test_assigning_through_the_jitted_module_changes_the_model() -> None:
    m = Net()
    jm = thunder_ir.jit(m)
    x = torch.randn(2, 4)
    jm(x)
    jm.fc = nn.Linear(4, 4)
    jm.scale = 3.0
    assert m.fc is jm.fc and m.scale == 3.0
    torch.testing.assert_close(jm(x), m(x))
    del jm.mask_cache
    assert not hasattr(m, "mask_cache")


def test_changing_back_hits_the_first_program() -> None:
    m = Net()
    jm = thunder_ir.jit(m)
    x = torch.randn(2, 4)
    jm(x)
    m.scale = 5.0
    jm(x)
    m.scale = 2.0
    torch.testing.assert_close(jm(x), m(x))
    assert thunder_ir.cache_misses(jm) == 2 and thunder_ir.cache_hits(jm) == 1


SCALE = 2.0
TABLE = {"shift": 1.0}


def scaled(x: torch.Tensor) -> torch.Tensor:
    return x * SCALE + TABLE["shift"]


def test_global_and_global_dict_changes_match_eager() -> None:
    global SCALE
    j = thunder_ir.jit(scaled)
    x = torch.randn(3)
    torch.testing.assert_close(j(x), scaled(x))
    try:
        SCALE = 3.0
        torch.testing.assert_close(j(x), scaled(x))
        TABLE["shift"] = -4.0
        torch.testing.assert_close(j(x), scaled(x))
        misses = thunder_ir.cache_misses(j)
        j(x)
        assert thunder_ir.cache_misses(j) == misses
        assert "_tokens" in thunder_ir.last_prologue_traces(j)[0]
    finally:
        SCALE = 2.0
        TABLE["shift"] = 1.0


def _helper_reads_global(x: torch.Tensor) -> torch.Tensor:
    return x + _offset()


def _offset() -> float:  # pure Python: the trace sees no torch call in this frame
    return SCALE * 10


def test_global_read_by_a_helper_without_torch_calls_is_guarded() -> None:
    global SCALE
    j = thunder_ir.jit(_helper_reads_global)
    x = torch.randn(3)
    j(x)
    try:
        SCALE = 7.0
        torch.testing.assert_close(j(x), _helper_reads_global(x))
    finally:
        SCALE = 2.0


def test_global_names_read_from_bytecode_match_dis() -> None:
    """The guards' own bytecode reading finds exactly the names ``dis`` lists, for every
    function of torch.nn and for one whose name indexes need ``EXTENDED_ARG``."""
    import dis
    import types

    from thunder_ir.runtime import guards

    many = "\n".join(f"    g{i} = x{i}" for i in range(300))
    scope: dict[str, Any] = {}
    exec(f"def wide():\n    global g7, g299\n{many}\n    del g7\n    return x299.y\n", scope)
    codes: list[types.CodeType] = [scope["wide"].__code__]
    for mod in (torch.nn.functional, torch.nn.modules.module, torch.nn.modules.linear):
        codes += [f.__code__ for f in vars(mod).values() if isinstance(f, types.FunctionType)]
    for ops in (("LOAD_GLOBAL", "LOAD_NAME"), ("STORE_GLOBAL", "DELETE_GLOBAL")):
        for code in codes:
            expected = frozenset(str(i.argval) for i in dis.get_instructions(code)
                                 if i.opname in ops)
            assert guards._names_of(code, ops) == expected, (code, ops)
    assert guards.global_stores(scope["wide"].__code__) == {"g7", "g299"}
    assert "x299" in guards.global_loads(scope["wide"].__code__)


def test_closure_cell_change_matches_eager() -> None:
    k = 2.0

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * k

    j = thunder_ir.jit(f)
    x = torch.randn(3)
    j(x)
    k = 5.0
    torch.testing.assert_close(j(x), f(x))


def test_no_recompile_for_module_slicing_and_loss_modules() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers[:2]:
                x = layer(x)
            return nn.MSELoss()(x, torch.zeros_like(x))

    m = M()
    jm = thunder_ir.jit(m)
    x = torch.randn(2, 4)
    for _ in range(5):
        torch.testing.assert_close(jm(x), m(x))
    assert thunder_ir.cache_misses(jm) == 1
    nn.Linear(2, 2)  # modules built elsewhere do not move our key
    jm(x)
    assert thunder_ir.cache_misses(jm) == 1


def test_step_counter_is_one_symbolic_program() -> None:
    """A Python ``int`` that changes on every call (a step counter) is a symbolic number
    from its second value on (automatic dynamic): 0 and 1 get programs of their own, every
    other value runs the symbolic one, and nothing warns."""
    def f(x: torch.Tensor, step: int) -> torch.Tensor:
        return x * step + torch.arange(step, step + 3)

    j = thunder_ir.jit(f)
    x = torch.randn(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(CACHE_CAPACITY + 6):
            torch.testing.assert_close(j(x, step), f(x, step))
    assert not [w for w in caught if "thunder_ir.jit" in str(w.message)]
    assert thunder_ir.cache_misses(j) == 3
    assert j.symbolic_failures == []


def test_step_counter_warns_once_and_the_cache_stays_bounded() -> None:
    """With ``cache="static"``, a program per value: the warning names the argument and
    the cache keeps the most recent programs."""
    def f(x: torch.Tensor, step: int) -> torch.Tensor:
        return x * step

    j = thunder_ir.jit(f, cache="static")
    x = torch.randn(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(CACHE_CAPACITY + 6):
            torch.testing.assert_close(j(x, step), f(x, step))
    msgs = [str(w.message) for w in caught if "thunder_ir.jit" in str(w.message)]
    assert len(msgs) == 1
    assert f"compiled {RECOMPILE_LIMIT + 1} programs" in msgs[0]
    assert "argument 'step'" in msgs[0] and "torch.tensor(step)" in msgs[0]
    assert caught[0].filename == __file__  # points at the user's call
    assert len(j.cache.entries) == CACHE_CAPACITY
    hits = thunder_ir.cache_hits(j)
    j(x, CACHE_CAPACITY + 5)  # the most recent: kept
    assert thunder_ir.cache_hits(j) == hits + 1
    j(x, 0)  # the oldest: evicted
    assert thunder_ir.cache_misses(j) == CACHE_CAPACITY + 7


def test_nan_hits_and_negative_zero_is_its_own_key() -> None:
    def f(x: torch.Tensor, c: float) -> torch.Tensor:
        return x / c

    j = thunder_ir.jit(f)
    x = torch.ones(2)
    torch.testing.assert_close(j(x, math.nan), f(x, math.nan), equal_nan=True)
    j(x, float("nan"))
    assert thunder_ir.cache_misses(j) == 1
    torch.testing.assert_close(j(x, 0.0), f(x, 0.0))
    torch.testing.assert_close(j(x, -0.0), f(x, -0.0))
    assert torch.equal(j(x, -0.0), torch.full((2,), -math.inf))


# ---- aliasing


def _write_a_read_b(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.add_(1)
    return b * 2


def test_same_tensor_as_two_arguments_with_a_write() -> None:
    j = thunder_ir.jit(_write_a_read_b)
    t, e = torch.zeros(3), torch.zeros(3)
    torch.testing.assert_close(j(t, t), _write_a_read_b(e, e))
    torch.testing.assert_close(t, e)
    u, v = torch.zeros(3), torch.zeros(3)  # distinct tensors: another program
    torch.testing.assert_close(j(u, v), torch.zeros(3))
    torch.testing.assert_close(u, torch.ones(3))
    assert thunder_ir.cache_misses(j) == 2


def _asymmetric(a: torch.Tensor, b: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
    return a * scale + b.T


def test_keyword_order_is_part_of_the_key() -> None:
    """``f(a=x, b=y)`` and ``f(b=y, a=x)`` flatten to the same leaves in another order:
    the second call must not run the program compiled for the first with its arguments
    swapped (tensor keywords take the fast path; a float keyword the general one)."""
    j = thunder_ir.jit(_asymmetric)
    x, y = torch.randn(3, 3), torch.randn(3, 3)
    for kwargs in ({"a": x, "b": y}, {"b": y, "a": x}, {"b": x, "a": y},
                   {"a": x, "b": y, "scale": 3.0}, {"scale": 3.0, "b": y, "a": x}):
        torch.testing.assert_close(j(**kwargs), _asymmetric(**kwargs), rtol=0, atol=0)
    torch.testing.assert_close(j(x, b=y), _asymmetric(x, b=y), rtol=0, atol=0)
    torch.testing.assert_close(j(x, y), _asymmetric(x, y), rtol=0, atol=0)
    hits = thunder_ir.cache_hits(j)
    j(b=y, a=x)  # an order seen before hits its program
    assert thunder_ir.cache_hits(j) == hits + 1


def test_views_of_one_another_as_arguments() -> None:
    """A write through one argument reaches another that shares its memory, and the key
    tells where they overlap: each overlap gets its own program."""
    j = thunder_ir.jit(_write_a_read_b)
    for parts in ((slice(0, 4), slice(0, 2)), (slice(0, 4), slice(2, 4)),
                  (slice(0, 4), slice(0, 2)), (slice(1, 3), slice(0, 4))):
        t_e, t_j = torch.zeros(4), torch.zeros(4)
        e = _write_a_read_b(t_e[parts[0]], t_e[parts[1]])
        torch.testing.assert_close(j(t_j[parts[0]], t_j[parts[1]]), e)
        torch.testing.assert_close(t_j, t_e)
    assert thunder_ir.cache_misses(j) == 3

    def read_only(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * 2 + b.sum()

    r = thunder_ir.jit(read_only)
    base = torch.randn(6)
    torch.testing.assert_close(r(base[:3], base[3:]), read_only(base[:3], base[3:]))
    torch.testing.assert_close(r(base, base.detach()), read_only(base, base.detach()))


# ---- threads


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def test_four_threads_first_calls_with_different_shapes() -> None:
    m = Small()
    jm = thunder_ir.jit(m, cache="static")  # a program per shape: one compile per key
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def work(rows: int) -> None:
        try:
            start.wait()
            for _ in range(100):
                x = torch.randn(rows, 8)
                with torch.no_grad():
                    torch.testing.assert_close(jm(x), m(x))
        except BaseException as e:  # reported below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(r,)) for r in (1, 2, 3, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert thunder_ir.cache_misses(jm) == 4


def test_concurrent_first_calls_of_one_key_compile_once() -> None:
    m = Small()
    jm = thunder_ir.jit(m)
    x = torch.randn(2, 8)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            torch.testing.assert_close(jm(x), m(x))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert thunder_ir.cache_misses(jm) == 1


def test_eager_call_of_the_original_during_a_trace_sees_real_parameters() -> None:
    in_trace, eager_done = threading.Event(), threading.Event()
    tracer: list[threading.Thread] = []

    class Waits(Small):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if threading.current_thread() in tracer and not in_trace.is_set():
                in_trace.set()
                assert eager_done.wait(30)
            return super().forward(x)

    m = Waits()
    jm = thunder_ir.jit(m)
    x = torch.randn(2, 8)
    out: list[torch.Tensor] = []
    t = threading.Thread(target=lambda: out.append(jm(x)))
    tracer.append(t)
    t.start()
    try:
        assert in_trace.wait(30)
        assert type(m.fc1.weight) is nn.Parameter
        assert isinstance(m.fc1.weight.data_ptr(), int)
        eager = m(x)
    finally:
        eager_done.set()
        t.join()
    torch.testing.assert_close(out[0], eager)


# ---- copies


def test_deepcopy_before_and_after_the_first_call_uses_its_own_parameters() -> None:
    m = Small()
    x = torch.randn(2, 8)
    before = copy.deepcopy(thunder_ir.jit(m))
    jm = thunder_ir.jit(m)
    jm(x)
    after = copy.deepcopy(jm)
    for c in (before, after):
        with torch.no_grad():
            c.fc1.weight.add_(1.0)
        torch.testing.assert_close(c(x), c._model(x))
        assert not torch.allclose(c(x), jm(x))
    torch.testing.assert_close(jm(x), m(x))
    assert thunder_ir.cache_misses(after) == 1


def test_pickle_and_torch_save_after_the_first_call() -> None:
    m = Small()
    jm = thunder_ir.jit(m)
    x = torch.randn(2, 8)
    jm(x)
    loaded = pickle.loads(pickle.dumps(jm))
    torch.testing.assert_close(loaded(x), jm(x))
    buf = io.BytesIO()
    torch.save(jm, buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=False)
    torch.testing.assert_close(saved(x), jm(x))
    assert saved.fc1.weight is not m.fc1.weight


def test_pickle_a_jitted_function() -> None:
    j = thunder_ir.jit(scaled)
    x = torch.randn(3)
    j(x)
    loaded = pickle.loads(pickle.dumps(j))
    torch.testing.assert_close(loaded(x), scaled(x))
    assert loaded.__name__ == "scaled"


# ---- state-dict hooks


def test_state_dict_hooks_registered_on_the_jitted_module() -> None:
    m = Small()
    jm = thunder_ir.jit(m)
    jm(torch.randn(2, 8))
    seen: list[str] = []

    def post(module: nn.Module, state: dict[str, Any], prefix: str, local: Any) -> None:
        seen.append("post")
        state["extra"] = torch.ones(1)

    def load_pre(module: nn.Module, state: dict[str, Any], *rest: Any) -> None:
        seen.append("load_pre")
        state.pop("extra", None)

    jm.register_state_dict_post_hook(post)
    jm.register_load_state_dict_pre_hook(load_pre)
    sd = jm.state_dict()
    assert "extra" in sd and seen == ["post"]
    sd["fc1.bias"] = torch.zeros(16)
    jm.load_state_dict(sd)
    assert seen == ["post", "load_pre"]
    x = torch.randn(2, 8)
    torch.testing.assert_close(jm(x), m(x))
    assert torch.equal(m.fc1.bias, torch.zeros(16))


# ---- eager's checks on in-place ops


def test_int_tensor_plus_equals_float_raises_eagers_error() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        a += 1.5
        return a

    t = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(RuntimeError, match=r"result type Float can't be cast to the desired "
                                           r"output type Long\n  at .*test_cache_soundness"):
        thunder_ir.jit(f)(t)
    assert torch.equal(t, torch.zeros(3, dtype=torch.int64))


def test_inplace_on_a_leaf_that_requires_grad_raises_eagers_error() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        a.add_(1)
        return a

    t = torch.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used "
                                           "in an in-place operation"):
        thunder_ir.jit(f)(t)
    assert torch.equal(t.detach(), torch.zeros(3))


def test_shape_rules_follow_the_default_dtype() -> None:
    """Result types that depend on the default dtype (Python floats, factories without a
    dtype) are inferred again under another default, not taken from a cache filled under
    the first: each call's dtypes are eager's."""
    mask = torch.tensor([[True, False], [False, True]])

    def f(x: torch.Tensor) -> torch.Tensor:
        return x + torch.where(mask, 0.0, -1.0) * torch.ones(2)

    x = torch.randn(2, 2)
    assert thunder_ir.jit(f)(x).dtype == f(x).dtype == torch.float32
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out, ref = thunder_ir.jit(f)(x), f(x)
        assert out.dtype == ref.dtype == torch.float64
        torch.testing.assert_close(out, ref)
    finally:
        torch.set_default_dtype(default)


def test_a_replaced_buffer_is_read_and_updated_after_the_first_call() -> None:
    """Running statistics replaced by a new tensor after the first call: the next call
    compiles again (the program binds the state it reads and writes), normalizes with the
    new tensor and updates it, as eager does."""
    bn = torch.nn.BatchNorm1d(3)
    eager = copy.deepcopy(bn)
    jm = thunder_ir.jit(bn)
    x = torch.randn(4, 3)
    jm(x), eager(x)
    bn.running_mean = torch.full((3,), 5.0)
    eager.running_mean = torch.full((3,), 5.0)
    assert torch.equal(jm(x), eager(x))
    assert torch.equal(bn.running_mean, eager.running_mean)
    assert thunder_ir.cache_misses(jm) == 2
