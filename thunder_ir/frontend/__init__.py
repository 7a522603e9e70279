"""The frontend: user Python in, an ``ltorch`` program out.

Modules, each importing only those listed before it:

* `errors`: the errors of tracing and the user's file:line they name;
* `proxy`: `TensorProxy`, what user code holds while it is traced;
* `table`: the handler table (torch callable -> handler) and the calls answered directly;
* `builder`: `Builder`, the interface handlers write through;
* `fallback`: the handler of torch calls without an ``ltorch`` op (an opaque call);
* `context`: `TraceContext` (the `Builder` of tracing, with eager's autograd rules) and
  `TraceMode`, the ``TorchFunctionMode`` that routes calls to handlers;
* `torch_map`: the handlers of torch calls that become ``ltorch`` ops;
* `takeover`, `custom_function`, `backward_hooks`: handlers of what no
  ``TorchFunctionMode`` sees (``Function.apply``, RNG state, backward hooks);
* `tracer`: `trace_program`, the entry point.
"""

from thunder_ir.frontend.context import TracedProgram
from thunder_ir.frontend.errors import DataDependentError, ThunderTraceError
from thunder_ir.frontend.proxy import TensorProxy
from thunder_ir.frontend.tracer import trace_program

__all__ = ["DataDependentError", "TensorProxy", "ThunderTraceError", "TracedProgram",
           "trace_program"]
