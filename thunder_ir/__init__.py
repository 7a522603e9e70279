"""thunder_ir: a deep-learning compiler for PyTorch on typed SSA IR built on xDSL."""
