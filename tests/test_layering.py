"""The package arrows hold: every import in ``dialects``, ``passes``, ``lowering`` and
``runtime`` (module-level and inside functions) points in an allowed direction.

* ``dialects`` import only ``dialects``;
* ``passes`` import ``dialects`` and ``passes``;
* ``lowering`` imports ``dialects``, ``passes``, ``lowering`` and ``runtime``;
* ``runtime`` imports ``dialects`` and ``runtime``;
* the frontend and the API (``thunder_ir/``) import anything.

A pass that emits a call into the runtime names it in the IR (a callee string); it does
not import it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from import_scan import imports

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    "dialects": {"dialects"},
    "passes": {"dialects", "passes"},
    "lowering": {"dialects", "passes", "lowering", "runtime"},
    "runtime": {"dialects", "runtime"},
}
PACKAGES = ("dialects", "passes", "lowering", "runtime")


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """Every absolute module an AST imports, with its line (``from thunder_ir import x``
    counts as ``thunder_ir.x``)."""
    out: list[tuple[int, str]] = []
    for imp in imports(tree):
        if imp.module == "thunder_ir" and imp.names:
            out += [(imp.line, f"thunder_ir.{a}") for a in imp.names]
        else:
            out.append((imp.line, imp.module))
    return out


def violations(package: str) -> list[str]:
    """``file:line: module`` for each import of ``package`` that the arrows forbid."""
    bad: list[str] = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name in imported_modules(tree):
            parts = name.split(".")
            if parts[0] in PACKAGES:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {name} (import it as "
                           f"thunder_ir.{name})")
            elif parts[0] == "thunder_ir" and (len(parts) < 2
                                               or parts[1] not in ALLOWED[package]):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    return bad


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_follow_the_package_arrows(package: str) -> None:
    assert violations(package) == [], (
        f"{package} may import only {sorted(ALLOWED[package])} of thunder_ir")


def test_the_scan_sees_in_function_and_dynamic_imports() -> None:
    tree = ast.parse("def f():\n    from thunder_ir.lowering.codegen import x\n"
                     "    import thunder_ir.runtime.cache\n"
                     "    __import__('thunder_ir.tracing')\n"
                     "from thunder_ir import api\n")
    assert sorted(n for _, n in imported_modules(tree)) == [
        "thunder_ir.api", "thunder_ir.lowering.codegen", "thunder_ir.runtime.cache",
        "thunder_ir.tracing"]
