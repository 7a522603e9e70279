"""`thunder_ir.frontend.int_bytecode` reads the caller's bytecode at ``int(n)``: the same
answers on every CPython it supports. ``tests/int_bytecode_cases.py`` runs it, with a
stand-in size whose ``__int__`` and comparisons act as `thunder_ir.frontend.int_sizes`'s
wrappers do at this Python's frame offsets, under this Python and under each other
CPython 3.11-3.13 found here (``python3.1x`` on the path, pyenv's versions); one not found
skips, naming it. With torch, against eager: ``tests/test_symbolic_decisions.py``."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
MODULE = HERE.parent / "thunder_ir" / "frontend" / "int_bytecode.py"

SYMBOLIC = ["assert int(n) == m", "int(t.shape[-1]) == m", "assert int(n) == a * b",
            "int(n) == o.a.b", "int(n) == t.size(1)", "if int(n) != m", "int(n) < m",
            "m == int(n)", "int(n) == f(m, k=1)", "[int(a) == b for ...]", "int(n) == +m",
            "int(n) == super().m", "int(n) == d['k']"]
"""``int()``'s result goes straight into a comparison with a size: stays symbolic."""
FIXED = ["x = int(n); x == m", "int(n) + 0 == m", "f(int(n)) == m", "0 < int(n) < m",
         "int shadowed"]
"""Anything else (stored, arithmetic, passed on, a chained comparison, another ``int``):
fixed at once, as torch's ``int()`` fixes it (correct, one program per value)."""


def _python(version: str) -> str | None:
    if sys.version_info[:2] == tuple(map(int, version.split("."))):
        return sys.executable
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    got = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", "python")))
    if got:
        return got[-1]
    found = shutil.which(f"python{version}")
    return found if found and "shims" not in Path(found).parts else None  # (pyenv's)


@pytest.mark.parametrize("version", ["3.11", "3.12", "3.13"])
def test_same_answers_on_each_python(version: str) -> None:
    python = _python(version)
    if python is None:
        pytest.skip(f"no CPython {version} on this machine")
    run = subprocess.run([python, str(HERE / "int_bytecode_cases.py"), str(MODULE)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got.pop("version") == [int(v) for v in version.split(".")]
    want = {**dict.fromkeys(SYMBOLIC, "symbolic"), **dict.fromkeys(FIXED, "fixed"),
            "int(n) == 4": "pending"}  # a plain int: fixed when the trace ends
    assert got == want
