"""The generated-code namespace: everything generated code calls besides torch comes from
`thunder_ir.runtime.namespace`, imported as ``tir``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import thunder_ir
from thunder_ir.dialects.program import Program
from thunder_ir.dialects.torch import RUNTIME_NAMESPACE, make_call, runtime_callee, torch_name
from thunder_ir.dialects.types import tensor_type
from thunder_ir.lowering.python_printer import print_python
from thunder_ir.runtime import namespace as tir

ROOT = Path(__file__).resolve().parents[1]
_IMPORT = re.compile(r"^(import|from) ", re.M)


def _imports(source: str) -> list[str]:
    return [line for line in source.splitlines() if _IMPORT.match(line)]


def _only_torch_and_the_namespace(source: str) -> None:
    for line in _imports(source):
        assert (line.startswith(("import torch", "from thunder_ir.runtime.namespace import "))
                or line == tir.IMPORT), line
    # (a callee a runtime function is handed is data: a string, not a name the code reads)
    code = [re.sub(r"'[^']*'", "''", ln.split("#")[0]) for ln in source.splitlines()
            if not _IMPORT.match(ln)]
    assert not any("thunder_ir." in ln for ln in code), source


def test_register_is_idempotent_and_refuses_a_second_object() -> None:
    def ns_test_helper(x: torch.Tensor) -> torch.Tensor:
        return x

    path = tir.register("ns_test_helper", ns_test_helper)
    assert path == runtime_callee("ns_test_helper") == f"{RUNTIME_NAMESPACE}.ns_test_helper"
    assert tir.register("ns_test_helper", ns_test_helper) == path
    assert tir.ns_test_helper is ns_test_helper  # type: ignore[attr-defined]
    assert torch_name(ns_test_helper) == path
    with pytest.raises(ValueError, match="already registered"):
        tir.register("ns_test_helper", lambda x: x)
    with pytest.raises(ValueError, match="namespace module itself"):
        tir.register("register", ns_test_helper)
    with pytest.raises(ValueError, match="identifier"):
        tir.register("_private", ns_test_helper)


def test_ops_are_found_by_name() -> None:
    """An op's wrapper and a dialect helper are found by name in the op tables (printed
    source run before anything lowered the op), with no hook another package installs."""
    from thunder_ir.dialects import prims

    assert tir.op_callable("prims_sum") == prims.OPS["sum"].ref  # (a bound classmethod)
    assert tir.prims_sum == prims.OPS["sum"].ref  # type: ignore[attr-defined]
    assert tir.op_callable("ns_test_missing") is None
    with pytest.raises(AttributeError, match="nothing registered it"):
        _ = tir.ns_test_missing  # type: ignore[attr-defined]


def test_a_kernel_name_is_not_taken_twice() -> None:
    """The Triton executor's cross-entropy kernels are registered under names of their
    own when it is imported (they once shared a name with an op's torch function, and
    generated code called the wrong one); loading triton waits for their first call."""
    from thunder_ir.lowering import triton_executor as te

    registered = tir.registered()
    assert registered["triton_cross_entropy_forward"] is te.triton_cross_entropy_forward
    assert registered["triton_cross_entropy_backward"] is te.triton_cross_entropy_backward
    with pytest.raises(ValueError, match="already registered"):
        tir.register("triton_cross_entropy_forward", round)


def test_every_op_helper_has_a_name_of_its_own() -> None:
    """The torch functions of in-tree ops that are dialect helpers, and the ops' wrappers,
    register under names no other callable of the namespace holds."""
    from thunder_ir.dialects import ltorch, prims
    from thunder_ir.lowering import triton_executor  # noqa: F401  (its lazy names)

    names: dict[str, object] = {}
    for table in (prims.OPS, ltorch.OPS):
        for cls in table.values():
            fn = getattr(cls, "TORCH_FN", None)
            if fn is not None and tir.is_dialect_helper(fn):
                assert names.setdefault(tir.helper_name(fn), fn) is fn, tir.helper_name(fn)
            assert names.setdefault(tir.wrapper_name(cls), cls) is cls
    registered = tir.registered()
    for name, obj in names.items():
        if name in registered:
            owner = registered[name]
            assert owner is obj or owner == getattr(obj, "ref", None), name


def test_the_runtime_lowering_and_frontend_register_what_generated_code_calls() -> None:
    assert thunder_ir.jit is not None  # the first use of the public API composes the package
    for name in ("no_grad", "call_with_grad", "handle_vjp", "call_on_copies", "no_derivative",
                 "inplace_on_copy", "sdpa_dropout_forward", "run_tensor_hook",
                 "run_output_hooks", "run_input_hooks",  # the runtime's
                 "index_add_into", "sdpa_backward", "sdpa_forward_cpu", "sdpa_backward_cpu",
                 "prims", "ltorch",  # the lowering's
                 "setitem", "scatter_strided", "strided_view", "resized",  # writes
                 "grouped_mm", "operator_vjp"):  # the dialects' and extend's
        assert getattr(tir, name) is not None, name
    from thunder_ir.runtime.writes import setitem

    assert torch_name(setitem) == runtime_callee("setitem")


def test_generated_code_imports_torch_and_the_namespace_only() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = x + 1
        z[::2] = 3.0  # tir.setitem (a step of 2: a box of step 1 is ops)
        h = z.to(torch.float64).float()  # a dialect helper: tir.to_dtype
        h.register_hook(lambda g: g * 2)  # tir.run_tensor_hook
        a = torch.nn.functional.scaled_dot_product_attention(h, y, y)  # tir.sdpa_backward
        return a, torch.cumsum(h * y, 0)  # tir.call_with_grad / tir.handle_vjp

    x = torch.randn(2, 3, 4, requires_grad=True)
    y = torch.randn(2, 3, 4, requires_grad=True)
    jf = thunder_ir.jit(f)
    a, c = jf(x, y)
    (a.sum() + c.sum()).backward()
    ea, ec = f(x.detach().requires_grad_(), y.detach())
    torch.testing.assert_close(a, ea)
    torch.testing.assert_close(c, ec)
    fwd = thunder_ir.last_traces(jf)
    bwd = thunder_ir.last_backward_traces(jf)
    for t in [*fwd, *bwd]:
        _only_torch_and_the_namespace(str(t))
    src = "".join(map(str, [*fwd, *bwd]))
    for called in ("tir.setitem(", "tir.to_dtype(", "tir.call_with_grad(", "tir.handle_vjp(",
                   "tir.run_tensor_hook(", "@tir.no_grad"):
        assert called in src, called


def test_the_printer_refuses_a_thunder_ir_callee_outside_the_namespace() -> None:
    t = tensor_type((2,), torch.float32)
    p = Program("forward", [t], ["x"])
    call = make_call("thunder_ir.runtime.attention.sdpa_dropout_forward", [p.args[0]], [],
                     result_types=[t])
    p.block.add_op(call)
    with pytest.raises(ValueError, match="outside the generated-code namespace"):
        print_python(p.finish(list(call.results)))


def test_a_printed_trace_runs_in_a_fresh_process(tmp_path: Path) -> None:
    """Printed source runs as it is: ``tir.ltorch_prod`` (an op's reference implementation,
    registered when the op is lowered) is found by name in a process that lowered
    nothing."""
    jf = thunder_ir.jit(lambda x: x.prod(1).to(torch.float64))
    x = torch.randn(4, 3)
    expected = jf(x)
    src = str(thunder_ir.last_traces(jf)[-1])
    assert "tir.ltorch_prod(" in src and "tir.to_dtype(" in src
    name = re.search(r"^def (\w+)\(", src, re.M)
    assert name is not None
    script = tmp_path / "trace.py"
    script.write_text(src + "\nimport sys\nimport torch\n"
                      "x = torch.load(sys.argv[1])\n"
                      f"torch.save({name.group(1)}(x), sys.argv[2])\n")
    torch.save(x, tmp_path / "x.pt")
    subprocess.run([sys.executable, str(script), str(tmp_path / "x.pt"),
                    str(tmp_path / "out.pt")], check=True, cwd=tmp_path,
                   env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), expected)
