"""thunder_ir.passes."""
