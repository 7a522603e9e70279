"""The pipeline ``jit`` runs: `jit_pipeline` returns it as a tuple of registered passes.

From the traced program to the IR that becomes Python, every step is a ``ModulePass``
over one module of named functions, each registered by name (``thunder-ir-opt -p`` runs
any of them)::

    >>> print(pipeline_spec(jit_pipeline(JitOptions(executors=("torch",)))))
    flatten-cat-chains{keep_gradients=false},strip-autograd,claim,decompose-ltorch,cse,dce,
    restride-outputs,lower-claimed{executors="torch"},lower-to-torch

(one line; ``claim``'s default executors are ``("torch",)``). ``flatten-cat-chains`` comes
first (after the user's passes on the ltorch program, which see it as traced): a buffer
written slice by slice (``x[:, t] = v`` in a loop) becomes one ``cat`` of its slices
(`thunder_ir.passes.cat_chains`; when training, it keeps every value that may
have a gradient). Code generation comes after
(`thunder_ir.lowering.codegen.generate`, which returns the typed `CompiledProgram`; its
trace is ``del-last-used``, and ``thunder-ir-opt -p ...,del-last-used`` runs it as a pass).

Training (``JitOptions(training=True, ...)``) begins with ``decompose-for-grad``,
``autodiff`` and ``remat-split``, which leaves ``@forward`` and ``@backward`` in
the module, and ``join-padded-sums`` (a recurrence's per-step slice gradients, one
``cat``); every later pass works on both. User passes run at their stage
(`thunder_ir.api.STAGES`), each on every function as a module of its own and verified
(`thunder_ir.passes.pipeline.OnEachFunction`); backward-stage passes see ``@backward`` only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from xdsl.passes import ModulePass

from thunder_ir.dialects.program import BACKWARD
from thunder_ir.lowering.executors import LowerClaimedPass, get_executor
from thunder_ir.lowering.torch_executor import LowerToTorchPass
from thunder_ir.passes.autodiff import (
    AutodiffPass,
    DecomposeForGradPass,
    RematSplitPass,
)
from thunder_ir.passes.cat_chains import FlattenCatChainsPass
from thunder_ir.passes.claim import ClaimPass
from thunder_ir.passes.cse_dce import CSEPass, DCEPass
from thunder_ir.passes.decompose_ltorch import DecomposeLtorchPass
from thunder_ir.passes.fuse import FusePass
from thunder_ir.passes.padded_sums import JoinPaddedSumsPass
from thunder_ir.passes.pipeline import OnEachFunction
from thunder_ir.passes.restride import RestrideOutputsPass
from thunder_ir.passes.strip_autograd import StripAutogradPass


@dataclass(frozen=True)
class JitOptions:
    """What decides the pipeline of one compilation.

    Attributes:
        executors: executor objects or names, in priority order (the torch executor last).
        training: differentiate the program (some output requires grad).
        requires_grad: per program argument, whether it requires grad (training).
        remat: the remat policy (a name or a `thunder_ir.passes.remat.RematPolicy`).
        user: user passes by stage (``ltorch``, ``prims``, ``fusion``, ``backward``).
        data_parallel: the passes of a data-parallel module's training program, run after
            ``remat-split`` (``ddp-allreduce``; for a sharded module ``fsdp-grad-scale``,
            ``fsdp-zero3``, ``schedule-collectives``; see `thunder_ir.distributed`).
    """

    executors: tuple[Any, ...] = ("torch",)
    training: bool = False
    requires_grad: tuple[bool, ...] = ()
    remat: Any = "auto"
    user: Mapping[str, Sequence[ModulePass]] = field(default_factory=dict)
    data_parallel: tuple[ModulePass, ...] = ()


def _user(passes: Sequence[ModulePass], functions: tuple[str, ...] = ()
          ) -> list[ModulePass]:
    return [OnEachFunction(p, functions) for p in passes]


def jit_pipeline(options: JitOptions) -> tuple[ModulePass, ...]:
    """Every pass ``jit`` runs between tracing and code generation, in order, for
    ``options``."""
    ex = tuple(options.executors)
    user = options.user
    # (user passes on the ltorch program see it as traced: ``last_traces(jf)[1]`` is theirs)
    passes: list[ModulePass] = [*_user(user.get("ltorch", ())),
                                FlattenCatChainsPass(keep_gradients=options.training)]
    if options.training:
        passes += [DecomposeForGradPass(ex),
                   AutodiffPass(tuple(options.requires_grad), ex),
                   RematSplitPass(options.remat, ex), JoinPaddedSumsPass()]
        passes += _user(user.get("backward", ()), (BACKWARD,))
        passes += options.data_parallel
    passes += [StripAutogradPass(), ClaimPass(ex), DecomposeLtorchPass()]
    passes += _user(user.get("prims", ()))
    # Clean up while ops are still Pure ltorch/prims ops (torch.call is opaque to CSE/DCE):
    # VJP rules leave unused values behind, and repeated subexpressions should fuse once.
    passes += [CSEPass(), DCEPass()]
    fusion = tuple(e for e in (get_executor(e) if isinstance(e, str) else e for e in ex)
                   if e.is_fusion)
    if fusion:
        passes.append(FusePass(fusion))
    passes += _user(user.get("fusion", ()))
    passes += [RestrideOutputsPass(), LowerClaimedPass(ex), LowerToTorchPass()]
    return tuple(passes)


def pipeline_spec(passes: Sequence[ModulePass]) -> str:
    """The passes as one ``thunder-ir-opt -p`` spec (executors by name)."""
    return ",".join(str(p.spec()) for p in passes)


__all__ = ["JitOptions", "jit_pipeline", "pipeline_spec"]
