"""`thunder_ir.frontend.subtrace`: a function traced on its own, the way the extension API
traces transforms and the ThunderFX splitter probes a graph; and `TraceContext`'s parts."""

from __future__ import annotations

import torch

from thunder_ir.dialects.types import tensor_type
from thunder_ir.frontend import Placeholder, subtrace
from thunder_ir.frontend.context import TraceContext, current, tracing_now
from thunder_ir.frontend.proxy import is_proxy
from thunder_ir.runtime.origins import ArgLeaf


def test_tensors_become_arguments_and_each_torch_call_an_op() -> None:
    x = torch.randn(2, 3)
    sub = subtrace(lambda a, n: (a * n).relu(), [x, 2.0], names=["x"])
    assert [op.name for op in sub.ops] == ["prims.constant", "ltorch.mul", "ltorch.relu"]
    assert is_proxy(sub.args[0]) and sub.args[1] == 2.0
    assert sub.inputs[1] is None and sub.inputs[0] is sub.args[0]._value
    assert sub.inputs[0].name_hint == "x"
    assert sub.ctx.build.input_kinds == [ArgLeaf(0)]
    assert is_proxy(sub.result) and sub.result.shape == (2, 3)
    assert not tracing_now()


def test_placeholders_and_nested_inputs() -> None:
    t = tensor_type((4,), torch.float32, "cpu")
    sub = subtrace(lambda pair: pair[0] + pair[1],
                   [(Placeholder(t, "a", requires_grad=True), torch.ones(4))])
    a, b = sub.args[0]
    assert a.requires_grad and not b.requires_grad
    assert [k.index for k in sub.ctx.build.input_kinds] == [0, 1]
    assert [op.name for op in sub.ops] == ["ltorch.add"]


def test_a_fragment_does_not_reach_the_trace_in_progress() -> None:
    """Inside a trace (user_code=False, as an extension's meta function is traced), the
    fragment's calls are recorded into its own program only, and the outer trace's mode
    is back afterwards."""
    seen: list[TraceContext] = []

    def outer(x: torch.Tensor) -> torch.Tensor:
        inner = subtrace(lambda y: y.exp(), [Placeholder(x._value.type)], user_code=False)
        seen.append(inner.ctx)
        assert [op.name for op in inner.ops] == ["ltorch.exp"]
        seen.append(current())
        return x.sin()

    sub = subtrace(outer, [torch.randn(3)])
    assert [op.name for op in sub.ops] == ["ltorch.sin"]
    assert seen[1] is sub.ctx and seen[0] is not sub.ctx


def test_user_code_leaves_grad_mode_as_it_was() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch._C._set_grad_enabled(False)
        return x + 1

    assert torch.is_grad_enabled()
    subtrace(f, [torch.randn(2)])
    assert torch.is_grad_enabled()


def test_trace_state_lives_in_its_parts() -> None:
    """`TraceContext` composes four parts, which own the state, and two facets of behaviour
    (no field of its own besides the `Builder` attributes: ``active`` is the autograd
    part's set itself; ``writes`` and ``grad`` hold nothing but the context)."""
    ctx = TraceContext()
    assert set(TraceContext.__slots__) == {"active", "aliases", "autograd", "build", "grad",
                                           "handlers", "loc", "reads", "writes"}
    assert ctx.active is ctx.autograd.active
    assert ctx.writes.ctx is ctx and ctx.grad.ctx is ctx
    assert type(ctx.writes).__slots__ == type(ctx.grad).__slots__ == ("ctx",)
    x = torch.randn(2, requires_grad=True)
    p = ctx.tensor_input(x, "x", ArgLeaf(0))
    assert p._value in ctx.autograd.active and ctx.build.input_requires_grad == [True]
    assert ctx.aliases.layouts[p._value] == ((1,), 0)
    assert id(p) in ctx.autograd.leaf_proxies
    assert ctx.build.kind_of(p) == ArgLeaf(0)
