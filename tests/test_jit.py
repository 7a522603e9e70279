"""thunder_ir.jit end to end for inference: models against eager, cache, errors, traces;
jitted callables inside jitted code and jitted modules as modules (``functional_call``,
``training``, conversions), trained against eager."""

from __future__ import annotations

import collections
import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from models import GPT2, MLP, Config, LlamaGPT, LLaMAMLP
from torch import nn

import thunder_ir


def _max_dev(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


# --------------------------------------------------------------------------- models


def test_llamamlp_matches_eager_and_prints_like_the_seed() -> None:
    torch.manual_seed(0)
    m = LLaMAMLP(64, 172)
    for p in m.parameters():
        p.requires_grad_(False)
    tm = thunder_ir.jit(m)
    assert isinstance(tm, thunder_ir.ThunderModule)
    assert isinstance(tm, nn.Module)
    assert str(tm).startswith("ThunderModule(\n  (_model): LLaMAMLP(")
    x = torch.randn(2, 16, 64)
    assert _max_dev(tm(x), m(x)) <= 1e-6
    src = str(thunder_ir.last_traces(tm)[-1])
    assert "def forward(x, t_fc_1_weight, t_fc_2_weight, t_proj_weight):" in src
    assert '# x: "cpu f32[2, 16, 64]"' in src
    assert "del " in src


def test_mlp_eval_matches_eager() -> None:
    torch.manual_seed(0)
    m = MLP().eval().requires_grad_(False)
    tm = thunder_ir.jit(m)
    x = torch.randn(8, 784)
    assert _max_dev(tm(x), m(x)) <= 1e-5


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("use_mask", [False, True])
def test_llama_gpt_matches_eager(tie: bool, use_mask: bool) -> None:
    torch.manual_seed(0)
    m = LlamaGPT(Config(tie_embeddings=tie)).eval()
    tm = thunder_ir.jit(m)
    idx = torch.randint(0, 96, (2, 16))
    with torch.no_grad():
        assert _max_dev(tm(idx, None, use_mask), m(idx, None, use_mask)) <= 1e-5


@pytest.mark.parametrize("flash", [False, True])
def test_gpt2_matches_eager(flash: bool) -> None:
    torch.manual_seed(0)
    m = GPT2(Config(), flash=flash).eval()
    tm = thunder_ir.jit(m)
    idx = torch.randint(0, 96, (2, 16))
    targets = torch.randint(0, 96, (2, 16))
    with torch.no_grad():
        logits, loss = tm(idx, targets)
        e_logits, e_loss = m(idx, targets)
        assert _max_dev(logits, e_logits) <= 1e-5
        assert _max_dev(loss, e_loss) <= 1e-5
        logits, loss = tm(idx)
        assert loss is None
        assert logits.shape == (2, 1, 96)
        assert _max_dev(logits, m(idx)[0]) <= 1e-5


def test_module_shares_parameters_and_state() -> None:
    m = LLaMAMLP(8, 16)
    tm = thunder_ir.jit(m)
    assert tm.state_dict().keys() == m.state_dict().keys()
    assert all(a is b for a, b in zip(tm.parameters(), m.parameters()))
    assert [n for n, _ in tm.named_modules()] == [n for n, _ in m.named_modules()]
    assert tm.fc_1 is m.fc_1
    x = torch.randn(3, 8)
    with torch.no_grad():
        m.fc_1.weight.mul_(2)  # an update through the original shows in the jitted module
        assert _max_dev(tm(x), m(x)) <= 1e-6


def _real(*values: object) -> None:
    """Every tensor among ``values`` (nested) is a real tensor, never a tracing proxy."""
    for v in torch.utils._pytree.tree_leaves(values):
        if isinstance(v, torch.Tensor):
            assert type(v) in (torch.Tensor, nn.Parameter), type(v)


# --------------------------------------------------------------------------- jit inside jit


class _Outer(nn.Module):
    """A model holding a jitted submodule (``jit_inner``) or the plain one."""

    def __init__(self, jit_inner: bool) -> None:
        super().__init__()
        lin = nn.Linear(3, 3)
        self.inner = thunder_ir.jit(lin) if jit_inner else lin
        self.norm = nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.inner(x)).relu()


@pytest.mark.parametrize("inner_called_first", [False, True], ids=["first call", "cached"])
def test_a_jitted_submodule_inside_a_jitted_model_trains_as_eager(
        inner_called_first: bool) -> None:
    """The outer trace runs the inner jitted module's Python (its own programs are not
    called with traced tensors): eager's outputs, gradients and batch-norm statistics,
    whether or not the inner one compiled before; afterwards the inner one, called on
    its own, is eager's too, and nothing holds a traced tensor."""
    torch.manual_seed(0)
    model, eager = _Outer(jit_inner=True), _Outer(jit_inner=False)
    eager.load_state_dict(model.state_dict())
    if inner_called_first:
        with torch.no_grad():
            _real(model.inner(torch.randn(4, 3)))
    inner_misses = thunder_ir.cache_misses(model.inner)
    jm = thunder_ir.jit(model)
    for _ in range(2):
        x = torch.randn(4, 3)
        out, expected = jm(x), eager(x)
        torch.testing.assert_close(out, expected)
        out.pow(2).sum().backward()
        expected.pow(2).sum().backward()
        for (k, p), (_, q) in zip(model.named_parameters(), eager.named_parameters(),
                                  strict=True):
            torch.testing.assert_close(p.grad, q.grad, msg=k)
        torch.testing.assert_close(model.norm.running_mean, eager.norm.running_mean)
        _real(out, [p.grad for p in model.parameters()], model.state_dict())
    assert thunder_ir.cache_misses(jm) == 1
    assert thunder_ir.cache_misses(model.inner) == inner_misses  # the outer trace inlined it
    x = torch.randn(4, 3)
    own = model.inner(x)
    _real(own)
    torch.testing.assert_close(own, eager.inner(x))
    assert all(type(p) is nn.Parameter for p in model.parameters())


@pytest.mark.parametrize("inner_called_first", [False, True], ids=["first call", "cached"])
def test_a_jitted_function_calling_another_gives_eagers_values_and_gradients(
        inner_called_first: bool) -> None:
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    inner = thunder_ir.jit(double)

    def outer(x: torch.Tensor) -> torch.Tensor:
        return inner(x).sin() + 1

    if inner_called_first:
        _real(inner(torch.randn(3)))
    misses = thunder_ir.cache_misses(inner)
    jf = thunder_ir.jit(outer)
    x = torch.randn(3, requires_grad=True)
    xe = x.detach().clone().requires_grad_()
    out = jf(x)
    expected = (xe * 2).sin() + 1
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(x.grad, xe.grad)
    _real(out, x.grad)
    assert thunder_ir.cache_misses(inner) == misses
    y = inner(x)  # on its own afterwards: its own program, real tensors
    _real(y)
    torch.testing.assert_close(y, x * 2)


def test_a_jitted_forward_method_inside_a_jitted_model_uses_the_traced_parameters() -> None:
    """``model[0].forward = thunder_ir.jit(model[0].forward)``, then ``jit(model)``: the
    method runs on the outer trace's copy of its module; gradients reach the parameters."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    eager = copy.deepcopy(model)
    model[0].forward = thunder_ir.jit(model[0].forward)
    jm = thunder_ir.jit(model)
    x = torch.randn(2, 3)
    out, expected = jm(x), eager(x)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    for (k, p), (_, q) in zip(model.named_parameters(), eager.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=k)
    _real(out, list(model.parameters()))


def test_a_jitted_module_held_by_a_jitted_function_gets_eagers_gradients() -> None:
    """A jitted module the traced function reaches through a closure (not a module tree
    the trace copies) runs as itself: its parameters are captured, and get eager's
    gradients."""
    torch.manual_seed(0)
    lin = nn.Linear(3, 3)
    eager = copy.deepcopy(lin)
    jm = thunder_ir.jit(lin)
    f = thunder_ir.jit(lambda x: jm(x).relu().sum())
    x = torch.randn(2, 3)
    f(x).backward()
    eager(x).relu().sum().backward()
    for p, q in zip(lin.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    _real(list(lin.parameters()), [p.grad for p in lin.parameters()])
    assert thunder_ir.cache_misses(jm) == 0


def test_jit_of_a_jitted_module_or_function_is_eagers() -> None:
    torch.manual_seed(0)
    lin = nn.Linear(3, 3)
    x = torch.randn(2, 3)
    torch.testing.assert_close(thunder_ir.jit(thunder_ir.jit(lin))(x), lin(x))
    torch.testing.assert_close(thunder_ir.jit(thunder_ir.jit(torch.cos))(x), x.cos())


# --------------------------------------------------------------------------- jitted modules


@pytest.mark.parametrize("build", [lambda: nn.Linear(5, 3),
                                   lambda: nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4)),
                                   lambda: nn.BatchNorm1d(5)],
                         ids=["Linear", "Sequential", "BatchNorm1d"])
def test_functional_call_of_a_jitted_module_is_eagers(build) -> None:
    """``torch.func.functional_call(jm, params, (x,))``: the given parameters and buffers
    are used (eager's output, gradients to the given tensors, the given buffers updated
    as eager updates them); the module's own are unchanged afterwards, and a plain call
    uses them again."""
    from torch.func import functional_call

    torch.manual_seed(0)
    model = build()
    jm = thunder_ir.jit(copy.deepcopy(model))
    own = {k: v.clone() for k, v in jm.state_dict().items()}
    tensors = {k: v for k, v in jm.named_parameters()}
    for _ in range(2):
        given = {k: torch.randn_like(v).requires_grad_() for k, v in model.named_parameters()}
        given.update({k: v.clone() for k, v in model.named_buffers()})
        eager_given = {k: v.detach().clone().requires_grad_(v.requires_grad)
                       for k, v in given.items()}
        x = torch.randn(4, 5)
        out = functional_call(jm, given, (x,))
        expected = functional_call(model, eager_given, (x,))
        assert type(out) is torch.Tensor
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        for k, v in given.items():
            torch.testing.assert_close(v.grad if v.requires_grad else v,
                                       eager_given[k].grad if v.requires_grad
                                       else eager_given[k], msg=k)
        assert dict(jm.named_parameters()) == tensors
        for k, v in jm.state_dict().items():
            torch.testing.assert_close(v, own[k], msg=k)
        assert all(type(p) is nn.Parameter and p.grad is None for p in jm.parameters())
    x = torch.randn(4, 5)
    reference = copy.deepcopy(jm._model)
    torch.testing.assert_close(jm(x), reference(x))


def test_training_flag_is_the_models() -> None:
    """``jm.training`` is the model's own flag, whichever of the two was switched."""
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    jm = thunder_ir.jit(model)
    assert jm.training and model.training
    model.eval()
    assert not jm.training
    x = torch.randn(4, 3)
    torch.testing.assert_close(jm(x), model(x))  # eval: no dropout
    model.train()
    assert jm.training
    jm.eval()
    assert not model.training and not model[1].training
    jm.train()
    assert model.training and model[1].training
    jm.training = False  # as on a module: its own flag only
    assert not model.training and model[1].training


def test_converting_a_jitted_module_converts_its_model_once() -> None:
    """``jm.double()`` converts the model's tensors (each once, though the jitted module
    shares the model's parameter dicts), and the program follows."""
    model = nn.Linear(3, 3)
    jm = thunder_ir.jit(model)
    seen: list[torch.Tensor] = []
    jm._apply(lambda t: seen.append(t) or t)
    assert len(seen) == 2  # weight and bias, once each
    jm.double()
    assert model.weight.dtype is torch.float64
    x = torch.randn(2, 3, dtype=torch.float64)
    torch.testing.assert_close(jm(x), model(x))


# --------------------------------------------------------------------------- cache


def test_cache_hits_misses_and_recompiles() -> None:
    calls = []

    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        calls.append(1)
        return x * n

    jf = thunder_ir.jit(f)
    x = torch.randn(3)
    jf(x, 2)
    jf(x, 2)
    jf(torch.randn(3), 2)
    assert (thunder_ir.cache_misses(jf), thunder_ir.cache_hits(jf)) == (1, 2)
    assert len(calls) == 1  # a repeated key never re-traces
    torch.testing.assert_close(jf(x, 3), x * 3)  # a new non-tensor value recompiles
    jf(torch.randn(4), 2)  # a new shape recompiles
    jf(x.double(), 2)  # a new dtype recompiles
    assert thunder_ir.cache_misses(jf) == 4
    with torch.no_grad():
        jf(x, 2)  # grad mode is part of the key
    assert thunder_ir.cache_misses(jf) == 5


def test_module_state_changes_recompile() -> None:
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    tm = thunder_ir.jit(m)
    x = torch.randn(2, 4)
    m.eval()
    with torch.no_grad():
        out = tm(x)
        torch.testing.assert_close(out, m(x))
        tm(x)
        assert thunder_ir.cache_misses(tm) == 1
        m.train()  # a training flag is part of the key
        tm(x)
        assert thunder_ir.cache_misses(tm) == 2
        m.eval()
        m[0].weight = nn.Parameter(torch.randn(4, 4))  # a replaced parameter is noticed
        torch.testing.assert_close(tm(x), m(x))
        m.double()  # .to()/.double() changes dtypes in place
        torch.testing.assert_close(tm(x.double()), m(x.double()))


def test_prologue_trace_prints() -> None:
    jf = thunder_ir.jit(lambda x: x + 1)
    jf(torch.randn(2))
    src = thunder_ir.last_prologue_traces(jf)[0]
    assert src.startswith("def prologue(")


# --------------------------------------------------------------------------- calling conventions


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    aux: torch.Tensor | None = None


torch.utils._pytree.register_dataclass(Output)


def test_nested_inputs_outputs_and_registered_containers() -> None:
    def f(inputs: dict, scale: float = 2.0, *, bias: torch.Tensor | None = None) -> Output:
        a, (b, c) = inputs["pair"], inputs["rest"]
        y = a * scale + b - c
        if bias is not None:
            y = y + bias
        return Output(logits=y, aux=None)

    jf = thunder_ir.jit(f)
    inp = {"pair": torch.randn(3), "rest": [torch.randn(3), torch.randn(3)]}
    out = jf(inp, 3.0, bias=torch.ones(3))
    ref = f(inp, 3.0, bias=torch.ones(3))
    assert isinstance(out, Output)
    torch.testing.assert_close(out.logits, ref.logits)
    assert out.aux is None

    def g(x: torch.Tensor) -> collections.OrderedDict:
        return collections.OrderedDict(a=x + 1, b=(x, 3))

    out = thunder_ir.jit(g)(torch.zeros(2))
    assert isinstance(out, collections.OrderedDict)
    assert out["b"][1] == 3


def test_wrong_number_of_arguments_raises_type_error() -> None:
    tm = thunder_ir.jit(LLaMAMLP(4, 8))
    with pytest.raises(TypeError, match="forward"):
        tm()
    jf = thunder_ir.jit(lambda x, y: x + y)
    with pytest.raises(TypeError):
        jf(torch.randn(2))


def test_real_model_idioms() -> None:
    def f(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if torch.jit.is_tracing() or torch.jit.is_scripting():
            raise AssertionError("not expected")
        pos = torch.arange(x.shape[-1], device=x.device)
        big_neg = torch.finfo(x.dtype).min
        if mask is None:
            mask = pos[None, :] > pos[:, None]
        return (x + pos).masked_fill(mask, big_neg).softmax(-1)

    x = torch.randn(4, 4)
    torch.testing.assert_close(thunder_ir.jit(f)(x), f(x))


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("body", [
    lambda x: x * 2 if int(x.sum()) > 0 else x,  # int() of a float tensor
    lambda x: x * float(x.sum().numpy()),
    lambda x: x.new_zeros(int(x.sum().abs())),
    lambda x: x * complex(x.sum()),
])
def test_data_dependent_errors_are_clear(body) -> None:
    jf = thunder_ir.jit(body)
    with pytest.raises(thunder_ir.DataDependentError) as e:
        jf(torch.randn(4))
    msg = str(e.value)
    assert "test_jit.py:" in msg
    assert "not known while tracing" in msg


def test_failure_while_tracing_leaves_module_untouched() -> None:
    class Bad(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.count.add_(1)
            y = self.lin(x)
            if int(y.mean()) > 0:  # int() of a float tensor read from the data: refused
                return y
            return -y

    m = Bad()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    params_before = [id(p) for p in m.parameters()]
    with pytest.raises(thunder_ir.DataDependentError):
        thunder_ir.jit(m)(torch.randn(2, 3))
    assert [id(p) for p in m.parameters()] == params_before
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k])
        assert not isinstance(v, thunder_ir.TensorProxy)


def test_deepcopy_of_a_traced_tensor_is_refused_naming_the_line() -> None:
    """``copy.deepcopy(self)`` in ``forward`` (eager: a twin module of new parameters) and
    ``copy.deepcopy(x)`` of an argument: a clear error naming the line (it was an
    AttributeError from torch's repr of the half-made copy); the module untouched."""
    import copy

    class Twin(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            twin = copy.deepcopy(self)
            return self.lin(x) + twin.lin(x)

    m = Twin()
    x = torch.randn(2, 3, requires_grad=True)
    torch.testing.assert_close(m(x), 2 * m.lin(x))  # eager runs it
    ids = [id(p) for p in m.parameters()]
    before = [p.detach().clone() for p in m.parameters()]
    for f in (thunder_ir.jit(m), thunder_ir.jit(lambda x: copy.deepcopy(x) * 2)):
        with pytest.raises(thunder_ir.ThunderTraceError,
                           match=r"test_jit\.py:\d+: copy\.deepcopy of a traced tensor"):
            f(x)
    assert [id(p) for p in m.parameters()] == ids
    for b, p in zip(before, m.parameters(), strict=True):
        assert torch.equal(p, b) and not isinstance(p, thunder_ir.TensorProxy)


def test_a_condition_whose_computation_fails_raises_eagers_error() -> None:
    """A speculated condition (``if y.sum() > 0``) computed on the call's tensors fails
    where eager fails (a float64 input to a float32 Linear): eager's own error, not a
    DataDependentError; a later valid call compiles and runs as eager."""
    class Branch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x)
            if y.sum() > 0:
                return y * 2
            return y

    m = Branch()
    jm = thunder_ir.jit(m)
    bad = torch.randn(2, 3, dtype=torch.float64)
    with pytest.raises(RuntimeError) as eager:
        m(bad)
    for _ in range(2):
        with pytest.raises(RuntimeError) as ours:
            jm(bad)
        assert type(ours.value) is type(eager.value)
        assert str(ours.value) == str(eager.value)
    x = torch.randn(2, 3)
    torch.testing.assert_close(jm(x), m(x))


# --------------------------------------------------------------------------- in-place


def test_inplace_ops_are_functionalized() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.add_(1)
        y += 3
        y[0] = -1.0
        y.masked_fill_(y > 100, 0.0)
        z = torch.zeros_like(y)
        z.copy_(y)
        return z

    x = torch.randn(4)
    torch.testing.assert_close(thunder_ir.jit(f)(x), f(x.clone()))


def test_writes_to_inputs_and_buffers_are_written_back() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x + 1

    x = torch.ones(3)
    out = thunder_ir.jit(f)(x)
    torch.testing.assert_close(x, torch.full((3,), 2.0))
    torch.testing.assert_close(out, torch.full((3,), 3.0))

    class Counter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("n", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.n += 1
            return x * self.n

    m = Counter()
    tm = thunder_ir.jit(m)
    tm(torch.ones(2))
    out = tm(torch.ones(2))
    assert m.n.item() == 2.0
    torch.testing.assert_close(out, torch.full((2,), 2.0))


def test_inplace_through_a_view_reaches_its_base() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1
        v = y[0]
        v.add_(1)
        return y

    x = torch.randn(3, 2)
    torch.testing.assert_close(thunder_ir.jit(f)(x), f(x))


# --------------------------------------------------------------------------- fallback, traces


def test_unknown_torch_function_falls_back_to_torch_call() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=0).repeat_interleave(2) + 1

    jf = thunder_ir.jit(f)
    x = torch.randn(5)
    torch.testing.assert_close(jf(x), f(x))
    first = str(thunder_ir.last_traces(jf)[0])
    assert "torch.cumsum(" in first


def test_traces_list_every_pass_and_final_trace_reexecutes() -> None:
    m = LLaMAMLP(8, 16).eval().requires_grad_(False)
    tm = thunder_ir.jit(m)
    x = torch.randn(2, 8)
    out = tm(x)
    traces = thunder_ir.last_traces(tm)
    names = [t.pass_name for t in traces]
    assert names[0] == "trace" and names[-1] == "del-last-used"
    assert "decompose-ltorch" in names and "lower-to-torch" in names
    src = str(traces[-1])
    assert src.startswith("# Constructed by del-last-used")
    assert src == traces[-1].source  # exactly the code that runs
    g: dict = {}
    exec(compile(src, "<trace>", "exec"), g)
    again = g["forward"](x, m.fc_1.weight, m.fc_2.weight, m.proj.weight)
    torch.testing.assert_close(again, out)


def test_trace_records_user_source_location() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return F.relu(x)  # the location recorded for this op

    jf = thunder_ir.jit(f)
    jf(torch.randn(2))
    mlir = thunder_ir.last_traces(jf)[0].mlir()
    line = f.__code__.co_firstlineno + 1
    assert f'test_jit.py":{line}:0)' in mlir  # xDSL's own location: loc("...":line:0)


def test_every_ltorch_op_is_reachable_from_torch() -> None:
    """Coverage of the torch -> ltorch table (contiguous is traced as the identity)."""
    from thunder_ir.frontend.torch_map import unmapped_ops

    # the backward kernels (and the forward that saves layer norm's statistics) are
    # emitted by autodiff, not traced from user code
    assert unmapped_ops() == ["ltorch.contiguous", "ltorch.convolution_backward",
                              "ltorch.embedding_backward",
                              "ltorch.gelu_backward", "ltorch.hardsigmoid_backward",
                              "ltorch.hardswish_backward", "ltorch.layer_norm_backward",
                              "ltorch.log_softmax_backward",
                              "ltorch.max_pool2d_with_indices_backward",
                              "ltorch.native_batch_norm_backward",
                              "ltorch.native_group_norm_backward", "ltorch.native_layer_norm",
                              "ltorch.nll_loss_backward", "ltorch.silu_backward",
                              "ltorch.softmax_backward", "ltorch.softplus_backward",
                              "ltorch.threshold_backward"]


_FRESH_PROCESS = """
import copy
import sys

import torch

import thunder_ir

assert "sympy" not in sys.modules, "import thunder_ir loaded sympy"
from models import GPT2, Config, LlamaGPT

checks = []  # (ours, eager's): compared at the end (torch.testing loads sympy itself)
for make in (LlamaGPT, GPT2):
    torch.manual_seed(0)
    model = make(Config(n_layer=2, block_size=16))
    ref = copy.deepcopy(model)
    idx, tgt = torch.randint(0, 96, (2, 16)), torch.randint(0, 96, (2, 16))
    with torch.no_grad():  # (GPT-2's: the logits of the last position, x[:, [-1], :])
        ours, eager = thunder_ir.jit(model)(idx), ref(idx)
        checks.append((ours[0], eager[0]) if make is GPT2 else (ours, eager))
    jm = thunder_ir.jit(model)
    if make is GPT2:  # (logits, loss)
        jm(idx, tgt)[1].backward()
        ref(idx, tgt)[1].backward()
    else:
        jm(idx).square().mean().backward()
        ref(idx).square().mean().backward()
    checks += [(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters(),
                                                strict=True)]
cnn = torch.nn.Sequential(  # inference only: its training still asks fake tensors
    torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
    torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, padding=1, groups=2),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)).eval()
x = torch.randn(2, 3, 16, 16)
with torch.no_grad():
    checks.append((thunder_ir.jit(cnn)(x), cnn(x)))
loaded = [m for m in ("sympy", "torch._dynamo") if m in sys.modules]
assert not loaded, f"the first calls loaded {loaded}"
for ours, eager in checks:
    torch.testing.assert_close(ours, eager)
"""


def test_first_calls_load_neither_sympy_nor_dynamo() -> None:
    """In a fresh process, ``import thunder_ir``, ``jit``, the first inference and training
    calls of Llama- and GPT-2-style models and a small CNN's inference load neither sympy
    nor ``torch._dynamo`` (about 0.6 s of imports that eager does not pay,
    which torch's Python meta kernels and ``torch._check`` would load:
    `thunder_ir.dialects.ltorch_rules` types those ops, `thunder_ir.frontend.layout`
    lays out their slices), and
    the results and gradients are eager's."""
    import os
    import subprocess
    import sys

    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [tests, *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", _FRESH_PROCESS], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
