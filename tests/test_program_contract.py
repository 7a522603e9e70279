"""The typed contract between passes, the API and the runtime: what crosses packages is a
typed attribute or object, not a string-keyed dict or a tuple read by position."""

from __future__ import annotations

import pytest
import torch
from xdsl.parser import Parser

import thunder_ir
from thunder_ir.dialects.autograd import LAYOUT, BackwardLayoutAttr, JointLayoutAttr
from thunder_ir.dialects.program import context, parse
from thunder_ir.passes.autodiff import grad_layout_of
from thunder_ir.passes.pipeline import Pipeline


@pytest.mark.parametrize("attr", [
    JointLayoutAttr.make(3, 1, 12, [1, 2], [0], [(0,), (0,)]),
    BackwardLayoutAttr.make(2, 2, 4, [0], [0, 1], [(1,)]),
    BackwardLayoutAttr.make(1, 1, 0, [], [], []),
])
def test_layouts_print_and_parse_back(attr: JointLayoutAttr | BackwardLayoutAttr) -> None:
    back = Parser(context(), str(attr)).parse_attribute()
    assert back == attr
    assert back.grad_input_list() == attr.grad_input_list()
    assert back.reach_list() == attr.reach_list()


def test_a_training_program_carries_its_layouts() -> None:
    m = torch.nn.Linear(3, 2)
    jm = thunder_ir.jit(m)
    jm(torch.randn(4, 3)).sum().backward()
    bwd = thunder_ir.last_backward_traces(jm)[-1]
    (fn,) = [f for f in bwd.ir.ops if f.sym_name.data == "backward"]  # type: ignore[attr-defined]
    lay = grad_layout_of(fn)
    assert isinstance(lay, BackwardLayoutAttr)
    # x does not require grad; the weight and the bias (inputs 1 and 2) get gradients
    assert (lay.n_inputs, lay.n_outputs) == (3, 1)
    assert lay.grad_input_list() == [1, 2] and lay.ct_output_list() == [0]
    assert "#autograd.backward<inputs = 3, outputs = 1" in bwd.mlir()


def test_remat_split_names_the_missing_layout() -> None:
    module = parse("""
    func.func @joint(%x: !prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu> {
      func.return %x : !prims.tensor<4xf32, cpu>
    }""")
    with pytest.raises(ValueError, match=f"{LAYOUT} = #autograd.joint"):
        Pipeline("remat-split", record=False).run(module)


def test_argument_origins_are_typed() -> None:
    from thunder_ir.frontend.tracer import trace_program
    from thunder_ir.runtime.origins import ArgLeaf, ArgPath, Captured, StateEntry

    captured = torch.ones(3)

    class State:
        def __init__(self) -> None:
            self.h = torch.zeros(3)

    lin = torch.nn.Linear(3, 3)

    def f(x: torch.Tensor, s: State) -> torch.Tensor:
        return lin(x + s.h) * captured

    s = State()
    traced = trace_program(f, (torch.randn(3), s), {})
    kinds = traced.input_kinds
    assert kinds[0] == ArgLeaf(0)
    assert ArgPath(1, (("attr", "h"),)) in kinds
    assert any(isinstance(k, Captured) and k.tensor is captured for k in kinds)

    m = torch.nn.Linear(3, 2)
    state = dict(m.named_parameters())
    traced = trace_program(m.__call__, (torch.randn(1, 3),), {}, m, state)
    assert traced.input_kinds == [ArgLeaf(0), StateEntry("weight"), StateEntry("bias")]
