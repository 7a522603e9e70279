"""The whole OpInfo database against eager PyTorch.

Every entry of ``torch.testing._internal.common_methods_invocations.op_db`` runs through
``thunder_ir.jit`` on CPU, in float32 (an op without float32 runs in its first supported
dtype), on its first `SAMPLES` sample inputs, forward and first-order backward, with
`thunder_ir.testing_eager.check_against_eager`: values, dtypes, ``requires_grad``,
inputs after the call, random draws (same seed, same generator state afterwards) and
gradients, ``None`` included, must be eager's. Where a floating-point value differs beyond
the dtype's tolerance it must be no further from a float64 run than eager's is.

An op listed in `EXPECTED_FAILURES` must still never compute a wrong value: each sample
either matches eager or raises a thunder_ir error that names the line (a data-dependent
shape, an op torch has no meta kernel for). The table may only shrink: an entry whose
samples all pass fails the test, and the table's size is capped.

``THUNDER_IR_OPINFO_SAMPLES=0`` runs every sample of every op (about 18k; 5 minutes here,
against about a minute for the default 10).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import warnings
from typing import Any

import pytest
import torch

import thunder_ir
from thunder_ir.testing_eager import check_against_eager

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

SAMPLES = int(os.environ.get("THUNDER_IR_OPINFO_SAMPLES", "10"))
"""Samples per op (0: all of them)."""

_NO_META = "torch has no meta kernel for it, so its shape is unknown while tracing"

EXPECTED_FAILURES: dict[str, str] = {
    "geqrf": _NO_META,
    "linalg.lstsq": _NO_META,
    "linalg.lstsq.grad_oriented": _NO_META,
    "to_sparse": "sparse layouts are not supported",
    "sparse.sampled_addmm": "sparse layouts are not supported",
    "sparse.mm.reduce": "sparse layouts are not supported",
    "torch._scaled_mm_v2": "its scaling-type enum arguments cannot be recorded",
}
"""Ops (``name.variant``) that raise a clear error on some samples, with the reason."""

MAX_EXPECTED_FAILURES = 7
"""The table may only shrink: lower this as entries go."""

VALUES_UNSPECIFIED = frozenset({"empty", "empty_like", "new_empty", "new_empty_strided",
                                "empty_strided", "empty_permuted"})
"""Ops whose result values eager leaves unspecified: shapes and dtypes are compared."""


def _key(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _dtype(op: Any) -> torch.dtype | None:
    dtypes = op.supported_dtypes("cpu")
    if torch.float32 in dtypes:
        return torch.float32
    return min(dtypes, key=str) if dtypes else None


OPS = {_key(op): op for op in op_db}


def _samples(op: Any, dtype: torch.dtype, requires_grad: bool) -> list[Any]:
    it = op.sample_inputs("cpu", dtype, requires_grad=requires_grad)
    return list(it if SAMPLES == 0 else itertools.islice(it, SAMPLES))


def _raised_by_thunder_ir(e: AssertionError) -> bool:
    return isinstance(e.__cause__, thunder_ir.ThunderTraceError)


@pytest.mark.parametrize("key", sorted(OPS))
def test_op_matches_eager(key: str) -> None:
    op = OPS[key]
    dtype = _dtype(op)
    if dtype is None:
        pytest.skip(f"{key} supports no dtype on CPU")
    grad = op.supports_autograd and (dtype.is_floating_point or dtype.is_complex)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = _samples(op, dtype, grad)
    refused = _check_samples(op, samples, grad, contextlib.nullcontext)
    if key in EXPECTED_FAILURES:
        assert refused, (f"{key} now passes on every sample: remove it from "
                         "EXPECTED_FAILURES (and lower MAX_EXPECTED_FAILURES)")
    else:
        assert not refused, f"{key}: samples {refused} refused"


def _check_samples(op: Any, samples: list[Any], grad: bool, context: Any,
                   **tolerances: float) -> list[int]:
    """Each sample against eager (`check_against_eager`) inside ``context()``; returns the
    samples thunder_ir refused with an error naming the line (the caller decides whether
    its table allows them)."""
    exact = None if op.name in VALUES_UNSPECIFIED else False
    refused = []
    for i, s in enumerate(samples):
        def call(inp: Any, *args: Any, _op: Any = op, **kwargs: Any) -> Any:
            return _op.op(inp, *args, **kwargs)

        try:
            with warnings.catch_warnings(), context():
                warnings.simplefilter("ignore")
                check_against_eager(call, s.input, *s.args, kwargs=s.kwargs, backward=grad,
                                    exact=exact, seed=i, **tolerances)
        except AssertionError as e:
            if _raised_by_thunder_ir(e):
                refused.append(i)
                continue
            raise AssertionError(f"{_key(op)}, sample {i} ({s}): {e}") from e
    return refused


def test_the_expected_failure_table_only_shrinks() -> None:
    assert set(EXPECTED_FAILURES) <= set(OPS), "stale entries"
    assert len(EXPECTED_FAILURES) <= MAX_EXPECTED_FAILURES
    applicable = [k for k, op in OPS.items() if _dtype(op) is not None]
    assert len(applicable) - len(EXPECTED_FAILURES) >= 640  # the aim


# --------------------------------------------------------------------------- autocast

AUTOCAST_SAMPLES = int(os.environ.get("THUNDER_IR_OPINFO_AUTOCAST_SAMPLES", "2"))
"""Samples per op under autocast (0: all of them)."""

AUTOCAST_EXPECTED_FAILURES: dict[str, str] = {}
"""Ops that raise a clear error under autocast on some samples, with the reason."""


@pytest.mark.parametrize("key", sorted(k for k, op in OPS.items()
                                       if torch.float32 in op.supported_dtypes("cpu")))
def test_op_under_autocast_matches_eager_autocast(key: str) -> None:
    """Under ``torch.autocast("cpu", torch.bfloat16)``, each float32 sample gives eager
    autocast's output dtypes and values (or eager's error), forward and backward: the
    casts thunder_ir records are the ones torch's own policy makes."""
    if key in EXPECTED_FAILURES:
        pytest.skip("refused without autocast too (EXPECTED_FAILURES)")
    op = OPS[key]
    grad = op.supports_autograd
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        it = op.sample_inputs("cpu", torch.float32, requires_grad=grad)
        samples = list(it if AUTOCAST_SAMPLES == 0 else itertools.islice(it, AUTOCAST_SAMPLES))
    # bfloat16's tolerances: a value may differ from eager autocast's by bfloat16 rounding,
    # or else be no further from float64 than eager's
    refused = _check_samples(op, samples, grad,
                             lambda: torch.autocast("cpu", dtype=torch.bfloat16),
                             rtol=1.6e-2, atol=1e-2)
    if key in AUTOCAST_EXPECTED_FAILURES:
        assert refused, f"{key} now passes under autocast: remove it from the table"
    else:
        assert not refused, f"{key}: samples {refused} refused under autocast"
