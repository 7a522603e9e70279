"""``thunder_ir.extend``: executors of your own, with operators and implementations.

An `OperatorExecutor` brings two things to a jitted program:

* **operators** (`OperatorExecutor.register_operator`): a Python function that thunder_ir
  records as *one op* instead of tracing through it. The op is named
  ``<executor>.<operator>`` and prints that way in every trace
  (``t2 = my_ex.apply_rope(x, cos, sin)``); generated code calls the operator's ``fn``.
  Result shapes come from ``meta`` (or ``like``), run on proxies while tracing. With
  ``replaces=f``, calls to the Python function ``f`` made while a program is traced are
  diverted to the operator, however user code reaches ``f``.
* **implementations** (`OperatorExecutor.register_implementation`) of an operator or of an
  ``ltorch`` op: a ``checker`` decides per call whether this executor takes the op; an
  ``execution_transform`` (Python written with torch functions and operators) replaces it
  when it does; a ``grad_transform`` defines its backward with `get_grad`/`put_grads`.

How it maps onto the compiler (see ARCHITECTURE.md, "Extending"):

* each operator is an op class created at registration: an ``ltorch``-level op
  (`OperatorOp`) with one optional operand per parameter of ``fn`` (tensors, and numbers
  as ``prims.constant`` values, so traces print them inline) and one property per
  parameter for other static values. It is ``Pure`` and ``EXECUTABLE``: lowering keeps
  it, and generated code calls it through its namespace (``my_ex.apply_rope``).
* claiming: ``can_claim`` runs the checker; ``expand`` traces the execution transform
  into ops that replace the claimed op (the claim pass then claims those in turn).
* autodiff: ``vjp_rule`` turns a grad transform into a VJP rule. The transform is traced
  with proxies bound to the op's operands; the values it passes to `put_grads` (and
  everything they need) are copied into the backward, where they show up in
  ``last_backward_traces``. An operator without a grad transform is differentiated by
  ``torch.autograd`` through its ``fn`` at run time (`operator_vjp`).
"""

from thunder_ir.extend.executor import (
    OperatorExecutor,
    add_default_executor,
    deregister_executor,
    register_executor,
)
from thunder_ir.extend.grads import get_grad, put_grads
from thunder_ir.extend.ops import OperatorOp
from thunder_ir.extend.symbols import Symbol, operator_vjp
from thunder_ir.frontend.proxy import TensorProxy
from thunder_ir.lowering.executors import get_all_executors, get_default_executors

__all__ = [
    "OperatorExecutor",
    "OperatorOp",
    "Symbol",
    "TensorProxy",
    "add_default_executor",
    "deregister_executor",
    "get_all_executors",
    "get_default_executors",
    "get_grad",
    "operator_vjp",
    "put_grads",
    "register_executor",
]
