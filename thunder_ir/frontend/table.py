"""The handler table: which torch callables the tracer handles, and how.

`HANDLERS` maps a torch callable to ``handler(builder, *args, **kwargs)``, where
``builder`` is a `thunder_ir.frontend.builder.Builder`. It is its own module so that the
modules that fill it (`thunder_ir.frontend.torch_map`, `custom_function`, `takeover`,
`backward_hooks`, the extension API) and the one that reads it (the tracing mode in
`thunder_ir.frontend.context`) import it, not each other. `thunder_ir.frontend.tracer`
imports every module that fills it before it traces.

Also here: the calls that are answered without recording anything (`METADATA`, property
getters) and those that need a tensor's value (`DATA_DEPENDENT`).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from thunder_ir.dialects.tables import RuleTable

Handler = Callable[..., Any]
HANDLERS: RuleTable[Any, Handler] = RuleTable("route")
"""torch callable -> handler(builder, *args, **kwargs); filled by the handler modules
(built-in routes, frozen) and the public `register_torch_op` (additions): a
`thunder_ir.dialects.tables.RuleTable`."""
TRACING_CONTEXTS: list[Callable[[], Any]] = []
"""Factories of context managers entered around user code while it is traced (and only
then): e.g. the extension API's diversion of ``replaces=`` functions."""

TRACES_PYTHON = "traces_python"
"""A handler marked with this attribute set to True traces a Python body
(`Builder.run_python`): the torch calls it makes are recorded one by one (so autocast,
`thunder_ir.frontend.autocast`, applies to each of them, as in eager)."""


def traces_python(handler: Handler) -> Handler:
    """Marks ``handler`` as tracing a Python body (`TRACES_PYTHON`)."""
    setattr(handler, TRACES_PYTHON, True)
    return handler


def _no_torch_function(*args: Any) -> bool:
    return False


def inline(fn: Callable[..., Any]) -> Handler:
    """A handler that traces through the Python torch function ``fn``.

    ``fn`` runs as a copy whose ``has_torch_function*`` checks say no (so it does not hand
    itself back to the tracer), through `Builder.run_python`, so every torch call it makes
    is traced."""
    scope = dict(fn.__globals__)
    for n in ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic"):
        scope[n] = _no_torch_function
    body = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    body.__kwdefaults__ = fn.__kwdefaults__

    def handler(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        return ctx.run_python(body, args, kwargs)

    return handler


def register_handlers(fns: Sequence[Any], handler: Handler | None, *,
                      builtin: bool = True, replace: bool = False) -> None:
    """Routes each of ``fns`` to ``handler`` (nothing when it is None: an op not built):
    the one way a torch callable is routed, and a callable is routed once (a second route
    would silently replace the first, whichever module imports last). ``builtin``: a
    route of a thunder_ir handler module, frozen once made; else an addition (the public
    `register_torch_op`), which ``replace`` lets a user make again (a notebook cell run
    twice)."""
    if handler is None:
        return
    for f in fns:
        HANDLERS.register(f, handler, builtin=builtin, replace=replace)


LIBRARY_HANDLERS: dict[str, Handler] = {}
"""Handlers of libraries' custom ops, by qualified name (``"transformers::grouped_mm_fallback"``):
a library registers its ops when it is imported, so they are looked up by name on their
first call (`library_handler`) and then kept in `HANDLERS`."""


def library_handler(func: Any) -> Handler | None:
    """The handler of a library's custom op known by name, or None."""
    if isinstance(func, torch._ops.OpOverloadPacket):
        name = func._qualified_op_name
    elif isinstance(func, torch._ops.OpOverload):
        name = func._schema.name
    else:
        return None
    h = LIBRARY_HANDLERS.get(name)
    if h is not None:
        HANDLERS.register(func, h, builtin=True)
    return h


_T = torch.Tensor


def getter(name: str) -> Any:
    """The ``__get__`` of a Tensor property, as torch function handlers receive it."""
    return getattr(_T, name).__get__


COMPUTED_GETTERS = {getter(n) for n in ("T", "mT", "H", "mH", "real", "imag", "data")}
METADATA: set[Any] = {
    torch.device,  # constructing one (FX code spells device constants as device(...))
    _T.size, _T.dim, _T.numel, _T.nelement, _T.ndimension, _T.__len__, _T.is_floating_point,
    _T.is_complex, _T.element_size, _T.get_device, _T.is_contiguous, _T.stride,
    _T.is_signed, _T.storage_offset, _T.is_conj, _T.is_neg, _T.is_same_size,
    torch.is_floating_point, torch.is_complex, torch.numel, torch.is_conj, torch.is_neg,
    torch.is_same_size, torch.is_signed,
    torch._C._nn._parse_to,  # `Module.to`'s argument parser (a tensor argument: its metadata)
    torch._has_compatible_shallow_copy_type,  # `Module._apply`: types only
}
DATA_DEPENDENT: dict[Any, str] = {
    _T.__bool__: "bool(tensor)", _T.item: ".item()", _T.tolist: ".tolist()",
    _T.__int__: "int(tensor)", _T.__float__: "float(tensor)",
    _T.__index__: "using a tensor as an index",
    _T.numpy: ".numpy()", _T.nonzero: ".nonzero()", torch.nonzero: "torch.nonzero",
    torch.masked_select: "torch.masked_select", _T.masked_select: ".masked_select()",
    torch.unique: "torch.unique", _T.unique: ".unique()", _T.data_ptr: ".data_ptr()",
    torch.argwhere: "torch.argwhere", _T.__array__: "numpy conversion",
    _T.__complex__: "complex(tensor)", torch.is_nonzero: "torch.is_nonzero",
    _T.equal: ".equal()",
    torch.equal: "torch.equal", _T.allclose: ".allclose()", torch.allclose: "torch.allclose",
}

