"""Returned views under a fusion executor, as eager: a value the function returns that is a
view of an input (or of another returned value) and that other computation also reads
(``y = x[:, :1].expand(...); return y, (y * 2).sum()``) must be returned as eager's view
(``_base``, storage, strides, storage offset, a write through it seen in the base,
gradients), not as a tensor a fused kernel made (`passes.fuse.returned_views`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import thunder_ir
from thunder_ir.lowering.executors import get_executor

pytestmark = pytest.mark.skipif(
    not get_executor("torch_compile").is_available(),
    reason="the torch_compile executor needs Inductor and a C++ compiler")


def _slice_expand(x: torch.Tensor) -> Any:
    y = x[:, :1, :1, :].expand(2, 3, 4, 5)
    return y, (y * 2).sum()


def _slice(x: torch.Tensor) -> Any:
    y = x[:, 1:3]
    return y, (y * 2).sum()


def _transpose(x: torch.Tensor) -> Any:
    y = x.transpose(0, 1)
    return y, (y.exp() + 1).sum()


def _view_then_reduce(x: torch.Tensor) -> Any:
    y = x.view(-1)
    s = (y * y).sum()
    return s, y


def _view_of_result(x: torch.Tensor) -> Any:
    t = x * 2 + 1
    v = t.view(-1)[2:]
    return t, v, (v + 3).sum()


def _view_of_cat(x: torch.Tensor) -> Any:
    c = torch.cat([x * 2, x + 1], dim=0)  # (a cache's cat: fused, its view returned)
    v = c.permute(1, 0)[-1]
    return c, v, (v * 3).sum()


def _state_view(x: torch.Tensor) -> Any:
    h = (x * 0.5).exp()  # (Jamba's convolution state: a view returned, the chain read on)
    c0, c1 = h.transpose(0, 1).chunk(2, dim=0)
    # (tanh, not sin of exp(2x): that one's rounding, fused, grew past fp32's tolerance)
    return h, c0[..., -2:], (c0.tanh() * c1).sum()


FORMS: list[tuple[Callable[..., Any], tuple[int, ...], int]] = [
    (_slice_expand, (2, 3, 4, 5), 0),
    (_slice, (2, 3, 4, 5), 0),
    (_transpose, (4, 5), 0),
    (_view_then_reduce, (4, 5), 1),
    (_view_of_result, (4, 5), 1),
    (_view_of_cat, (4, 5), 1),
    (_state_view, (4, 6), 1),
]


def _same_layout(e: torch.Tensor, j: torch.Tensor) -> None:
    assert j.shape == e.shape and j.stride() == e.stride()
    assert j.storage_offset() == e.storage_offset()
    assert j.is_contiguous() == e.is_contiguous()
    torch.testing.assert_close(j, e)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("form", FORMS, ids=[f[0].__name__ for f in FORMS])
def test_returned_view_is_eagers_view(form: tuple[Callable[..., Any], tuple[int, ...], int],
                                      grad: bool) -> None:
    fn, shape, k = form
    jf = thunder_ir.jit(fn, executors=["torch_compile"], tiered=False)
    for _ in range(2):  # the compile and the cached call
        x0 = torch.randn(shape)
        xe = x0.clone().requires_grad_(grad)
        xj = x0.clone().requires_grad_(grad)
        e, j = fn(xe), jf(xj)
        assert len(e) == len(j)
        for a, b in zip(e, j):
            _same_layout(a, b)
        ev, jv = e[k], j[k]
        base_e = ev._base
        assert base_e is not None
        base_j = jv._base
        if base_e is xe:
            assert base_j is xj
        else:  # a view of another returned value
            assert base_j is j[next(i for i, o in enumerate(e) if o is base_e)]
        assert jv.untyped_storage().data_ptr() == base_j.untyped_storage().data_ptr()
        if grad:
            assert (jv.grad_fn is None) == (ev.grad_fn is None)
            ge = torch.autograd.grad(sum(o.float().sum() * (i + 1) for i, o in enumerate(e)), xe)
            gj = torch.autograd.grad(sum(o.float().sum() * (i + 1) for i, o in enumerate(j)), xj)
            torch.testing.assert_close(gj, ge)
        elif 0 in ev.stride():  # an expanded view: eager refuses the write, so do we
            with pytest.raises(RuntimeError, match="more than one element"):
                ev.add_(1.5)
            with pytest.raises(RuntimeError, match="more than one element"):
                jv.add_(1.5)
        else:  # a write through the returned view is seen in its base, as in eager
            ev.add_(1.5)
            jv.add_(1.5)
            torch.testing.assert_close(base_j, base_e)
            torch.testing.assert_close(xj, xe)


def test_parameter_view_returned() -> None:
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(2, 3, 4, 5))

        def forward(self, x: torch.Tensor) -> Any:
            y = self.w[:, :1, :1, :].expand(2, 3, 4, 5)
            return y, (y * x).sum()

    m = M()
    jm = thunder_ir.jit(m, executors=["torch_compile"], tiered=False)
    x = torch.randn(2, 3, 4, 5)
    e, j = m(x), jm(x)
    for a, b in zip(e, j):
        _same_layout(a, b)
    assert e[0]._base is m.w and j[0]._base is m.w
    assert j[0].untyped_storage().data_ptr() == m.w.untyped_storage().data_ptr()
    (ge,) = torch.autograd.grad(e[0].sum() + e[1], m.w)
    (gj,) = torch.autograd.grad(j[0].sum() + j[1], m.w)
    torch.testing.assert_close(gj, ge)
    with torch.no_grad():
        e, j = m(x), jm(x)
        assert j[0]._base is m.w and j[0].stride() == e[0].stride()


def test_returned_cat_is_fused() -> None:
    """A returned ``cat`` (a key/value cache) is no view in eager: a region makes it, and
    only the views of it stay out (`passes.fuse.FRESH_MOVES`)."""
    jf = thunder_ir.jit(_view_of_cat, executors=["torch_compile"], tiered=False)
    x = torch.randn(4, 5)
    e, j = _view_of_cat(x), jf(x)
    for a, b in zip(e, j):
        _same_layout(a, b)
    assert e[0]._base is None and j[0]._base is None
    code = [line for line in str(thunder_ir.last_traces(jf)[-1]).splitlines()
            if not line.lstrip().startswith("#")]
    assert not any("cat(" in line for line in code), code
    assert any("= inductorFusion" in line for line in code), code


def test_a_returned_views_chain_read_on_does_not_cut_the_region() -> None:
    """The ops that read a returned view's chain read a copy of it inside their region
    (`passes.fuse._copy_kept_views`): one region, the returned view still eager's."""
    jf = thunder_ir.jit(_state_view, executors=["torch_compile"], tiered=False)
    x = torch.randn(4, 6)
    e, j = _state_view(x), jf(x)
    for a, b in zip(e, j):
        _same_layout(a, b)
    assert j[1]._base is j[0] and e[1]._base is e[0]
    code = [line for line in str(thunder_ir.last_traces(jf)[-1]).splitlines()
            if not line.lstrip().startswith("#")]
    assert sum("= inductorFusion" in line for line in code) == 1, code
