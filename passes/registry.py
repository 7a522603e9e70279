"""The pass registry: kebab-case names to `ModulePass` classes.

Why a registry: a pass is usable by name everywhere at once — in ``thunder-ir-opt -p``,
in a `thunder_ir.passes.pipeline.Pipeline` spec and in ``jit(..., transforms=[...])`` —
once it is registered here. Built-in passes are registered lazily (importing a pass module
costs nothing until the pass is used). Users add passes in two ways:

* by a call: ``register_pass(MyPass)`` (the name is ``MyPass.name``), or
  ``register_pass(factory, name="my-pass")`` with a factory returning the class;
* by an entry point in the ``thunder_ir.passes`` group, found on the first lookup::

      [project.entry-points."thunder_ir.passes"]
      my-pass = "my_package.passes:MyPass"

  The entry point names the pass; its object is a `ModulePass` subclass or a factory
  returning one, loaded only when the pass is used.

A pass spec is a name with optional options, as xdsl-opt writes them:
``canonicalize``, ``my-pass{threshold=3}``.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points

from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import parse_pipeline

PassFactory = Callable[[], type[ModulePass]]
"""A zero-argument callable returning a pass class (xDSL's convention)."""

ENTRY_POINT_GROUP = "thunder_ir.passes"

_BUILTINS: dict[str, str] = {
    "decompose-ltorch": "thunder_ir.passes.decompose_ltorch:DecomposeLtorchPass",
    "cse": "thunder_ir.passes.cse_dce:CSEPass",
    "dce": "thunder_ir.passes.cse_dce:DCEPass",
    "canonicalize": "thunder_ir.passes.canonicalize:CanonicalizePass",
    "strip-autograd": "thunder_ir.passes.strip_autograd:StripAutogradPass",
    "claim": "thunder_ir.passes.claim:ClaimPass",
    "fuse": "thunder_ir.passes.fuse:FusePass",
    "decompose-for-grad": "thunder_ir.passes.autodiff:DecomposeForGradPass",
    "autodiff": "thunder_ir.passes.autodiff:AutodiffPass",
    "remat-split": "thunder_ir.passes.autodiff:RematSplitPass",
    "restride-outputs": "thunder_ir.passes.restride:RestrideOutputsPass",
    "join-padded-sums": "thunder_ir.passes.padded_sums:JoinPaddedSumsPass",
    "flatten-cat-chains": "thunder_ir.passes.cat_chains:FlattenCatChainsPass",
    "ddp-allreduce": "thunder_ir.passes.ddp:DDPAllReducePass",
    "fsdp-grad-scale": "thunder_ir.passes.fsdp:FSDPGradScalePass",
    "fsdp-zero3": "thunder_ir.passes.fsdp:Zero3Pass",
    "schedule-collectives": "thunder_ir.passes.collectives:ScheduleCollectivesPass",
    "quantize-weights": "thunder_ir.passes.quantize:QuantizeWeightsPass",
}
"""This package's passes, imported on first use. The lowering registers its own
(``lower-claimed``, ``lower-to-torch``, ``del-last-used``) by name when any of its modules
is imported (`thunder_ir.lowering.pass_names`): nothing here names a package above it."""

_FACTORIES: dict[str, type[ModulePass] | PassFactory] = {}
"""Passes registered by call or entry point; they take precedence over `_BUILTINS`."""
_entry_points_loaded = False


class UnknownPassError(KeyError):
    """No pass of that name is registered. The message lists the available ones."""

    def __str__(self) -> str:  # KeyError quotes its message; print it plainly
        return str(self.args[0]) if self.args else ""


def _import_factory(target: str) -> PassFactory:
    module, _, attr = target.partition(":")

    def factory() -> type[ModulePass]:
        return getattr(importlib.import_module(module), attr)

    return factory


def _as_class(obj: object, name: str) -> type[ModulePass]:
    """Resolves a registered object (a pass class or a factory) to the pass class."""
    if isinstance(obj, type) and issubclass(obj, ModulePass):
        return obj
    if callable(obj):
        cls = obj()
        if isinstance(cls, type) and issubclass(cls, ModulePass):
            return cls
        raise TypeError(f"the factory of pass {name!r} returned {cls!r}, not a ModulePass "
                        "subclass")
    raise TypeError(f"pass {name!r} is registered as {obj!r}: expected a ModulePass subclass "
                    "or a factory returning one")


def _entry_point_factory(ep: EntryPoint) -> PassFactory:
    def factory() -> type[ModulePass]:
        return _as_class(ep.load(), ep.name)

    return factory


def load_entry_points(eps: list[EntryPoint] | None = None) -> None:
    """Registers the passes of the ``thunder_ir.passes`` entry-point group (lazily).

    Runs once, on the first lookup; later calls are no-ops unless ``eps`` is given (tests
    pass fake entry points). A name that is already registered keeps its pass, and the
    clash is reported as a warning: a broken plugin must not break the compiler.
    """
    global _entry_points_loaded
    if eps is None:
        if _entry_points_loaded:
            return
        _entry_points_loaded = True
        eps = list(entry_points(group=ENTRY_POINT_GROUP))
    for ep in eps:
        if ep.name in _FACTORIES or ep.name in _BUILTINS:
            warnings.warn(f"entry point {ep.value!r} ({ENTRY_POINT_GROUP}) names pass "
                          f"{ep.name!r}, which is already registered; it is ignored",
                          stacklevel=2)
            continue
        _FACTORIES[ep.name] = _entry_point_factory(ep)


def _ensure_loaded() -> None:
    if not _entry_points_loaded:
        load_entry_points()


def register_pass(cls_or_factory: type[ModulePass] | PassFactory, name: str | None = None,
                  *, replace: bool = False) -> type[ModulePass] | PassFactory:
    """Registers a pass under a kebab-case name.

    Args:
        cls_or_factory: a `ModulePass` subclass, or a zero-argument factory returning one
            (resolved when the pass is first used).
        name: the pass name; defaults to the class's ``name``. Required for a factory.
        replace: allow replacing a pass already registered under ``name``.

    Returns:
        ``cls_or_factory`` unchanged, so this works as a class decorator.

    Raises:
        ValueError: the name is missing, not kebab-case, or taken (without ``replace``).
    """
    _ensure_loaded()
    if name is None:
        if not (isinstance(cls_or_factory, type) and issubclass(cls_or_factory, ModulePass)):
            raise ValueError("register_pass needs name= when given a factory")
        name = getattr(cls_or_factory, "name", None)
        if not isinstance(name, str):
            raise ValueError(f"{cls_or_factory.__name__} has no `name` class attribute")
    if not name or name != name.lower() or " " in name or "_" in name:
        raise ValueError(f"pass names are kebab-case (like 'my-pass'), got {name!r}")
    if not replace and (name in _FACTORIES or name in _BUILTINS):
        raise ValueError(f"a pass named {name!r} is already registered; pass replace=True "
                         "to replace it")
    _FACTORIES[name] = cls_or_factory  # a class resolves to itself in `_as_class`
    return cls_or_factory


def unregister_pass(name: str) -> None:
    """Removes a pass registered by `register_pass` or an entry point (tests use this).

    A built-in pass that was replaced comes back.
    """
    _FACTORIES.pop(name, None)


def pass_factories() -> dict[str, PassFactory]:
    """Every registered pass as ``name -> factory`` (xDSL's ``available_passes`` shape)."""
    _ensure_loaded()
    out = {n: _import_factory(t) for n, t in _BUILTINS.items()}
    for n, f in _FACTORIES.items():
        out[n] = _checked(n, f)
    return dict(sorted(out.items()))


def _checked(name: str, factory: type[ModulePass] | PassFactory) -> PassFactory:
    return lambda: _as_class(factory, name)


def available_passes() -> tuple[str, ...]:
    """The names of every registered pass, sorted."""
    _ensure_loaded()
    return tuple(sorted({*_BUILTINS, *_FACTORIES}))


def get_pass(name: str) -> type[ModulePass]:
    """The pass class registered under ``name``.

    Raises:
        UnknownPassError: no such pass; the message lists the available passes.
    """
    _ensure_loaded()
    factory = _FACTORIES.get(name)
    if factory is not None:
        return _as_class(factory, name)
    target = _BUILTINS.get(name)
    if target is not None:
        return _import_factory(target)()
    names = available_passes()
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise UnknownPassError(f"unknown pass {name!r}.{hint} Available passes: "
                           f"{', '.join(names)}. Register others with "
                           "thunder_ir.passes.register_pass or a "
                           f"{ENTRY_POINT_GROUP!r} entry point.")


def make_passes(spec: str) -> tuple[ModulePass, ...]:
    """Instantiates the passes of a comma-separated spec: ``"cse,my-pass{opt=1},dce"``."""
    return tuple(get_pass(s.name).from_spec(s) for s in parse_pipeline(spec))


def make_pass(spec: str) -> ModulePass:
    """Instantiates one pass from its spec: ``"cse"`` or ``"my-pass{opt=1}"``."""
    passes = make_passes(spec)
    if len(passes) != 1:
        raise ValueError(f"expected one pass spec, got {spec!r}")
    return passes[0]


__all__ = [
    "ENTRY_POINT_GROUP",
    "PassFactory",
    "UnknownPassError",
    "available_passes",
    "get_pass",
    "load_entry_points",
    "make_pass",
    "make_passes",
    "pass_factories",
    "register_pass",
    "unregister_pass",
]
