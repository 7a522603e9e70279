"""The prologue (the cache key function) is IR: ``func.func @prologue`` of ``guard`` ops,
built before tracing, compiled from its IR, and the last function of the program module."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

import thunder_ir
from thunder_ir.dialects import guard as G
from thunder_ir.dialects.program import PROLOGUE, parse, program_functions, prologue_function
from thunder_ir.runtime.prologue import (
    build_prologue,
    compile_prologue,
    make_prologue,
    prologue_labels,
    prologue_source,
)

# The text and labels of the key function before it was IR (the generated Python of
# `runtime/cache.make_prologue`, unchanged): a module with parameters, all tensors...
MODULE_SOURCE = (
    "def prologue(args):\n  (a0,) = args\n  return (a0.shape, a0.dtype, a0.device, "
    "a0.requires_grad, (a0.is_contiguous() or a0.stride()), p0.shape, p0.dtype, p0.device, "
    "p0.requires_grad, (p0.is_contiguous() or p0.stride()), p1.shape, p1.dtype, "
    "p1.device, p1.requires_grad, (p1.is_contiguous() or p1.stride()), _grad(), "
    "_inference(), _default_dtype(), _deterministic(), "
    "(_function_modes() and _default_device()), _autocast(), _tokens,)\n")
_MODES = ["grad mode", "inference mode", "the default dtype", "deterministic algorithms",
          "the default device", "autocast"]
_WHAT = ("shape", "dtype", "device", "requires_grad", "memory layout (strides)")
MODULE_LABELS = [
    "the shape of argument 'x'", "the dtype of argument 'x'", "the device of argument 'x'",
    "requires_grad of argument 'x'", "the memory layout (strides) of argument 'x'",
    *[f"the {w} of 'weight'" for w in _WHAT], *[f"the {w} of 'bias'" for w in _WHAT],
    *_MODES, "module or globals of m"]
# ... and a function with non-tensor arguments.
LEAVES_SOURCE = (
    "def prologue(args):\n  (a0, a1, a2,) = args\n  return (_meta(a0), _meta(a1), _meta(a2), "
    "_aliases(a0, a1, a2), _grad(), _inference(), _default_dtype(), _deterministic(), "
    "(_function_modes() and _default_device()), _autocast(), _tokens,)\n")
LEAVES_LABELS = ["argument 'x'", "argument 'n'", "argument 'opts[0]'",
                 "which arguments share memory", *_MODES, "guarded state"]


STEP = 3
"""A global the traced function reads (a guard the trace adds)."""


def _module_case() -> tuple[ModuleOp, dict[str, torch.Tensor]]:
    state = dict(torch.nn.Linear(4, 2).named_parameters())
    ir = build_prologue(["x"], list(state), all_tensors=True, tokens=(0, 3),
                        token_names=["module", "globals of m"])
    return ir, state


def _leaves_case() -> ModuleOp:
    return build_prologue(["x", "n", "opts[0]"], [], all_tensors=False)


def _roundtrip(ir: ModuleOp) -> ModuleOp:
    ir.verify()
    again = parse(str(ir))
    again.verify()
    assert str(again) == str(ir)
    return again


def test_the_prologue_of_a_module_with_parameters_round_trips_and_keys_as_before() -> None:
    ir, state = _module_case()
    again = _roundtrip(ir)
    x = torch.randn(3, 4)
    w, b = state.values()
    expected = (x.shape, x.dtype, x.device, False, True, w.shape, w.dtype, w.device, True,
                True, b.shape, b.dtype, b.device, True, True, True, False, torch.float32,
                False, 0, False, (0, 3))
    for module in (ir, again):
        pro = compile_prologue(module, list(state.values()))
        assert pro.source == MODULE_SOURCE
        assert pro.labels == MODULE_LABELS
        assert pro.fn([x]) == expected
        assert pro.fn([x.t().contiguous().t()])[4] == (1, 3)  # a layout's strides
        with torch.no_grad():
            assert pro.fn([x])[15] is False
        with torch.inference_mode():  # every global mode that changes a program's answer
            assert pro.fn([x])[15:17] == (False, True)
        with torch.device("meta"):
            assert pro.fn([x])[19] == torch.device("meta")
        was = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            assert pro.fn([x])[18] is True
        finally:
            torch.use_deterministic_algorithms(was)


def test_the_prologue_of_non_tensor_arguments_round_trips_and_keys_as_before() -> None:
    ir = _leaves_case()
    again = _roundtrip(ir)
    x = torch.randn(3, 4)
    expected = ((x.shape, x.dtype, x.device, False, True), (int, 3), (float, "-0.0"), None,
                True, False, torch.float32, False, 0, False, ())
    for module in (ir, again):
        pro = compile_prologue(module, [])
        assert pro.source == LEAVES_SOURCE
        assert pro.labels == LEAVES_LABELS
        assert pro.fn([x, 3, -0.0]) == expected
        assert pro.fn([x, 3, 0.0]) != expected  # -0.0 is its own key
        assert pro.fn([x, x, 0.0])[3] == ((1, 0, True),)  # x twice (its strides: its own)
        assert pro.fn([x[1:], x, 0.0])[3] == ((1, 0, False, -4, (4, 1), (4, 1)),)


def test_no_arguments_and_make_prologue() -> None:
    pro = make_prologue([], {})
    assert pro.source == ("def prologue(args):\n"
                          "  return (_grad(), _inference(), _default_dtype(), "
                          "_deterministic(), (_function_modes() and _default_device()), "
                          "_autocast(), _tokens,)\n")
    assert pro.fn([]) == (torch.is_grad_enabled(), False, torch.get_default_dtype(), False,
                          0, False, ())
    assert prologue_function(pro.ir) is not None


def test_the_prologue_is_guard_ops_each_with_one_expression_per_result() -> None:
    ir, _ = _module_case()
    fn = prologue_function(ir)
    assert fn is not None and fn.sym_name.data == PROLOGUE
    ops = list(fn.body.block.ops)
    assert [type(op) for op in ops] == [
        G.TensorMetaOp, G.StateMetaOp, G.GradModeOp, G.InferenceModeOp, G.DefaultDtypeOp,
        G.DeterministicOp, G.DefaultDeviceOp, G.AutocastOp, G.TokensOp, G.KeyOp,
        func.ReturnOp]
    for op in ops[:-1]:
        assert isinstance(op, G.GuardOp) and op.__doc__
        exprs = op.python(["a"] * len(op.operands))
        assert len(exprs) == len(op.widths()) == len(op.results)
        assert len(op.labels()) == sum(op.widths())
        assert [e.count(",") + 1 for e in exprs] == op.widths() or isinstance(op, G.KeyOp)


def test_a_prologue_parsed_from_text_and_a_foreign_op_in_it() -> None:
    ir = parse("""
    func.func @prologue(%a0: !guard.value) -> !guard.value {
      %0 = "guard.key"(%a0) : (!guard.value) -> !guard.value
      func.return %0 : !guard.value
    }""")
    assert prologue_source(ir).endswith("return (a0,)\n")
    assert prologue_labels(ir) == ["part 0 of the key"]  # no guard op names it
    bad = parse("""
    func.func @prologue(%a0: !prims.tensor<2xf32, cpu>) -> !prims.tensor<2xf32, cpu> {
      %0 = "ltorch.neg"(%a0) : (!prims.tensor<2xf32, cpu>) -> !prims.tensor<2xf32, cpu>
      func.return %0 : !prims.tensor<2xf32, cpu>
    }""")
    with pytest.raises(ValueError, match="not a guard op"):
        prologue_source(bad)


def _function_names(module: ModuleOp) -> list[str]:
    return [f.sym_name.data for f in module.ops if isinstance(f, func.FuncOp)]


def test_the_program_module_ends_in_the_prologue_the_cache_keys_by() -> None:
    m = torch.nn.Linear(4, 2)
    jm = thunder_ir.jit(m)
    x = torch.randn(3, 4)
    jm(x)
    traces = thunder_ir.last_traces(jm)
    program = traces[0].ir  # the program module the pipeline ran on
    assert _function_names(program) == ["forward", "prologue"]
    assert [f.sym_name.data for f in program_functions(program)] == ["forward"]
    src = prologue_source(program)
    assert thunder_ir.last_prologue_traces(jm)[0].startswith(src)
    assert "def prologue(" not in str(traces[-1])  # traces show the forward
    assert all("guard." not in t.mlir() for t in traces[1:])  # the per-pass traces too


def test_a_training_program_holds_forward_backward_and_prologue(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THUNDER_IR_DUMP", "1")
    monkeypatch.setenv("THUNDER_IR_VERIFY", "1")
    def f(x: torch.Tensor, scale: float) -> Any:
        return (x.sin() * scale * STEP).sum()

    jf = thunder_ir.jit(f)
    x = torch.randn(3, requires_grad=True)
    jf(x, 2.0).backward()
    err = capsys.readouterr().err
    last = err[err.index("// ----- IR after del-last-used"):]
    assert re.findall(r"func\.func @(\w+)\(", last) == ["forward", "backward", "prologue"]
    # the globals the trace read added a guard: the module's @prologue is the one rebuilt
    fwd0 = thunder_ir.last_traces(jf)[0].ir
    assert "_meta(a1)" in prologue_source(fwd0)
    assert prologue_source(fwd0) == thunder_ir.last_prologue_traces(jf)[0].split("\n\n")[0] \
        + "\n"
    tokens = next(op for op in prologue_function(fwd0).body.block.ops  # type: ignore[union-attr]
                  if isinstance(op, G.TokensOp))
    # the call's argument structure (its number), then the guard's token
    assert tokens.labels()[0] == f"argument structure or globals of {__name__}"
    assert tokens.values() == (0, 0)
    torch.testing.assert_close(x.grad, x.detach().cos() * 6.0)


def test_the_printer_prints_the_prologue_as_every_function() -> None:
    """The guard ops print through the one printer: each result its op's expression,
    inlined; the layout-free key puts None in the layouts' places."""
    from thunder_ir.runtime.python_printer import is_key_function, print_python

    ir, state = _module_case()
    fn = prologue_function(ir)
    assert fn is not None and is_key_function(fn)
    assert print_python(fn) == print_python(ir.ops.first) == MODULE_SOURCE  # type: ignore[arg-type]
    free = print_python(fn, layouts=False)
    assert "is_contiguous" not in free and free.count("None") == 1  # (state: left out)
    x = torch.randn(3, 4)
    pro = compile_prologue(ir, list(state.values()))
    assert pro.layout_free([x]) == pro.layout_free([x.t().contiguous().t()])
