"""Program building, the first of `TraceContext`'s parts: the ``ltorch`` program under
construction, where ops go now, the program's inputs, and the values made so far.

It knows nothing of eager's rules (`thunder_ir.frontend.eager_autograd`), of aliases
(`thunder_ir.frontend.aliasing.AliasTracking`) or of Python state
(`thunder_ir.frontend.pystate.StateReads`); `TraceContext` composes the four behind the
`Builder` interface. Its fields are plain attributes (``__slots__``): the tracer reads
``block`` and ``emitter`` once per recorded op.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import torch
from xdsl.ir import Attribute, Block, Operation, SSAValue

from thunder_ir.dialects.base import Emitter
from thunder_ir.dialects.prims import ConstantOp
from thunder_ir.dialects.program import FORWARD, Program
from thunder_ir.dialects.symbols import SYMBOLIC_NUMBERS, sym_text
from thunder_ir.dialects.symbols import current as current_table
from thunder_ir.frontend.errors import DATA_HINT, DataDependentError
from thunder_ir.frontend.proxy import TensorProxy
from thunder_ir.runtime.origins import Origin

_UNBACKED_FLOAT = re.compile(r"\bzuf\d+\b")
"""An unbacked float's name (a float ``.item()``, `thunder_ir.frontend.unbacked.item_float`)
in expression text: the program has its value as the ``item`` call's result, never as text."""


def unbacked_float(value: Any) -> bool:
    """Whether ``value`` is a ``SymFloat`` holding an unbacked float (a float ``.item()``,
    or arithmetic on one): the program has it as a value (`ProgramBuild.number`), so an op
    takes it as an operand, never in a static argument's text (which names no variable
    of the generated code)."""
    if type(value) is not torch.SymFloat or current_table() is None:
        return False
    text = sym_text(value)
    return isinstance(text, str) and _UNBACKED_FLOAT.search(text) is not None


class ProgramBuild:
    """The program under construction and its inputs.

    Attributes:
        program: the program (its body is the ``forward`` function's).
        block: where ops are recorded: the program's body, or a region being traced (a
            custom ``Function``'s backward; see `into`).
        emitter: builds ops at the end of ``block``.
        input_kinds: per program argument, where its value comes from at call time.
        input_requires_grad: per program argument, whether it is a gradient source.
        input_proxies: per tensor input, its proxy, the value it stood for when made (an
            in-place write rebinds the proxy: the value differs then) and its origin.
        consts: a captured real tensor's id -> its proxy (each is lifted once).
        numbers: a Python number's key -> its ``prims.constant`` value in ``block``.
        names: the argument names taken so far.
        call_start: the last op before the torch call being traced (`ops_of_this_call`).
        concrete: the real tensors of this call behind the program's arguments, and values
            computed from them, for speculating on a data-dependent condition
            (`thunder_ir.frontend.speculation`).
        concrete_rng: the random generators' states after the draws computed so far for
            speculation, in program order (None: none yet; they start from the call's).
        speculative: the program checks conditions it was traced under.
        counts: the unbacked count (``u0``) of each mask value's nonzero elements
            (`thunder_ir.frontend.unbacked.count`), and under ``("of", name)`` what
            each unbacked symbol counts or reads (`unbacked.symbol_tensor`).
    """

    __slots__ = ("block", "call_start", "concrete", "concrete_rng", "consts", "counts", "emitter",
                 "input_kinds", "input_proxies", "input_requires_grad", "names", "numbers",
                 "program", "speculative")

    def __init__(self) -> None:
        self.program = Program(FORWARD, [])
        self.block: Block = self.program.block
        self.emitter: Emitter = self.program.emitter
        self.input_kinds: list[Origin] = []
        self.input_requires_grad: list[bool] = []
        self.input_proxies: list[tuple[TensorProxy, SSAValue, Origin]] = []
        self.consts: dict[int, TensorProxy] = {}
        self.numbers: dict[tuple[type, Any], SSAValue] = {}
        self.names: set[str] = set()
        self.call_start: Operation | None = None
        self.concrete: dict[SSAValue, Any] = {}
        self.concrete_rng: Any = None
        self.speculative = False
        self.counts: dict[Any, Any] = {}

    # ---- inputs

    def unique(self, name: str) -> str:
        """``name`` made an identifier no other argument has."""
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "t"
        if base[0].isdigit():
            base = "t_" + base
        n, i = base, 1
        while n in self.names:
            n, i = f"{base}_{i}", i + 1
        self.names.add(n)
        return n

    def add_input(self, t: Attribute, name: str, kind: Origin) -> SSAValue:
        """Appends a program argument (not a gradient source until told so)."""
        block = self.program.block
        v = block.insert_arg(t, len(block.args))
        v.name_hint = self.unique(name)
        self.input_kinds.append(kind)
        self.input_requires_grad.append(False)
        return v

    def kind_of(self, p: TensorProxy) -> Origin | None:
        """Where the input ``p`` stands for comes from (None: ``p`` is not an input)."""
        return next((k for q, _, k in self.input_proxies if q is p), None)

    def is_leaf(self, v: SSAValue) -> bool:
        """True for the program's arguments (eager's leaves: inputs, parameters)."""
        return v.owner is self.program.block

    # ---- values and ops

    def number(self, value: Any) -> SSAValue:
        """A Python number as an SSA value (one ``prims.constant`` per distinct value per
        block; ``0.0`` and ``-0.0`` are distinct)."""
        if type(value) in SYMBOLIC_NUMBERS:  # ``x.shape[1] * 2``: by its text
            text = sym_text(value)
            if not isinstance(text, str):
                return self.number(text)
            key: Any = (type(value), text)
        else:
            key = (type(value), repr(value) if type(value) is float else value)
        v = self.numbers.get(key)
        if v is None:
            if type(value) is torch.SymFloat and _UNBACKED_FLOAT.search(key[1]):
                raise DataDependentError(  # (the program has the number, not its text)
                    "arithmetic on a float .item() used as an operand needs a traced "
                    f"tensor's value, but {DATA_HINT}")
            v = self.emitter.emit(ConstantOp, value=value)
            self.numbers[key] = v
        return v

    def in_region(self) -> bool:
        """Whether ops go into a region (a custom backward), not the program's body."""
        return self.block is not self.program.block

    def ops_of_this_call(self) -> set[Operation]:
        """The ops recorded since the torch call being traced began (`TraceMode`)."""
        op = self.block.first_op if self.call_start is None else self.call_start.next_op
        out: set[Operation] = set()
        while op is not None:
            out.add(op)
            op = op.next_op
        return out

    @contextlib.contextmanager
    def into(self, block: Block) -> Iterator[None]:
        """Records ops into ``block`` (a region's body) while the context is open."""
        saved = (self.block, self.emitter, self.numbers)
        self.block, self.emitter, self.numbers = block, Emitter(block.add_op), {}
        try:
            yield
        finally:
            self.block, self.emitter, self.numbers = saved


__all__ = ["ProgramBuild", "unbacked_float"]
