"""thunder_ir.passes: rewrite passes, their registry and the pipeline that runs them.

``register_pass``/``get_pass``/``available_passes`` manage passes by kebab-case name
(see `thunder_ir.passes.registry`); `Pipeline` runs a tuple of them with a hook after each
(see `thunder_ir.passes.pipeline`). Pass modules are imported only when a pass is used.
"""

from thunder_ir.passes.pipeline import PassVerificationError, Pipeline, run_passes, verify_module
from thunder_ir.passes.registry import (
    UnknownPassError,
    available_passes,
    get_pass,
    make_pass,
    make_passes,
    register_pass,
)

__all__ = [
    "PassVerificationError",
    "Pipeline",
    "UnknownPassError",
    "available_passes",
    "get_pass",
    "make_pass",
    "make_passes",
    "register_pass",
    "run_passes",
    "verify_module",
]
