"""The typed contract between passes, the API and the runtime: what crosses packages is a
typed attribute or object, not a string-keyed dict or a tuple read by position."""

from __future__ import annotations

from typing import Any

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


# --------------------------------------------------------------------------- one printer
#
# Every generated function (the forward, the backward, the prologue, the argument gather)
# is text the one printer (`thunder_ir.runtime.python_printer`) wrote, executed by its
# `load_python`; an op reaches Python one way (`ThunderOp.python_call`).

_GENERATED = "<thunder_ir generated "


def _runs_text(fn: Any, source: str) -> None:
    """``fn``'s code was executed by `load_python` from exactly ``source``."""
    import linecache

    filename = fn.__code__.co_filename
    assert filename.startswith(_GENERATED)
    assert "".join(linecache.cache[filename][2]) == source


def test_every_generated_function_is_the_printers_text() -> None:
    from thunder_ir.dialects.program import BACKWARD, FORWARD, prologue_function
    from thunder_ir.lowering.codegen import CODEGEN_HEADER
    from thunder_ir.runtime.prologue import compile_prologue
    from thunder_ir.runtime.python_printer import print_python

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * w).sin()

    jf = thunder_ir.jit(f)
    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    jf(x, w).sum().backward()
    for trace, name in ((thunder_ir.last_traces(jf)[-1], FORWARD),
                        (thunder_ir.last_backward_traces(jf)[-1], BACKWARD)):
        (fn,) = [g for g in trace.ir.ops if g.sym_name.data == name]  # type: ignore[attr-defined]
        assert trace.source == print_python(fn, CODEGEN_HEADER, free_after_last_use=True,
                                            packed=name == BACKWARD)

    entry = jf.cache.last  # type: ignore[attr-defined]
    # the prologue the cache keys by: printed from trace 0's @prologue, as the key function
    pro_ir = prologue_function(entry.traces[0].ir)
    assert pro_ir is not None
    src = print_python(pro_ir)
    assert src.startswith("def prologue(args):\n  (a0, a1,) = args\n  return (")
    assert entry.prologue_source == src
    assert thunder_ir.last_prologue_traces(jf)[0].startswith(src)
    _runs_text(compile_prologue(entry.traces[0].ir, []).fn, src)
    # the gather: a printed function too
    _runs_text(entry.gather, "def gather(L):\n  return (L[0], L[1],)\n")

    jg = thunder_ir.jit(lambda x: x + 1)
    jg(x)
    entry = jg.cache.last  # type: ignore[attr-defined]
    _runs_text(entry.fn.__wrapped__, thunder_ir.last_traces(jg)[-1].source)


def test_code_generation_returns_the_whole_program_typed() -> None:
    """`generate` makes everything a call runs from the pipeline's module: the functions,
    the gather, the backward's layout, and it hands the prologue through; `api.py` builds
    its cache entry from that object alone."""
    from thunder_ir.dialects.program import BACKWARD, FORWARD, PROLOGUE
    from thunder_ir.frontend.tracer import trace_program
    from thunder_ir.lowering.codegen import generate
    from thunder_ir.lowering.executors import compile_context
    from thunder_ir.pipeline import JitOptions, jit_pipeline
    from thunder_ir.runtime.prologue import make_prologue

    m = torch.nn.Linear(3, 2)
    state = dict(m.named_parameters())
    x = torch.randn(4, 3)
    traced = trace_program(m.__call__, (x,), {}, m, state, None)
    pro = make_prologue(["x"], state, 1, ())
    ctx = compile_context(())
    Pipeline(jit_pipeline(JitOptions(executors=ctx.executors, training=True,
                                     requires_grad=(False, True, True))),
             record=False).run(traced.module, ctx)
    program = generate(traced.module, ctx.executors, origins=traced.input_kinds,
                       state=state, prologue=pro)
    assert set(program.functions) == {FORWARD, BACKWARD}
    assert isinstance(program.layout, BackwardLayoutAttr)
    assert program.layout.grad_input_list() == [1, 2]
    assert program.prologue is pro and program.gather is not None
    args = program.gather([x])
    assert args[0] is x and {id(a) for a in args[1:]} == {id(p) for p in state.values()}
    assert set(program.sources) == {FORWARD, BACKWARD, PROLOGUE, "gather"}
    assert program.sources["gather"].startswith("def gather(L):")
    assert program.sources[PROLOGUE] == pro.source
    # inference: no backward, no layout (and no gather or prologue unless given)
    with torch.no_grad():
        traced = trace_program(m.__call__, (x,), {}, m, state, None)
    program = generate(traced.module, ctx.executors)
    assert set(program.functions) == {FORWARD} and program.layout is None
    assert program.gather is None and program.prologue is None


def test_the_gather_binds_state_and_reads_paths() -> None:
    from thunder_ir.runtime.gather import gather_function, make_gather
    from thunder_ir.runtime.origins import ArgLeaf, ArgPath, Captured, Cotangent, StateEntry
    from thunder_ir.runtime.python_printer import render

    class Obj:
        def __init__(self) -> None:
            self.h = torch.ones(2)

    c, w = torch.zeros(1), torch.full((2,), 3.0)
    origins = [ArgLeaf(1), ArgPath(0, (("attr", "h"),)), StateEntry("w"), Captured(c)]
    fn, bound = gather_function(origins, {"w": w})
    assert render(fn) == "def gather(L):\n  return (L[1], L[0].h, s2, c3,)\n"
    assert bound == {"s2": w, "c3": c}
    o, y = Obj(), torch.randn(2)
    got = make_gather(origins, {"w": w})([o, y])
    assert got[0] is y and got[1] is o.h and got[2] is w and got[3] is c
    assert render(gather_function([], {})[0]) == "def gather(L):\n  return ()\n"
    with pytest.raises(TypeError, match="cannot gather"):
        gather_function([Cotangent()], {})


def test_generated_source_is_executed_in_one_place() -> None:
    """Only the printer's `load_python` executes source among the packages and the API (the
    extension API's trampolines are code objects for the user's functions, not programs)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    allowed = {"runtime/python_printer.py", "thunder_ir/extend/replaces.py"}
    found = []
    for package in ("dialects", "passes", "lowering", "runtime", "thunder_ir"):
        for path in sorted((root / package).rglob("*.py")):
            rel = str(path.relative_to(root))
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id in ("exec", "eval") and rel not in allowed):
                    found.append(f"{rel}:{node.lineno}")
    assert found == []


_SUM = """
func.func @f(%x: !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<f32, cpu> {
  %0 = "prims.sum"(%x) <{dims = array<i64: 0, 1>}>
      : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<f32, cpu>
  func.return %0 : !prims.tensor<f32, cpu>
}"""


def test_an_op_reaches_python_one_way() -> None:
    from thunder_ir.dialects import prims
    from thunder_ir.dialects.program import parse
    from thunder_ir.dialects.torch import CallOp
    from thunder_ir.lowering import codegen
    from thunder_ir.runtime import namespace as tir
    from thunder_ir.runtime.interpreter import run

    total, linear = prims.OPS["sum"], prims.OPS["linear"]
    # an op with a reference of its own: the namespaces bind it, the lowering calls it
    assert codegen.prims.sum == total.python_call() == total.ref
    assert tir.op_callable("prims_sum") == total.python_call()
    # an op whose reference only forwards to its torch function: that function, named
    # by its own path (never re-registered under the op's name)
    assert codegen.prims.linear is linear.python_call() is linear.TORCH_FN  # type: ignore[attr-defined]
    assert tir.op_callable("prims_linear") is None
    module = parse(_SUM)
    Pipeline("lower-to-torch", record=False).run(module)
    (call,) = [op for op in module.walk() if isinstance(op, CallOp)]
    assert call.callee.data == "thunder_ir.runtime.namespace.prims_sum"
    # the interpreter calls the same thing
    seen: list[Any] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return total.ref(*args, **kwargs)

    orig = total.__dict__.get("python_call")
    try:
        total.python_call = classmethod(lambda cls: spy)  # type: ignore[assignment,method-assign]
        x = torch.randn(2, 3)
        (out,) = run(parse(_SUM), x)
    finally:
        if orig is None:
            del total.python_call
        else:
            total.python_call = orig  # type: ignore[method-assign]
    assert seen == [{"dims": (0, 1)}]
    torch.testing.assert_close(out, x.sum())
