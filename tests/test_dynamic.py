"""Dynamic sizes: one program for every length (`thunder_ir.runtime.dynamic`,
`thunder_ir.dialects.symbols`), measured against eager."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import GPT2, Config, LlamaGPT

import thunder_ir
from thunder_ir.dialects import prims
from thunder_ir.dialects.symbols import SymbolSource, SymbolTable, hints
from thunder_ir.dialects.types import SUPPORTED_DTYPES, TensorType, tensor_type
from thunder_ir.testing import op_inputs, type_of

LENGTHS = (8, 13, 16, 31, 5, 24, 2, 47)
BATCHES = (2, 3, 5)


def _loss(out: object) -> torch.Tensor:
    logits = out[0] if isinstance(out, tuple) else out
    assert isinstance(logits, torch.Tensor)
    return logits.float().pow(2).mean()


@pytest.mark.parametrize("family", [LlamaGPT, GPT2], ids=["llama", "gpt2"])
def test_every_length_and_batch_compiles_at_most_twice(family: type) -> None:
    """8 lengths x 3 batch sizes, forward and backward: outputs and every gradient equal
    eager's, and automatic dynamic compiles twice (the first sizes, then symbolic)."""
    torch.manual_seed(0)
    cfg = Config()
    model = family(cfg)
    jm = thunder_ir.jit(model)
    for b in BATCHES:
        for t in LENGTHS:
            idx = torch.randint(0, cfg.vocab_size, (b, t))
            loss = _loss(jm(idx))
            loss.backward()
            got = [p.grad.clone() for p in model.parameters()]
            model.zero_grad(set_to_none=True)
            ref = _loss(model(idx))
            ref.backward()
            torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
            for g, p in zip(got, model.parameters(), strict=True):
                torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)
            model.zero_grad(set_to_none=True)
    assert thunder_ir.cache_misses(jm) <= 2
    assert jm._compiled.symbolic_failures == []


def test_symbolic_values_compiles_once_and_prints_symbols() -> None:
    """``cache="symbolic values"``: every size symbolic from the first call; traces print
    the symbols and the prologue shows the shape guard."""
    torch.manual_seed(0)
    cfg = Config()
    model = LlamaGPT(cfg)
    jm = thunder_ir.jit(model, cache="symbolic values")
    with torch.no_grad():
        for b, t in ((2, 8), (3, 13), (4, 40)):
            idx = torch.randint(0, cfg.vocab_size, (b, t))
            torch.testing.assert_close(jm(idx), model(idx), rtol=1e-5, atol=1e-6)
    assert thunder_ir.cache_misses(jm) == 1
    src = str(thunder_ir.last_traces(jm)[-1])
    assert 'idx: "cpu i64[s0, s1]"' in src
    assert "s1 = idx.shape[1]" in src
    guard = thunder_ir.last_prologue_traces(jm)[0]
    assert "def shape_guard(args):" in guard and "(a0.shape[1] >= 2)" in guard
    assert "(a0.shape[1] <= 64)" in guard  # the model's own check, `block_size < T`
    entry = jm._compiled.cache.last
    assert entry.shape_guard.checks[:3] == ["s0 >= 2", "s1 >= 2", "s1 <= 64"]
    ops = [op.name for op in next(iter(entry.shape_guard.ir.ops)).body.block.ops]
    assert ops == ["guard.symbol", "guard.symbol", "guard.shape_checks", "func.return"]


def test_mark_dynamic() -> None:
    """`thunder_ir.mark_dynamic` (and torch's own marks) make one dimension symbolic from
    the first call; the other stays static (a new batch size compiles again)."""
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x @ w, dim=-1) * x.shape[1]

    jf = thunder_ir.jit(f, cache="static")
    w = torch.randn(8, 4)
    for t in (3, 9, 17):
        x = torch.randn(2, t, 8)
        thunder_ir.mark_dynamic(x, 1)
        torch.testing.assert_close(jf(x, w), f(x, w))
    assert thunder_ir.cache_misses(jf) == 1
    x = torch.randn(5, 6, 8)
    torch._dynamo.mark_dynamic(x, 1)
    torch.testing.assert_close(jf(x, w), f(x, w))
    assert thunder_ir.cache_misses(jf) == 2  # the batch is static


def test_static_cache_compiles_per_size() -> None:
    jf = thunder_ir.jit(lambda x: x.sum(0) * 2, cache="static")
    for n in (3, 4, 5):
        x = torch.randn(n, 2)
        torch.testing.assert_close(jf(x), x.sum(0) * 2)
    assert thunder_ir.cache_misses(jf) == 3
    with pytest.raises(ValueError, match="unknown cache mode"):
        thunder_ir.jit(lambda x: x, cache="dynamic")


def test_a_size_the_guards_exclude_compiles_again() -> None:
    """Length 1 is not a symbolic size (a dynamic size is >= 2: as torch.compile, 0 and 1
    get programs of their own); a length past the model's own check raises eager's error
    from a new trace."""
    torch.manual_seed(0)
    cfg = Config()
    model = LlamaGPT(cfg)
    jm = thunder_ir.jit(model)
    with torch.no_grad():
        for t in (8, 12, 20):
            idx = torch.randint(0, cfg.vocab_size, (2, t))
            torch.testing.assert_close(jm(idx), model(idx), rtol=1e-5, atol=1e-6)
        assert thunder_ir.cache_misses(jm) == 2
        one = torch.randint(0, cfg.vocab_size, (2, 1))
        torch.testing.assert_close(jm(one), model(one), rtol=1e-5, atol=1e-6)
        assert thunder_ir.cache_misses(jm) == 3
        with pytest.raises(ValueError, match="block size is only 64"):
            jm(torch.randint(0, cfg.vocab_size, (2, 65)))
        idx = torch.randint(0, cfg.vocab_size, (2, 33))
        torch.testing.assert_close(jm(idx), model(idx), rtol=1e-5, atol=1e-6)


def test_guards_from_decisions_on_sizes() -> None:
    """A branch on a size is a guard: the program runs only for sizes that take the same
    branch; the other branch compiles its own program."""
    def f(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] % 2 == 0:
            return x.reshape(x.shape[0] // 2, 2, -1).sum(1)
        return x * 3

    jf = thunder_ir.jit(f)
    for n in (4, 6, 8, 10, 5, 7, 9):
        x = torch.randn(n, 3)
        torch.testing.assert_close(jf(x), f(x))
    assert thunder_ir.cache_misses(jf) <= 3
    assert any("% 2" in g or "Mod" in g for g in _guards(jf))


TEXTS = {
    "str": lambda n: str(n), "f-string": lambda n: f"len {n}", "repr": lambda n: repr(n),
    "format": lambda n: "{}".format(n), "%s": lambda n: "%s" % n, "%d": lambda n: "%d" % n,  # noqa: UP031, UP032
    "Size": lambda n: str(torch.Size([n, 3])), "list": lambda n: str([n]),
    "bool": lambda n: str(n > 9), "float": lambda n: str(n / 4),
}


@pytest.mark.parametrize("form", list(TEXTS))
def test_a_size_turned_into_text_reads_as_eagers_digits(form: str) -> None:
    """User code that makes text of a symbolic size (a cache key, a name, a length) gets
    eager's digits and a guard on the value, not the symbol's name ``s0`` for every length:
    each text compiles its own program, and each is right."""
    text = TEXTS[form]
    seen: dict[str, int] = {}

    def f(x: torch.Tensor) -> torch.Tensor:
        key = text(x.shape[0])
        seen[key] = seen.get(key, 0) + 1
        return x * len(key)

    jf = thunder_ir.jit(f, cache="symbolic values")
    for n in (5, 50, 500, 50):
        x = torch.ones(n, 3)
        torch.testing.assert_close(jf(x), x * len(text(n)))
    texts = {text(n) for n in (5, 50, 500)}
    assert thunder_ir.cache_misses(jf) == len(texts)  # one program per text (bool: 2)
    assert sorted(seen) == sorted(texts)
    assert "s0" not in str(thunder_ir.last_traces(jf)[-1]).split("def ")[0]


SIZE_MATH = {
    "ceil": lambda x, n: x * math.ceil(n / 3),
    "floor": lambda x, n: x * math.floor(n / 3),
    "floordiv": lambda x, n: x * (n // 3),
    "mod": lambda x, n: x * (n % 3),
    "sym_max": lambda x, n: x * torch.sym_max(n, 20),
    "slice_ceil": lambda x, n: x[:math.ceil(n / 2)] * 2,
    "view_floordiv": lambda x, n: x[:(n // 2) * 2].view(n // 2, 2).sum(1),
}


@pytest.mark.parametrize("form", list(SIZE_MATH))
def test_arithmetic_on_sizes_is_one_program(form: str) -> None:
    """``math.ceil``/``math.floor``, ``//``, ``%`` and ``sym_max`` of a size stay symbolic:
    one program for every length, forward and backward equal eager's (the generated code
    and the printed trace import ``math`` where sympy's text uses it). A slice's backward
    pads the gradient to the input's length, a symbol no tensor of ``@backward`` has in
    its shape: ``@forward`` saves it as a number residual."""
    g = SIZE_MATH[form]

    def f(x: torch.Tensor) -> torch.Tensor:
        return g(x, x.shape[0])

    jf = thunder_ir.jit(f, cache="symbolic values")
    for n in (5, 51, 23):  # odd: an even length drops view_floordiv's padding (a guard)
        x = torch.randn(n, requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        got, want = jf(x), f(xe)
        torch.testing.assert_close(got, want)
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(x.grad, xe.grad)
    assert thunder_ir.cache_misses(jf) == 1, jf.symbolic_failures
    trace = str(thunder_ir.last_traces(jf)[-1])
    assert ("math." in trace) == ("import math" in trace)


CLASS_QUESTIONS = {
    "isinstance int": lambda n: isinstance(n, int),
    "isinstance tuple": lambda n: isinstance(n, (int, float)),
    "isinstance float": lambda n: isinstance(n / 2, float),
    "isinstance bool": lambda n: isinstance(n > 3, bool),
    "not a tensor": lambda n: not isinstance(n, torch.Tensor),
}


@pytest.mark.parametrize("form", list(CLASS_QUESTIONS))
def test_isinstance_of_a_symbolic_number_answers_as_eager(form: str) -> None:
    """``isinstance(n, int)`` of a symbolic size or ``int`` argument is True, as eager's
    answer for the number it stands for: the branch is eager's, and the number stays
    symbolic (one program for every value)."""
    question = CLASS_QUESTIONS[form]

    def f(x: torch.Tensor, k: int) -> torch.Tensor:
        n = x.shape[0]
        return x * (2 if question(n) else 3) + (k if question(k) else -1)

    jf = thunder_ir.jit(f, cache="symbolic values")
    for n, k in ((5, 3), (50, 4), (500, 7)):
        x = torch.ones(n)
        torch.testing.assert_close(jf(x, k), f(x, k))
    assert thunder_ir.cache_misses(jf) == 1
    # the class wrapper is there only while a symbolic compile traces
    assert all("__getattribute__" not in c.__dict__
               for c in (torch.SymInt, torch.SymFloat, torch.SymBool))


def test_sizes_printed_by_thunder_ir_stay_symbolic() -> None:
    """The wrapped ``__repr__`` answers the symbol's name outside user code: a symbolic
    program's trace prints ``s0``, and it is one program for every length."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1) * 2

    jf = thunder_ir.jit(f, cache="symbolic values")
    for n in (5, 50, 500):
        torch.testing.assert_close(jf(torch.ones(n, 3)), torch.full((3 * n,), 2.0))
    assert thunder_ir.cache_misses(jf) == 1
    assert "s0" in str(thunder_ir.last_traces(jf)[-1])


def _guards(jf: object) -> list[str]:
    return [e.shape_guard.source for es in jf.programs.shape_entries.values() for e in es]  # type: ignore[attr-defined]


def test_what_cannot_be_symbolic_compiles_per_size() -> None:
    """A dynamic size of a non-contiguous argument is not symbolic yet: each size compiles
    its own program, correct, and `symbolic_failures` says why."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + 1

    jf = thunder_ir.jit(f)
    for n in (3, 4, 5):
        x = torch.randn(2, n).t()
        torch.testing.assert_close(jf(x), f(x))
    assert thunder_ir.cache_misses(jf) == 3
    assert jf.symbolic_failures and "non-contiguous" in jf.symbolic_failures[0]


@settings(max_examples=12, deadline=None)
@given(n=st.integers(2, 40), m=st.integers(2, 40), k=st.integers(2, 9))
def test_shape_rules_agree_with_concrete_sizes(n: int, m: int, k: int) -> None:
    """Shape rules run on symbolic sizes (torch's fake tensors over the compile's
    ShapeEnv): the symbolic program's results at random sizes equal eager's, shapes
    included."""
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        z = torch.cat([x, x * 2], dim=1)
        r = z.reshape(-1, x.shape[1]).transpose(0, 1)
        s = (x[:, None, :] + y[None, :, :1]).mean(-1)
        return r[:, 1:-1].sum(0), torch.softmax(s, 0), x.flatten()[: x.shape[0]], y @ x.T

    jf = thunder_ir.jit(f, cache="symbolic values")
    for a, b in ((n, m), (m + 1, k), (3, 2)):
        x, y = torch.randn(a, b), torch.randn(k, b)
        for got, want in zip(jf(x, y), f(x, y), strict=True):
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert jf.symbolic_failures == []


def test_symbolic_int_argument() -> None:
    """An ``int`` argument that changes (a cache position) is a symbolic number: a program
    input the generated code binds its symbol from; ``arange(past, past + t)`` is traced,
    not baked in."""
    def f(x: torch.Tensor, past: int) -> torch.Tensor:
        pos = torch.arange(past, past + x.shape[1])
        return x * pos + past

    jf = thunder_ir.jit(f)
    for past in (3, 5, 9, 12, 40):
        x = torch.randn(2, 4)
        torch.testing.assert_close(jf(x, past), f(x, past))
    assert thunder_ir.cache_misses(jf) == 2
    src = str(thunder_ir.last_traces(jf)[-1])
    assert "s0 = past" in src and "end=4 + s0" in src
    assert jf.symbolic_failures == []


def _tiny_hf(family: str) -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if family == "llama":
        cfg = transformers.LlamaConfig(
            vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
        return transformers.LlamaForCausalLM(cfg).eval()
    if family == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4,
                                      n_positions=128, bos_token_id=0, eos_token_id=0)
        return transformers.GPT2LMHeadModel(cfg).eval()
    cfg = transformers.BartConfig(
        vocab_size=128, d_model=64, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=128)
    return transformers.BartForConditionalGeneration(cfg).eval()


@pytest.mark.parametrize(("family", "most"), [("llama", 2), ("gpt2", 2), ("bart", 3)])
def test_generate_with_a_dynamic_cache_compiles_prefill_and_decode_once(
        family: str, most: int) -> None:
    """Greedy ``generate(max_new_tokens=16)`` with the default ``DynamicCache``: eager's
    tokens, and the prefill and one symbolic decode step compiled for the whole loop (the
    cache filled by the prefill is symbolic from the next compile on); an
    encoder-decoder's cache adds one (its cross-attention part, computed once, then
    reused)."""
    model = _tiny_hf(family)
    ids = torch.randint(3, 128, (1, 8))
    kw = {"max_new_tokens": 16, "min_new_tokens": 16, "do_sample": False}
    ref = model.generate(ids, **kw)
    jm = thunder_ir.jit(model)
    out = jm.generate(ids, **kw)
    assert torch.equal(out, ref)
    assert thunder_ir.cache_misses(jm) <= most
    # the same loop again: every step hits
    before = thunder_ir.cache_misses(jm)
    assert torch.equal(jm.generate(ids, **kw), ref)
    assert thunder_ir.cache_misses(jm) == before


def test_generate_with_a_static_cache_compiles_prefill_and_decode_once() -> None:
    model = _tiny_hf("llama")
    ids = torch.randint(3, 128, (1, 8))
    kw = {"max_new_tokens": 16, "min_new_tokens": 16, "do_sample": False,
          "cache_implementation": "static"}
    ref = model.generate(ids, **kw)
    jm = thunder_ir.jit(model)
    assert torch.equal(jm.generate(ids, **kw), ref)
    assert thunder_ir.cache_misses(jm) <= 2


def _symbolic(t: object, table: SymbolTable, leaf: list[int]) -> object:
    """``t`` with every size >= 2 a symbol of ``table`` (a group: each of its types)."""
    if isinstance(t, list):
        return [_symbolic(x, table, leaf) for x in t]
    if not isinstance(t, TensorType):
        return t
    leaf[0] += 1
    sizes = [table.size(n, SymbolSource(leaf[0], i)) for i, n in enumerate(t.sizes)]
    return tensor_type(sizes, t.dtype, t.dev)


def _at_hints(t: object) -> object:
    if isinstance(t, TensorType):
        return tensor_type(hints(t.sizes), t.dtype, t.dev)
    return t


@pytest.mark.parametrize("name", sorted(prims.OPS))
@pytest.mark.filterwarnings(r"ignore:var\(\). degrees of freedom:UserWarning")
@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_prim_shape_rule_under_symbols_agrees_with_the_concrete_rule(
        name: str, data: st.DataObject) -> None:
    """Each prim's shape rule on operands whose sizes are all symbols gives, at the
    symbols' values, the type the rule gives on the concrete sizes (the guards it records
    being what makes it hold)."""
    cls = prims.OPS[name]
    operands, params = data.draw(op_inputs(cls, dtypes=SUPPORTED_DTYPES))
    types = [type_of(g) for g in operands]
    expected = cls.infer(*types, **params)
    table = SymbolTable()
    with table.active():
        got = cls.infer(*[_symbolic(t, table, [0]) for t in types], **params)
        got_list = got if isinstance(got, list) else [got]
        at = [_at_hints(t) for t in got_list]
    assert at == (expected if isinstance(expected, list) else [expected])


def test_inductor_regions_of_a_symbolic_program_compile_once() -> None:
    """The Inductor executor compiles a symbolic program's regions with dynamic shapes:
    one kernel for every size."""
    from thunder_ir.lowering.inductor_executor import InductorExecutor

    if not InductorExecutor().is_available():
        pytest.skip("Inductor needs a C++ compiler on the CPU")
    import torch._inductor.compile_fx as compile_fx

    compiles = []
    inner = compile_fx.compile_fx_inner

    def counted(*args: object, **kwargs: object) -> object:
        compiles.append(1)
        return inner(*args, **kwargs)

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x * 2 + 1).sum(-1) + w.sum()

    jf = thunder_ir.jit(f, executors=["torch_compile"])
    w = torch.randn(8)
    compile_fx.compile_fx_inner = counted
    try:
        for t in (3, 5, 9, 17, 33):
            x = torch.randn(2, t, 8)
            torch.testing.assert_close(jf(x, w), f(x, w))
    finally:
        compile_fx.compile_fx_inner = inner
    assert thunder_ir.cache_misses(jf) == 2
    assert len(compiles) == 2  # the first program's kernel, then the symbolic one's
    assert jf.symbolic_failures == []


def test_symbolic_programs_keep_eager_layouts_and_in_place_writes() -> None:
    """Results of a symbolic program have eager's strides (a transposed product stays
    transposed), and in-place writes to dynamic arguments reach the caller's tensors."""
    def layouts(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x.transpose(0, 1) * 2
        return y, y.sum(0), x.permute(1, 0).contiguous() + 1

    jl = thunder_ir.jit(layouts, cache="symbolic values")
    for n, m in ((3, 4), (5, 7), (6, 2)):
        x = torch.randn(n, m)
        for got, want in zip(jl(x), layouts(x), strict=True):
            assert got.shape == want.shape and got.stride() == want.stride()
            torch.testing.assert_close(got, want)
    assert thunder_ir.cache_misses(jl) == 1

    def writes(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        buf[: x.shape[0]] += x.sum(1)
        return x.view(-1)[1:] * 1

    jw = thunder_ir.jit(writes)
    for n in (3, 5, 8, 11):
        x, buf = torch.randn(n, 4), torch.zeros(16)
        xe, be = x.clone(), buf.clone()
        got, want = jw(x, buf), writes(xe, be)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(x, xe)
        torch.testing.assert_close(buf, be)
    assert thunder_ir.cache_misses(jw) == 2
    assert jw.symbolic_failures == []


def test_a_returned_view_of_a_written_argument_compiles_per_size() -> None:
    """Eager returns the caller's own tensor's view after an in-place write; that view is
    made from its layout after the call, which is not symbolic yet: per-size programs,
    with eager's results and aliasing."""
    def f(x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x.view(-1)[1:]

    jf = thunder_ir.jit(f)
    for n in (3, 5, 8):
        x = torch.randn(n, 4)
        xe = x.clone()
        got, want = jf(x), f(xe)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(x, xe)
        assert got.data_ptr() == x.data_ptr() + 4  # a view of the caller's tensor
    assert "returned view" in jf.symbolic_failures[0]


def test_matmul_batch_times_matrix_rule_matches_the_meta_kernel() -> None:
    """``ltorch.matmul``'s direct rule for a batch times a matrix or vector (torch 2.11's
    kernel asks a symbolic batch its ``numel()``) gives the meta kernel's types."""
    from thunder_ir.dialects import ltorch_nn as N
    from thunder_ir.dialects.ltorch_base import LtorchOp

    table = SymbolTable()
    with table.active():
        s0, s1 = (table.size(n, SymbolSource(0, d)) for d, n in enumerate((2, 5)))
        for x, y in [((s0, s1, 8), (8, 3)), ((s0, s1, 8), (8,)), ((8,), (s0, 8, 3)),
                     ((4, 8), (s0, 8, 3)), ((s1, 4, 8), (8, 3))]:
            a, b = tensor_type(x, torch.float32), tensor_type(y, torch.float32)
            assert N.MatmulOp.infer(a, b) == LtorchOp.infer.__func__(N.MatmulOp, a, b)


VIEW_CHAINS = {
    "permute, unsqueeze": lambda x: x.permute(2, 0, 1).unsqueeze(1),
    "transpose, view of a contiguous copy": lambda x: x.transpose(0, 1).contiguous().view(
        x.shape[1], -1),
    "windows": lambda x: x.view(x.shape[0], 2, x.shape[1] // 2, 8).permute(0, 2, 1, 3),
    "unsqueeze at the end, transpose back": lambda x: x.unsqueeze(-1).transpose(0, 2),
    "a view of a transposed slice": lambda x: x[:, 1:].transpose(1, 2).unsqueeze(0),
    "flatten the leading dims": lambda x: x.reshape(-1, 8).t(),
}


@pytest.mark.parametrize("name", sorted(VIEW_CHAINS))
def test_symbolic_views_have_eagers_strides(name: str) -> None:
    """A symbolic program's views (reshapes of contiguous tensors, permutes, transposes,
    unsqueezes: their layouts computed in closed form, not by torch's kernels over the
    symbols) are eager's, strides and storage offsets, at every size; one symbolic
    program serves the sizes after the first."""
    fn = VIEW_CHAINS[name]
    jf = thunder_ir.jit(fn, tiered=False)
    for n in (4, 6, 10, 12):
        x = torch.randn(n, n + 2, 8)
        want, got = fn(x), jf(x)
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride() and got.storage_offset() == \
            want.storage_offset(), (n, got.stride(), want.stride())
    assert thunder_ir.cache_misses(jf) <= 2


def test_automatic_dynamic_keeps_the_sizes_that_did_not_change() -> None:
    """Where only the batch changed, the other dims stay numbers (an image's height and
    width: no floor divisions over them for the ShapeEnv to decide); where a later dim
    changed, the first dim is symbolic with it (an epoch's last, smaller batch after the
    lengths varied is no third program); a dim that changes later is made symbolic then."""
    def windows(x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        return x.view(b, h // 4, 4, w // 4, 4, c).permute(0, 1, 3, 2, 4, 5).sum((2, 3)) * 2

    jf = thunder_ir.jit(windows, tiered=False)
    for n in (2, 3, 5):
        x = torch.randn(n, 8, 8, 3)
        torch.testing.assert_close(jf(x), windows(x))
    assert thunder_ir.cache_misses(jf) == 2
    text = str(thunder_ir.last_traces(jf)[0])
    assert "s0" in text and "s1" not in text  # (the batch alone)
    x = torch.randn(3, 12, 8, 3)  # a new height: made symbolic now
    torch.testing.assert_close(jf(x), windows(x))
    assert thunder_ir.cache_misses(jf) == 3

    def lm(ids: torch.Tensor) -> torch.Tensor:
        return (ids.float() * 2).cumsum(1).sum(1)

    jl = thunder_ir.jit(lm, tiered=False)
    for b, t in ((4, 16), (4, 21), (4, 9), (3, 13), (2, 30)):
        ids = torch.randint(0, 9, (b, t))
        torch.testing.assert_close(jl(ids), lm(ids))
    assert thunder_ir.cache_misses(jl) == 2
