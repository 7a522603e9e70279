"""A plain (non-editable) install imports, from inside the checkout too; the testing
helpers say which extra they need."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMPORTS = ("import thunder_ir, thunder_ir.dialects, thunder_ir.passes, thunder_ir.lowering, "
           "thunder_ir.runtime, torch; "
           "assert thunder_ir.jit(lambda x: x + 1)(torch.ones(2)).tolist() == [2.0, 2.0]; "
           "print(thunder_ir.dialects.__file__)")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed: cannot build without network access")
    target = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-build-isolation", "--target", str(target), str(ROOT)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"pip could not build the package here: {r.stderr[-400:]}")
    return target


def _run(code: str, cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter that sees ``pythonpath`` and this environment's
    packages but not their ``.pth`` files: no editable install of the checkout helps it,
    as after a plain ``pip install .`` into a fresh venv."""
    site = [p for p in sys.path if p.endswith("site-packages")]
    prelude = f"import sys; sys.path.extend({site!r})\n"
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    return subprocess.run([sys.executable, "-S", "-c", prelude + code], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_plain_install_imports_from_inside_the_checkout(installed: Path) -> None:
    r = _run(IMPORTS, ROOT, installed)
    assert r.returncode == 0, r.stderr
    assert "dialects" in r.stdout


def test_plain_install_imports_from_elsewhere(installed: Path, tmp_path: Path) -> None:
    r = _run(IMPORTS, tmp_path, installed)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(str(installed))


def test_testing_without_the_test_extra_names_it(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['hypothesis'] = None\n"
            "try:\n    import thunder_ir.testing\n"
            "except ImportError as e:\n    print(e)\n")
    r = _run(code, tmp_path, ROOT)
    assert r.returncode == 0, r.stderr
    assert "pip install 'thunder-ir[test]'" in r.stdout


def test_loading_the_compiler_ends_with_one_full_collection() -> None:
    """The first use of the API composes the package and then runs one full collection
    of the cyclic GC, once: the objects loading makes then do not leave a full collection
    pending for the first training step (`thunder_ir._compose`)."""
    code = (
        "import gc, thunder_ir\n"
        "full = lambda: gc.get_stats()[2]['collections']\n"
        "gc.disable(); n = full()\n"
        "thunder_ir.jit; thunder_ir.last_traces\n"
        "print(full() - n)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1"]
