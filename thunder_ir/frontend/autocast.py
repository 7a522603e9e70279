"""``torch.autocast`` while tracing: each torch call gets the casts eager's autocast gives it.

Eager autocast works below ``__torch_function__``: at the dispatcher's Autocast key, each
aten op of torch's policy for the device type casts its floating-point inputs (to the
autocast dtype, to float32, or to the widest input type) before it runs. The tracer sees
calls above that level, so it asks torch what autocast would do with each call instead of
keeping a copy of the policy: `probe` runs the call on fake tensors of the proxies'
types, under the current autocast state, and records which of its tensor inputs
autocast converts (the ``aten._to_copy`` calls the dispatcher makes on them) and the
dtypes of its results. The call is then recorded on inputs cast explicitly
(``ltorch.to_dtype``; CSE merges the casts of one tensor, as autocast's cast cache
does), with autocast off, and its results are cast to eager's dtypes where the
recorded op's differ (an op whose internals run in another precision). The casts are
ops of the trace: ``last_traces`` shows them, fusion fuses them, autodiff differentiates
them (a float32 parameter's gradient comes back float32, as in eager).

An outer ``with torch.autocast(...)`` around the call, regions inside traced code (their
``__enter__`` runs natively and sets the state the next calls see), ``enabled=False``
regions and ``@torch.autocast`` decorators all work this way: each call sees the state
in force when eager would run it. The compiled program runs with autocast off
(`without_autocast`): its casts are explicit. The cache key holds the autocast state
(`thunder_ir.dialects.guard`'s ``guard.autocast``: device types, dtypes, cache flag).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from thunder_ir.dialects.modes import mode_key
from thunder_ir.frontend.layout import fake_mode, fake_stand_in
from thunder_ir.frontend.proxy import is_proxy
from thunder_ir.frontend.table import register_handlers, traces_python

DEVICE_TYPES = ("cpu", "cuda")
"""The device types whose autocast state tracing follows."""

_any_autocast = torch._C._is_any_autocast_enabled


def autocast_state() -> tuple[Any, ...] | None:
    """This thread's autocast state (per device type: enabled and dtype; the cast cache
    flag), or None when no autocast is enabled."""
    if not _any_autocast():
        return None
    return (*((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d))
              for d in DEVICE_TYPES), torch.is_autocast_cache_enabled())


@contextmanager
def _autocast_set(device_types: Sequence[str], enabled: bool) -> Iterator[None]:
    was = [(d, torch.is_autocast_enabled(d)) for d in device_types]
    for d, _ in was:
        torch.set_autocast_enabled(d, enabled)
    try:
        yield
    finally:
        for d, on in was:
            torch.set_autocast_enabled(d, on)


def autocast_off() -> Any:
    """Autocast disabled for every device type inside; restored after."""
    return _autocast_set(DEVICE_TYPES, False)


def autocast_on(device_types: Sequence[str]) -> Any:
    """Autocast enabled for ``device_types`` inside (their dtypes as set); restored after."""
    return _autocast_set(device_types, True)


def enabled_device_types() -> list[str]:
    """The device types autocast is enabled for, now."""
    return [d for d in DEVICE_TYPES if torch.is_autocast_enabled(d)]


def without_autocast(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run with autocast off (a compiled program: its casts are explicit ops);
    a plain call when autocast is off already."""
    any_on = _any_autocast

    @functools.wraps(fn)
    def run(*args: Any) -> Any:
        if not any_on():
            return fn(*args)
        with autocast_off():
            return fn(*args)

    return run


def _native(fn: Callable[..., Any]) -> Callable[..., Any]:
    def handler(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        with torch._C.DisableTorchFunction():
            return fn(*args, **kwargs)

    return traces_python(handler)  # (run as they are, autocast state untouched)


# Dynamo's autocast region nodes (a ThunderFX partition's graph): entered and left while
# traced, as a `with torch.autocast(...)` block is.
for _fn in (torch.amp.autocast_mode._enter_autocast, torch.amp.autocast_mode._exit_autocast):
    register_handlers([_fn], _native(_fn))


class _Casts(TorchDispatchMode):
    """Records the conversions autocast makes of the call's own tensor inputs."""

    def __init__(self, inputs: dict[int, int]) -> None:
        super().__init__()
        self.inputs = inputs
        self.casts: dict[int, torch.dtype] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and args:
            k = self.inputs.get(id(args[0]))
            dtype = kwargs.get("dtype")
            if k is not None and dtype is not None and dtype != args[0].dtype:
                self.casts.setdefault(k, dtype)
        return func(*args, **kwargs)


Probe = tuple[dict[int, torch.dtype], list[torch.dtype | None]]
"""Per tensor input (its position among the call's flat tensor leaves), the dtype
autocast converts it to; per flat result leaf, eager's dtype (None: not a tensor)."""

_PROBES: dict[Any, Any] = {}
"""What `probe` and `opaque_call_differs` learnt, by the call's function, the global modes
(`thunder_ir.dialects.modes.mode_key`: autocast, and the default dtype a Python float
promotes to) and argument types (cleared past `MAX_CACHED` entries)."""
MAX_CACHED = 4096


def _remember(key: Any, value: Any) -> Any:
    if len(_PROBES) >= MAX_CACHED:
        _PROBES.clear()
    _PROBES[key] = value
    return value


def probe(ctx: Any, func: Any, args: Sequence[Any], kwargs: dict[str, Any]
          ) -> Probe | None:
    """What eager autocast does with ``func(*args, **kwargs)``, by running it on fake
    tensors of the proxies' types under the current autocast state; None when the call
    cannot run on fake tensors (the caller then records it without casts)."""
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    proxies = [x for x in leaves if is_proxy(x)]
    if not proxies:
        return None
    key: Any
    try:
        key = (func, mode_key(), spec, tuple(
            ("t", x._value.type, ctx.layout_of(x._value)) if is_proxy(x) else x
            for x in leaves))
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _PROBES:
        return _PROBES[key]  # type: ignore[no-any-return]
    result = _run_probe(ctx, func, leaves, spec)
    if key is not None:
        _remember(key, result)
    return result


def _run_probe(ctx: Any, func: Any, leaves: list[Any], spec: Any) -> Probe | None:
    fakes: list[Any] = []
    inputs: dict[int, int] = {}
    for x in leaves:
        if is_proxy(x):
            f = fake_stand_in(x._value.type, ctx.layout_of(x._value))
            inputs[id(f)] = len(inputs)
            fakes.append(f)
        else:
            fakes.append(x)
    f_args, f_kwargs = pytree.tree_unflatten(fakes, spec)
    mode = _Casts(inputs)
    try:
        with torch._C.DisableTorchFunction(), fake_mode(), mode:
            out = func(*f_args, **f_kwargs)
    except Exception as e:  # no fake kernel, a data-dependent op, or autocast refuses it
        if _fails_only_under_autocast(func, f_args, f_kwargs):
            raise AutocastError(e) from e  # eager's autocast refuses the call: so do we
        return None
    dtypes = [o.dtype if isinstance(o, torch.Tensor) else None
              for o in pytree.tree_leaves(out)]
    return mode.casts, dtypes


class AutocastError(RuntimeError):
    """Eager's autocast refuses a call (``cat`` of bfloat16 and float16 tensors): the
    same error, raised where eager raises it."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _fails_only_under_autocast(func: Any, args: Any, kwargs: Any) -> bool:
    try:
        with torch._C.DisableTorchFunction(), autocast_off():
            func(*args, **kwargs)
    except Exception:
        return False
    return True


OPAQUE_CHECK_ELEMENTS = 1 << 20
"""Opaque calls whose tensor inputs hold at most this many elements in all are checked
on real tensors (`opaque_call_differs`); larger ones are trusted to the fake probe."""


def opaque_call_differs(func: Any, args: Sequence[Any], kwargs: dict[str, Any],
                        casts: dict[int, torch.dtype], enabled: Sequence[str]
                        ) -> str | list[torch.dtype | None] | None:
    """How an opaque call recorded on inputs cast as ``casts`` and run with autocast off
    differs from eager's call under autocast, for a function that computes inside itself
    in autocast's precision (``torch.linalg.pinv``, ``torch.tensordot``,
    ``torch.svd_lowrank``), which the fake probe cannot see: a message when ours raises
    where eager does not; eager's result dtypes (per flat leaf) when ours differ (its
    values are then computed in float32, closer to a float64 run than eager's); None when
    they agree, or when the inputs are too large to check or the call fails on zeros.
    Checked on real tensors of zeros of the proxies' types (of ones where eager's call
    refuses zeros: ``torch.cov``'s weights), eager's way with autocast on for the device
    types in ``enabled``."""
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    proxies = [x for x in leaves if is_proxy(x)]
    if sum(p.numel() for p in proxies) > OPAQUE_CHECK_ELEMENTS:
        return None
    try:
        key: Any = ("opaque", func, mode_key(), tuple(enabled), spec,
                    tuple(sorted(casts.items(), key=lambda kv: kv[0])), tuple(
                        ("t", x._value.type) if is_proxy(x) else x for x in leaves))
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _PROBES:
        return _PROBES[key]  # type: ignore[no-any-return]
    result = _check_opaque(func, leaves, spec, casts, enabled)
    return _remember(key, result) if key is not None else result


def _check_opaque(func: Any, leaves: list[Any], spec: Any, casts: dict[int, torch.dtype],
                  enabled: Sequence[str]) -> str | list[torch.dtype | None] | None:
    proxied = [is_proxy(x) for x in leaves]
    for fill in (0, 1):  # (ones where zeros are not valid: cov's weights must not sum to 0)
        with torch._C.DisableTorchFunction():
            real = [torch.full(x.shape, fill, dtype=x.dtype, device=x.device) if p else x
                    for x, p in zip(leaves, proxied)]
        result = _check_filled(func, spec, casts, enabled, proxied, real)
        if result is not _INVALID:
            return result  # type: ignore[return-value]
    return None


_INVALID = object()
"""The probe's inputs were not valid for the function (nothing learnt)."""


def _check_filled(func: Any, spec: Any, casts: dict[int, torch.dtype],
                  enabled: Sequence[str], proxied: list[bool], real: list[Any]) -> Any:
    """`_check_opaque` on ``real`` (the proxies' stand-ins); `_INVALID` where eager's
    call fails on them."""
    name = getattr(func, "__qualname__", getattr(func, "__name__", repr(func)))

    def dtypes(values: list[Any], cast: bool) -> list[Any]:
        if cast:  # the k-th proxy, counted as `probe` counts them
            k, out = 0, []
            for x, p in zip(values, proxied):
                if p:
                    d = casts.get(k)
                    out.append(x.to(d) if d is not None else x)
                    k += 1
                else:
                    out.append(x)
            values = out
        a, kw = pytree.tree_unflatten(values, spec)
        with torch._C.DisableTorchFunction():
            result = func(*a, **kw)
        return [o.dtype if isinstance(o, torch.Tensor) else None
                for o in pytree.tree_leaves(result)]

    state = torch.random.get_rng_state()
    try:
        with autocast_on(enabled):
            try:
                eager = dtypes(real, False)
            except Exception:  # the stand-ins are not valid here: nothing learnt
                return _INVALID
        with autocast_off():
            try:
                ours = dtypes(real, True)
            except Exception as e:
                return f"{name} fails when its inputs are cast first ({e})"
    finally:
        torch.random.set_rng_state(state)
    return eager if ours != eager else None


def cast_inputs(args: Sequence[Any], kwargs: dict[str, Any],
                casts: dict[int, torch.dtype], cast: Callable[[Any, torch.dtype], Any]
                ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` with the proxies that autocast converts cast (``cast``
    records the conversion), counted as `probe` counts them."""
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    k = 0
    out = []
    for x in leaves:
        if is_proxy(x):
            dtype = casts.get(k)
            out.append(cast(x, dtype) if dtype is not None else x)
            k += 1
        else:
            out.append(x)
    new_args, new_kwargs = pytree.tree_unflatten(out, spec)
    return tuple(new_args), new_kwargs


def cast_results(result: Any, dtypes: list[torch.dtype | None],
                 cast: Callable[[Any, torch.dtype], Any]) -> Any:
    """``result`` with each proxy whose dtype differs from eager's (``dtypes``, per flat
    leaf) cast to it."""
    leaves, spec = pytree.tree_flatten(result)
    if len(leaves) != len(dtypes):
        return result
    changed = False
    out = []
    for x, d in zip(leaves, dtypes):
        if is_proxy(x) and d is not None and x.dtype != d:
            x = cast(x, d)
            changed = True
        out.append(x)
    return pytree.tree_unflatten(out, spec) if changed else result


__all__ = ["DEVICE_TYPES", "OPAQUE_CHECK_ELEMENTS", "AutocastError", "Probe", "autocast_off",
           "autocast_on", "autocast_state", "cast_inputs", "cast_results",
           "enabled_device_types", "opaque_call_differs", "probe", "without_autocast"]
