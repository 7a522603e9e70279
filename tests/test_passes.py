"""Passes: the registry (by call and by entry point), the pipeline and its hooks, the
RNG safety of cse/dce, and each canonicalization pattern (checked against the
interpreter on real inputs)."""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import Pure

from thunder_ir.dialects import fusion, ltorch, prims
from thunder_ir.dialects.base import build
from thunder_ir.dialects.location import location_text, source_location
from thunder_ir.dialects.program import Program, main_function
from thunder_ir.dialects.torch import CallOp, make_call
from thunder_ir.dialects.types import tensor_type
from thunder_ir.passes import registry
from thunder_ir.passes.canonicalize import CanonicalizePass, exact_conversion
from thunder_ir.passes.cse_dce import CSEPass, DCEPass
from thunder_ir.passes.pipeline import (
    DUMP_ENV,
    VERIFY_ENV,
    PassVerificationError,
    Pipeline,
    verify_module,
)
from thunder_ir.runtime.interpreter import run

F32 = tensor_type((2, 3), torch.float32)
CTX = Context()

# --------------------------------------------------------------------------- helpers


def program(body: Callable[..., Any], arg_types: Sequence[Attribute] = (F32, F32),
            loc: str | None = "test.py:1") -> ModuleOp:
    """Builds ``body(P, *args) -> outputs`` into a module (P builds prims)."""
    p = Program("computation", list(arg_types), [f"a{i}" for i in range(len(arg_types))])
    if loc is not None:
        p.emitter.loc = source_location(loc)
    out = body(p.emitter.ns(prims.OPS), *p.args)
    return p.finish(list(out) if isinstance(out, list | tuple) else [out])


def names(module: ModuleOp) -> list[str]:
    """Op names of the program's body, terminator excluded."""
    return [op.name for op in main_function(module).body.block.ops][:-1]


def apply(pass_: ModulePass, module: ModuleOp) -> ModuleOp:
    pass_.apply(CTX, module)
    verify_module(module, pass_.name)
    return module


def bernoulli(P: Any) -> SSAValue:
    return P.bernoulli(shape=(2, 3), p=0.5, device="cpu", dtype=torch.float32)


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class UserNoopPass(ModulePass):
    """A user pass that changes nothing."""

    name = "user-noop"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pass


@dataclass(frozen=True)
class EntryPointPass(ModulePass):
    """A pass that an entry point names."""

    name = "ep-pass"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pass


def test_builtin_passes_are_registered() -> None:
    assert {"decompose-ltorch", "cse", "dce", "canonicalize", "claim", "fuse", "lower-claimed",
            "lower-to-torch", "decompose-for-grad", "autodiff", "remat-split",
            "del-last-used"} <= set(registry.available_passes())
    for n in registry.available_passes():
        cls = registry.get_pass(n)
        assert issubclass(cls, ModulePass) and cls.name == n


def test_unknown_pass_lists_the_available_ones() -> None:
    with pytest.raises(registry.UnknownPassError) as e:
        registry.get_pass("cs")
    msg = str(e.value)
    assert "unknown pass 'cs'" in msg and "Did you mean 'cse'" in msg
    assert ("autodiff, canonicalize, claim, cse, dce, ddp-allreduce, decompose-for-grad, "
            "decompose-ltorch, del-last-used, flatten-cat-chains, fsdp-grad-scale, fsdp-zero3, "
            "fuse, "
            "join-padded-sums, lower-claimed, lower-to-torch, quantize-weights, remat-split, "
            "restride-outputs, schedule-collectives, strip-autograd") in msg


def test_register_pass_by_call() -> None:
    try:
        registry.register_pass(UserNoopPass)
        assert "user-noop" in registry.available_passes()
        assert registry.get_pass("user-noop") is UserNoopPass
        with pytest.raises(ValueError, match="already registered"):
            registry.register_pass(UserNoopPass)
        assert Pipeline("user-noop,cse").names == ("user-noop", "cse")
    finally:
        registry.unregister_pass("user-noop")
    assert "user-noop" not in registry.available_passes()


def test_register_pass_factory_replace_and_names() -> None:
    with pytest.raises(ValueError, match="needs name="):
        registry.register_pass(lambda: UserNoopPass)
    with pytest.raises(ValueError, match="kebab-case"):
        registry.register_pass(lambda: UserNoopPass, name="Bad_Name")
    try:
        registry.register_pass(lambda: UserNoopPass, name="via-factory")
        assert registry.get_pass("via-factory") is UserNoopPass
        registry.register_pass(UserNoopPass, name="cse", replace=True)
        assert registry.get_pass("cse") is UserNoopPass
    finally:
        registry.unregister_pass("via-factory")
        registry.unregister_pass("cse")
    assert registry.get_pass("cse") is CSEPass  # the built-in comes back


def test_entry_point_passes_load_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[str] = []

    def factory() -> type[ModulePass]:
        loads.append("ep-pass")
        return EntryPointPass

    # An importable object for the entry point to name: this module's `factory`.
    monkeypatch.setattr(f"{__name__}._ep_factory", factory, raising=False)
    ep = importlib.metadata.EntryPoint(name="ep-pass", value=f"{__name__}:_ep_factory",
                                       group=registry.ENTRY_POINT_GROUP)
    clash = importlib.metadata.EntryPoint(name="cse", value=f"{__name__}:_ep_factory",
                                          group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    monkeypatch.setattr(registry, "entry_points",
                        lambda group: [ep, clash] if group == registry.ENTRY_POINT_GROUP else [])
    try:
        with pytest.warns(UserWarning, match="already registered"):
            assert "ep-pass" in registry.available_passes()
        assert loads == []  # listed, not loaded
        assert registry.get_pass("ep-pass") is EntryPointPass
        assert loads == ["ep-pass"]
        assert registry.get_pass("cse") is CSEPass  # a plugin cannot shadow a built-in
        traces = Pipeline("ep-pass").run(program(lambda P, a, b: P.add(a, b)))
        assert [t.pass_name for t in traces] == ["ep-pass"]
    finally:
        registry.unregister_pass("ep-pass")


def test_entry_point_with_a_bad_object_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(f"{__name__}._ep_bad", 42, raising=False)
    ep = importlib.metadata.EntryPoint(name="bad-pass", value=f"{__name__}:_ep_bad",
                                       group=registry.ENTRY_POINT_GROUP)
    registry.load_entry_points([ep])
    try:
        with pytest.raises(TypeError, match="expected a ModulePass subclass"):
            registry.get_pass("bad-pass")
    finally:
        registry.unregister_pass("bad-pass")


def test_pass_specs_with_options() -> None:
    (p,) = registry.make_passes("cse")
    assert isinstance(p, CSEPass)
    assert [type(x) for x in registry.make_passes("cse,dce")] == [CSEPass, DCEPass]


def test_thunder_ir_opt_runs_registered_passes(tmp_path: Any,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from thunder_ir.opt import main

    src = tmp_path / "p.mlir"
    src.write_text(str(_sample_program()))
    try:
        registry.register_pass(UserNoopPass)
        assert main(["-p", "user-noop,cse", str(src)]) == 0
    finally:
        registry.unregister_pass("user-noop")
    out = capsys.readouterr().out
    assert out.count('"prims.exp"') == 1 and '"prims.neg"' not in out
    with pytest.raises(SystemExit, match="unknown pass 'user-noop'"):
        main(["-p", "user-noop", str(src)])


# --------------------------------------------------------------------------- pipeline


def _sample_program() -> ModuleOp:
    def body(P: Any, a: SSAValue, b: SSAValue) -> Any:
        x = P.exp(a)
        y = P.exp(a)  # duplicate
        P.neg(b)  # dead
        return P.add(x, y)

    return program(body)


def test_pipeline_records_a_trace_per_pass() -> None:
    module = _sample_program()
    traces = Pipeline(("cse", "dce"), verify=True).run(module)
    assert [t.pass_name for t in traces] == ["cse", "dce"]
    assert all(t.duration_s >= 0 for t in traces)
    assert all(t.ir is not module for t in traces)
    # cse merges the exps (and erases the dead neg, which is trivially dead)
    assert names(traces[0].ir) == ["prims.exp", "prims.add"]
    assert names(module) == ["prims.exp", "prims.add"]
    assert "prims.exp" in traces[-1].mlir()


def test_pipeline_snapshots_are_independent() -> None:
    module = _sample_program()
    traces = Pipeline(("canonicalize",), record=True).run(module)
    before = str(traces[0].ir)
    Pipeline("cse").run(module)
    assert str(traces[0].ir) == before


def test_a_trace_read_late_shows_what_its_pass_left() -> None:
    """The pipeline records a frozen form and builds the IR on the first read: reading
    after later passes rewrote the module still gives the IR of the pass's time."""
    module, eager = _sample_program(), _sample_program()
    traces = Pipeline(("canonicalize", "cse", "dce")).run(module)
    expected = [str(t.ir) for t in Pipeline(("canonicalize", "cse", "dce")).run(eager)]
    DCEPass().apply(CTX, module)
    module.body.block.erase_op(module.body.block.first_op)  # the module is gone
    assert [str(t.ir) for t in traces] == expected
    assert expected[0] != expected[1]  # the passes changed the IR in between
    assert traces[0].ir is traces[0].ir  # built once, then kept


def test_pipeline_pauses_the_gc_and_restores_it() -> None:
    import gc

    states: list[bool] = []
    hook = [lambda n, m, d: states.append(gc.isenabled())]
    assert gc.isenabled()
    Pipeline("cse", hooks=hook).run(_sample_program())
    Pipeline("cse", hooks=hook, pause_gc=False).run(_sample_program())
    assert states == [False, True] and gc.isenabled()


def test_new_op_builds_what_create_builds() -> None:
    """`new_op` sets `Operation.create`'s fields directly: the same op, defaults included
    (arith.addf's ``fastmath`` property has one), and no field left unset."""
    from xdsl.dialects import arith
    from xdsl.dialects.builtin import f32

    from thunder_ir.dialects.construct import new_op

    block = Block(arg_types=[f32, f32])
    for cls, props in ((arith.AddfOp, {}), (CallOp, {"callee": StringAttr("torch.add")})):
        made = cls.create(operands=list(block.args), result_types=[f32], properties=props)
        new = new_op(cls, list(block.args), [f32], dict(props))
        assert str(new) == str(made) and new.properties == made.properties
        assert new.attributes == made.attributes and new.location == made.location
        assert new.regions == () and not new.successors and new.parent is None
        assert all(r.owner is new for r in new.results)
        assert [u.operation for v in block.args for u in v.uses].count(new) == 2
    new = new_op(arith.AddfOp, list(block.args), [f32], {}, defaults=False)
    assert new.properties == {}


def _thawed(module: ModuleOp) -> ModuleOp:
    from thunder_ir.passes.snapshot import freeze

    return freeze(module).thaw()


@pytest.mark.parametrize("copy_of", ["snapshot", "freeze"])
def test_snapshot_is_a_faithful_independent_copy(copy_of: str) -> None:
    from thunder_ir.dialects.program import parse
    from thunder_ir.passes.snapshot import snapshot

    text = (Path(__file__).parent / "filecheck" / "roundtrip" / "dialects.mlir").read_text()
    module = parse(text)
    copy = snapshot(module) if copy_of == "snapshot" else _thawed(module)
    assert str(copy) == str(module) == str(module.clone())
    copy.verify()
    assert all(a is not b for a, b in zip(copy.walk(), module.walk(), strict=True))
    # every field `Operation.create` sets, as it sets it (the copy bypasses it)
    for a, b in zip(copy.walk(), module.walk(), strict=True):
        assert type(a) is type(b) and a.properties == b.properties
        assert a.attributes == b.attributes and a.location == b.location
        assert a.properties is not b.properties and a.attributes is not b.attributes
        assert [r.type for r in a.results] == [r.type for r in b.results]
        assert all(r.owner is a and r.index == i for i, r in enumerate(a.results))
        for i, v in enumerate(a.operands):  # the copy's uses, not the original's
            assert any(u.operation is a and u.index == i for u in v.uses)
        assert a.parent is None if b.parent is None else a.parent is not b.parent
    names_before = str(module)
    DCEPass().apply(CTX, copy)
    CSEPass().apply(CTX, copy)
    assert str(module) == names_before


def test_pipeline_hooks_and_record_off() -> None:
    seen: list[tuple[str, int]] = []
    traces = Pipeline("cse,dce", record=False,
                      hooks=[lambda n, m, d: seen.append((n, len(names(m))))]
                      ).run(_sample_program())
    assert traces == []
    assert seen == [("cse", 2), ("dce", 2)]


@dataclass(frozen=True)
class BreakShapesPass(ModulePass):
    """Rewrites the first prims.add to add tensors of different shapes."""

    name = "break-shapes"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for o in op.walk():
            if isinstance(o, prims.AddOp):
                t = tensor_type((3, 2), torch.float32)
                bad = prims.ReshapeOp.create(operands=[o.rhs], result_types=[t],
                                             properties={"shape": _ints(3, 2)})
                o.parent_block().insert_op_before(bad, o)  # type: ignore[union-attr]
                o.operands = (o.lhs, bad.results[0])
                return


@dataclass(frozen=True)
class UseErasedPass(ModulePass):
    """Erases the first exp although it is used (a classic pass bug)."""

    name = "use-erased"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for o in op.walk():
            if isinstance(o, prims.ExpOp):
                o.parent_block().erase_op(o, safe_erase=False)  # type: ignore[union-attr]
                return


def _ints(*v: int) -> Attribute:
    from xdsl.dialects.builtin import DenseArrayBase, i64

    return DenseArrayBase.from_list(i64, list(v))


def test_verify_names_the_pass_and_the_op() -> None:
    with pytest.raises(PassVerificationError) as e:
        Pipeline([CSEPass(), BreakShapesPass()], verify=True).run(_sample_program())
    msg = str(e.value)
    assert "after pass 'break-shapes'" in msg
    assert "prims.add at test.py:1" in msg and "(2, 3) and (3, 2) differ" in msg
    assert e.value.pass_name == "break-shapes" and isinstance(e.value.op, prims.AddOp)


def test_verify_catches_uses_of_erased_values() -> None:
    msg = "after pass 'use-erased': prims.add at test.py:1: Erased SSA value"
    with pytest.raises(PassVerificationError, match=re.escape(msg)):
        Pipeline([UseErasedPass()], verify=True).run(_sample_program())


def test_verify_checks_the_input_and_reads_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _sample_program()
    BreakShapesPass().apply(CTX, module)
    monkeypatch.setenv(VERIFY_ENV, "1")
    with pytest.raises(PassVerificationError, match="after pass 'input'"):
        Pipeline("cse").run(module)
    monkeypatch.setenv(VERIFY_ENV, "0")
    Pipeline("dce").run(module)  # not verified: no error


def test_dump_prints_each_pass(monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(DUMP_ENV, "1")
    Pipeline("cse,dce").run(_sample_program())
    err = capsys.readouterr().err
    assert "// ----- IR after cse" in err and "// ----- IR after dce" in err
    assert '"prims.exp"' in err


# --------------------------------------------------------------------------- cse / dce


def test_rng_ops_are_not_pure() -> None:
    assert prims.BernoulliOp.has_trait(Pure) is False
    assert CallOp.has_trait(Pure) is False
    for name in ("dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"):
        assert ltorch.OPS[name].has_trait(Pure) is False


def test_cse_keeps_identical_rng_draws_and_merges_pure_ops() -> None:
    def body(P: Any, a: SSAValue, b: SSAValue) -> Any:
        return [bernoulli(P), bernoulli(P), P.exp(a), P.exp(a)]

    m = apply(CSEPass(), program(body))
    ops = names(m)
    assert ops.count("prims.bernoulli") == 2
    assert ops.count("prims.exp") == 1


def test_cse_ignores_source_locations() -> None:
    p = Program("computation", [F32], ["a"])
    P = p.emitter.ns(prims.OPS)
    p.emitter.loc = source_location("model.py:3")
    x = P.exp(p.args[0])
    p.emitter.loc = source_location("model.py:7")
    y = P.exp(p.args[0])
    m = apply(CSEPass(), p.finish([P.add(x, y)]))
    exp = next(op for op in m.walk() if isinstance(op, prims.ExpOp))
    assert names(m) == ["prims.exp", "prims.add"]
    assert location_text(exp) == "model.py:3"  # the first one stays


def test_cse_merges_users_of_merged_values() -> None:
    def body(P: Any, a: SSAValue, b: SSAValue) -> Any:
        x, y = P.exp(a), P.exp(a)
        return P.mul(P.add(x, y), P.add(x, y))  # the adds become equal once the exps merge

    assert names(apply(CSEPass(), program(body))) == ["prims.exp", "prims.add", "prims.mul"]


def test_cse_distinguishes_properties_and_types() -> None:
    def body(P: Any, a: SSAValue, b: SSAValue) -> Any:
        return [P.sum(a, dims=(0,)), P.sum(a, dims=(1,)),
                P.convert_element_type(a, dtype=torch.float16),
                P.convert_element_type(a, dtype=torch.bfloat16)]

    assert len(names(apply(CSEPass(), program(body)))) == 4


def test_dce_keeps_unused_rng_and_torch_calls() -> None:
    p = Program("computation", [F32, F32], ["a", "b"])
    P = p.emitter.ns(prims.OPS)
    a, b = p.args
    bernoulli(P)  # unused draw: advances the stream, stays
    call = make_call("torch.exp", [a], [prims_operand(0)])
    p.block.add_op(call)  # unused opaque call: may have effects, stays
    dead = P.neg(P.exp(a))  # dead chain: goes
    del dead
    m = apply(DCEPass(), p.finish([P.add(a, b)]))
    assert names(m) == ["prims.bernoulli", "torch.call", "prims.add"]


def test_pure_torch_calls_are_deduplicated_and_dropped() -> None:
    """``make_call(..., pure=True)``: CSE merges equal calls, DCE drops unused ones; the
    property survives printing and parsing."""
    from xdsl.traits import is_side_effect_free

    p = Program("computation", [F32], ["a"])
    a = p.args[0]
    calls = [make_call("torch.exp", [a], [prims_operand(0)], pure=True) for _ in range(3)]
    for c in calls:
        p.block.add_op(c)
    assert all(is_side_effect_free(c) for c in calls)
    assert not is_side_effect_free(make_call("torch.exp", [a], [prims_operand(0)]))
    P = p.emitter.ns(prims.OPS)
    m = p.finish([P.add(calls[0].results[0], calls[1].results[0])])  # calls[2] unused
    m = apply(DCEPass(), apply(CSEPass(), m))
    assert names(m) == ["torch.call", "prims.add"]
    assert "pure" in str(m)
    from thunder_ir.dialects.program import parse

    again = parse(str(m))
    call = next(op for op in main_function(again).body.block.ops if isinstance(op, CallOp))
    assert is_side_effect_free(call)


def prims_operand(i: int) -> Any:
    from thunder_ir.dialects.base import OperandRef

    return OperandRef(i)


def test_dce_keeps_fusion_regions_holding_rng() -> None:
    p = Program("computation", [F32], ["a"])
    a = p.args[0]

    def region(with_rng: bool) -> Operation:
        body = Block(arg_types=[F32])
        x = body.args[0]
        if with_rng:
            u = build(prims.BernoulliOp, shape=(2, 3), p=0.5, device="cpu",
                      dtype=torch.float32)
            body.add_op(u)
            y = build(prims.AddOp, x, u.results[0])
        else:
            y = build(prims.ExpOp, x)
        body.add_op(y)
        body.add_op(fusion.YieldOp.create(operands=[y.results[0]]))
        return fusion.RegionOp.create(
            operands=[a], result_types=[F32], regions=[Region(body)],
            properties={"executor": StringAttr("torch"), "kernel": StringAttr("k")})

    p.block.add_op(region(True))
    p.block.add_op(region(False))
    m = apply(DCEPass(), p.finish([a]))
    kept = [op for op in main_function(m).body.block.ops if isinstance(op, fusion.RegionOp)]
    assert len(kept) == 1 and any(isinstance(o, prims.BernoulliOp) for o in kept[0].walk())


def test_dce_erases_dead_chains_in_one_walk() -> None:
    def body(P: Any, a: SSAValue, b: SSAValue) -> Any:
        x = a
        for _ in range(50):
            x = P.exp(x)
        return P.add(a, b)

    assert names(apply(DCEPass(), program(body))) == ["prims.add"]


# --------------------------------------------------------------------------- canonicalize


def canonical(body: Callable[..., Any], arg_types: Sequence[Attribute] = (F32, F32)
              ) -> tuple[list[str], ModuleOp]:
    """Canonicalizes, checks result types and values are unchanged, returns op names."""
    module = program(body, arg_types)
    before = module.clone()
    apply(CanonicalizePass(), module)
    fn_before, fn_after = main_function(before), main_function(module)
    assert fn_before.function_type == fn_after.function_type
    torch.manual_seed(0)
    args = [_sample(t) for t in arg_types]
    for x, y in zip(run(before, *args), run(module, *args), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)
    return names(module), module


def _sample(t: Any) -> torch.Tensor:
    if t.dtype.is_floating_point:
        x = torch.randn(t.sizes, dtype=t.dtype)
        if x.numel():
            x.view(-1)[0] = -0.0  # signed zeros must survive
        return x
    if t.dtype == torch.bool:
        return torch.randint(0, 2, t.sizes).bool()
    return torch.randint(-100, 100, t.sizes, dtype=t.dtype)


def test_convert_to_same_dtype_folds() -> None:
    ops, _ = canonical(lambda P, a, b: P.exp(P.convert_element_type(a, dtype=torch.float32)))
    assert ops == ["prims.exp"]


def test_convert_round_trip_folds_only_when_exact() -> None:
    ops, _ = canonical(lambda P, a, b: P.convert_element_type(
        P.convert_element_type(a, dtype=torch.float64), dtype=torch.float32))
    assert ops == []
    ops, _ = canonical(lambda P, a, b: P.convert_element_type(
        P.convert_element_type(a, dtype=torch.float16), dtype=torch.float32))
    assert ops == ["prims.convert_element_type"] * 2  # f32 -> f16 rounds
    f16 = tensor_type((2, 3), torch.float16)
    ops, _ = canonical(lambda P, a, b: P.convert_element_type(
        P.convert_element_type(a, dtype=torch.float32), dtype=torch.float64), (f16, f16))
    assert ops == ["prims.convert_element_type"]  # f16 -> f32 -> f64 is one exact widening
    i32 = tensor_type((2, 3), torch.int32)
    ops, _ = canonical(lambda P, a, b: P.convert_element_type(
        P.convert_element_type(a, dtype=torch.float64), dtype=torch.int32), (i32, i32))
    assert ops == []


def test_exact_conversion_table() -> None:
    assert exact_conversion(torch.bool, torch.float16)
    assert exact_conversion(torch.uint8, torch.bfloat16)
    assert exact_conversion(torch.int16, torch.float32)
    assert not exact_conversion(torch.int16, torch.float16)
    assert not exact_conversion(torch.int64, torch.float64)
    assert not exact_conversion(torch.float16, torch.bfloat16)
    assert not exact_conversion(torch.bfloat16, torch.float16)
    assert not exact_conversion(torch.float32, torch.int64)
    assert not exact_conversion(torch.int8, torch.uint8)
    assert not exact_conversion(torch.int32, torch.bool)


def test_reshapes_fold() -> None:
    ops, _ = canonical(lambda P, a, b: P.exp(P.reshape(a, shape=(2, 3))))
    assert ops == ["prims.exp"]
    ops, m = canonical(lambda P, a, b: P.reshape(P.reshape(P.reshape(a, shape=(6,)),
                                                          shape=(3, 2)), shape=(1, 6)))
    assert ops == ["prims.reshape"]
    (r,) = [op for op in m.walk() if isinstance(op, prims.ReshapeOp)]
    assert r.x == main_function(m).args[0] and location_text(r) == "test.py:1"
    ops, _ = canonical(lambda P, a, b: P.reshape(P.reshape(a, shape=(6,)), shape=(2, 3)))
    assert ops == []


def test_reshape_with_other_users_stays() -> None:
    ops, _ = canonical(lambda P, a, b: [P.reshape(P.reshape(a, shape=(6,)), shape=(3, 2)),
                                        P.reshape(a, shape=(6,))])
    assert ops == ["prims.reshape", "prims.reshape"]


def test_identity_broadcast_transpose_squeeze_fold() -> None:
    ops, _ = canonical(lambda P, a, b: P.add(
        P.broadcast_in_dim(a, shape=(2, 3), broadcast_dims=(0, 1)),
        P.transpose(P.squeeze(b, dims=()), permutation=(0, 1))))
    assert ops == ["prims.add"]
    # not identities: real broadcast, real transpose, real squeeze
    t = tensor_type((1, 3), torch.float32)
    ops, _ = canonical(lambda P, a, b: [
        P.broadcast_in_dim(a, shape=(2, 3), broadcast_dims=(0, 1)),
        P.transpose(a, permutation=(1, 0)), P.squeeze(b, dims=(0,))], (t, t))
    assert ops == ["prims.broadcast_in_dim", "prims.transpose", "prims.squeeze"]


def test_arithmetic_identities_fold() -> None:
    def body(P: Any, a: SSAValue, b: SSAValue) -> Any:
        one, fone = P.constant(value=1), P.constant(value=1.0)
        x = P.mul(a, fone)
        x = P.mul(one, x)
        x = P.div(x, fone)
        x = P.sub(x, P.constant(value=0.0))
        return P.add(x, P.constant(value=-0.0))

    ops, _ = canonical(body)
    assert ops == []


def test_adding_positive_zero_to_floats_stays() -> None:
    ops, _ = canonical(lambda P, a, b: P.add(a, P.constant(value=0.0)))
    assert ops == ["prims.constant", "prims.add"]
    ops, _ = canonical(lambda P, a, b: P.add(P.constant(value=0), a))
    assert ops == ["prims.constant", "prims.add"]
    i64 = tensor_type((2, 3), torch.int64)
    ops, _ = canonical(lambda P, a, b: P.add(P.constant(value=0), a), (i64, i64))
    assert ops == []


def test_non_identity_constants_stay() -> None:
    ops, _ = canonical(lambda P, a, b: P.mul(P.add(a, P.constant(value=1.0)),
                                             P.constant(value=2.0)))
    assert ops == ["prims.constant", "prims.add", "prims.constant", "prims.mul"]


def test_canonicalize_never_changes_a_returned_type() -> None:
    # mul of a 0-d tensor by 1 has the 0-d type: forwarding is fine; the function type
    # is checked by `canonical` on every test above.
    t0 = tensor_type((), torch.float32)
    ops, _ = canonical(lambda P, a, b: P.mul(a, P.constant(value=1.0)), (t0, t0))
    assert ops == []



@settings(max_examples=150, deadline=None)
@given(st.data())
def test_latest_min_cut_is_networkx_cut(data: st.DataObject) -> None:
    """`passes/min_cut.py`'s Dinic flow gives the cut the remat pass took from networkx's
    preflow-push: the nodes that cannot reach the sink in the residual network (unique for
    every maximum flow), on random graphs with finite and infinite capacities."""
    nx = pytest.importorskip("networkx")
    from thunder_ir.passes.min_cut import SINK, SOURCE, latest_min_cut

    n = data.draw(st.integers(1, 12))
    nodes: list[Any] = [SOURCE, *range(n), SINK]
    edges = data.draw(st.lists(
        st.tuples(st.sampled_from(nodes[:-1]), st.sampled_from(nodes[1:]),
                  st.one_of(st.none(), st.integers(0, 20))), max_size=40))
    edges = [(u, v, c) for u, v, c in edges if u != v]
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    for u, v, c in edges:  # networkx keeps one edge per pair: add them up first
        if g.has_edge(u, v):
            old = g[u][v].get("capacity")
            g[u][v].clear()
            if old is not None and c is not None:
                g[u][v]["capacity"] = old + c
        else:
            g.add_edge(u, v, **({} if c is None else {"capacity": c}))
    try:
        r = nx.algorithms.flow.preflow_push(g, SOURCE, SINK, value_only=False)
    except nx.NetworkXUnbounded:
        with pytest.raises(ValueError, match="infinite"):
            latest_min_cut(edges, nodes)
        return
    sink_side = {SINK}
    stack = [SINK]
    while stack:
        v = stack.pop()
        for u in r.predecessors(v):
            if u not in sink_side and r[u][v]["flow"] < r[u][v]["capacity"]:
                sink_side.add(u)
                stack.append(u)
    assert latest_min_cut(edges, nodes) == set(g) - sink_side


def test_replace_each_hands_over_the_results() -> None:
    """`replace_each`: a new op with the old one's result types takes over its result
    values (their uses and names, one it names itself kept); with other result types the
    uses move to the new results. Either way the IR is what xDSL's rewriter makes."""
    from xdsl.pattern_rewriter import (
        GreedyRewritePatternApplier,
        PatternRewriter,
        PatternRewriteWalker,
        RewritePattern,
    )

    from thunder_ir.dialects.construct import new_op
    from thunder_ir.passes.rewrite import replace_each

    def rule(op: Operation) -> Operation | None:
        if not isinstance(op, prims.OPS["exp"]):
            return None
        t = op.results[0].type
        if op.operands[0] is main_function(op.get_toplevel_object()).args[1]:  # other type
            t = tensor_type((4,), torch.float64)
        new = new_op(prims.OPS["sin"], list(op.operands), [t], {})
        if op.operands[0] is main_function(op.get_toplevel_object()).args[0]:
            new.results[0].name_hint = "own"
        return new

    class Pattern(RewritePattern):
        def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
            new = rule(op)
            if new is not None:
                rewriter.replace(op, [new], list(new.results))

    def body(P: Any, a: SSAValue, b: SSAValue) -> Any:
        x = P.exp(a)
        y = P.exp(b)
        z = P.exp(P.add(a, b))
        return P.add(P.add(x, z), y)

    swept, walked = _named(program(body)), _named(program(body))
    results = [op.results[0] for op in main_function(swept).body.block.ops
               if op.name == "prims.exp"]
    assert replace_each(swept, rule)
    PatternRewriteWalker(GreedyRewritePatternApplier([Pattern()], dce_enabled=False),
                         apply_recursively=False).rewrite_module(walked)
    assert str(swept) == str(walked)
    kept = [op.results[0] for op in main_function(swept).body.block.ops
            if op.name == "prims.sin"]
    assert kept[0] is results[0] and kept[0].name_hint == "own"  # taken over, renamed
    assert kept[1] is not results[1] and not results[1].uses  # other type: uses moved
    assert kept[2] is results[2] and kept[2].name_hint == "z" and kept[2].owner.name == "prims.sin"


def _named(module: ModuleOp) -> ModuleOp:
    for op, name in zip((o for o in main_function(module).body.block.ops
                         if o.name == "prims.exp"), "xyz"):
        op.results[0].name_hint = name
    return module


def test_cse_short_path_agrees_with_xdsl_effects_and_driver() -> None:
    """`cse` answers "pure?" once per op class (`pure_by_class`, `dialects/traits.py`)
    where xDSL asks each op. For every op class of every loaded dialect that the short
    path takes, xDSL's per-op answer on an op of the class is the same (side-effect free,
    not a terminator); and on traced training programs the result is exactly xDSL's own
    driver's."""
    from xdsl.dialects import func as xfunc
    from xdsl.traits import IsTerminator, is_side_effect_free
    from xdsl.transforms.common_subexpression_elimination import CSEDriver

    import thunder_ir
    from thunder_ir.dialects.program import context, parse
    from thunder_ir.dialects.traits import pure_by_class, side_effect_free
    from thunder_ir.passes.cse_dce import cse

    ctx = context()
    taken = 0
    for cls in ctx.loaded_ops:
        name = cls.name
        if not pure_by_class(cls):
            continue
        taken += 1
        op = cls.__new__(cls)  # effects by class alone: no operands, properties or regions
        op.properties, op.attributes = {}, {}
        assert is_side_effect_free(op) and not cls.has_trait(IsTerminator), name
    assert taken > 100 and not pure_by_class(xfunc.ReturnOp) and not pure_by_class(CallOp)

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        a, b = torch.tanh(x @ w), torch.tanh(x @ w)
        d = F.dropout(a, 0.5) + F.dropout(a, 0.5)  # two draws: both stay
        return ((a * b + d).sum() + x.exp().sum() + x.exp().mean()
                + F.layer_norm(b, (8,)).sum())

    jf = thunder_ir.jit(f)
    jf(torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)).backward()
    merged = 0
    for t in [*thunder_ir.last_traces(jf), *thunder_ir.last_backward_traces(jf)]:
        if t.pass_name != "decompose-ltorch":  # what `cse` runs on in jit's pipeline
            continue
        ours, theirs = parse(t.mlir()), parse(t.mlir())
        for op in ours.walk():  # the per-class answer where the class decides, else xDSL's
            assert side_effect_free(op) == is_side_effect_free(op), op.name
        before = len(list(ours.walk()))
        cse(ours)
        CSEDriver().simplify(theirs)
        assert str(ours) == str(theirs)
        merged += before - len(list(ours.walk()))
    assert merged >= 8
