"""Golden tests of the Python printer: programs print as the reference system's traces."""

from __future__ import annotations

import math

import pytest
import torch
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Region, SSAValue

from thunder_ir.dialects import ltorch, prims
from thunder_ir.dialects.base import Emitter, OperandRef
from thunder_ir.dialects.fusion import RegionOp, YieldOp
from thunder_ir.dialects.location import source_location
from thunder_ir.dialects.program import Program
from thunder_ir.dialects.torch import make_call
from thunder_ir.dialects.types import number_type, tensor_type
from thunder_ir.lowering.python_printer import print_python, py_literal, sanitize
from thunder_ir.trace import Trace

F32 = torch.float32


def mlp_program() -> ModuleOp:
    """``linear(x * 2.0, w)``: the example of the printer's docstring."""
    p = Program(
        "computation",
        [tensor_type((8, 784), F32), tensor_type((10, 784), F32)],
        ["x", "t_fc_1_weight"],
    )
    P = p.emitter.ns(prims.OPS)
    t0 = P.mul(p.args[0], P.constant(value=2.0))
    t1 = P.linear(t0, p.args[1], None)
    return p.finish([t1])


def fusion_program() -> ModuleOp:
    """``exp(where(a + b > 0, a + b, b)) * inf``, the middle part as a fusion region."""
    t = tensor_type((4, 3), F32)
    p = Program("computation", [t, t], ["a", "b"])
    P = p.emitter.ns(prims.OPS)
    s = P.add(p.args[0], p.args[1])
    body = Block(arg_types=[t, t])
    Q = Emitter(body.add_op).ns(prims.OPS)
    gt = Q.gt(body.args[0], Q.constant(value=0.0))
    e = Q.exp(Q.where(gt, body.args[0], body.args[1]))
    body.add_op(YieldOp.create(operands=[e, gt]))
    region = RegionOp.create(
        operands=[s, p.args[1]],
        result_types=[e.type, gt.type],
        properties={"executor": StringAttr("torch_compile"), "kernel": StringAttr("tritonFusion0")},
        regions=[Region(body)],
    )
    p.block.add_op(region)
    out = P.mul(region.results[0], P.constant(value=math.inf))
    return p.finish([out, region.results[1]])


def test_prims_program_golden() -> None:
    text = print_python(mlp_program(), "# Constructed by test (took 1 milliseconds)")
    assert (
        text
        == """\
# Constructed by test (took 1 milliseconds)
import torch
from thunder_ir.runtime import namespace as tir
from thunder_ir.runtime.namespace import prims

@tir.no_grad
def computation(x, t_fc_1_weight):
  # x: "cpu f32[8, 784]"
  # t_fc_1_weight: "cpu f32[10, 784]"
  t0 = prims.mul(x, 2.0)  # t0: "cpu f32[8, 784]"
  t1 = prims.linear(t0, t_fc_1_weight, None)  # t1: "cpu f32[8, 10]"
  return t1
"""
    )


def test_free_after_last_use_golden() -> None:
    text = print_python(mlp_program(), free_after_last_use=True)
    assert (
        text
        == """\
import torch
from thunder_ir.runtime import namespace as tir
from thunder_ir.runtime.namespace import prims

@tir.no_grad
def computation(x, t_fc_1_weight):
  # x: "cpu f32[8, 784]"
  # t_fc_1_weight: "cpu f32[10, 784]"
  t0 = prims.mul(x, 2.0)  # t0: "cpu f32[8, 784]"
  del x
  t1 = prims.linear(t0, t_fc_1_weight, None)  # t1: "cpu f32[8, 10]"
  del t0, t_fc_1_weight
  return t1
"""
    )


def test_packed_and_lazy_golden() -> None:
    """``packed`` (``@backward``): one list, unpacked at once and emptied. ``lazy``: each
    argument read from the list right before its first use (the list the bridge passes
    unpacks a residual that saved-tensor hooks packed when it is read)."""
    packed = print_python(mlp_program(), free_after_last_use=True, packed=True)
    assert packed.split("@tir.no_grad\n")[1] == """\
def computation(args):
  (x, t_fc_1_weight,) = args
  args.clear()  # each value is freed after its last use
  # x: "cpu f32[8, 784]"
  # t_fc_1_weight: "cpu f32[10, 784]"
  t0 = prims.mul(x, 2.0)  # t0: "cpu f32[8, 784]"
  del x
  t1 = prims.linear(t0, t_fc_1_weight, None)  # t1: "cpu f32[8, 10]"
  del t0, t_fc_1_weight
  return t1
"""
    lazy = print_python(mlp_program(), free_after_last_use=True, lazy=True)
    assert lazy.split("@tir.no_grad\n")[1] == """\
def computation(args):
  # x: "cpu f32[8, 784]"
  # t_fc_1_weight: "cpu f32[10, 784]"
  x = args[0]
  t0 = prims.mul(x, 2.0)  # t0: "cpu f32[8, 784]"
  del x
  t_fc_1_weight = args[1]
  t1 = prims.linear(t0, t_fc_1_weight, None)  # t1: "cpu f32[8, 10]"
  del t0, t_fc_1_weight
  return t1
"""


def test_del_keeps_outputs_and_frees_unused_results() -> None:
    t = tensor_type((2, 6), F32)
    p = Program("computation", [t, t], ["a", "b"])
    P = p.emitter.ns(prims.OPS)
    s = P.add(p.args[0], p.args[1])
    split = make_call("torch.split", [s], [OperandRef(0), 3], {"dim": 1})
    p.block.add_op(split)
    out = P.neg(split.results[0])
    text = print_python(p.finish([out, s]), free_after_last_use=True)
    body = text.split("):\n", 1)[1]
    assert (
        body
        == """\
  # a: "cpu f32[2, 6]"
  # b: "cpu f32[2, 6]"
  t0 = prims.add(a, b)  # t0: "cpu f32[2, 6]"
  del a, b
  (t1, t2) = torch.split(t0, 3, dim=1)
    # t1: "cpu f32[2, 3]"
    # t2: "cpu f32[2, 3]"
  del t2
  t3 = prims.neg(t1)  # t3: "cpu f32[2, 3]"
  del t1
  return (t3, t0)
"""
    )


def test_ltorch_ops_golden() -> None:
    x_t, w_t, b_t = (tensor_type(s, F32) for s in ((3, 5), (4, 5), (4,)))
    p = Program("computation", [x_t, w_t, b_t], ["x", "w", "bias"])
    L = p.emitter.ns(ltorch.OPS)
    y = L.linear(p.args[0], p.args[1], p.args[2])
    z = L.add(y, y, alpha=2)
    text = print_python(p.finish([z]))
    assert (
        text
        == """\
import torch
from thunder_ir.runtime import namespace as tir
from thunder_ir.runtime.namespace import ltorch

@tir.no_grad
def computation(x, w, bias):
  # x: "cpu f32[3, 5]"
  # w: "cpu f32[4, 5]"
  # bias: "cpu f32[4]"
  t0 = ltorch.linear(x, w, bias)  # t0: "cpu f32[3, 4]"
  t1 = ltorch.add(t0, t0, alpha=2)  # t1: "cpu f32[3, 4]"
  return t1
"""
    )


def test_torch_call_golden() -> None:
    x_t, w_t = tensor_type((3, 5), F32), tensor_type((4, 5), F32)
    p = Program("computation", [x_t, w_t], ["x", "w"])
    lin = make_call("torch.nn.functional.linear", p.args, [OperandRef(0), OperandRef(1), None])
    p.block.add_op(lin)
    y = lin.results[0]
    cat = make_call("torch.cat", [y, y], [(OperandRef(0), OperandRef(1))], {"dim": 0})
    p.block.add_op(cat)
    text = print_python(p.finish([cat.results[0]]))
    assert (
        text
        == """\
import torch
import torch.nn.functional
from thunder_ir.runtime import namespace as tir

@tir.no_grad
def computation(x, w):
  # x: "cpu f32[3, 5]"
  # w: "cpu f32[4, 5]"
  t0 = torch.nn.functional.linear(x, w, None)  # t0: "cpu f32[3, 4]"
  t1 = torch.cat((t0, t0), dim=0)  # t1: "cpu f32[6, 4]"
  return t1
"""
    )


def test_fusion_region_golden() -> None:
    text = print_python(fusion_program(), free_after_last_use=True)
    assert (
        text
        == """\
import torch
from thunder_ir.runtime import namespace as tir
from thunder_ir.runtime.namespace import prims

@tir.no_grad
def computation(a, b):
  # a: "cpu f32[4, 3]"
  # b: "cpu f32[4, 3]"
  t0 = prims.add(a, b)  # t0: "cpu f32[4, 3]"
  del a
  (t1, t2) = tritonFusion0(t0, b)
    # t2 = prims.gt(t0, 0.0)  # t2: "cpu b8[4, 3]"
    # t3 = prims.where(t2, t0, b)  # t3: "cpu f32[4, 3]"
    # t1 = prims.exp(t3)  # t1: "cpu f32[4, 3]"
  del t0, b
  t4 = prims.mul(t1, float('inf'))  # t4: "cpu f32[4, 3]"
  del t1
  return (t4, t2)
"""
    )


def test_static_arguments_print_as_python() -> None:
    t = tensor_type((2, 3), F32)
    p = Program("f", [t, t, number_type(int)], ["a", "b", "n"])
    P = p.emitter.ns(prims.OPS)
    c = P.cat([p.args[0], p.args[1]], dim=0)
    h = P.convert_element_type(c, dtype=torch.float16)
    full = P.full(shape=(4, 3), fill_value=1.5, device="cpu", dtype=torch.float16)
    s = P.slice(P.add(h, full), start_indices=(0, 0), end_indices=(4, 3), strides=(2, 1))
    m = P.mul(s, p.args[2])
    text = print_python(p.finish([m, P.constant(value=True)]))
    body = text.split("):\n", 1)[1]
    assert (
        body
        == """\
  # a: "cpu f32[2, 3]"
  # b: "cpu f32[2, 3]"
  # n: "int"
  t0 = prims.cat([a, b], dim=0)  # t0: "cpu f32[4, 3]"
  t1 = prims.convert_element_type(t0, dtype=torch.float16)  # t1: "cpu f16[4, 3]"
  t2 = prims.full(shape=(4, 3), fill_value=1.5, device='cpu', dtype=torch.float16)  # t2: \
"cpu f16[4, 3]"
  t3 = prims.add(t1, t2)  # t3: "cpu f16[4, 3]"
  t4 = prims.slice(t3, start_indices=(0, 0), end_indices=(4, 3), strides=(2, 1))  # t4: \
"cpu f16[2, 3]"
  t5 = prims.mul(t4, n)  # t5: "cpu f16[2, 3]"
  return (t5, True)
"""
    )
    assert "def f(a, b, n):" in text


def test_absent_optional_param_is_left_out() -> None:
    t = tensor_type((4, 3), F32)
    p = Program("computation", [t], ["x"])
    P = p.emitter.ns(prims.OPS)
    s = P.slice(p.args[0], start_indices=(1, 0), end_indices=(3, 3))
    text = print_python(p.finish([s]))
    assert "t0 = prims.slice(x, start_indices=(1, 0), end_indices=(3, 3))  #" in text


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (2.0, "2.0"),
        (-1e-05, "-1e-05"),
        (math.inf, "float('inf')"),
        (-math.inf, "float('-inf')"),
        (math.nan, "float('nan')"),
        (3, "3"),
        (True, "True"),
        (None, "None"),
        ("mean", "'mean'"),
        (torch.bfloat16, "torch.bfloat16"),
        (slice(0, 4, 2), "slice(0, 4, 2)"),
        (slice(None, -1, None), "slice(None, -1, None)"),
        (..., "..."),
        ((1,), "(1,)"),
        ((), "()"),
        ((slice(1, None, None), ..., OperandRef(1)), "(slice(1, None, None), ..., idx)"),
        (OperandRef(0), "x"),
        (torch.device("cpu"), "torch.device('cpu')"),
    ],
)
def test_py_literal(value: object, expected: str) -> None:
    text = py_literal(value, ["x", "idx"])
    assert text == expected
    if "x" not in text and "idx" not in text:
        got = eval(text, {"torch": torch})
        assert got == value or (isinstance(value, float) and math.isnan(got))


def test_py_literal_rejects_unknown_values() -> None:
    with pytest.raises(TypeError, match="no Python literal"):
        py_literal(object())


def test_names_are_unique_valid_identifiers() -> None:
    t = tensor_type((2,), F32)
    p = Program("computation", [t] * 6, ["t1", "a.b", "torch", "lambda", "x", "x"])
    p.args[5].name_hint = "x"  # xDSL keeps duplicate hints; the printer renames
    p.block.args[1].name_hint = "a-b$c"
    P = p.emitter.ns(prims.OPS)
    outs: list[SSAValue] = [P.neg(a) for a in p.args]
    outs[0].name_hint = "fc.0"
    text = print_python(p.finish(outs))
    assert "def computation(t1, a_b_c, torch_1, lambda_1, x, x_1):" in text
    assert "  fc_0 = prims.neg(t1)  # fc_0:" in text
    assert "  t0 = prims.neg(a_b_c)" in text
    assert "  t2 = prims.neg(torch_1)" in text  # t1 is taken by a hint
    compile(text, "<test>", "exec")
    assert sanitize("0.weight") == "_0_weight"


def test_locations_are_printed_on_request() -> None:
    t = tensor_type((2,), F32)
    p = Program("computation", [t], ["x"])
    p.emitter.loc = source_location("model.py:12")
    y = p.emitter.ns(prims.OPS).exp(p.args[0])
    m = p.finish([y])
    assert "model.py" not in print_python(m)
    assert 't0 = prims.exp(x)  # t0: "cpu f32[2]"  (model.py:12)' in print_python(m, locations=True)


def test_no_outputs_returns_empty_tuple() -> None:
    p = Program("computation", [tensor_type((2,), F32)], ["x"])
    assert print_python(p.finish([])).endswith('  # x: "cpu f32[2]"\n  return ()\n')


def test_trace_str_is_the_python_print() -> None:
    trace = Trace(mlp_program(), "decompose-ltorch", 0.0012)
    text = str(trace)
    assert text.startswith(
        "# Constructed by decompose-ltorch (took 1 milliseconds)\nimport torch\n"
    )
    assert text == print_python(trace.ir, "# Constructed by decompose-ltorch (took 1 milliseconds)")


def test_multi_result_ops_unpack() -> None:
    t = tensor_type((4, 6), F32)
    p = Program("computation", [t], ["x"])
    L = p.emitter.ns(ltorch.OPS)
    a, b = L.split(p.args[0], split_size_or_sections=2, dim=0)
    (whole,) = L.split(a, split_size_or_sections=6, dim=1)  # one chunk: still a sequence
    one = make_call("torch.split", [b], [OperandRef(0), 8], {"dim": 1})
    p.block.add_op(one)
    text = print_python(p.finish([whole, one.results[0]]))
    body = text.split("):\n", 1)[1]
    assert (
        body
        == """\
  # x: "cpu f32[4, 6]"
  (t0, t1) = ltorch.split(x, split_size_or_sections=2, dim=0)
    # t0: "cpu f32[2, 6]"
    # t1: "cpu f32[2, 6]"
  (t2,) = ltorch.split(t0, split_size_or_sections=6, dim=1)  # t2: "cpu f32[2, 6]"
  (t3,) = torch.split(t1, 8, dim=1)  # t3: "cpu f32[2, 6]"
  return (t2, t3)
"""
    )


def test_getitem_index_names_its_tensor_operands() -> None:
    x_t, i_t = tensor_type((5, 4), F32), tensor_type((3,), torch.int64)
    p = Program("computation", [x_t, i_t], ["x", "idx"])
    L = p.emitter.ns(ltorch.OPS)
    y = L.getitem(p.args[0], [p.args[1]], index=(OperandRef(0), slice(1, None, 2)))
    z = L.getitem(y, [], index=(..., 0))
    text = print_python(p.finish([z]))
    assert (
        "  t0 = ltorch.getitem(x, [idx], index=(idx, slice(1, None, 2)))"
        '  # t0: "cpu f32[3, 2]"\n'
        "  t1 = ltorch.getitem(t0, [], index=(..., 0))"
    ) in text


def test_multi_result_op_inside_a_fusion_body() -> None:
    """Inside a region's commented body the result types of a multi-result op align under
    its statement, one comment line each (not a comment of a comment)."""
    t = tensor_type((4, 6), F32)
    half = tensor_type((2, 6), F32)
    p = Program("computation", [t], ["x"])
    body = Block(arg_types=[t])
    L = Emitter(body.add_op).ns(ltorch.OPS)
    a, b = L.split(body.args[0], split_size_or_sections=2, dim=0)
    s = L.add(a, b)
    body.add_op(YieldOp.create(operands=[s]))
    region = RegionOp.create(
        operands=[p.args[0]], result_types=[half],
        properties={"executor": StringAttr("torch_compile"),
                    "kernel": StringAttr("inductorFusion0")},
        regions=[Region(body)],
    )
    p.block.add_op(region)
    body_text = print_python(p.finish([region.results[0]])).split("):\n", 1)[1]
    assert body_text == """\
  # x: "cpu f32[4, 6]"
  t0 = inductorFusion0(x)
    # (t1, t2) = ltorch.split(x, split_size_or_sections=2, dim=0)
    #   t1: "cpu f32[2, 6]"
    #   t2: "cpu f32[2, 6]"
    # t0 = ltorch.add(t1, t2, alpha=1)  # t0: "cpu f32[2, 6]"
  return t0
"""
