"""Speculative checks: a program traced under what a data-dependent condition was on its
first call checks that condition on every call (`assume`); a call where it differs stops
the program before anything it did is visible (`SpeculationFailed`), and the caller runs
that call another way (see `thunder_ir.frontend.speculation` and the api's cached call).
"""

from __future__ import annotations

from typing import Any


class SpeculationFailed(Exception):
    """A condition a program was traced under came out otherwise on this call.

    Attributes:
        where: the user's ``file:line`` of the condition.
        expected: what it was when traced.
    """

    def __init__(self, where: str, expected: bool) -> None:
        super().__init__(f"{where}: the condition was {expected} when traced")
        self.where = where
        self.expected = expected


def assume(condition: Any, expected: bool, where: str) -> None:
    """Raises `SpeculationFailed` where ``bool(condition)`` is not ``expected`` (one host
    read of a one-element tensor: the read eager's ``if`` makes too)."""
    if bool(condition) is not expected:
        raise SpeculationFailed(where, expected)


__all__ = ["SpeculationFailed", "assume"]
