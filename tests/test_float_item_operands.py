"""A float ``.item()`` (or Python arithmetic on one) passed to an op as a number: a
factory's value (``torch.tensor(a)``, ``torch.full``, ``new_tensor``), a number argument
(``clamp(max=a)``, ``add(alpha=a)``, ``fill_``). The program has such a number as a value
(the ``item`` call's result), so the op takes it as an operand: the generated code once
named the unbacked symbol (``zuf0``) it never defines (a NameError at the first call).
Also the two reads `test_jit.test_data_dependent_errors_are_clear` once listed as refused
and now traces (arithmetic on a float ``.item()`` as an operand, ``torch.tensor`` of a
``.tolist()``). Each against eager over several values, with and without grad, one program
for all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import thunder_ir

CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "tensor": lambda x: x * torch.tensor(x.mean().item()),
    "tensor_arith": lambda x: x * torch.tensor(x.mean().item() * 2 + 1),
    "tensor_dtype": lambda x: x * torch.tensor(x.mean().item(), dtype=torch.float64),
    "tensor_list": lambda x: x * torch.tensor([x.mean().item(), x.sum().item()]).sum(),
    "full": lambda x: x * torch.full((3,), x.mean().item()),
    "full_like": lambda x: x * torch.full_like(x, x.mean().item()),
    "new_tensor": lambda x: x * x.new_tensor(x.mean().item()),
    "new_full": lambda x: x * x.new_full((3,), x.mean().item()),
    "fill_": lambda x: x * torch.empty(3).fill_(x.mean().item()),
    "clamp": lambda x: torch.clamp(x, max=x.mean().item()),
    "add_alpha": lambda x: torch.add(x, x, alpha=x.mean().item()),
    "operand_arith": lambda x: x + x.sum().item() * 2,  # (test_jit's refusals had it)
    "tensor_of_tolist": lambda x: x * torch.tensor(x.tolist()),
    "int_full": lambda x: x * torch.full((3,), (x > 0).sum().item()),
    "int_new_tensor": lambda x: x * x.new_tensor((x > 0).sum().item()),
    "int_tensor_list": lambda x: x * torch.tensor([(x > 0).sum().item(), 2]).sum(),
}


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_item_number_as_an_op_argument_is_eagers(name: str, grad: bool) -> None:
    f = CASES[name]
    jf = thunder_ir.jit(f)
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        x = torch.randn(3, generator=g)
        xj = x.clone().requires_grad_(grad)
        xe = x.clone().requires_grad_(grad)
        out, ref = jf(xj), f(xe)
        assert out.dtype == ref.dtype and out.requires_grad == ref.requires_grad
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
        if grad:
            (gj,) = torch.autograd.grad(out.sum(), xj)
            (ge,) = torch.autograd.grad(ref.sum(), xe)
            torch.testing.assert_close(gj, ge, rtol=0, atol=0)
    assert thunder_ir.cache_misses(jf) <= 2
