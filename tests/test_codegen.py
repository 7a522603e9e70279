"""Code generation: compiled programs run the printed source and match the interpreter."""

from __future__ import annotations

import dis
import gc
import inspect
import linecache
import math
import traceback
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Attribute, Block, Dialect, Region
from xdsl.irdl import irdl_op_definition, operand_def, result_def

from thunder_ir.dialects import ltorch, prims
from thunder_ir.dialects.base import Emitter, OperandRef, ThunderOp
from thunder_ir.dialects.fusion import RegionOp, YieldOp
from thunder_ir.dialects.program import Program
from thunder_ir.dialects.torch import make_call
from thunder_ir.dialects.types import TensorType, number_type, tensor_type
from thunder_ir.lowering import codegen
from thunder_ir.lowering.codegen import compile_program
from thunder_ir.runtime.interpreter import run

F32 = torch.float32


def as_list(out: Any, n: int) -> list[Any]:
    """The generated function's return value as the interpreter's list of outputs."""
    return [out] if n == 1 else list(out)


def assert_same(got: Sequence[Any], expected: Sequence[Any]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        if isinstance(e, torch.Tensor):
            assert g.dtype == e.dtype and g.shape == e.shape
            torch.testing.assert_close(g, e, equal_nan=True)
        else:
            assert g == e


def make_region(
    inputs: Sequence[Any], kernel: str, build: Callable[[Any, Sequence[Any]], list[Any]]
) -> RegionOp:
    """A fusion region over ``inputs`` whose body ``build(prims_ns, block_args)`` makes."""
    body = Block(arg_types=[v.type for v in inputs])
    outs = build(Emitter(body.add_op).ns(prims.OPS), body.args)
    body.add_op(YieldOp.create(operands=outs))
    return RegionOp.create(
        operands=list(inputs),
        result_types=[o.type for o in outs],
        properties={"executor": StringAttr("torch_compile"), "kernel": StringAttr(kernel)},
        regions=[Region(body)],
    )


def mixed_program() -> ModuleOp:
    """prims, ltorch, torch.call (multi-result), constants and a fusion region."""
    x_t, w_t, b_t = tensor_type((6, 5), F32), tensor_type((4, 5), F32), tensor_type((4,), F32)
    p = Program("computation", [x_t, w_t, b_t, number_type(float)], ["x", "w", "bias", "s"])
    P, L = p.emitter.ns(prims.OPS), p.emitter.ns(ltorch.OPS)
    x, w, bias, s = p.args
    t0 = P.mul(x, P.constant(value=0.5))
    t1 = L.linear(t0, w, bias)
    t2 = L.add(t1, t1, alpha=3)
    split = make_call("torch.split", [t2], [OperandRef(0), 2], {"dim": 0})
    p.block.add_op(split)
    a, _, c = split.results
    region = make_region(
        [a, c, s],
        "tritonFusion0",
        lambda Q, args: [
            Q.tanh(Q.mul(Q.sub(args[0], args[1]), args[2])),
            Q.gt(args[0], Q.constant(value=0.0)),
        ],
    )
    p.block.add_op(region)
    y, mask = region.results
    t3 = P.where(mask, y, P.constant(value=-math.inf))
    t4 = P.sum(P.exp(t3), dims=(1,))
    relu = make_call("torch.nn.functional.relu", [t4], [OperandRef(0)])
    p.block.add_op(relu)
    return p.finish([relu.results[0], mask, t1])


def inputs() -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(6, 5, generator=g),
        torch.randn(4, 5, generator=g),
        torch.randn(4, generator=g),
        1.75,
    )


def test_compiled_matches_interpreter() -> None:
    m = mixed_program()
    fn, src = compile_program(m)
    assert "= tritonFusion0(" in src
    for seed in range(3):
        torch.manual_seed(seed)
        args = (torch.randn(6, 5), torch.randn(4, 5), torch.randn(4), float(seed) - 0.5)
        assert_same(as_list(fn(*args), 3), run(m, *args))


def test_source_is_what_runs() -> None:
    m = mixed_program()
    fn, src = compile_program(m)
    assert inspect.getsource(fn) == src.split("\n\n", 1)[1]
    assert "  del " in src  # compiled with free_after_last_use
    # The printed text, executed on its own with the kernel as a global, gives the same.
    scope: dict[str, Any] = {
        "tritonFusion0": codegen.interpreted_kernel(
            next(op for op in m.walk() if isinstance(op, RegionOp))
        )
    }
    exec(src, scope)
    args = inputs()
    assert_same(as_list(scope["computation"](*args), 3), as_list(fn(*args), 3))


def test_printed_source_reexecutes_without_help() -> None:
    p = Program("computation", [tensor_type((3, 4), F32)], ["x"])
    P = p.emitter.ns(prims.OPS)
    y = P.amax(P.mul(p.args[0], P.constant(value=2)), dims=(0,))
    lin = make_call("torch.nn.functional.softmax", [y], [OperandRef(0)], {"dim": 0})
    p.block.add_op(lin)
    m = p.finish([lin.results[0], y])
    fn, src = compile_program(m)
    scope: dict[str, Any] = {}
    exec(src, scope)
    x = torch.randn(3, 4)
    assert_same(list(scope["computation"](x)), list(fn(x)))
    assert_same(list(fn(x)), run(m, x))


def test_given_kernels_are_called() -> None:
    m = mixed_program()
    calls: list[int] = []

    def kernel(a: torch.Tensor, c: torch.Tensor, s: float) -> list[torch.Tensor]:
        calls.append(len(calls))
        return [torch.tanh((a - c) * s), a > 0]

    fn, _ = compile_program(m, {"tritonFusion0": kernel})
    args = inputs()
    assert_same(as_list(fn(*args), 3), run(m, *args))
    assert calls == [0]


def test_dels_free_intermediates() -> None:
    t = tensor_type((8,), F32)
    p = Program("computation", [t], ["x"])
    P = p.emitter.ns(prims.OPS)
    r0 = make_region([p.args[0]], "first", lambda Q, a: [Q.exp(a[0])])
    p.block.add_op(r0)
    t1 = P.neg(r0.results[0])
    r1 = make_region([t1], "second", lambda Q, a: [Q.abs(a[0])])
    p.block.add_op(r1)
    m = p.finish([r1.results[0]])
    seen: list[weakref.ref[torch.Tensor]] = []
    alive_in_second: list[bool] = []

    def first(x: torch.Tensor) -> torch.Tensor:  # one output: returned itself
        out = torch.exp(x)
        seen.append(weakref.ref(out))
        return out

    def second(v: torch.Tensor) -> torch.Tensor:
        alive_in_second.append(seen[0]() is not None)
        return v.abs()

    fn, src = compile_program(m, {"first": first, "second": second})
    assert "  del t0\n" in src
    assert "  t0 = first(x)\n" in src  # a one-result region prints as a plain assignment
    x = torch.randn(8)
    torch.testing.assert_close(fn(x), torch.exp(x).neg().abs())
    assert alive_in_second == [False]  # the first kernel's output died after its last use


def test_traceback_points_into_generated_source() -> None:
    p = Program("computation", [tensor_type((3, 5), F32), tensor_type((4, 5), F32)], ["x", "w"])
    P = p.emitter.ns(prims.OPS)
    y = P.linear(P.exp(p.args[0]), p.args[1], None)
    fn, src = compile_program(p.finish([y]))
    with pytest.raises(RuntimeError) as info:
        fn(torch.randn(3, 5), torch.randn(4, 7))  # wrong inner size: no guard in this code
    frames = traceback.extract_tb(info.value.__traceback__)
    generated = [f for f in frames if f.name == "computation" and f.filename.startswith("<")]
    assert len(generated) == 1
    line = generated[0].line
    assert line == 't1 = prims.linear(t0, w, None)  # t1: "cpu f32[3, 4]"'
    assert src.splitlines()[generated[0].lineno - 1].strip() == line
    assert "prims.linear(t0, w, None)" in "".join(traceback.format_tb(info.value.__traceback__))


def test_linecache_entry_dies_with_the_function() -> None:
    p = Program("computation", [tensor_type((2,), F32)], ["x"])
    fn, _ = compile_program(p.finish([p.emitter.ns(prims.OPS).neg(p.args[0])]))
    filename = fn.__wrapped__.__code__.co_filename
    assert filename in linecache.cache
    other, _ = compile_program(_neg_program())
    assert other.__wrapped__.__code__.co_filename != filename  # unique file names
    del fn
    gc.collect()
    assert filename not in linecache.cache


def _neg_program() -> ModuleOp:
    p = Program("computation", [tensor_type((2,), F32)], ["x"])
    return p.finish([p.emitter.ns(prims.OPS).neg(p.args[0])])


def test_generated_code_does_no_subscripting() -> None:
    fn, _ = compile_program(mixed_program())
    ops = {i.opname for i in dis.get_instructions(fn.__wrapped__)}
    assert not {"BINARY_SUBSCR", "STORE_SUBSCR", "CALL_FUNCTION_EX"} & ops


def test_namespaces_bind_reference_implementations() -> None:
    assert codegen.prims.mul == prims.OPS["mul"].ref  # an overridden ref
    # prims.linear keeps the default ref: its torch function is bound itself.
    assert codegen.prims.linear is prims.OPS["linear"].TORCH_FN  # type: ignore[attr-defined]
    for ns, table in ((codegen.prims, prims.OPS), (codegen.ltorch, ltorch.OPS)):
        for short, cls in table.items():
            assert getattr(ns, short) == cls.python_call()


@irdl_op_definition
class TwiceOp(ThunderOp):
    """`%y = testdialect.twice %x`: a test op of a dialect codegen has not seen."""

    name = "testdialect.twice"

    x = operand_def(TensorType)
    out = result_def(TensorType)

    @classmethod
    def infer(cls, x: Attribute) -> Attribute:
        return x

    @classmethod
    def ref(cls, x: torch.Tensor) -> torch.Tensor:
        return x * 2


TestDialect = Dialect("testdialect", [TwiceOp], [])


def test_ops_of_other_dialects_bind_on_compile() -> None:
    p = Program("computation", [tensor_type((3,), F32)], ["x"])
    y = p.emitter.emit(TwiceOp, p.args[0])
    fn, src = compile_program(p.finish([y]))
    assert "from thunder_ir.runtime.namespace import testdialect\n" in src
    x = torch.randn(3)
    torch.testing.assert_close(fn(x), x * 2)
    from thunder_ir.runtime.namespace import testdialect  # type: ignore[attr-defined]

    assert testdialect.twice == TwiceOp.ref


def test_duplicate_kernel_names_are_rejected() -> None:
    t = tensor_type((2,), F32)
    p = Program("computation", [t], ["x"])
    r0 = make_region([p.args[0]], "k", lambda Q, a: [Q.exp(a[0])])
    p.block.add_op(r0)
    r1 = make_region([r0.results[0]], "k", lambda Q, a: [Q.neg(a[0])])
    p.block.add_op(r1)
    m = p.finish([r1.results[0]])
    with pytest.raises(ValueError, match="two fusion regions are named 'k'"):
        compile_program(m)
    fn, _ = compile_program(m, {"k": lambda v: v + 1})  # one shared compiled kernel
    torch.testing.assert_close(fn(torch.zeros(2)), torch.full((2,), 2.0))


def test_multi_result_and_getitem_programs_match_interpreter() -> None:
    x_t, i_t = tensor_type((4, 6), F32), tensor_type((3,), torch.int64)
    p = Program("computation", [x_t, i_t], ["x", "idx"])
    L = p.emitter.ns(ltorch.OPS)
    a, b = L.split(p.args[0], split_size_or_sections=2, dim=0)
    (whole,) = L.split(a, split_size_or_sections=6, dim=1)
    one = make_call("torch.split", [b], [OperandRef(0), 8], {"dim": 1})
    p.block.add_op(one)
    g = L.getitem(whole, [p.args[1]], index=(slice(None, None, None), OperandRef(0)))
    s = L.add(g, g, alpha=2)
    m = p.finish([s, one.results[0], L.getitem(b, [], index=(..., -1))])
    fn, src = compile_program(m)
    assert "(t3,) = torch.split(t1, 8, dim=1)" in src
    x, idx = torch.randn(4, 6), torch.tensor([5, 0, 2])
    assert_same(as_list(fn(x, idx), 3), run(m, x, idx))
    torch.testing.assert_close(fn(x, idx)[0], 3 * x[:2, :][:, idx])
