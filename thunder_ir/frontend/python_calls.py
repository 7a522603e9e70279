"""Torch calls on plain Python values, and ``torch._assert``.

While a function is traced, a ``TorchFunctionMode`` is on, and under a mode torch's
``has_torch_function`` says yes for any argument: ``torch._assert(flag, "msg")`` with a
Python ``bool``, ``torch.result_type(1, 2.0)``, ``torch.promote_types(...)`` all reach the
tracer although no traced tensor takes part. Eager runs them on their Python values;
here too:

- `plain_call`: a call without a handler (the opaque-call `fallback`) whose arguments hold
  no tensor (traced or real) and no symbolic number is run on the meta device first (so a
  creation op draws nothing and allocates nothing). If that returns a tensor, the call is
  a creation op (``torch.hann_window(4)``, ``torch.tril_indices(3, 3)``) and is recorded
  as one, as before: its values, and any random draws, stay in the program. If it returns
  no tensor, it is a Python function of Python values, and it runs as eager runs it, its
  result (a dtype, a bool, ``None``) handed back as it is. If the meta run raises a
  complaint about the arguments (``torch.atleast_1d(3)``, ``torch.hann_window(-1)``), the
  function runs as eager runs it (the generator's state kept), so that the error raised is
  eager's own, in eager's words; a failure of the meta run itself (no meta kernel, a
  data-dependent size) is left to the fallback's own errors.
- ``torch._assert`` (`assert_`): a condition that is not a traced tensor (a ``bool``, a
  symbolic size's comparison) is checked as eager checks it, now; a traced tensor's value
  is not known while tracing, so the check becomes a call in the program (eager's own
  ``torch._assert`` on the real tensor, which keeps it: it has effects), raising eager's
  ``AssertionError(message)`` when the condition is false at run time.
- ``copy.deepcopy`` of a traced tensor (`deepcopy_`; ``copy.deepcopy(self)`` of a module in
  its ``forward``) is refused, naming the line: eager's copies are new tensor objects the
  user's objects hold, which a program cannot hand out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunder_ir.dialects.base import OperandRef
from thunder_ir.dialects.torch import make_call
from thunder_ir.frontend.builder import Builder
from thunder_ir.frontend.errors import Refused, ThunderTraceError, where
from thunder_ir.frontend.proxy import is_proxy
from thunder_ir.frontend.table import register_handlers

NOT_PLAIN: Any = object()
"""`plain_call`'s answer for a call that is not one on plain Python values."""

_NOT_PLAIN_LEAVES = (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)

_META_FAILURES = ("meta", "data-dependent", "data dependent", "without output_size")
"""Words of an error that the meta run itself caused, not the arguments (see `plain_call`)."""


def _plain(leaves: Sequence[Any]) -> bool:
    """No tensor (traced or real) and no symbolic number among ``leaves``."""
    return not any(isinstance(x, _NOT_PLAIN_LEAVES) for x in leaves)


def plain_call(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """What eager returns for ``func(*args, **kwargs)`` when the arguments hold no tensor and
    no symbolic number and the function returns no tensor; `NOT_PLAIN` for every other
    call (see the module doc). Raises eager's error for arguments eager refuses."""
    leaves = pytree.tree_leaves((tuple(args), kwargs))
    if not _plain(leaves):
        return NOT_PLAIN
    on_meta = dict(kwargs)
    if on_meta.get("device") is not None:
        on_meta["device"] = "meta"
    try:
        with torch.device("meta"):
            probe = func(*args, **on_meta)
    except NotImplementedError:
        return NOT_PLAIN
    except Exception as e:
        if any(w in str(e) for w in _META_FAILURES):
            return NOT_PLAIN
        # the arguments' own fault, most likely: eager's error is eager's call's (a meta
        # kernel may word it differently), and should the call succeed after all, it drew
        # nothing from the generator that the program's own run would draw
        with torch.random.fork_rng(devices=[]):
            probe = func(*args, **kwargs)
        return probe if _plain(pytree.tree_leaves(probe)) else NOT_PLAIN
    if not _plain(pytree.tree_leaves(probe)):
        return NOT_PLAIN  # a creation op: recorded, its values (and draws) in the program
    return func(*args, **kwargs)  # (the tracing mode is set aside while it dispatches)


def assert_(ctx: Builder, condition: Any, message: Any) -> Any:
    """``torch._assert``: checked now (a Python condition), or in the program (a traced
    tensor's value), raising eager's ``AssertionError(message)`` (see the module doc)."""
    if not is_proxy(condition):
        return torch._assert(condition, message)  # eager's code (the mode is set aside)
    try:
        op = make_call("torch._assert", [ctx.value_of(condition)], [OperandRef(0), message],
                       result_types=[])
    except TypeError:
        raise ThunderTraceError(
            f"{where(ctx.loc)}: torch._assert on a traced tensor got a message thunder_ir "
            f"cannot record: {type(message).__name__} {message!r}; pass a string.") from None
    ctx.record(op)
    return None


register_handlers([torch._assert], assert_)


def deepcopy_(ctx: Builder, tensor: Any, memo: Any = None) -> Any:
    """``copy.deepcopy`` of a traced tensor (``copy.deepcopy(self)`` of a module in its
    ``forward``, which copies its parameters): eager makes new tensor objects (new leaves,
    new storage, their ``__dict__`` copied) that the user's objects then hold; a program
    cannot hand out such objects as eager does, so the copy is refused, naming the line,
    before anything is copied (no half-made copy holds a proxy)."""
    raise Refused(
        f"{where(ctx.loc)}: copy.deepcopy of a traced tensor (a {tuple(tensor.shape)} "
        f"{tensor.dtype} tensor: an argument, a module's parameter or buffer, or a value "
        "computed from them) inside the jitted function is not supported: eager makes new "
        "tensor objects that a compiled program cannot hand out. Copy outside the jitted "
        "function (a module: in __init__ or before calling it), or use "
        "tensor.detach().clone() inside it.")


register_handlers([torch.Tensor.__deepcopy__], deepcopy_)

__all__ = ["NOT_PLAIN", "assert_", "deepcopy_", "plain_call"]
