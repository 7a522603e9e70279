"""Numbers inside argument objects as symbolic numbers (`thunder_ir.runtime.object_ints`).

An ``int`` field of an argument object (a plain object, or a list or dict inside one: a
Hugging Face cache layer's ``cumulative_length``) that changed between two calls that
missed the cache is a symbolic number from then on: read from the object on each call,
checked by the shape guard only where the trace decided something about it, and what the
traced code writes to it is computed on each call as eager computes it. Every test runs
the same calls eagerly on a copy and compares the results and the objects after each call.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

import thunder_ir
from thunder_ir.dialects.symbols import SymbolSource
from thunder_ir.runtime.object_ints import blank_ints, changed_ints, value_at
from thunder_ir.runtime.pins import previous_values
from thunder_ir.runtime.pystate import object_key, plain_object


def _misses(jf: Any) -> int:
    return thunder_ir.cache_misses(jf)  # type: ignore[no-any-return]


def _same_object(a: Any, b: Any, where: str = "obj") -> None:
    """``a`` (after the jitted calls) holds what ``b`` (after eager's) holds, field by
    field: the same types, numbers and tensors (values, dtype, shape, strides)."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(b, torch.Tensor):
        assert a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride(), where
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=where)
    elif isinstance(b, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_object(x, y, f"{where}[{i}]")
    elif isinstance(b, dict):
        assert a.keys() == b.keys(), where
        for k in b:
            _same_object(a[k], b[k], f"{where}[{k!r}]")
    elif plain_object(b):
        assert vars(a).keys() == vars(b).keys(), where
        for k in vars(b):
            _same_object(vars(a)[k], vars(b)[k], f"{where}.{k}")
    else:
        assert a == b, (where, a, b)


# ------------------------------------------------------------------ the keys' helpers


class _Layer:
    def __init__(self, n: int) -> None:
        self.n = n
        self.on = True
        self.t = torch.zeros(2)


class _Box:
    def __init__(self, n: int, count: int, pair: int = 2) -> None:
        self.layers = [_Layer(n), _Layer(7)]
        self.meta = {"count": count, "pair": (pair, pair)}


def test_changed_ints_finds_the_fields_that_changed_and_blank_ints_blanks_them() -> None:
    a, b = object_key(_Box(3, 5)), object_key(_Box(4, 5))
    path = (("attr", "layers"), ("item", 0), ("attr", "n"))
    assert changed_ints(a, b) == [path]
    pair = (("attr", "meta"), ("item", "pair"))
    assert changed_ints(a, object_key(_Box(3, 5, 3))) == [(*pair, ("item", 0)),
                                                          (*pair, ("item", 1))]
    assert value_at(blank_ints(a, [(*pair, ("item", 1))]), (*pair, ("item", 1))) is None
    c, d = _Box(3, 5), _Box(3, 5)
    c.meta[(1, 2)], d.meta[(1, 2)] = 4, 5  # a key the generated code would not spell
    assert changed_ints(object_key(c), object_key(d)) == []
    assert changed_ints(a, object_key(_Box(3, 9))) == [(("attr", "meta"), ("item", "count"))]
    assert value_at(a, path) == 3 and value_at(b, path) == 4
    assert blank_ints(a, [path]) == blank_ints(b, [path]) != a
    assert value_at(blank_ints(a, [path]), path) is None
    # 0 and 1 stay in the key (a program of their own each), unless every value is asked
    one = object_key(_Box(1, 5))
    assert blank_ints(one, [path]) == one and blank_ints(one, [path], every=True) != one
    # a symbol read from an object's field: its value in an earlier call, for the report of
    # a guard that fixes it
    assert previous_values({"s0": SymbolSource(0, None, path)}, [("object", a)]) == {"s0": 3}


# ------------------------------------------------------------------ plain Python objects


class State:
    """A write position and a buffer (a hand-written KV cache), a counter in an object in
    a list and one in a dict, and a number that never changes."""

    def __init__(self, pos: int) -> None:
        self.pos = pos
        self.buf = torch.zeros(40, 4)
        self.inner: list[Any] = [_Layer(2), {"count": 5, "fixed": 7}]


def step(x: torch.Tensor, st: State) -> tuple[torch.Tensor, int]:
    n = x.shape[0]
    st.buf[st.pos:st.pos + n] = x  # a slice bound
    st.pos += n
    st.inner[0].n = st.inner[0].n * 2 - 1
    st.inner[1]["count"] += 1
    seen = st.buf[:st.pos]  # a size
    out = seen.sum(0) * st.inner[1]["count"] + torch.arange(st.pos).sum()
    return out + st.inner[1]["fixed"], st.pos


def test_a_counter_in_an_argument_object_is_one_symbolic_program() -> None:
    jf = thunder_ir.jit(step)
    mine, theirs = State(3), State(3)
    for i in range(10):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        (a, p), (b, q) = jf(x, mine), step(x, theirs)
        torch.testing.assert_close(a, b)
        assert type(p) is int and p == q
        _same_object(mine, theirs)
    assert _misses(jf) == 2  # the first values, then one program for every value
    assert thunder_ir.compile_status(jf)["static"] == []
    src = thunder_ir.last_traces(jf)[-1].source
    assert "st_pos" in src and "fixed" not in src.split("\n  s0")[0]  # inputs: the counters
    mine.pos = 20  # set from outside: read on the next call, no compile
    theirs.pos = 20
    x = torch.randn(2, 4)
    (a, p), (b, q) = jf(x, mine), step(x, theirs)
    torch.testing.assert_close(a, b)
    _same_object(mine, theirs)
    assert _misses(jf) == 2


def test_values_0_and_1_are_programs_of_their_own() -> None:
    """As for an ``int`` argument: 0 and 1 stay in the key; the symbolic program serves
    every other value."""

    def count(x: torch.Tensor, st: State) -> torch.Tensor:
        st.pos += 1
        return x[: st.pos].sum() * st.pos

    jf = thunder_ir.jit(count)
    mine, theirs = State(0), State(0)
    for _ in range(8):
        x = torch.arange(12.0)
        torch.testing.assert_close(jf(x, mine), count(x, theirs))
        _same_object(mine, theirs)
    assert _misses(jf) == 3


def test_a_ring_buffer_position_that_wraps() -> None:
    """``pos = (pos + 1) % n`` and a branch on the position: each call's write position
    and branch are eager's, values 0 and 1 hit the programs compiled for them."""

    def ring(x: torch.Tensor, st: State) -> torch.Tensor:
        st.buf[st.pos] = x
        st.pos = (st.pos + 1) % 5
        if st.pos > 3:
            return st.buf[: st.pos].sum(0)
        return st.buf.sum(0) * st.pos

    jf = thunder_ir.jit(ring)
    mine, theirs = State(0), State(0)
    for i in range(17):
        x = torch.randn(4, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(jf(x, mine), ring(x, theirs))
        _same_object(mine, theirs)
    assert _misses(jf) == 4  # 0, 1, every other value below 4, then 4
    assert thunder_ir.compile_status(jf)["static"] == []  # (0 and 1 by design: not named)


def test_a_guard_that_fixes_the_number_is_named() -> None:
    """A list indexed by the counter fixes its value: right, one program per value, and
    `compile_status(jm)["static"]` says which guard fixes it."""

    def pick(x: torch.Tensor, st: State) -> torch.Tensor:
        st.pos += 1
        return x * [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5][st.pos]

    jf = thunder_ir.jit(pick)
    mine, theirs = State(2), State(2)
    for _ in range(4):
        x = torch.randn(3)
        torch.testing.assert_close(jf(x, mine), pick(x, theirs))
        _same_object(mine, theirs)
    static = " ".join(thunder_ir.compile_status(jf)["static"])
    assert "fixed by the guard" in static and "test_object_ints.py" in static, static


def test_a_counter_in_training() -> None:
    """Forward and backward with the counter as a scalar: the backward's is this call's."""
    w = torch.randn(4, requires_grad=True)
    we = w.detach().clone().requires_grad_()

    def f(x: torch.Tensor, st: State, w: torch.Tensor) -> torch.Tensor:
        st.pos += 2
        return (x[: st.pos] * w).pow(2).sum() / st.pos

    jf = thunder_ir.jit(f)
    mine, theirs = State(3), State(3)
    for i in range(6):
        x = torch.randn(20, 4, generator=torch.Generator().manual_seed(i))
        jf(x, mine, w).backward()
        f(x, theirs, we).backward()
        torch.testing.assert_close(w.grad, we.grad)
        _same_object(mine, theirs)
    assert _misses(jf) == 2


def test_the_users_error_after_a_write_leaves_the_object_as_eager_does() -> None:
    """A call past the symbolic program's guard raises the user's error, with the write
    made before it made, as eager's call makes it."""

    def f(x: torch.Tensor, st: State) -> torch.Tensor:
        st.pos += 1
        if st.pos > 6:
            raise ValueError(f"past the end: {st.pos}")
        return x * st.pos

    jf = thunder_ir.jit(f)
    mine, theirs = State(2), State(2)
    for _ in range(7):
        x = torch.randn(3)
        if theirs.pos + 1 > 6:
            with pytest.raises(ValueError, match=f"past the end: {theirs.pos + 1}"):
                f(x, theirs)
            with pytest.raises(ValueError, match=f"past the end: {mine.pos + 1}"):
                jf(x, mine)
        else:
            torch.testing.assert_close(jf(x, mine), f(x, theirs))
        _same_object(mine, theirs)
    assert _misses(jf) == 2


class _Counted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor, st: State, k: int) -> torch.Tensor:
        self.calls += 1
        st.pos += k
        return self.lin(x[: st.pos]).sum(0) * self.calls + k


def test_with_a_module_counter_and_an_int_argument() -> None:
    """An object's counter beside the module's own and an ``int`` argument: three kinds
    of symbolic numbers in one program."""
    torch.manual_seed(0)
    m = _Counted()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    mine, theirs = State(2), State(2)
    for i in range(8):
        x = torch.randn(40, 4)
        k = 2 + i % 3
        torch.testing.assert_close(jm(x, mine, k), e(x, theirs, k))
        _same_object(mine, theirs)
        assert type(m.calls) is int and m.calls == e.calls
    assert _misses(jm) == 3  # the module's counter at 0 and 1, then every value


def test_a_long_decode_does_not_evict_the_prefill() -> None:
    """Each new value a symbolic program serves is entered under its exact key (the next
    call with it is a plain hit): 200 decode steps make 200 such entries, more than the
    cache holds. They are evicted first, not the prefill's program: the next sequence's
    prefill compiles nothing."""
    from thunder_ir.runtime.cache import CACHE_CAPACITY

    def f(x: torch.Tensor, st: State) -> torch.Tensor:
        n = x.shape[0]
        st.pos += n
        return x.view(n, 2, 2).sum(0) * st.pos  # (a view: found by its layout too)

    jf = thunder_ir.jit(f)
    for _ in range(2):
        mine, theirs = State(0), State(0)
        x = torch.randn(6, 4)
        torch.testing.assert_close(jf(x, mine), f(x, theirs))  # the prefill
        for _ in range(CACHE_CAPACITY + 136):
            x = torch.randn(1, 4)
            torch.testing.assert_close(jf(x, mine), f(x, theirs))
        _same_object(mine, theirs)
    assert _misses(jf) == 2  # the prefill, one decode program for every position


class Spans:
    """Counters and a tensor inside tuples: a ``(start, stop)`` span rebound on every call,
    a tuple of (tensor, count) pairs in a list, and a fixed tuple."""

    def __init__(self, start: int, w: torch.Tensor) -> None:
        self.span = (start, start + 3)
        self.pairs = [(w, 2), (w.detach() * 2, 5)]
        self.fixed = ("name", 7)


def spans(x: torch.Tensor, st: Spans) -> torch.Tensor:
    a, b = st.span
    out = x[a:b].sum(0) * st.pairs[0][1] + st.pairs[1][0] * st.fixed[1]
    st.span = (b, b + st.pairs[1][1] - 2)
    st.pairs[0] = (st.pairs[0][0], st.pairs[0][1] + 1)
    return out * st.pairs[0][0]


def test_ints_and_tensors_inside_tuples_of_an_argument_object() -> None:
    """The ``int``s of tuples inside an argument object are symbolic numbers as any other
    field (a program for the first values, one for every later value), the tensors in
    them program inputs read through the tuple (a new tensor there is read, not a new
    program); training through them as eager, and the object after each call eager's."""
    w = torch.randn(4, requires_grad=True)
    we = w.detach().clone().requires_grad_()
    jf = thunder_ir.jit(spans)
    mine, theirs = Spans(0, w), Spans(0, we)
    for i in range(6):
        x = torch.randn(40, 4, generator=torch.Generator().manual_seed(i))
        a, b = jf(x, mine), spans(x, theirs)
        torch.testing.assert_close(a, b)
        a.sum().backward()
        b.sum().backward()
        torch.testing.assert_close(w.grad, we.grad)
        _same_object(mine, theirs)
        assert type(mine.span[0]) is int and mine.span == theirs.span
    assert _misses(jf) == 2
    assert thunder_ir.compile_status(jf)["static"] == []
    v = torch.randn(4)  # a new tensor in the tuple: read from it, no compile
    mine.pairs[1], theirs.pairs[1] = (v, 5), (v, 5)
    x = torch.randn(40, 4)
    torch.testing.assert_close(jf(x, mine), spans(x, theirs))
    _same_object(mine, theirs)
    assert _misses(jf) == 2


class Tail:
    def __init__(self) -> None:
        self.buf = torch.zeros(1, 3)


def tail(x: torch.Tensor, st: Tail) -> torch.Tensor:
    full = torch.cat([st.buf, x])
    st.buf = full[-4:]  # the last four rows: all of them until there are more
    return full.sum(0) * full.shape[0]


def test_a_window_that_fills_then_slides_is_one_program() -> None:
    """``full[-4:]`` of a symbolic length is ``full[max(n - 4, 0):]`` without a decision
    (`thunder_ir.dialects.symbols.slice_indices`): the lengths below the window and from
    it on run one program (the length equal to the window compiled one of its own)."""
    jf = thunder_ir.jit(tail)
    mine, theirs = Tail(), Tail()
    for i in range(7):
        x = torch.randn(1, 3, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(jf(x, mine), tail(x, theirs))
        _same_object(mine, theirs)
    assert _misses(jf) == 2  # length 1 (a program of its own), then every length


# ------------------------------------------------------------------ Hugging Face caches


def _tiny(family: str) -> Any:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    common = {"vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 256}
    if family == "mistral":
        model = transformers.MistralForCausalLM(
            transformers.MistralConfig(**common, sliding_window=4))
    elif family == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
            **common, sliding_window=4, use_sliding_window=True, max_window_layers=1))
    elif family == "phi3":
        model = transformers.Phi3ForCausalLM(transformers.Phi3Config(
            **common, sliding_window=4, pad_token_id=0, eos_token_id=2))
    elif family == "cohere2":
        model = transformers.Cohere2ForCausalLM(transformers.Cohere2Config(
            **common, sliding_window=4, eos_token_id=2,
            layer_types=["sliding_attention", "full_attention"]))
    elif family == "gemma2":
        model = transformers.Gemma2ForCausalLM(
            transformers.Gemma2Config(**common, head_dim=8, sliding_window=4))
    elif family == "gemma3":
        model = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(
            **common, head_dim=8, sliding_window=4,
            layer_types=["sliding_attention", "full_attention"]))
    else:
        model = transformers.RecurrentGemmaForCausalLM(transformers.RecurrentGemmaConfig(
            vocab_size=128, hidden_size=32, intermediate_size=64, lru_width=32,
            num_attention_heads=2, num_key_value_heads=2, head_dim=16,
            num_hidden_layers=2, attention_window_size=4,
            block_types=["recurrent", "attention"]))
    model.generation_config.pad_token_id = 0
    return model.eval()


@pytest.mark.parametrize("family", ["mistral", "gemma2", "gemma3", "recurrent_gemma"])
def test_a_sliding_window_cache_decodes_without_a_compile_per_call(family: str) -> None:
    """A decode loop over a ``DynamicCache`` whose sliding-window layers count the tokens
    seen (``cumulative_length``): eager's logits, and the cache object holds what eager's
    does after every call; the prefill, then one decode program (the first decode step
    reads the cache the prefill left, whose window is a slice of a longer tensor: its
    strides differ from every later step's, but the program reads them by class only,
    `thunder_ir.runtime.layout_key`; RecurrentGemma's convolution state, transposed after
    the prefill and contiguous after a step, reaches only a 3-d ``cat``, whose result is
    contiguous whatever its operands)."""
    from transformers import DynamicCache

    model = _tiny(family)
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    ids = torch.randint(3, 128, (1, 6), generator=torch.Generator().manual_seed(1))
    caches = [DynamicCache(config=model.config), DynamicCache(config=model.config)]
    mask = {"sliding_attention": None} if family == "recurrent_gemma" else None
    with torch.no_grad():
        outs = [fn(ids, position_ids=torch.arange(6)[None], attention_mask=mask,
                   past_key_values=c, use_cache=True)
                for fn, c in ((jm, caches[0]), (eager, caches[1]))]
        for n in range(6, 18):
            torch.testing.assert_close(outs[0].logits, outs[1].logits)
            _same_object(caches[0], caches[1], "past_key_values")
            tok = outs[1].logits[:, -1:].argmax(-1)
            outs = [fn(tok, position_ids=torch.tensor([[n]]), attention_mask=mask,
                       past_key_values=c, use_cache=True)
                    for fn, c in ((jm, caches[0]), (eager, caches[1]))]
    torch.testing.assert_close(outs[0].logits, outs[1].logits)
    _same_object(caches[0], caches[1], "past_key_values")
    assert {layer.cumulative_length for layer in caches[0].layers
            if hasattr(layer, "cumulative_length")} == {18}
    assert _misses(jm) == 2
    static = " ".join(thunder_ir.compile_status(jm)["static"])
    assert "cumulative_length" not in static, static


@pytest.mark.parametrize("family", ["mistral", "gemma2", "gemma3", "qwen2", "phi3", "cohere2",
                                    "recurrent_gemma"])
def test_generate_with_a_sliding_window_cache(family: str) -> None:
    """``generate()`` of 12 tokens: eager's tokens from the prefill and one decode program;
    the same loop again compiles nothing."""
    model = _tiny(family)
    ids = torch.randint(3, 128, (1, 6), generator=torch.Generator().manual_seed(2))
    kw = {"max_new_tokens": 12, "min_new_tokens": 12, "do_sample": False}
    ref = model.generate(ids, **kw)
    jm = thunder_ir.jit(copy.deepcopy(model))
    assert torch.equal(jm.generate(ids, **kw), ref)
    assert _misses(jm) == 2
    before = _misses(jm)
    assert torch.equal(jm.generate(ids, **kw), ref)
    assert _misses(jm) == before


def test_generate_with_a_window_longer_than_the_prompt() -> None:
    """A window of 16 over a prompt of 6 fills while 12 tokens are generated: eager's
    tokens in 4 programs (it took 5): the prefill; the steps while the window fills (its
    slice ``[-15:]`` no longer decides whether the window is full,
    `test_a_window_that_fills_then_slides_is_one_program`); the step at 15 tokens, where
    Hugging Face's ``_ignore_causal_mask_sdpa`` branches on ``kv_length >= 16``
    (``n + 1``) while ``get_mask_sizes``'s ``is_full`` (``n >= 16``) is still false: user
    control flow that only 15 satisfies (its ``max(n - 15, 0)`` no longer decides:
    `thunder_ir.frontend.symbolic_minmax`); the full window from then on (its keys a slice
    of a longer tensor, read by class only, as the first steps' contiguous ones)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.MistralForCausalLM(transformers.MistralConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        sliding_window=16)).eval()
    model.generation_config.pad_token_id = 0
    ids = torch.randint(3, 128, (1, 6), generator=torch.Generator().manual_seed(2))
    kw = {"max_new_tokens": 12, "min_new_tokens": 12, "do_sample": False}
    ref = model.generate(ids, **kw)
    jm = thunder_ir.jit(copy.deepcopy(model))
    assert torch.equal(jm.generate(ids, **kw), ref)
    assert _misses(jm) == 4


@pytest.mark.parametrize("family", ["mistral", "gemma2"])
def test_generate_with_a_static_sliding_window_cache(family: str) -> None:
    """``cache_implementation="static"``: the sliding layers count tokens in an ``int``
    (``cumulative_length_int``): eager's tokens, the prefill and one decode program (it
    compiled one per token)."""
    model = _tiny(family)
    ids = torch.randint(3, 128, (1, 6), generator=torch.Generator().manual_seed(3))
    kw = {"max_new_tokens": 12, "min_new_tokens": 12, "do_sample": False,
          "cache_implementation": "static"}
    ref = model.generate(ids, **kw)
    jm = thunder_ir.jit(copy.deepcopy(model))
    assert torch.equal(jm.generate(ids, **kw), ref)
    assert _misses(jm) <= 2


class _Memo:
    """A plain object a module holds, with counters ``forward`` bumps."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.rows = calls
        self.name = "memo"


class _Counting(torch.nn.Module):
    def __init__(self, start: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.mem = _Memo(start)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.mem.calls += 1
        self.mem.rows += x.shape[0]
        return self.lin(x) * self.mem.calls + self.mem.rows


def test_a_counter_in_a_plain_object_of_the_module_is_one_symbolic_program() -> None:
    """``self.mem.calls += 1``, an ``int`` field of a plain object the module holds (one
    level), is symbolic as the module's own ``int`` attributes are: eager's values and
    fields after each call, 2 programs over 6 calls (it compiled one per value); a field
    set from outside is read on the next call; a new object compiles again, correctly."""
    torch.manual_seed(0)
    mine, ref = _Counting(10), _Counting(10)
    ref.load_state_dict(mine.state_dict())
    jm = thunder_ir.jit(mine)
    for _ in range(6):
        x = torch.randn(3, 4)
        torch.testing.assert_close(jm(x), ref(x))
        assert vars(mine.mem) == vars(ref.mem)
    assert _misses(jm) <= 2
    mine.mem.calls = ref.mem.calls = 50
    x = torch.randn(3, 4)
    torch.testing.assert_close(jm(x), ref(x))
    assert vars(mine.mem) == vars(ref.mem) and _misses(jm) <= 2
    mine.mem, ref.mem = _Memo(7), _Memo(7)
    for _ in range(3):
        x = torch.randn(3, 4)
        torch.testing.assert_close(jm(x), ref(x))
        assert vars(mine.mem) == vars(ref.mem)
