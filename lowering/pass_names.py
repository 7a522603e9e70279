"""The lowering's passes, registered by name (``lower-claimed``, ``lower-to-torch``,
``del-last-used``), for ``thunder-ir-opt`` and pass specs.

Each name is a factory: the module that defines the pass (which imports torch and the
executors) loads when the pass is first used, so listing the passes (``thunder-ir-opt
--help``) costs nothing. Importing any module of ``thunder_ir.lowering`` registers them
(the package imports this module).
"""

from __future__ import annotations

from xdsl.passes import ModulePass

from thunder_ir.passes.registry import register_pass


def _lower_claimed() -> type[ModulePass]:
    from thunder_ir.lowering.executors import LowerClaimedPass

    return LowerClaimedPass


def _lower_to_torch() -> type[ModulePass]:
    from thunder_ir.lowering.torch_executor import LowerToTorchPass

    return LowerToTorchPass


def _del_last_used() -> type[ModulePass]:
    from thunder_ir.lowering.codegen import DelLastUsedPass

    return DelLastUsedPass


LOWERING_PASSES = {"lower-claimed": _lower_claimed, "lower-to-torch": _lower_to_torch,
                   "del-last-used": _del_last_used}
"""Each pass of the lowering by name, as the factory the registry resolves on first use."""

for _name, _factory in LOWERING_PASSES.items():
    register_pass(_factory, _name, replace=True)  # (replace: a reload registers again)

__all__ = ["LOWERING_PASSES"]
