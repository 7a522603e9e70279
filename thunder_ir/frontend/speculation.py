"""Speculation on data-dependent conditions.

``if labels.max() >= vocab: raise ...``, ``if torch.any(var < 0): ...``,
``torch.equal(mask, causal)``: Python asks for a traced tensor's value, which a trace does
not have. Rather than refuse the model, tracing asks what the value is *for this call*:
the ops the condition depends on are run on the call's real tensors (their reference
implementations, op by op: `concrete`), the trace goes on down the branch eager takes, and
the program checks the condition on every call (``tir.assume(cond, expected,
"file:line")``, a `torch.call` that nothing removes or reorders). A later call where the
condition comes out otherwise stops the program before anything it did is visible
(`thunder_ir.runtime.speculation.SpeculationFailed`): the jitted callable then traces that
call again, which takes the other branch (raising the user's own error where that branch
raises), and keeps the program as a variant tried next time; past `MAX_VARIANTS` it runs
such calls eagerly.

Speculated: ``bool(t)`` (``if t:``, ``and``/``or``/``not``), ``torch.is_nonzero``,
``t.item()`` of a boolean tensor, ``torch.equal`` and ``torch.allclose``; and the sizes
of ops whose result is as long as a count of their input's values (``masked_select``,
``nonzero``, ``argwhere``: CTC losses flatten their targets so; ``x[mask]`` with a
boolean mask over leading dims), the count checked.
In a compilation with a symbol table those sizes are unbacked symbols instead
(`thunder_ir.frontend.unbacked`), and so is ``.item()`` of an integer (its sign
speculated; its value where sizes are speculated) and of a float (an unbacked
``SymFloat``: returned, it is each call's number; Python arithmetic on it is computed in
the program, `thunder_ir.frontend.python_floats`; a decision on it is speculated);
these routes speculate the count only where that compile failed. ``int(t)`` of an integer
tensor is speculated as ``int(t.item())`` is, ``float(t)`` too, unless stored on a
module at once, and ``.tolist()`` gives ``.item()`` numbers
(`thunder_ir.frontend.value_reads`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects import symbols
from thunder_ir.dialects.base import OperandRef
from thunder_ir.dialects.torch import CallOp, make_call, runtime_callee
from thunder_ir.dialects.types import canonical_device, tensor_type
from thunder_ir.frontend import torch_map, unbacked
from thunder_ir.frontend.errors import (
    DATA_HINT,
    DataDependentError,
    NeedsSymbols,
    UseFallback,
    speculating_sizes,
    where,
)
from thunder_ir.frontend.fallback import fallback
from thunder_ir.frontend.number_tensors import INTEGER, number_value
from thunder_ir.frontend.proxy import TensorProxy, is_proxy
from thunder_ir.frontend.table import register_handlers
from thunder_ir.runtime.interpreter import run_op

if TYPE_CHECKING:
    from thunder_ir.frontend.context import TraceContext

MAX_VARIANTS = 4
"""Programs one cache entry may hold for differing speculated conditions; past that, calls
whose conditions match none run eagerly."""

ASSUME = runtime_callee("assume")
_PRINT = runtime_callee("print_values")  # (`thunder_ir.frontend.printing`: no draw)

_T = torch.Tensor


def concrete(ctx: TraceContext, v: SSAValue) -> Any:
    """The value ``v`` has on this call: the ops it depends on, run on the call's real
    tensors (each op's reference implementation), under no-grad, with the random generators
    put back afterwards.

    A value that depends on a random draw (LayerDrop's ``torch.rand([]) < p``) must see the
    draw the program will make: the generator as the draws before it in program order left
    it. So every op with effects before the last such draw runs too, in program order, each
    draw from the generator state the previous one left (`TraceContext.concrete_rng`,
    starting from the call's); the program then checks on every call what it drew."""
    env = ctx.build.concrete
    if v in env:
        return env[v]
    block = ctx.build.program.block
    needed = _slice(ctx, v, set())
    order = list(block.ops)
    if any(map(_draws, needed)):  # (the program scanned for earlier draws only then)
        draws = [i for i, op in enumerate(order) if _draws(op)]
        last = max(i for i in draws if order[i] in needed)
        for i in draws:
            if i < last and order[i].results and order[i].results[0] not in env:
                _slice(ctx, order[i].results[0], needed)
    ops = [op for op in order if op in needed]
    sizes = _CallSymbols(env, ctx) if symbols.current() is not None else None
    saved = _rng_get()
    try:
        with torch.no_grad():
            for op in ops:
                if _draws(op):
                    if ctx.build.concrete_rng is not None:
                        _rng_set(ctx.build.concrete_rng)
                    _run([op], env, sizes)
                    ctx.build.concrete_rng = _rng_get()
                    _rng_set(saved)
                else:
                    _run([op], env, sizes)
    except DataDependentError:
        raise
    except Exception as e:
        if _torchs_own_error(e):  # (eager fails there too, as the program would)
            raise
        raise _cannot(ctx, f"computing it on this call's tensors failed ({e})") from None
    finally:
        _rng_set(saved)
    return env[v]


def _torchs_own_error(e: Exception) -> bool:
    """Whether an op run on the call's real tensors failed with torch's (or Python's) own
    error, the error eager raises at that op (a float64 input to a float32 ``nn.Linear``:
    ``mat1 and mat2 must have the same dtype``), rather than with thunder_ir's (a trace or
    symbolic error, an op the interpreter cannot run: NotImplementedError)."""
    root = type(e).__module__.partition(".")[0]
    return root in ("builtins", "torch") and not isinstance(
        e, NotImplementedError | AssertionError | KeyError | AttributeError)


def _slice(ctx: TraceContext, v: SSAValue, needed: set[Operation]) -> set[Operation]:
    """Adds to ``needed`` the ops of the program's block that ``v`` depends on (those not
    computed yet)."""
    env = ctx.build.concrete
    stack = [v]
    while stack:
        x = stack.pop()
        if x in env:
            continue
        op = x.owner
        if not isinstance(op, Operation) or op.parent_block() is not ctx.build.program.block:
            raise _cannot(ctx, "it is computed where its value cannot be known")
        if op not in needed:
            needed.add(op)
            stack.extend(op.operands)
    return needed


def _draws(op: Operation) -> bool:
    """Whether ``op`` has effects (a random draw, possibly) other than a check."""
    from xdsl.traits import is_side_effect_free

    return not is_side_effect_free(op) and not (
        isinstance(op, CallOp) and op.callee.data in (ASSUME, _PRINT))


def _rng_get() -> tuple[Any, ...]:
    """The CPU generator's state and, where CUDA is initialized, each device's."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.random.get_rng_state(), cuda


def _rng_set(state: tuple[Any, ...]) -> None:
    torch.random.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


class _CallSymbols(Mapping[str, int]):
    """The values this call gives a symbolic compile's symbols, for ops whose static
    arguments hold them (``view(x, [s0, s1, -1, 8])``): a backed size's from the symbol
    table (the call's sizes), an unbacked one's (``u0``) from the first value computed so
    far that has it (a result with a dimension of exactly that size, or the number an
    ``.item()`` marked with it returned), as the generated code binds them."""

    def __init__(self, env: dict[SSAValue, Any], ctx: TraceContext) -> None:
        self.env = env
        self.ctx = ctx
        table = symbols.current()
        assert table is not None
        self.known: dict[str, Any] = table.hints()

    def __getitem__(self, name: str) -> int:
        if name not in self.known:
            self._learn(name)
        return self.known[name]

    def _learn(self, name: str) -> None:
        from xdsl.dialects.builtin import StringAttr

        from thunder_ir.dialects.types import TensorType

        for v, real in self.env.items():
            op = v.owner
            named = op.attributes.get(symbols.UNBACKED_RESULT) \
                if isinstance(op, Operation) else None
            if isinstance(named, StringAttr) and named.data == name:
                self.known[name] = real if type(real) is float else int(real)
                return
            if isinstance(v.type, TensorType) and v.type.symbolic \
                    and isinstance(real, torch.Tensor):
                dims = v.type.dims_text
                if name in dims:
                    self.known[name] = int(real.shape[dims.index(name)])
                    return
        for op in self.ctx.build.program.block.ops:  # (an .item() nothing computed yet:
            named = op.attributes.get(symbols.UNBACKED_RESULT)  # a number operand's text)
            if isinstance(named, StringAttr) and named.data == name:
                real = concrete(self.ctx, op.results[0])
                self.known[name] = real if type(real) is float else int(real)
                return
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.known)

    def __len__(self) -> int:
        return len(self.known)


def _run(ops: list[Operation], env: dict[SSAValue, Any],
         sizes: Mapping[str, int] | None = None) -> None:
    """Runs ``ops`` (in program order) with the reference interpreter, into ``env``;
    ``sizes``: the call's values of the symbols their static arguments hold (in a
    symbolic compile: the ops run with no table current, so that their static arguments
    read as the text ``sizes`` evaluates rather than as the trace's ``SymInt``)."""
    for op in ops:
        if sizes is None:
            outs = run_op(op, [env[o] for o in op.operands])
        else:
            with symbols.detached():
                outs = run_op(op, [env[o] for o in op.operands], sizes)
        env.update(zip(op.results, outs, strict=True))


def _cannot(ctx: TraceContext, why: str) -> DataDependentError:
    return DataDependentError(f"{where(ctx.loc)}: a condition on a traced tensor's value "
                              f"cannot be speculated: {why}; {DATA_HINT}")


def speculate(ctx: TraceContext, p: TensorProxy) -> bool:
    """``bool(p)`` for this call, checked by the program on every call."""
    if ctx.build.in_region():
        raise DataDependentError(f"{where(ctx.loc)}: bool(tensor) inside a custom backward "
                                 f"needs a traced tensor's value, but {DATA_HINT}")
    n = p.numel()
    if n != 1:
        what = "no values" if n == 0 else "more than one value"
        raise RuntimeError(f"Boolean value of Tensor with {what} is ambiguous\n"
                           f"  at {where(ctx.loc)}")
    result = bool(concrete(ctx, p._value))
    op = make_call(ASSUME, [p._value], [OperandRef(0), result, where(ctx.loc)],
                   result_types=[])
    ctx.record(op)
    ctx.build.speculative = True
    return result


def may_draw(module: Any) -> bool:
    """Whether a traced program has an op with effects besides its checks and prints (a
    random draw among them, possibly)."""
    from xdsl.traits import is_side_effect_free

    from thunder_ir.dialects.program import main_function

    for op in main_function(module).body.block.ops:
        if isinstance(op, CallOp) and op.callee.data in (ASSUME, _PRINT):
            continue
        if not is_side_effect_free(op) and op.name != "func.return":
            return True
    return False


# --------------------------------------------------------------------------- handlers


def _bool(ctx: TraceContext, self: Any) -> bool:
    return speculate(ctx, self)


def _item(ctx: TraceContext, self: Any) -> Any:
    """``t.item()``: of an integer, an unbacked symbol (a size, a slice bound; its sign
    speculated), or, with sizes speculated, its value checked on every call; of a float,
    an unbacked ``SymFloat`` (a returned ``loss.item()`` is each call's number); of a bool,
    speculated (a condition)."""
    if self.dtype is torch.bool:
        return speculate(ctx, self)
    if unbacked_item(self):
        if unbacked_sizes(ctx, ".item()"):
            nonnegative = speculate(ctx, ctx.run_python(lambda t: t >= 0, (self,), {}))
            return unbacked.item(ctx, self, nonnegative)
        return speculate_count(ctx, self)
    if self.dtype.is_floating_point and self.numel() == 1 and unbacked_sizes(ctx, ".item()"):
        return unbacked.item_float(ctx, self)
    raise DataDependentError(f"{where(ctx.loc)}: .item() needs a traced tensor's value, "
                             f"but {DATA_HINT}")


item_of = _item
"""``t.item()`` as user code's call of it traces (for handlers that read indices)."""


def _format(ctx: TraceContext, self: Any, spec: str = "") -> str:
    """``format(t, spec)`` (an f-string's ``{t}``): eager formats a 0-d tensor as its
    ``.item()`` (Switch Transformers picks an expert module by name,
    ``self[f"expert_{expert_idx[0]}"]``). An integer or bool tensor's value here: a
    number known while tracing (`number_value`) as it is; else its value on this call,
    speculated (``tir.assume(t == v)``: a call where it differs compiles a variant, as a
    condition does). A float's text, or a tensor of several values, would fix the
    program to values that rarely hold again: refused, naming the line."""
    if self.ndim != 0 or self.dtype not in (*INTEGER, torch.bool):
        raise DataDependentError(
            f"{where(ctx.loc)}: formatting a tensor as text (an f-string, format(), of a "
            f"{self.dtype} tensor of shape {tuple(self.shape)}) reads its values, but "
            f"{DATA_HINT}")
    n = number_value(self._value)
    if type(n) is int:
        return format(n, spec)
    value = concrete(ctx, self._value).item()
    speculate(ctx, ctx.run_python(lambda t: t == value, (self,), {}))
    return format(value, spec)


def unbacked_sizes(ctx: TraceContext, what: str) -> bool:
    """Whether an op whose result's size is a count of its input's values gets that size
    as a new unbacked symbol (torch's fake kernel makes it: a symbol table is current);
    False: the count is speculated (a compile after the symbolic one failed, or inside a
    custom backward).

    Raises:
        NeedsSymbols: no table, and sizes are not speculated: the compiler traces again
            with one.
    """
    if ctx.build.in_region():
        return False
    if symbols.current() is not None:
        return True
    if speculating_sizes():
        return False
    raise NeedsSymbols(f"{where(ctx.loc)}: {what} has a data-dependent size")


def decide(env: Any, expr: Any) -> Any:
    """A decision user code makes on unbacked symbols (``len(x[mask])``, ``if
    rows.shape[0] > 2``, ``int(n)`` of an ``.item()``): control flow on values, so
    speculated: its value this call (the symbols' tensors computed on the call's real
    ones), checked by the program on every call (``tir.assume``), and told to the
    ``ShapeEnv`` as a fact (a count fixed to 4 is 4 from then on). The expression may
    mix the call's sizes in (``mask.sum().item() < b * s``: ``u0 < s0*s1``): the check
    computes them from each call's sizes (`_backed`). None (torch raises its
    ``GuardOnDataDependentSymNode``) outside a trace, inside a custom backward or a meta
    run, or for a symbol this trace did not make."""
    import sympy
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._sympy.printers import PythonPrinter

    from thunder_ir.frontend.context import current, tracing_now

    if not tracing_now():
        return None
    ctx = current()
    if ctx.build.in_region():
        return None
    names = sorted(str(s) for s in expr.free_symbols if ("of", str(s)) in ctx.build.counts)
    sizes = _backed(expr, names)
    if not names or sizes is None:
        return None
    with unset_fake_temporarily(), _modes_aside():
        # (asked from a meta run: unbind's count of results; from user code: the tracer's
        # mode is on, and the call's values are computed outside it, not traced)
        tensors = [unbacked.symbol_tensor(ctx, n) for n in names]
        fn = unbacked.value_function(PythonPrinter().doprint(expr), [*names, *sizes])
        value = ctx.run_python(
            lambda *ts: fn({**sizes, **dict(zip(names, ts, strict=True))}), tensors, {})
        if not is_proxy(value):  # (Python's max/min over the tensors decided already)
            return sympy.sympify(value)
        if isinstance(expr, sympy.Rel | sympy.logic.boolalg.BooleanFunction):
            holds = speculate(ctx, value)
            fact = expr if holds else expr.negated if isinstance(expr, sympy.Rel) else None
            if fact is not None:
                _fact(lambda: env.guard_or_defer_runtime_assert(fact, "speculated"))
            return sympy.true if holds else sympy.false
        with torch._C.DisableTorchFunction():  # (a real tensor, read in user code)
            real = concrete(ctx, value._value)
        if expr.is_integer is not True:  # a float's value (an .item() of a float)
            f = float(real)
            speculate(ctx, ctx.run_python(lambda t: t == f if f == f else t != t, (value,),
                                          {}))
            return sympy.Float(f)
        n = int(real)
        speculate(ctx, ctx.run_python(lambda t: t == n, (value,), {}))
    if isinstance(expr, sympy.Symbol):  # the symbol is n from now on
        _fact(lambda: env.constrain_symbol_range(expr, n, n))
    return sympy.Integer(n)


@contextlib.contextmanager
def _modes_aside() -> Iterator[None]:
    """No torch function mode is on while open (the tracer's among them, as while one of
    its handlers runs): ``run_python`` traces under a mode of its own, and `concrete`
    runs the call's tensors, not traced."""
    stash = []
    while torch._C._len_torch_function_stack() > 0:
        stash.append(torch._C._pop_torch_function_stack())
    try:
        yield
    finally:
        for m in reversed(stash):
            torch._C._push_on_torch_function_stack(m)


def _backed(expr: Any, unbacked_names: list[str]) -> dict[str, Any] | None:
    """The ``SymInt`` of each backed symbol of ``expr`` (a decision mixing an ``.item()``
    with the call's sizes: ``u0 < s0*s3``), by name: the check computes them from the
    call's sizes, as any symbolic argument of an op; None if ``expr`` has a symbol that
    is neither this trace's unbacked one nor a size of the compilation's table."""
    table = symbols.current()
    out: dict[str, Any] = {}
    for s in expr.free_symbols:
        name = str(s)
        if name in unbacked_names:
            continue
        if table is None or name not in table.sources:
            return None
        out[name] = table.value(name)
    return out


def _fact(tell: Callable[[], Any]) -> None:
    """Tells the ``ShapeEnv`` what a speculated decision found, where it takes it (a later
    decision on the same expression is speculated again otherwise, to the same value)."""
    with contextlib.suppress(Exception):  # (torch's canonicalization takes some forms only)
        tell()


def unbacked_item(t: Any) -> bool:
    """Whether ``t.item()`` can be an unbacked ``SymInt``: one element of an integer
    dtype."""
    return not (t.dtype.is_floating_point or t.dtype.is_complex) and t.numel() == 1


def speculate_count(ctx: TraceContext, count: TensorProxy) -> int:
    """The value of ``count`` (a one-element integer tensor: how many elements a
    data-dependent op selects) for this call, checked by the program on every call."""
    if ctx.build.in_region():
        raise DataDependentError(f"{where(ctx.loc)}: an op sized by a traced tensor's values "
                                 f"inside a custom backward, but {DATA_HINT}")
    n = int(concrete(ctx, count._value))
    speculate(ctx, ctx.run_python(lambda c: c == n, (count,), {}))
    return n


def _sized_by_values(name: str, count: Callable[..., Any],
                     shape: Callable[[Any, int], tuple[int, ...]],
                     dtype: Callable[[Any], torch.dtype]) -> Callable[..., Any]:
    """A handler for an op whose result's size is a count of its input's values
    (``masked_select``, ``nonzero``): the count is speculated, the op itself runs as an
    opaque torch call of that result type (differentiated by torch)."""

    def handler(ctx: TraceContext, *args: Any, **kwargs: Any) -> Any:
        if unbacked_sizes(ctx, name):  # the count: an unbacked symbol
            return _unbacked_call(ctx, name, args, kwargs)
        if kwargs or not all(is_proxy(a) or not isinstance(a, torch.Tensor) for a in args):
            raise UseFallback
        n = speculate_count(ctx, ctx.run_python(count, args, {}))
        first = args[0]
        t = tensor_type(shape(args, n), dtype(args), canonical_device(first.device))
        return fallback(ctx, _FUNCS[name], args, kwargs, result_type=t)

    return handler


def _unbacked_call(ctx: TraceContext, name: str, args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> Any:
    """``nonzero``/``argwhere``/``masked_select`` sized by an unbacked count
    (`thunder_ir.frontend.unbacked`); forms it does not model (``out=``, a 0-d input) are
    the opaque call, typed by torch's fake kernel (an unbacked size of its own)."""
    first: Any = args[0] if args else None
    if is_proxy(first) and first.ndim > 0:
        if name == "masked_select" and len(args) == 2 and not kwargs and is_proxy(args[1]) \
                and args[1].dtype is torch.bool:
            return unbacked.masked_select(ctx, first, args[1])
        if name in ("nonzero", "argwhere") and len(args) == 1 and set(kwargs) <= {"as_tuple"}:
            if kwargs.get("as_tuple"):
                return unbacked.nonzero_tuple(ctx, first)
            return unbacked.nonzero(ctx, first)
    return fallback(ctx, _FUNCS[name], args, kwargs)


def _select_count(x: Any, mask: Any) -> Any:
    shape = torch.broadcast_shapes(x.shape, mask.shape)
    return mask.expand(shape).sum()


_FUNCS: dict[str, Any] = {"masked_select": torch.masked_select, "nonzero": torch.nonzero,
                          "argwhere": torch.argwhere}


_GETITEM = torch_map.getitem


def _getitem(ctx: TraceContext, x: Any, index: Any) -> Any:
    """``x[mask]`` with a boolean mask over ``x``'s leading dims (``logits[labels !=
    -100]``): as many rows as the mask has true values, a count speculated and checked;
    the indexing itself an opaque torch call (torch's gradient). Other indices are the
    native handler's."""
    mask = index[0] if type(index) is tuple and len(index) == 1 else index
    if is_proxy(x) and _int_scalar(mask):  # x[t], a 0-d integer tensor: eager's view of
        # row t, t's value speculated (checked on every call; a copy by index_select
        # would not see a write through the row, nor the row one through x)
        return _GETITEM(ctx, x, speculate_count(ctx, mask))
    if is_proxy(x) and any(isinstance(i, slice) and any(map(_int_scalar, (i.start, i.stop)))
                           for i in (index if type(index) is tuple else (index,))):
        index = _tensor_bounds(ctx, index)  # x[:t]: the bound t.item(), an unbacked symbol
    if not (is_proxy(mask) and mask.dtype in (torch.bool, torch.uint8) and is_proxy(x)
            and 0 < mask.ndim <= x.ndim and tuple(mask.shape) == tuple(x.shape[:mask.ndim])):
        return _GETITEM(ctx, x, index)
    if unbacked_sizes(ctx, "x[mask]"):
        return unbacked.mask_index(ctx, x, mask)
    n = speculate_count(ctx, ctx.run_python(lambda m: m.sum(), (mask,), {}))
    t = tensor_type((n, *x.shape[mask.ndim:]), x.dtype, canonical_device(x.device))
    return fallback(ctx, _T.__getitem__, (x, index), {}, result_type=t)


def _int_scalar(t: Any) -> bool:
    """A traced 0-d integer tensor (an index eager reads as a number; a ``uint8`` one is
    a mask to eager, as a ``bool`` one)."""
    return (is_proxy(t) and t.ndim == 0 and not t.dtype.is_floating_point
            and not t.dtype.is_complex and t.dtype not in (torch.bool, torch.uint8))


def _tensor_bounds(ctx: TraceContext, index: Any) -> Any:
    """``index`` with each slice bound that is a 0-d integer tensor replaced by its
    ``.item()`` (an unbacked symbol in a compilation with a symbol table)."""
    def bound(b: Any) -> Any:
        return _item(ctx, b) if _int_scalar(b) else b

    def fix(i: Any) -> Any:
        return slice(bound(i.start), bound(i.stop), bound(i.step)) \
            if isinstance(i, slice) else i

    return tuple(map(fix, index)) if type(index) is tuple else fix(index)


def _equal(ctx: TraceContext, a: Any, b: Any) -> bool:
    """``torch.equal``: same shape and equal elements (after type promotion, as eager)."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    return speculate(ctx, ctx.run_python(lambda x, y: (x == y).all(), (a, b), {}))


def _allclose(ctx: TraceContext, a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-8,
              equal_nan: bool = False) -> bool:
    if is_proxy(a) and is_proxy(b) and a.dtype != b.dtype:
        raise RuntimeError(f"{_dtype(a)} did not match {_dtype(b)}\n  at {where(ctx.loc)}")
    close = ctx.run_python(lambda x, y: torch.isclose(x, y, rtol, atol, equal_nan).all(),
                           (a, b), {})
    return speculate(ctx, close)


def _dtype(t: Any) -> str:
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
            torch.bfloat16: "BFloat16"}.get(t.dtype, str(t.dtype).rsplit(".", 1)[-1])


_masked_select = _sized_by_values(
    "masked_select", _select_count, lambda args, n: (n,), lambda args: args[0].dtype)
_nonzero = _sized_by_values(
    "nonzero", lambda x: (x != 0).sum(), lambda args, n: (n, args[0].dim()),
    lambda args: torch.int64)
_argwhere = _sized_by_values(
    "argwhere", lambda x: (x != 0).sum(), lambda args, n: (n, args[0].dim()),
    lambda args: torch.int64)

def _opaque_unbacked(what: str, func: Any) -> Callable[..., Any]:
    """A handler for an op whose result's size depends on values and whose fake kernel
    makes that size an unbacked symbol (``torch.unique``): the opaque call, typed by that
    kernel under the compilation's table (`NeedsSymbols` without one)."""

    def handler(ctx: TraceContext, *args: Any, **kwargs: Any) -> Any:
        if not unbacked_sizes(ctx, what):
            raise DataDependentError(f"{where(ctx.loc)}: {what} needs a traced tensor's "
                                     f"value, but {DATA_HINT}")
        return fallback(ctx, func, args, kwargs)

    return handler


register_handlers([torch.unique, _T.unique], _opaque_unbacked("torch.unique", torch.unique))
register_handlers([torch.unique_consecutive, _T.unique_consecutive],
                  _opaque_unbacked("torch.unique_consecutive", torch.unique_consecutive))
register_handlers([_T.__bool__], _bool)
register_handlers([_T.__format__], _format)
register_handlers([_T.__getitem__], _getitem)
register_handlers([torch.masked_select], _masked_select)
register_handlers([_T.masked_select], _masked_select)
register_handlers([torch.nonzero], _nonzero)
register_handlers([_T.nonzero], _nonzero)
register_handlers([torch.argwhere], _argwhere)
register_handlers([_T.argwhere], _argwhere)
register_handlers([torch.is_nonzero], _bool)
register_handlers([_T.item], _item)
register_handlers([_T.equal], _equal)
register_handlers([torch.equal], _equal)
register_handlers([_T.allclose], _allclose)
register_handlers([torch.allclose], _allclose)

__all__ = ["MAX_VARIANTS", "concrete", "item_of", "may_draw", "speculate", "speculate_count",
           "unbacked_item", "unbacked_sizes"]
