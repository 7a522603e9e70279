"""Why a jitted callable compiled again: each compile after the first, in the user's terms.

A call misses the cache when its key (`thunder_ir.runtime.prologue`) differs from every
stored one. On such a miss, and only then (a cached call does nothing here), `Reasons`
compares the key with the closest stored key (the fewest parts differing; the newest of
those) and says what differs as eager state: an argument's size (``argument 'x' dim 1:
64 -> 80``, with ``(now symbolic)`` where the program compiled for it keeps that size
symbolic), dtype or ``requires_grad``, a parameter's, a mode (``grad mode: enabled ->
disabled``, ``autocast``), or a guard of Python state whose token moved: that guard's
checks (`thunder_ir.runtime.guards.StateGuard.render`, kept per token as each compile
left them) are compared line by line with the state's now (``self.cfg.scale changed 2.0
-> 3.0``, ``self.buf replaced``). A speculation variant's compile names the condition
that came out otherwise.

Each reason joins the callable's list (`thunder_ir.compile_reasons`, newest last, at most
`MAX_REASONS`), is logged on the ``thunder_ir.recompiles`` logger (at INFO) and names the
change in the recompile-limit warning (`thunder_ir.stages.programs.ProgramCache`).
"""

from __future__ import annotations

import logging
import re
import types
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from thunder_ir.runtime.guards import StateGuard

LOGGER = logging.getLogger("thunder_ir.recompiles")
"""Where each recompile's reason is logged (INFO): ``logging.getLogger(
"thunder_ir.recompiles").setLevel(logging.INFO)`` with a handler shows them as they
happen, as ``TORCH_LOGS=recompiles`` does for torch.compile."""

MAX_REASONS = 64
"""How many reasons a callable keeps (the oldest go first)."""

MAX_SNAPSHOTS = 256
"""How many guard states' checks a callable keeps (a state older than that is explained
by its token alone)."""

MAX_CHANGES = 6
"""How many changed lines of one guard a reason names (then "and N more")."""

_STRUCTURE = "another call structure (the arguments' count, keywords or nesting)"
_SHAPE = re.compile(r"^the shape of (.+)$")
_META = re.compile(r"^(?:the )?(dtype|device|requires_grad|memory layout \(strides\)) of (.+)$")
_CHECK = re.compile(r"^(.*?) (==|is) (.*)$")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+>")


class Reasons:
    """One jitted callable's recompile reasons (see the module doc).

    Attributes:
        log: the reasons, newest last; each one line.
        pending: the changes of the miss being compiled (`explain`), each ``(text, leaf,
            dim)`` (``leaf`` and ``dim``: the argument size it is, else None).
    """

    def __init__(self) -> None:
        self.log: list[str] = []
        self.pending: list[tuple[str, int | None, int | None]] = []
        self._checks: dict[tuple[int, int], list[str]] = {}
        self._owner: Any = None

    def snapshot(self, guards: Sequence[StateGuard]) -> None:
        """After a compile: each guard's checks for its token now (once per token)."""
        for i, g in enumerate(guards):
            if (i, g.tok) not in self._checks:
                try:
                    self._checks[(i, g.tok)] = g.render()
                except Exception:  # (a reason is never worth a failed call)
                    continue
        while len(self._checks) > MAX_SNAPSHOTS:  # (the oldest states go first)
            del self._checks[next(iter(self._checks))]

    def explain(self, labels: Sequence[str], key: tuple[Any, ...],
                stored: Iterable[Any], guards: Sequence[StateGuard],
                names: Sequence[str], owner: Any = None) -> None:
        """What makes ``key`` (the missed call's, its parts named by ``labels``) differ
        from the closest of the ``stored`` keys, kept in `pending` (``names``: the
        argument leaves' names, for sizes; ``owner``: the jitted module or function,
        whose source names the line that reads a changed attribute or global)."""
        self.pending = []
        self._owner = owner
        try:
            self._explain(labels, key, stored, guards, names)
        except Exception as e:  # (a reason is never worth a failed call)
            self.pending = [(f"the cache key changed (no reason found: {type(e).__name__})",
                             None, None)]

    def _explain(self, labels: Sequence[str], key: tuple[Any, ...],
                 stored: Iterable[Any], guards: Sequence[StateGuard],
                 names: Sequence[str]) -> None:
        best: list[tuple[int, int | None]] | None = None
        closest: tuple[Any, ...] = ()
        for k in reversed(list(stored)):
            if not isinstance(k, tuple) or len(k) != len(key):
                continue
            diff = _differences(k, key)
            if diff and (best is None or len(diff) < len(best)):
                best, closest = diff, k
        if best is None:
            if any(isinstance(k, tuple) for k in stored):  # (keys of other lengths only)
                self.pending = [(_STRUCTURE, None, None)]
            return
        for i, j in best:
            label = labels[i] if i < len(labels) else f"part {i} of the key"
            old, new = closest[i], key[i]
            if j is not None:  # a guard's token (the key's last part)
                self.pending += [(t, None, None) for t in self._state(j, old[j], new[j],
                                                                      guards)]
            else:
                self.pending += _part(label, old, new, names)

    def shape_guards(self, entries: Sequence[Any], leaves: Sequence[Any]) -> None:
        """Where symbolic programs were compiled under the missed call's dynamic key
        (``entries``) but none holds for its sizes (``leaves``, the module's symbolic
        ``int`` attributes after the call's own): the guards of theirs these sizes fail,
        each with where it was recorded (the traced op and the user's line), join the
        pending reason."""
        try:
            failed = _failing(entries, leaves)
        except Exception:  # (a reason is never worth a failed call)
            failed = []
        self.pending += [(f"the symbolic program's guard {g} fails ({where})", None, None)
                         for g, where in failed]

    def record(self, entry: Any, who: str, also: Sequence[str] = (),
               pending: bool = True) -> str | None:
        """The pending changes (``pending``: else none of them) and ``also``, for the
        program ``entry`` compiled: joined as one reason, added to `log` and logged; None
        where there were none."""
        if not pending:
            self.pending = []
        dynamic = entry.dynamic if getattr(entry, "shape_guard", None) is not None else None
        parts = [text + (_symbolic(entry, leaf, dim) if dynamic and leaf is not None and (
            dim is None or dim in dynamic.get(leaf, ()) or -1 in dynamic.get(leaf, ()))
            and leaf in dynamic else "") for text, leaf, dim in self.pending]
        parts += also
        self.pending = []
        if not parts:
            return None
        reason = "; ".join(parts)
        self.log.append(reason)
        del self.log[:-MAX_REASONS]
        LOGGER.info("%s compiled again: %s", who, reason)
        return reason

    def _state(self, j: int, old: Any, new: Any, guards: Sequence[StateGuard]) -> list[str]:
        """The changes behind guard token part ``j`` (0: the argument structure)."""
        if j == 0:
            return [_STRUCTURE]
        g = guards[j - 1] if j - 1 < len(guards) else None
        if g is None:
            return [f"guarded state ({old} -> {new})"]
        before = self._checks.get((j - 1, old))
        if before is None:
            return [f"the {g.name} (token {old} -> {new})"]
        prefix = ("global " if g.name.startswith("globals of") else
                  "closure variable " if g.name.startswith("closure of") else "")
        changes = _changed_checks(before, g.render(), prefix)
        if not changes:
            return [f"the {g.name} (token {old} -> {new})"]
        out = []
        for text in changes:
            site = read_site(self._owner, text[len(prefix):].split(" ", 1)[0], bool(prefix))
            out.append(text if site is None else f"{text} (read at {site})")
        return out


def _symbolic(entry: Any, leaf: int, dim: int | None) -> str:
    """How a reason names a size the program ``entry`` compiled for it keeps symbolic:
    ``(now symbolic)``, or, where one of its guards fixes that size to one value (a pin:
    ``Eq(s1, 64)``), that guard."""
    try:
        g = entry.shape_guard
        names = {n for n, src in g.sources.items()
                 if src.leaf == leaf and src.dim == dim and not src.steps}
        for expr, _ in g.sites:
            free = getattr(expr, "free_symbols", ())
            if (type(expr).__name__ == "Equality" and len(free) == 1
                    and str(next(iter(free))) in names):
                return f" (symbolic, but fixed by its guard {expr})"
    except Exception:  # (a reason is never worth a failed call)
        pass
    return " (now symbolic)"


def _failing(entries: Sequence[Any], leaves: Sequence[Any]) -> list[tuple[str, str]]:
    """The shape guards of ``entries`` that sizes ``leaves`` fail, with their sites."""
    if not entries:
        return []
    import sympy

    from thunder_ir.runtime.dynamic import sizes_of
    from thunder_ir.runtime.pins import previous_values

    sizes = sizes_of(leaves)
    out: list[tuple[str, str]] = []
    for e in entries:
        g = e.shape_guard
        values = previous_values(g.sources, sizes)
        for expr, where in g.sites:
            subs = {x: sympy.Integer(values[str(x)]) for x in expr.free_symbols
                    if str(x) in values}
            if subs and expr.xreplace(subs) is sympy.false and (str(expr), where) not in out:
                out.append((str(expr), where))
    return out[:MAX_CHANGES]


def _differences(old: tuple[Any, ...], new: tuple[Any, ...]) -> list[tuple[int, int | None]]:
    """The parts in which two keys differ: ``(i, None)``, or ``(i, j)`` for element ``j``
    of the tokens (the last part, a tuple)."""
    out: list[tuple[int, int | None]] = []
    last = len(new) - 1
    for i, (a, b) in enumerate(zip(old, new)):
        if a == b:
            continue
        if i == last and type(a) is tuple and type(b) is tuple and len(a) == len(b):
            out += [(i, j) for j, (x, y) in enumerate(zip(a, b)) if x != y]
        else:
            out.append((i, None))
    return out


def _part(label: str, old: Any, new: Any, names: Sequence[str]
          ) -> list[tuple[str, int | None, int | None]]:
    """One key part's change, in the user's terms."""
    m = _SHAPE.match(label)
    if m:
        return _shape(m.group(1), old, new, names)
    m = _META.match(label)
    if m:
        what, name = m.groups()
        if what == "memory layout (strides)":
            what = "layout"
        return [(f"{name} {what}: {_shown(old)} -> {_shown(new)}", None, None)]
    if label == "grad mode":
        return [(f"grad mode: {_on(old)} -> {_on(new)}", None, None)]
    if label == "inference mode":
        return [(f"inference mode: {_on(old)} -> {_on(new)}", None, None)]
    if label == "autocast":
        return [(f"autocast: {_autocast(old)} -> {_autocast(new)}", None, None)]
    if label.startswith("argument '"):  # a leaf keyed whole (`_meta`): a number, a tensor
        if _is_meta(old) and _is_meta(new):
            out = _shape(label, old[0], new[0], names)
            for what, a, b in zip(("dtype", "device", "requires_grad"), old[1:4], new[1:4]):
                if a != b:
                    out.append((f"{label} {what}: {_shown(a)} -> {_shown(b)}", None, None))
            return out or [(f"{label} layout: {_shown(old[4:])} -> {_shown(new[4:])}",
                            None, None)]
        return [(f"{label}: {_shown(old)} -> {_shown(new)}", _leaf(label, names), None)]
    return [(f"{label}: {_shown(old)} -> {_shown(new)}", None, None)]


def _shape(name: str, old: Any, new: Any, names: Sequence[str]
           ) -> list[tuple[str, int | None, int | None]]:
    if not (isinstance(old, tuple) and isinstance(new, tuple)):
        return [(f"{name} shape: {_shown(old)} -> {_shown(new)}", None, None)]
    if len(old) != len(new):
        return [(f"{name} shape: {tuple(old)} -> {tuple(new)}", None, None)]
    leaf = _leaf(name, names)
    return [(f"{name} dim {d}: {a} -> {b}", leaf, d)
            for d, (a, b) in enumerate(zip(old, new)) if a != b]


def _leaf(name: str, names: Sequence[str]) -> int | None:
    """The index of the argument leaf ``name`` (``argument 'x'``) names, if any."""
    if not name.startswith("argument '"):
        return None
    bare = name[len("argument '"):-1]
    return names.index(bare) if bare in names else None


def _is_meta(v: Any) -> bool:
    return type(v) is tuple and len(v) >= 5 and isinstance(v[0], torch.Size)


def _changed_checks(before: Sequence[str], after: Sequence[str], prefix: str) -> list[str]:
    """The state a guard checks that differs between two renderings of its checks."""
    old, new = _by_subject(before), _by_subject(after)
    out: list[str] = []
    for subject, (op, value) in new.items():
        was = old.get(subject)
        if was is None:
            if not _under_new(subject, old):
                out.append(f"{prefix}{subject} set ({_bare(op, value)})")
        elif was != (op, value):
            if op == "==" and was[0] == "==":
                out.append(f"{prefix}{subject} changed {was[1]} -> {value}")
            else:
                out.append(f"{prefix}{subject} replaced ({_bare(*was)} -> {_bare(op, value)})")
    out += [f"{prefix}{subject} deleted" for subject in old
            if subject not in new and not _under_new(subject, new)]
    out = _outermost(out)
    if len(out) > MAX_CHANGES:
        out = [*out[:MAX_CHANGES], f"and {len(out) - MAX_CHANGES} more guarded values"]
    return out


def _by_subject(lines: Sequence[str]) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for line in lines:
        if line.startswith("#"):
            continue
        m = _CHECK.match(line)
        if m:
            out[m.group(1)] = (m.group(2), m.group(3))
    return out


def _under_new(subject: str, other: dict[str, tuple[str, str]]) -> bool:
    """Whether ``subject`` is a field of an object that is not in ``other`` either (a
    config replaced: its fields are new with it, and not named one by one)."""
    cut = max(subject.rfind("."), subject.rfind("["))
    if cut <= 0:
        return False
    parent = subject[:cut]
    return parent not in other and f"type({parent})" not in other


def _outermost(changes: list[str]) -> list[str]:
    """Leaves out the changes inside an object whose replacement is named."""
    replaced = [c.split(" replaced", 1)[0] for c in changes if " replaced (" in c]
    return [c for c in changes if not any(
        c != r and (c.startswith(r + ".") or c.startswith(r + "[")) for r in replaced)]


def _bare(op: str, value: str) -> str:
    return _ADDRESS.sub(">", value) if op == "is" else value


def _on(v: Any) -> str:
    return "enabled" if v else "disabled"


def _autocast(v: Any) -> str:
    return "off" if not v else _shown(v)


def _shown(v: Any) -> str:
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], type):
        v = v[1]
    if isinstance(v, torch.Size):
        v = tuple(v)
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def read_site(owner: Any, subject: str, bare: bool = False) -> str | None:
    """The user's ``file:line`` that reads ``subject`` (``self.cfg.scale``, a path from
    the jitted module ``owner``; with ``bare``, a global or closure name read by the
    jitted function or module's ``forward``): the first line of the owning class's methods
    (``forward`` first, ``__init__`` not; or of the function) that reads it by its path
    (``self.cfg.scale``), or a config field by its name (``cfg.scale``, through a local).
    None where no line does (the source is not available, or the read is elsewhere)."""
    if owner is None:
        return None
    parts = _INDEX.sub("", subject).split(".")
    if bare:
        target = owner.forward if isinstance(owner, torch.nn.Module) else owner
        return _first_line([getattr(target, "__func__", target)], [parts[0]])
    if parts[0] != "self" or len(parts) < 2 or not isinstance(owner, torch.nn.Module):
        return None
    m: torch.nn.Module = owner
    i = 1
    while i < len(parts) - 1 and (sub := m._modules.get(parts[i])) is not None:
        m = sub
        i += 1
    rest = parts[i:]  # (a field of a config object: its own name, read through a local)
    needles = [f"self.{'.'.join(rest)}", *([f".{rest[-1]}"] if len(rest) > 1 else [])]
    classes = [c for c in type(m).__mro__ if not c.__module__.startswith("torch")
               and c is not object]
    methods = [f for c in classes for name, f in vars(c).items()  # (not __init__'s)
               if isinstance(f, types.FunctionType) and name != "__init__"]
    methods.sort(key=lambda f: f.__name__ != "forward")
    return _first_line(methods, needles)


_INDEX = re.compile(r"\[[^\]]*\]")


def _first_line(owners: Sequence[Any], needles: Sequence[str]) -> str | None:
    import inspect

    for needle in needles:
        left = r"(?<=\w)" if needle[0] == "." else r"(?<![\w.])"
        word = re.compile(left + re.escape(needle)
                          + r"(?![\w])(?!\s*=[^=])")  # (a read, not a write)
        for o in owners:
            try:
                lines, start = inspect.getsourcelines(o)
                file = inspect.getsourcefile(o)
            except (OSError, TypeError):
                continue
            for k, line in enumerate(lines):
                if word.search(line.split("#", 1)[0]):
                    return f"{file}:{start + k}"
    return None


def speculation_reason(where: str, expected: bool) -> str:
    """The reason of a speculation variant's compile: the condition at ``where`` (the
    user's line) came out otherwise than when traced."""
    return f"the condition at {where} came out {not expected} (traced {expected})"


__all__ = ["LOGGER", "MAX_REASONS", "Reasons", "read_site", "speculation_reason"]
