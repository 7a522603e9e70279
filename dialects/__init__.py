"""thunder_ir.dialects."""
