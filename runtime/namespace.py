"""The generated-code namespace: every callable that generated code calls besides torch's.

Generated Python imports this one module, and nothing else of thunder_ir::

    import torch
    from thunder_ir.runtime import namespace as tir
    from thunder_ir.runtime.namespace import prims

    @tir.no_grad
    def forward(x):
      t0 = prims.sum(x, dims=(0,))
      (t1, t2) = tir.call_with_grad('torch.cumsum', t0, ...)

It is a registry, filled by whoever defines a callable, so that no package imports
another against the arrows to reach it:

* the runtime's own functions (`call_with_grad`, the hook runners, attention with dropout,
  `no_grad`, the prologue's `tensor_meta` and `aliases`, `restride`) are registered here,
  by this module;
* the lowering registers what it synthesizes (``prims_sum``: an op's reference
  implementation for the torch executor; the SDPA and Triton executors' callees; the op
  namespaces ``prims``/``ltorch`` of not yet lowered traces);
* the frontend and the extension API register their helpers (``setitem``,
  ``grouped_mm``, ``operator_vjp``).

A ``torch.call`` names a registered callable by its path here (`callee`: the IR says
``thunder_ir.runtime.namespace.call_with_grad``, the Python ``tir.call_with_grad``), and
`thunder_ir.dialects.torch.torch_name` of a registered callable answers that path. A name
can be registered lazily (`register_lazy`: a loader run on first use, for a module that
needs an optional package) or answered by a resolver (`add_resolver`: the torch
executor's ``<dialect>_<op>`` wrappers), so that printed source run in a fresh process
finds what it calls.

Registered callables are attributes of this module, so a call in generated code costs the
global ``tir`` and one attribute: fewer look-ups than the import paths it replaces.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from thunder_ir.dialects.torch import RUNTIME_NAMESPACE, name_callee, runtime_callee
from thunder_ir.runtime import (
    attention,
    autograd_fallback,
    cache,
    hooks,
    layout,
    speculation,
)

ALIAS = "tir"
"""The name generated code imports this module under."""

IMPORT = f"from {RUNTIME_NAMESPACE.rsplit('.', 1)[0]} import namespace as {ALIAS}"
"""The import line of generated code."""

_REGISTERED: dict[str, Any] = {}
_LAZY: dict[str, Callable[[], Any]] = {}
_LOADED: set[str] = set()
"""Names registered by their lazy loader (`register_lazy` may name them again)."""
_RESOLVERS: list[Callable[[str], Any]] = []

F = TypeVar("F", bound=Callable[..., Any])


def callee(name: str) -> str:
    """The IR callee path of the registered ``name``."""
    return runtime_callee(name)


def register(name: str, obj: Any) -> str:
    """Makes ``obj`` callable from generated code as ``tir.<name>``.

    Idempotent for the same object.

    Returns:
        the callee path a ``torch.call`` names it by.

    Raises:
        ValueError: ``name`` is taken by another object, or is not an identifier.
    """
    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"namespace: {name!r} is not a public Python identifier")
    old = _REGISTERED.get(name)
    if old is not None and old is not obj and old != obj:  # (a bound method is made anew)
        raise ValueError(f"namespace: {name!r} is already registered "
                         f"({getattr(old, '__qualname__', old)!r}); pick another name")
    if old is None and globals().get(name, obj) is not obj:
        raise ValueError(f"namespace: {name!r} is a name of the namespace module itself")
    if name in _LAZY:  # (the loader pops its name before registering what it loaded)
        raise ValueError(f"namespace: {name!r} is already registered (to be loaded on first "
                         "use); pick another name")
    _REGISTERED[name] = obj
    globals()[name] = obj
    path = callee(name)
    name_callee(obj, path)
    return path


def export(fn: F) -> F:
    """Decorator: `register` ``fn`` under its own ``__name__``."""
    register(fn.__name__, fn)
    return fn


def register_lazy(name: str, loader: Callable[[], Any]) -> str:
    """Registers ``name`` to the object ``loader()`` returns, loaded on its first use (for
    callables of modules that need an optional package). Returns the callee path."""
    if name in _REGISTERED and name not in _LOADED:
        raise ValueError(f"namespace: {name!r} is already registered "
                         f"({getattr(_REGISTERED[name], '__qualname__', _REGISTERED[name])!r}); "
                         "pick another name")
    if name not in _REGISTERED:
        _LAZY[name] = loader
    return callee(name)


def add_resolver(resolver: Callable[[str], Any]) -> None:
    """Adds a function that answers a name nobody registered (the object, or None); what
    it answers is registered under that name."""
    if resolver not in _RESOLVERS:
        _RESOLVERS.append(resolver)


def registered() -> dict[str, Any]:
    """Every name registered so far, and its object."""
    return dict(_REGISTERED)


def __getattr__(name: str) -> Any:
    """A name registered lazily or answered by a resolver: loaded once, then an attribute."""
    loader = _LAZY.pop(name, None)
    obj = loader() if loader is not None else None
    if loader is not None:
        _LOADED.add(name)
    if obj is None and not name.startswith("__"):
        obj = next((o for r in _RESOLVERS if (o := r(name)) is not None), None)
    if obj is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} (nothing "
                             "registered it in the generated-code namespace)")
    register(name, obj)
    return obj


# --------------------------------------------------------------------------- the runtime's


def no_grad(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.no_grad()`` for generated code, without a context-manager object per call.

    The decorated function runs with grad mode off and restores it afterwards; when grad
    mode is already off it is a plain call.
    """
    is_enabled = torch.is_grad_enabled
    set_enabled = torch._C._set_grad_enabled

    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        if not is_enabled():
            return fn(*args)
        set_enabled(False)
        try:
            return fn(*args)
        finally:
            set_enabled(True)

    return wrapper


for _fn in (no_grad, autograd_fallback.call_with_grad, autograd_fallback.handle_vjp,
            autograd_fallback.call_on_copies, autograd_fallback.no_derivative,
            autograd_fallback.inplace_on_copy, attention.sdpa_dropout_forward,
            hooks.run_tensor_hook, hooks.run_output_hooks, hooks.run_input_hooks,
            cache.tensor_meta, cache.aliases, layout.restride, speculation.assume):
    register(_fn.__name__, _fn)
del _fn

__all__ = ["ALIAS", "IMPORT", "add_resolver", "callee", "export", "no_grad", "register",
           "register_lazy", "registered"]
