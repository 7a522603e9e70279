"""The ``guard`` dialect: the ops of ``@prologue``, the function that computes a call's
cache key.

The prologue takes the call's flat argument leaves and returns one tuple: each leaf's
metadata (or value), which leaves share memory, every parameter's and buffer's metadata
(one op for all of them, its elements spliced into the key),
the ``int``s module attributes hold that a program reads as symbolic numbers, the metadata
of the tensors ``forward`` rebinds on every call (read from their modules),
grad mode, inference mode, the default dtype, deterministic algorithms, the default device,
autocast (every global mode that changes what a program gives,
`thunder_ir.dialects.modes`), and the tokens of the guarded Python state
(`thunder_ir.runtime.guards`). Each op reads one of those; ``guard.key`` makes the tuple::

    func.func @prologue(%a0: !guard.value, %a1: !guard.value) -> !guard.value {
      %0, %1, %2, %3, %l = "guard.tensor_meta"(%a0) <{label = "x"}> : ...
      %4 = "guard.leaf_meta"(%a1) <{label = "scale"}> : (!guard.value) -> !guard.value
      %5 = "guard.aliases"(%a0, %a1) : ...
      %6 = "guard.state_meta"() <{names = ["fc.weight", "fc.bias"]}> : ...
      %7 = "guard.grad_mode"() : () -> !guard.value
      ...
      %k = "guard.key"(%0, %1, ..., %10) : (...) -> !guard.value
      func.return %k : !guard.value
    }

Every value is a Python object (``!guard.value``). Each op knows the Python expression
that reads it (`GuardOp.python`), so the prologue's generated code
(`thunder_ir.runtime.prologue`) is one straight-line tuple expression, as fast as a
hand-written one; and what each element of the key stands for (`GuardOp.labels`), for the
warning that names what keeps recompiling. The names the expressions use besides the
arguments (``a0``…) are the prologue's globals: ``p<index>`` the parameters and buffers,
``m<index>`` modules, ``_meta``, ``_aliases``, ``_grad``, ``_inference``,
``_default_dtype``, ``_deterministic``, ``_default_device``, ``_autocast`` and ``_tokens``.

The ops are ``Pure`` reads of the call's inputs and the thread's state: no pass rewrites
the prologue (the pipeline skips ``@prologue``; see `thunder_ir.dialects.program`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    DenseArrayBase,
    IntegerAttr,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Dialect, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Pure

from thunder_ir.dialects import traits as T
from thunder_ir.dialects.symbols import SYMBOL_NAME

# --------------------------------------------------------------------------- the type


@irdl_attr_definition
class ValueType(ParametrizedAttribute, TypeAttribute):
    """``!guard.value``: a Python object (an argument leaf, a shape, a dtype, the key)."""

    name = "guard.value"


VALUE = ValueType()

_META = ("{0}.shape", "{0}.dtype", "{0}.device", "{0}.requires_grad",
         "({0}.is_contiguous() or {0}.stride())")
"""The key's reads of one tensor: its metadata, and its layout (one C call for a contiguous
tensor; the strides otherwise)."""
_EXACT_META = (*_META[:4], "({0}.stride(), {0}.storage_offset())")
"""The reads where the trace read a tensor's exact strides or storage offset (``exact``):
the layout token is both, for every tensor (a contiguous tensor's size-1 dims and its
offset are not in the contiguity token)."""


def _meta(op: IRDLOperation) -> tuple[str, ...]:
    return _EXACT_META if "exact" in op.properties else _META


class GuardOp(IRDLOperation):
    """Base of the guard ops: a Pure read for the cache key (kind `Guard`)."""

    traits = traits_def(Pure(), T.Guard())

    def python(self, operands: Sequence[str]) -> list[str]:
        """One Python expression per result, given the operands' expressions."""
        raise NotImplementedError(self.name)

    def labels(self) -> list[str]:
        """What each element of the key the op's results make stands for in a message
        (``"grad mode"``), in order."""
        raise NotImplementedError(self.name)

    def python_without_layout(self, operands: Sequence[str]) -> list[str]:
        """`python`, leaving out the tensors' layouts (``None`` in their place): the key of
        a call to a program whose trace made no decision by layout
        (`thunder_ir.runtime.prologue.Prologue.layout_free`)."""
        return self.python(operands)

    def widths(self) -> list[int]:
        """How many elements of the key each result makes: one, unless its expression is a
        comma-separated run spliced into the key's tuple (`StateMetaOp`)."""
        return [1] * len(self.results)


# --------------------------------------------------------------------------- arguments


@irdl_op_definition
class TensorMetaOp(GuardOp):
    """`%shape, %dtype, %device, %requires_grad, %layout = "guard.tensor_meta"(%a0)
    <{label = "x"}>`: a tensor argument's metadata, read inline (``a0.shape, a0.dtype, ...``),
    and its layout (``a0.is_contiguous() or a0.stride()``)."""

    name = "guard.tensor_meta"

    arg = operand_def(ValueType)
    label = prop_def(StringAttr)
    exact = opt_prop_def(UnitAttr)
    shape = result_def(ValueType)
    dtype = result_def(ValueType)
    device = result_def(ValueType)
    requires_grad = result_def(ValueType)
    layout = result_def(ValueType)

    def python(self, operands: Sequence[str]) -> list[str]:
        return [m.format(operands[0]) for m in _meta(self)]

    def python_without_layout(self, operands: Sequence[str]) -> list[str]:
        return [*self.python(operands)[:4], "None"]

    def labels(self) -> list[str]:
        name = self.label.data
        return [f"the shape of argument '{name}'", f"the dtype of argument '{name}'",
                f"the device of argument '{name}'", f"requires_grad of argument '{name}'",
                f"the memory layout (strides) of argument '{name}'"]


@irdl_op_definition
class LeafMetaOp(GuardOp):
    """`%m = "guard.leaf_meta"(%a1) <{label = "scale"}>`: one argument leaf's key part
    (`thunder_ir.runtime.cache.tensor_meta`: a tensor's metadata, a number's value; with
    ``exact``, a tensor's exact strides and storage offset)."""

    name = "guard.leaf_meta"

    arg = operand_def(ValueType)
    label = prop_def(StringAttr)
    exact = opt_prop_def(UnitAttr)
    out = result_def(ValueType)

    def python(self, operands: Sequence[str]) -> list[str]:
        return [f"_meta({operands[0]}{', True' if self.exact else ''})"]

    def python_without_layout(self, operands: Sequence[str]) -> list[str]:
        return [f"_meta({operands[0]}, None)"]

    def labels(self) -> list[str]:
        return [f"argument '{self.label.data}'"]


@irdl_op_definition
class AliasesOp(GuardOp):
    """`%m = "guard.aliases"(%a0, %a1)`: which argument leaves share memory
    (`thunder_ir.runtime.cache.aliases`; None when none do)."""

    name = "guard.aliases"

    args = var_operand_def(ValueType)
    out = result_def(ValueType)

    def python(self, operands: Sequence[str]) -> list[str]:
        return [f"_aliases({', '.join(operands)})"]

    def labels(self) -> list[str]:
        return ["which arguments share memory"]


# --------------------------------------------------------------------------- module state


@irdl_op_definition
class StateMetaOp(GuardOp):
    """`%state = "guard.state_meta"() <{names = ["fc.weight", "fc.bias"]}>`: the metadata
    of every parameter and buffer (the prologue's globals ``p0``, ``p1``... in ``names``'
    order): shape, dtype, device, requires_grad and layout of each, spliced into the key
    as ``5 * len(names)`` elements. One op for the whole state, so that a module of many
    parameters costs one op to build and copy. With ``checked``, the reads are
    ``*_state()``: the same elements, which a C check of the tensors spares reading
    again while none changed."""

    name = "guard.state_meta"

    names = prop_def(ArrayAttr[StringAttr])
    exact = opt_prop_def(UnitAttr)
    checked = opt_prop_def(UnitAttr)
    """The reads come from ``_state()`` (`thunder_ir.runtime.c_guards.StateMeta`: the
    same tuple, read again only where a C check of the tensors' metadata fails)."""
    state = result_def(ValueType)

    def python(self, operands: Sequence[str]) -> list[str]:
        if self.checked is not None and self.exact is None:
            return ["*_state()"]
        return [", ".join(m.format(f"p{i}") for i in range(len(self.names.data))
                          for m in _meta(self))]

    def python_without_layout(self, operands: Sequence[str]) -> list[str]:
        return [", ".join(m.format(f"p{i}") for i in range(len(self.names.data))
                          for m in _META[:4])]

    def labels(self) -> list[str]:
        return [f"the {what} of '{n.data}'" for n in self.names.data
                for what in ("shape", "dtype", "device", "requires_grad",
                             "memory layout (strides)")]

    def widths(self) -> list[int]:
        return [len(_META) * len(self.names.data)]


@irdl_op_definition
class AttrValueOp(GuardOp):
    """`%v = "guard.attr_value"() <{label = "self.step", attr = "step", index = 0}>`: the
    value of an ``int`` a module of the jitted tree keeps that the program reads as a
    symbolic number (`thunder_ir.runtime.symbolic_attrs`): the module is the prologue's
    global ``m<index>``, and the value stands in the key where an ``int`` argument's would
    (`thunder_ir.runtime.dynamic.DynamicKey` blanks it for a symbolic program)."""

    name = "guard.attr_value"

    label = prop_def(StringAttr)
    attr = prop_def(StringAttr)
    index = prop_def(IntegerAttr[I64])
    out = result_def(ValueType)

    def python(self, operands: Sequence[str]) -> list[str]:
        name = self.attr.data
        base = f"m{self.index.value.data}"
        return [f"{base}.{name}" if name.isidentifier() else f"{base}.__dict__[{name!r}]"]

    def labels(self) -> list[str]:
        return [f"the module attribute '{self.label.data}'"]


@irdl_op_definition
class AttrMetaOp(GuardOp):
    """`%shape, %dtype, %device, %requires_grad, %layout = "guard.attr_meta"() <{label =
    "self.avg", attr = "avg", index = 1, buffer}>`: the metadata and layout of a tensor a
    module of the jitted tree holds and ``forward`` rebinds on every call (a buffer with
    ``buffer``, else a plain attribute; `thunder_ir.runtime.rebound`), read from the module
    (the prologue's global ``m<index>``) on each call: the program reads it as an input,
    so its metadata, not its identity, is in the key."""

    name = "guard.attr_meta"

    label = prop_def(StringAttr)
    attr = prop_def(StringAttr)
    index = prop_def(IntegerAttr[I64])
    buffer = opt_prop_def(UnitAttr)
    item = opt_prop_def(StringAttr)
    """An entry of the dict or list the attribute holds: its key's ``repr``."""
    exact = opt_prop_def(UnitAttr)
    shape = result_def(ValueType)
    dtype = result_def(ValueType)
    device = result_def(ValueType)
    requires_grad = result_def(ValueType)
    layout = result_def(ValueType)

    def _read(self) -> str:
        name = self.attr.data
        base = f"m{self.index.value.data}"
        if self.buffer is not None:
            return f"{base}._buffers[{name!r}]"
        read = f"{base}.{name}" if name.isidentifier() else f"{base}.__dict__[{name!r}]"
        if self.item is None:
            return read
        item = self.item.data  # (``.h``: a field of the plain object the attribute holds)
        return f"{read}{item}" if item.startswith(".") else f"{read}[{item}]"

    def python(self, operands: Sequence[str]) -> list[str]:
        return [m.format(self._read()) for m in _meta(self)]

    def python_without_layout(self, operands: Sequence[str]) -> list[str]:
        return [*self.python(operands)[:4], "None"]

    def labels(self) -> list[str]:
        name = self.label.data
        return [f"the {what} of the module state '{name}'"
                for what in ("shape", "dtype", "device", "requires_grad",
                             "memory layout (strides)")]


# --------------------------------------------------------------------------- thread state


class _StateOp(GuardOp):
    """A read of the thread's state: ``EXPR`` is its Python, ``LABEL`` what it is."""

    EXPR: ClassVar[str] = ""
    LABEL: ClassVar[str] = ""

    out = result_def(ValueType)

    def python(self, operands: Sequence[str]) -> list[str]:
        return [self.EXPR]

    def labels(self) -> list[str]:
        return [self.LABEL]


@irdl_op_definition
class GradModeOp(_StateOp):
    """`%g = "guard.grad_mode"()`: whether grad mode is on (``torch.is_grad_enabled()``)."""

    name = "guard.grad_mode"
    EXPR: ClassVar[str] = "_grad()"
    LABEL: ClassVar[str] = "grad mode"


@irdl_op_definition
class DefaultDtypeOp(_StateOp):
    """`%d = "guard.default_dtype"()`: ``torch.get_default_dtype()``."""

    name = "guard.default_dtype"
    EXPR: ClassVar[str] = "_default_dtype()"
    LABEL: ClassVar[str] = "the default dtype"


@irdl_op_definition
class InferenceModeOp(_StateOp):
    """`%i = "guard.inference_mode"()`: ``torch.is_inference_mode_enabled()`` (a view made
    under it has no version counter; user code may ask it)."""

    name = "guard.inference_mode"
    EXPR: ClassVar[str] = "_inference()"
    LABEL: ClassVar[str] = "inference mode"


@irdl_op_definition
class DeterministicOp(_StateOp):
    """`%d = "guard.deterministic"()`: ``torch.are_deterministic_algorithms_enabled()``
    (tier-up leaves such programs unfused)."""

    name = "guard.deterministic"
    EXPR: ClassVar[str] = "_deterministic()"
    LABEL: ClassVar[str] = "deterministic algorithms"


@irdl_op_definition
class DefaultDeviceOp(_StateOp):
    """`%d = "guard.default_device"()`: the default device, where factories without a
    ``device`` make tensors: 0 while no function mode is active (one C call; a
    ``torch.set_default_device`` is one), else the device (None for the CPU)."""

    name = "guard.default_device"
    EXPR: ClassVar[str] = "(_function_modes() and _default_device())"
    LABEL: ClassVar[str] = "the default device"


@irdl_op_definition
class AutocastOp(_StateOp):
    """`%a = "guard.autocast"()`: the autocast state (False when none is enabled; else,
    per device type, enabled and dtype, and the cast-cache flag)."""

    name = "guard.autocast"
    EXPR: ClassVar[str] = "_autocast()"
    LABEL: ClassVar[str] = "autocast"


@irdl_op_definition
class TokensOp(GuardOp):
    """`%t = "guard.tokens"() <{tokens = array<i64: 0, 2>, names = ["globals of m"]}>`: the
    tokens the guarded Python state had when the prologue was built (one per guard; the
    caller picks the prologue by them), bound as the global ``_tokens``."""

    name = "guard.tokens"

    tokens = prop_def(DenseArrayBase)
    names = prop_def(ArrayAttr[StringAttr])
    out = result_def(ValueType)

    def python(self, operands: Sequence[str]) -> list[str]:
        return ["_tokens"]

    def labels(self) -> list[str]:
        return [" or ".join(n.data for n in self.names.data) or "guarded state"]

    def values(self) -> tuple[int, ...]:
        """The tokens, as the tuple ``_tokens`` is bound to."""
        return tuple(int(v) for v in self.tokens.get_values())


# --------------------------------------------------------------------------- the key


@irdl_op_definition
class KeyOp(GuardOp):
    """`%k = "guard.key"(%0, %1, ...)`: the cache key, the tuple of its operands."""

    name = "guard.key"

    parts = var_operand_def(ValueType)
    out = result_def(ValueType)

    def python(self, operands: Sequence[str]) -> list[str]:
        return [f"({', '.join(operands)},)"]

    def labels(self) -> list[str]:
        return ["the key"]


# --------------------------------------------------------------------------- symbolic sizes


@irdl_op_definition
class SymbolOp(GuardOp):
    """`%s0 = "guard.symbol"(%a0) <{symbol = "s0", path = ".shape[1]"}>`: the value a
    symbolic program's symbol has in this call, read from the leaf it comes from (``path``:
    the attribute and item steps into an argument object, then ``.shape[d]``; empty for
    an ``int`` leaf). Ops of ``@shape_guard`` (`thunder_ir.runtime.dynamic`)."""

    name = "guard.symbol"

    arg = operand_def(ValueType)
    symbol = prop_def(StringAttr)
    path = prop_def(StringAttr)
    out = result_def(ValueType)

    def python(self, operands: Sequence[str]) -> list[str]:
        return [f"{operands[0]}{self.path.data}"]

    def labels(self) -> list[str]:
        return [f"the size {self.symbol.data}"]


@irdl_op_definition
class ShapeChecksOp(GuardOp):
    """`%ok = "guard.shape_checks"(%s0, %s1) <{symbols = ["s0", "s1"],
    checks = ["s0 >= 2", "s1 <= 64"]}>`: whether this call's sizes pass every guard a
    symbolic program was traced under (each check Python text over the symbols, which
    stand for the operands' values)."""

    name = "guard.shape_checks"

    values = var_operand_def(ValueType)
    symbols = prop_def(ArrayAttr[StringAttr])
    checks = prop_def(ArrayAttr[StringAttr])
    out = result_def(ValueType)

    def python(self, operands: Sequence[str]) -> list[str]:
        names = dict(zip((a.data for a in self.symbols.data), operands, strict=True))
        exprs = [SYMBOL_NAME.sub(lambda m: names.get(m.group(0), m.group(0)), c.data)
                 for c in self.checks.data]
        return ["(" + " and ".join(f"({e})" for e in exprs) + ")" if exprs else "True"]

    def labels(self) -> list[str]:
        return ["the sizes pass the program's shape guards"]


def tokens_attr(tokens: Sequence[int]) -> DenseArrayBase:
    """The ``tokens`` property of `TokensOp`."""
    return DenseArrayBase.from_list(i64, list(tokens))


def names_attr(names: Sequence[str]) -> ArrayAttr[StringAttr]:
    """The ``names`` property of `TokensOp`."""
    return ArrayAttr([StringAttr(n) for n in names])


Guard = Dialect("guard", [TensorMetaOp, LeafMetaOp, AliasesOp, StateMetaOp, AttrValueOp,
                          AttrMetaOp,
                          GradModeOp, InferenceModeOp, DefaultDtypeOp, DeterministicOp,
                          DefaultDeviceOp, AutocastOp, TokensOp, KeyOp, SymbolOp,
                          ShapeChecksOp], [ValueType])

__all__ = ["VALUE", "AliasesOp", "AttrMetaOp", "AttrValueOp", "AutocastOp", "DefaultDeviceOp",
           "DefaultDtypeOp", "DeterministicOp", "GradModeOp", "Guard", "GuardOp",
           "InferenceModeOp", "KeyOp", "LeafMetaOp", "ShapeChecksOp", "StateMetaOp",
           "SymbolOp", "TensorMetaOp", "TokensOp", "ValueType", "names_attr", "tokens_attr"]
