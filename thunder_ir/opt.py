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
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target
from xdsl.xdsl_opt_main import xDSLOptMain


@dataclass(frozen=True)
class PythonTarget(Target):
    """``-t python``: prints the program as the Python source of a trace."""

    name: ClassVar[str] = "python"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from thunder_ir.lowering.python_printer import print_python

        output.write(print_python(module))


class ThunderIROptMain(xDSLOptMain):
    """xdsl-opt's driver with thunder_ir's dialects, passes and the Python target."""

    version_format: ClassVar[str] = "thunder-ir-opt (xdsl {xdsl_version})"

    def register_all_dialects(self) -> None:
        from thunder_ir.dialects.program import context

        self.ctx = context()

    def register_all_passes(self) -> None:
        from thunder_ir.passes.registry import pass_factories

        for name, factory in pass_factories().items():
            self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        from xdsl.targets import get_all_targets

        self.available_targets["mlir"] = get_all_targets()["mlir"]
        self.available_targets["python"] = lambda: PythonTarget

    def setup_pipeline(self) -> None:
        from xdsl.utils.arg_spec import parse_pipeline

        from thunder_ir.passes.registry import get_pass

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
    """The ``thunder-ir-opt`` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--load", action="append", default=[])
    known, _ = pre.parse_known_args(args)
    for target in known.load:  # before the driver collects the registered passes
        load_plugin(target)
    ThunderIROptMain("thunder_ir modular optimizer driver", args=args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
