"""The global torch modes that can change what a computation gives, for the caches that
remember one.

torch keeps process-wide (per-thread) modes that change what the same call does: grad mode,
``inference_mode``, autocast, the default dtype and device, deterministic algorithms. A
cache that remembers an answer across calls (a view probe, a shape rule, a promotion, the
program cache itself) must either key by every mode that changes that answer, or compute
it with those modes set to fixed values (`neutral`), so that a first call under one mode
never decides what a later call under another gets.

- `mode_key` is the full tuple, for caches whose answer may depend on any of them;
- `neutral` is the context probes run under when their answer is about memory (which result
  is a view of which operand, a layout) and must not depend on the modes at all: under
  ``inference_mode`` a view of a new tensor has no ``_base`` and no version counter, yet it
  aliases its operand all the same.

docs/architecture.md ("Every cache is keyed by what changes its answer") lists each cache
and which of the two it does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

DEVICE_TYPES = ("cpu", "cuda")
"""The device types whose autocast state the modes hold."""

_grad = torch.is_grad_enabled
_inference = torch.is_inference_mode_enabled
_deterministic = torch.are_deterministic_algorithms_enabled
_default_dtype = torch.get_default_dtype
_any_autocast = torch._C._is_any_autocast_enabled
_function_modes = torch._C._len_torch_function_stack


def default_device() -> Any:
    """``torch.get_default_device()``, without its cost where no function mode is active
    (a ``torch.set_default_device`` or ``with torch.device(...)`` is one): ``None`` then,
    which stands for the CPU."""
    if not _function_modes():
        return None
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext

    for mode in reversed(_get_current_function_mode_stack()):
        if isinstance(mode, DeviceContext):  # (set_default_device pushes one too)
            return mode.device
    return None


def autocast_modes() -> Any:
    """False while no autocast is enabled (one C call); else, per device type, whether it
    is enabled and its dtype, and the cast-cache flag."""
    if not _any_autocast():
        return False
    return (*((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d))
              for d in DEVICE_TYPES), torch.is_autocast_cache_enabled())


def mode_key() -> tuple[Any, ...]:
    """Every global mode that can change what a torch call gives: grad mode, inference
    mode, autocast, the default dtype, deterministic algorithms and the default device."""
    return (_grad(), _inference(), autocast_modes(), _default_dtype(), _deterministic(),
            default_device())


@contextlib.contextmanager
def neutral() -> Iterator[None]:
    """Inference mode and autocast off (for every device type) inside, restored after: what
    a probe of memory (views, layouts, saved tensors) runs under, so that its answer is
    the same under every mode. Grad mode (off under inference mode: eager's answers there
    are no-grad's for tensors made outside it), the default dtype and the default device
    are left as they are: probes that depend on them key by them."""
    was = [(d, torch.is_autocast_enabled(d)) for d in DEVICE_TYPES] if _any_autocast() \
        else ()
    for d, _ in was:
        torch.set_autocast_enabled(d, False)
    try:
        if _inference():
            grad = _grad()  # (leaving inference mode turns grad mode on)
            with torch.inference_mode(False), torch.set_grad_enabled(grad):
                yield
        else:
            yield
    finally:
        for d, on in was:
            torch.set_autocast_enabled(d, on)


__all__ = ["DEVICE_TYPES", "autocast_modes", "default_device", "mode_key", "neutral"]
