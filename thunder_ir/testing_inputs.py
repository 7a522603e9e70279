"""Hypothesis strategies that draw valid inputs for every op: `op_inputs`.

``op_inputs(op)`` is a strategy of `OpSample` values: the op's operands, grouped as its
operand definitions (a value, ``None`` for an absent optional operand, a list for a variadic
one), and its params. A sample is ready for ``op.ref(*s.operands, **s.params)``, for
`thunder_ir.testing.check_decomposition` and for `thunder_ir.testing.check_vjp`::

    from hypothesis import given
    from thunder_ir.dialects import ltorch
    from thunder_ir.testing import check_decomposition, op_inputs

    @given(op_inputs(ltorch.OPS["silu"]))
    def test_silu(sample):
        check_decomposition(ltorch.OPS["silu"], sample.operands, sample.params)

What a strategy knows about its op: the shapes it takes (broadcasting included), the dtypes
it accepts, a safe range of values (``log`` > 0, ``asin`` in (-1, 1), divisors away from
zero, integer powers not negative…) and valid static arguments (dims, indices, slices,
pads, split sizes…). Decomposition-mode samples of elementwise ops sometimes hold an
``inf``, ``-inf``, ``nan`` or zero, since a decomposition must treat them as torch does.

``for_vjp=True`` draws inputs for checking a VJP rule: floating-point tensors in float64,
no special values, and values where the derivative exists (``sqrt`` away from 0, ``pow``
with a positive base, no fully ignored loss…). Ties of ``maximum``/``amax`` and zeros of
``prod`` are still drawn: torch's convention at them is well defined and rules must match.

``dtypes=`` narrows the data dtypes (float16 or int8 tensors, say); an op that accepts none
of them raises `ValueError` when a sample is drawn.

Your own op gets a strategy with `register_inputs`. The function receives hypothesis's
``draw`` and an `InputSpec` (the op, the requested dtypes, ``for_vjp``) whose helpers pick
dtypes and make tensors::

    @register_inputs(MyGeluOp)
    def my_gelu_inputs(draw, spec):
        dtype = spec.dtype(draw, FLOAT_KIND)
        x = spec.tensor(draw, spec.shape(draw), dtype, low=-4.0, high=4.0)
        return OpSample([x], {"approximate": draw(st.sampled_from(["none", "tanh"]))})

Every prim and every ltorch op has a strategy (a test keeps it so).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from thunder_ir.dialects import ltorch_core as L
from thunder_ir.dialects import ltorch_nn as N
from thunder_ir.dialects import prims as P
from thunder_ir.dialects.base import OperandRef, ShapeError, ThunderOp
from thunder_ir.dialects.types import (
    FLOAT_DTYPES,
    INT_DTYPES,
    SUPPORTED_DTYPES,
    is_float,
    tensor_type,
)

# --------------------------------------------------------------------------- dtypes

FLOAT_KIND: frozenset[torch.dtype] = FLOAT_DTYPES
"""Every floating-point dtype."""
INT_KIND: frozenset[torch.dtype] = INT_DTYPES
"""Every integer dtype."""
BOOL_KIND: frozenset[torch.dtype] = frozenset({torch.bool})
NUMERIC_KIND: frozenset[torch.dtype] = FLOAT_KIND | INT_KIND
"""Floating-point and integer dtypes (no bool)."""
ANY_KIND: frozenset[torch.dtype] = frozenset(SUPPORTED_DTYPES)
"""Every dtype thunder_ir supports."""

DEFAULT_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float64, torch.bfloat16,
                                           torch.int64, torch.int32, torch.bool)
"""The dtypes drawn when ``dtypes`` is not given (float32 first: the shrinker's choice)."""
VJP_DTYPES: tuple[torch.dtype, ...] = (torch.float64, torch.int64, torch.int32, torch.bool)
"""The dtypes drawn with ``for_vjp=True``: float64 data; ints and bools where the op needs
them (indices, masks, integer-only ops)."""

_SPECIALS: tuple[float, ...] = (math.inf, -math.inf, math.nan, 0.0, -1.5)


# --------------------------------------------------------------------------- samples


def _show(v: Any) -> str:
    """A short, mostly reproducible rendering of a sample value."""
    if isinstance(v, torch.Tensor):
        if v.numel() <= 256:
            return f"torch.tensor({v.tolist()!r}, dtype={v.dtype})"
        return f"<tensor of shape {tuple(v.shape)}, {v.dtype}>"
    if isinstance(v, list):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    if isinstance(v, tuple):
        return "(" + ", ".join(_show(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return repr(v)


@dataclass(eq=False)
class OpSample:
    """One drawn input of an op.

    Attributes:
        operands: grouped like the op's operand definitions: tensors, Python numbers,
            ``None`` for an absent optional operand, lists for variadic ones.
        params: the op's static arguments (absent ones left out or ``None``).
    """

    operands: list[Any]
    params: dict[str, Any]

    def __iter__(self) -> Iterator[Any]:
        """``operands, params = sample``."""
        yield self.operands
        yield self.params

    def __repr__(self) -> str:
        return f"OpSample(operands={_show(self.operands)}, params={_show(self.params)})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """Hypothesis's reports print `__repr__` (exact values, dtypes) too."""
        printer.text(repr(self))


@dataclass(frozen=True)
class InputSpec:
    """What a strategy is asked for, with helpers that honour it.

    Attributes:
        op: the op class to draw inputs of.
        dtypes: the data dtypes to draw from (``None``: `DEFAULT_DTYPES`, or `VJP_DTYPES`
            with ``for_vjp``).
        for_vjp: draw inputs for a VJP check (float64, differentiable values, no specials).
    """

    op: type[ThunderOp]
    dtypes: tuple[torch.dtype, ...] | None = None
    for_vjp: bool = False

    def dtype(self, draw: st.DrawFn, allowed: Iterable[torch.dtype]) -> torch.dtype:
        """A data dtype among ``allowed`` and the requested ones (floats only for a VJP
        check when the op takes floats). Raises `ValueError` when none fits."""
        ok = set(allowed)
        universe = self.dtypes or (VJP_DTYPES if self.for_vjp else DEFAULT_DTYPES)
        cands = [d for d in universe if d in ok]
        if self.for_vjp and any(is_float(d) for d in cands):
            cands = [d for d in cands if is_float(d)]
        if not cands:
            raise ValueError(f"{self.op.name} takes none of the dtypes "
                             f"{', '.join(str(d) for d in universe)}")
        return draw(st.sampled_from(cands))

    def any_dtype(self, draw: st.DrawFn, allowed: Iterable[torch.dtype] = ANY_KIND
                  ) -> torch.dtype:
        """A dtype for a static argument (a conversion's target, a creation's dtype):
        among ``allowed`` and the requested dtypes, with no VJP restriction."""
        ok = set(allowed)
        universe = self.dtypes or DEFAULT_DTYPES
        cands = [d for d in universe if d in ok] or [d for d in DEFAULT_DTYPES if d in ok]
        if not cands:
            raise ValueError(f"{self.op.name}: no dtype among {sorted(map(str, ok))}")
        return draw(st.sampled_from(cands))

    def shape(self, draw: st.DrawFn, min_rank: int = 0, max_rank: int = 3,
              min_side: int = 1, max_side: int = 4) -> tuple[int, ...]:
        """A tensor shape."""
        return tuple(draw(st.lists(st.integers(min_side, max_side), min_size=min_rank,
                                   max_size=max_rank)))

    def tensor(self, draw: st.DrawFn, shape: Sequence[int], dtype: torch.dtype,
               low: float = -3.0, high: float = 3.0) -> torch.Tensor:
        """A tensor with values in ``[low, high]`` (ints: the integers in it; bools:
        random)."""
        return values(draw, shape, dtype, low, high)


InputFn: TypeAlias = Callable[[st.DrawFn, InputSpec], "OpSample | tuple[Any, Any]"]
"""A drawing function ``fn(draw, spec)`` returning an `OpSample` or ``(operands, params)``."""

_F = TypeVar("_F", bound=Callable[..., Any])
_INPUTS: dict[type[ThunderOp], InputFn | st.SearchStrategy[Any]] = {}
_CACHE: dict[tuple[Any, ...], st.SearchStrategy[OpSample]] = {}


def register_inputs(*ops: type[ThunderOp], replace: bool = False) -> Callable[[_F], _F]:
    """Registers an input strategy for ``ops``: ``register_inputs(MyOp)(fn)``.

    ``fn`` is either a drawing function ``fn(draw, spec)`` (``spec`` an `InputSpec`) that
    returns an `OpSample` or ``(operands, params)``, or a ready hypothesis strategy of
    either. Subclasses of a registered op use its strategy unless they have their own.

    Args:
        ops: the op classes the strategy draws inputs of.
        replace: allow replacing an existing strategy (else `ValueError`).
    """

    def wrap(fn: _F) -> _F:
        for op in ops:
            if op in _INPUTS and not replace:
                raise ValueError(f"{op.name} already has an input strategy "
                                 "(pass replace=True to replace it)")
            _INPUTS[op] = fn
        _CACHE.clear()
        return fn

    return wrap


def _lookup(op: type[ThunderOp]) -> InputFn | st.SearchStrategy[Any] | None:
    for cls in op.__mro__:
        fn = _INPUTS.get(cls)  # type: ignore[arg-type]
        if fn is not None:
            return fn
    return None


def has_inputs(op: type[ThunderOp]) -> bool:
    """Whether `op_inputs` can draw inputs of ``op``."""
    return _lookup(op) is not None


def missing_inputs(ops: Iterable[type[ThunderOp]]) -> list[str]:
    """The names of the ops among ``ops`` that have no input strategy."""
    return sorted(op.name for op in ops if not has_inputs(op))


def _as_sample(v: Any) -> OpSample:
    if isinstance(v, OpSample):
        return v
    operands, params = v
    return OpSample(list(operands), dict(params))


@st.composite
def _drawn(draw: st.DrawFn, fn: InputFn, spec: InputSpec) -> OpSample:
    return _as_sample(fn(draw, spec))


def op_inputs(op: type[ThunderOp], *, dtypes: Iterable[torch.dtype] | None = None,
              for_vjp: bool = False) -> st.SearchStrategy[OpSample]:
    """A strategy of valid inputs (`OpSample`) of ``op``.

    Args:
        op: a prim, an ltorch op, or an op registered with `register_inputs`.
        dtypes: the data dtypes to draw from (default `DEFAULT_DTYPES`).
        for_vjp: inputs for a VJP check: float64 data and differentiable values.

    Raises:
        KeyError: ``op`` has no input strategy.
    """
    dts = tuple(dtypes) if dtypes is not None else None
    key = (op, dts, for_vjp)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    fn = _lookup(op)
    if fn is None:
        raise KeyError(f"{op.name} has no input strategy; register one with "
                       "thunder_ir.testing.register_inputs")
    if isinstance(fn, st.SearchStrategy):
        out: st.SearchStrategy[OpSample] = fn.map(_as_sample)
    else:
        out = _drawn(fn, InputSpec(op, dts, for_vjp))
    _CACHE[key] = out
    return out


def example_inputs(op: type[ThunderOp], *, dtypes: Iterable[torch.dtype] | None = None,
                   for_vjp: bool = False) -> OpSample:
    """One fixed sample of ``op`` (deterministic: hypothesis's simplest draw)."""
    out: list[OpSample] = []

    @settings(max_examples=1, database=None, derandomize=True, deadline=None,
              phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(op_inputs(op, dtypes=dtypes, for_vjp=for_vjp))
    def once(sample: OpSample) -> None:
        out.append(sample)

    once()
    return out[0]


# --------------------------------------------------------------------------- values


def values(draw: st.DrawFn, shape: Sequence[int], dtype: torch.dtype, low: float = -3.0,
           high: float = 3.0) -> torch.Tensor:
    """A tensor with values in ``[low, high]``: floats uniform, ints the integers in the
    range (never negative for uint8), bools random. Drawn from a seed, so it shrinks to a
    fixed pattern."""
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))
    shape = tuple(shape)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.5
    if is_float(dtype):
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low
                ).to(dtype)
    lo, hi = math.ceil(low), math.floor(high)
    if dtype == torch.uint8:
        lo = max(lo, 0)
    hi = max(hi, lo)
    return torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64).to(dtype)


def away_from_zero(draw: st.DrawFn, shape: Sequence[int], dtype: torch.dtype,
                   low: float = 0.5, high: float = 3.0) -> torch.Tensor:
    """Values with ``low <= |x| <= high`` and random signs (bools: all True)."""
    if dtype == torch.bool:
        return torch.ones(tuple(shape), dtype=torch.bool)
    mag = values(draw, shape, dtype, max(low, 1.0) if not is_float(dtype) else low, high)
    if dtype == torch.uint8:
        return mag
    sign = values(draw, shape, torch.bool)
    return torch.where(sign, mag, -mag)


def _specials(draw: st.DrawFn, spec: InputSpec, t: torch.Tensor) -> torch.Tensor:
    """Sometimes sets one element of a float tensor to inf, -inf, nan, 0 or -1.5."""
    if spec.for_vjp or not is_float(t.dtype) or t.numel() == 0 or not draw(st.booleans()):
        return t
    flat = t.flatten().clone()
    flat[draw(st.integers(0, t.numel() - 1))] = draw(st.sampled_from(_SPECIALS))
    return flat.reshape(t.shape)


def _index(draw: st.DrawFn, shape: Sequence[int], bound: int) -> torch.Tensor:
    """An int32/int64 index tensor with values in ``[0, bound)`` (repeats included)."""
    dtype = draw(st.sampled_from([torch.int64, torch.int32]))
    if bound == 0:
        return torch.zeros(tuple(shape), dtype=dtype)
    return values(draw, shape, dtype, 0, bound - 1)


def _subset(draw: st.DrawFn, n: int) -> tuple[int, ...]:
    """Distinct dims of a rank-n tensor, in drawn order."""
    dims = [d for d in range(n) if draw(st.booleans())]
    return tuple(draw(st.permutations(dims)))


def _neg(draw: st.DrawFn, d: int, rank: int) -> int:
    """``d`` or its negative spelling ``d - rank``."""
    return d - rank if draw(st.booleans()) else d


def _fits(py: type, dtype: torch.dtype) -> bool:
    """Whether a Python number of type ``py`` may join a ``dtype`` tensor in a prim."""
    return {bool: True, int: dtype != torch.bool, float: is_float(dtype)}[py]


def _short(op: type[ThunderOp]) -> str:
    return op.name.split(".", 1)[1]


def _t(shape: Sequence[int], dtype: torch.dtype) -> Any:
    return tensor_type(tuple(shape), dtype)


_ACCEPTED: dict[Any, frozenset[torch.dtype]] = {}


def _accepted(key: Any, probe: Callable[[torch.dtype], Any]) -> frozenset[torch.dtype]:
    """The dtypes for which ``probe`` (a shape-rule call) raises no `ShapeError`."""
    hit = _ACCEPTED.get(key)
    if hit is None:
        ok = set()
        for d in SUPPORTED_DTYPES:
            try:
                probe(d)
            except ShapeError:
                continue
            ok.add(d)
        hit = _ACCEPTED[key] = frozenset(ok)
    return hit


# Safe value ranges of elementwise functions (default: [-3, 3]).
_DOMAIN: dict[str, tuple[float, float]] = {
    "log": (0.1, 3.0), "log2": (0.1, 3.0), "log1p": (-0.9, 3.0), "sqrt": (0.1, 3.0),
    "rsqrt": (0.1, 3.0), "asin": (-0.95, 0.95), "acos": (-0.95, 0.95), "tan": (-1.3, 1.3),
}
_AWAY_FROM_ZERO = {"reciprocal"}


def _domain_tensor(draw: st.DrawFn, name: str, shape: Sequence[int], dtype: torch.dtype
                   ) -> torch.Tensor:
    if name in _AWAY_FROM_ZERO:
        return away_from_zero(draw, shape, dtype, 0.2, 3.0)
    low, high = _DOMAIN.get(name, (-3.0, 3.0))
    return values(draw, shape, dtype, low, high)


def _min_side(spec: InputSpec) -> int:
    """Prims take empty dims in shape-rule tests; VJP checks and ltorch ops draw none."""
    return 0 if not spec.for_vjp and spec.op.name.startswith("prims.") else 1


# --------------------------------------------------------------------------- prims


def _p_unary(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, _accepted(op, lambda d: op.infer(_t((), d))))
    shape = spec.shape(draw, min_side=_min_side(spec))
    return OpSample([_domain_tensor(draw, _short(op), shape, dtype)], {})


_DIVIDES = {"div", "remainder", "fmod", "floor_divide"}


def _p_number(draw: st.DrawFn, spec: InputSpec, name: str, side: int, dtype: torch.dtype
              ) -> Any:
    """A number operand of a binary prim on ``side`` (0: left), of a kind ``dtype`` takes."""
    if dtype == torch.bool:
        return True if name in _DIVIDES and side == 1 else draw(st.booleans())
    if is_float(dtype):
        if name == "pow":
            pool: list[Any] = [0, 1, 2, 3, -1, 0.5, 2.5, -1.5] if side == 1 else [2.0, 0.5, 3]
        elif name in _DIVIDES and side == 1:
            pool = [2.0, -1.5, 3, 0.75]
        elif name == "atan2" and side == 0:
            pool = [1.0, -2.5, 2]
        else:
            pool = [0.0, 1.5, -2.0, 3, 1, True]
        return draw(st.sampled_from(pool))
    if name == "pow" and side == 1:
        return draw(st.sampled_from([0, 1, 2, 3, True]))
    if name in _DIVIDES and side == 1:
        return draw(st.sampled_from([2, 3, 1, True] if dtype == torch.uint8 else [2, -3, 3, True]))
    return draw(st.sampled_from([1, 2, 5, 0, True, False] if dtype == torch.uint8
                                else [1, -2, 5, 0, True, False]))


def _binary_pair(draw: st.DrawFn, spec: InputSpec, name: str, shape: Sequence[int],
                 a_dtype: torch.dtype, b_dtype: torch.dtype
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Two tensors in ``name``'s safe domain (ties drawn in for extrema in VJP checks)."""
    a, b = values(draw, shape, a_dtype), values(draw, shape, b_dtype)
    if name in _DIVIDES:
        b = away_from_zero(draw, shape, b_dtype)
    elif name == "pow":
        if is_float(a_dtype):  # a positive base: no NaN, a derivative everywhere
            a = values(draw, shape, a_dtype, 0.5, 3.0)
        b = values(draw, shape, b_dtype, -2.0, 2.0) if is_float(b_dtype) else \
            values(draw, shape, b_dtype, 0, 3)
    elif name == "atan2" and spec.for_vjp:
        a = away_from_zero(draw, shape, a_dtype)
    elif name in ("maximum", "minimum") and spec.for_vjp and spec.op in P.PRIMS \
            and a_dtype == b_dtype:
        b = torch.where(values(draw, shape, torch.bool), a, b)
    return a, b


def _p_binary(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op, name = spec.op, _short(spec.op)
    dtype = spec.dtype(draw, _accepted(op, lambda d: op.infer(_t((), d), _t((), d))))
    shape = spec.shape(draw, min_side=_min_side(spec))
    a, b = _binary_pair(draw, spec, name, shape, dtype, dtype)
    sides = draw(st.sampled_from(["tt", "tn", "nt"]))
    ops: list[Any] = [a, b]
    if sides == "tn":
        ops[1] = _p_number(draw, spec, name, 1, dtype)
    elif sides == "nt":
        ops[0] = _p_number(draw, spec, name, 0, dtype)
    return OpSample(ops, {})


def _number_of_kind(draw: st.DrawFn, dtype: torch.dtype, floats: bool = True) -> Any:
    """A number that fits a ``dtype`` tensor in a prim (see `prims._number_fits`)."""
    kinds: list[type] = [k for k in (bool, int, float) if _fits(k, dtype)]
    kind = draw(st.sampled_from(kinds if floats else [k for k in kinds if k is not float]))
    if kind is bool:
        return draw(st.booleans())
    if kind is int:
        return draw(st.integers(0 if dtype == torch.uint8 else -3, 5))
    return draw(st.sampled_from([0.5, 1.5, 2.0, -1.25]))


@register_inputs(P.WhereOp)
def _p_where(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, min_side=_min_side(spec))
    cond = values(draw, shape, torch.bool)
    sides = draw(st.sampled_from(["tt", "tn", "nt"] if spec.for_vjp else
                                 ["tt", "tn", "nt", "nn"]))
    if sides == "nn":
        kind = draw(st.sampled_from([bool, int, float]))
        pools: dict[type, list[Any]] = {bool: [True, False], int: [1, -2, 3],
                                        float: [0.5, -1.25, 2.0]}
        pool = pools[kind]
        return OpSample([cond, draw(st.sampled_from(pool)), draw(st.sampled_from(pool))], {})
    dtype = spec.dtype(draw, ANY_KIND)
    ops = [values(draw, shape, dtype) if s == "t" else _number_of_kind(draw, dtype)
           for s in sides]
    return OpSample([cond, *ops], {})


@register_inputs(P.ConvertElementTypeOp)
def _p_convert(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = values(draw, spec.shape(draw, min_side=_min_side(spec)), spec.dtype(draw, ANY_KIND))
    return OpSample([x], {"dtype": spec.any_dtype(draw)})


@register_inputs(P.BroadcastInDimOp)
def _p_broadcast_in_dim(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, max_rank=4, min_side=_min_side(spec), max_side=3)
    dims = tuple(d for d in range(len(shape)) if draw(st.booleans()))
    in_shape = [draw(st.sampled_from([shape[d], 1])) for d in dims]
    x = values(draw, in_shape, spec.dtype(draw, ANY_KIND))
    return OpSample([x], {"shape": shape, "broadcast_dims": dims})


@register_inputs(P.ReshapeOp)
def _p_reshape(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    factors = draw(st.lists(st.integers(_min_side(spec), 3), max_size=4))

    def grouping() -> tuple[int, ...]:
        cuts = sorted(draw(st.lists(st.integers(0, len(factors)), max_size=4)))
        bounds = [0, *cuts, len(factors)]
        return tuple(math.prod(factors[a:b]) for a, b in itertools.pairwise(bounds))

    x = values(draw, grouping(), spec.dtype(draw, ANY_KIND))
    return OpSample([x], {"shape": grouping()})


@register_inputs(P.TransposeOp)
def _p_transpose(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, max_rank=4, min_side=_min_side(spec))
    perm = tuple(draw(st.permutations(range(len(shape)))))
    return OpSample([values(draw, shape, spec.dtype(draw, ANY_KIND))], {"permutation": perm})


@register_inputs(P.SliceOp)
def _p_slice(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, min_side=_min_side(spec), max_side=6)
    starts, ends, strides = [], [], []
    for size in shape:
        lo = draw(st.integers(0, size))
        starts.append(lo)
        ends.append(draw(st.integers(lo, size)))
        strides.append(draw(st.integers(1, 3)))
    x = values(draw, shape, spec.dtype(draw, ANY_KIND))
    return OpSample([x], {"start_indices": tuple(starts), "end_indices": tuple(ends),
                          "strides": draw(st.sampled_from([tuple(strides), None]))})


@register_inputs(P.SqueezeOp)
def _p_squeeze(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    sizes = [1, 1, 2, 3] if spec.for_vjp else [0, 1, 1, 2, 3]
    shape = tuple(draw(st.lists(st.sampled_from(sizes), max_size=4)))
    ones = [i for i, s in enumerate(shape) if s == 1]
    dims = tuple(draw(st.permutations([i for i in ones if draw(st.booleans())])))
    return OpSample([values(draw, shape, spec.dtype(draw, ANY_KIND))], {"dims": dims})


@register_inputs(P.PadOp)
def _p_pad(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, min_side=_min_side(spec))
    config = []
    for size in shape:
        lo, hi, mid = draw(st.integers(-3, 3)), draw(st.integers(-3, 3)), draw(st.integers(0, 2))
        n = size + lo + hi + max(size - 1, 0) * mid
        config.append((lo, hi - min(n, 0), mid))  # raise `hi` so the result is not negative
    dtype = spec.dtype(draw, ANY_KIND)
    return OpSample([values(draw, shape, dtype)],
                    {"padding_value": _number_of_kind(draw, dtype),
                     "padding_config": tuple(config)})


@register_inputs(P.CatOp)
def _p_cat(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = list(spec.shape(draw, min_rank=1, min_side=_min_side(spec)))
    dim = draw(st.integers(0, len(shape) - 1))
    dtype = spec.dtype(draw, ANY_KIND)
    ts = []
    for _ in range(draw(st.integers(1, 3))):
        shape[dim] = draw(st.integers(0, 3))
        ts.append(values(draw, shape, dtype))
    return OpSample([ts], {"dim": dim})


@register_inputs(P.FlipOp)
def _p_flip(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, min_side=_min_side(spec))
    x = values(draw, shape, spec.dtype(draw, ANY_KIND))
    return OpSample([x], {"dims": _subset(draw, len(shape))})


def _p_reduction(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, _accepted(op, lambda d: op.infer(_t((), d), dims=())))
    shape = spec.shape(draw, min_side=_min_side(spec))
    dims = _subset(draw, len(shape))
    if getattr(op, "NEEDS_NONEMPTY", False):  # amax/amin: no extremum over an empty dim
        dims = tuple(d for d in dims if shape[d])
    x = values(draw, shape, dtype)
    if spec.for_vjp and op is P.ProdOp:  # groups with no, one and several zeros
        x = values(draw, shape, dtype, 0.5, 1.5)
        zeros = values(draw, shape, torch.float64, 0.0, 1.0) < draw(st.sampled_from([0, .2, .5]))
        x = torch.where(zeros, 0.0, x)
    elif spec.for_vjp and op in (P.AmaxOp, P.AminOp) and draw(st.booleans()):
        x = values(draw, shape, dtype, -2.0, 2.0).round()  # ties
    return OpSample([x], {"dims": dims})


@register_inputs(P.VarOp)
def _p_var(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    sample = _p_reduction(draw, spec)
    correction = draw(st.sampled_from([0, 1, 0.5, 1.0, 2]))
    shape = sample.operands[0].shape
    if spec.for_vjp and math.prod(shape[d] for d in sample.params["dims"]) <= correction:
        correction = 0  # the divisor n - correction must be positive to differentiate
    sample.params["correction"] = correction
    return sample


def _p_arg_reduction(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, _accepted(op, lambda d: op.infer(_t((1,), d), dim=0)))
    shape = list(spec.shape(draw, min_rank=1, min_side=_min_side(spec)))
    dim = draw(st.integers(0, len(shape) - 1))
    shape[dim] = max(shape[dim], 1)
    return OpSample([values(draw, shape, dtype)], {"dim": dim})


@register_inputs(P.MatmulOp)
def _p_matmul(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, _accepted(op, lambda d: op.infer(_t((2,), d), _t((2,), d))))
    lo = _min_side(spec)
    batch = spec.shape(draw, max_rank=2, min_side=lo, max_side=3)
    m, k, n = (draw(st.integers(lo, 3)) for _ in range(3))

    def operand(core: list[int]) -> list[int]:
        if draw(st.booleans()):
            return core[-1:] if core[-1] == k else core[:1]  # 1-D operand
        cut = draw(st.integers(0, len(batch)))
        return [draw(st.sampled_from([b, 1])) for b in batch[cut:]] + core

    a, b = operand([m, k]), operand([k, n])
    return OpSample([values(draw, a, dtype), values(draw, b, dtype)], {})


@register_inputs(P.LinearOp)
def _p_linear(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, _accepted(
        op, lambda d: op.infer(_t((2,), d), _t((3, 2), d), _t((3,), d))))
    lo = _min_side(spec)
    k = draw(st.integers(lo, 3))
    x = [*spec.shape(draw, max_rank=2, min_side=lo, max_side=3), k]
    w = draw(st.sampled_from([[k], [draw(st.integers(lo, 3)), k]]))
    with_bias = draw(st.booleans()) and (len(w) == 2 or len(x) == 1)  # as F.linear allows
    bias = values(draw, w[:-1], dtype) if with_bias else None
    return OpSample([values(draw, x, dtype), values(draw, w, dtype), bias], {})


@register_inputs(P.IotaOp)
def _p_iota(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    dtype = spec.any_dtype(draw, NUMERIC_KIND)
    kinds = [int, float] if is_float(dtype) else [int]
    start = draw(st.integers(-3, 5)) if draw(st.sampled_from(kinds)) is int else \
        draw(st.sampled_from([0.5, 1.5, -2.0]))
    step = draw(st.integers(-2, 3)) if draw(st.sampled_from(kinds)) is int else \
        draw(st.sampled_from([0.25, 1.5, -0.5]))
    if dtype == torch.uint8:
        start, step = abs(start), abs(step)
    return OpSample([], {"length": draw(st.integers(0, 5)), "start": start, "step": step,
                         "device": "cpu", "dtype": dtype})


@register_inputs(P.FullOp)
def _p_full(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    dtype = spec.any_dtype(draw)
    return OpSample([], {"shape": spec.shape(draw, min_side=0),
                         "fill_value": _number_of_kind(draw, dtype), "device": "cpu",
                         "dtype": dtype})


@register_inputs(P.BernoulliOp)
def _p_bernoulli(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    params = {"shape": spec.shape(draw, min_side=0),
              "p": draw(st.sampled_from([0.0, 0.25, 0.5, 1.0])), "device": "cpu",
              "dtype": spec.any_dtype(draw, FLOAT_KIND)}
    return OpSample([], params)


@register_inputs(P.BernoulliLikeOp)
def _p_bernoulli_like(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = values(draw, spec.shape(draw, min_side=0), spec.dtype(draw, FLOAT_KIND))
    return OpSample([x], {"p": draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))})


@register_inputs(P.TakeOp)
def _p_take(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, min_rank=1, min_side=_min_side(spec))
    dim = draw(st.integers(0, len(shape) - 1))
    n = draw(st.integers(_min_side(spec), 4)) if shape[dim] else 0
    x = values(draw, shape, spec.dtype(draw, ANY_KIND))
    return OpSample([x, _index(draw, (n,), shape[dim])], {"dim": dim})


@register_inputs(P.GatherOp)
def _p_gather(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    lo = _min_side(spec)
    shape = spec.shape(draw, min_rank=1, min_side=lo)
    dim = draw(st.integers(0, len(shape) - 1))
    idx = [draw(st.integers(lo, s)) for s in shape]
    idx[dim] = draw(st.integers(lo, 4)) if shape[dim] else 0
    x = values(draw, shape, spec.dtype(draw, ANY_KIND))
    return OpSample([x, _index(draw, idx, shape[dim])], {"dim": dim})


@register_inputs(P.IndexAddOp)
def _p_index_add(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, _accepted(
        op, lambda d: op.infer(_t((1,), d), _t((1,), torch.int64), _t((1,), d), dim=0)))
    shape = spec.shape(draw, min_rank=1, min_side=_min_side(spec))
    dim = draw(st.integers(0, len(shape) - 1))
    n = draw(st.integers(_min_side(spec), 4)) if shape[dim] else 0
    src = list(shape)
    src[dim] = n
    ops = [values(draw, shape, dtype), _index(draw, (n,), shape[dim]),
           values(draw, src, dtype)]
    return OpSample(ops, {"dim": dim})


@register_inputs(P.ScatterAddOp)
def _p_scatter_add(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, _accepted(
        op, lambda d: op.infer(_t((1,), d), _t((1,), torch.int64), _t((1,), d), dim=0)))
    lo = _min_side(spec)
    shape = spec.shape(draw, min_rank=1, min_side=lo)
    dim = draw(st.integers(0, len(shape) - 1))
    idx = [draw(st.integers(lo, s)) for s in shape]
    idx[dim] = draw(st.integers(lo, 3)) if shape[dim] else 0
    # A src larger than the index is valid, but torch cannot differentiate it.
    src = idx if spec.for_vjp else [i + draw(st.integers(0, 1)) for i in idx]
    ops = [values(draw, shape, dtype), _index(draw, idx, shape[dim]),
           values(draw, src, dtype)]
    return OpSample(ops, {"dim": dim})


@register_inputs(P.ConstantOp)
def _p_constant(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    value = draw(st.one_of(st.booleans(), st.integers(-(2**40), 2**40),
                           st.floats(allow_nan=False, width=64)))
    return OpSample([], {"value": value})


for _op in P.PRIMS:
    if _op in _INPUTS:
        continue
    if issubclass(_op, P.UnaryOp):
        register_inputs(_op)(_p_unary)
    elif issubclass(_op, P.BinaryOp):
        register_inputs(_op)(_p_binary)
    elif issubclass(_op, P.ArgReductionOp):
        register_inputs(_op)(_p_arg_reduction)
    elif issubclass(_op, P.ReductionOp):
        register_inputs(_op)(_p_reduction)


# --------------------------------------------------------------------------- ltorch: helpers

def _broadcast_of(draw: st.DrawFn, shape: Sequence[int]) -> tuple[int, ...]:
    """A shape that broadcasts with ``shape`` (some dims 1, some leading dims dropped)."""
    out = list(shape[draw(st.integers(0, len(shape))):])
    return tuple(1 if draw(st.booleans()) else s for s in out)


def _data(draw: st.DrawFn, spec: InputSpec, shape: Sequence[int], allowed: Iterable[torch.dtype],
          low: float = -3.0, high: float = 3.0, specials: bool = False) -> torch.Tensor:
    """A data tensor of a dtype among ``allowed`` (special values sometimes, if asked)."""
    t = values(draw, shape, spec.dtype(draw, allowed), low, high)
    return _specials(draw, spec, t) if specials else t


def _dims_of(draw: st.DrawFn, rank: int) -> Any:
    """A ``dim`` argument of a multi-dim reduction: None, an int or a tuple (may be ())."""
    if rank == 0:
        return draw(st.sampled_from([None, (), 0, -1]))
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none":
        return None
    if kind == "int":
        return draw(st.integers(-rank, rank - 1))
    picked = draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank))
    return tuple(_neg(draw, d, rank) for d in picked)


def _reduced_count(shape: Sequence[int], dim: Any) -> int:
    """How many elements each output of a reduction over ``dim`` combines."""
    if dim is None or dim == ():
        return math.prod(shape)
    dims = (dim,) if isinstance(dim, int) else dim
    return math.prod(shape[d] for d in dims) if shape else 1


# --------------------------------------------------------------------------- ltorch: binary

_BITWISE = (L.BitwiseAndOp, L.BitwiseOrOp, L.BitwiseXorOp)
_LT_DIVIDES = (L.DivOp, L.RemainderOp, L.FmodOp, L.FloorDivideOp)
_ANY_DTYPE_BINARY = (L.LogicalAndOp, L.LogicalOrOp, L.EqOp, L.NeOp, L.MaximumOp, L.MinimumOp,
                     L.AddOp, L.MulOp, L.LtOp, L.LeOp, L.GtOp, L.GeOp)


def _lt_binary_kind(op: type[ThunderOp]) -> frozenset[torch.dtype]:
    if op in _BITWISE:
        return INT_KIND | BOOL_KIND
    if op in _ANY_DTYPE_BINARY:
        return ANY_KIND
    return NUMERIC_KIND


def _lt_binary(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op, name = spec.op, _short(spec.op)
    kind = _lt_binary_kind(op)
    shape = spec.shape(draw)
    a_dtype = spec.dtype(draw, kind)
    b_dtype = spec.dtype(draw, kind)
    b_shape = _broadcast_of(draw, shape)
    if spec.for_vjp:
        a = _binary_pair(draw, spec, name, shape, a_dtype, a_dtype)[0]
        b = _binary_pair(draw, spec, name, b_shape, b_dtype, b_dtype)[1]
    else:
        a = _specials(draw, spec, values(draw, shape, a_dtype))
        b = _specials(draw, spec, values(draw, b_shape, b_dtype))
    takes_number = issubclass(op, L.BinaryOp) or op is L.PowOp
    other: Any = b
    if takes_number and draw(st.booleans()):
        if op in _BITWISE:
            other = draw(st.integers(-3, 3) | st.booleans())
        elif spec.for_vjp:
            other = _p_number(draw, spec, name, 1, torch.float64)
            other = 1.0 if other is True else other  # torch.sub takes no bool
        else:
            other = draw(st.integers(-3, 3) | st.sampled_from([0.5, -1.25, 2.75, 0.0]))
    a_first, rhs = a, other
    if not spec.for_vjp and draw(st.booleans()):
        a_first, rhs = rhs, a_first
    lhs = a_first
    rt = torch.result_type(lhs, rhs)
    if not is_float(rt) and op in _LT_DIVIDES:  # int division by zero raises
        if isinstance(rhs, torch.Tensor):
            rhs = torch.ones_like(rhs) if rhs.dtype == torch.bool else \
                torch.where(rhs == 0, torch.ones_like(rhs), rhs)
        else:
            rhs = rhs or 1
    if op is L.PowOp and not is_float(rt):  # ints to negative powers raise
        if not isinstance(rhs, torch.Tensor):
            rhs = abs(rhs)
        elif rhs.dtype != torch.bool:
            rhs = rhs.abs()
    params: dict[str, Any] = {}
    if op is L.DivOp:
        mode = draw(st.sampled_from([None, "trunc", "floor"]))
        if mode is not None:
            params["rounding_mode"] = mode
    if op in (L.AddOp, L.SubOp) and rt != torch.bool and draw(st.booleans()):
        params["alpha"] = draw(st.sampled_from([1, 2, -3] + ([0.5] if is_float(rt) else [])))
    return OpSample([lhs, rhs], params)


# --------------------------------------------------------------------------- ltorch: unary

_FLOAT_UNARY = (L.ExpOp, L.Exp2Op, L.Expm1Op, L.LogOp, L.Log1pOp, L.Log2Op, L.SinOp, L.CosOp,
                L.TanOp, L.TanhOp, L.AsinOp, L.AcosOp, L.AtanOp, L.SinhOp, L.CoshOp, L.SqrtOp,
                L.RsqrtOp, L.ReciprocalOp, L.ErfOp, L.ErfcOp)
_OTHER_UNARY: dict[type[ThunderOp], frozenset[torch.dtype]] = {
    L.NegOp: NUMERIC_KIND, L.AbsOp: NUMERIC_KIND, L.SignOp: ANY_KIND,
    L.FloorOp: NUMERIC_KIND, L.CeilOp: NUMERIC_KIND, L.TruncOp: NUMERIC_KIND,
    L.IsnanOp: ANY_KIND, L.IsinfOp: ANY_KIND, L.IsfiniteOp: ANY_KIND,
    L.LogicalNotOp: ANY_KIND, L.BitwiseNotOp: INT_KIND | BOOL_KIND,
}


def _lt_unary(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    kind = ANY_KIND if op in _FLOAT_UNARY else _OTHER_UNARY[op]
    dtype = spec.dtype(draw, kind)
    x = _domain_tensor(draw, _short(op), spec.shape(draw), dtype)
    return OpSample([_specials(draw, spec, x)], {})


@register_inputs(L.RoundOp)
def _lt_round(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    dtype = spec.dtype(draw, FLOAT_KIND)
    if draw(st.booleans()):
        x = values(draw, spec.shape(draw), dtype, -50.0, 50.0)
        return OpSample([x], {"decimals": draw(st.integers(-2, 3))})
    return OpSample([_specials(draw, spec, values(draw, spec.shape(draw), dtype))], {})


# --------------------------------------------------------------------------- ltorch: selection


def _value_or_number(draw: st.DrawFn, spec: InputSpec, shape: Sequence[int]) -> Any:
    if draw(st.booleans()):
        if spec.for_vjp:
            return draw(st.sampled_from([0.5, -2.25, 1.5]))
        return draw(st.integers(-3, 3) | st.sampled_from([0.5, -2.25]) | st.booleans())
    return _data(draw, spec, _broadcast_of(draw, shape), ANY_KIND)


@register_inputs(L.WhereOp)
def _lt_where(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw)
    cond = values(draw, _broadcast_of(draw, shape), torch.bool)
    a = _value_or_number(draw, spec, shape)
    b = _value_or_number(draw, spec, shape)
    if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
        if spec.for_vjp:
            a = _data(draw, spec, shape, ANY_KIND)
        cond = values(draw, shape, torch.bool)
    return OpSample([cond, a, b], {})


@register_inputs(L.MaskedFillOp)
def _lt_masked_fill(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw)
    x = _data(draw, spec, shape, ANY_KIND)
    mask = values(draw, _broadcast_of(draw, shape), torch.bool)
    if draw(st.booleans()):  # the mask broadcasts the input's shape up
        x = _data(draw, spec, _broadcast_of(draw, shape), ANY_KIND)
        mask = values(draw, shape, torch.bool)
    if is_float(x.dtype):
        value: Any = draw(st.sampled_from([0.5, -2.0, 3] if spec.for_vjp else
                                          [-math.inf, 0.5, -2.0, 3]))
    elif x.dtype == torch.bool:
        value = draw(st.booleans())
    else:
        value = draw(st.integers(0 if x.dtype == torch.uint8 else -5, 5))
    return OpSample([x, mask], {"value": value})


@register_inputs(L.ClampOp)
def _lt_clamp(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw), NUMERIC_KIND, specials=True)
    lo = draw(st.none() | st.integers(-2, 0) | st.sampled_from([-1.5, 0.25]))
    hi = draw(st.none() | st.integers(0, 2) | st.sampled_from([1.5, -0.5]))
    if lo is None and hi is None:
        hi = 1
    return OpSample([x], {"min": lo, "max": hi})


@register_inputs(L.ToDtypeOp)
def _lt_to_dtype(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw), ANY_KIND, specials=True)
    dtype = spec.any_dtype(draw)
    if is_float(x.dtype) and not is_float(dtype):  # casting inf or nan to an int is UB
        x = torch.nan_to_num(x, nan=0.0, posinf=7.0, neginf=-7.0)
    if dtype == torch.uint8:
        x = x.abs()
    return OpSample([x], {"dtype": dtype})


# --------------------------------------------------------------------------- ltorch: reductions


@register_inputs(L.SumOp, L.MeanOp)
def _lt_sum_mean(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    mean = issubclass(spec.op, L.MeanOp)
    x = _data(draw, spec, spec.shape(draw), FLOAT_KIND if mean else ANY_KIND)
    dtype = None
    if not spec.for_vjp:
        dtype = draw(st.none() | st.just(spec.any_dtype(draw, FLOAT_KIND if mean else
                                                        NUMERIC_KIND)))
    return OpSample([x], {"dim": _dims_of(draw, x.ndim), "keepdim": draw(st.booleans()),
                          "dtype": dtype})


@register_inputs(L.VarOp)
def _lt_var(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw), FLOAT_KIND)
    dim = _dims_of(draw, x.ndim)
    correction = draw(st.sampled_from([0, 1, 2, 0.5, True, False]))
    if spec.for_vjp and _reduced_count(x.shape, dim) <= correction:
        correction = 0  # n - correction must be positive to differentiate
    return OpSample([x], {"dim": dim, "keepdim": draw(st.booleans()),
                          "correction": correction})


@register_inputs(L.AmaxOp, L.AminOp)
def _lt_amax_amin(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw), ANY_KIND, specials=True)
    dim = _dims_of(draw, x.ndim)
    return OpSample([x], {"dim": () if dim is None else dim, "keepdim": draw(st.booleans())})


@register_inputs(L.ProdOp)
def _lt_prod(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw), ANY_KIND, -1.5, 1.5)
    r = max(x.ndim, 1)
    dim = draw(st.none() | st.integers(-r, r - 1))
    dtype = None
    if not spec.for_vjp:
        dtype = draw(st.none() | st.sampled_from([torch.float64, torch.int64]))
    keepdim = dim is not None and draw(st.booleans())  # torch: no keepdim without dim
    return OpSample([x], {"dim": dim, "keepdim": keepdim, "dtype": dtype})


@register_inputs(L.MaxOp, L.MinOp)
def _lt_max_min(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    return OpSample([_data(draw, spec, spec.shape(draw), ANY_KIND, specials=True)], {})


@register_inputs(L.MaxDimOp, L.MinDimOp, L.ArgmaxOp, L.ArgminOp)
def _lt_arg_reductions(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    arg = issubclass(spec.op, L.ArgmaxOp | L.ArgminOp)
    x = _data(draw, spec, spec.shape(draw), NUMERIC_KIND if arg else ANY_KIND)
    r = max(x.ndim, 1)
    dim: int | None = draw(st.integers(-r, r - 1))
    if arg and draw(st.booleans()):
        dim = None
    return OpSample([x], {"dim": dim, "keepdim": draw(st.booleans())})


# --------------------------------------------------------------------------- ltorch: shape ops


@register_inputs(L.ReshapeOp, L.ViewOp)
def _lt_reshape(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw), ANY_KIND)
    factors = [p for p in range(1, x.numel() + 1) if x.numel() % p == 0]
    shape: list[int] = []
    rest = x.numel()
    for _ in range(draw(st.integers(0, 3))):
        f = draw(st.sampled_from([p for p in factors if rest % p == 0]))
        shape.append(f)
        rest //= f
    shape.append(rest)
    if draw(st.booleans()):
        shape[draw(st.integers(0, len(shape) - 1))] = -1
    if rest == 1 and -1 not in shape and draw(st.booleans()):
        shape.pop()
    key = "shape" if issubclass(spec.op, L.ReshapeOp) else "size"
    return OpSample([x], {key: tuple(shape)})


@register_inputs(L.PermuteOp)
def _lt_permute(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw), ANY_KIND)
    perm = [_neg(draw, p, x.ndim) for p in draw(st.permutations(range(x.ndim)))]
    return OpSample([x], {"dims": tuple(perm)})


@register_inputs(L.TransposeOp)
def _lt_transpose(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw), ANY_KIND)
    r = max(x.ndim, 1)
    return OpSample([x], {"dim0": draw(st.integers(-r, r - 1)),
                          "dim1": draw(st.integers(-r, r - 1))})


@register_inputs(L.ContiguousOp, L.CloneOp)
def _lt_identity(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    return OpSample([_data(draw, spec, spec.shape(draw), ANY_KIND)], {})


@register_inputs(L.FlattenOp)
def _lt_flatten(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw), ANY_KIND)
    r = max(x.ndim, 1)
    s = draw(st.integers(0, r - 1))
    e = draw(st.integers(s, r - 1))
    return OpSample([x], {"start_dim": _neg(draw, s, r), "end_dim": _neg(draw, e, r)})


@register_inputs(L.UnsqueezeOp)
def _lt_unsqueeze(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw), ANY_KIND)
    return OpSample([x], {"dim": draw(st.integers(-x.ndim - 1, x.ndim))})


@register_inputs(L.SqueezeOp)
def _lt_squeeze(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw, max_side=3), ANY_KIND)
    r = max(x.ndim, 1)
    kind = draw(st.sampled_from(["all", "int", "dims"]))
    dim: Any = None
    if kind == "int":
        dim = draw(st.integers(-r, r - 1))
    elif kind == "dims":
        dim = _dims_of(draw, x.ndim)
        dim = () if dim is None else dim
    return OpSample([x], {"dim": dim})


@register_inputs(L.ExpandOp)
def _lt_expand(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    target = spec.shape(draw)
    x = _data(draw, spec, _broadcast_of(draw, target), ANY_KIND)
    lead = len(target) - x.ndim
    size = [-1 if i >= lead and x.shape[i - lead] == s and draw(st.booleans()) else s
            for i, s in enumerate(target)]
    return OpSample([x], {"size": tuple(size)})


@register_inputs(L.TriuOp, L.TrilOp)
def _lt_triu_tril(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw, min_rank=2), ANY_KIND)
    return OpSample([x], {"diagonal": draw(st.integers(-3, 3))})


@register_inputs(L.SplitOp)
def _lt_split(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw, min_rank=1, max_side=6), ANY_KIND)
    dim = draw(st.integers(-x.ndim, x.ndim - 1))
    n = x.shape[dim]
    if draw(st.booleans()):
        arg: Any = draw(st.integers(1, n + 1))
    else:
        cuts = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
        arg = tuple(b - a for a, b in zip([0, *cuts], [*cuts, n]))
    return OpSample([x], {"split_size_or_sections": arg, "dim": dim})


@register_inputs(L.ChunkOp)
def _lt_chunk(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw, min_rank=1, max_side=6), ANY_KIND)
    dim = draw(st.integers(-x.ndim, x.ndim - 1))
    return OpSample([x], {"chunks": draw(st.integers(1, x.shape[dim] + 1)), "dim": dim})


@register_inputs(L.CatOp, L.StackOp)
def _lt_cat_stack(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    cat = issubclass(spec.op, L.CatOp)
    shape = spec.shape(draw, min_rank=1 if cat else 0)
    r = len(shape) + (not cat)
    dim = draw(st.integers(-r, r - 1))
    xs = []
    for _ in range(draw(st.integers(1, 3))):
        s = list(shape)
        if cat:
            s[dim % len(shape)] = draw(st.integers(0, 3))
        xs.append(_data(draw, spec, s, ANY_KIND))
    if cat and not spec.for_vjp and draw(st.booleans()):
        xs.append(torch.zeros(0))  # legacy empty 1-D tensors are skipped
    return OpSample([xs], {"dim": dim})


@register_inputs(L.GetitemOp)
def _lt_getitem(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw, min_rank=1), ANY_KIND)
    items: list[Any] = []
    idx: list[torch.Tensor] = []
    # (a 0-d index tensor is read as an int by torch: data-dependent, so not drawn)
    index_shape = spec.shape(draw, min_rank=1, max_rank=2, max_side=3)
    n_dims = draw(st.integers(1, x.ndim))
    ellipsis_at = draw(st.none() | st.integers(0, n_dims))
    for d in range(n_dims):
        if ellipsis_at == d:
            items.append(...)
        if draw(st.integers(0, 5)) == 0:
            items.append(None)
        n = x.shape[d] if ellipsis_at is None or d < ellipsis_at else \
            x.shape[x.ndim - n_dims + d]
        kind = draw(st.sampled_from(["int", "slice", "tensor"]))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            lo = draw(st.none() | st.integers(-n - 1, n + 1))
            hi = draw(st.none() | st.integers(-n - 1, n + 1))
            items.append(slice(lo, hi, draw(st.none() | st.integers(1, 3))))
        else:
            t = values(draw, index_shape, torch.int64, -n, n - 1)
            idx.append(t.to(draw(st.sampled_from([torch.int64, torch.int32]))))
            items.append(OperandRef(len(idx) - 1))
    if ellipsis_at == n_dims:
        items.append(...)
    index: Any = tuple(items)
    if len(items) == 1 and draw(st.booleans()):
        index = items[0]
    return OpSample([x, idx], {"index": index})


# --------------------------------------------------------------------------- ltorch: creation


@register_inputs(L.ArangeOp)
def _lt_arange(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    start = draw(st.integers(-5, 5) | st.sampled_from([0.5, -1.25]))
    length = draw(st.integers(0, 8))
    step = draw(st.sampled_from([1, 2, -1, 0.5, -0.75, 3]))
    dtype = draw(st.none() | st.just(spec.any_dtype(draw, NUMERIC_KIND - {torch.uint8})))
    if dtype is not None and not is_float(dtype) and (isinstance(start, float) or
                                                      isinstance(step, float)):
        dtype = None
    end = start + length * step
    if draw(st.booleans()):
        return OpSample([], {"start": abs(end), "dtype": dtype})
    return OpSample([], {"start": start, "end": end, "step": step, "dtype": dtype})


def _fill_for(draw: st.DrawFn, dtype: torch.dtype | None, fill: Any) -> Any:
    """``fill`` made to fit ``dtype`` (None: left as drawn)."""
    if dtype is None or is_float(dtype):
        return fill
    fill = int(fill) if math.isfinite(fill) else 1
    if dtype == torch.uint8:
        fill = abs(fill)
    return bool(fill) if dtype == torch.bool else fill


@register_inputs(L.ZerosOp, L.OnesOp, L.FullOp, L.EmptyOp)
def _lt_zeros_ones_full(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    size = spec.shape(draw, min_side=0)
    dtype = draw(st.none() | st.just(spec.any_dtype(draw)))
    params: dict[str, Any] = {"size": size, "dtype": dtype}
    if issubclass(spec.op, L.FullOp):
        fill = draw(st.integers(-3, 3) | st.sampled_from([0.5, True, -math.inf]))
        params["fill_value"] = _fill_for(draw, dtype, fill)
    return OpSample([], params)


@register_inputs(L.ZerosLikeOp, L.OnesLikeOp, L.FullLikeOp)
def _lt_like(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = _data(draw, spec, spec.shape(draw), ANY_KIND)
    dtype = draw(st.none() | st.just(spec.any_dtype(draw)))
    params: dict[str, Any] = {"dtype": dtype}
    if issubclass(spec.op, L.FullLikeOp):
        fill = draw(st.integers(-3, 3) | st.sampled_from([0.5, False]))
        params["fill_value"] = _fill_for(draw, dtype or x.dtype, fill)
    return OpSample([x], params)


for _op in (*_FLOAT_UNARY, *_OTHER_UNARY):
    register_inputs(_op)(_lt_unary)
for _op in (L.AddOp, L.SubOp, L.MulOp, L.DivOp, L.FloorDivideOp, L.RemainderOp, L.FmodOp,
            L.PowOp, L.MaximumOp, L.MinimumOp, L.Atan2Op, L.EqOp, L.NeOp, L.LtOp, L.LeOp,
            L.GtOp, L.GeOp, *_BITWISE, L.LogicalAndOp, L.LogicalOrOp):
    register_inputs(_op)(_lt_binary)


# --------------------------------------------------------------------------- ltorch: nn

def _side(draw: st.DrawFn, lo: int = 1, hi: int = 4) -> int:
    return draw(st.integers(lo, hi))


@register_inputs(N.MatmulOp)
def _nn_matmul(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """1-D promotion and batch dims broadcast from size 1 or missing, on either side."""
    dtype = spec.dtype(draw, FLOAT_KIND)
    n, k, p = _side(draw), _side(draw), _side(draw)
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    a_batch = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, 2)):]
    b_batch = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, 2)):]
    a = (k,) if draw(st.booleans()) else (*a_batch, n, k)
    b = (k,) if draw(st.booleans()) else (*b_batch, k, p)
    return OpSample([values(draw, a, dtype), values(draw, b, dtype)], {})


@register_inputs(N.BmmOp)
def _nn_bmm(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    dtype = spec.dtype(draw, FLOAT_KIND)
    b, n, m, p = _side(draw), _side(draw), _side(draw), _side(draw)
    return OpSample([values(draw, (b, n, m), dtype), values(draw, (b, m, p), dtype)], {})


@register_inputs(N.LinearOp)
def _nn_linear(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """2-D and 1-D weights, with and without bias."""
    dtype = spec.dtype(draw, FLOAT_KIND)
    batch = draw(st.lists(st.integers(1, 4), max_size=2))
    n_in, n_out = _side(draw, 1, 6), _side(draw, 1, 6)
    bias = draw(st.booleans())
    w: tuple[int, ...]
    b: tuple[int, ...]
    if draw(st.booleans()):  # torch allows a bias with a 1-D weight only for a 1-D input
        batch = [] if bias else batch
        w, b = (n_in,), ()
    else:
        w, b = (n_out, n_in), (n_out,)
    return OpSample([values(draw, (*batch, n_in), dtype), values(draw, w, dtype),
                     values(draw, b, dtype) if bias else None], {})


@register_inputs(N.ReluOp, N.SigmoidOp, N.GeluOp, N.SiluOp)
def _nn_activation(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    on_ints = spec.op in (N.ReluOp, N.SigmoidOp)
    bound = 4.0 if spec.for_vjp else 8.0
    x = _data(draw, spec, spec.shape(draw), NUMERIC_KIND if on_ints else FLOAT_KIND,
              -bound, bound)
    params: dict[str, Any] = {}
    if issubclass(spec.op, N.GeluOp):
        approximate = draw(st.sampled_from([None, "none", "tanh"]))
        if approximate is not None:
            params["approximate"] = approximate
    return OpSample([x], params)


@register_inputs(N.SiluBackwardOp)
def _nn_silu_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    bound = 4.0 if spec.for_vjp else 8.0
    shape = spec.shape(draw)
    x = _data(draw, spec, shape, FLOAT_KIND, -bound, bound)
    dy = _data(draw, spec, shape, FLOAT_KIND, -bound, bound)
    return OpSample([dy.to(x.dtype), x], {})


@register_inputs(N.SoftmaxOp, N.LogSoftmaxOp)
def _nn_softmax(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    bound = 5.0 if spec.for_vjp else 20.0
    x = _data(draw, spec, spec.shape(draw), FLOAT_KIND, -bound, bound)
    r = max(x.ndim, 1)
    dtype = None if spec.for_vjp else draw(st.sampled_from([None, torch.float32,
                                                            torch.float64]))
    return OpSample([x], {"dim": draw(st.integers(-r, r - 1)), "dtype": dtype})


@register_inputs(N.DropoutOp, N.FeatureDropoutOp, N.AlphaDropoutOp, N.FeatureAlphaDropoutOp)
def _nn_dropout(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    min_rank = 2 if spec.op.FEATURE else 0  # type: ignore[attr-defined]
    x = _data(draw, spec, spec.shape(draw, min_rank=min_rank), FLOAT_KIND)
    p = draw(st.sampled_from([0.0, 0.3, 0.5, 1.0]) if spec.for_vjp else st.floats(0.0, 1.0))
    return OpSample([x], {"p": p, "train": draw(st.booleans())})


def _norm_case(draw: st.DrawFn, spec: InputSpec) -> tuple[torch.Tensor, tuple[int, ...]]:
    """An input and the trailing dims (``normalized_shape``) a norm normalizes over."""
    batch = spec.shape(draw, max_rank=2)
    lo = 2 if spec.for_vjp else 1
    ns = spec.shape(draw, min_rank=1, max_rank=2, min_side=lo)
    return _data(draw, spec, (*batch, *ns), FLOAT_KIND, -5.0, 5.0), ns


@register_inputs(N.LayerNormOp)
def _nn_layer_norm(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x, ns = _norm_case(draw, spec)
    w = values(draw, ns, x.dtype) if draw(st.booleans()) else None
    b = values(draw, ns, x.dtype) if draw(st.booleans()) else None
    eps = draw(st.sampled_from([None, 1e-5, 1e-3, 1e-2]))
    return OpSample([x, w, b], {"normalized_shape": ns, "eps": eps})


@register_inputs(N.RmsNormOp)
def _nn_rms_norm(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x, ns = _norm_case(draw, spec)
    w = values(draw, ns, x.dtype) if draw(st.booleans()) else None
    return OpSample([x, w], {"normalized_shape": ns,
                             "eps": draw(st.sampled_from([None, 1e-6, 1e-3, 1e-2]))})


@register_inputs(N.EmbeddingOp)
def _nn_embedding(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    num, dim = _side(draw, 2, 6), _side(draw, 1, 5)
    idx = values(draw, spec.shape(draw, max_rank=2), draw(st.sampled_from([torch.int64,
                                                                          torch.int32])),
                 0, num - 1)
    weight = _data(draw, spec, (num, dim), FLOAT_KIND)
    return OpSample([idx, weight], {"padding_idx": draw(st.sampled_from([None, 0, 1, -1])),
                                    "scale_grad_by_freq": draw(st.booleans())})


@register_inputs(N.ScaledDotProductAttentionOp)
def _nn_sdpa(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """(B, H, L, E) queries, keys and values (3-D too), masks, causal, GQA, scale."""
    dtype = spec.dtype(draw, FLOAT_KIND)
    kind = draw(st.sampled_from(["plain", "causal", "bool_mask", "float_mask", "gqa",
                                 "gqa_causal", "3d"]))
    b, hk = _side(draw, 1, 2), _side(draw, 1, 2)
    rep = _side(draw, 2, 3) if kind.startswith("gqa") else 1
    length, source, e, ev = _side(draw, 1, 5), _side(draw, 1, 5), _side(draw), _side(draw)
    lead_q, lead_kv = ((b, hk * rep), (b, hk)) if kind != "3d" else ((hk,), (hk,))
    q = values(draw, (*lead_q, length, e), dtype)
    k = values(draw, (*lead_kv, source, e), dtype)
    v = values(draw, (*lead_kv, source, ev), dtype)
    mask = None
    if kind.endswith("mask"):
        shapes = [(length, source), (b, 1, length, source), (1, hk * rep, length, source)]
        mshape = draw(st.sampled_from(shapes))
        if kind == "bool_mask":
            mask = values(draw, mshape, torch.bool)
            if not spec.for_vjp:
                mask[..., 0] = True  # no fully masked row: softmax of all -inf is NaN
        else:
            mask = values(draw, mshape, dtype)
    params = {"is_causal": kind.endswith("causal"),
              "scale": draw(st.sampled_from([None, 0.25])),
              "enable_gqa": kind.startswith("gqa")}
    return OpSample([q, k, v, mask], params)


@register_inputs(N.CrossEntropyOp)
def _nn_cross_entropy(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """Class-index (with ignored targets) or class-probability targets, (C,), (N, C) and
    (N, C, d) inputs, class weights, label smoothing and every reduction.

    With ``for_vjp`` class weights come with probability targets only: torch cannot
    differentiate the weights of class-index targets.
    """
    dtype = spec.dtype(draw, FLOAT_KIND)
    classes = _side(draw, 2, 5)
    batch = draw(st.sampled_from([(), (3,), (2, 3), (4,)]))
    shape = (classes,) if not batch else (batch[0], classes, *batch[1:])
    x = values(draw, shape, dtype, -4.0, 4.0)
    probabilities = draw(st.booleans())
    params: dict[str, Any] = {"reduction": draw(st.sampled_from(["mean", "sum", "none"])),
                              "label_smoothing": draw(st.sampled_from([0.0, 0.1, 0.25]))}
    if probabilities:
        target = torch.softmax(values(draw, shape, torch.float64), dim=1 if batch else 0
                               ).to(dtype)
    else:
        ignore = draw(st.sampled_from([-100, 1]))
        target = values(draw, batch, torch.int64, 0, classes - 1)
        drop = values(draw, batch, torch.float64, 0.0, 1.0) < 0.3
        drop.view(-1)[0] = False  # keep one target: an all-ignored mean is NaN
        target = torch.where(drop, ignore, target)
        if ignore != -100:
            target.view(-1)[0] = 0
        params["ignore_index"] = ignore
    with_weight = draw(st.booleans()) and (probabilities or not spec.for_vjp)
    weight = values(draw, (classes,), dtype, 0.2, 2.0) if with_weight else None
    return OpSample([x, target, weight], params)


@register_inputs(N.MseLossOp)
def _nn_mse_loss(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """Same-shape or broadcast targets, optional elementwise weights, every reduction."""
    dtype = spec.dtype(draw, FLOAT_KIND)
    shape = spec.shape(draw)
    x = values(draw, shape, dtype)
    target = values(draw, draw(st.sampled_from([shape, shape[1:]])), dtype)
    weight = values(draw, shape, dtype, 0.1, 2.0) if draw(st.booleans()) else None
    return OpSample([x, target, weight],
                    {"reduction": draw(st.sampled_from(["mean", "sum", "none"]))})


__all__ = [
    "ANY_KIND",
    "BOOL_KIND",
    "DEFAULT_DTYPES",
    "FLOAT_KIND",
    "INT_KIND",
    "NUMERIC_KIND",
    "VJP_DTYPES",
    "InputFn",
    "InputSpec",
    "OpSample",
    "away_from_zero",
    "example_inputs",
    "has_inputs",
    "missing_inputs",
    "op_inputs",
    "register_inputs",
    "values",
]
