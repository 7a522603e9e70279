"""thunder_ir inside ``torch.compile`` (ThunderFX).

``torch.compile(model, backend=ThunderCompiler())`` lets TorchDynamo capture the program
(graph breaks, data-dependent control flow, prints are Dynamo's business) and hands each FX
graph to thunder_ir, which runs what it supports and sends the rest to Inductor. Also
``thunderfx(model)`` (one call) and ``backend="thunder_ir"`` (a named backend). See
docs/thunderfx.md.
"""

from torch._dynamo import list_backends as _list_backends
from torch._dynamo import register_backend as _register_backend

from thunder_ir.dynamo.compiler import (
    InductorPartition,
    SubgraphInfo,
    ThunderCompiler,
    ThunderFXCompiledObject,
    thunder_backend,
    thunderfx,
)
from thunder_ir.dynamo.report import report
from thunder_ir.dynamo.splitter import SplitReason, SplitReasonType

if "thunder_ir" not in _list_backends(exclude_tags=()):
    _register_backend(thunder_backend, name="thunder_ir")

__all__ = ["InductorPartition", "SplitReason", "SplitReasonType", "SubgraphInfo",
           "ThunderCompiler", "ThunderFXCompiledObject", "report", "thunderfx"]
