"""Module state that ``forward`` rebinds on every call (``self.avg = self.avg * 0.9 + ...``,
a recurrent state): a program input and output keyed by its metadata, not a guard by
identity (`thunder_ir.runtime.rebound`).

Every test runs the jitted module next to an eager copy and compares the values, the
gradients and parameters after optimizer steps, and the state after each call (its type,
dtype, shape, being a buffer or a plain attribute, being in the state dict or not); and
asserts the compile count: at most 2 for 20 calls with new values (a static compile that
finds the rebinding traces again with the state read from the module: one program).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import thunder_ir
from thunder_ir.runtime.guards import StateGuard


def _same(a: Any, b: Any) -> None:
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _same_state(jitted: nn.Module, eager: nn.Module, path: str) -> None:
    """The state at ``path`` (``inner.h``) is in the jitted module as in the eager one: the
    same value, type, dtype, shape, requires_grad, a buffer or not, in the state dict or
    not."""
    *mods, name = path.split(".")
    a, b = jitted, eager
    for m in mods:
        a, b = getattr(a, m), getattr(b, m)
    va, vb = getattr(a, name), getattr(b, name)
    assert type(va) is type(vb)
    if isinstance(vb, torch.Tensor):
        assert (va.dtype, va.shape, va.requires_grad) == (vb.dtype, vb.shape, vb.requires_grad)
        assert va.is_inference() == vb.is_inference()
        _same(va, vb)
    assert (name in a._buffers) == (name in b._buffers)
    assert (name in a.__dict__) == (name in b.__dict__)
    assert (path in jitted.state_dict()) == (path in eager.state_dict())


class EMA(nn.Module):
    """The issue's example: a buffer rebound to a running average on every call."""

    def __init__(self, persistent: bool = True) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("avg", torch.zeros(4), persistent=persistent)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        self.avg = self.avg * 0.9 + y.detach().mean(0) * 0.1
        return y * self.avg


class Cell(nn.Module):
    """A recurrent cell whose state is a plain tensor attribute (not a buffer)."""

    def __init__(self, detach: bool = True) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.h = torch.zeros(2, 4)
        self.detach = detach

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.lin(x) + self.h)
        self.h = h.detach() if self.detach else h
        return h


class Outer(nn.Module):
    """The state in a submodule."""

    def __init__(self, detach: bool = True) -> None:
        super().__init__()
        self.cell = Cell(detach)
        self.out = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.cell(x)).sum()


def _run(model: nn.Module, calls: int, make: Callable[[int], torch.Tensor],
         states: list[str], mode: Callable[[], Any] = torch.enable_grad
         ) -> tuple[Any, nn.Module]:
    """Calls the jitted ``model`` and an eager copy ``calls`` times on the same inputs,
    comparing the results and ``states`` after every call; returns the jitted callable
    and the eager copy."""
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    for i in range(calls):
        x = make(i)
        with mode():
            got, want = jm(x), eager(x)
        _same(got, want)
        for s in states:
            _same_state(model, eager, s)
    return jm, eager


def test_a_buffer_rebound_every_call_compiles_once() -> None:
    torch.manual_seed(0)
    model = EMA()
    jm, _ = _run(model, 20, lambda i: torch.randn(2, 4), ["avg"])
    assert thunder_ir.cache_misses(jm) == 1  # (traced twice: the rebinding found, then read)
    assert thunder_ir.cache_hits(jm) == 19
    assert "avg" in model._buffers and "avg" in model.state_dict()
    # the key reads its metadata from the module on each call, not a bound tensor
    assert "_buffers['avg'].shape" in str(thunder_ir.last_prologue_traces(jm)[-1])


def test_jit_of_forward_and_the_jitted_modules_view_of_the_state() -> None:
    """``jit(model.forward)`` keys the state as ``jit(model)`` does; the jitted module
    shows the model's current state (``jm.avg``, its state dict), and a state dict loaded
    into it (copied into the state tensor) is read by the next call without a compile."""
    torch.manual_seed(0)
    model = EMA()
    eager = copy.deepcopy(model)
    jf = thunder_ir.jit(model.forward)
    for _ in range(6):
        x = torch.randn(2, 4)
        _same(jf(x), eager(x))
        _same_state(model, eager, "avg")
    assert thunder_ir.cache_misses(jf) <= 2
    model = EMA()
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    for _ in range(4):
        x = torch.randn(2, 4)
        _same(jm(x), eager(x))
    assert jm.avg is model.avg and "avg" in jm.state_dict()
    _same(jm.state_dict()["avg"], eager.avg)
    jm.load_state_dict({k: v * 2 for k, v in eager.state_dict().items()})
    eager.load_state_dict({k: v * 2 for k, v in eager.state_dict().items()})
    x = torch.randn(2, 4)
    _same(jm(x), eager(x))
    _same_state(model, eager, "avg")
    assert thunder_ir.cache_misses(jm) <= 2


def test_a_non_persistent_buffer_stays_out_of_the_state_dict() -> None:
    torch.manual_seed(0)
    model = EMA(persistent=False)
    jm, _ = _run(model, 6, lambda i: torch.randn(2, 4), ["avg"])
    assert thunder_ir.cache_misses(jm) <= 2
    assert "avg" in model._buffers and "avg" not in model.state_dict()


def test_a_plain_tensor_attribute_of_a_submodule_stays_plain() -> None:
    torch.manual_seed(0)
    model = Outer()
    jm, _ = _run(model, 20, lambda i: torch.randn(2, 4), ["cell.h"])
    assert thunder_ir.cache_misses(jm) <= 2
    assert "h" in model.cell.__dict__ and "h" not in model.cell._buffers
    assert "cell.h" not in model.state_dict()


def test_a_cached_call_does_not_re_read_the_module_tree(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    torch.manual_seed(0)
    jm = thunder_ir.jit(Outer())
    for _ in range(3):
        jm(torch.randn(2, 4))
    refreshed = []
    original = StateGuard.refresh

    def counting(self: StateGuard) -> int:
        refreshed.append(self.name)
        return original(self)

    monkeypatch.setattr(StateGuard, "refresh", counting)
    for _ in range(5):
        jm(torch.randn(2, 4))
    assert thunder_ir.cache_misses(jm) <= 2
    assert not refreshed  # the epilogue's rebinding leaves the guard's token as it was


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_under_no_grad_and_inference_mode(mode: Callable[[], Any]) -> None:
    torch.manual_seed(0)
    jm, _ = _run(EMA(), 20, lambda i: torch.randn(2, 4), ["avg"], mode)
    assert thunder_ir.cache_misses(jm) <= 2
    torch.manual_seed(0)
    jm, _ = _run(Outer(), 20, lambda i: torch.randn(2, 4), ["cell.h"], mode)
    assert thunder_ir.cache_misses(jm) <= 2


def _train(model: nn.Module, steps: int, retain: bool = False
           ) -> tuple[Any, list[str | None], list[str | None]]:
    """Trains the jitted ``model`` and an eager copy side by side (SGD with momentum),
    comparing losses, gradients, parameters and the state after every step; returns the
    jitted callable and each step's error, if any (jitted, eager)."""
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, eager)]
    errors: list[list[str | None]] = [[], []]
    for _ in range(steps):
        x = torch.randn(2, 4)
        losses = []
        for k, (fn, opt) in enumerate(((jm, opts[0]), (eager, opts[1]))):
            opt.zero_grad()
            out = fn(x)
            loss = out.sum() if out.dim() else out
            losses.append(loss.detach())
            try:
                loss.backward(retain_graph=retain)
            except RuntimeError as e:
                errors[k].append(type(e).__name__ + str(e)[:40])
                continue
            errors[k].append(None)
            opt.step()
        _same(losses[0], losses[1])
        failed = errors[1][-1] is not None  # (what a failed backward accumulated: not compared)
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            _same(p, q)
            assert failed or (p.grad is None) == (q.grad is None), name
            if q.grad is not None and not failed:
                _same(p.grad, q.grad)
    return jm, errors[0], errors[1]


def test_training_with_a_detached_state_gives_eagers_parameters() -> None:
    torch.manual_seed(0)
    jm, got, want = _train(EMA(), 20)
    assert got == want == [None] * 20
    assert thunder_ir.cache_misses(jm) <= 2
    torch.manual_seed(0)
    model = Outer()
    jm, got, want = _train(model, 20)
    assert got == want == [None] * 20
    assert thunder_ir.cache_misses(jm) <= 2
    assert not model.cell.h.requires_grad


def test_a_state_carrying_a_graph_behaves_as_eager() -> None:
    """Not detached, the state chains each call's graph to the last one's, as in eager: a
    second backward without ``retain_graph`` goes through a freed graph (eager's error)."""
    torch.manual_seed(0)
    model = Outer(detach=False)
    _, got, want = _train(model, 4)
    assert got == want
    assert got[0] is None and all(e is not None and "backward through the graph" in e
                                  for e in got[1:])
    assert model.cell.h.requires_grad and model.cell.h.grad_fn is not None


def test_a_state_carrying_a_graph_accumulates_eagers_gradients() -> None:
    """With ``retain_graph``, each backward reaches back through every earlier call's
    graph, as eager's does: gradients accumulated over the calls, then one step."""
    torch.manual_seed(0)
    model = Outer(detach=False)
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager)]
    for _ in range(3):  # three windows of four calls each, a step after each window
        for _ in range(4):
            x = torch.randn(2, 4)
            for fn in (jm, eager):
                fn(x).backward(retain_graph=True)
            _same_state(model, eager, "cell.h")
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            assert p.grad is not None and q.grad is not None, name
            _same(p.grad, q.grad)
        for opt in opts:
            opt.step()
            opt.zero_grad()
        model.cell.h = model.cell.h.detach()  # a window's end: the graph cut, by the user
        eager.cell.h = eager.cell.h.detach()
    for p, q in zip(model.parameters(), eager.parameters()):
        _same(p, q)
    # the first program (the state bound), then one for a state that requires grad and one
    # for a state that does not (the detached one): requires_grad is in the key
    assert thunder_ir.cache_misses(jm) <= 3


def test_a_graph_carried_past_an_optimizer_step_is_a_clear_error() -> None:
    """Backward through an earlier call after an optimizer step wrote the parameters: eager
    goes through that call's recurrence alone, which did not save them; the program's
    backward is one node that did. Autograd's version error says so and what to do."""
    torch.manual_seed(0)
    eager = Outer(detach=False)
    opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    for _ in range(2):
        eager(torch.randn(2, 4)).backward(retain_graph=True)
        opt.step()
    model = Outer(detach=False)
    jm = thunder_ir.jit(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    jm(torch.randn(2, 4)).backward(retain_graph=True)
    opt.step()
    with pytest.raises(RuntimeError, match=r"(?s)modified by an inplace.*thunder_ir:.*detach"):
        jm(torch.randn(2, 4)).backward(retain_graph=True)


class Resizing(nn.Module):
    """A state remade when the batch changes (RecurrentGemma's convolution state)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("h", torch.zeros(1, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.h.shape[0] != x.shape[0]:
            self.h = torch.zeros(x.shape[0], 4, dtype=x.dtype)
        self.h = self.h * 0.5 + self.lin(x).detach()
        return self.h * 2


def test_a_state_whose_shape_changes_recompiles_and_is_right() -> None:
    torch.manual_seed(0)
    batches = [1, 1, 1, 3, 3, 3, 1, 1, 3, 3, 2, 2, 1, 1]
    jm, _ = _run(Resizing(), len(batches), lambda i: torch.randn(batches[i], 4), ["h"],
                 torch.no_grad)
    # one program per (batch, state shape) met: the first one (the state bound), then
    # (1, 1), (3, 1) remade, (3, 3), (1, 3) remade, (2, 3) remade, (2, 2), (1, 2) remade;
    # the pairs met again hit
    assert thunder_ir.cache_misses(jm) <= 8


def test_state_reset_by_the_user_between_sequences() -> None:
    torch.manual_seed(0)
    model = Outer()
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    for _ in range(3):  # three sequences of five steps, each from a fresh state
        model.cell.h = torch.zeros(2, 4)
        eager.cell.h = torch.zeros(2, 4)
        for _ in range(5):
            x = torch.randn(2, 4)
            _same(jm(x), eager(x))
            _same_state(model, eager, "cell.h")
    assert thunder_ir.cache_misses(jm) <= 2


class Optional(nn.Module):
    """A state that starts as None (RecurrentGemma's ``recurrent_states``)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.state: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        if self.state is not None:
            h = h + self.state
        self.state = h.detach()
        return h


def test_a_state_that_starts_as_none() -> None:
    torch.manual_seed(0)
    model = Optional()
    jm, eager = _run(model, 10, lambda i: torch.randn(2, 4), ["state"], torch.no_grad)
    assert thunder_ir.cache_misses(jm) <= 2
    model.state = eager.state = None  # back to the start: the first program again
    x = torch.randn(2, 4)
    with torch.no_grad():
        _same(jm(x), eager(x))
    _same_state(model, eager, "state")
    assert thunder_ir.cache_misses(jm) <= 2
    model.state = eager.state = None  # a new batch size from None: compiled knowing the
    for _ in range(4):  # state is rebound, the program for None must not keep its token
        x = torch.randn(3, 4)
        with torch.no_grad():
            _same(jm(x), eager(x))
        _same_state(model, eager, "state")
    assert thunder_ir.cache_misses(jm) <= 4


class InPlace(nn.Module):
    """A state written in place, then rebound: the write reaches the tensor the call read
    (a caller holding it sees it, as in eager)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("h", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.h.add_(1)
        self.h = self.h + x
        return self.h


def test_an_in_place_write_before_the_rebinding_reaches_the_tensor_read() -> None:
    torch.manual_seed(0)
    model = InPlace()
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    for _ in range(6):
        held, held_eager = model.h, eager.h
        x = torch.randn(4)
        _same(jm(x), eager(x))
        _same(held, held_eager)
        _same_state(model, eager, "h")
    assert thunder_ir.cache_misses(jm) <= 2


class Failing(nn.Module):
    """Rebinds its state, then fails to compile (a draw of Python's random)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("h", torch.zeros(4))
        self.fail = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.h = self.h + x
        if self.fail:
            return self.h * random.random()
        return self.h


def test_a_failure_leaves_the_module_unchanged() -> None:
    model = Failing()
    jm = thunder_ir.jit(model)
    for _ in range(4):
        jm(torch.ones(4))
    before, value = model.h, model.h.clone()
    model.fail = True
    with pytest.raises(Exception, match="random"):
        jm(torch.ones(4))
    assert model.h is before and "h" in model._buffers
    _same(model.h, value)
    with pytest.raises(RuntimeError):  # eager's own error, before the rebinding
        jm(torch.ones(3))
    assert model.h is before
    model.fail = False
    _same(jm(torch.ones(4)), value + 1)


class Scaled(nn.Module):
    """A state the backward needs (``y * self.h`` saves it)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("h", torch.ones(2, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x) * self.h
        self.h = y.detach()
        return y.sum()


def test_a_state_made_under_inference_mode_then_saved_for_backward() -> None:
    """A call under ``inference_mode`` leaves an inference tensor as the state; a call
    with grad that saves it for backward is eager's error, raised by the program, and the
    module keeps its state, as eager's does; the next inference call runs."""
    torch.manual_seed(0)
    model = Scaled()
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    for mode in (torch.enable_grad, torch.enable_grad, torch.inference_mode):
        x = torch.randn(2, 4)
        with mode():
            _same(jm(x), eager(x))
        _same_state(model, eager, "h")
    before = model.h
    x = torch.randn(2, 4)
    for fn in (jm, eager):
        with pytest.raises(RuntimeError, match="Inference tensors cannot be saved"):
            fn(x)
    assert model.h is before
    _same_state(model, eager, "h")
    with torch.inference_mode():
        _same(jm(x), eager(x))
    _same_state(model, eager, "h")


def _tiny_recurrent_gemma() -> tuple[nn.Module, Any]:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.RecurrentGemmaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, lru_width=32,
        num_attention_heads=2, num_key_value_heads=2, head_dim=16, num_hidden_layers=2,
        attention_window_size=16, block_types=["recurrent", "recurrent"])
    torch.manual_seed(0)
    return transformers.RecurrentGemmaForCausalLM(cfg).eval(), cfg


def test_recurrent_gemma_decodes_without_a_compile_per_call() -> None:
    """Hugging Face RecurrentGemma keeps each recurrent block's convolution state and its
    RG-LRU's recurrent state as plain attributes it rebinds on every call."""
    from transformers import DynamicCache

    model, cfg = _tiny_recurrent_gemma()
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    ids = torch.randint(0, 64, (1, 5))
    mask = {"sliding_attention": None}  # (prepared, as generate does)
    caches = [DynamicCache(config=cfg), DynamicCache(config=cfg)]
    logits: list[list[torch.Tensor]] = [[], []]
    with torch.no_grad():
        for k, fn in enumerate((jm, eager)):
            out = fn(ids, position_ids=torch.arange(5)[None], attention_mask=mask,
                     past_key_values=caches[k], use_cache=True)
            logits[k].append(out.logits)
            for step in range(10):
                tok = out.logits[:, -1:].argmax(-1)
                out = fn(tok, position_ids=torch.tensor([[5 + step]]), attention_mask=mask,
                         past_key_values=caches[k], use_cache=True)
                logits[k].append(out.logits)
    for got, want in zip(*logits, strict=True):
        _same(got, want)
    assert thunder_ir.cache_misses(jm) <= 2  # the prefill, then one decode program
    for a, b in zip(model.model.layers, eager.model.layers):
        for block_a, block_b in ((a.temporal_block, b.temporal_block),
                                 (a.temporal_block.rg_lru, b.temporal_block.rg_lru)):
            for name in ("conv1d_state", "recurrent_states"):
                if name in block_b.__dict__:
                    va, vb = block_a.__dict__[name], block_b.__dict__[name]
                    assert type(va) is type(vb) and name not in block_a._buffers
                    _same(va, vb)


# --------------------------------------------------------------------------- growing state


class KVCache(nn.Module):
    """A simple KV cache: the state grows by one row (``dim``) on every call, by
    ``torch.cat``; a buffer or a plain attribute."""

    def __init__(self, buffer: bool = True, dim: int = 0, detach: bool = True) -> None:
        super().__init__()
        self.q, self.kv = nn.Linear(4, 4), nn.Linear(4, 4)
        self.dim, self.detach = dim, detach
        start = torch.zeros(1, 4) if dim == 0 else torch.zeros(2, 1, 4)
        if buffer:
            self.register_buffer("k", start)
        else:
            self.k = start

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        new = self.kv(x)
        self.k = torch.cat([self.k, new.detach() if self.detach else new], self.dim)
        att = (self.q(x) @ self.k.transpose(-1, -2)).softmax(-1)
        return att @ self.k


def _grows_as_eager(model: nn.Module, calls: int, make: Callable[[int], torch.Tensor],
                    train: bool = False) -> Any:
    """Calls the jitted model and an eager copy ``calls`` times: the results, the state
    after every call (value, shape, strides, buffer or not) and, with ``train``, the
    gradients are eager's."""
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    for i in range(calls):
        x = make(i)
        got, want = jm(x), eager(x)
        _same(got, want)
        _same_state(model, eager, "k")
        assert model.k.stride() == eager.k.stride()
        assert model.k.storage_offset() == eager.k.storage_offset()
        if train:
            got.square().sum().backward()
            want.square().sum().backward()
            for p, q in zip(model.parameters(), eager.parameters(), strict=True):
                _same(p.grad, q.grad)
    return jm


@pytest.mark.parametrize("buffer", [True, False], ids=["buffer", "attribute"])
def test_a_growing_cache_has_symbolic_sizes(buffer: bool) -> None:
    """The state's dim that changed between misses is symbolic by the arguments' policy:
    the first program for its first size, a symbolic one for every later size."""
    torch.manual_seed(0)
    jm = _grows_as_eager(KVCache(buffer), 12, lambda i: torch.randn(1, 4))
    assert thunder_ir.cache_misses(jm) <= 2
    assert "s0" in str(thunder_ir.last_traces(jm)[-1])


def test_a_growing_cache_trains_as_eager() -> None:
    torch.manual_seed(1)
    jm = _grows_as_eager(KVCache(), 12, lambda i: torch.randn(1, 4), train=True)
    assert thunder_ir.cache_misses(jm) <= 2


def test_a_cache_growing_along_its_second_dim() -> None:
    """``(batch, length, d)`` grown along the length: the length is symbolic (and the
    batch with it, as for an argument whose later dim changed)."""
    torch.manual_seed(2)
    jm = _grows_as_eager(KVCache(dim=1), 12, lambda i: torch.randn(2, 1, 4))
    assert thunder_ir.cache_misses(jm) <= 2


def test_a_growing_cache_with_new_lengths_of_the_argument_too() -> None:
    """Prefill of a length that changes, then a state that grows: the argument's and the
    state's sizes are symbols of one program."""
    torch.manual_seed(3)
    lengths = [3, 5, 2, 1, 1, 1, 4, 1, 1, 1, 2, 1]
    jm = _grows_as_eager(KVCache(), len(lengths), lambda i: torch.randn(lengths[i], 4))
    assert thunder_ir.cache_misses(jm) <= 3


def test_a_static_cache_mode_compiles_per_size() -> None:
    """``cache="static"``: no automatic dynamic, for state as for arguments."""
    torch.manual_seed(4)
    model = KVCache()
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model, cache="static")
    for _ in range(5):
        x = torch.randn(1, 4)
        _same(jm(x), eager(x))
        _same_state(model, eager, "k")
    assert thunder_ir.cache_misses(jm) == 5


# --------------------------------------------------------------------------- dicts and lists


class DictCache(nn.Module):
    """State held in a dict on the module: ``self.cache["h"]`` rebound every call, and
    ``self.cache["k"]`` grown by ``torch.cat``; ``self.cache["scale"]`` only read."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.cache: dict[str, torch.Tensor] = {"h": torch.zeros(2, 4), "k": torch.zeros(1, 4),
                                               "scale": torch.full((4,), 0.5)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.lin(x) + self.cache["h"] * self.cache["scale"])
        self.cache["h"] = h.detach()
        self.cache["k"] = torch.cat([self.cache["k"], h.detach()[:1]], 0)
        return h + self.cache["k"].mean(0)


class ListStates(nn.Module):
    """Per-layer states in a list on the module: ``self.states[i] = ...``."""

    def __init__(self) -> None:
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.states = [torch.zeros(2, 4) for _ in range(3)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, lin in enumerate(self.lins):
            x = torch.tanh(lin(x) + self.states[i])
            if i != 1:  # the middle state is only read
                self.states[i] = x.detach()
        return x


def _same_entries(a: Any, b: Any) -> None:
    """The entries of two dicts or lists: the same keys, and tensors with the same value,
    dtype, shape, strides and requires_grad."""
    ka = list(a) if isinstance(a, dict) else list(range(len(a)))
    kb = list(b) if isinstance(b, dict) else list(range(len(b)))
    assert ka == kb
    for k in ka:
        x, y = a[k], b[k]
        assert type(x) is type(y)
        assert (x.shape, x.stride(), x.dtype, x.requires_grad) == \
            (y.shape, y.stride(), y.dtype, y.requires_grad)
        _same(x, y)


def _entries_as_eager(model: nn.Module, attr: str, calls: int, train: bool = False) -> Any:
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    for _ in range(calls):
        x = torch.randn(2, 4)
        got, want = jm(x), eager(x)
        _same(got, want)
        _same_entries(getattr(model, attr), getattr(eager, attr))
        if train:
            got.square().sum().backward()
            want.square().sum().backward()
            for p, q in zip(model.parameters(), eager.parameters(), strict=True):
                _same(p.grad, q.grad)
    return jm


def test_tensors_in_a_dict_rebound_every_call_are_inputs_and_outputs() -> None:
    """``self.cache["h"] = ...`` and a ``self.cache["k"]`` that grows: read from the
    dict on each call, keyed by metadata (the growing one symbolic), written back as
    eager writes them; the entry only read stays the same tensor."""
    torch.manual_seed(5)
    model = DictCache()
    scale = model.cache["scale"]
    jm = _entries_as_eager(model, "cache", 12)
    assert thunder_ir.cache_misses(jm) <= 2
    assert model.cache["scale"] is scale
    prologue = str(thunder_ir.last_prologue_traces(jm)[-1])
    assert "cache['h']" in prologue and "cache['k']" in prologue


def test_tensors_in_a_list_rebound_every_call_are_inputs_and_outputs() -> None:
    torch.manual_seed(6)
    model = ListStates()
    middle = model.states[1]
    jm = _entries_as_eager(model, "states", 10)
    assert thunder_ir.cache_misses(jm) == 1
    assert model.states[1] is middle


def test_rebound_entries_train_as_eager() -> None:
    torch.manual_seed(7)
    for model, attr in ((DictCache(), "cache"), (ListStates(), "states")):
        jm = _entries_as_eager(model, attr, 6, train=True)
        assert thunder_ir.cache_misses(jm) <= 2


def test_a_dict_replaced_by_the_user_between_calls() -> None:
    """The user resets the cache (a new dict): the next call reads the new one."""
    torch.manual_seed(8)
    model = DictCache()
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    for step in range(9):
        if step in (3, 6):
            for m in (model, eager):
                m.cache = {"h": torch.ones(2, 4), "k": torch.zeros(1, 4),
                           "scale": torch.full((4,), 0.25)}
        x = torch.randn(2, 4)
        _same(jm(x), eager(x))
        _same_entries(model.cache, eager.cache)


@pytest.mark.parametrize("cls", [DictCache, ListStates])
def test_cached_calls_with_entries_do_not_re_read_the_module_tree(
        cls: type[nn.Module], monkeypatch: pytest.MonkeyPatch) -> None:
    """A dict's rebound entries leave the guard's token as it was; a list's are compared
    as any tensor of their type: no re-read of the module tree on a cached call."""
    torch.manual_seed(9)
    jm = thunder_ir.jit(cls())
    for _ in range(4):
        jm(torch.randn(2, 4))
    refreshed = []
    original = StateGuard.refresh

    def counting(self: StateGuard) -> int:
        refreshed.append(self.name)
        return original(self)

    monkeypatch.setattr(StateGuard, "refresh", counting)
    misses = thunder_ir.cache_misses(jm)
    for _ in range(5):
        jm(torch.randn(2, 4))
    assert thunder_ir.cache_misses(jm) == misses
    assert not refreshed


def test_a_list_entry_replaced_by_the_user_is_read() -> None:
    """The user puts another tensor (or a non-tensor) where a rebound list entry was:
    the next call reads it, as eager does."""
    torch.manual_seed(10)
    model = ListStates()
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    for step in range(6):
        if step == 3:
            for m in (model, eager):
                m.states[0] = torch.full((2, 4), 3.0)
        x = torch.randn(2, 4)
        _same(jm(x), eager(x))
        _same_entries(model.states, eager.states)


class Positions(nn.Module):
    """A growing cache whose length is also returned and kept as an ``int`` attribute."""

    def __init__(self, in_dict: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.in_dict = in_dict
        if in_dict:
            self.cache = {"k": torch.zeros(1, 4)}
        else:
            self.register_buffer("k", torch.zeros(1, 4))
        self.pos = 0

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        k = torch.cat([self.cache["k"] if self.in_dict else self.k, self.lin(x).detach()], 0)
        if self.in_dict:
            self.cache["k"] = k
        else:
            self.k = k
        self.pos = k.shape[0]
        return k.sum(0), k.shape[0] * 2


@pytest.mark.parametrize("in_dict", [True, False], ids=["dict", "buffer"])
def test_a_growing_states_size_used_as_a_number(in_dict: bool) -> None:
    """The state's symbolic length, returned and written to an ``int`` attribute, is
    read from the state on each call (the symbol reader follows the dict entry)."""
    torch.manual_seed(11)
    model = Positions(in_dict)
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    for _ in range(8):
        x = torch.randn(1, 4)
        (got, n), (want, m) = jm(x), eager(x)
        _same(got, want)
        assert n == m and type(n) is int
        assert model.pos == eager.pos
    assert thunder_ir.cache_misses(jm) <= 2


# ------------------------------------------------------------------ plain objects on a module


class Memory:
    """A plain (non-Module) object a module holds: a state tensor rebound on every call,
    a count of the calls, and a tensor never rebound."""

    def __init__(self) -> None:
        self.h = torch.zeros(4)
        self.scale = torch.full((4,), 0.5)
        self.calls = 0


class WithMemory(nn.Module):
    """``self.mem.h = ...``: a tensor field of a plain object rebound on every call."""

    def __init__(self, detach: bool = True) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.mem = Memory()
        self.detach = detach

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x) + self.mem.h * self.mem.scale
        h = y.mean(0)
        self.mem.h = h.detach() if self.detach else h
        return y


def _same_memory(a: Memory, b: Memory) -> None:
    """The jitted module's object holds what eager's does, field by field."""
    assert vars(a).keys() == vars(b).keys()
    for k, v in vars(b).items():
        w = vars(a)[k]
        assert type(w) is type(v), k
        if isinstance(v, torch.Tensor):
            assert (w.shape, w.dtype, w.requires_grad, w.stride()) == \
                (v.shape, v.dtype, v.requires_grad, v.stride()), k
            _same(w, v)
        else:
            assert w == v, k


def test_a_tensor_field_of_a_plain_object_on_a_module_is_state() -> None:
    """The object's field is read from it on each call and keyed by metadata (it compiled
    a program per call: the module guard held the tensor by identity); the object after
    each call is eager's; a tensor the user sets there between calls is read; one of
    another shape compiles once more."""
    torch.manual_seed(0)
    m = WithMemory()
    eager = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for i in range(6):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        _same(jm(x), eager(x))
        _same_memory(m.mem, eager.mem)
    assert thunder_ir.cache_misses(jm) == 1
    m.mem.h, eager.mem.h = torch.ones(4), torch.ones(4)  # set by the user: read, no compile
    x = torch.randn(2, 4)
    _same(jm(x), eager(x))
    _same_memory(m.mem, eager.mem)
    assert thunder_ir.cache_misses(jm) == 1
    m.mem.scale = eager.mem.scale = torch.full((4,), 2.0)  # never rebound: a new program
    _same(jm(x), eager(x))
    _same_memory(m.mem, eager.mem)
    m.mem.h, eager.mem.h = torch.ones(1), torch.ones(1)  # another shape: one more program
    for _ in range(2):
        _same(jm(x), eager(x))
        _same_memory(m.mem, eager.mem)
    assert thunder_ir.cache_misses(jm) == 3


def test_training_with_a_plain_objects_state_gives_eagers_parameters() -> None:
    torch.manual_seed(0)
    m = WithMemory()
    jm, errs, eager_errs = _train(m, 5)
    assert errs == eager_errs == [None] * 5
    assert thunder_ir.cache_misses(jm) == 1


def test_a_plain_object_replaced_by_the_user_is_read_anew() -> None:
    """The user gives the module a new object: its state is followed from the next call
    (one compile more), with eager's values."""
    torch.manual_seed(0)
    m = WithMemory()
    eager = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for i in range(6):
        if i == 3:
            m.mem, eager.mem = Memory(), Memory()
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        _same(jm(x), eager(x))
        _same_memory(m.mem, eager.mem)
    assert thunder_ir.cache_misses(jm) == 2
