"""thunder_ir.extend: operators, replaces=, implementations, grad transforms.

The acceptance flow is the reference system's "Extending Thunder" tutorial, reproduced on
CPU by ``examples/extend_rope.py`` (Triton kernels in Triton's interpreter): ``apply_rope``
becomes an operator that replaces the Python function, Triton RoPE kernels become
operators, a checker and execution transform route ``apply_rope`` to the Triton forward,
and a grad transform makes the backward use the Triton backward kernel.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
import types
from typing import Any

import pytest
import torch

import thunder_ir
from thunder_ir.extend import OperatorExecutor, deregister_executor, get_grad, put_grads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _load_example() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "extend_rope_example", os.path.join(ROOT, "examples", "extend_rope.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


pytest.importorskip("triton", reason="the RoPE kernels of the acceptance test are Triton kernels")
E = _load_example()

_names = itertools.count()


@pytest.fixture
def ex_name() -> Any:
    """A fresh executor name per test; the executor is forgotten afterwards."""
    name = f"ext{next(_names)}"
    yield name
    from thunder_ir.lowering.executors import get_all_executors

    for e in get_all_executors():
        if e.name == name:
            deregister_executor(e)


def _rope_inputs(requires_grad: bool = False) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    x = torch.randn(2, 2, 8, 8, requires_grad=requires_grad)
    cos, sin = E.rope_cache(8, 8)
    return x, cos, sin


def rope_fn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Reaches ``apply_rope`` as a module attribute."""
    return E.apply_rope(x, cos, sin) * 2


def _lines(trace: Any, word: str) -> list[str]:
    return [ln.strip() for ln in str(trace).splitlines() if word in ln and "=" in ln]


# --------------------------------------------------------------------------- acceptance


def test_operator_replaces_apply_rope(ex_name: str) -> None:
    my_ex = OperatorExecutor(ex_name, version="0.0.1")
    thunder_ir.extend.register_executor(my_ex)
    my_ex.register_operator("apply_rope", like=E.apply_rope, fn=E.apply_rope,
                            replaces=E.apply_rope)
    x, cos, sin = _rope_inputs()
    executors = (my_ex,) + thunder_ir.get_default_executors()  # noqa: RUF005 (as users write)
    jitted = thunder_ir.jit(rope_fn, executors=executors)
    torch.testing.assert_close(jitted(x, cos, sin), rope_fn(x, cos, sin), rtol=0, atol=0)
    first, last = thunder_ir.last_traces(jitted)[0], thunder_ir.last_traces(jitted)[-1]
    assert _lines(first, f"{ex_name}.apply_rope(x, cos, sin)")
    assert "cat" not in str(first)  # recorded as one op, not traced through
    assert _lines(last, f"{ex_name}.apply_rope(x, cos, sin)")
    assert last.source is not None  # generated code calls the operator through its namespace
    assert f"from thunder_ir.runtime.namespace import {ex_name}\n" in last.source


def test_triton_forward_and_custom_backward(ex_name: str) -> None:
    parts = E.register(ex_name)
    executors = (parts["executor"], *thunder_ir.get_default_executors())
    x, cos, sin = _rope_inputs(requires_grad=True)
    expected = rope_fn(x, cos, sin)
    go = torch.randn_like(expected)
    (gx_expected,) = torch.autograd.grad(expected, (x,), go)
    jitted = thunder_ir.jit(rope_fn, executors=executors)
    actual = jitted(x, cos, sin)
    (gx_actual,) = torch.autograd.grad(actual, (x,), go)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(gx_actual, gx_expected)
    fwd = thunder_ir.last_traces(jitted)[-1]
    bwd = thunder_ir.last_backward_traces(jitted)[-1]
    assert _lines(fwd, f"{ex_name}.rope_forward_triton(x, cos, sin)")
    assert not _lines(fwd, ".apply_rope(")
    (line,) = _lines(bwd, f"{ex_name}.rope_backward_triton(")
    assert f"{ex_name}.rope_backward_triton(4, 4, cos, sin, " in line  # launch config inline
    assert "rope_forward_triton" not in str(bwd)  # the forward is not recomputed
    assert "operator_vjp" not in str(bwd)

    # Inference takes the execution transform too; the checker refuses 3-d inputs.
    with torch.no_grad():
        torch.testing.assert_close(jitted(x, cos, sin), expected)
        assert _lines(thunder_ir.last_traces(jitted)[-1], "rope_forward_triton(x, cos, sin)")
        x3 = x[0].detach()
        torch.testing.assert_close(jitted(x3, cos, sin), rope_fn(x3, cos, sin))
        last = thunder_ir.last_traces(jitted)[-1]
        assert _lines(last, f"{ex_name}.apply_rope(x, cos, sin)")
        assert "triton" not in str(last)


def test_module_training_matches_eager(ex_name: str) -> None:
    parts = E.register(ex_name)
    torch.manual_seed(0)
    model = E.RopeAttentionScores()
    jitted = thunder_ir.jit(model, executors=(parts["executor"],
                                              *thunder_ir.get_default_executors()))
    x = torch.randn(2, 8, 16, requires_grad=True)
    expected = model(x)
    go = torch.randn_like(expected)
    g_expected = torch.autograd.grad(expected, (x, model.qk.weight), go)
    actual = jitted(x)
    g_actual = torch.autograd.grad(actual, (x, model.qk.weight), go)
    torch.testing.assert_close(actual, expected)
    for a, e in zip(g_actual, g_expected):
        torch.testing.assert_close(a, e)
    assert len(_lines(thunder_ir.last_traces(jitted)[-1], "rope_forward_triton(")) == 2
    assert len(_lines(thunder_ir.last_backward_traces(jitted)[-1],
                      "rope_backward_triton(")) == 2


def test_operator_without_grad_transform_uses_autograd(ex_name: str) -> None:
    my_ex = OperatorExecutor(ex_name)
    thunder_ir.extend.register_executor(my_ex)
    my_ex.register_operator("apply_rope", like=E.apply_rope, fn=E.apply_rope,
                            replaces=E.apply_rope)
    x, cos, sin = _rope_inputs(requires_grad=True)
    expected = rope_fn(x, cos, sin)
    (g_expected,) = torch.autograd.grad(expected.sum(), (x,))
    jitted = thunder_ir.jit(rope_fn, executors=[my_ex])
    (g_actual,) = torch.autograd.grad(jitted(x, cos, sin).sum(), (x,))
    torch.testing.assert_close(g_actual, g_expected)
    assert "operator_vjp" in str(thunder_ir.last_backward_traces(jitted)[-1])


def test_operators_and_opaque_calls_share_one_gradient_path(
        ex_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator without a grad transform (re-run in the backward) and an opaque torch
    call (recorded in the forward) are both recorded by `record_graph` and differentiated
    by `handle_vjp`: one mechanism, two schedules."""
    from thunder_ir.runtime import autograd_fallback

    my_ex = OperatorExecutor(ex_name)
    thunder_ir.extend.register_executor(my_ex)
    my_ex.register_operator("apply_rope", like=E.apply_rope, fn=E.apply_rope,
                            replaces=E.apply_rope)
    recorded: list[int] = []
    real = autograd_fallback.record_graph

    def spy(fn: Any, inputs: Any, grad_inputs: Any, layout: Any) -> Any:
        recorded.append(len(inputs))
        return real(fn, inputs, grad_inputs, layout)

    monkeypatch.setattr(autograd_fallback, "record_graph", spy)

    def f(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return torch.special.logsumexp(rope_fn(x, cos, sin), -1)  # an opaque call

    x, cos, sin = _rope_inputs(requires_grad=True)
    (g_expected,) = torch.autograd.grad(f(x, cos, sin).sum(), (x,))
    jitted = thunder_ir.jit(f, executors=[my_ex])
    out = jitted(x, cos, sin)
    assert len(recorded) == 1  # the opaque call, in the forward
    (g_actual,) = torch.autograd.grad(out.sum(), (x,))
    assert len(recorded) == 2  # the operator, re-run in the backward
    torch.testing.assert_close(g_actual, g_expected)
    bwd = str(thunder_ir.last_backward_traces(jitted)[-1])
    assert "operator_vjp" in bwd and "handle_vjp" in bwd


def test_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    E.main()
    out = capsys.readouterr().out
    devs = {ln.split(":")[0]: float(ln.split(":")[1]) for ln in out.splitlines()
            if "deviation:" in ln}
    assert set(devs) == {"inference deviation", "training deviation", "grad deviation"}
    assert all(d < 1e-4 for d in devs.values())
    # The backward runs the custom kernel, with its launch config (block 4, 4 warps) inline.
    assert "= my_ex.rope_backward_triton(4, 4, " in out


# --------------------------------------------------------------------------- replaces=

helpers = types.ModuleType("thunder_ir_test_extend_helpers")
exec("def scale_shift(x, s):\n    return x * s + 1\n", helpers.__dict__)
sys.modules[helpers.__name__] = helpers
_from_import: dict[str, Any] = {}
exec("from thunder_ir_test_extend_helpers import scale_shift\n"
     "def user(x):\n    return scale_shift(x, 2.0).sin()\n", _from_import)


class Rotator:
    def __init__(self, k: float) -> None:
        self.k = k

    def turn(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.k - 1


def _scale_shift_operator(ex_name: str) -> Any:
    ex = OperatorExecutor(ex_name)
    thunder_ir.extend.register_executor(ex)
    return ex, ex.register_operator("scale_shift", like=helpers.scale_shift,
                                    fn=helpers.scale_shift, replaces=helpers.scale_shift)


def test_replaces_module_attribute(ex_name: str) -> None:
    ex, _ = _scale_shift_operator(ex_name)

    def user(x: torch.Tensor) -> torch.Tensor:
        return helpers.scale_shift(x, 3.0).cos()

    x = torch.randn(3, 4)
    jitted = thunder_ir.jit(user, executors=[ex])
    torch.testing.assert_close(jitted(x), user(x))
    assert _lines(thunder_ir.last_traces(jitted)[0], f"{ex_name}.scale_shift(x, 3.0)")


def test_replaces_from_import(ex_name: str) -> None:
    ex, _ = _scale_shift_operator(ex_name)
    user = _from_import["user"]
    x = torch.randn(3, 4)
    jitted = thunder_ir.jit(user, executors=[ex])
    torch.testing.assert_close(jitted(x), user(x))
    assert _lines(thunder_ir.last_traces(jitted)[0], f"{ex_name}.scale_shift(x, 2.0)")
    assert _lines(thunder_ir.last_traces(jitted)[-1], f"{ex_name}.scale_shift(x, 2.0)")


def test_replaces_method(ex_name: str) -> None:
    ex = OperatorExecutor(ex_name)
    thunder_ir.extend.register_executor(ex)
    ex.register_operator("turn", like=Rotator.turn, fn=Rotator.turn, replaces=Rotator.turn)
    r = Rotator(3.0)

    def user(x: torch.Tensor) -> torch.Tensor:
        return r.turn(x) + 1

    x = torch.randn(5)
    jitted = thunder_ir.jit(user, executors=[ex])
    torch.testing.assert_close(jitted(x), user(x))
    assert _lines(thunder_ir.last_traces(jitted)[0], f"{ex_name}.turn(None, x, self=")


def test_replaced_function_untouched_outside_tracing(ex_name: str) -> None:
    code = helpers.scale_shift.__code__
    ex, op = _scale_shift_operator(ex_name)
    x = torch.randn(2)
    assert helpers.scale_shift.__code__ is code
    torch.testing.assert_close(helpers.scale_shift(x, 2.0), x * 2.0 + 1)
    torch.testing.assert_close(op(x, 2.0), x * 2.0 + 1)  # a symbol outside tracing runs fn

    def failing(x: torch.Tensor) -> torch.Tensor:
        y = helpers.scale_shift(x, 2.0)
        assert helpers.scale_shift.__code__ is not code  # diverted while tracing
        raise ValueError("boom")
        return y

    with pytest.raises(ValueError, match="boom"):
        thunder_ir.jit(failing, executors=[ex])(x)
    assert helpers.scale_shift.__code__ is code
    assert _from_import["scale_shift"].__code__ is code
    torch.testing.assert_close(_from_import["user"](x), (x * 2.0 + 1).sin())


def test_replaced_torch_function_is_diverted_in_the_trace_alone(ex_name: str) -> None:
    """A replaced torch callable is diverted through the trace's own handler table: the
    process-wide table is never written, so another thread's trace (or eager code) never
    meets the diversion."""
    from thunder_ir.frontend.table import HANDLERS

    ex = OperatorExecutor(ex_name)
    thunder_ir.extend.register_executor(ex)
    ex.register_operator("tanh_op", like=torch.tanh, fn=torch.tanh, replaces=torch.tanh)
    before = dict(HANDLERS)
    seen: list[bool] = []

    def user(x: torch.Tensor) -> torch.Tensor:
        seen.append(HANDLERS.get(torch.tanh) is before.get(torch.tanh))
        return torch.tanh(x) * 2

    x = torch.randn(4)
    jitted = thunder_ir.jit(user, executors=[ex])
    torch.testing.assert_close(jitted(x), torch.tanh(x) * 2)
    assert seen == [True] and before == HANDLERS
    assert _lines(thunder_ir.last_traces(jitted)[0], f"{ex_name}.tanh_op(")
    plain = thunder_ir.jit(user)  # the executor not in use: its operator is not claimed
    torch.testing.assert_close(plain(x), torch.tanh(x) * 2)


# --------------------------------------------------------------------------- API details


def test_tensor_proxy_like() -> None:
    p = thunder_ir.TensorProxy(like=torch.empty(2, 3, dtype=torch.float16))
    assert isinstance(p, thunder_ir.TensorProxy) and isinstance(p, torch.Tensor)
    assert p.shape == (2, 3) and p.dtype == torch.float16 and p.device.type == "cpu"
    q = thunder_ir.TensorProxy(like=p, shape=(4,), dtype=torch.float32)
    assert q.shape == (4,) and q.dtype == torch.float32
    assert not isinstance(torch.empty(1), thunder_ir.TensorProxy)


def test_default_executors_is_a_tuple(ex_name: str) -> None:
    ex = OperatorExecutor(ex_name, version="1.2")
    executors = (ex,) + thunder_ir.get_default_executors()  # noqa: RUF005 (the API under test)
    assert executors[0] is ex and executors[-1].name == "torch"
    assert repr(ex) == f"OperatorExecutor(name={ex_name!r}, version='1.2')"
    thunder_ir.extend.register_executor(ex)
    assert ex in thunder_ir.get_all_executors()


def test_grad_helpers_outside_a_grad_transform() -> None:
    with pytest.raises(RuntimeError, match="grad transform"):
        get_grad(torch.ones(1))
    with pytest.raises(RuntimeError, match="grad transform"):
        put_grads((torch.ones(1),), (torch.ones(1),))


def test_implementation_of_an_ltorch_op(ex_name: str) -> None:
    from thunder_ir.dialects.ltorch import OPS

    ex = OperatorExecutor(ex_name)
    thunder_ir.extend.register_executor(ex)
    calls: list[tuple[int, ...]] = []

    def fast_tanh(a: torch.Tensor) -> torch.Tensor:
        return torch.tanh(a)

    op = ex.register_operator("fast_tanh", meta=lambda a: thunder_ir.TensorProxy(like=a),
                              fn=fast_tanh)

    def checker(a: Any) -> bool:
        calls.append(tuple(a.shape))
        return a.ndim == 2

    def grad(a: Any) -> Any:
        out = op(a)
        put_grads((a,), (get_grad(out) * (1 - out * out),))
        return out

    ex.register_implementation(OPS["tanh"], checker=checker, execution_transform=op,
                               grad_transform=grad)
    jitted = thunder_ir.jit(lambda a: torch.tanh(a) * 3, executors=[ex])
    a = torch.randn(3, 4, requires_grad=True)
    (g,) = torch.autograd.grad(jitted(a).sum(), (a,))
    torch.testing.assert_close(g, 3 * (1 - torch.tanh(a) ** 2))
    assert _lines(thunder_ir.last_traces(jitted)[-1], f"{ex_name}.fast_tanh(")
    assert (3, 4) in calls
    with torch.no_grad():
        b = torch.randn(5)
        torch.testing.assert_close(jitted(b), torch.tanh(b) * 3)
        assert "fast_tanh" not in str(thunder_ir.last_traces(jitted)[-1])


def test_operator_with_varargs_and_non_tensor_outputs(ex_name: str) -> None:
    ex = OperatorExecutor(ex_name)

    def total(*ts: torch.Tensor, scale: float = 1.0) -> tuple[torch.Tensor, str]:
        return sum(ts) * scale, "note"  # type: ignore[return-value]

    op = ex.register_operator("total", like=total, fn=total)

    def user(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out, note = op(a, b, a, scale=2.0)
        assert note == "note"
        return out

    a, b = torch.randn(3), torch.randn(3)
    jitted = thunder_ir.jit(user, executors=[ex])
    torch.testing.assert_close(jitted(a, b), (a + b + a) * 2.0)
    assert _lines(thunder_ir.last_traces(jitted)[-1], f"{ex_name}.total(")
