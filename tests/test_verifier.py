"""Bad IR gets clear verifier messages: each test parses MLIR text, verifies the module and
checks what the message says (the op, the types or shapes, what is wrong)."""

from __future__ import annotations

import pytest
from xdsl.utils.exceptions import ParseError, VerifyException

from thunder_ir.dialects.program import parse

F23 = "!prims.tensor<2x3xf32, cpu>"
F32 = "!prims.tensor<3x2xf32, cpu>"
F33 = "!prims.tensor<3x3xf32, cpu>"
B23 = "!prims.tensor<2x3xi1, cpu>"
I2 = "!prims.tensor<2xi64, cpu>"


def module(args: str, body: str, results: str) -> str:
    """A one-function module; ``body`` ends with the ``func.return``."""
    lines = "\n".join(f"    {line}" for line in body.strip().splitlines())
    return (f"builtin.module {{\n  func.func @f({args}) -> ({results}) {{\n{lines}\n  }}\n}}\n")


def verify_error(text: str) -> str:
    """Parses ``text`` (which must parse), verifies it and returns the verifier's message
    with its notes (xDSL attaches the offending op, printed, as a note)."""
    m = parse(text)
    with pytest.raises(VerifyException) as info:
        m.verify()
    return "\n".join([str(info.value), *getattr(info.value, "__notes__", [])])


def assert_mentions(msg: str, *needles: str) -> None:
    for n in needles:
        assert n in msg, f"{n!r} not in:\n{msg}"


def test_well_formed_module_verifies() -> None:
    text = module(f"%a: {F23}, %b: {F23}", f"""
%0 = "prims.add"(%a, %b) : ({F23}, {F23}) -> {F23}
func.return %0 : {F23}""", F23)
    parse(text).verify()


# --------------------------------------------------------------------------- result types


def test_wrong_result_shape_names_op_and_both_types() -> None:
    msg = verify_error(module(f"%a: {F23}, %b: {F23}", f"""
%0 = "prims.add"(%a, %b) : ({F23}, {F23}) -> {F33}
func.return %0 : {F33}""", F33))
    assert_mentions(msg, "prims.add", "cpu f32[3, 3]", "cpu f32[2, 3]", "do not match",
                    "shape rule")


def test_wrong_result_dtype_and_device() -> None:
    msg = verify_error(module(f"%a: {F23}, %b: {F23}", f"""
%0 = "prims.lt"(%a, %b) : ({F23}, {F23}) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.lt", "cpu f32[2, 3]", "cpu b8[2, 3]")
    meta = "!prims.tensor<2x3xf32, meta>"
    msg = verify_error(module(f"%a: {F23}", f"""
%0 = "prims.exp"(%a) : ({F23}) -> {meta}
func.return %0 : {meta}""", meta))
    assert_mentions(msg, "prims.exp", "meta f32[2, 3]", "cpu f32[2, 3]")


def test_wrong_result_count() -> None:
    msg = verify_error(module(f"%a: {F23}", f"""
%0, %1 = "prims.neg"(%a) : ({F23}) -> ({F23}, {F23})
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "1 result", "got 2")


def test_ltorch_wrong_result_type() -> None:
    f = "!prims.tensor<2x3xf64, cpu>"
    msg = verify_error(module(f"%a: {F23}", f"""
%0 = "ltorch.add"(%a, %a) : ({F23}, {F23}) -> {f}
func.return %0 : {f}""", f))
    assert_mentions(msg, "ltorch.add", "cpu f64[2, 3]", "cpu f32[2, 3]")


# --------------------------------------------------------------------------- arity and kinds


def test_wrong_arity_is_a_clear_error() -> None:
    msg = verify_error(module(f"%a: {F23}", f"""
%0 = "prims.add"(%a) : ({F23}) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.add", "Expected 2 operands", "got 1")
    msg = verify_error(module(f"%a: {F23}", f"""
%0 = "prims.exp"(%a, %a) : ({F23}, {F23}) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.exp", "Expected 1 operand", "got 2")


def test_number_where_a_tensor_is_required() -> None:
    n = "!prims.number<f64>"
    msg = verify_error(module(f"%n: {n}", f"""
%0 = "prims.exp"(%n) : ({n}) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.exp", "prims.tensor", "prims.number<f64>")


def test_two_numbers_into_a_binary_prim() -> None:
    n = "!prims.number<f64>"
    msg = verify_error(module(f"%n: {n}", f"""
%0 = "prims.mul"(%n, %n) : ({n}, {n}) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.mul", "needs at least one tensor")


def test_number_kind_must_fit_the_tensor() -> None:
    n = "!prims.number<f64>"
    msg = verify_error(module(f"%a: {I2}, %n: {n}", f"""
%0 = "prims.add"(%n, %a) : ({n}, {I2}) -> {I2}
func.return %0 : {I2}""", I2))
    assert_mentions(msg, "prims.add", "a float number cannot join a torch.int64 tensor")


def test_missing_and_mistyped_properties() -> None:
    msg = verify_error(module(f"%a: {F23}", f"""
%0 = "prims.sum"(%a) : ({F23}) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.sum", "dims")
    msg = verify_error(module(f"%a: {F23}", f"""
%0 = "prims.sum"(%a) <{{dims = 1 : i64}}> : ({F23}) -> !prims.tensor<2xf32, cpu>
func.return %0 : !prims.tensor<2xf32, cpu>""", "!prims.tensor<2xf32, cpu>"))
    assert_mentions(msg, "prims.sum", "array")


def test_unknown_op_and_bad_type_do_not_parse() -> None:
    with pytest.raises(ParseError, match=r"prims\.nope"):
        parse(module(f"%a: {F23}", f"""
%0 = "prims.nope"(%a) : ({F23}) -> {F23}
func.return %0 : {F23}""", F23))
    with pytest.raises((ParseError, VerifyException), match="unsupported tensor element type"):
        parse(module("%a: !prims.tensor<2xi3, cpu>", "func.return %a : !prims.tensor<2xi3, cpu>",
                     "!prims.tensor<2xi3, cpu>"))


# --------------------------------------------------------------------------- shapes and dims


def test_incompatible_shapes() -> None:
    msg = verify_error(module(f"%a: {F23}, %b: {F32}", f"""
%0 = "prims.add"(%a, %b) : ({F23}, {F32}) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.add", "shapes (2, 3) and (3, 2) differ", "broadcast_in_dim")
    msg = verify_error(module(f"%a: {F23}, %b: {F23}", f"""
%0 = "prims.matmul"(%a, %b) : ({F23}, {F23}) -> {F33}
func.return %0 : {F33}""", F33))
    assert_mentions(msg, "prims.matmul", "(2, 3)", "cannot be multiplied")
    msg = verify_error(module(f"%a: {F23}, %b: {F32}", f"""
%0 = "prims.cat"(%a, %b) <{{dim = 0 : i64}}> : ({F23}, {F32}) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.cat", "(2, 3)", "(3, 2)", "outside dim 0")


def test_mixed_dtypes_and_devices() -> None:
    f64 = "!prims.tensor<2x3xf64, cpu>"
    msg = verify_error(module(f"%a: {F23}, %b: {f64}", f"""
%0 = "prims.sub"(%a, %b) : ({F23}, {f64}) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.sub", "torch.float32", "torch.float64", "convert_element_type")
    cuda = "!prims.tensor<2x3xf32, cuda:1>"
    msg = verify_error(module(f"%a: {F23}, %b: {cuda}", f"""
%0 = "prims.sub"(%a, %b) : ({F23}, {cuda}) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.sub", "cpu", "cuda:1")


@pytest.mark.parametrize(("op", "props", "result", "needles"), [
    ("prims.sum", "dims = array<i64: 2>", "!prims.tensor<2x3xf32, cpu>",
     ["prims.sum", "dims (2,)", "rank-2"]),
    ("prims.amax", "dims = array<i64: 0, 0>", "!prims.tensor<3xf32, cpu>",
     ["prims.amax", "(0, 0)", "not distinct"]),
    ("prims.flip", "dims = array<i64: -1>", F23, ["prims.flip", "(-1,)"]),
    ("prims.transpose", "permutation = array<i64: 1, 1>", F32,
     ["prims.transpose", "(1, 1)"]),
    ("prims.squeeze", "dims = array<i64: 0>", "!prims.tensor<3xf32, cpu>",
     ["prims.squeeze", "(0,)", "size 1"]),
    ("prims.argmax", "dim = 5 : i64", "!prims.tensor<2xi64, cpu>",
     ["prims.argmax", "(5,)", "rank-2"]),
    ("prims.broadcast_in_dim", "shape = array<i64: 3, 2>, broadcast_dims = array<i64: 0, 1>",
     F32, ["prims.broadcast_in_dim", "(2, 3)", "(3, 2)"]),
    ("prims.reshape", "shape = array<i64: 4>", "!prims.tensor<4xf32, cpu>",
     ["prims.reshape", "(2, 3)", "(4,)"]),
    ("prims.slice", "start_indices = array<i64: 0, 0>, end_indices = array<i64: 3, 3>", F33,
     ["prims.slice", "[0:3:1]", "size 2"]),
    ("prims.pad", "padding_value = 0.0 : f64, padding_config = [array<i64: 0, 0, 0>]", F23,
     ["prims.pad", "(low, high, interior)", "(2, 3)"]),
])
def test_bad_dims_and_static_arguments(op: str, props: str, result: str,
                                       needles: list[str]) -> None:
    msg = verify_error(module(f"%a: {F23}", f"""
%0 = "{op}"(%a) <{{{props}}}> : ({F23}) -> {result}
func.return %0 : {result}""", result))
    assert_mentions(msg, *needles)


def test_where_needs_a_bool_condition() -> None:
    msg = verify_error(module(f"%c: {F23}, %a: {F23}", f"""
%0 = "prims.where"(%c, %a, %a) : ({F23}, {F23}, {F23}) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.where", "condition must be bool", "torch.float32")
    msg = verify_error(module(f"%c: {B23}, %a: {F32}", f"""
%0 = "prims.where"(%c, %a, %a) : ({B23}, {F32}, {F32}) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.where", "(2, 3)", "(3, 2)")


def test_index_dtype_and_bernoulli_probability() -> None:
    msg = verify_error(module(f"%a: {F23}, %i: !prims.tensor<2xf32, cpu>", f"""
%0 = "prims.take"(%a, %i) <{{dim = 0 : i64}}> : ({F23}, !prims.tensor<2xf32, cpu>) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.take", "int32 or int64", "torch.float32")
    msg = verify_error(module("", f"""
%0 = "prims.bernoulli"() <{{shape = array<i64: 2, 3>, p = 1.5 : f64, device = "cpu", \
dtype = f32}}> : () -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.bernoulli", "p must be in [0, 1]")


def test_creation_op_with_bad_device() -> None:
    msg = verify_error(module("", f"""
%0 = "prims.full"() <{{shape = array<i64: 2, 3>, fill_value = 0.0 : f64, device = "tpu", \
dtype = f32}}> : () -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "prims.full", "'tpu'", "cpu, meta or cuda:N")


# --------------------------------------------------------------------------- fusion.region


def region(args: str, operands: str, block_args: str, body: str, results: str,
           operand_types: str) -> str:
    lines = "\n".join(f"      {line}" for line in body.strip().splitlines())
    return module(args, f"""
%r = "fusion.region"({operands}) <{{executor = "torch_compile", kernel = "fusion0"}}> ({{
^bb0({block_args}):
{lines}
}}) : ({operand_types}) -> {results}
func.return %r : {results}""", results)


def test_fusion_region_verifies_when_well_formed() -> None:
    parse(region(f"%a: {F23}", "%a", f"%x: {F23}", f"""
%t = "prims.neg"(%x) : ({F23}) -> {F23}
"fusion.yield"(%t) : ({F23}) -> ()""", F23, F23)).verify()


def test_fusion_region_block_args_must_match_operands() -> None:
    msg = verify_error(region(f"%a: {F23}", "%a", f"%x: {F32}", f"""
%t = "prims.neg"(%x) : ({F32}) -> {F32}
"fusion.yield"(%t) : ({F32}) -> ()""", F32, F23))
    assert_mentions(msg, "fusion.region fusion0", "block argument types",
                    "do not match the operand types")
    msg = verify_error(region(f"%a: {F23}", "%a", f"%x: {F23}, %y: {F23}", f"""
"fusion.yield"(%x) : ({F23}) -> ()""", F23, F23))
    assert_mentions(msg, "fusion.region fusion0", "block argument types")


def test_fusion_region_needs_a_yield() -> None:
    msg = verify_error(region(f"%a: {F23}", "%a", f"%x: {F23}", f"""
%t = "prims.neg"(%x) : ({F23}) -> {F23}""", F23, F23))
    assert_mentions(msg, "prims.neg", "not a terminator")
    msg = verify_error(region(f"%a: {F23}", "%a", f"%x: {F23}", "", F23, F23))
    assert_mentions(msg, "fusion.region", "empty block", "expects at least a terminator")
    # Another dialect's terminator in its place is rejected too.
    msg = verify_error(region(f"%a: {F23}", "%a", f"%x: {F23}", f"""
%t = "prims.neg"(%x) : ({F23}) -> {F23}
func.return %t : {F23}""", F23, F23))
    assert_mentions(msg, "func.return", "expects parent op")


def test_fusion_region_yield_must_match_results() -> None:
    msg = verify_error(region(f"%a: {F23}", "%a", f"%x: {F23}", f"""
%t = "prims.lt"(%x, %x) : ({F23}, {F23}) -> {B23}
"fusion.yield"(%t) : ({B23}) -> ()""", F23, F23))
    assert_mentions(msg, "fusion.region fusion0", "yielded types do not match the result types")


def test_fusion_region_body_is_verified() -> None:
    msg = verify_error(region(f"%a: {F23}", "%a", f"%x: {F23}", f"""
%t = "prims.neg"(%x) : ({F23}) -> {F33}
"fusion.yield"(%x) : ({F23}) -> ()""", F23, F23))
    assert_mentions(msg, "prims.neg", "cpu f32[3, 3]", "cpu f32[2, 3]")


# --------------------------------------------------------------------------- torch.call


def test_torch_call_operand_ref_out_of_range() -> None:
    msg = verify_error(module(f"%a: {F23}", f"""
%0 = "torch.call"(%a) <{{callee = "torch.add", args = [#prims.operand<0>, \
#prims.operand<1>]}}> : ({F23}) -> {F23}
func.return %0 : {F23}""", F23))
    # The operand index is printed through OperandRef's repr ("#prims.operand<OperandRef(1)>")
    assert_mentions(msg, "torch.call torch.add", "#prims.operand<", "1", "only 1 operands")


def test_torch_call_operand_ref_nested_out_of_range() -> None:
    msg = verify_error(module(f"%a: {F23}", f"""
%0 = "torch.call"(%a) <{{callee = "torch.cat", args = [[#prims.operand<0>, \
#prims.operand<3>]]}}> : ({F23}) -> {F23}
func.return %0 : {F23}""", F23))
    assert_mentions(msg, "torch.call torch.cat", "#prims.operand<", "3", "only 1 operands")


def test_torch_call_in_range_verifies() -> None:
    parse(module(f"%a: {F23}", f"""
%0 = "torch.call"(%a) <{{callee = "torch.neg", args = [#prims.operand<0>]}}> : ({F23}) -> {F23}
func.return %0 : {F23}""", F23)).verify()
