"""Op traits (``thunder_ir.dialects.traits``): coverage, and that passes ask the op.

* coverage: every op of every dialect carries exactly one kind (terminators excepted),
  every table still keyed by op class (Triton's templates, Inductor's library ops) covers
  what it must;
* out of tree: an elementwise prim declared in this file on the ``prims.UnaryOp`` family,
  touching no list of any pass, is recomputed by remat, grouped by ``fuse``, taken by
  Inductor and lowered to a direct torch call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
import torch
from xdsl.context import Context
from xdsl.ir import Dialect, Operation
from xdsl.irdl import irdl_op_definition
from xdsl.traits import IsTerminator

from thunder_ir.dialects import ltorch, prims
from thunder_ir.dialects import traits as T
from thunder_ir.dialects.autograd import Autograd
from thunder_ir.dialects.fusion import Fusion, RegionOp
from thunder_ir.dialects.guard import Guard
from thunder_ir.dialects.ltorch import Ltorch
from thunder_ir.dialects.prims import Prims
from thunder_ir.dialects.program import Program, main_function
from thunder_ir.dialects.torch import CallOp, Torch
from thunder_ir.dialects.types import tensor_type
from thunder_ir.lowering import inductor_executor as IE
from thunder_ir.lowering import triton_codegen as TC
from thunder_ir.lowering.torch_executor import LowerToTorchPass
from thunder_ir.passes.fuse import fuse_block
from thunder_ir.passes.remat import MIN_CUT, cheap_elementwise, plan_remat

DIALECTS: tuple[Dialect, ...] = (Prims, Ltorch, Torch, Autograd, Fusion, Guard)
ALL_OPS: list[type[Operation]] = [op for d in DIALECTS for op in d.operations]
F32 = torch.float32


# --------------------------------------------------------------------------- coverage


@pytest.mark.parametrize("op", ALL_OPS, ids=lambda op: op.name)
def test_every_op_has_exactly_one_kind(op: type[Operation]) -> None:
    """A kind says what the op computes; passes decide by it, so none may be missing and
    none may be ambiguous (xDSL merges the traits of every base into one set)."""
    kinds = op.get_traits_of_type(T.OpKind)
    if op.has_trait(IsTerminator):
        assert kinds == [], f"{op.name}: a terminator has no kind"
        return
    assert len(kinds) == 1, f"{op.name} has kinds {kinds}: declare exactly one"
    assert T.kind_of(op) == kinds[0]


def test_view_kinds_are_known() -> None:
    for op in ALL_OPS:
        view = op.get_trait(T.ViewLike)
        if view is not None:
            assert view.kind in (T.RESHAPE, T.RESTRIDE, T.VIEW, T.COPY), op.name


def test_random_ops_are_not_pure_and_pure_ops_are_not_random() -> None:
    from xdsl.traits import Pure

    for op in ALL_OPS:
        if op.has_trait(T.Random):
            assert not op.has_trait(Pure), op.name


def test_kinds_of_some_ops() -> None:
    """Spot checks of the facts the passes used to keep as name lists."""
    assert prims.ReshapeOp.get_trait(T.ViewLike) == T.ViewLike(T.RESHAPE)
    assert prims.TransposeOp.get_trait(T.ViewLike) == T.ViewLike(T.RESTRIDE)
    assert ltorch.OPS["expand"].get_trait(T.ViewLike) == T.ViewLike(T.RESTRIDE)
    assert ltorch.OPS["clone"].get_trait(T.ViewLike) == T.ViewLike(T.COPY)
    assert ltorch.OPS["argmax"].get_trait(T.Reduction) == T.Reduction(indices=True)
    assert prims.ArgmaxOp.get_trait(T.Reduction) == T.Reduction(indices=True)
    assert prims.SumOp.get_trait(T.Reduction) == T.Reduction()
    assert prims.CatOp.get_trait(T.Movement) == T.Movement(many=True)
    assert prims.BernoulliOp.has_trait(T.Random)
    assert ltorch.OPS["dropout"].has_trait(T.Random)
    assert CallOp.has_trait(T.Opaque)
    assert RegionOp.has_trait(T.Library)
    assert T.free_to_recompute(prims.ConstantOp)  # type: ignore[arg-type]
    assert not T.free_to_recompute(prims.FullOp)  # type: ignore[arg-type]
    assert T.cheap_to_recompute(prims.FullOp)  # type: ignore[arg-type]
    assert not T.cheap_to_recompute(prims.MatmulOp)  # type: ignore[arg-type]


# Prims the Triton generator does not compute (it never claims them).
TRITON_UNSUPPORTED = frozenset({
    prims.RoundOp, prims.TanOp, prims.AsinOp, prims.AcosOp, prims.AtanOp, prims.SinhOp,
    prims.CoshOp, prims.ErfcOp, prims.BitwiseNotOp, prims.RemainderOp, prims.FmodOp,
    prims.Atan2Op, prims.SliceOp, prims.PadOp, prims.CatOp, prims.FlipOp, prims.ProdOp,
    prims.ArgmaxOp, prims.ArgminOp, prims.MatmulOp, prims.LinearOp, prims.IotaOp,
    prims.BernoulliOp, prims.BernoulliLikeOp, prims.TakeOp, prims.GatherOp,
    prims.IndexAddOp, prims.IndexCopyOp, prims.ScatterAddOp,
})


def test_triton_tables_cover_every_prim() -> None:
    """Triton's templates are a rule table keyed by op class (what an op becomes in Triton
    source is the generator's fact): every prim is in it or declared unsupported here."""
    tables = (TC._UNARY, TC._BINARY, TC._HANDLERS)
    covered = {cls for t in tables for cls in t} | {prims.ConstantOp}
    for table in tables:
        for cls in table:
            assert cls in prims.PRIMS, f"{cls} is not a registered prim"
    assert not covered & TRITON_UNSUPPORTED
    missing = [c.name for c in prims.PRIMS if c not in covered | TRITON_UNSUPPORTED]
    assert missing == [], f"prims neither generated by Triton nor declared unsupported: {missing}"
    for cls in TC._UNARY:
        assert cls.has_trait(T.Elementwise)
    for cls in TC._BINARY:
        assert cls.has_trait(T.Elementwise)


def test_inductor_tables_hold_what_they_say() -> None:
    for cls in IE.LIBRARY_OPS:
        assert cls.has_trait(T.Library), cls.name
    for cls in IE.INDEX_REDUCTIONS:
        kind = T.kind_of(cls)
        assert isinstance(kind, T.Reduction) and kind.indices, cls.name
    for cls in IE.KEPT_OUT:
        assert isinstance(T.kind_of(cls), IE.FUSED_KINDS), cls.name
    for _, cls in IE.FUSIBLE_CLAIMS:
        assert cls in ltorch.LTORCH


# --------------------------------------------------------------------------- out of tree


@irdl_op_definition
class SoftsignOp(prims.FloatUnaryOp):
    """`%y = test.softsign %x`: ``x / (1 + |x|)``, declared on a prims family base."""

    name = "test.softsign"
    TORCH_FN: ClassVar[Callable[..., Any]] = staticmethod(torch.nn.functional.softsign)


def test_an_out_of_tree_elementwise_op_gets_its_family_traits() -> None:
    assert SoftsignOp.get_trait(T.OpKind) == T.Elementwise()
    assert SoftsignOp not in prims.PRIMS  # registered nowhere


def _program() -> tuple[Program, Any]:
    p = Program("f", [tensor_type((64, 32), F32)])
    return p, p.emitter.ns(prims.OPS)


def test_remat_recomputes_the_out_of_tree_op() -> None:
    """Saving the input costs nothing: the cheap op is recomputed in the backward."""
    p, P = _program()
    x = p.args[0]
    y = p.emitter.emit(SoftsignOp, x)
    z = P.exp(y)
    assert cheap_elementwise(y.owner)
    plan = plan_remat([x], [y.owner, z.owner], [], [z], policy=MIN_CUT)
    assert plan.saved == [x]
    assert plan.recompute == [y.owner, z.owner]


def test_fuse_and_inductor_take_the_out_of_tree_op() -> None:
    """The fuse pass groups it with its neighbours for Inductor, whose `can_fuse` asks the
    op's kind; no list names it."""
    p, P = _program()
    x = p.args[0]
    y = p.emitter.emit(SoftsignOp, x)
    z = P.exp(P.mul(y, y))
    module = p.finish([z])
    inductor = IE.InductorExecutor()
    assert inductor.can_fuse(y.owner)
    fuse_block(main_function(module).body.block, (inductor,), 2)
    regions = [op for op in main_function(module).body.block.ops if isinstance(op, RegionOp)]
    assert len(regions) == 1
    names = [op.name for op in regions[0].body.block.ops]
    assert names[:3] == ["test.softsign", "prims.mul", "prims.exp"]


def test_the_out_of_tree_op_lowers_to_a_direct_torch_call() -> None:
    """The torch lowering asks the family (``UnaryOp.torch_call``)."""
    p, _ = _program()
    y = p.emitter.emit(SoftsignOp, p.args[0])
    module = p.finish([y])
    LowerToTorchPass().apply(Context(), module)
    (call,) = [op for op in main_function(module).body.block.ops if isinstance(op, CallOp)]
    assert call.callee.data == "torch.nn.functional.softsign"


def test_the_torch_lowering_asks_each_family() -> None:
    """A family's ``torch_call`` answers for the leaves that keep its ``ref``; a leaf with a
    reference of its own (``ltorch.prod``) or a prim whose torch function needs a re-cast
    (``prims.div``: not ``DIRECT``) is called through its reference."""
    p = Program("f", [tensor_type((4, 8), F32)])
    P = p.emitter.ns(prims.OPS)
    L = p.emitter.ns(ltorch.OPS)
    x = p.args[0]
    outs = [P.add(x, x), P.div(x, x), P.exp(x), L.sum(x, dim=(1,)), L.prod(x, dim=1),
            L.cat([x, x], dim=0)]
    module = p.finish(outs)
    LowerToTorchPass().apply(Context(), module)
    callees = [op.callee.data for op in main_function(module).body.block.ops
               if isinstance(op, CallOp)]
    assert callees == ["torch.add", "thunder_ir.runtime.namespace.prims_div", "torch.exp",
                       "torch.sum", "thunder_ir.runtime.namespace.ltorch_prod", "torch.cat"]


def test_op_class_checks_read_the_mro_and_walk_no_subclasses(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """``isinstance(x, ThunderOp)`` is plain inheritance (`ThunderOp.__subclasshook__`): a
    negative answer for a class outside the tree asks no subclass of ThunderOp, even
    right after an ``ABC.register`` anywhere cleared the ABC caches (ABCMeta would ask
    all of them: 759 checks here, 120 ms in one first training step)."""
    import abc

    from xdsl.dialects import builtin, func

    from thunder_ir.dialects.base import ThunderOp
    from thunder_ir.dialects.guard import GradModeOp
    from thunder_ir.dialects.torch import CallOp

    class Fresh(abc.ABC):  # noqa: B024  (an ABC only to register a class with)
        pass

    Fresh.register(int)  # bumps ABCMeta's invalidation counter: every cache is stale
    asked: list[type] = []
    check = abc.ABCMeta.__subclasscheck__

    def counting(cls: Any, sub: type) -> bool:
        asked.append(cls)
        return check(cls, sub)

    monkeypatch.setattr(abc.ABCMeta, "__subclasscheck__", counting)
    for cls in (GradModeOp, func.FuncOp, builtin.ModuleOp):
        assert not issubclass(cls, ThunderOp)
    assert len(asked) == 3  # ThunderOp alone, once per class: no walk of its subclasses
    assert issubclass(CallOp, ThunderOp) and issubclass(prims.AddOp, ThunderOp)
    assert not issubclass(prims.AddOp, CallOp) and not issubclass(CallOp, prims.AddOp)
    assert isinstance(CallOp.__new__(CallOp), ThunderOp)
