"""``print`` of numbers a program computes (`thunder_ir.frontend.printing`): each call
prints its own values, as eager's ``print`` in ``forward`` does."""

from __future__ import annotations

from typing import Any


def _piece(piece: Any, numbers: tuple[Any, ...]) -> str:
    """A piece of an argument's text: itself, or number ``k`` as ``format(n, spec)``,
    ``str(n)`` or ``repr(n)`` (``("n", k, spec, how)``)."""
    if isinstance(piece, str):
        return piece
    _, k, spec, how = piece
    n = numbers[k]
    if how == "format":
        return format(n, spec)
    return repr(n) if how == "repr" else str(n)


def print_values(template: Any, *numbers: Any, sep: Any = " ", end: Any = "\n",
                 flush: bool = False) -> None:
    """``print(*args, sep=sep, end=end, flush=flush)`` to this call's ``sys.stdout``, each
    argument of ``template`` the concatenation of its pieces (`_piece`) with this call's
    ``numbers``."""
    print(*("".join(_piece(p, numbers) for p in arg) for arg in template), sep=sep,
          end=end, flush=flush)


__all__ = ["print_values"]
