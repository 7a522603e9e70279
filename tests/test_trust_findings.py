"""Findings of the fourth trust review (issue 50), each written as a user writes it and
compared with eager: reentrant checkpointing without an input that requires grad, state
read several levels down a config object or a global, writes to overlapping argument
slices, a failed compile that must leave the model as it was, a result written in place
through a column-major layout, and a wrong-shape call's messages."""

from __future__ import annotations

import copy
import types
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import thunder_ir
from thunder_ir.frontend import ThunderTraceError
from thunder_ir.testing_eager import check_against_eager


def _real(*values: Any) -> None:
    """Every tensor among ``values`` (nested) is a real tensor, never a tracing proxy."""
    for v in torch.utils._pytree.tree_leaves(values):
        if isinstance(v, torch.Tensor):
            assert type(v) in (torch.Tensor, nn.Parameter), type(v)


# --------------------------------------------------------------------------- checkpoint


@pytest.mark.parametrize("input_requires_grad", [False, True])
def test_reentrant_checkpoint_gives_eagers_gradients_and_warning(
        input_requires_grad: bool) -> None:
    """Eager's reentrant checkpoint gives nothing a gradient when no input requires grad:
    the output does not require grad, the wrapped layer's gradients stay None, and it
    warns. With an input that requires grad, every gradient is eager's."""
    torch.manual_seed(0)
    lin_e = nn.Linear(3, 3)
    lin_j = copy.deepcopy(lin_e)

    def step(lin: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(lambda t: torch.tanh(lin(t)), x, use_reentrant=True) * 2

    x_e = torch.randn(2, 3, requires_grad=input_requires_grad)
    x_j = x_e.detach().clone().requires_grad_(input_requires_grad)
    with warnings.catch_warnings(record=True) as w_e:
        warnings.simplefilter("always")
        out_e = step(lin_e, x_e)
    with warnings.catch_warnings(record=True) as w_j:
        warnings.simplefilter("always")
        out_j = thunder_ir.jit(step)(lin_j, x_j)
    torch.testing.assert_close(out_j, out_e)
    assert out_j.requires_grad == out_e.requires_grad == input_requires_grad
    said = [str(w.message) for w in w_e if "requires_grad" in str(w.message)]
    assert said == [str(w.message) for w in w_j if "requires_grad" in str(w.message)]
    assert bool(said) == (not input_requires_grad)
    if input_requires_grad:
        out_e.sum().backward()
        out_j.sum().backward()
        for a, b in ((lin_j.weight, lin_e.weight), (lin_j.bias, lin_e.bias), (x_j, x_e)):
            torch.testing.assert_close(a.grad, b.grad)
        _real(out_j, x_j.grad, lin_j.weight.grad)
    else:
        for loss in (out_e.sum(), out_j.sum()):
            with pytest.raises(RuntimeError, match="does not require grad"):
                loss.backward()
        assert lin_j.weight.grad is None and lin_e.weight.grad is None


def test_reentrant_checkpoint_trains_as_eager_over_steps() -> None:
    """A block checkpointed around a frozen embedding's output (no input requires grad):
    the block's parameters never change, in eager and under the jit alike."""
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.emb.weight.requires_grad_(False)
            self.block = nn.Linear(4, 4)
            self.head = nn.Linear(4, 1)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            h = checkpoint(self.block, self.emb(ids), use_reentrant=True)
            return self.head(h).sum()

    eager = Net()
    jitted_model = copy.deepcopy(eager)
    jm = thunder_ir.jit(jitted_model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, jitted_model)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(3):
            ids = torch.randint(0, 10, (5,), generator=torch.Generator().manual_seed(step))
            for model, opt in zip((eager, jm), opts, strict=True):
                opt.zero_grad()
                model(ids).backward()
                opt.step()
    for a, b in zip(jitted_model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert jitted_model.block.weight.grad is None


# --------------------------------------------------------------------------- state depth


class _Inner:
    pass


class _Cfg:
    pass


class _Configured(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cfg = _Cfg()
        self.cfg.inner = _Inner()
        self.cfg.inner.gain = [1.0, 2.0]
        self.cfg.inner.table = {"bias": 0.5, "nested": {"scale": 1.0}}
        self.cfg.inner.t = torch.ones(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = self.cfg.inner
        return (x * inner.gain[1] + inner.table["bias"]) * inner.table["nested"]["scale"] \
            + inner.t


def test_state_two_levels_down_a_config_is_guarded() -> None:
    m = _Configured()
    jm = thunder_ir.jit(m)
    x = torch.randn(3)
    changes = [lambda: m.cfg.inner.gain.__setitem__(1, 5.0),
               lambda: m.cfg.inner.table.__setitem__("bias", 7.0),
               lambda: m.cfg.inner.table["nested"].__setitem__("scale", -2.0),
               lambda: setattr(m.cfg.inner, "t", torch.full((3,), 10.0)),
               lambda: setattr(m.cfg, "inner", copy.deepcopy(m.cfg.inner))]
    torch.testing.assert_close(jm(x), m(x))
    for change in changes:
        change()
        out = jm(x)
        torch.testing.assert_close(out, m(x))
        _real(out)
    m.cfg.inner.gain[1] = 2.0  # back to an earlier state: a hit, not a compile
    before = thunder_ir.cache_misses(jm)
    torch.testing.assert_close(jm(x), m(x))
    assert thunder_ir.cache_misses(jm) <= before + 1


SETTINGS = types.SimpleNamespace(inner=types.SimpleNamespace(scale=[1.0, 2.0],
                                                            table={"b": {"c": 3.0}}))


def test_state_several_levels_down_a_global_is_guarded() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * SETTINGS.inner.scale[1] + SETTINGS.inner.table["b"]["c"]

    jf = thunder_ir.jit(f)
    x = torch.randn(2)
    torch.testing.assert_close(jf(x), f(x))
    SETTINGS.inner.scale[1] = 5.0
    torch.testing.assert_close(jf(x), f(x))
    SETTINGS.inner.table["b"]["c"] = -1.0
    torch.testing.assert_close(jf(x), f(x))
    src = str(thunder_ir.last_prologue_traces(jf)[-1])
    assert "SETTINGS.inner.table['b']['c'] == -1.0" in src


def test_state_past_the_guards_depth_is_named_at_compile_time() -> None:
    deep = types.SimpleNamespace()
    node = deep
    for _ in range(12):
        node.next = types.SimpleNamespace()
        node = node.next
    node.v = 2.0

    class Deep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d = deep

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n = self.d
            while hasattr(n, "next"):
                n = n.next
            return x * n.v

    with pytest.warns(UserWarning, match=r"does not follow the state past self\.d\.next"):
        out = thunder_ir.jit(Deep())(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 2.0))


# --------------------------------------------------------------------------- overlapping args


def _overlapping_writes(x: torch.Tensor, y: torch.Tensor) -> Any:
    y.mul_(2)
    x[:2].add_(1.0)
    return x * y[:1], y + 0


@pytest.mark.parametrize("slices", [((1, 4), (2, 6)), ((2, 6), (1, 4)), ((0, 5), (3, 8)),
                                    ((0, 8), (3, 5))])
def test_writes_to_overlapping_argument_slices_are_eagers(slices: Any) -> None:
    """The issue's finding (``f(base[1:4], base[2:6])`` writing the second crashed): both
    writes reach the caller's storage in order, and the results read it as eager does."""
    (a, b), (c, d) = slices
    base_e, base_j = torch.arange(8.0), torch.arange(8.0)
    out_e = _overlapping_writes(base_e[a:b], base_e[c:d])
    out_j = thunder_ir.jit(_overlapping_writes)(base_j[a:b], base_j[c:d])
    for o_j, o_e in zip(out_j, out_e, strict=True):
        assert torch.equal(o_j, o_e)
    assert torch.equal(base_j, base_e)
    _real(out_j, base_j)


def test_writes_to_overlapping_views_of_a_leaf_raise_eagers_error() -> None:
    w = torch.arange(8.0, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable"):
        _overlapping_writes(w[1:4], w[2:6])
    with pytest.raises(RuntimeError, match="a view of a leaf Variable"):
        thunder_ir.jit(_overlapping_writes)(w[1:4], w[2:6])
    assert torch.equal(w.detach(), torch.arange(8.0))


# --------------------------------------------------------------------------- failed compiles


class _HookingModel(nn.Module):
    """Registers a forward hook on its layer on the first call (as transformers installs
    its output-capturing hooks) and records that it did, then fails at ``fail``."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 3)
        self.fail = True
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not getattr(self, "_installed", False):
            self.layer.register_forward_hook(lambda m, a, out: self.seen.append(out))
            torch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: None)
            self._installed = True
        y = self.layer(x)
        if self.fail:
            y = y.reshape(int(y.sum()))  # data-dependent: refused
        return y


def test_a_failed_compile_leaves_hooks_and_attributes_as_they_were() -> None:
    m = _HookingModel()
    global_hooks = dict(torch.nn.modules.module._global_forward_pre_hooks)
    with pytest.raises(ThunderTraceError):
        thunder_ir.jit(m)(torch.randn(2, 3))
    assert len(m.layer._forward_hooks) == 0
    assert not hasattr(m, "_installed") and m.seen == []
    assert dict(torch.nn.modules.module._global_forward_pre_hooks) == global_hooks
    m.fail = False
    eager = copy.deepcopy(m)
    x = torch.randn(2, 3)
    try:
        out_j, out_e = thunder_ir.jit(m)(x), eager(x)
        torch.testing.assert_close(out_j, out_e)
        assert len(m.layer._forward_hooks) == len(eager.layer._forward_hooks) == 1
        assert len(m.seen) == len(eager.seen) == 1
        _real(out_j, m.seen)
    finally:
        for h in list(torch.nn.modules.module._global_forward_pre_hooks):
            if h not in global_hooks:
                del torch.nn.modules.module._global_forward_pre_hooks[h]


def test_a_failed_compile_leaves_a_hugging_face_model_as_it_was() -> None:
    """The issue's finding: a compile that fails while ``output_hidden_states=True`` left
    transformers' output-capturing hooks installed without its flag, so later eager calls
    installed them again and returned extra hidden states."""
    T = pytest.importorskip("transformers", reason="transformers is in the test extra")
    cfg = T.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
                        max_position_embeddings=32)
    torch.manual_seed(0)
    model = T.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(3, 64, (2, 6))
    reference = copy.deepcopy(model)

    class Refuse(nn.Module):
        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return h.reshape(int(h.sum()))  # data-dependent: refused

    head = model.lm_head
    model.lm_head = nn.Sequential(head, Refuse())
    with pytest.raises(ThunderTraceError):
        thunder_ir.jit(model)(ids, output_hidden_states=True)
    model.lm_head = head
    hooks = {n: len(m._forward_hooks) for n, m in model.named_modules() if m._forward_hooks}
    assert hooks == {}
    out, ref = model(ids, output_hidden_states=True), reference(ids, output_hidden_states=True)
    assert len(out.hidden_states) == len(ref.hidden_states) == 3
    torch.testing.assert_close(out.logits, ref.logits)
    assert model(ids).hidden_states is None


# --------------------------------------------------------------------------- layouts, messages


def test_a_result_written_through_a_column_major_layout_keeps_eagers_strides() -> None:
    """``y[-1] = 1`` on a column-major ``y``, returned: the program computes it out of
    place (a cat), laid out as eager's written tensor (tests verify layouts: a difference
    raises)."""
    g = torch.Generator().manual_seed(273)
    a = torch.randn((3, 2), generator=g).permute(1, 0)
    b = torch.randn((1, 3, 2), generator=g)[..., 0]

    def f(a: torch.Tensor, b: torch.Tensor) -> Any:
        y = torch.sub(b, a)
        y[-1] = 1.0
        return y, y.t(), y[:, 1:]

    for rg in (False, True):
        res = check_against_eager(f, a.clone().requires_grad_(rg), b)
        assert [o.stride() for o in res.jitted] == [o.stride() for o in res.eager]


def test_a_wrong_shape_call_prints_only_thunder_irs_message(capfd: Any) -> None:
    """After a symbolic program, a call of the wrong shape runs torch's fake kernels,
    which log each failure at ERROR with a traceback: none of that reaches stderr."""
    jm = thunder_ir.jit(nn.Linear(3, 3))
    jm(torch.randn(2, 3))
    jm(torch.randn(4, 3))
    capfd.readouterr()
    with pytest.raises(ThunderTraceError, match="same reduction dim"):
        jm(torch.randn(5, 4))
    err = capfd.readouterr().err
    assert "fake_tensor" not in err and "Traceback" not in err, err


def test_eagers_error_for_a_wrong_shape_names_the_users_line() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w)

    with pytest.raises(ThunderTraceError, match=r"test_trust_findings\.py:\d+"):
        thunder_ir.jit(f)(torch.randn(2, 4), torch.randn(3, 3))


# --------------------------------------------------------------------------- failure injection


def _snapshot(model: nn.Module) -> Any:
    """Everything of ``model`` and of torch's global state a failed compile could leave
    changed: each module's fields (by identity, hook dicts by content), its tensors' values,
    its config objects' fields, torch's global hooks, grad mode, the default dtype and the
    random generator's state."""
    mods = []
    for name, m in model.named_modules():
        fields = {k: (v if isinstance(v, dict) and "hook" in k else id(v))
                  for k, v in m.__dict__.items()}
        fields = {k: (list(v.items()) if isinstance(v, dict) else v) for k, v in fields.items()}
        config = getattr(m, "config", None)
        mods.append((name, fields, dict(vars(config)) if config is not None else None))
    tensors = {k: (id(v), v.detach().clone())
               for k, v in model.state_dict(keep_vars=True).items()}
    g = torch.nn.modules.module
    global_hooks = [list(getattr(g, n).items()) for n in dir(g)
                    if n.startswith("_global_") and isinstance(getattr(g, n), dict)]
    return (mods, tensors, global_hooks, torch.is_grad_enabled(), torch.get_default_dtype(),
            torch.random.get_rng_state())


def _same_snapshot(a: Any, b: Any) -> None:
    mods_a, tensors_a, hooks_a, *rest_a = a
    mods_b, tensors_b, hooks_b, *rest_b = b
    assert mods_a == mods_b
    assert tensors_a.keys() == tensors_b.keys()
    for k, (i, t) in tensors_a.items():
        assert tensors_b[k][0] == i and torch.equal(tensors_b[k][1], t), k
    assert hooks_a == hooks_b
    assert rest_a[:2] == rest_b[:2] and torch.equal(rest_a[2], rest_b[2])


class _FailAt:
    """Makes the ``n``-th torch call of a trace raise (a stand-in for any refused
    construct at that point of the model)."""

    def __init__(self, n: int) -> None:
        self.n, self.calls = n, 0

    def wrap(self, dispatch: Any) -> Any:
        def failing(mode: Any, func: Any, args: Any, kwargs: Any) -> Any:
            self.calls += 1
            if self.calls == self.n:
                raise ThunderTraceError(f"injected failure at torch call {self.n}")
            return dispatch(mode, func, args, kwargs)

        return failing


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_a_compile_failing_anywhere_in_a_real_model_leaves_it_as_it_was(
        family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile made to fail at many points of a Hugging Face model (training, labels,
    hidden states and attentions asked for) leaves the model, its config and torch's
    global state as they were; the next compile then gives eager's results."""
    T = pytest.importorskip("transformers", reason="transformers is in the test extra")
    from thunder_ir.frontend.context import TraceMode

    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, vocab_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    model = (T.LlamaForCausalLM(T.LlamaConfig(**small, num_key_value_heads=2))
             if family == "llama" else T.BertForMaskedLM(T.BertConfig(**small)))
    ids = torch.randint(3, 64, (2, 6), generator=torch.Generator().manual_seed(1))
    kwargs = dict(labels=ids, output_hidden_states=True, output_attentions=True)
    reference = copy.deepcopy(model)
    dispatch = TraceMode._dispatch
    failed_at = []
    for n in (1, 2, 5, 13, 34, 89, 233, 610):
        before = _snapshot(model)
        fail = _FailAt(n)
        monkeypatch.setattr(TraceMode, "_dispatch", fail.wrap(dispatch))
        try:
            thunder_ir.jit(model)(ids, **kwargs)
        except ThunderTraceError as e:
            assert f"injected failure at torch call {n}" in str(e)
            failed_at.append(n)
        finally:
            monkeypatch.setattr(TraceMode, "_dispatch", dispatch)
        if fail.calls < n:
            break  # the trace made fewer calls: it compiled, as it should
        _same_snapshot(before, _snapshot(model))
    assert len(failed_at) >= 5, failed_at
    torch.manual_seed(2)
    out = thunder_ir.jit(model)(ids, **kwargs)
    torch.manual_seed(2)
    ref = reference(ids, **kwargs)
    torch.testing.assert_close(out.loss, ref.loss)
    assert len(out.hidden_states) == len(ref.hidden_states)
    assert len(out.attentions) == len(ref.attentions)
    out.loss.backward()
    ref.loss.backward()
    for (k, a), b in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert (a.grad is None) == (b.grad is None), k
        if a.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, msg=k)
    _real(out.loss, out.logits, out.hidden_states)
