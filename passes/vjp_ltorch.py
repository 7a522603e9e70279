"""VJP rules of ltorch ops that are cheaper than differentiating their decomposition
(see `thunder_ir.passes.vjp`)."""

from __future__ import annotations
