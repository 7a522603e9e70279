"""Meta rules: what an opaque call's meta run runs instead of the torch function, for
functions whose result types follow from their arguments' types but whose meta run fails.

``torch.cov``, ``torch.corrcoef`` and ``torch.istft`` check values inside their ATen
composite (``at::is_scalar_tensor_true``: an ``aten::equal``, which no meta tensor
answers); ``torch.combinations`` selects with ``masked_select`` (its count is
``C(n, r)``, a function of the size alone); ``torch.histogram`` and the two halves of
``torch.histogramdd`` (`thunder_ir.frontend.value_reads`) have no meta kernel. Each
rule here returns, on the meta stand-ins, results of eager's types, structure, layout and
``requires_grad`` (computed with the same ops as eager's composite, minus the checks, or
connected to the differentiable inputs as eager's are); the program still calls the torch
function itself, which makes eager's checks, warnings and errors on every call, and
autograd differentiates it as eager's (`thunder_ir.frontend.fallback`).

`RULES` maps the torch function's callee name to its rule's callee path (the meta run
resolves callees by path, `thunder_ir.dialects.torch.resolve_callee`).
"""

from __future__ import annotations

from typing import Any

import torch


def cov(input: Any, *, correction: Any = 1, fweights: Any = None, aweights: Any = None
        ) -> Any:
    """ATen's ``cov`` without its check of the degrees of freedom (``norm_factor <= 0``:
    a warning and a zero factor, the same type)."""
    x = input if input.dim() >= 2 else input.view(1, -1)
    w = fweights
    if aweights is not None:
        w = aweights if w is None else w * aweights
    w_sum = w.sum() if w is not None else torch.scalar_tensor(
        x.size(1), dtype=torch.int64, device=x.device)
    avg = (x * w if w is not None else x).sum(1) / w_sum
    if w is not None and aweights is not None and correction != 0:
        norm = w_sum - correction * (w * aweights).sum() / w_sum
    else:
        norm = w_sum - correction
    x = x - avg.unsqueeze(1)
    c = torch.mm(x, (x * w if w is not None else x).t().conj())
    return torch.true_divide(c, norm).squeeze()


def corrcoef(input: Any) -> Any:
    """ATen's ``corrcoef`` over `cov`."""
    c = cov(input)
    if c.dim() == 0:
        return c / c
    d = c.diagonal()
    std = torch.sqrt(d.real if d.is_complex() else d)
    c = c / std.view(-1, 1)
    c = c / std.view(1, -1)
    if c.is_complex():
        return torch.complex(c.real.clip(-1, 1), c.imag.clip(-1, 1))
    return c.clip(-1, 1)


def _choose(n: Any, r: int) -> Any:
    """``C(n, r)`` over an int or a ``SymInt`` (0 for ``n < r``: a factor is 0)."""
    num: Any = 1
    for i in range(r):
        num = num * (n - i)
    den = 1
    for i in range(2, r + 1):
        den *= i
    return num // den


def combinations(input: Any, r: int = 2, with_replacement: bool = False) -> Any:
    """``torch.combinations``: ``(C(n, r), r)`` rows (``C(n + r - 1, r)`` with
    replacement) gathered from ``input``, as eager stacks its selected grids."""
    if input.dim() != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return torch.empty(0, dtype=input.dtype, device=input.device)
    n = input.shape[0]
    rows = _choose(n + r - 1, r) if with_replacement else _choose(n, r)
    idx = torch.zeros(rows, dtype=torch.int64, device=input.device)
    return torch.stack([input.index_select(0, idx) for _ in range(r)], 1)


def istft(*args: Any, **kwargs: Any) -> Any:
    """``torch.istft``: PyTorch's reference implementation (ATen's checks that the
    window's overlap-add is nonzero, on values, are the real call's)."""
    from torch._refs import istft as ref

    return ref(*args, **kwargs)


def histogram(input: Any, bins: Any, *, range: Any = None, weight: Any = None,
              density: bool = False) -> Any:
    """``torch.histogram``: ``bins`` counts (or one fewer than the edges given) and their
    edges, of ``input``'s dtype."""
    n = bins if isinstance(bins, int) else bins.shape[0] - 1
    make = dict(dtype=input.dtype, device=input.device)
    return torch.return_types.histogram((torch.empty(n, **make), torch.empty(n + 1, **make)))


def _histogramdd_bin_edges(input: Any, bins: Any, *, range: Any = None, weight: Any = None,
                           density: bool = False) -> Any:
    """``torch.histogramdd``'s edges: one tensor of ``bins[i] + 1`` edges per dim."""
    make = dict(dtype=input.dtype, device=input.device)
    return tuple(torch.empty(b + 1, **make) for b in bins)


def _histogramdd_from_bin_cts(input: Any, bins: Any, *, range: Any = None,
                              weight: Any = None, density: bool = False) -> Any:
    """``torch.histogramdd``'s counts: ``bins`` of them."""
    return torch.empty(tuple(bins), dtype=input.dtype, device=input.device)


def _histogramdd_from_bin_tensors(input: Any, bins: Any, *, weight: Any = None,
                                  density: bool = False) -> Any:
    """``torch.histogramdd``'s counts between the edges given."""
    return torch.empty(tuple(b.shape[0] - 1 for b in bins), dtype=input.dtype,
                       device=input.device)


RULES: dict[str, str] = {f"torch.{n}": f"{__name__}.{n}" for n in (
    "cov", "corrcoef", "combinations", "istft", "histogram", "_histogramdd_bin_edges",
    "_histogramdd_from_bin_cts", "_histogramdd_from_bin_tensors")}
RULES.update({f"torch.Tensor.{n}": f"{__name__}.{n}" for n in (
    "cov", "corrcoef", "istft", "histogram")})
"""Callee name -> its meta rule's callee path."""

__all__ = ["RULES"]
