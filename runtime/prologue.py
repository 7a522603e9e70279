"""The prologue: the cache key function, built as IR (``func.func @prologue`` of ``guard``
ops) and compiled from it.

`build_prologue` makes the function from what the key covers: the flat argument leaves
(named for messages), the module's parameters and buffers, and the guard tokens.
`prologue_source` prints its Python from the IR with the one printer of generated code
(`thunder_ir.runtime.python_printer`, which inlines each guard op's expression,
`thunder_ir.dialects.guard.GuardOp.python`): no loops, attribute reads into one tuple::

    def prologue(args):
      (a0, a1,) = args
      return (a0.shape, a0.dtype, a0.device, a0.requires_grad,
              (a0.is_contiguous() or a0.stride()), _meta(a1), _aliases(a0, a1),
              p0.shape, p0.dtype, p0.device, p0.requires_grad,
              (p0.is_contiguous() or p0.stride()), _grad(), _inference(),
              _default_dtype(), _deterministic(),
              (_function_modes() and _default_device()), _autocast(), _tokens,)

`compile_prologue` executes that text (`load_python`, as every generated function is
executed) with the prologue's globals bound (`prologue_globals`): the parameters and
buffers as ``p<i>``, the tokens as ``_tokens``, and the helpers (``_meta`` and
``_aliases`` from the generated-code namespace, and the getters of the global modes,
`thunder_ir.dialects.modes`). `make_prologue` does all three. The prologue is built before tracing
(the cache looks the call up with it); a compile appends a copy of the one the cache keys
the program by to the program module, once, as its last function.

A module of `MIN_TENSORS` plain parameters and buffers or more reads their part as
``*_state()`` (`thunder_ir.runtime.c_guards.StateMeta`): the same elements, read by the
same expressions, but read again only where one C check of all the tensors' metadata
fails (ResNet's 50 tensors: the prologue 28 -> 8 µs a call).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, UnitAttr, i64
from xdsl.ir import Block, Operation, Region, SSAValue

from thunder_ir.dialects import guard as G
from thunder_ir.dialects.modes import autocast_modes, default_device
from thunder_ir.dialects.program import PROLOGUE, prologue_function
from thunder_ir.runtime import namespace
from thunder_ir.runtime.c_guards import MIN_TENSORS, StateMeta, plain_tensors
from thunder_ir.runtime.python_printer import load_python, print_python


@dataclass
class Prologue:
    """The key function for one input structure and guarded state: the function, its
    source and the IR both come from (a module holding ``@prologue``)."""

    fn: Callable[..., Any]
    source: str
    ir: ModuleOp
    state: Sequence[Any] = ()
    _layout_free: Callable[..., Any] | None = None
    modules: Sequence[Any] = ()
    """The modules whose ``int`` attributes the key reads (``m<i>``, `G.AttrValueOp`)."""
    positions: Any = None
    """Where each leaf's part sits in the key (`thunder_ir.runtime.dynamic.key_positions`),
    once a miss asked."""

    @property
    def layout_free(self) -> Callable[..., Any]:
        """The key without the tensors' layouts (``None`` in their places), compiled on
        first use: a call misses the cache by layout alone where its key differs from
        another's only there (``thunder_ir.api`` then reuses a program whose trace made no
        decision by layout)."""
        if self._layout_free is None:
            fn = _function(self.ir)
            src = print_python(_checked(fn), layouts=False)
            self._layout_free = load_python(src, "prologue",
                                            prologue_globals(fn, self.state, self.modules))
        return self._layout_free

    @property
    def labels(self) -> list[str]:
        """What each element of the key stands for (for recompile warnings)."""
        return prologue_labels(self.ir)


# --------------------------------------------------------------------------- building


def _op(cls: type[Operation], operands: Sequence[SSAValue] = (), n_results: int = 1,
        **properties: Any) -> Operation:
    return cls.create(operands=list(operands), result_types=[G.VALUE] * n_results,
                      properties=properties)


def build_prologue(arg_names: Sequence[str], state_names: Sequence[str],
                   all_tensors: bool = False, tokens: Sequence[int] = (),
                   token_names: Sequence[str] = (), exact: bool = False,
                   attrs: Sequence[tuple[int, str, str]] = (),
                   tensors: Sequence[tuple[Any, ...]] = (),
                   check_state: bool = False) -> ModuleOp:
    """The module holding ``func.func @prologue(leaves...) -> key``.

    Args:
        arg_names: a name per flat argument leaf (for messages).
        state_names: the module's parameters and buffers, in the order they are bound
            (``p0``, ``p1``...).
        all_tensors: every leaf is a tensor (the flat fast path): their metadata is read
            inline (`guard.tensor_meta`) rather than through ``tensor_meta``
            (`guard.leaf_meta`).
        tokens: the guard tokens the prologue is built for; ``token_names`` the guards'.
        exact: key every tensor's exact strides and storage offset (a trace for this call
            structure read them), not only its contiguity.
        attrs: the module attributes whose ``int`` values the key holds (symbolic numbers
            of the programs, `thunder_ir.runtime.symbolic_attrs`), each ``(i, label,
            name)``: attribute ``name`` of the global ``m<i>``.
        tensors: the module tensors ``forward`` rebinds on every call, whose metadata the
            key holds (`thunder_ir.runtime.rebound`), each ``(i, label, name, buffer)``:
            buffer (or plain attribute) ``name`` of the global ``m<i>``, with a fifth
            element ``(key,)`` for an entry of the dict or list the attribute holds.
        check_state: the state's reads come from ``_state()``
            (`thunder_ir.runtime.c_guards.StateMeta`), read again only where a C check of
            the tensors fails (not with ``exact``).
    """
    block = Block(arg_types=[G.VALUE] * len(arg_names))
    for i, a in enumerate(block.args):
        a.name_hint = f"a{i}"
    parts: list[SSAValue] = []

    def add(op: Operation) -> None:
        block.add_op(op)
        parts.extend(op.results)

    flag: dict[str, Any] = {"exact": UnitAttr()} if exact else {}
    for a, name in zip(block.args, arg_names):
        label = StringAttr(name)
        add(_op(G.TensorMetaOp, [a], 5, label=label, **flag) if all_tensors
            else _op(G.LeafMetaOp, [a], label=label, **flag))
    if len(arg_names) > 1:
        add(_op(G.AliasesOp, block.args))
    if state_names:
        checked: dict[str, Any] = {"checked": UnitAttr()} if check_state else {}
        add(_op(G.StateMetaOp, names=G.names_attr(state_names), **flag, **checked))
    for i, shown, attr in attrs:
        add(_op(G.AttrValueOp, label=StringAttr(shown), attr=StringAttr(attr),
                index=IntegerAttr(i, i64)))
    for i, shown, attr, buffer, *item in tensors:
        props: dict[str, Any] = {"label": StringAttr(shown), "attr": StringAttr(attr),
                                 "index": IntegerAttr(i, i64), **flag}
        if buffer:
            props["buffer"] = UnitAttr()
        if item and item[0]:  # an entry of the dict or list it holds
            props["item"] = StringAttr(repr(item[0][0]))
        add(_op(G.AttrMetaOp, (), 5, **props))
    for cls in (G.GradModeOp, G.InferenceModeOp, G.DefaultDtypeOp, G.DeterministicOp,
                G.DefaultDeviceOp, G.AutocastOp):
        add(_op(cls))
    # always last: `thunder_ir.api` re-keys entries by it
    add(_op(G.TokensOp, tokens=G.tokens_attr(tokens), names=G.names_attr(token_names)))
    key = _op(G.KeyOp, parts)
    block.add_op(key)
    block.add_op(func.ReturnOp(key.results[0]))
    fn = func.FuncOp(PROLOGUE, ([G.VALUE] * len(arg_names), [G.VALUE]), Region(block))
    return ModuleOp([fn])


# --------------------------------------------------------------------------- code generation


def _function(module: ModuleOp | func.FuncOp) -> func.FuncOp:
    fn = module if isinstance(module, func.FuncOp) else prologue_function(module)
    if fn is None:
        raise ValueError("the module holds no @prologue")
    return fn


def _checked(fn: func.FuncOp) -> func.FuncOp:
    """``fn``, once every op of it is a guard op (the printer would print another as a
    statement of a program function)."""
    for op in fn.body.block.ops:
        if not isinstance(op, G.GuardOp | func.ReturnOp):
            raise ValueError(f"@prologue holds {op.name}, which is not a guard op")
    return fn


def prologue_source(module: ModuleOp | func.FuncOp) -> str:
    """The Python of ``@prologue``: ``def prologue(args)`` returning the key as one tuple
    expression (the ops' expressions inlined; nothing is assigned but the arguments), as
    the printer prints every function over Python objects."""
    return print_python(_checked(_function(module)))


def prologue_labels(module: ModuleOp | func.FuncOp) -> list[str]:
    """What each element of the key stands for, in order."""
    fn = _function(module)
    labels: dict[SSAValue, list[str]] = {}
    key: G.KeyOp | None = None
    for op in fn.body.block.ops:
        if isinstance(op, G.KeyOp):
            key = op
        elif isinstance(op, G.GuardOp):
            flat = iter(op.labels())
            for r, w in zip(op.results, op.widths(), strict=True):
                labels[r] = [next(flat) for _ in range(w)]
    if key is None:
        return []
    return [lab for i, v in enumerate(key.parts)
            for lab in labels.get(v, [f"part {i} of the key"])]


def prologue_globals(module: ModuleOp | func.FuncOp, state: Sequence[Any],
                     modules: Sequence[Any] = ()) -> dict[str, Any]:
    """The globals the prologue's Python reads: the helpers, ``p<i>`` (``state[i]``, the
    parameters and buffers), ``m<i>`` (``modules[i]``, whose attributes it reads) and
    ``_tokens``."""
    g: dict[str, Any] = {"_meta": namespace.tensor_meta, "_aliases": namespace.aliases,
                         "_grad": torch.is_grad_enabled,
                         "_inference": torch.is_inference_mode_enabled,
                         "_default_dtype": torch.get_default_dtype,
                         "_deterministic": torch.are_deterministic_algorithms_enabled,
                         "_default_device": default_device,
                         "_function_modes": torch._C._len_torch_function_stack,
                         "_autocast": autocast_modes, "_tokens": ()}
    for op in _function(module).body.block.ops:
        if isinstance(op, G.StateMetaOp):
            g.update((f"p{i}", t) for i, t in enumerate(state))
            if op.checked is not None:  # the inline reads, as a function of their own
                reads = G.StateMetaOp.create(properties={"names": op.names},
                                             result_types=[G.VALUE])
                src = f"def state_reads():\n  return ({reads.python(())[0]},)\n"
                g["_state"] = StateMeta(state, load_python(src, "state_reads", dict(g)))
        elif isinstance(op, G.TokensOp):
            g["_tokens"] = op.values()
    g.update((f"m{i}", m) for i, m in enumerate(modules))
    return g


def compile_prologue(module: ModuleOp, state: Sequence[Any],
                     modules: Sequence[Any] = ()) -> Prologue:
    """The prologue's function, compiled from its IR (``state``: the tensors ``p<i>``;
    ``modules``: the modules ``m<i>``)."""
    fn = _function(module)
    src = prologue_source(fn)
    return Prologue(load_python(src, "prologue", prologue_globals(fn, state, modules)), src,
                    module, tuple(state), modules=tuple(modules))


def make_prologue(arg_names: Sequence[str], state: dict[str, torch.Tensor],
                  all_tensors: bool = False, tokens: tuple[int, ...] = (),
                  token_names: Sequence[str] = (), exact: bool = False,
                  attrs: Sequence[tuple[int, str, str]] = (),
                  modules: Sequence[Any] = (),
                  tensors: Sequence[tuple[Any, ...]] = ()) -> Prologue:
    """Builds ``key(args) -> tuple`` for flat args plus module state (`build_prologue`,
    then `compile_prologue`).

    ``args`` are the flat leaves of the call's arguments (``arg_names``: what to call each
    in messages); the module's parameters and buffers (``state``) are bound into the
    function's globals, and so are the guard ``tokens`` the state had when the prologue was
    built (the caller picks the prologue by them). ``attrs``: ``(i, label, name)`` of each
    module attribute whose ``int`` value the key holds, attribute ``name`` of
    ``modules[i]``; ``tensors``: ``(i, label, name, buffer)`` of each module tensor whose
    metadata the key holds (read from ``modules[i]`` on each call).
    """
    values = list(state.values())
    check = not exact and len(values) >= MIN_TENSORS and plain_tensors(values)
    module = build_prologue(arg_names, list(state), all_tensors, tokens, token_names, exact,
                            attrs, tensors, check_state=check)
    return compile_prologue(module, values, modules)


__all__ = ["Prologue", "build_prologue", "compile_prologue", "make_prologue",
           "prologue_globals", "prologue_labels", "prologue_source"]
