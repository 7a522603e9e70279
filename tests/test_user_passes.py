"""User passes in jit: stages, traces, verification."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

import thunder_ir
from thunder_ir.dialects import ltorch, prims
from thunder_ir.dialects.base import build
from thunder_ir.lowering.torch_executor import TorchExecutor
from thunder_ir.passes.pipeline import PassVerificationError


class MulSigmoidToSilu(RewritePattern):
    """``x * sigmoid(x)`` -> ``silu(x)`` on ltorch ops."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, ltorch.OPS["mul"]):
            return
        a, b = op.operands
        for x, s in ((a, b), (b, a)):
            owner = s.owner
            if isinstance(owner, ltorch.OPS["sigmoid"]) and owner.operands[0] == x:
                rewriter.replace(op, [silu := build(ltorch.OPS["silu"], x)])
                del silu
                return


def f(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x) + 1


def test_patterns_on_the_ltorch_program_show_in_traces() -> None:
    jf = thunder_ir.jit(f, transforms=[thunder_ir.transform([MulSigmoidToSilu()],
                                                            name="mul-sigmoid-to-silu")])
    x = torch.randn(5)
    torch.testing.assert_close(jf(x), f(x))
    traces = thunder_ir.last_traces(jf)
    names = [t.pass_name for t in traces]
    assert names[:2] == ["trace", "mul-sigmoid-to-silu"]
    assert "ltorch.sigmoid" in str(traces[0]) and "ltorch.silu" not in str(traces[0])
    assert "ltorch.silu" in str(traces[1]) and "ltorch.sigmoid" not in str(traces[1])
    assert "torch.nn.functional.silu" in str(traces[-1])


class DoubleNegation(RewritePattern):
    """``neg(neg(x))`` -> ``x`` on prims."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: prims.NegOp, rewriter: PatternRewriter) -> None:
        inner = op.operands[0].owner
        if isinstance(inner, prims.NegOp):
            rewriter.replace(op, [], [inner.operands[0]])


def test_prims_stage_runs_after_decomposition() -> None:
    def g(x: torch.Tensor) -> torch.Tensor:
        return -(-x) * 2  # noqa: B002  (a double negation, on purpose)

    nothing = TorchExecutor(claims=lambda op: False)  # decompose everything into prims
    jf = thunder_ir.jit(g, executors=[nothing],
                        transforms=[thunder_ir.transform([DoubleNegation()], stage="prims",
                                                         name="double-negation")])
    x = torch.randn(4)
    torch.testing.assert_close(jf(x), g(x))
    traces = {t.pass_name: str(t) for t in thunder_ir.last_traces(jf)}
    assert traces["decompose-ltorch"].count("prims.neg") == 2
    assert "prims.neg" not in traces["double-negation"]


@dataclass(frozen=True)
class CountingPass(ModulePass):
    """Counts ops; changes nothing."""

    name = "count-ops"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        COUNTS.append(sum(1 for _ in op.walk()))


COUNTS: list[int] = []


def test_backward_and_fusion_stages() -> None:
    COUNTS.clear()
    jf = thunder_ir.jit(lambda x: (x.sin() * x).sum(),
                        transforms=[thunder_ir.transform(CountingPass(), stage="backward"),
                                    thunder_ir.transform(CountingPass(), stage="fusion")])
    x = torch.randn(3, requires_grad=True)
    jf(x).backward()
    torch.testing.assert_close(x.grad, x.detach().sin() + x.detach() * x.detach().cos())
    assert len(COUNTS) == 3  # backward stage once; fusion stage in forward and backward
    assert "count-ops" in [t.pass_name for t in thunder_ir.last_backward_traces(jf)]
    assert "count-ops" in [t.pass_name for t in thunder_ir.last_traces(jf)]


class BreakTypes(RewritePattern):
    """A buggy pass: replaces silu by its operand's sigmoid with the wrong result type."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ltorch.LtorchOp, rewriter: PatternRewriter) -> None:
        if op.name == "ltorch.relu":
            bad = ltorch.OPS["to_dtype"].create(
                operands=[op.operands[0]], result_types=[op.results[0].type],
                properties={"dtype": __import__("xdsl.dialects.builtin",
                                                fromlist=["f64"]).f64})
            rewriter.replace(op, [bad])


def test_a_pass_that_breaks_the_ir_is_caught_and_named() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    before = [p.clone() for p in model.parameters()]
    jm = thunder_ir.jit(model, transforms=[thunder_ir.transform([BreakTypes()], name="buggy")])
    with pytest.raises(PassVerificationError) as e:
        jm(torch.randn(2, 3))
    msg = str(e.value)
    assert "'buggy'" in msg and "ltorch.to_dtype" in msg
    for p, q in zip(model.parameters(), before):
        assert torch.equal(p, q)
    torch.testing.assert_close(model(torch.ones(1, 3)), model(torch.ones(1, 3)))


def test_bad_transforms_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown stage"):
        thunder_ir.transform(CountingPass(), stage="late")
    with pytest.raises(TypeError, match="ModulePass or a non-empty list"):
        thunder_ir.jit(f, transforms=[object()])
