"""Closed-form layouts of view ops over symbolic sizes (`thunder_ir.frontend.view_rules`),
against ATen's kernels on real tensors and against torch's fake kernels over the same
symbols, and symbolic compiles of models that reshape permuted windows, expand and split,
against eager (values, strides, views, compile count)."""

from __future__ import annotations

import itertools
import random
from typing import Any

import torch
from xdsl.dialects import func

import thunder_ir
from thunder_ir.dialects import ltorch_core as L
from thunder_ir.dialects.base import build
from thunder_ir.dialects.symbols import (
    SymbolSource,
    SymbolTable,
    hint,
    proved_equal,
    proved_order,
)
from thunder_ir.dialects.types import tensor_type
from thunder_ir.frontend.layout import symbol_free, view_layouts
from thunder_ir.frontend.view_rules import expand_layout, view_strides


def _layouts(rng: random.Random) -> tuple[torch.Tensor, list[int]]:
    """A tensor of a random layout (permuted, sliced, with size-1 dims, expanded) and a
    random shape of its element count."""
    rank = rng.randint(1, 4)
    sizes = [rng.choice([1, 2, 3, 4, 6]) for _ in range(rank)]
    base = torch.empty([n * rng.choice([1, 1, 2]) for n in sizes])
    x = base[tuple(slice(0, n) for n in sizes)]
    if rng.random() < 0.2:
        d = rng.randrange(rank)
        if x.shape[d] == 1:
            sizes2 = list(x.shape)
            sizes2[d] = 3
            x = x.expand(sizes2)
    x = x.permute(*rng.sample(range(rank), rank))
    numel = x.numel()
    shape: list[int] = []
    left = numel
    while left > 1 and len(shape) < 4:
        f = rng.choice([k for k in range(1, left + 1) if left % k == 0])
        shape.append(f)
        left //= f
    shape.append(left)
    if rng.random() < 0.3:
        shape.insert(rng.randrange(len(shape) + 1), 1)
    return x, shape


def test_view_strides_are_atens_on_real_tensors() -> None:
    """On int sizes, `view_strides` always answers, and says what ATen's ``view`` does:
    its strides where it views, False where it raises (``reshape`` then copies)."""
    rng = random.Random(0)
    viewed = refused = 0
    for _ in range(600):
        x, shape = _layouts(rng)
        got = view_strides(list(x.shape), list(x.stride()), shape)
        try:
            want: Any = x.view(shape).stride()
        except RuntimeError:
            want = False
        assert got == want, (x.shape, x.stride(), shape, got, want)
        viewed += want is not False
        refused += want is False
    assert viewed > 100 and refused > 100


def test_expand_layout_is_atens_on_real_tensors() -> None:
    for sizes, strides, target in [((1, 3), (3, 1), (4, -1)), ((3, 1), (1, 1), (2, 3, 5)),
                                   ((2, 1, 4), (4, 9, 1), (2, 6, 4)), ((1,), (1,), (1, 1, 3)),
                                   ((3,), (2,), (2, 1, 3))]:
        x = torch.empty(100).as_strided(sizes, strides)
        y = x.expand(target)
        assert expand_layout(sizes, strides, 0, target) == (y.stride(), 0)
    assert expand_layout((2, 3), (3, 1), 0, (4, 3)) is None  # (eager raises: the kernel's way)


def _symbolic_cases() -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """(sizes at batch 3, strides, new sizes): the windowed models' views over a symbolic
    batch (dim 0) and their neighbours."""
    out = []
    for perm in itertools.permutations(range(1, 5)):
        sizes = (3, 2, 4, 2, 4)
        contiguous = (64, 32, 8, 4, 1)
        p = (0, *perm)
        s = tuple(sizes[i] for i in p)
        st = tuple(contiguous[i] for i in p)
        out.append((s, st, (3, 8, 8)))
        out.append((s, st, (3 * s[1] * s[2], s[3] * s[4])))
        out.append((s, st, (3, s[1] * s[2], s[3], s[4])))
        out.append((s, st, (3, s[1], s[2], 1, s[3] * s[4])))
    out.append(((3, 1, 4, 16), (64, 64, 16, 1), (3, 4, 16)))
    out.append(((3, 16, 1, 16), (256, 16, 256, 1), (3, 16, 16)))
    return out


def test_views_over_symbols_agree_with_the_fake_kernels() -> None:
    """A symbolic compile's closed-form layout of ``reshape``/``view``/``flatten`` of a
    permuted layout (`view_layouts`, no fake kernel run) is the fake kernel's over the same
    symbols: the same strides, proved equal as expressions, and the same view-or-copy."""
    from thunder_ir.frontend.layout import _view_layouts

    f32 = torch.float32
    answered = 0
    for sizes, strides, new in _symbolic_cases():
        table = SymbolTable()
        with table.active():
            b = table.size(3, SymbolSource(0, 0))
            block = func.FuncOp("f", ([tensor_type([b, *sizes[1:]], f32)], []))
            (arg,) = block.body.block.args
            sym_new = [new[0] // 3 * b, *new[1:]]
            layout = (strides, 0)  # (static: the batch is outermost)
            for cls, param in ((L.ReshapeOp, "shape"), (L.ViewOp, "size")):
                op = build(cls, arg, **{param: sym_new})
                assert not symbol_free(op, [layout])
                try:
                    want: Any = _view_layouts(op, [layout])
                except (RuntimeError, ValueError):
                    want = "raises"
                try:
                    got: Any = view_layouts(op, [layout])
                except (RuntimeError, ValueError):
                    got = "raises"
                if isinstance(want, str) or isinstance(got, str):
                    assert isinstance(want, str) and isinstance(got, str) \
                        and cls is L.ViewOp, (sizes, strides, new)
                    continue
                ((gs, go), gv), ((ws, wo), wv) = got[0], want[0]
                assert gv == wv and proved_equal(go, wo), (sizes, strides, new, got, want)
                for x, y in zip(gs, ws, strict=True):
                    assert hint(x) == hint(y) and proved_equal(x, y), (sizes, new, got, want)
                answered += 1
    assert answered >= 100, answered


def test_proved_order_decides_nothing() -> None:
    """`proved_order` answers from expressions and ranges alone: no guard recorded."""
    table = SymbolTable()
    with table.active():
        s = table.size(5, SymbolSource(0, 0))
        before = table.guards()  # (the symbol's own range: s0 >= 2)
        assert proved_order(4 * s, 7) == 1 and proved_order(s, 1) == 1
        assert proved_order(1, s) == -1
        assert proved_order(4 * s, 8) is None  # (equal at s = 2)
        assert proved_order(2 * s, s + s) == 0
        assert proved_order(s, 4) is None and proved_order(s // 4, 1) is None
        assert table.guards() == before


class Windows(torch.nn.Module):
    """A window partition and its reverse (a reshape of a permuted tensor: a copy), a
    transpose merged by ``flatten``, an ``expand`` of a broadcast dim and a ``split`` of
    channels, as Swin and MobileViT do."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> Any:
        b, h, w, c = x.shape
        win = x.view(b, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 4, c)
        q, k, v = self.lin(win).split([8, 8, 8], dim=-1)
        att = (q @ k.transpose(-2, -1)).softmax(-1) @ v
        back = att.view(b, h // 2, w // 2, 2, 2, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        flat = back.transpose(1, 2).flatten(2)
        gate = x[:, :1, :1, :].expand(b, h, w, c)
        return back * gate, flat, k


def test_symbolic_compile_of_views_matches_eager() -> None:
    """Four batch sizes: two programs, every output's values, strides, storage offset and
    view-ness as eager's."""
    torch.manual_seed(0)
    m = Windows()
    jm = thunder_ir.jit(m)
    for n in (2, 3, 5, 4):
        x = torch.randn(n, 4, 4, 8)
        want = m(x)
        got = jm(x)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)
            assert g.stride() == w.stride() and g.storage_offset() == w.storage_offset()
            assert (g._base is None) == (w._base is None)
    assert thunder_ir.cache_misses(jm) == 2


def test_contiguous_kernels_match_eager_and_the_meta_kernels() -> None:
    """`layout.CONTIGUOUS_RESULTS`: softmax, log-softmax, layer norm and ``contiguous`` of
    permuted, sliced and expanded tensors are contiguous in eager and on meta tensors, and
    a symbolic compile of them gives eager's strides."""
    from thunder_ir.frontend.layout import CONTIGUOUS_RESULTS

    assert "ltorch.layer_norm" in CONTIGUOUS_RESULTS
    base = torch.randn(3, 8, 6, 4)
    inputs = [base.permute(0, 3, 1, 2), base[:, 1:5], base[:, :, :1].expand(3, 8, 5, 4),
              base.transpose(1, 2)]
    fns = [lambda t: t.softmax(1), lambda t: t.log_softmax(-1),
           lambda t: torch.softmax(t, 2, dtype=torch.float64),
           lambda t: torch.layer_norm(t, t.shape[-1:]), lambda t: t.contiguous()]
    for t in inputs:
        meta = torch.empty_strided(t.shape, t.stride(), device="meta")
        for fn in fns:
            assert fn(t).is_contiguous() and fn(meta).is_contiguous()

    class Norms(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.LayerNorm(4)

        def forward(self, x: torch.Tensor) -> Any:
            p = x.permute(0, 2, 3, 1)
            return self.norm(p), p.softmax(1), p[:, 1:].log_softmax(-1), p.contiguous()

    m = Norms()
    jm = thunder_ir.jit(m)
    for n in (2, 3, 5):
        x = torch.randn(n, 4, 6, 5)
        for g, w in zip(jm(x), m(x), strict=True):
            torch.testing.assert_close(g, w)
            assert g.stride() == w.stride()
    assert thunder_ir.cache_misses(jm) == 2


def test_opaque_meta_runs_are_shared_across_storage_offsets_only_for_fresh_results() -> None:
    """A symbolic compile's opaque meta run (`meta_call`) of ``F.normalize`` on ``k`` reuses
    the one on ``q`` (the same layout at another storage offset: fresh results do not
    depend on it); a callee whose result views its operand (``torch.narrow``) or may be
    its operand runs again, and its offset is this call's."""
    from thunder_ir.dialects.base import OperandRef
    from thunder_ir.dialects.torch import meta_call
    from thunder_ir.frontend.layout import meta_stand_in

    table = SymbolTable()
    with table.active():
        b = table.size(3, SymbolSource(0, 0))
        block = func.FuncOp("f", ([tensor_type([b, 4, 8], torch.float32)], []))
        (arg,) = block.body.block.args
        q_layout, k_layout = ((96, 8, 1), 0), ((96, 8, 1), 32)
        q, k = (meta_stand_in(arg.type, lay) for lay in (q_layout, k_layout))
        first = meta_call("torch.nn.functional.normalize", [arg], [OperandRef(0)],
                          {"dim": -1}, None, [q])
        again = meta_call("torch.nn.functional.normalize", [arg], [OperandRef(0)],
                          {"dim": -1}, None, [k])
        assert again is first and first.views == (None,)
        n0 = meta_call("torch.narrow", [arg], [OperandRef(0), 2, 1, 4], None, None, [q])
        n1 = meta_call("torch.narrow", [arg], [OperandRef(0), 2, 1, 4], None, None, [k])
        assert n1 is not n0 and n0.views == n1.views == (0,)
        assert hint(n0.strides[0][1]) == 1 and hint(n1.strides[0][1]) == 33


class QK(torch.nn.Module):
    """Swin V2's cosine attention: ``F.normalize`` of q and k, views of one qkv."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> Any:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
        qn, kn = (torch.nn.functional.normalize(t, dim=-1) for t in (q, k))
        return (qn @ kn.transpose(-2, -1)).softmax(-1) @ v, qn, kn


def test_symbolic_compile_of_normalized_views_matches_eager() -> None:
    torch.manual_seed(0)
    m = QK()
    jm = thunder_ir.jit(m)
    for n in (2, 3, 5):
        x = torch.randn(n, 6, 8)
        for g, w in zip(jm(x), m(x), strict=True):
            torch.testing.assert_close(g, w)
            assert g.stride() == w.stride() and g.storage_offset() == w.storage_offset()
    assert thunder_ir.cache_misses(jm) == 2


def test_proxies_of_one_layout_share_torchs_storage_size() -> None:
    """In a symbolic compile a proxy's storage size (bytes) is the one torch computed for
    the first proxy of the same sizes, strides, offset and dtype: the same ``SymInt``,
    equal to torch's own computation for each proxy; in-place metadata ops on such proxies
    (bounds-checked against it) give eager's results."""
    from thunder_ir.frontend.proxy import TensorProxy

    table = SymbolTable()
    with table.active():
        b = table.size(6, SymbolSource(0, 0))
        block = func.FuncOp("f", ([tensor_type([b, 4, 8], torch.float32)] * 2, []))
        a1, a2 = block.body.block.args
        with torch._C.DisableTorchFunction():
            p1 = TensorProxy(a1, strides=(32, 1, 4), offset=0)
            p2 = TensorProxy(a2, strides=(32, 1, 4), offset=0)
            p3 = TensorProxy(a2, strides=(64, 8, 1), offset=3)
            n1, n2, n3 = (torch.Tensor.untyped_storage(p).nbytes() for p in (p1, p2, p3))
        assert proved_equal(n1, n2) and proved_equal(n1, 4 * (32 * b))
        assert len(table.__dict__["_storage_bytes"]) == 2  # (two layouts: two computed)
        assert proved_equal(n3, 4 * (3 + 1 + 64 * (b - 1) + 3 * 8 + 7))

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.t_()
        z = (y + 1).unsqueeze_(0)
        return z.transpose_(0, 1)

    jf = thunder_ir.jit(f)
    for n in (2, 3, 5):
        x = torch.randn(n, 4)
        got, want = jf(x), f(x)
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()
    assert thunder_ir.cache_misses(jf) == 2
