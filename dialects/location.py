"""Source locations: the user's ``file:line`` of each traced op, in xDSL's own place.

An op's location is ``Operation.location`` (MLIR's ``loc(...)``), not an attribute: a
``FileLineColLoc`` (column 0) for the user line that recorded it, ``UnknownLoc`` for an op
no user line made. Being outside ``attributes`` it is what MLIR makes it:

* CSE compares attributes and properties, not locations, so ``x.exp()`` on line 3 and on
  line 7 is one computation (the op kept has the first line);
* ``Operation.clone`` copies it, so a pass that clones ops keeps the user's line without
  copying it by hand;
* the text form prints it after the op's type (``loc("model.py":3:0)``) and parses it
  back (`print_mlir`; ``thunder-ir-opt`` prints the known ones).

Tracing makes one location attribute per distinct line (`source_location` is cached), so
a trace of n ops costs n pointer stores, not n attribute constructions.
"""

from __future__ import annotations

import functools
from io import StringIO

from xdsl.dialects.builtin import FileLineColLoc, IntAttr, LocationAttr, StringAttr, UnknownLoc
from xdsl.ir import Operation
from xdsl.printer import Printer

UNKNOWN = UnknownLoc()
"""The location of an op that no user line made (xDSL's default)."""


@functools.lru_cache(maxsize=8192)
def source_location(text: str) -> LocationAttr:
    """``"path/to/file.py:12"`` as a location (``loc("path/to/file.py":12:0)``); ``""``
    is unknown."""
    if not text:
        return UNKNOWN
    path, _, line = text.rpartition(":")
    if not path or not line.isdigit():
        return FileLineColLoc(StringAttr(text), IntAttr(0), IntAttr(0))
    return FileLineColLoc(StringAttr(path), IntAttr(int(line)), IntAttr(0))


def location_text(loc: LocationAttr | Operation | None) -> str:
    """An op's (or a location's) user line as ``file:line``; ``""`` when unknown."""
    if isinstance(loc, Operation):
        loc = loc.location
    if isinstance(loc, FileLineColLoc):
        return f"{loc.filename.data}:{loc.line.data}"
    return ""


def has_location(op: Operation) -> bool:
    """Whether a user line made ``op``."""
    return not isinstance(op.location, UnknownLoc)


class LocatedPrinter(Printer):
    """xDSL's printer that prints the locations ops have (and nothing for the others).

    xDSL prints locations only with ``print_debuginfo``, and then ``loc(unknown)`` after
    every op no user line made; a trace's text shows the user's lines without that noise.
    With ``print_debuginfo`` set it prints them all, as xDSL does.
    """

    def print_operation_type(self, op: Operation) -> None:
        super().print_operation_type(op)
        if not self.print_debuginfo and has_location(op):
            self.print_string(" ")
            self.print_attribute(op.location)


def print_mlir(op: Operation, generic: bool = False) -> str:
    """The MLIR text of ``op`` with its known locations (what traces show as MLIR)."""
    out = StringIO()
    LocatedPrinter(stream=out, print_generic_format=generic).print_op(op)
    return out.getvalue()


__all__ = ["UNKNOWN", "LocatedPrinter", "has_location", "location_text", "print_mlir",
           "source_location"]
