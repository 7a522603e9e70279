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


# --------------------------------------------------------------------------- registries
#
# An import is not the only way to reach up: a package can keep a container of callables
# that another package fills at import time and then call them (a "slot": the executor
# lookup passes once called, the namespace resolvers the runtime once called). The scan
# below finds, in every package, module-level containers whose entries that module calls,
# and every statement that another package runs on import to fill one (directly, or
# through a function of the owner that stores its argument there). It should find
# nothing. (State kept while a program runs, such as the user's hooks the runtime calls
# for it, is filled by calls, not on import.)

SOURCES = ("dialects", "passes", "lowering", "runtime", "thunder_ir")
_FILLS = {"append", "insert", "add", "update", "setdefault", "extend"}


def _module_name(path: Path) -> tuple[str, str]:
    """``(package, module)`` of a source file (``dialects/x.py`` -> ``thunder_ir.dialects.x``)."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    package = parts[0]
    name = ".".join(parts if package == "thunder_ir" else ["thunder_ir", *parts])
    return package, name


def _containers(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 \
            else node.target if isinstance(node, ast.AnnAssign) else None
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(target, ast.Name) and (
                isinstance(value, ast.List | ast.Dict | ast.Set) or (
                    isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                    and value.func.id in ("list", "dict", "set", "defaultdict"))):
            out.add(target.id)
    return out


def _root_name(node: ast.AST) -> str | None:
    """``N`` of ``N``, ``N[k]``, ``N.get(k)``, ``N.pop(k)``, ``N.values()``, ``reversed(N)``."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("get", "pop", "values", "items", "copy"):
            node = node.func.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("reversed", "list", "tuple", "iter") and node.args:
            node = node.args[0]
        else:
            return None


def called_containers(tree: ast.Module) -> set[str]:
    """The module-level containers whose entries the module calls (directly, or through
    a name bound to an entry in the same function or comprehension)."""
    containers = _containers(tree)
    called: set[str] = set()
    for scope in [tree, *(n for n in ast.walk(tree)
                          if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))]:
        bound: dict[str, str] = {}
        for node in ast.walk(scope):
            pairs: list[tuple[ast.AST, ast.AST]] = []
            if isinstance(node, ast.Assign | ast.NamedExpr):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                pairs = [(t, node.value) for t in targets]
            elif isinstance(node, ast.For | ast.comprehension):
                pairs = [(node.target, node.iter)]
            for target, value in pairs:
                root = _root_name(value)
                if isinstance(target, ast.Name) and root in containers:
                    bound[target.id] = root
        for node in ast.walk(scope):
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name) and f.id in bound:
                    called.add(bound[f.id])
                elif not isinstance(f, ast.Name) and not isinstance(f, ast.Attribute) \
                        and _root_name(f) in containers:
                    called.add(_root_name(f))  # type: ignore[arg-type]
    return called


def _installers(tree: ast.Module, slots: set[str]) -> set[str]:
    """Functions of the module that store one of their arguments in one of ``slots``."""
    out: set[str] = set()
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        for node in ast.walk(fn):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _FILLS and _root_name(node.func.value) in slots
                    and any(isinstance(a, ast.Name) and a.id in params for a in node.args)):
                out.add(fn.name)
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                    and node.value.id in params
                    and any(isinstance(t, ast.Subscript) and _root_name(t) in slots
                            for t in node.targets)):
                out.add(fn.name)
    return out


def _import_time(tree: ast.Module) -> list[ast.AST]:
    """The nodes a module runs when it is imported: everything but function bodies
    (decorators and default values run; class bodies run)."""
    out: list[ast.AST] = []

    def visit(node: ast.AST) -> None:
        out.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            deco = getattr(node, "decorator_list", [])
            for child in [*deco, *node.args.defaults, *node.args.kw_defaults]:
                if child is not None:
                    visit(child)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def slot_fills(sources: dict[str, tuple[str, ast.Module]]) -> list[str]:
    """``where: fills module.NAME, which module calls`` for each statement of one package
    that fills another package's called container. ``sources``: module name ->
    (package, tree); ``where`` is the module name and line."""
    slots = {m: called_containers(t) for m, (_, t) in sources.items()}
    installers = {m: _installers(t, slots[m]) for m, (_, t) in sources.items()}
    found: list[str] = []
    for mod, (pkg, tree) in sources.items():
        names: dict[str, tuple[str, str]] = {}  # local name -> (owner module, its name)
        modules: dict[str, str] = {}  # local name -> owner module
        for imp in imports(tree):
            for n in imp.names:
                if f"{imp.module}.{n}" in sources:
                    modules[n] = f"{imp.module}.{n}"
                elif imp.module in sources:
                    names[n] = (imp.module, n)
        for node in _import_time(tree):
            target: ast.AST | None = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in _FILLS:
                target = node.func.value
            elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
                target = node.targets[0].value
            elif isinstance(node, ast.Call):
                target = node.func  # a call of an owner's installer
            owner: tuple[str, str] | None = None
            if isinstance(target, ast.Name) and target.id in names:
                owner = names[target.id]
            elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                    and target.value.id in modules:
                owner = (modules[target.value.id], target.attr)
            if owner is None or sources[owner[0]][0] == pkg:
                continue
            o_mod, o_name = owner
            if o_name in slots[o_mod] or (isinstance(node, ast.Call) and node.func is target
                                          and o_name in installers[o_mod]):
                found.append(f"{mod}:{node.lineno}: fills {o_mod}.{o_name}, which "
                             f"{o_mod} calls")
    return found


def test_no_package_fills_a_slot_another_package_calls() -> None:
    sources = {}
    for package in SOURCES:
        for path in sorted((ROOT / package).rglob("*.py")):
            pkg, name = _module_name(path)
            sources[name] = (pkg, ast.parse(path.read_text(), filename=str(path)))
    assert slot_fills(sources) == []


def test_the_slot_scan_sees_direct_fills_and_installers() -> None:
    low = ast.parse("HOOKS = []\nTABLE = {}\nDATA = {}\n"
                    "def add_hook(h):\n    HOOKS.append(h)\n"
                    "def run(name):\n    for h in HOOKS:\n        h(name)\n"
                    "    f = TABLE.get(name)\n    return f() if f else DATA[name]\n")
    high = ast.parse("from thunder_ir.passes import low\n"
                     "from thunder_ir.passes.low import TABLE, DATA\n"
                     "low.add_hook(print)\nTABLE['x'] = print\nDATA['y'] = 1\n"
                     "low.HOOKS.append(len)\n")
    same = ast.parse("from thunder_ir.passes.low import TABLE\nTABLE['z'] = print\n")
    found = slot_fills({"thunder_ir.passes.low": ("passes", low),
                        "thunder_ir.lowering.high": ("lowering", high),
                        "thunder_ir.passes.same": ("passes", same)})
    assert found == [
        "thunder_ir.lowering.high:3: fills thunder_ir.passes.low.add_hook, which "
        "thunder_ir.passes.low calls",
        "thunder_ir.lowering.high:4: fills thunder_ir.passes.low.TABLE, which "
        "thunder_ir.passes.low calls",
        "thunder_ir.lowering.high:6: fills thunder_ir.passes.low.HOOKS, which "
        "thunder_ir.passes.low calls"]


# --------------------------------------------------------------------------- private names


def private_reaches(path: Path, tree: ast.Module) -> list[str]:
    """``file:line: module._name`` for each private name of another thunder_ir module that
    ``tree`` imports or reads as an attribute of an imported module."""
    out: list[str] = []
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.startswith("thunder_ir"):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    out.append(f"{path}:{node.lineno}: {node.module}.{a.name}")
                else:
                    modules[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("thunder_ir") and a.asname:
                    modules[a.asname] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in modules and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            out.append(f"{path}:{node.lineno}: {modules[node.value.id]}.{node.attr}")
    return out


def test_no_module_reaches_for_another_modules_private_names() -> None:
    """Helpers that cross modules are public (named, documented, in the module's API);
    a private name stays in its module."""
    found: list[str] = []
    for package in SOURCES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += private_reaches(path.relative_to(ROOT), ast.parse(path.read_text()))
    assert found == []
