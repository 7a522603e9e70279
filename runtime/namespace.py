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
  `no_grad`, the prologue's `tensor_meta` and `aliases`, `restride`, the functional writes
  `setitem`, `scatter_strided`, `strided_view`, `resized`) are registered here, by this
  module;
* the lowering registers what it synthesizes (``prims_sum``: an op's Python call,
  `thunder_ir.dialects.base.ThunderOp.python_call`, for the torch executor; the SDPA
  and Triton executors' callees; the op namespaces ``prims``/``ltorch`` of not yet
  lowered traces);
* the extension API registers its helper (``operator_vjp``) and each executor's op
  namespace (``my_ex``), recording where each comes from (`home`).

A ``torch.call`` names a registered callable by its path here (`callee`: the IR says
``thunder_ir.runtime.namespace.call_with_grad``, the Python ``tir.call_with_grad``), and
`thunder_ir.dialects.torch.torch_name` of a registered callable answers that path.

Nothing here calls into the packages that register: a callable of a module that needs an
optional package is a plain function that imports it on its first call (the Triton
kernels); an op's ``<dialect>_<op>`` wrapper is found by name in the dialects' op tables
(`op_callable`); ``import thunder_ir`` loads the built-in executors, which register their
callees. So printed source run in a fresh process finds what it calls.

Registered callables are attributes of this module, so a call in generated code costs the
global ``tir`` and one attribute: fewer look-ups than the import paths it replaces.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from thunder_ir.dialects.torch import RUNTIME_NAMESPACE, name_callee, runtime_callee
from thunder_ir.runtime import (
    attention,
    autograd_fallback,
    cache,
    custom_backward,
    hooks,
    layout,
    seeds,
    speculation,
    writes,
)

ALIAS = "tir"
"""The name generated code imports this module under."""

IMPORT = f"from {RUNTIME_NAMESPACE.rsplit('.', 1)[0]} import namespace as {ALIAS}"
"""The import line of generated code."""

_REGISTERED: dict[str, Any] = {}
_HOMES: dict[str, str] = {}
"""Registered name -> the module whose import registers it (`register`'s ``home``)."""
_NAMED_BY_ARG: dict[str, int] = {}
"""Registered name -> the argument of its calls that names another registered name, the part
before its first dot (``operator_vjp('my_ex.apply_rope', ...)`` needs the namespace
``my_ex``)."""
_LOADED = ("thunder_ir.runtime", "thunder_ir.dialects", "torch", "builtins", "__main__")
"""Homes generated code need not import: this module registers the runtime's own, the
dialects' ops are found by name (`op_callable`), and ``__main__`` cannot be imported."""

F = TypeVar("F", bound=Callable[..., Any])


def callee(name: str) -> str:
    """The IR callee path of the registered ``name``."""
    return runtime_callee(name)


def register(name: str, obj: Any, home: str | None = None,
             names_in_arg: int | None = None) -> str:
    """Makes ``obj`` callable from generated code as ``tir.<name>``.

    Idempotent for the same object. ``home``: the module whose import registers it (by
    default, where ``obj`` is defined); generated code that calls it imports that module
    (`imports_for`), so printed source runs as it is in a fresh process.
    ``names_in_arg``: the argument of its calls that names a registered name its call
    needs too (`_NAMED_BY_ARG`).

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
    _REGISTERED[name] = obj
    globals()[name] = obj
    where = home or getattr(obj, "__module__", None)
    if isinstance(where, str):
        _HOMES[name] = where
    if names_in_arg is not None:
        _NAMED_BY_ARG[name] = names_in_arg
    path = callee(name)
    name_callee(obj, path)
    return path


def export(fn: F) -> F:
    """Decorator: `register` ``fn`` under its own ``__name__``."""
    register(fn.__name__, fn)
    return fn


def set_home(name: str, home: str) -> None:
    """Records ``home`` as the module whose import registers ``name`` (a name registered by
    code that runs on behalf of another module: an executor's op namespace)."""
    _HOMES[name] = home


def imports_for(name: str, args: Sequence[Any] = ()) -> list[str]:
    """The modules generated code that calls ``tir.<name>`` with ``args`` must import first
    (those not loaded with this module)."""
    names = [name]
    at = _NAMED_BY_ARG.get(name)
    if at is not None and len(args) > at and isinstance(args[at], str):
        names.append(args[at].split(".", 1)[0])
    out = []
    for n in names:
        home = _HOMES.get(n)
        if home is not None and not home.startswith(_LOADED) and home not in out:
            out.append(home)
    return out


def registered() -> dict[str, Any]:
    """Every name registered so far, and its object."""
    return dict(_REGISTERED)


def __getattr__(name: str) -> Any:
    """An op's wrapper or dialect helper not registered yet (`op_callable`): found by
    name, then an attribute."""
    obj = op_callable(name) if not name.startswith("__") else None
    if obj is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} (nothing "
                             "registered it in the generated-code namespace)")
    register(name, obj)
    return obj


# --------------------------------------------------------------------------- ops, by name


def wrapper_name(cls: type[Any]) -> str:
    """The name an op's Python call (``python_call``) has here (``prims.sum`` ->
    ``prims_sum``)."""
    return cls.name.replace(".", "_", 1)


def is_dialect_helper(fn: Any) -> bool:
    """A torch function of an op that is a helper of thunder_ir's dialects (``_to_dtype``)."""
    return getattr(fn, "__module__", "").startswith("thunder_ir.dialects.")


def helper_name(fn: Callable[..., Any]) -> str:
    """The name a dialect's helper has here (``to_dtype``)."""
    return fn.__name__.lstrip("_")


def op_callable(name: str) -> Any:
    """What generated code calls as ``tir.<name>`` for an in-tree op, found by name (for
    printed source run before anything lowered the op): the op's Python call
    (``python_call``, by `wrapper_name`; never the op's torch function itself, which
    generated code names by its own path) or its torch function that is a dialect's helper
    (`helper_name`); None for any other name."""
    from thunder_ir.dialects import ltorch, prims

    tables = {"prims": prims.OPS, "ltorch": ltorch.OPS}
    dialect, _, short = name.partition("_")
    cls = tables.get(dialect, {}).get(short)
    if cls is not None and wrapper_name(cls) == name:
        fn = cls.python_call()
        if fn is not getattr(cls, "TORCH_FN", None):
            return fn
    for table in tables.values():
        for cls in table.values():
            fn = getattr(cls, "TORCH_FN", None)
            if fn is not None and is_dialect_helper(fn) and helper_name(fn) == name:
                return fn
    return None


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
            custom_backward.run_custom_backward, seeds.draw_seed,
            cache.tensor_meta, cache.aliases, layout.restride, speculation.assume,
            writes.setitem, writes.scatter_strided, writes.strided_view, writes.resized):
    register(_fn.__name__, _fn)
del _fn

__all__ = ["ALIAS", "IMPORT", "callee", "export", "helper_name", "imports_for",
           "is_dialect_helper", "no_grad", "op_callable", "register", "registered", "set_home",
           "wrapper_name"]
