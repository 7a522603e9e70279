"""The functional forms of in-place writes, as generated code calls them (``tir.setitem``,
``tir.scatter_strided``, ``tir.strided_view``, ``tir.resized``).

The frontend records a write it does not turn into the program's own ops (an index that is
not a box, a write through a view of a storage several arguments share, ``resize_``) as a
call of one of these; they are plain torch code, so they live in the runtime and the
generated-code namespace holds them from its import on: a printed trace that calls them
runs as it is in a fresh process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Any

import torch


def setitem(x: torch.Tensor, index: Any, value: Any) -> torch.Tensor:
    """Functional ``x[index] = value``: a copy of ``x`` with the write applied."""
    out = x.clone()
    out[index] = value
    return out


def scatter_strided(base: torch.Tensor, src: torch.Tensor, base_strides: Sequence[int],
                    size: Sequence[int], strides: Sequence[int], offset: int) -> torch.Tensor:
    """``base`` with ``src`` written into the elements of its view of ``size``, ``strides``
    and ``offset`` (relative to ``base``'s own, in eager's layout of ``base``: strides
    ``base_strides``): the functional form of a write through a view. Where ``base`` is
    laid out so already (dense, at its storage's start), ``src`` has the view's sizes,
    dtype and device (``copy_`` would broadcast and convert it) and no gradient is
    recorded, this is ``as_strided_scatter`` (``base`` cloned, its strides kept), one
    functional op for a fusion region to hold. (Not with gradients: torch 2.13's
    derivative of ``as_strided_scatter`` gives ``base`` the cotangent inside the view,
    not outside.)"""
    if tuple(base.stride()) == tuple(base_strides) and base.storage_offset() == 0 \
            and _dense(base.shape, base_strides) and tuple(src.shape) == tuple(size) \
            and src.dtype == base.dtype and src.device == base.device and not (
                torch.is_grad_enabled() and (base.requires_grad or src.requires_grad)):
        return torch.as_strided_scatter(base, src, tuple(size), tuple(strides), offset)
    out = torch.empty_strided(base.shape, tuple(base_strides), dtype=base.dtype,
                              device=base.device)
    out.copy_(base)
    out.as_strided(tuple(size), tuple(strides), offset).copy_(src)
    return out


def _dense(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether ``strides`` lay ``shape`` out densely with no overlap (a permutation of the
    contiguous layout, size-1 dims at any stride)."""
    expect = 1
    for n, s in sorted(((n, s) for n, s in zip(shape, strides, strict=True) if n != 1),
                       key=lambda p: p[1]):
        if s != expect:
            return False
        expect *= n
    return True


def strided_view(x: torch.Tensor, size: Sequence[int], strides: Sequence[int],
                 offset: int) -> torch.Tensor:
    """The view of ``x``'s storage of ``size``, ``strides`` and storage ``offset``
    (``torch.as_strided``)."""
    return torch.as_strided(x, tuple(size), tuple(strides), offset)


PLAIN, JOIN, QUIET = 0, 1, 2
"""How an input written in place is written back to the caller's tensor: copied under
no-grad; copied with grad mode on (an input that did not require grad written with a value
that does: eager leaves it requiring grad, no longer a leaf, its ``grad_fn`` passing the
gradient on to the program's node); copied through ``.data`` (written only through
``x.data``, which does not bump eager's version counter). A write-back's mode is that in
its low two bits, and above them (``mode >> 2``) how many more times its copy bumps the
tensor's version counter (`with_bumps`)."""

_SET_VERSION = torch._C._autograd._unsafe_set_version_counter


def with_bumps(modes: Sequence[int], storages: Sequence[int],
               writes: Mapping[int, int], unbumped: Set[int] = frozenset()) -> list[int]:
    """The write-backs' modes, each storage's first with the version bumps eager's writes
    made (``writes``: per storage, its in-place writes that bump the version) beyond the
    one each copy into it makes (``storages``: each write-back's), so that the caller's
    version counter ends where eager's does (``x.add_(1); x.mul_(2)``: 2). A storage in
    ``unbumped`` (written by a kernel that bumps nothing: batch norm's running statistics)
    may end with fewer bumps than copies: a negative count sets the counter back after the
    copy."""
    out = list(modes)
    copies: dict[int, int] = {}
    for s, m in zip(storages, modes, strict=True):
        copies[s] = copies.get(s, 0) + (m != QUIET)
    first: set[int] = set()
    for i, s in enumerate(storages):
        if s in first:
            continue
        first.add(s)
        extra = writes.get(s, 0) - copies[s]
        if extra > 0 or (extra < 0 and s in unbumped):
            out[i] |= extra << 2  # negative: (-1 << 2) | mode keeps the mode in the low bits
    return out


def write_back(targets: Sequence[torch.Tensor], values: Sequence[torch.Tensor],
               modes: Sequence[int]) -> None:
    """Writes each value into its target, in order, each as its mode says (`PLAIN`...),
    then bumps its version counter as many more times as the mode says (sets it back, for
    a negative count: a kernel that writes without a bump). Consecutive
    copies under no-grad are one ``torch._foreach_copy_`` (a batch norm's statistics: 3
    a layer; a Python loop of copies cost ResNet's forward 60 µs a step), which copies in
    order and bumps each target's version once, as ``copy_`` does."""
    grad = torch.is_grad_enabled()
    run_t: list[torch.Tensor] = []
    run_v: list[torch.Tensor] = []
    bumps: list[tuple[torch.Tensor, int]] = []
    for t, v, code in zip(targets, values, modes, strict=True):
        mode = code & 3
        if mode == QUIET or (mode == JOIN and grad and v.requires_grad):
            _copy_all(run_t, run_v)
            if mode == QUIET:
                with torch.no_grad():
                    t.data.copy_(v)
            else:
                t.copy_(v)
        else:
            run_t.append(t)
            run_v.append(v)
        if code >> 2:
            bumps.append((t, code >> 2))
    _copy_all(run_t, run_v)
    for t, n in bumps:
        if not t.is_inference():  # (an inference tensor has no counter)
            _SET_VERSION((t,), (t._version + n,))


class WritePlan:
    """A program's write-backs as they run on each call: where every one is a copy under
    no-grad (`PLAIN`, or `JOIN` while its value does not require grad or grad mode is
    off; with or without extra bumps: a batch norm's running statistics and counters),
    one ``torch._foreach_copy_`` and one call that sets the version counters the copies
    must not have bumped (or bump more), with the targets fixed where they are the
    module's own tensors (``fixed``); otherwise `write_back`, mode by mode."""

    __slots__ = ("bump_at", "bump_by", "fixed", "fixed_bumped", "join_at", "modes", "simple")

    def __init__(self, modes: Sequence[int], fixed: Sequence[torch.Tensor] | None = None
                 ) -> None:
        self.modes = tuple(modes)
        self.simple = all(m & 3 != QUIET for m in self.modes)
        self.join_at = tuple(i for i, m in enumerate(self.modes) if m & 3 == JOIN)
        self.bump_at = tuple(i for i, m in enumerate(self.modes) if m >> 2)
        self.bump_by = tuple(self.modes[i] >> 2 for i in self.bump_at)
        self.fixed = list(fixed) if fixed is not None else None
        """The targets, where every one is a bound tensor (the same each call)."""
        self.fixed_bumped: tuple[torch.Tensor, ...] | None = None
        if self.fixed is not None and all(not self.fixed[i].is_inference()
                                          for i in self.bump_at):
            self.fixed_bumped = tuple(self.fixed[i] for i in self.bump_at)

    def __call__(self, targets: list[torch.Tensor] | None, values: list[torch.Tensor]
                 ) -> None:
        """Writes ``values`` into ``targets`` (None: the fixed ones)."""
        if targets is None:
            targets = self.fixed
            assert targets is not None
        grad = _grad_enabled()
        if not self.simple or (grad and self.join_at and any(
                [values[i].requires_grad for i in self.join_at])):
            write_back(targets, values, self.modes)
            return
        _set_grad(False)
        try:
            torch._foreach_copy_(targets, values)
        finally:
            _set_grad(grad)
        if not self.bump_at:
            return
        bumped = self.fixed_bumped
        by = self.bump_by
        if bumped is None or targets is not self.fixed:
            pairs = [(targets[i], n) for i, n in zip(self.bump_at, by)
                     if not targets[i].is_inference()]  # (an inference tensor has none)
            bumped = tuple(t for t, _ in pairs)
            by = tuple(n for _, n in pairs)
        _SET_VERSION(bumped, tuple([t._version + n for t, n in zip(bumped, by)]))


_grad_enabled = torch.is_grad_enabled
_set_grad = torch._C._set_grad_enabled


def _copy_all(targets: list[torch.Tensor], values: list[torch.Tensor]) -> None:
    """Copies each value into its target under no-grad, in order; empties both lists."""
    if targets:
        with torch.no_grad():
            torch._foreach_copy_(targets, values)
        targets.clear()
        values.clear()


def resized(x: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """The values ``x.resize_(size)`` leaves in a contiguous ``x``: its first elements in
    the new shape (zeros past its end, where eager's memory is uninitialized)."""
    n = 1
    for d in size:
        n *= d
    flat = x.reshape(-1)
    if n > flat.numel():
        flat = torch.cat([flat, flat.new_zeros(n - flat.numel())])
    return flat[:n].reshape(tuple(size))


__all__ = ["JOIN", "PLAIN", "QUIET", "WritePlan", "resized", "scatter_strided", "setitem",
           "strided_view", "with_bumps", "write_back"]
