"""thunder_ir.lowering."""
