"""``thunder-ir-opt`` on bad input: a diagnostic naming file:line:col (or one line), exit
status 1, no traceback unless ``--traceback``."""

from __future__ import annotations

from pathlib import Path

import pytest

from thunder_ir.opt import main

CASES = {
    "undefined value": ('builtin.module {\n  %0 = "ltorch.relu"(%1) : (i32) -> i32\n}\n',
                        r"^{f}:4:1: error: values used but not defined: \[%1\]"),
    "unknown op": ('builtin.module {\n  "foo.bar"() : () -> ()\n}\n',
                   r"^{f}:2:12: error: Operation foo.bar is not registered\n.*\"foo.bar\""),
    "truncated": ('builtin.module {\n  %x = "ltorch.relu" (\n', r"^{f}:3:1: error: "),
    "verifier": ('builtin.module {\n  %0 = "prims.constant"() <{value = 1.0 : f64}> : '
                 '() -> i32\n}\n',
                 r"^{f}:2:8: error: result 'out' at position 0 does not verify: i32 should "
                 r"be of base attribute prims.number$"),
}


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(args)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("case", list(CASES))
def test_bad_ir_gives_a_located_diagnostic(case: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    import re

    text, pattern = CASES[case]
    f = tmp_path / "in.mlir"
    f.write_text(text)
    rc, err = _run([str(f)], capsys)
    assert rc == 1
    assert re.search(pattern.format(f=re.escape(str(f))), err, re.S), err
    assert "Traceback" not in err


@pytest.mark.parametrize("content,message", [
    (b"", "is empty: expected a builtin.module"),
    (b"  \n\n", "is empty: expected a builtin.module"),
    (bytes(range(256)), "is a binary file, not IR text"),
    (b"\xd0\xd1 builtin.module", "is not UTF-8 text (byte 0): not IR"),
])
def test_empty_and_binary_files_give_one_line(content: bytes, message: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "in.mlir"
    f.write_bytes(content)
    rc, err = _run([str(f)], capsys)
    assert rc == 1
    assert err == f"thunder-ir-opt: error: '{f}' {message}\n"


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _run([str(tmp_path / "nope.mlir")], capsys)
    assert rc == 1
    assert err.startswith("thunder-ir-opt: error: cannot read") and "No such file" in err
    assert len(err.splitlines()) == 1


def test_traceback_flag_shows_the_python_traceback(tmp_path: Path) -> None:
    from xdsl.utils.exceptions import ParseError

    f = tmp_path / "in.mlir"
    f.write_text(CASES["unknown op"][0])
    with pytest.raises(ParseError):
        main(["--traceback", str(f)])


def test_good_input_still_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    f = tmp_path / "in.mlir"
    f.write_text("builtin.module {\n}\n")
    assert main([str(f)]) == 0
    assert "builtin.module" in capsys.readouterr().out


_MATMUL = """builtin.module {
  func.func @forward(%x: !prims.tensor<2x3xf32, cpu>, %y: !prims.tensor<5x4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu> {
    %0 = "ltorch.relu"(%x) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
    %1 = "ltorch.matmul"(%0, %y) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<5x4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu>
    func.return %1 : !prims.tensor<2x4xf32, cpu>
  }
}
"""  # noqa: E501  (a shape rule rejects the matmul: 3 != 5)


@pytest.mark.parametrize("flags,message", [
    ([], "error: ltorch.matmul: invalid inputs"),
    (["--disable-verify", "-p", "decompose-ltorch"],
     "error: ShapeError while rewriting ltorch.matmul: prims.matmul: shapes (2, 3) and "
     "(5, 4) cannot be multiplied"),
])
def test_a_shape_rule_failure_is_located_at_the_failing_op(
        flags: list[str], message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "in.mlir"
    f.write_text(_MATMUL)
    rc, err = _run([*flags, str(f)], capsys)
    assert rc == 1
    assert err.startswith(f"{f}:4:10: {message}"), err
    assert "Traceback" not in err


@pytest.mark.parametrize("args,message", [
    (["-p", "cse,,dce"], "malformed pass pipeline -p 'cse,,dce' at column 5: Expected pass "
                         "name here"),
    (["-p", "cse{"], "malformed pass pipeline -p 'cse{' at column 5: Expected argument "
                     "name here"),
    (["-p", "cse{bad=1}"], "bad pass option in -p: Provided arguments [\"bad\"] not found"),
    (["--load", "no_such_plugin_module"], "--load no_such_plugin_module: "
                                          "ModuleNotFoundError"),
    (["--load", "/no/such/passes.py"], "--load /no/such/passes.py: FileNotFoundError"),
])
def test_bad_pipeline_specs_and_plugins_give_one_line(
        args: list[str], message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "in.mlir"
    f.write_text("builtin.module {\n}\n")
    rc, err = _run([*args, str(f)], capsys)
    assert rc == 1
    assert err.startswith(f"thunder-ir-opt: error: {message}"), err
    assert len(err.splitlines()) == 1



def test_help_answers_without_importing_torch() -> None:
    """``--help`` (and ``--version``) need no dialect, executor or torch: the compile
    context is built after the arguments are parsed, the public names of ``thunder_ir``
    load on first use and the lowering's passes are registered by name."""
    import subprocess
    import sys

    code = ("import sys\nfrom thunder_ir.opt import main\n"
            "for flag in ('--help', '--version'):\n"
            "    try:\n        main([flag])\n    except SystemExit:\n        pass\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    listed = "".join(out.split())  # argparse wraps the list of passes
    assert "Availablepassesare:" in listed and "lower-to-torch" in listed
    assert "del-last-used" in listed and out.strip().endswith("False")
