"""The source tree's shape: no module over 1,200 lines, no class in the thunder_ir folder
over 15 methods, and packages without import cycles.

Both are read from the source text (``ast``), never by importing: an import cycle that
happens to resolve in one import order is still a cycle (STYLE.md: "No import cycles,
even lazy ones").
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from import_scan import imports

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 1200
SOURCE_FOLDERS = ("thunder_ir", "dialects", "passes", "lowering", "runtime")
PACKAGE_OF = {"thunder_ir": "thunder_ir", "dialects": "thunder_ir.dialects",
              "passes": "thunder_ir.passes", "lowering": "thunder_ir.lowering",
              "runtime": "thunder_ir.runtime"}

SIZE_EXCEPTIONS: set[str] = set()
"""Modules allowed over the cap (none: split a module before it gets there)."""

# Packages of the thunder_ir folder whose modules must not import one another in a cycle.
ACYCLIC_PACKAGES = ("thunder_ir.frontend", "thunder_ir.extend", "thunder_ir.testing",
                    "thunder_ir.stages")

MAX_METHODS = 15
"""No class in the thunder_ir folder defines more methods than this: a class that gathers
every feature's branch (the jitted callable once had 26) is split along its seams (the
stages, `thunder_ir.stages`; the trace context's writes and autograd facets)."""


def _sources() -> list[Path]:
    return sorted(p for folder in SOURCE_FOLDERS for p in (ROOT / folder).rglob("*.py"))


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = [PACKAGE_OF[rel.parts[0]], *rel.parts[1:]]
    parts[-1] = parts[-1][:-3]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def test_no_source_module_is_over_the_line_cap() -> None:
    over = {}
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        n = len(path.read_text().splitlines())
        if n > MAX_LINES and rel not in SIZE_EXCEPTIONS:
            over[rel] = n
    assert not over, f"modules over {MAX_LINES} lines (split them along their seams): {over}"


def test_no_class_in_the_thunder_ir_folder_has_over_15_methods() -> None:
    over = {}
    for path in sorted((ROOT / "thunder_ir").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                n = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef)
                        for b in node.body)
                if n > MAX_METHODS:
                    over[f"{path.relative_to(ROOT).as_posix()}:{node.name}"] = n
    assert not over, f"classes over {MAX_METHODS} methods (split them): {over}"


TYPE_ACYCLIC_PACKAGES = ("thunder_ir.extend",)
"""Packages without a circle even among the imports only type checkers run (``if
TYPE_CHECKING:``): the extension API was a 7-module circle; its operators, their op
classes, the diversion and the executor now depend one way (protocols where a type looked
back)."""


def _imports(tree: ast.AST, known: set[str], type_checking: bool = False) -> set[str]:
    """Modules among ``known`` that ``tree`` imports, at module level, in a function or
    dynamically (imports under ``if TYPE_CHECKING:`` run only for type checkers and are
    left out unless ``type_checking``)."""
    out: set[str] = set()
    for imp in imports(tree, type_checking=type_checking):
        subs = [f"{imp.module}.{a}" for a in imp.names]
        out.update(sub for sub in subs if sub in known)
        if imp.module in known and (not subs or any(sub not in known for sub in subs)):
            out.add(imp.module)
    return out


def _graph(type_checking: bool = False) -> dict[str, set[str]]:
    trees = {_module_name(p): ast.parse(p.read_text()) for p in _sources()}
    known = set(trees)
    return {name: _imports(tree, known, type_checking) for name, tree in trees.items()}


def _cycle(graph: dict[str, set[str]], nodes: set[str]) -> list[str] | None:
    """A cycle among ``nodes`` (a list of modules, first repeated last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n] & nodes):
            if state.get(m) == 1:
                return [*stack[stack.index(m):], m]
            if m not in state:
                found = dfs(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(nodes):
        if n not in state:
            found = dfs(n)
            if found:
                return found
    return None


@pytest.mark.parametrize("package", [*ACYCLIC_PACKAGES,
                                     *(f"{p} (types)" for p in TYPE_ACYCLIC_PACKAGES)])
def test_package_has_no_import_cycle(package: str) -> None:
    package, _, types = package.partition(" ")
    graph = _graph(type_checking=bool(types))
    # The package's own __init__ imports its modules, so a module importing the package
    # itself (rather than a sibling module) would close a cycle: it counts.
    nodes = {n for n in graph if n == package or n.startswith(package + ".")}
    assert len(nodes) > 2, f"{package}: no modules found"
    cycle = _cycle(graph, nodes)
    assert cycle is None, f"{package} has an import cycle: {' -> '.join(cycle or [])}"


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"p": {"p.a"}, "p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": set()}
    assert _cycle(graph, set(graph)) == ["p.a", "p.b", "p.a"]
    assert _cycle({"p": {"p.a"}, "p.a": set()}, {"p", "p.a"}) is None


def test_one_tensor_proxy_class() -> None:
    import thunder_ir
    from thunder_ir.extend import TensorProxy as ExtendProxy
    from thunder_ir.frontend.proxy import TensorProxy

    assert thunder_ir.TensorProxy is TensorProxy and ExtendProxy is TensorProxy


def test_handlers_see_only_the_builder() -> None:
    """The torch map and the fallback write through `Builder`, not the tracing context,
    so another importer (an FX graph's) can reuse the handler table."""
    graph = _graph()
    for name in ("thunder_ir.frontend.torch_map", "thunder_ir.frontend.fallback"):
        assert "thunder_ir.frontend.builder" in graph[name]
        assert not graph[name] & {"thunder_ir.frontend.context", "thunder_ir.frontend.tracer"}


def test_torch_callables_are_routed_one_way() -> None:
    """Handler modules route torch callables only through
    `thunder_ir.frontend.table.register_handlers`, which refuses a second route for one
    callable (``F.gelu`` and ``F.relu`` were once routed twice, the later route silently
    replacing the earlier): no module but the table's own writes ``HANDLERS[...] =`` or
    calls ``HANDLERS.update``."""
    import re

    writes = []
    for path in sorted((ROOT / "thunder_ir").rglob("*.py")):
        if path.name == "table.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*HANDLERS(\[.*\]\s*=|\.(update|setdefault)\()", line):
                writes.append(f"{path.relative_to(ROOT).as_posix()}:{n}")
    assert not writes, f"HANDLERS written directly (use register_handlers): {writes}"
    import thunder_ir.frontend.tracer  # noqa: F401  (every handler module)
    from thunder_ir.frontend.table import HANDLERS, register_handlers

    f = torch.nn.functional.linear
    with pytest.raises(ValueError, match="built-in route"):
        register_handlers([f], lambda ctx, *a, **k: None)
    assert HANDLERS[f] is not None


def test_op_typing_facts_are_declared_with_the_op() -> None:
    """An ltorch op's type rule and float-preserving check are declared where the op is
    (``@ltorch_op(torch.cat, type_rule=R.cat)``): no module but `ltorch_base` sets
    ``TYPE_RULE`` or ``FLOAT_PRESERVING`` on an op class (a table beside the ops drifted
    from them), and the views read back what the declarations say."""
    import re

    writes = []
    for path in _sources():
        if path.name == "ltorch_base.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\.(TYPE_RULE|TYPE_RULE_SYMBOLIC|FLOAT_PRESERVING|FLOAT_PARAMS)\s*=",
                         line):
                writes.append(f"{path.relative_to(ROOT).as_posix()}:{n}")
    assert not writes, f"op typing facts set outside the op's declaration: {writes}"
    from thunder_ir.dialects import ltorch_core as C
    from thunder_ir.dialects import ltorch_nn as N
    from thunder_ir.dialects import ltorch_rules as R

    rules, floats = R.type_rules(), R.float_preserving()
    assert rules[C.CatOp] is R.cat and rules[N.LinearOp] is R.linear
    assert N.LinearOp.TYPE_RULE_SYMBOLIC and C.CatOp.TYPE_RULE_SYMBOLIC \
        and not C.ExpOp.TYPE_RULE_SYMBOLIC  # (no rule: float-preserving instead)
    assert floats[C.AddOp] is R.alpha and C.ExpOp in floats and C.EqOp not in floats
    assert C.MulOp.FLOAT_NUMBERS and not C.ExpOp.FLOAT_NUMBERS
