"""The machinery every thunder_ir op shares: static arguments, shape rules, building.

An op is declared with xDSL's IRDL (operands, results, properties, traits). On top of that
each op class supplies two class methods, usually once per family:

* ``infer(*operand_types, **params)``: the shape/dtype rule. It returns the result type
  (or a list of them) and raises `ShapeError` naming the op and the shapes on bad input.
  It runs when the op is built and again in the verifier, so both agree by construction.
* ``ref(*operand_values, **params)``: the reference implementation on torch tensors.

Operands are passed *grouped by definition*: a single operand is a value, an optional one
is a value or ``None``, a variadic one is a list. Static arguments (``params``) are Python
values stored as properties; `to_attr` and `from_attr` convert both ways:

=================  ====================================
Python             attribute
=================  ====================================
``bool``           ``true`` / ``false``  (i1)
``int``            ``5 : i64``
``float``          ``5.000000e-01 : f64``
``str``            ``"mean"``
``torch.dtype``    ``f32`` (the element type)
tuple of ints      ``array<i64: 0, 1>``
other tuple        ``[...]``
``None`` in tuple  ``none``
``slice``          ``#prims.slice<0, 4, 2>``
``...``            ``#prims.ellipsis``
operand ref        ``#prims.operand<0>`` (which operand, in ``torch.call`` and getitem)
``torch.strided``  ``#prims.torch<"strided">`` (layouts, memory formats)
=================  ====================================

A param that is ``None`` at top level is simply absent (declare it with ``opt_prop_def``).
Building goes through ``Op.create``, which costs less than half of IRDL's ``__init__``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import EllipsisType
from typing import Any, ClassVar

import torch
from xdsl.dialects.builtin import (
    ArrayAttr,
    BytesAttr,
    DenseArrayBase,
    DictionaryAttr,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    IntegerType,
    LocationAttr,
    NoneAttr,
    NoneType,
    StringAttr,
    UnitAttr,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Operation, ParametrizedAttribute
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    OptionalDef,
    VariadicDef,
    irdl_attr_definition,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from thunder_ir.dialects.construct import new_op
from thunder_ir.dialects.symbols import SymExprAttr, SymText, same_types, sym_text, sym_value
from thunder_ir.dialects.types import DTYPE_BY_ELEMENT, dtype_info, pretty_type


class ShapeError(ValueError):
    """A shape/dtype rule rejected its inputs. The message names the op and the shapes."""


# --------------------------------------------------------------------------- attributes


@irdl_attr_definition
class SliceAttr(ParametrizedAttribute):
    """A Python ``slice`` inside a static argument: ``#prims.slice<0, none, 2>``."""

    name = "prims.slice"

    start: IntAttr | NoneAttr | SymExprAttr
    stop: IntAttr | NoneAttr | SymExprAttr
    step: IntAttr | NoneAttr | SymExprAttr

    def print_parameters(self, printer: Printer) -> None:
        parts = ("none" if isinstance(p, NoneAttr) else f'"{p.text}"'
                 if isinstance(p, SymExprAttr) else str(p.data)
                 for p in (self.start, self.stop, self.step))
        printer.print_string(f"<{', '.join(parts)}>")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        def one() -> Attribute:
            if parser.parse_optional_keyword("none") is not None:
                return NoneAttr()
            text = parser.parse_optional_str_literal()
            if text is not None:  # a symbolic bound
                return SymExprAttr(StringAttr(text))
            return IntAttr(parser.parse_integer())

        with parser.in_angle_brackets():
            start = one()
            parser.parse_punctuation(",")
            stop = one()
            parser.parse_punctuation(",")
            step = one()
        return (start, stop, step)


@irdl_attr_definition
class EllipsisAttr(ParametrizedAttribute):
    """Python's ``...`` inside a static argument: ``#prims.ellipsis``."""

    name = "prims.ellipsis"


@irdl_attr_definition
class OperandRefAttr(ParametrizedAttribute):
    """Stands for operand number ``index`` inside a static argument: ``#prims.operand<0>``."""

    name = "prims.operand"

    index: IntAttr

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.index.data}>")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return (IntAttr(parser.parse_integer(allow_negative=False)),)


@irdl_attr_definition
class TorchConstantAttr(ParametrizedAttribute):
    """A torch constant inside a static argument, by name: ``#prims.torch<"strided">``
    (``torch.strided``; memory formats and layouts)."""

    name = "prims.torch"

    constant: StringAttr

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f'<"{self.constant.data}">')

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return (StringAttr(parser.parse_str_literal()),)


_TORCH_CONSTANTS = (torch.memory_format, torch.layout)


class OperandRef(int):
    """The Python value of `OperandRefAttr`: an int that knows it names an operand."""

    __str__ = int.__repr__

    def __repr__(self) -> str:
        return f"OperandRef({int(self)})"


BASE_ATTRIBUTES: tuple[type[Attribute], ...] = (SliceAttr, EllipsisAttr, OperandRefAttr,
                                                SymExprAttr, TorchConstantAttr)

_INT_ARRAYS: dict[tuple[int, ...], Attribute] = {}
_SYMBOLIC = (torch.SymInt, torch.SymFloat, SymText)
_TRUE = IntegerAttr(1, i1)
_FALSE = IntegerAttr(0, i1)
_NONE = NoneAttr()
_ELLIPSIS = EllipsisAttr()


def to_attr(value: Any) -> Attribute:
    """Converts a static argument from its Python value to an attribute (see module doc)."""
    if value is True:
        return _TRUE
    if value is False:
        return _FALSE
    if isinstance(value, OperandRef):
        return OperandRefAttr(IntAttr(int(value)))
    if isinstance(value, _SYMBOLIC):  # a symbolic size: its text, or the constant it is
        text = sym_text(value)
        return SymExprAttr(StringAttr(text)) if isinstance(text, str) else to_attr(text)
    if type(value) is int:  # building one costs ~10 µs; dims and sizes repeat
        attr = _INTS.get(value)
        if attr is None:
            attr = _int_attr(value)
            if len(_INTS) < _CACHED:
                _INTS[value] = attr
        return attr
    if isinstance(value, int):
        return _int_attr(value)
    if type(value) is float:  # keyed by its exact bits: 0.0 and -0.0 are equal keys
        bits = value.hex()
        attr = _FLOATS.get(bits)
        if attr is None:
            attr = FloatAttr(value, f64)
            if len(_FLOATS) < _CACHED:
                _FLOATS[bits] = attr
        return attr
    if isinstance(value, float):
        return FloatAttr(value, f64)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, torch.dtype):
        return dtype_info(value).element_type
    if isinstance(value, tuple | list | torch.Size):
        if all(type(v) is int for v in value):
            key = tuple(value)
            attr = _INT_ARRAYS.get(key)
            if attr is None:  # building one costs ~20 µs; shapes and dims repeat
                attr = _INT_ARRAYS[key] = DenseArrayBase.from_list(i64, list(key))
            return attr
        items = [to_attr(v) for v in value]
        if items and all(type(a) is IntegerAttr and a.type == i64 for a in items):
            # symbolic sizes that are constants (``[E, E * 2]`` with ``E`` fixed to 16 by a
            # guard): the ints they are, as an all-int list is (a ``Dims`` param takes no
            # other array: the symbolic compile would fail to verify)
            return DenseArrayBase.from_list(
                i64, [a.value.data for a in items])  # type: ignore[attr-defined]
        return ArrayAttr(items)
    if value is None:
        return _NONE
    if isinstance(value, dict):
        return DictionaryAttr({str(k): to_attr(v) for k, v in value.items()})
    if isinstance(value, slice):
        return SliceAttr(*(_NONE if v is None else _bound(v) for v in _slice_parts(value)))
    if isinstance(value, EllipsisType):
        return _ELLIPSIS
    if isinstance(value, torch.device):
        return StringAttr(str(value))
    if isinstance(value, _TORCH_CONSTANTS):
        return TorchConstantAttr(StringAttr(str(value).removeprefix("torch.")))
    raise TypeError(f"cannot store {value!r} of type {type(value).__name__} as a static argument")


_INTS: dict[int, Attribute] = {}
_FLOATS: dict[str, Attribute] = {}
_CACHED = 4096  # values kept per table (attributes are immutable: shared freely)


def _int_attr(value: int) -> Attribute:
    if not -(2**63) <= value < 2**63:
        raise TypeError(f"integer {value} does not fit a static argument (int64)")
    return IntegerAttr(value, i64)


def _slice_parts(s: slice) -> tuple[Any, Any, Any]:
    return (s.start, s.stop, s.step)


def _bound(v: Any) -> Attribute:
    """A slice bound: an int, or a symbolic size's text (``x[:, :n]``)."""
    if isinstance(v, _SYMBOLIC):
        text = sym_text(v)
        if isinstance(text, str):
            return SymExprAttr(StringAttr(text))
        v = text
    return IntAttr(_index(v))


def _index(v: Any) -> int:
    if isinstance(v, int):
        return v
    raise TypeError(f"slice bounds must be ints when traced, got {v!r}")


def from_attr(attr: Attribute) -> Any:
    """Converts an attribute back to the Python value `to_attr` made it from."""
    cls = type(attr)
    if cls is IntegerAttr:
        v = attr.value.data  # type: ignore[attr-defined]
        return bool(v) if attr.type == i1 else v  # type: ignore[attr-defined]
    if cls is DenseArrayBase:
        return attr.get_values()  # type: ignore[attr-defined]
    if cls is FloatAttr:
        return float(attr.value.data)  # type: ignore[attr-defined]
    if cls is StringAttr:
        return attr.data  # type: ignore[attr-defined]
    if cls is ArrayAttr:
        return tuple(from_attr(a) for a in attr.data)  # type: ignore[attr-defined]
    if cls is DictionaryAttr:
        return {k: from_attr(v) for k, v in attr.data.items()}  # type: ignore[attr-defined]
    if cls is NoneAttr or cls is NoneType:  # `none` parses back as the builtin type
        return None
    if cls is UnitAttr:  # a flag property that is present (``torch.call``'s ``pure``)
        return True
    if cls is BytesAttr:  # non-ASCII strings parse back as bytes
        return attr.data.decode("utf-8")  # type: ignore[attr-defined]
    if cls is SliceAttr:
        return slice(*(None if isinstance(p, NoneAttr) else sym_value(p.text)
                       if isinstance(p, SymExprAttr) else p.data for p in attr.parameters))  # type: ignore[attr-defined]
    if cls is EllipsisAttr:
        return ...
    if cls is OperandRefAttr:
        return OperandRef(attr.index.data)  # type: ignore[attr-defined]
    if cls is IntAttr:
        return attr.data  # type: ignore[attr-defined]
    if cls is SymExprAttr:
        return sym_value(attr.text)  # type: ignore[attr-defined]
    if cls is TorchConstantAttr:
        return getattr(torch, attr.constant.data)  # type: ignore[attr-defined]
    info = DTYPE_BY_ELEMENT.get(attr)
    if info is not None:
        return info.torch_dtype
    raise TypeError(f"no Python value for attribute {attr}")


# --------------------------------------------------------------------------- ops


class ThunderOp(IRDLOperation):
    """Base of every op in the ``ltorch``, ``prims``, ``torch`` and ``fusion`` dialects.

    Subclasses (usually a family base) define `infer` and `ref`; leaves give a ``name``,
    traits and a one-line docstring.
    """

    # Static arguments that have a default; absent properties read back as these.
    DEFAULTS: ClassVar[dict[str, Any]] = {}

    @classmethod
    def __subclasshook__(cls, subclass: type) -> bool:
        """``isinstance(x, SomeOp)`` is inheritance, read from ``x``'s MRO.

        Op classes are ABCs (xDSL's `Operation`). Without this hook, a negative check
        (`isinstance(func_op, ThunderOp)`) walks every subclass of the class asked about,
        hundreds of op classes for `ThunderOp`, once per class checked, and again each
        time any ``ABC.register`` in the process clears the ABC caches: 120 ms in one
        first training step.
        """
        return cls in subclass.__mro__

    @classmethod
    def infer(cls, *operand_types: Any, **params: Any) -> Attribute | list[Attribute]:
        """The shape/dtype rule: operand types (grouped) and params -> result type(s)."""
        raise NotImplementedError(f"{cls.name} has no shape rule")

    @classmethod
    def ref(cls, *operands: Any, **params: Any) -> Any:
        """The reference implementation on torch tensors (grouped like `infer`).

        By default it calls the leaf's ``TORCH_FN`` with the same arguments.
        """
        fn = getattr(cls, "TORCH_FN", None)
        if fn is None:
            raise NotImplementedError(f"{cls.name} has no reference implementation")
        return fn(*operands, **params)

    @classmethod
    def eager_ref(cls, *operands: Any, **params: Any) -> Any:
        """What eager runs for the op, where the frontend asks what eager's autograd saves
        (run on meta tensors): `ref`, unless the op is the functional form of a call that
        eager makes in place and whose backward saves other tensors (batch norm's running
        statistics)."""
        return cls.ref(*operands, **params)

    @classmethod
    def torch_call(cls, op: ThunderOp, args: list[Any], params: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]] | None:
        """The direct ``TORCH_FN`` call that `ref` makes, as ``(args, kwargs)``, or None.

        ``args`` and ``params`` are the op's operands (as operand references) and static
        arguments; the torch lowering emits ``TORCH_FN(*args, **kwargs)`` in place of a call
        to `ref`. A family that defines `ref` defines this beside it, mirroring it exactly;
        the lowering only asks it of a class whose `ref` is defined at or above the class
        that defines this (otherwise it calls `ref` itself). It may read the op's class,
        properties and operand types, nothing else: ``lower-to-torch`` reuses its answer
        for every op alike in those.
        """
        return args, params

    @classmethod
    def python_call(cls) -> Callable[..., Any]:
        """How an op of this family reaches Python: the one callable that computes it from
        its grouped operands and its params as keywords.

        Generated code binds it in the op namespaces (``prims.mul``), the reference
        interpreter calls it, and the torch lowering names it where no direct torch call
        spells the op (``tir.prims_sum``). By default: the leaf's ``TORCH_FN`` itself where
        the op keeps the default `ref` (which only forwards to it; a call level saved per
        op), else `ref`. A family whose Python call is something else says so here.
        """
        torch_fn = getattr(cls, "TORCH_FN", None)
        if torch_fn is not None and cls.ref.__func__ is ThunderOp.ref.__func__:  # type: ignore[attr-defined]
            return torch_fn  # type: ignore[no-any-return]
        return cls.ref

    # ---- introspection

    @classmethod
    def operand_layout(cls) -> tuple[tuple[str, str], ...]:
        """``(name, kind)`` per operand definition; kind is "single", "optional" or "variadic"."""
        layout = _LAYOUTS.get(cls)
        if layout is None:
            layout = tuple(
                (name, "optional" if isinstance(d, OptionalDef) else
                 "variadic" if isinstance(d, VariadicDef) else "single")
                for name, d in cls.get_irdl_definition().operands
            )
            _LAYOUTS[cls] = layout
        return layout

    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        """Static argument names, in declaration order (the order traces print them)."""
        names = _PARAM_NAMES.get(cls)
        if names is None:
            names = tuple(
                n for n in cls.get_irdl_definition().properties if n != "operandSegmentSizes"
            )
            _PARAM_NAMES[cls] = names
        return names

    def params(self) -> dict[str, Any]:
        """The static arguments as Python values (absent ones as their defaults)."""
        props = self.properties
        out: dict[str, Any] = {}
        for n in self.param_names():
            a = props.get(n)
            out[n] = from_attr(a) if a is not None else self.DEFAULTS.get(n)
        return out

    def grouped_operands(self) -> list[Any]:
        """Operands grouped by definition (value, value-or-None, or list)."""
        return group(self.operand_layout(), list(self.operands), self._segment_sizes())

    def _segment_sizes(self) -> tuple[int, ...] | None:
        seg = self.properties.get("operandSegmentSizes")
        return None if seg is None else seg.get_values()  # type: ignore[attr-defined]

    # ---- verification

    def verify_(self) -> None:
        try:
            types = group(self.operand_layout(), [o.type for o in self.operands],
                          self._segment_sizes())
            expected = self.infer(*types, **self.params())
        except (ShapeError, TypeError) as e:
            raise VerifyException(str(e)) from e
        expected_list = expected if isinstance(expected, list) else [expected]
        got = [r.type for r in self.results]
        if got != expected_list and not same_types(got, expected_list):
            raise VerifyException(
                f"{self.name}: result types ({', '.join(pretty_type(t) for t in got)}) do not "
                f"match the shape rule's ({', '.join(pretty_type(t) for t in expected_list)})"
            )


_LAYOUTS: dict[type, tuple[tuple[str, str], ...]] = {}
_PARAM_NAMES: dict[type, tuple[str, ...]] = {}


def group(layout: Sequence[tuple[str, str]], flat: list[Any],
          segments: Sequence[int] | None) -> list[Any]:
    """Splits a flat operand list into groups following an op's operand layout."""
    if segments is not None:
        out: list[Any] = []
        i = 0
        for (_, kind), n in zip(layout, segments, strict=True):
            chunk = flat[i:i + n]
            i += n
            out.append(chunk if kind == "variadic" else (chunk[0] if chunk else None))
        return out
    n_var = len(flat) - sum(1 for _, k in layout if k == "single")
    out = []
    i = 0
    for _, kind in layout:
        if kind == "single":
            out.append(flat[i])
            i += 1
        elif kind == "optional":
            out.append(flat[i] if n_var > 0 else None)
            i += n_var
        else:
            out.append(flat[i:i + n_var])
            i += n_var
    return out


def flatten_groups(layout: Sequence[tuple[str, str]], groups: Sequence[Any]
                   ) -> tuple[list[Any], list[int]]:
    """The inverse of `group`: a flat list and the size of each group."""
    flat: list[Any] = []
    sizes: list[int] = []
    if len(groups) != len(layout):
        raise TypeError(f"expected {len(layout)} operand groups "
                        f"({', '.join(n for n, _ in layout)}), got {len(groups)}")
    for (_, kind), g in zip(layout, groups, strict=True):
        if kind == "single":
            flat.append(g)
            sizes.append(1)
        elif kind == "optional":
            if g is None:
                sizes.append(0)
            else:
                flat.append(g)
                sizes.append(1)
        else:
            flat.extend(g)
            sizes.append(len(g))
    return flat, sizes


def _segmented(cls: type[ThunderOp]) -> bool:
    seg = _SEGMENTED.get(cls)
    if seg is None:
        seg = any(isinstance(o, AttrSizedOperandSegments)
                  for o in cls.get_irdl_definition().options)
        _SEGMENTED[cls] = seg
    return seg


_SEGMENTED: dict[type, bool] = {}


def build(cls: type[ThunderOp], *operands: Any, **params: Any) -> ThunderOp:
    """Builds (without inserting) an op: runs its shape rule, then ``Op.create``.

    ``operands`` are grouped like the op's operand definitions. Params equal to ``None``
    are left out.
    """
    layout = cls.operand_layout()
    flat, sizes = flatten_groups(layout, operands)
    types = group(layout, [v.type for v in flat], sizes)
    result = cls.infer(*types, **params)
    props = {k: to_attr(v) for k, v in params.items() if v is not None}
    if _segmented(cls):
        props["operandSegmentSizes"] = DenseArrayBase.from_list(i32, sizes)
    return new_op(cls, flat, result if isinstance(result, list) else (result,),
                  props)  # type: ignore[return-value]


class Emitter:
    """Builds ops and appends them to a list, or inserts them through a callback.

    ``E = Emitter(); prims = E.ns(Prims)``; then ``y = prims.add(a, b)`` builds
    ``prims.add``, records it and returns its result (a list for multi-result ops).
    """

    __slots__ = ("_insert", "loc", "ops")

    def __init__(self, insert: Callable[[Operation], None] | None = None) -> None:
        self.ops: list[Operation] = []
        self._insert = insert if insert is not None else self.ops.append
        self.loc: LocationAttr | None = None  # the location of every op built (user line)

    def insert(self, op: Operation) -> Operation:
        """Records a prebuilt op (with the current source location)."""
        if self.loc is not None:
            op.location = self.loc
        self._insert(op)
        return op

    def emit(self, cls: type[ThunderOp], *operands: Any, **params: Any) -> Any:
        """Builds ``cls`` and records it. Returns its single result, or a list of them."""
        op = build(cls, *operands, **params)
        if self.loc is not None:
            op.location = self.loc
        self._insert(op)
        res = op.results
        if len(res) == 1 and not _variadic_results(cls):
            return res[0]
        return list(res)

    def ns(self, ops: dict[str, type[ThunderOp]]) -> OpNamespace:
        """A namespace whose attributes build the ops of one dialect: ``prims.add(a, b)``."""
        return OpNamespace(self, ops)


def _variadic_results(cls: type[ThunderOp]) -> bool:
    v = _VAR_RESULTS.get(cls)
    if v is None:
        v = any(isinstance(d, VariadicDef) for _, d in cls.get_irdl_definition().results)
        _VAR_RESULTS[cls] = v
    return v


_VAR_RESULTS: dict[type, bool] = {}


class OpNamespace:
    """Attribute access builds ops by short name (see `Emitter.ns`)."""

    def __init__(self, emitter: Emitter, ops: dict[str, type[ThunderOp]]) -> None:
        self._emitter = emitter
        self._ops = ops

    def __getattr__(self, short: str) -> Callable[..., Any]:
        try:
            cls = self._ops[short]
        except KeyError:
            raise AttributeError(f"no op named {short!r}") from None
        emit = self._emitter.emit

        def make(*operands: Any, **params: Any) -> Any:
            return emit(cls, *operands, **params)

        setattr(self, short, make)  # later look-ups skip __getattr__
        return make


def op_table(ops: Sequence[type[ThunderOp]]) -> dict[str, type[ThunderOp]]:
    """Maps each op's short name (``add`` for ``prims.add``) to its class."""
    return {op.name.split(".", 1)[1]: op for op in ops}


__all__ = [
    "BASE_ATTRIBUTES",
    "EllipsisAttr",
    "Emitter",
    "OpNamespace",
    "OperandRef",
    "OperandRefAttr",
    "ShapeError",
    "SliceAttr",
    "ThunderOp",
    "build",
    "flatten_groups",
    "from_attr",
    "group",
    "op_table",
    "to_attr",
    "IntegerType",
]
