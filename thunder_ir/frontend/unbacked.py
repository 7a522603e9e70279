"""Data-dependent sizes as unbacked symbols.

``torch.nonzero(mask)``, one-argument ``torch.where(mask)``, ``x[mask]`` with a boolean
mask and ``torch.masked_select`` return as many elements as the mask has true values. In
a compilation with a symbol table (`thunder_ir.dialects.symbols.SymbolTable`) that count is
a new *unbacked* symbol (``u0``), made by torch's own
``ShapeEnv.create_unbacked_symint`` with the facts torch's fake ``nonzero`` states
(``0 <= u0 <= numel``, a size). Every later op types its result with it, as with any
symbol; the generated code needs no value for it, since the real ``nonzero`` result simply
has that many rows (a function that computes with ``u0`` in a static argument binds it
from the first result that has it, `thunder_ir.runtime.python_printer`).

One count per mask: the count of a traced mask value is made once (`count`), so
``logits[keep]`` and ``labels[keep]`` have the same length ``u0`` and a loss of the two
type-checks without a guard on data. Each op is emitted on its own (a user's in-place write
to one result never reaches another), typed with that count:

- ``nonzero(mask)``: the opaque ``torch.nonzero`` call, eager's column-major layout
  (strides ``(1, u0)``), no gradient;
- ``torch.where(mask)`` / ``nonzero(mask, as_tuple=True)``: that result's ``unbind(1)``;
- ``x[mask]`` (a mask over ``x``'s leading dims): the flat indices of the true elements
  (``nonzero`` of the flattened mask, the same count) taking rows of ``x`` flattened over
  the mask's dims (``index_select``, so the gradient is ``index_add`` into zeros, in the
  program and over the same symbol);
- ``masked_select(x, mask)``: the same over both broadcast and flattened.

``t.item()`` of an integer tensor is such a symbol too (`item`): the program computes it
and binds the symbol to its result; of a float tensor, an unbacked ``SymFloat``
(`item_float`). A size another op reads from values (``bincount``'s length, ``one_hot``'s
``max + 1``) is `value_size`. A number user code returns that holds such symbols
(``return loss.item()``) is computed on each call from 0-d outputs of the program
(`returned_number`), a Python number as eager's.

Without a table a trace that meets such an op raises `NeedsSymbols` (the compiler traces
again with one); where the unbacked compile fails, the counts are speculated instead
(`thunder_ir.frontend.speculation`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from xdsl.dialects.builtin import StringAttr

from thunder_ir.dialects import symbols
from thunder_ir.dialects.base import OperandRef
from thunder_ir.dialects.torch import make_call, torch_name
from thunder_ir.dialects.types import canonical_device, number_type, tensor_type
from thunder_ir.frontend.proxy import TensorProxy

if TYPE_CHECKING:
    from thunder_ir.frontend.context import TraceContext


def new_size(numel: Any) -> Any:
    """A new unbacked ``SymInt`` of the current symbol table: a count of at most ``numel``
    elements (torch's ``create_unbacked_symint``, constrained as torch's fake
    ``nonzero`` constrains it); 0 where ``numel`` is 0."""
    table = symbols.current()
    assert table is not None, "an unbacked size needs a symbol table"
    if type(numel) is int and numel == 0:
        return 0
    from torch.fx.experimental.symbolic_shapes import _constrain_range_for_size
    from torch.utils._sympy.numbers import IntInfinity
    from torch.utils._sympy.value_ranges import bound_sympy

    n = table.env.create_unbacked_symint()
    if isinstance(numel, torch.SymInt):
        upper = bound_sympy(numel.node.expr, table.env.var_to_range).upper
        top = sys.maxsize - 1 if isinstance(upper, IntInfinity) else int(upper)
    else:
        top = int(numel)
    _constrain_range_for_size(n, max=top)
    return n


def count(ctx: TraceContext, mask: TensorProxy) -> Any:
    """How many elements of ``mask`` are nonzero: an unbacked size, one per traced value."""
    v = ctx.value_of(mask)
    counts = ctx.build.counts
    n = counts.get(v)
    if n is None:
        n = counts[v] = new_size(mask.numel())
        if isinstance(n, torch.SymInt):  # (what a decision on it computes: the count)
            counts[("of", str(n.node.expr))] = ("count", mask)
    return n


def nonzero(ctx: TraceContext, mask: TensorProxy, n: Any = None) -> TensorProxy:
    """``torch.nonzero(mask)``, ``n`` (default: `count`) rows of ``mask.dim()`` indices,
    laid out as eager's (column-major)."""
    if n is None:
        n = count(ctx, mask)
    v = ctx.value_of(mask)
    t = tensor_type((n, mask.dim()), torch.int64, canonical_device(mask.device))
    op = make_call(torch_name(torch.nonzero), [v], [OperandRef(0)], {}, result_types=[t])
    r = ctx.record(op)[0]
    return ctx.wrap(r, layout=((1, n), 0))


def nonzero_tuple(ctx: TraceContext, mask: TensorProxy) -> tuple[Any, ...]:
    """``torch.where(mask)`` (``nonzero(mask, as_tuple=True)``): one index tensor per dim."""
    nz = nonzero(ctx, mask)
    return tuple(ctx.run_python(lambda t: t.unbind(1), (nz,), {}))


def _flat_indices(ctx: TraceContext, mask: TensorProxy, n: Any) -> TensorProxy:
    """The flat positions of ``mask``'s nonzero elements (``n`` of them), in order."""
    flat = ctx.run_python(lambda m: m.reshape(-1), (mask,), {})
    return ctx.run_python(lambda t: t.squeeze(1), (nonzero(ctx, flat, n),), {})


def mask_index(ctx: TraceContext, x: TensorProxy, mask: TensorProxy) -> TensorProxy:
    """``x[mask]`` with a mask over ``x``'s leading dims: the rows where it holds."""
    k = mask.dim()
    rest = tuple(x.shape[k:])
    idx = _flat_indices(ctx, mask, count(ctx, mask))
    return ctx.run_python(lambda t, i: t.reshape(-1, *rest).index_select(0, i), (x, idx), {})


def masked_select(ctx: TraceContext, x: Any, mask: TensorProxy) -> TensorProxy:
    """``torch.masked_select(x, mask)``: both broadcast, the elements where ``mask``
    holds, flattened."""
    shape = torch.broadcast_shapes(tuple(x.shape), tuple(mask.shape))
    if tuple(mask.shape) != tuple(shape):
        mask = ctx.run_python(lambda m: m.expand(shape), (mask,), {})
    idx = _flat_indices(ctx, mask, count(ctx, mask))
    same = tuple(x.shape) == tuple(shape)
    return ctx.run_python(
        lambda t, i: (t if same else t.expand(shape)).reshape(-1).index_select(0, i),
        (x, idx), {})


def item(ctx: TraceContext, t: TensorProxy, nonnegative: bool | None) -> Any:
    """``t.item()`` of a one-element integer tensor: a new unbacked ``SymInt`` (``u0``),
    a size if ``nonnegative`` (the caller checks the sign on every call), known negative
    if False, with no fact on its sign if None; the program computes it
    (``torch.Tensor.item``, whose number result the generated code binds the symbol to:
    `symbols.UNBACKED_RESULT`)."""
    from torch.fx.experimental.symbolic_shapes import _constrain_range_for_size

    table = symbols.current()
    assert table is not None, "an unbacked number needs a symbol table"
    n = table.env.create_unbacked_symint()
    if nonnegative:
        _constrain_range_for_size(n)
    elif nonnegative is not None:
        torch._check(n < 0)
    name = table.text(n)
    ctx.build.counts[("of", str(name))] = ("item", t)
    op = make_call(torch_name(torch.Tensor.item), [ctx.value_of(t)], [OperandRef(0)], {},
                   result_types=[number_type(int)])
    op.attributes[symbols.UNBACKED_RESULT] = StringAttr(str(name))
    ctx.record(op)
    return n


def value_size(ctx: TraceContext, compute: Callable[[], TensorProxy], least: int = 0) -> Any:
    """A new unbacked size (``u0``) that a traced value gives (``bincount``'s length, the
    ``max + 1`` of ``one_hot(x)``), at least ``least`` (the fact torch's fake kernel
    states); ``compute()`` traces that value as a 0-d integer tensor, only where a decision
    on the size needs it (`symbol_tensor`). The op typed with it binds it at run time
    from its real result."""
    from torch.fx.experimental.symbolic_shapes import _constrain_range_for_size

    table = symbols.current()
    assert table is not None, "an unbacked size needs a symbol table"
    n = table.env.create_unbacked_symint()
    _constrain_range_for_size(n, min=least)
    ctx.build.counts[("of", str(table.text(n)))] = ("value", compute)
    return n


def symbol_tensor(ctx: TraceContext, name: str) -> TensorProxy | None:
    """A 0-d traced tensor holding unbacked symbol ``name``'s value (a mask's count, the
    tensor an ``.item()`` read), for a check of a decision on it; None for a symbol this
    trace did not make."""
    made = ctx.build.counts.get(("of", name))
    if made is None:
        return None
    kind, src = made
    if kind == "value":
        return src()
    if kind == "count":
        return ctx.run_python(lambda m: (m != 0).sum(), (src,), {})
    if kind == "number":  # Python arithmetic on a float .item() (`python_floats`)
        return number_tensor(ctx, src)
    if src.dtype.is_floating_point:  # (a float's decisions in double, as Python's)
        return ctx.run_python(lambda t: t.reshape(()).to(torch.float64), (src,), {})
    return ctx.run_python(lambda t: t.reshape(()), (src,), {})


def number_tensor(ctx: TraceContext, v: Any) -> TensorProxy:
    """A 0-d float64 tensor holding program number ``v`` (a Python float: exactly), for a
    check or an output computed from it."""
    op = make_call(torch_name(torch.scalar_tensor), [v], [OperandRef(0)],
                   {"dtype": torch.float64},
                   result_types=[tensor_type((), torch.float64, "cpu")], pure=True)
    out: TensorProxy = ctx.wrap(ctx.record(op)[0])
    return out


def returned_number(ctx: TraceContext, v: Any, outputs: list[Any], sizes: set[str]) -> Any:
    """The value template (`thunder_ir.runtime.pystate`) of a number user code returns
    that holds unbacked symbols (``return x.sum(), t.item()``; eager returns a Python
    number): each symbol's 0-d tensor (`symbol_tensor`, detached) becomes a program output
    and the number is computed from their ``.item()`` on each call, as eager computes it
    (``("sym_out", text, fn, ((name, output), ...))``), with the call's sizes it also
    holds (``u0 + s0``: added to ``sizes``, the symbols the program reads from the call
    for it); None where it holds no unbacked symbol this trace made, or a symbol that
    is neither (torch's own error follows)."""
    table = symbols.current()
    if table is None or not isinstance(v, symbols.SYMBOLIC_NUMBERS):
        return None
    expr = table.env.simplify(v.node.expr)
    names = sorted(str(s) for s in expr.free_symbols if ("of", str(s)) in ctx.build.counts)
    backed = sorted(str(s) for s in expr.free_symbols if ("of", str(s)) not in ctx.build.counts)
    if not names or any(n not in table.sources for n in backed):
        return None
    text = table.text(v)
    if not isinstance(text, str):
        return None
    pairs = []
    for n in names:
        t = symbol_tensor(ctx, n)
        assert t is not None
        pairs.append((n, len(outputs)))
        outputs.append(ctx.value_of(ctx.run_python(lambda x: x.detach(), (t,), {})))
    sizes.update(backed)
    return ("sym_out", text, value_function(text, [*names, *backed]), tuple(pairs))


def value_function(text: str, names: Any) -> Callable[[dict[str, Any]], Any]:
    """``value(env)``: expression ``text`` computed from ``env``'s values of ``names``
    (`thunder_ir.runtime.dynamic.symbolic_value`, for any symbol's name: an unbacked
    float's ``zuf0`` too)."""
    from thunder_ir.runtime.python_printer import load_python

    src = "def value(env):\n" + "".join(f"  {n} = env[{n!r}]\n" for n in names) + \
        f"  return {text}\n"
    fn: Callable[[dict[str, Any]], Any] = load_python(src, "value", {})
    return fn


def item_float(ctx: TraceContext, t: TensorProxy) -> Any:
    """``t.item()`` of a one-element float tensor: a new unbacked ``SymFloat`` the program
    computes (``torch.Tensor.item``); returned, it is this call's number (`returned_number`)."""
    table = symbols.current()
    assert table is not None, "an unbacked number needs a symbol table"
    f = table.env.create_unbacked_symfloat()
    name = str(f.node.expr)
    ctx.build.counts[("of", name)] = ("item", t)
    op = make_call(torch_name(torch.Tensor.item), [ctx.value_of(t)], [OperandRef(0)], {},
                   result_types=[number_type(float)])
    op.attributes[symbols.UNBACKED_RESULT] = StringAttr(name)
    # an operand of a later op (``x * loss.item()``) is this result itself
    ctx.build.numbers[(torch.SymFloat, str(table.text(f)))] = ctx.record(op)[0]
    return f


__all__ = ["count", "item", "item_float", "mask_index", "masked_select", "new_size", "nonzero",
           "number_tensor",
           "nonzero_tuple", "returned_number", "symbol_tensor", "value_function",
           "value_size"]
