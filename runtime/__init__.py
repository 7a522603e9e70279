"""thunder_ir.runtime."""
