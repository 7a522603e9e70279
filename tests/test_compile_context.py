"""The compile context: what a compilation compiles with travels with it, not in globals.

Each jitted callable builds one `CompileContext` (its executors, the registry lookup for
executors a pass spec names, the trace printer) and runs its passes with it. Executors
given to ``jit`` need not be registered, and two jitted callables with executors of the
same name (each bringing its own VJP rules) do not see each other's.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from xdsl.context import Context
from xdsl.ir import Operation

import thunder_ir
from thunder_ir.dialects import ltorch
from thunder_ir.dialects import prims as P
from thunder_ir.dialects.program import context, parse
from thunder_ir.lowering.executors import Executor, compile_context, get_executor
from thunder_ir.lowering.python_printer import print_python
from thunder_ir.passes.context import CompileContext, resolve
from thunder_ir.passes.pipeline import Pipeline

SinOp = ltorch.OPS["sin"]

SIN = """
builtin.module {
  func.func @forward(%x : !prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu> {
    %y = "ltorch.sin"(%x) : (!prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
    func.return %y : !prims.tensor<4xf32, cpu>
  }
}"""


class ScaledSinGrad(Executor):
    """An unregistered executor whose own VJP rule for ``sin`` returns the cotangent
    doubled (``k=2``) or negated (``k=-1``): a deliberately different gradient, so the
    test sees whose rule ran."""

    name = "scaled_sin_grad"

    def __init__(self, k: float) -> None:
        self.k = k

    def vjp_rule(self, op: Operation) -> Any:
        if not isinstance(op, SinOp):
            return None
        k = self.k

        def rule(g: Any, out: list[Any], ct: list[Any], a: Any, **params: Any) -> list[Any]:
            return [g.ltorch.add(ct[0], ct[0]) if k == 2 else g.ltorch.neg(ct[0])]

        return rule


def _grad(jf: Any) -> torch.Tensor:
    x = torch.randn(5, requires_grad=True)
    jf(x).sum().backward()
    assert x.grad is not None
    return x.grad


def test_executors_of_the_same_name_keep_their_own_vjp_rules() -> None:
    double = thunder_ir.jit(lambda x: torch.sin(x), executors=[ScaledSinGrad(2.0)])
    negate = thunder_ir.jit(lambda x: torch.sin(x), executors=[ScaledSinGrad(-1.0)])
    plain = thunder_ir.jit(lambda x: torch.sin(x))
    # compile in an order where a process-wide table keyed by name would leak: the
    # second executor's rule must not reach the first callable, nor either the third
    assert torch.equal(_grad(negate), torch.full((5,), -1.0))
    assert torch.equal(_grad(double), torch.full((5,), 2.0))
    x = torch.randn(5, requires_grad=True)
    plain(x).sum().backward()
    assert torch.allclose(x.grad, torch.cos(x.detach()))  # type: ignore[arg-type]
    assert "scaled_sin_grad" not in {e.name for e in thunder_ir.get_all_executors()}


def test_jit_compiles_with_one_context_per_callable() -> None:
    ex = ScaledSinGrad(2.0)
    jf = thunder_ir.jit(lambda x: torch.sin(x), executors=[ex])
    other = thunder_ir.jit(lambda x: torch.sin(x))
    cf, co = jf.compiler, other.compiler  # a jitted function's compiler stage
    assert isinstance(cf.ctx, CompileContext) and cf.ctx is not co.ctx
    assert cf.ctx.executors[0] is ex and cf.ctx.executors[-1].name == "torch"
    assert all(e.name != ex.name for e in co.ctx.executors)
    assert cf.ctx.printer is print_python


def test_names_resolve_through_the_context() -> None:
    ex = ScaledSinGrad(2.0)
    ctx = compile_context([ex])
    # the context's own executors first (unregistered ones included), then the registry
    assert resolve(ctx, ["scaled_sin_grad", "torch", ex]) == (ex, ctx.executors[-1], ex)
    assert ctx.executor("sdpa") is get_executor("sdpa")
    with pytest.raises(ValueError, match="unknown executor 'nope'"):
        ctx.executor("nope")
    bare = CompileContext.over(context(), executors=(ex,))
    with pytest.raises(ValueError, match=r"unknown executor 'torch'.*has: scaled_sin_grad"):
        resolve(bare, ["torch"])
    with pytest.raises(ValueError, match="plain xDSL Context"):
        resolve(Context(), ["torch"])


def test_a_pass_spec_names_the_contexts_executor() -> None:
    """``claim{executors=NAME}`` claims with the context's executor of that name: a test
    hands the pipeline its own executor instead of registering it or patching a global."""

    class ClaimsSin(Executor):
        name = "claims_sin"

        def can_claim(self, op: Any) -> bool:
            return isinstance(op, SinOp)

    module = parse(SIN)
    Pipeline("claim{executors=claims_sin}", record=False).run(
        module, compile_context([ClaimsSin()]))
    assert '#fusion.executor<"claims_sin">' in str(module)
    with pytest.raises(ValueError, match="unknown executor 'claims_sin'"):
        Pipeline("claim{executors=claims_sin}", record=False).run(module, compile_context())


def test_traces_print_with_the_contexts_printer() -> None:
    module = parse(SIN)
    (trace,) = Pipeline("cse").run(module, compile_context())
    assert "def forward(x):" in str(trace)
    (trace,) = Pipeline("cse").run(module, CompileContext.over(context()))
    assert str(trace).startswith("builtin.module")


def test_rules_added_for_one_compile_are_not_seen_by_a_concurrent_one() -> None:
    """A decomposition and a VJP rule given to one compilation's context apply to it alone:
    another compilation running at the same time, in another thread, uses the built-in
    rules, and the built-in tables are not touched."""
    import threading
    from dataclasses import replace

    from thunder_ir.passes.decompositions import DECOMPOSITIONS, load_rules
    from thunder_ir.passes.vjp import VJP_RULES, load_vjp_rules

    load_rules()
    load_vjp_rules()
    before = (dict(DECOMPOSITIONS), dict(VJP_RULES))
    other_done = threading.Event()

    def as_cos(d: Any, x: Any) -> Any:  # (waits until the other compile has decomposed)
        assert other_done.wait(60)
        return d.prims.cos(x)

    mine, theirs = parse(SIN), parse(SIN)
    ctx = replace(compile_context(), decompositions={SinOp: as_cos})
    errors: list[BaseException] = []

    def run(module: Any, c: Any, done: threading.Event | None) -> None:
        try:
            Pipeline("decompose-ltorch", record=False).run(module, c)
        except BaseException as e:  # (reported by the main thread)
            errors.append(e)
        finally:
            if done is not None:
                done.set()

    threads = [threading.Thread(target=run, args=(mine, ctx, None)),
               threading.Thread(target=run, args=(theirs, compile_context(), other_done))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert '"prims.cos"' in str(mine) and '"prims.sin"' not in str(mine)
    assert '"prims.sin"' in str(theirs) and '"prims.cos"' not in str(theirs)

    def negated(g: Any, out: list[Any], ct: list[Any], a: Any, **params: Any) -> list[Any]:
        return [g.ltorch.neg(ct[0])]

    own = thunder_ir.jit(lambda x: torch.sin(x))
    own.compiler.ctx = replace(own.compiler.ctx, vjp_rules={SinOp: negated})
    plain = thunder_ir.jit(lambda x: torch.sin(x))
    grads: dict[str, torch.Tensor] = {}

    def grad_of(name: str, jf: Any) -> None:
        grads[name] = _grad(jf)

    threads = [threading.Thread(target=grad_of, args=("own", own)),
               threading.Thread(target=grad_of, args=("plain", plain))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert torch.equal(grads["own"], torch.full((5,), -1.0))
    assert not torch.equal(grads["plain"], torch.full((5,), -1.0))
    assert (dict(DECOMPOSITIONS), dict(VJP_RULES)) == before


def test_built_in_rule_tables_are_frozen_and_additions_are_scoped() -> None:
    """Every rule table holds frozen built-in entries (those thunder_ir's modules register)
    and the user's additions beside them: a user cannot replace or delete a built-in
    decomposition, VJP rule, route or input strategy (the message points at the compile
    context), a dict write is refused, and `scoped_additions` undoes an op's rules."""
    import thunder_ir.frontend.tracer  # (every handler module)
    import thunder_ir.testing  # noqa: F401  (every input strategy)
    from thunder_ir.dialects.tables import TABLES, scoped_additions
    from thunder_ir.frontend.table import HANDLERS
    from thunder_ir.frontend.torch_map import register_torch_op
    from thunder_ir.passes.decompositions import DECOMPOSITIONS, decomposes, load_rules
    from thunder_ir.passes.vjp import VJP_RULES, load_vjp_rules, vjp
    from thunder_ir.testing.inputs import INPUT_STRATEGIES, register_inputs

    load_rules()
    load_vjp_rules()
    assert {t.title for t in TABLES} >= {"decomposition", "VJP rule", "route", "input strategy"}
    in_tree = {*ltorch.OPS.values(), *P.OPS.values()}
    assert not {k for t in TABLES for k in t.additions() if k in in_tree}, \
        "an in-tree rule registered as an addition"  # (test modules may add their own ops')
    before = [dict(t) for t in TABLES]
    added_before = [t.additions() for t in TABLES]

    def rule(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("never called")

    exp = ltorch.OPS["exp"]  # (it has a decomposition, a VJP rule and inputs of its own)
    for register in (decomposes(exp), vjp(exp), register_inputs(exp)):
        with pytest.raises(ValueError, match="built-in entries are frozen"):
            register(rule)
    with pytest.raises(ValueError, match="CompileContext"):
        register_torch_op([torch.sin], SinOp)
    for table in (DECOMPOSITIONS, VJP_RULES, HANDLERS, INPUT_STRATEGIES):
        key = next(iter(table))
        with pytest.raises(TypeError, match="frozen"):
            table[key] = rule
        with pytest.raises(TypeError, match="frozen"):
            del table[key]
        with pytest.raises(TypeError, match="frozen"):
            table.clear()

    class Mine:  # a user's own op class (only its identity matters to the tables)
        name = "user.mine"

    def user_fn(x: Any) -> Any:
        return x

    with scoped_additions():
        decomposes(Mine)(rule)  # type: ignore[arg-type]
        vjp(Mine)(rule)  # type: ignore[arg-type]
        register_inputs(Mine)(rule)  # type: ignore[arg-type]
        register_torch_op([user_fn], Mine)  # type: ignore[arg-type]
        register_torch_op([user_fn], Mine)  # (a notebook cell run twice)
        with pytest.raises(ValueError, match="replace=True"):
            decomposes(Mine)(lambda d, x: x)  # type: ignore[arg-type]
        decomposes(Mine, replace=True)(rule)  # type: ignore[arg-type]
        assert DECOMPOSITIONS[Mine] is rule and VJP_RULES[Mine] is rule  # type: ignore[index]
        assert Mine in DECOMPOSITIONS.additions() and user_fn in HANDLERS.additions()
    assert [dict(t) for t in TABLES] == before
    assert [t.additions() for t in TABLES] == added_before


def test_the_symbol_table_is_a_field_of_the_compilation_context() -> None:
    """A symbolic compilation's sizes belong to its `CompileContext` (``symbols``): the
    table is current only while `compiling(ctx)` is open in that thread, never in another
    thread, and a jitted callable's own context holds none after symbolic compiles."""
    import threading

    from thunder_ir.dialects import symbols
    from thunder_ir.passes.context import compiling

    base = compile_context()
    ctx = base.with_symbols()
    assert base.symbols is None and ctx.symbols is not None
    assert ctx.executors == base.executors and base.with_symbols().symbols is not ctx.symbols
    seen: list[Any] = []
    inside, checked = threading.Event(), threading.Event()

    def other() -> None:
        assert inside.wait(30)
        seen.append(symbols.current())
        checked.set()

    t = threading.Thread(target=other)
    t.start()
    with compiling(ctx):
        assert symbols.current() is ctx.symbols
        inside.set()
        assert checked.wait(30)
    t.join(30)
    assert seen == [None] and symbols.current() is None

    jm = thunder_ir.jit(lambda x: x.sum(0) * 2)
    for n in (3, 5, 7):
        x = torch.randn(n, 4)
        torch.testing.assert_close(jm(x), x.sum(0) * 2)
    assert jm.compiler.ctx.symbols is None and symbols.current() is None
    assert "s0" in str(thunder_ir.last_traces(jm)[0])  # (the symbolic program was made)


def test_a_route_for_one_compile_is_not_seen_by_a_concurrent_one() -> None:
    """A compilation's own routes (`CompileContext.handlers`) route its trace's torch calls
    ahead of the built-in routes, for that compilation alone: a compile in another thread
    while that compilation is open traces with the built-in routes, which stay as they
    were. (Traces take turns, `thunder_ir.lowering.tiered.TRACING`; the routes are the
    compilation's, not the process's, whichever runs first.)"""
    import threading
    from dataclasses import replace

    import thunder_ir.frontend.tracer  # (every handler module)
    from thunder_ir.frontend.table import HANDLERS
    from thunder_ir.passes.context import compiling

    before = dict(HANDLERS)
    cos = HANDLERS[torch.cos]

    def sin_as_cos(builder: Any, *args: Any, **kwargs: Any) -> Any:
        return cos(builder, *args, **kwargs)

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) + 1

    own, plain = thunder_ir.jit(f), thunder_ir.jit(f)
    own.compiler.ctx = replace(own.compiler.ctx, handlers={torch.sin: sin_as_cos})
    x = torch.linspace(-2, 2, 7)
    out: dict[str, torch.Tensor] = {}
    errors: list[BaseException] = []

    def call(name: str, jf: Any) -> None:
        try:
            out[name] = jf(x)
        except BaseException as e:  # (reported by the main thread)
            errors.append(e)

    with compiling(own.compiler.ctx):  # (open in this thread while the other compiles)
        other = threading.Thread(target=call, args=("plain", plain))
        other.start()
        other.join(120)
        call("own", own)
    assert not errors, errors
    torch.testing.assert_close(out["own"], torch.cos(x) + 1)
    torch.testing.assert_close(out["plain"], torch.sin(x) + 1)
    assert "cos" in str(thunder_ir.last_traces(own)[0])
    assert dict(HANDLERS) == before
