"""The cached call's overhead outside the kernels (issue 53: ResNet's tiered step against
torch.compile's), cut without weakening a check: each check that decides whether a
cached program is valid still runs on every call, and each test changes one such thing
and compares the next calls with eager's (values, gradients, buffers, version counters).

- the inputs a call unwraps if they are dead functorch wrappers (`per_call_inputs`): an
  argument and a buffer that are dead wrappers;
- the write-backs as one plan (`thunder_ir.runtime.writes.WritePlan`);
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import thunder_ir
from thunder_ir.runtime.autograd import per_call_inputs
from thunder_ir.runtime.origins import ArgLeaf, Captured, StateEntry
from thunder_ir.runtime.writes import JOIN, PLAIN, QUIET, WritePlan


def _dead_wrapper() -> torch.Tensor:
    """A tensor made inside ``torch.func.grad`` that outlived it (a dead wrapper)."""
    leak: list[torch.Tensor] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        leak.append(x * 2)
        return (x * x).sum()

    torch.func.grad(f)(torch.arange(3.0))
    assert torch._C._functorch.is_functorch_wrapped_tensor(leak[0])
    return leak[0]


class _Affine(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-1.0, 1.0, 3))
        self.register_buffer("b", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.w + self.b).sin()


def _check_affine(jm: Any, m: nn.Module, ref: nn.Module, x: torch.Tensor) -> None:
    m.w.grad = ref.w.grad = None
    got, want = jm(x), ref(x)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(m.w.grad, ref.w.grad)


def test_dead_wrappers_among_the_inputs_are_unwrapped_as_eager() -> None:
    """A dead wrapper passed as the argument, then bound as a buffer: the call unwraps
    each as ``Function.apply`` does, and the values and gradients are eager's."""
    m, ref = _Affine(), _Affine()
    jm = thunder_ir.jit(m)
    _check_affine(jm, m, ref, torch.randn(3, generator=torch.Generator().manual_seed(0)))
    _check_affine(jm, m, ref, _dead_wrapper())  # an argument
    m.b = ref.b = _dead_wrapper()  # a buffer that is a (dead) wrapper: bound, unwrapped
    _check_affine(jm, m, ref, _dead_wrapper())


def test_per_call_inputs_names_arguments_and_wrapped_bound_tensors() -> None:
    plain, wrapped = torch.ones(2), _dead_wrapper()
    origins = [ArgLeaf(0), StateEntry("w"), StateEntry("b"), Captured(plain),
               Captured(wrapped)]
    assert per_call_inputs(origins, {"w": plain, "b": wrapped}) == (0, 2, 4)


def test_write_plan_copies_in_order_and_sets_versions() -> None:
    """One copy for all the plain write-backs, in order (a target written twice ends
    with the second value), the version counters moved as each mode's bumps say, and a
    mode that is not plain written as `write_back` writes it."""
    a, b = torch.zeros(2), torch.zeros(2)
    va, vb = a._version, b._version
    plan = WritePlan([PLAIN | (-1 << 2), PLAIN | (2 << 2), PLAIN], [a, b, a])
    plan(None, [torch.ones(2), torch.full((2,), 2.0), torch.full((2,), 3.0)])
    assert a.tolist() == [3.0, 3.0] and b.tolist() == [2.0, 2.0]
    assert a._version - va == 2 - 1 and b._version - vb == 1 + 2
    c = torch.zeros(2)
    vc = c._version
    WritePlan([QUIET])([c], [torch.ones(2)])  # through .data: no bump
    assert c.tolist() == [1.0, 1.0] and c._version == vc
    with torch.inference_mode():
        inf = torch.zeros(2)
        WritePlan([PLAIN | (1 << 2)])([inf], [torch.ones(2)])  # no counter to move
    assert inf.tolist() == [1.0, 1.0]
    with torch.enable_grad():  # copied under no-grad, and grad mode is put back
        WritePlan([PLAIN], [a])(None, [torch.ones(2, requires_grad=True)])
        assert torch.is_grad_enabled() and not a.requires_grad


def test_write_plan_joins_a_value_that_requires_grad() -> None:
    """`JOIN` (a batch norm's running statistics, as traced): a value without gradient
    is copied with the others; one that requires grad, under grad mode, is copied with
    grad mode on (the target then carries the value's graph, as eager's write would)."""
    mode = JOIN | (-1 << 2)  # copied, its bump set back (eager's kernel does not bump)
    t = torch.zeros(2)
    v0 = t._version
    WritePlan([mode], [t])(None, [torch.ones(2)])
    assert t.tolist() == [1.0, 1.0] and t._version == v0 and t.grad_fn is None
    w = torch.full((2,), 2.0, requires_grad=True)
    with torch.no_grad():  # grad mode off: a plain copy
        WritePlan([mode], [t])(None, [w * 1])
    assert t.grad_fn is None and t._version == v0
    WritePlan([mode], [t])(None, [w * 1])
    assert t.requires_grad and t.grad_fn is not None
    t.sum().backward()
    assert w.grad is not None and w.grad.tolist() == [1.0, 1.0]
