"""``thunder-ir-opt``: run thunder_ir passes on textual IR, as ``xdsl-opt`` does.

Pass authors and the golden tests (``tests/filecheck``) use it::

    thunder-ir-opt -p decompose-ltorch,cse,dce model.mlir
    thunder-ir-opt model.mlir | thunder-ir-opt           # round trip
    thunder-ir-opt --verify-diagnostics bad.mlir         # print the verifier's message
    thunder-ir-opt -t python model.mlir                  # the program as a Python trace

It is xDSL's own driver (`xdsl.xdsl_opt_main.xDSLOptMain`) with thunder_ir's dialects and
its registered passes (built-ins, `thunder_ir.passes.register_pass` calls made by plugins,
and the ``thunder_ir.passes`` entry-point group), so every xdsl-opt flag works:
``--split-input-file``, ``--print-between-passes``, ``--verify-diagnostics``,
``--time-passes``, ``--print-op-generic``, ``-o``. One target is added: ``-t python``
(alias ``--print-python``) prints the Python trace form.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any, ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.targets.mlir import MLIRTarget
from xdsl.utils.exceptions import ArgSpecParseError
from xdsl.utils.target import Target
from xdsl.xdsl_opt_main import xDSLOptMain


@dataclass(frozen=True)
class PythonTarget(Target):
    """``-t python``: prints the program as the Python source of a trace (each function in
    turn, through the one printer of generated code; ``@prologue``, of guard ops, as the
    cache's key function)."""

    name: ClassVar[str] = "python"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from xdsl.dialects import func

        from thunder_ir.dialects.program import BACKWARD
        from thunder_ir.runtime.python_printer import print_python

        fns = [op for op in module.ops if isinstance(op, func.FuncOp)]
        # @backward as it runs: one list of residuals and cotangents, which it empties
        output.write("\n\n".join(print_python(f, packed=f.sym_name.data == BACKWARD)
                                  for f in fns) if fns else print_python(module))


@dataclass(frozen=True)
class LocatedMLIRTarget(MLIRTarget):
    """xdsl-opt's ``mlir`` target printing the ops' known source locations
    (``loc("model.py":3:0)``), so a round trip keeps the user's lines;
    ``--print-debuginfo`` prints every location, unknown ones included, as xdsl-opt does."""

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        if self.syntax_highlight:
            super().emit(ctx, module, output)
            return
        from thunder_ir.dialects.location import LocatedPrinter

        printer = LocatedPrinter(
            stream=output, print_generic_format=self.print_generic_format,
            print_properties_as_attributes=self.print_properties_as_attributes,
            print_debuginfo=self.print_debuginfo)
        printer.print_op(module)
        printer.print_metadata(ctx.loaded_dialects)
        print("\n", file=output)


class ThunderIROptMain(xDSLOptMain):
    """xdsl-opt's driver with thunder_ir's dialects, passes and the Python target."""

    version_format: ClassVar[str] = "thunder-ir-opt (xdsl {xdsl_version})"

    def register_all_dialects(self) -> None:
        """Nothing yet: the compile context (the dialects, the executor registry, and so
        torch) is built once the arguments are parsed (`setup_pipeline`), so that
        ``--help`` and ``--version`` answer without it."""

    def register_all_passes(self) -> None:
        import thunder_ir.lowering  # noqa: F401  (registers the lowering's passes by name)
        from thunder_ir.passes.registry import pass_factories

        for name, factory in pass_factories().items():
            self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        self.available_targets["mlir"] = lambda: LocatedMLIRTarget
        self.available_targets["python"] = lambda: PythonTarget

    def setup_pipeline(self) -> None:
        from xdsl.utils.arg_spec import parse_pipeline

        from thunder_ir.lowering.executors import compile_context
        from thunder_ir.passes.registry import get_pass

        # The passes run with a compile context: executors named in a pass spec
        # (``claim{executors=sdpa}``) are found in the executor registry.
        allow_unregistered = self.ctx.allow_unregistered
        self.ctx = compile_context(())
        self.ctx.allow_unregistered = allow_unregistered

        for spec in parse_pipeline(self.args.passes):
            if spec.name not in self.available_passes:
                try:
                    get_pass(spec.name)
                except KeyError as e:  # UnknownPassError: the message lists the passes
                    sys.exit(f"thunder-ir-opt: {e}")
        super().setup_pipeline()

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--load", action="append", default=[], metavar="MODULE_OR_FILE",
            help="Import a module or a .py file first (it registers passes with "
                 "thunder_ir.passes.registry.register_pass); repeatable")
        arg_parser.add_argument(
            "--print-python", action="store_const", const="python", dest="target",
            help="Print the result as a Python trace (same as -t python)")
        arg_parser.add_argument(
            "--traceback", action="store_true",
            help="On an error, show the Python traceback instead of a one-line diagnostic")


def load_plugin(target: str) -> None:
    """Imports a module by name, or a ``.py`` file by path (its passes register on import)."""
    import importlib
    import importlib.util
    import os

    if target.endswith(".py") or os.sep in target:
        path = os.path.abspath(target)
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            sys.exit(f"thunder-ir-opt: cannot load {target!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        importlib.import_module(target)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``thunder-ir-opt`` console script.

    Bad input gives a diagnostic on stderr and exit status 1: ``file:line:col: error: ...``
    for malformed IR, unknown ops and verifier failures, one line for a missing, empty or
    binary file. ``--traceback`` shows the Python traceback instead. Callable in-process:
    what xDSL's driver patches globally (``--disable-verify`` turns attribute verification
    off) is put back on return."""
    from xdsl.ir import Attribute

    post_init = Attribute.__post_init__
    try:
        return _main(argv)
    finally:
        Attribute.__post_init__ = post_init  # type: ignore[method-assign]


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--load", action="append", default=[])
    pre.add_argument("--traceback", action="store_true")
    known, _ = pre.parse_known_args(args)
    try:
        for target in known.load:  # before the driver collects the registered passes
            load_plugin(target)
        # Building the driver parses the pass pipeline (-p): a malformed spec fails here.
        driver = ThunderIROptMain("thunder_ir modular optimizer driver", args=args)
    except (Exception, ArgSpecParseError) as e:  # (xDSL's spec error is a BaseException)
        if known.traceback:
            raise
        print(_setup_diagnostic(e, known.load), file=sys.stderr)
        return 1
    source = driver.args.input_file
    if source is not None and not known.traceback:
        problem = _unreadable(source)
        if problem is not None:
            print(f"thunder-ir-opt: error: {problem}", file=sys.stderr)
            return 1
    try:
        driver.run()
    except Exception as e:
        if known.traceback:
            raise
        print(_diagnostic(e, source), file=sys.stderr)
        return 1
    return 0


def _setup_diagnostic(e: BaseException, loads: list[str]) -> str:
    """One line for a failure before any IR is read: a ``--load`` target that does not
    import, or a malformed ``-p`` pipeline spec (xDSL's message and column)."""
    if isinstance(e, ArgSpecParseError):
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        col = lines[1].rsplit(":", 1)[-1] if len(lines) > 1 else "?"
        spec = lines[2] if len(lines) > 2 else ""
        return (f"thunder-ir-opt: error: malformed pass pipeline -p '{spec}' at column "
                f"{col}: {lines[-1].strip()}")
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code is not load_plugin.__code__:
        tb = tb.tb_next
    if tb is not None:  # raised while importing a --load target
        target = tb.tb_frame.f_locals.get("target", loads[-1] if loads else "?")
        return (f"thunder-ir-opt: error: --load {target}: {type(e).__name__}: {e} "
                "(a module name on sys.path, or a path to a .py file)")
    if isinstance(e, ValueError):  # xDSL's argument check of a pass's options
        return f"thunder-ir-opt: error: bad pass option in -p: {e}"
    return f"thunder-ir-opt: error: {type(e).__name__}: {e}"


def _unreadable(path: str) -> str | None:
    """Why ``path`` cannot be IR text at all (missing, a folder, binary, empty), or None."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return f"cannot read '{path}': {e.strerror or e}"
    if b"\0" in data:
        return f"'{path}' is a binary file, not IR text"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"'{path}' is not UTF-8 text (byte {e.start}): not IR"
    if not text.strip():
        return f"'{path}' is empty: expected a builtin.module"
    return None


def _diagnostic(e: Exception, source: str | None) -> str:
    """``file:line:col: error: message`` (with the offending line) for an exception."""
    from xdsl.utils.exceptions import DiagnosticException, ParseError

    name = source or "<stdin>"
    if isinstance(e, ParseError):
        loc = e.span.get_location()
        where = f"{loc.line}:{loc.col}"
        context = [ln for ln in e.span.print_with_context().rstrip("\n").splitlines()
                   if not ln.endswith(where) and ln.strip()]
        return "\n".join([f"{name}:{where}: error: {e.msg}", *context])
    if isinstance(e, UnicodeDecodeError):
        return f"thunder-ir-opt: error: {name} is not UTF-8 text (byte {e.start}): not IR"
    if isinstance(e, DiagnosticException):
        msg = " ".join(ln.strip() for ln in str(e).strip().splitlines()) or type(e).__name__
        return f"{name}:{_failing_op_location(e, source)}: error: {msg}"
    op = _rewritten_op(e)
    if op is not None:  # a pass failed on an op (a shape rule rejecting what it built)
        return (f"{name}:{_op_location(op, source)}: error: {type(e).__name__} while "
                f"rewriting {op.name}: {e}")
    return f"thunder-ir-opt: error: {type(e).__name__}: {e}"


def _failing_op_location(e: BaseException, source: str | None) -> str:
    """``line:col`` of the op a verifier error is about (xDSL's note marks its printed line
    with carets): where that op's name occurs in the source, else ``1:1``."""
    notes = "\n".join(getattr(e, "__notes__", ())).splitlines()
    marked = next((notes[i - 1] for i in range(1, len(notes))
                   if re.fullmatch(r"\s*\^+-*\s*", notes[i])), "")
    found = re.search(r'"([A-Za-z_][\w.]*)"\s*\(', marked)
    if found is None:
        return "1:1"
    return _locate(found.group(1), 0, source)


def _rewritten_op(e: BaseException) -> Any:
    """The op a pass was rewriting when ``e`` was raised (the innermost frame with an
    ``op`` that belongs to a module), or None."""
    from xdsl.ir import Operation

    tb, op = e.__traceback__, None
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("op")
        if isinstance(candidate, Operation) and candidate.parent is not None:
            op = candidate
        tb = tb.tb_next
    return op


def _op_location(op: Any, source: str | None) -> str:
    """``line:col`` of ``op`` in the source: the n-th occurrence of its name, n its rank
    among the ops of that name in the module (printing keeps the ops' order)."""
    root = op
    while root.parent_op() is not None:
        root = root.parent_op()
    rank = 0
    for other in root.walk():
        if other is op:
            break
        rank += other.name == op.name
    return _locate(op.name, rank, source)


def _locate(name: str, rank: int, source: str | None) -> str:
    """``line:col`` of the ``rank``-th occurrence of op ``name`` in ``source``."""
    if source is None:
        return "1:1"
    try:
        with open(source, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return "1:1"
    pattern = re.compile(rf'"{re.escape(name)}"|(?<![\w.%"]){re.escape(name)}\b')
    for i, line in enumerate(lines, 1):
        for m in pattern.finditer(line):
            if rank == 0:
                return f"{i}:{m.start() + 1}"
            rank -= 1
    return "1:1"


if __name__ == "__main__":
    sys.exit(main())
