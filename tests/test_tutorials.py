"""The tutorials under docs/tutorials run as written.

Each fenced block runs in order, in a scratch directory:
* ``python`` blocks execute in one namespace per tutorial; a block whose first line is
  ``# name.py`` is also written to that file (so later blocks and commands can import it);
* ``mlir`` blocks whose first line is ``// name.mlir`` are written to that file;
* ``bash`` blocks run line by line and must succeed; a ``text`` block right after one must
  appear in the output of its last command.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs" / "tutorials"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def _blocks(path: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(path.read_text())]


@pytest.fixture
def registries() -> Iterator[None]:
    """Undoes what a tutorial adds (its op, the op's routing, decomposition, VJP rule and
    input strategy: additions to the rule tables), so that the coverage tests of later
    files see none of it; the built-in entries are frozen, so nothing else can change."""
    import thunder_ir.frontend.tracer  # (every handler module)
    import thunder_ir.testing  # noqa: F401  (every input strategy)
    from thunder_ir.dialects.ltorch_base import LTORCH
    from thunder_ir.dialects.tables import scoped_additions
    from thunder_ir.passes.decompositions import load_rules
    from thunder_ir.passes.vjp import load_vjp_rules

    load_rules()
    load_vjp_rules()
    ops = list(LTORCH)
    with scoped_additions():
        yield
    LTORCH[:] = ops


@pytest.mark.usefixtures("registries")
@pytest.mark.parametrize("tutorial", sorted(DOCS.glob("*.md")), ids=lambda p: p.stem)
def test_tutorial_runs(tutorial: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               PYTHONPATH=f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}")
    namespace: dict = {"__name__": f"tutorial_{tutorial.stem}"}
    last_output = None
    ran = 0
    for lang, body in _blocks(tutorial):
        first = body.splitlines()[0] if body.strip() else ""
        if lang == "python":
            if first.startswith("# ") and first.endswith(".py"):
                (tmp_path / first[2:]).write_text(body)
            exec(compile(body, f"{tutorial.name}:{lang}", "exec"), namespace)
            ran += 1
        elif lang == "mlir" and first.startswith("// ") and first.endswith(".mlir"):
            (tmp_path / first[3:]).write_text(body)
        elif lang == "bash":
            for line in body.splitlines():
                if not line.strip() or line.startswith("#"):
                    continue
                out = subprocess.run(line, shell=True, capture_output=True, text=True, env=env,
                                     cwd=tmp_path, timeout=300)
                assert out.returncode == 0, f"{line}\n{out.stdout}\n{out.stderr}"
                last_output = out.stdout
                ran += 1
        elif lang == "text" and last_output is not None:
            assert body.strip() in last_output, f"expected\n{body}\nin\n{last_output}"
            last_output = None
    assert ran, f"{tutorial.name} has no runnable block"


def test_every_place_an_op_touches_is_in_the_adding_an_op_table() -> None:
    """The table "Every place a new op touches" of ``02_adding_an_op.md`` names the file
    of each registration of each in-tree op: its class, its torch routing, its
    decomposition, its input strategy and its direct VJP rule."""
    from thunder_ir.dialects import ltorch, prims
    from thunder_ir.frontend.table import HANDLERS
    from thunder_ir.passes.decompositions import load_rules
    from thunder_ir.passes.vjp import load_vjp_rules
    from thunder_ir.testing.inputs import INPUT_STRATEGIES

    text = (DOCS / "02_adding_an_op.md").read_text()
    table = text[text.index("## Every place a new op touches"):].split("\n\n")[1]
    named = {Path(p).name for p in re.findall(r"`([\w/<>]+\.py)`", table)}
    named |= {f"prims_{f}.py" for f in ("creation", "elementwise", "indexing", "reduction",
                                        "shape")}  # `dialects/prims_<family>.py`
    decompositions, vjps = load_rules(), load_vjp_rules()

    def file_of(obj: object) -> str:
        return getattr(obj, "__module__", type(obj).__module__).rsplit(".", 1)[-1] + ".py"

    missing: set[str] = set()
    for cls in (*ltorch.OPS.values(), *prims.OPS.values()):
        places = [cls, decompositions.get(cls), INPUT_STRATEGIES.get(cls)]
        rule = vjps.get(cls)
        if rule is not None and "raising_rule" not in getattr(rule, "__qualname__", ""):
            places.append(rule)
        fn = getattr(cls, "TORCH_FN", None)
        if cls in ltorch.OPS.values() and fn is not None and HANDLERS.get(fn) is not None:
            places.append(HANDLERS[fn])
        missing |= {f"{file_of(p)} ({cls.name})" for p in places
                    if p is not None and file_of(p) not in named}
    assert not missing, f"registrations in files the table does not name: {sorted(missing)}"
