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

Every prim and every ltorch op has a strategy (a test keeps it so). The strategies live in
one module per dialect module (`thunder_ir.testing.inputs_prims`, `inputs_ltorch_core`,
`inputs_ltorch_nn`), registered with `register_inputs` when ``thunder_ir.testing`` imports
them; this module holds the registry, `op_inputs` and the helpers they share.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from thunder_ir.dialects import prims as P
from thunder_ir.dialects.base import ShapeError, ThunderOp
from thunder_ir.dialects.tables import BUILTIN_PREFIX, RuleTable
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
INPUT_STRATEGIES: RuleTable[type[ThunderOp], InputFn | st.SearchStrategy[Any]] = \
    RuleTable("input strategy")
"""Op class -> strategy (`thunder_ir.dialects.tables.RuleTable`: built-in ones frozen)."""
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
        builtin = str(sys._getframe(1).f_globals.get("__name__", "")).startswith(
            BUILTIN_PREFIX)  # the registering module (a strategy object has none)
        for op in ops:
            INPUT_STRATEGIES.register(op, fn, builtin=builtin, replace=replace)
        _CACHE.clear()
        return fn

    return wrap


def _lookup(op: type[ThunderOp]) -> InputFn | st.SearchStrategy[Any] | None:
    for cls in op.__mro__:
        fn = INPUT_STRATEGIES.get(cls)  # type: ignore[arg-type]
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


def with_specials(draw: st.DrawFn, spec: InputSpec, t: torch.Tensor) -> torch.Tensor:
    """Sometimes sets one element of a float tensor to inf, -inf, nan, 0 or -1.5."""
    if spec.for_vjp or not is_float(t.dtype) or t.numel() == 0 or not draw(st.booleans()):
        return t
    flat = t.flatten().clone()
    flat[draw(st.integers(0, t.numel() - 1))] = draw(st.sampled_from(_SPECIALS))
    return flat.reshape(t.shape)


def index_tensor(draw: st.DrawFn, shape: Sequence[int], bound: int) -> torch.Tensor:
    """An int32/int64 index tensor with values in ``[0, bound)`` (repeats included)."""
    dtype = draw(st.sampled_from([torch.int64, torch.int32]))
    if bound == 0:
        return torch.zeros(tuple(shape), dtype=dtype)
    return values(draw, shape, dtype, 0, bound - 1)


def distinct_positions(draw: st.DrawFn, bound: int, most: int = 4) -> torch.Tensor:
    """A 1-D int64 index of distinct positions in ``[0, bound)``, 1 to ``most`` of them
    (none where ``bound`` is 0): ``index_copy``'s, whose result eager leaves undefined
    for repeats."""
    if bound == 0:
        return torch.zeros((0,), dtype=torch.int64)
    n = draw(st.integers(1, min(most, bound)))
    return torch.tensor(draw(st.permutations(range(bound)))[:n], dtype=torch.int64)


def dim_subset(draw: st.DrawFn, n: int) -> tuple[int, ...]:
    """Distinct dims of a rank-n tensor, in drawn order."""
    dims = [d for d in range(n) if draw(st.booleans())]
    return tuple(draw(st.permutations(dims)))


def either_sign_dim(draw: st.DrawFn, d: int, rank: int) -> int:
    """``d`` or its negative spelling ``d - rank``."""
    return d - rank if draw(st.booleans()) else d


def number_joins(py: type, dtype: torch.dtype) -> bool:
    """Whether a Python number of type ``py`` may join a ``dtype`` tensor in a prim."""
    return {bool: True, int: dtype != torch.bool, float: is_float(dtype)}[py]


def short_name(op: type[ThunderOp]) -> str:
    return op.name.split(".", 1)[1]


def shaped(shape: Sequence[int], dtype: torch.dtype) -> Any:
    return tensor_type(tuple(shape), dtype)


_ACCEPTED: dict[Any, frozenset[torch.dtype]] = {}


def accepted_dtypes(key: Any, probe: Callable[[torch.dtype], Any]) -> frozenset[torch.dtype]:
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


def domain_tensor(draw: st.DrawFn, name: str, shape: Sequence[int], dtype: torch.dtype
                   ) -> torch.Tensor:
    if name in _AWAY_FROM_ZERO:
        return away_from_zero(draw, shape, dtype, 0.2, 3.0)
    low, high = _DOMAIN.get(name, (-3.0, 3.0))
    return values(draw, shape, dtype, low, high)


def smallest_side(spec: InputSpec) -> int:
    """Prims take empty dims in shape-rule tests; VJP checks and ltorch ops draw none."""
    return 0 if not spec.for_vjp and spec.op.name.startswith("prims.") else 1


# --------------------------------------------------------------------------- binary operands

_DIVIDES = {"div", "remainder", "fmod", "floor_divide"}


def draw_p_number(draw: st.DrawFn, spec: InputSpec, name: str, side: int, dtype: torch.dtype
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


def binary_pair(draw: st.DrawFn, spec: InputSpec, name: str, shape: Sequence[int],
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


# --------------------------------------------------------------------------- ltorch: helpers

def broadcast_of(draw: st.DrawFn, shape: Sequence[int]) -> tuple[int, ...]:
    """A shape that broadcasts with ``shape`` (some dims 1, some leading dims dropped)."""
    out = list(shape[draw(st.integers(0, len(shape))):])
    return tuple(1 if draw(st.booleans()) else s for s in out)


def draw_data(draw: st.DrawFn, spec: InputSpec, shape: Sequence[int],
              allowed: Iterable[torch.dtype], low: float = -3.0, high: float = 3.0,
              specials: bool = False) -> torch.Tensor:
    """A data tensor of a dtype among ``allowed`` (special values sometimes, if asked)."""
    t = values(draw, shape, spec.dtype(draw, allowed), low, high)
    return with_specials(draw, spec, t) if specials else t


def dims_of(draw: st.DrawFn, rank: int) -> Any:
    """A ``dim`` argument of a multi-dim reduction: None, an int or a tuple (may be ())."""
    if rank == 0:
        return draw(st.sampled_from([None, (), 0, -1]))
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none":
        return None
    if kind == "int":
        return draw(st.integers(-rank, rank - 1))
    picked = draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank))
    return tuple(either_sign_dim(draw, d, rank) for d in picked)


def reduced_count(shape: Sequence[int], dim: Any) -> int:
    """How many elements each output of a reduction over ``dim`` combines."""
    if dim is None or dim == ():
        return math.prod(shape)
    dims = (dim,) if isinstance(dim, int) else dim
    return math.prod(shape[d] for d in dims) if shape else 1


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
