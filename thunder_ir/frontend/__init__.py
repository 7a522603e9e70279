"""The frontend: user Python in, an ``ltorch`` program out.

Modules, each importing only those listed before it:

* `errors`: the errors of tracing and the user's file:line they name;
* `proxy`: `TensorProxy`, what user code holds while it is traced;
* `table`: the handler table (torch callable -> handler) and the calls answered directly;
* `builder`: `Builder`, the interface handlers write through;
* `python_calls`: torch calls on plain Python values (run as eager runs them) and
  ``torch._assert``'s handler;
* `fallback`: the handler of torch calls without an ``ltorch`` op (an opaque call; a call
  on plain Python values goes to `python_calls`);
* `program_build`, `eager_autograd`, `aliasing`, `pystate`: the four parts of a trace's
  state (program building; eager autograd state; alias tracking; state reads);
* `context`: `TraceContext` (the `Builder` of tracing, composing those parts, with eager's
  autograd rules) and `TraceMode`, the ``TorchFunctionMode`` that routes calls to handlers;
* `torch_map`: the handlers of torch calls that become ``ltorch`` ops;
* `takeover`, `custom_function`, `backward_hooks`: handlers of what no
  ``TorchFunctionMode`` sees (``Function.apply``, RNG state, backward hooks);
* `tracer`: the entry points: `trace_program` (a user's call) and `subtrace` (a function
  traced on its own: extensions' transforms and meta functions, the ThunderFX probe).
"""

from thunder_ir.frontend.context import TracedProgram
from thunder_ir.frontend.errors import DataDependentError, ThunderTraceError
from thunder_ir.frontend.proxy import TensorProxy
from thunder_ir.frontend.tracer import Placeholder, SubTrace, subtrace, trace_program

__all__ = ["DataDependentError", "Placeholder", "SubTrace", "TensorProxy", "ThunderTraceError",
           "TracedProgram", "subtrace", "trace_program"]
