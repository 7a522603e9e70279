"""The one import scanner of the source-shape tests (`test_layering.py`,
`test_module_sizes.py`): what a module's text imports, read with ``ast``, never by
importing it, so that an import in a function or a dynamic one counts as much as one at
the top ("no import cycles, even lazy ones")."""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class Import:
    """One import statement or call: the module named, the names taken from it
    (``from m import a, b``; empty for ``import m`` and dynamic imports) and its line."""

    line: int
    module: str
    names: tuple[str, ...] = ()


def imports(tree: ast.AST, *, type_checking: bool = True) -> list[Import]:
    """Every absolute import in ``tree``: statements anywhere (functions included) and
    ``__import__("m")`` / ``importlib.import_module("m")`` with a literal name. Imports
    under ``if TYPE_CHECKING:`` run only for type checkers: left out unless
    ``type_checking``."""
    out: list[Import] = []

    def visit(node: ast.AST) -> None:
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.extend(Import(node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(Import(node.lineno, node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Call) and _is_dynamic_import(node):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append(Import(node.lineno, arg.value))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _is_dynamic_import(node: ast.Call) -> bool:
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "__import__") or (
        isinstance(f, ast.Attribute) and f.attr == "import_module")
