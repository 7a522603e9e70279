"""Public testing helpers for decompositions: run, compare against eager, draw inputs.

``check_decomposition(op, operands, params)`` builds a one-op program, decomposes it with
the registered rule (or ``rule=`` of your own) and compares three results on the same
inputs:

* ``eager``: the op's torch reference in the inputs' dtypes;
* ``ref64``: the same reference with floating-point inputs upcast to float64;
* ``decomposed``: the decomposed program, run op by op with the prims' references.

The rule (STYLE.md, after PyTorch's ``test_decomp.py``): the decomposition's error
against ``ref64`` may be no worse than eager's error, plus a small tolerance that fits the
dtype. Integer and bool results must match eager exactly.

``check_vjp(op, operands, params)`` checks a VJP rule the same way against
``torch.autograd`` in float64.

Property forms draw the inputs: ``check_decomposition_property(op)`` and
``check_vjp_property(op)`` run the checks on examples from ``op_inputs(op)`` (see
`thunder_ir.testing.inputs`: a strategy per prim and ltorch op, and `register_inputs` for
your own ops). On failure hypothesis shrinks the input; the error names the op and shows
the shrunk `OpSample`::

    from thunder_ir.dialects import ltorch
    from thunder_ir.testing import check_decomposition_property

    def my_silu(d, x):
        return d.prims.mul(x, d.ltorch.sigmoid(x))

    check_decomposition_property(ltorch.OPS["silu"], rule=my_silu, max_examples=20)

Smaller strategies (`shapes`, `broadcast_shapes`, `tensors`, `float_dtypes`) help write
strategies of your own; `type_of` and `number_of` give the IR types of sample values.

Modules: `checks` (the checks and small strategies), `inputs` (`op_inputs`, `OpSample`,
`register_inputs` and the helpers strategies share) and one module of strategies per
dialect module, as ``dialects/`` is laid out: `inputs_prims`, `inputs_ltorch_core`,
`inputs_ltorch_scan`, `inputs_ltorch_nn`, `inputs_ltorch_activation`. This package imports
them all, so every op has its strategy once ``thunder_ir.testing`` is imported.
"""

try:
    import hypothesis  # noqa: F401
except ImportError as _e:  # the property-testing helpers need the test extra
    raise ImportError(
        "thunder_ir.testing needs hypothesis, which comes with the test extra: "
        "pip install 'thunder-ir[test]' (or pip install hypothesis)") from _e

from thunder_ir.testing import (
    inputs_ltorch_activation,
    inputs_ltorch_core,
    inputs_ltorch_nn,
    inputs_ltorch_scan,
    inputs_prims,
)
from thunder_ir.testing.checks import (
    ATOL,
    DEFAULT_REFERENCES,
    RTOL,
    all_dtypes,
    broadcast_shapes,
    build_one_op,
    check_decomposition,
    check_decomposition_property,
    check_vjp,
    check_vjp_property,
    compare,
    decompose,
    float_dtypes,
    number_of,
    shapes,
    tensors,
    type_of,
)
from thunder_ir.testing.inputs import (
    ANY_KIND,
    BOOL_KIND,
    DEFAULT_DTYPES,
    FLOAT_KIND,
    INT_KIND,
    NUMERIC_KIND,
    VJP_DTYPES,
    InputFn,
    InputSpec,
    OpSample,
    away_from_zero,
    example_inputs,
    has_inputs,
    missing_inputs,
    op_inputs,
    register_inputs,
    values,
)

__all__ = [
    "ANY_KIND",
    "ATOL",
    "BOOL_KIND",
    "DEFAULT_DTYPES",
    "DEFAULT_REFERENCES",
    "FLOAT_KIND",
    "INT_KIND",
    "NUMERIC_KIND",
    "RTOL",
    "VJP_DTYPES",
    "InputFn",
    "InputSpec",
    "OpSample",
    "all_dtypes",
    "away_from_zero",
    "broadcast_shapes",
    "build_one_op",
    "check_decomposition",
    "check_decomposition_property",
    "check_vjp",
    "check_vjp_property",
    "compare",
    "decompose",
    "example_inputs",
    "float_dtypes",
    "has_inputs",
    "missing_inputs",
    "number_of",
    "type_of",
    "op_inputs",
    "register_inputs",
    "shapes",
    "tensors",
    "values",
]

_DIALECT_MODULES = (inputs_prims, inputs_ltorch_core, inputs_ltorch_scan, inputs_ltorch_nn,
                    inputs_ltorch_activation)
"""The modules whose import registers every op's strategy."""
