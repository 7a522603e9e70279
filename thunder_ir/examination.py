"""``thunder_ir.examine(fn_or_module, *args, **kwargs)``: what ``jit`` would make of a call,
before running it.

One compile of the call (its trace, the pass pipeline and code generation; nothing is run
but what tracing itself runs: the ops a speculated condition depends on, on this call's
tensors) by a jitted callable made for the purpose and dropped after, and a report of it,
an `Examination`:

* the ops by how they run: ``ltorch``/``prims`` ops thunder_ir lowers itself, the ops
  inside an executor's fusion regions, and the ``torch.call`` fallbacks (torch runs them
  opaquely), each fallback named, counted and with the user's lines;
* every place a compile stops or speculates: a data-dependent read (``t.numpy()``,
  ``t.data_ptr()``) or a refused construct, each with its line and what to do. The trace goes
  on past them where it can (the call that stopped it is run on this call's real values,
  `thunder_ir.frontend.examining`), so one examination finds them all; one it cannot go on
  past ends the trace there, and the report says the code after it was not examined. A
  condition the program speculates on (``if x.sum() > 0``) is listed too: a call where it
  comes out otherwise compiles again;
* the Python state the programs are guarded on (module attributes and config fields,
  globals, closure cells), the sizes kept symbolic, and what makes a call compile again;
* for a training call (an input requires grad, grad mode on): the bytes the forward
  saves for the backward, and the ops the backward recomputes instead of saving.

The model, its parameters and buffers, torch's and Python's random generators and the
global modes are as they were after it; no compiled program is kept.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from xdsl.ir import Operation

from thunder_ir.api import CompiledCallable, ThunderModule, build
from thunder_ir.dialects.fusion import RegionOp
from thunder_ir.dialects.location import location_text
from thunder_ir.dialects.program import BACKWARD, main_function
from thunder_ir.dialects.torch import RUNTIME_NAMESPACE, CallOp
from thunder_ir.dialects.types import TensorType
from thunder_ir.frontend import ThunderTraceError
from thunder_ir.frontend.examining import Noted, examining
from thunder_ir.frontend.speculation import ASSUME, concrete
from thunder_ir.passes.remat import plans_noted
from thunder_ir.runtime.cache import Entry, flatten_args
from thunder_ir.runtime.dynamic import EVERY
from thunder_ir.stages.reasons import read_site

_WHERE = re.compile(r"^(.+?:\d+): ")


@dataclass
class Fallback:
    """One torch callable the program runs opaquely (``torch.call``).

    Attributes:
        name: its import path (``torch.special.bessel_j0``).
        count: how many times the program calls it.
        lines: the user's lines of those calls (each once, in program order).
    """

    name: str
    count: int
    lines: list[str]


@dataclass
class Point:
    """A place where a compile stops or depends on a tensor's value.

    Attributes:
        where: the user's ``file:line``.
        kind: ``"data-dependent"`` (a compile raises `DataDependentError` there),
            ``"refused"`` (a compile raises `ThunderTraceError`), or ``"speculated"``
            (the program checks the condition on every call; a call where it differs
            compiles again).
        message: what a compile says there, with what to do instead.
        went_on: the examination's trace went on past it (False: the code after it was
            not examined).
    """

    where: str
    kind: str
    message: str
    went_on: bool = True


@dataclass
class Examination:
    """The report of `examine` (its ``str()`` is a short readable summary).

    Attributes:
        name: what was examined.
        native: how many ops of the traced program thunder_ir lowers itself.
        fallbacks: the ops torch runs opaquely (`Fallback`), most frequent first.
        fused: per executor, how many ops (prims) its fusion regions hold, in the final
            forward and backward programs.
        kernels: per executor, how many fusion regions it made there.
        points: data-dependent reads, refused constructs and speculated conditions, in
            trace order (`Point`).
        stopped: where the trace stopped (a refused construct it could not go on past),
            else None: the ops cover the code before it (no fusion or training figures).
        guarded: the Python state the programs are guarded on (a check per line:
            ``self.cfg.scale == 2.0``).
        read_at: per guarded check whose value the user's code reads (by its subject,
            ``self.cfg.scale``), the user's line that reads it.
        not_guarded: module attributes forward writes before reading (not guarded).
        dynamic: the argument sizes kept symbolic from the first compile (``x dim 0``).
        recompiles_on: what makes a call compile again.
        training: whether the call compiles a training program (forward and backward).
        saved_bytes: what the forward saves for the backward, in bytes (training).
        recomputed: the ops the backward recomputes, each ``(op, user's line)``.
    """

    name: str
    native: int = 0
    fallbacks: list[Fallback] = field(default_factory=list)
    fused: dict[str, int] = field(default_factory=dict)
    kernels: dict[str, int] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)
    stopped: str | None = None
    guarded: list[str] = field(default_factory=list)
    read_at: dict[str, str] = field(default_factory=dict)
    not_guarded: list[str] = field(default_factory=list)
    dynamic: list[str] = field(default_factory=list)
    recompiles_on: list[str] = field(default_factory=list)
    training: bool = False
    saved_bytes: int | None = None
    recomputed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def fallback_count(self) -> int:
        """How many ops of the program torch runs opaquely."""
        return sum(f.count for f in self.fallbacks)

    @property
    def data_dependent(self) -> list[Point]:
        """The places a compile raises `DataDependentError`."""
        return [p for p in self.points if p.kind == "data-dependent"]

    @property
    def refused(self) -> list[Point]:
        """The refused constructs."""
        return [p for p in self.points if p.kind == "refused"]

    @property
    def compiles(self) -> bool:
        """Whether ``jit`` compiles this call (nothing data-dependent or refused)."""
        return not any(p.kind != "speculated" for p in self.points)

    def __str__(self) -> str:
        total = self.native + self.fallback_count
        lines = [f"thunder_ir.examine({self.name}): "
                 + ("compiles" if self.compiles else
                    f"does not compile ({len(self.data_dependent)} data-dependent, "
                    f"{len(self.refused)} refused)")]
        if self.stopped is not None:
            lines.append(f"  the trace stopped at {self.stopped}: the code after it was "
                         "not examined")
        lines.append(f"ops: {total} traced, {self.native} by thunder_ir, "
                     f"{self.fallback_count} run by torch as fallbacks"
                     + "".join(f"; {self.kernels.get(ex, 0)} {ex} kernels fuse {n} prims "
                               "(forward and backward)" for ex, n in self.fused.items()))
        for f in self.fallbacks:
            lines.append(f"  fallback {f.name} x{f.count} at {', '.join(f.lines[:4])}"
                         + (f" and {len(f.lines) - 4} more" if len(f.lines) > 4 else ""))
        if self.points:
            lines.append("data-dependent and refused:")
            for p in self.points:
                tail = "" if p.went_on else " (the trace could not go on past it)"
                lines.append(f"  {p.kind} at {p.where}{tail}: {_after_where(p.message)}")
        if self.read_at:
            lines.append("Python state read (a change compiles again):")
            read = [f"  {c} (read at {self.read_at[_subject(c)]})" for c in self.guarded
                    if _subject(c) in self.read_at]
            lines += read[:16] + ([f"  and {len(read) - 16} more"] if len(read) > 16 else [])
        rest = [c for c in self.guarded if _subject(c) not in self.read_at]
        if rest:
            lines.append("also guarded: " + "; ".join(rest[:8])
                         + (f" and {len(rest) - 8} more" if len(rest) > 8 else ""))
        if self.not_guarded:
            lines.append("not guarded (forward writes them before reading): "
                         + ", ".join(self.not_guarded))
        lines.append("symbolic sizes: " + (", ".join(self.dynamic) if self.dynamic else
                                           "none yet"))
        lines.append("compiles again on: " + "; ".join(self.recompiles_on))
        if self.training:
            lines.append(f"training: the forward saves {_bytes(self.saved_bytes or 0)} for "
                         f"the backward; it recomputes {len(self.recomputed)} ops"
                         + (f" ({', '.join(sorted({n for n, _ in self.recomputed}))})"
                            if self.recomputed else ""))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


def examine(fn_or_module: Any, *args: Any, **kwargs: Any) -> Examination:
    """What ``thunder_ir.jit(fn_or_module)(*args, **kwargs)`` would compile, as a report
    (see the module doc), without running the call and without keeping a program.

    ``fn_or_module``: a function, an ``nn.Module``, or what ``jit`` returned for one (its
    options are used). Raises the user's own error where the call raises it (a shape
    mismatch eager raises too)."""
    target, options = _target(fn_or_module)
    jitted = build(target, CompiledCallable, **options)
    compiled = jitted._compiled if isinstance(jitted, ThunderModule) else jitted
    name = compiled.compiler.name()
    report = Examination(name)
    states = _random_states()
    entry: Entry | None = None
    stop: ThunderTraceError | None = None
    try:
        with examining(concrete) as book, plans_noted() as plans:
            leaves, spec = flatten_args(args, kwargs)
            keyer = compiled.keyer
            pro = keyer.current(spec, args, kwargs, len(leaves))
            dynamic = compiled.policies.dynamic.sizes(spec, leaves)
            dynamic, _ = keyer.with_attrs(dynamic, leaves)
            try:
                entry, _, _ = compiled.compiler.compile_dynamic(args, kwargs, spec, leaves,
                                                                pro, dynamic)
            except ThunderTraceError as e:
                stop = e
        names = keyer.names(args, kwargs, len(leaves))
    finally:
        _put_random_states(states)
    report.points = [_point(n) for n in book.noted]
    if entry is None and book.trace is not None:  # what the trace recorded before it stopped
        _ops(report, book.trace.build.program.block.ops)
    if stop is not None:
        where = _where(str(stop))
        if not any(p.where == where and not p.went_on for p in report.points):
            report.points.append(Point(where, "refused" if not _data(stop) else
                                       "data-dependent", str(stop).split("\n", 1)[0],
                                       went_on=False))
        report.stopped = where
    if entry is not None:
        _ops(report, main_function(entry.traces[0].ir).body.block.ops)
        for trace in (entry.traces[-1], *(entry.backward_traces[-1:])):
            _regions(report, trace.ir)
        report.training = bool(entry.backward_traces)
        if report.training:
            report.saved_bytes = _saved_bytes(entry)
            report.recomputed = [r for _, ops in plans for r in ops]
    report.points.sort(key=_line_order)
    every = [*names, *keyer.attr_names()]
    report.dynamic = [d for leaf, dims in sorted(dynamic.items())
                      for d in _dims(every[leaf] if leaf < len(every) else f"leaf {leaf}",
                                     dims)]
    _state(report, compiled)
    report.recompiles_on = _recompiles_on(report, compiled, names)
    return report


def _dims(name: str, dims: tuple[Any, ...]) -> list[str]:
    """A leaf's symbolic sizes, as the report names them."""
    if not dims:
        return [f"{name} (its value)"]
    return [f"every size inside {name}" if d == EVERY else
            f"{name} dim {d}" if isinstance(d, int) else f"{name} field {d}" for d in dims]


def _target(f: Any) -> tuple[Any, dict[str, Any]]:
    """What to compile, and with which ``jit`` options (those of an already jitted one)."""
    compiled = f._compiled if isinstance(f, ThunderModule) else f
    if isinstance(compiled, CompiledCallable):
        executors, transforms, remat, cache = compiled._options
        target: Any = compiled.module if compiled.module is not None else compiled.fn
        if compiled.compiler.method is not None:  # jit(model.forward)
            target = compiled.compiler.method.__get__(compiled.module)
        return target, {"executors": executors, "transforms": transforms, "remat": remat,
                        "cache": cache}
    return f, {}


def _random_states() -> tuple[Any, ...]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.random.get_rng_state(), cuda, random.getstate()


def _put_random_states(states: tuple[Any, ...]) -> None:
    torch.random.set_rng_state(states[0])
    if states[1] is not None:
        torch.cuda.set_rng_state_all(states[1])
    random.setstate(states[2])


def _data(e: BaseException) -> bool:
    from thunder_ir.frontend import DataDependentError

    return isinstance(e, DataDependentError)


def _where(message: str) -> str:
    m = _WHERE.match(message)
    return m.group(1) if m else "<unknown>:0"


def _after_where(message: str) -> str:
    m = _WHERE.match(message)
    return message[m.end():] if m else message


def _line_order(p: Point) -> tuple[str, int]:
    """A point's file and line number (the user's code in order, file by file)."""
    file, _, line = p.where.rpartition(":")
    return (file, int(line)) if line.isdigit() else (p.where, 0)


def _point(n: Noted) -> Point:
    where = n.where or _where(n.message)
    return Point(where, "data-dependent" if n.data_dependent else "refused", n.message,
                 n.went_on)


def _ops(report: Examination, ops: Iterable[Operation]) -> None:
    """The traced program's ops by how they run, and its speculated conditions."""
    fallbacks: dict[str, list[str]] = {}
    counts: Counter[str] = Counter()
    for op in ops:
        if op.name == "func.return":
            continue
        if isinstance(op, CallOp):
            callee = op.callee.data
            if callee == ASSUME:
                where = op.args.data[-1]
                text = getattr(where, "data", str(where))
                report.points.append(Point(
                    str(text), "speculated",
                    f"{text}: a condition on a tensor's value: the program checks it on "
                    "every call, and a call where it comes out otherwise compiles again "
                    "(torch.where keeps it in tensors)"))
                continue
            if callee.startswith(RUNTIME_NAMESPACE):
                continue
            counts[callee] += 1
            lines = fallbacks.setdefault(callee, [])
            loc = location_text(op)
            if loc and loc not in lines:
                lines.append(loc)
            continue
        report.native += 1
    report.fallbacks = [Fallback(n, c, fallbacks[n]) for n, c in counts.most_common()]


def _regions(report: Examination, module: Any) -> None:
    for op in module.walk():
        if isinstance(op, RegionOp):
            ex = op.executor.data
            report.kernels[ex] = report.kernels.get(ex, 0) + 1
            inner = sum(1 for o in op.body.block.ops if o.name != "fusion.yield")
            report.fused[ex] = report.fused.get(ex, 0) + inner


def _saved_bytes(entry: Entry) -> int:
    """The bytes of the tensors the final forward returns besides the user's outputs."""
    for trace in reversed(entry.traces):
        if trace.function not in (None, BACKWARD) and trace.final:
            fn = main_function(trace.ir)
            outs = fn.function_type.outputs.data[entry.n_outputs:]
            return sum(t.nbytes() for t in outs if isinstance(t, TensorType)
                       and not t.symbolic)
    return 0


def _state(report: Examination, compiled: CompiledCallable) -> None:
    """The guarded Python state, by guard: plain values, not the module machinery."""
    for g in compiled.keyer.guards:
        prefix = ("global " if g.name.startswith("globals of") else
                  "closure " if g.name.startswith("closure of") else "")
        for line in g.render():
            if line.startswith("#"):
                m = re.match(r"# (\S+): not checked", line)
                if m:
                    report.not_guarded.append(m.group(1))
                continue
            if (line.startswith(("torch.nn.modules", "type(")) or "hooks ==" in line
                    or "<Parameter" in line or (" is <" in line and _is_submodule(line, g))):
                continue
            report.guarded.append(prefix + line)
            subject = _subject(line)
            site = read_site(compiled.module or compiled.fn, subject, bool(prefix))
            if site is not None:
                report.read_at[prefix + subject] = site


def _subject(check: str) -> str:
    """What a guard's check is of (``self.cfg.scale`` of ``self.cfg.scale == 2.0``)."""
    for sep in (" == ", " is ", " not in "):
        if sep in check:
            return check.split(sep, 1)[0]
    return check


def _is_submodule(line: str, guard: Any) -> bool:
    """A ``self.sub is <Linear ...>`` line (the submodule's own checks follow it)."""
    subject = line.split(" is <", 1)[0]
    return any(r == f"type({subject}) is {line.split(' is <', 1)[1].split(' ', 1)[0]}"
               for r in guard.render())


def _recompiles_on(report: Examination, compiled: CompiledCallable,
                   names: list[str]) -> list[str]:
    mode = compiled.policies.dynamic.mode
    sizes = {"auto": "a size that changes between calls becomes symbolic on the second "
                     "compile (one program for every size after it)",
             "static": "a new size of any argument (cache='static')",
             "symbolic values": "sizes are symbolic from the first compile"}[mode]
    out = [f"a new dtype, device, requires_grad or layout of {', '.join(names) or 'none'}",
           sizes, "grad mode, inference mode, autocast, the default dtype or device, "
           "deterministic algorithms", "a change in the guarded Python state"]
    speculated = [p.where for p in report.points if p.kind == "speculated"]
    if speculated:
        out.append("the condition at " + ", ".join(speculated) + " coming out otherwise")
    return out


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


__all__ = ["Examination", "Fallback", "Point", "examine"]
