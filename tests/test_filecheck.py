"""Golden tests: runs the ``// RUN:`` lines of every ``tests/filecheck/**/*.mlir`` file.

A small stand-in for LLVM's ``lit`` (not required): each RUN line is a bash pipeline, run
with ``pipefail`` in the file's folder, after these substitutions:

* ``%s``: the file's path;  ``%S``: its folder;  ``%t``: a temporary file path (one per
  file, shared by its RUN lines, as lit does).

A line ending in ``\\`` continues on the next RUN line. The venv's ``bin`` folder (where
``thunder-ir-opt`` and ``filecheck`` live) comes first on ``PATH``. A file passes when all
its RUN lines exit with 0. Files run in parallel threads (each line is a subprocess); each
file is still its own test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).parent / "filecheck"
FILES = sorted(ROOT.rglob("*.mlir"))
BIN = str(Path(sys.executable).parent)


def run_lines(path: Path) -> list[str]:
    """The file's RUN commands, continuations joined."""
    out: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        s = line.strip()
        if not s.startswith("// RUN:"):
            continue
        cmd = s.removeprefix("// RUN:").strip()
        if cmd.endswith("\\"):
            pending += cmd[:-1] + " "
            continue
        out.append(pending + cmd)
        pending = ""
    if pending:
        out.append(pending)
    return out


def run_file(path: Path) -> tuple[bool, str]:
    """Runs every RUN line of ``path``; returns (passed, a report of what ran)."""
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    env.pop("THUNDER_IR_DUMP", None)
    report: list[str] = []
    lines = run_lines(path)
    if not lines:
        return False, f"{path} has no RUN line"
    with tempfile.TemporaryDirectory() as tmp:
        for cmd in lines:
            full = (cmd.replace("%s", str(path)).replace("%S", str(path.parent))
                    .replace("%t", str(Path(tmp) / "t")))
            proc = subprocess.run(["bash", "-o", "pipefail", "-c", full], cwd=path.parent,
                                  env=env, capture_output=True, text=True, timeout=300)
            report.append(f"$ {full}\n(exit {proc.returncode})\n{proc.stdout}{proc.stderr}")
            if proc.returncode != 0:
                return False, "\n".join(report)
    return True, "\n".join(report)


_POOL: ThreadPoolExecutor | None = None
_RESULTS: dict[Path, Future[tuple[bool, str]]] = {}


def _result(path: Path, session: pytest.Session) -> tuple[bool, str]:
    """On first use, starts every selected golden file (in parallel threads); then waits
    for ``path``'s result."""
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2))
        for item in session.items:
            callspec = getattr(item, "callspec", None)
            if callspec is not None and getattr(item, "originalname", "") == "test_golden":
                f = callspec.params["path"]
                _RESULTS[f] = _POOL.submit(run_file, f)
    if path not in _RESULTS:
        _RESULTS[path] = _POOL.submit(run_file, path)
    return _RESULTS[path].result()


def test_there_are_golden_files() -> None:
    kinds = {f.parent.name for f in FILES}
    assert {"passes", "roundtrip", "verify"} <= kinds, kinds


@pytest.mark.parametrize("path", FILES, ids=[str(f.relative_to(ROOT)) for f in FILES])
def test_golden(path: Path, request: pytest.FixtureRequest) -> None:
    ok, report = _result(path, request.session)
    assert ok, f"RUN lines of {path.relative_to(ROOT.parent)} failed:\n{report}"
