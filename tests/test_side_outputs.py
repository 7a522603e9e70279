"""Side outputs of a training program (issue 53): the non-differentiable outputs a call
only copies into the caller's tensors (a batch norm's running statistics, an argument
written in place under no-grad) leave the forward without passing through the autograd
node (`thunder_ir.runtime.autograd.make_runner`). Against eager: values, gradients (and
None gradients), buffers and their ``_version`` counters, parameters after an optimizer
step, and an output the user also sees (kept on the autograd path)."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

import thunder_ir
from thunder_ir.runtime.autograd import TrainingProgram, with_side_outputs


class _ConvBN(nn.Module):
    def __init__(self, returns_stat: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 2)
        self.aux = nn.Linear(4, 2)
        self.returns_stat = returns_stat

    def forward(self, x: torch.Tensor, counter: torch.Tensor) -> Any:
        with torch.no_grad():
            counter.add_(1)  # an argument written under no-grad: a side output
        h = self.bn(self.conv(x)).relu().mean((2, 3))
        out = (self.head(h), self.aux(h))  # aux: its gradient is None when unused
        return (*out, self.bn.running_mean) if self.returns_stat else out


def _state(m: nn.Module, v0: dict[str, int]) -> list[tuple[str, torch.Tensor, int]]:
    """Each buffer and parameter, and its version counter's moves since ``v0``."""
    return [(n, t.detach().clone(), t._version - v0[n])
            for n, t in [*m.named_buffers(), *m.named_parameters()]]


def _run(model: nn.Module, fn: Any, steps: int, aux: bool) -> list[Any]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    v0 = {n: t._version for n, t in [*model.named_buffers(), *model.named_parameters()]}
    counter = torch.zeros(())
    seen: list[Any] = []
    for i in range(steps):
        x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(i))
        opt.zero_grad(set_to_none=True)
        outs = fn(x, counter)
        loss = outs[0].square().sum() + (outs[1].sum() if aux else 0)
        loss.backward()
        seen.append(([o.detach().clone() for o in outs], counter.clone(), counter._version,
                     [None if p.grad is None else p.grad.clone()
                      for p in model.parameters()]))
        opt.step()
        seen.append(_state(model, v0))
    return seen


def _same(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    else:
        assert a == b


def test_batch_norm_statistics_and_written_argument_as_eager() -> None:
    for returns_stat in (False, True):
        for aux in (False, True):
            torch.manual_seed(0)
            eager = _ConvBN(returns_stat).train()
            mine = copy.deepcopy(eager)
            _same(_run(eager, eager, 3, aux), _run(mine, thunder_ir.jit(mine), 3, aux))


def test_returned_statistic_stays_a_plain_tensor() -> None:
    """An output the user sees as well as the call writes back keeps autograd's path:
    it does not require grad, as eager's running mean does not."""
    torch.manual_seed(0)
    m = _ConvBN(returns_stat=True).train()
    out = thunder_ir.jit(m)(torch.randn(2, 3, 6, 6), torch.zeros(()))
    assert not out[2].requires_grad and out[0].requires_grad
    torch.testing.assert_close(out[2], m.bn.running_mean)


def test_with_side_outputs_renumbers_the_kept_outputs() -> None:
    def nothing(*a: Any) -> Any:
        return a

    prog = TrainingProgram(forward=nothing, backward=nothing, n_inputs=2, n_outputs=4,
                           n_residuals=1, grad_inputs=[0], ct_outputs=[0, 3],
                           nondiff_outputs=[1, 2], backward_n_outputs=1)
    kept = with_side_outputs(prog, [1])
    assert kept.kept_outputs == (0, 2, 3) and kept.n_full_outputs == 4
    assert kept.n_outputs == 3 and kept.ct_outputs == [0, 2]
    assert kept.nondiff_outputs == [1]


def _counted_sin(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        buf.add_(1)
    return (x.sin() * 2).sum()


def test_under_torch_func_grad_all_outputs_take_autograd() -> None:
    """Under a functorch transform the program runs with all its outputs (the side ones
    too) through autograd: gradients, the written argument and its version are eager's,
    then the same for a plain call (side outputs)."""
    seen = []
    for fn in (_counted_sin, thunder_ir.jit(_counted_sin)):
        buf = torch.zeros(3)
        x = torch.randn(3, generator=torch.Generator().manual_seed(0))
        g = torch.func.grad(fn)(x, buf)
        x2 = x.clone().requires_grad_()
        fn(x2, buf).backward()
        seen.append((g, buf.clone(), buf._version, x2.grad))
    _same(seen[0], seen[1])
