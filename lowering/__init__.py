"""thunder_ir.lowering: executors, code generation and the lowering's passes.

Importing it registers the lowering's passes by name (`thunder_ir.lowering.pass_names`),
so a pass spec can name them wherever the lowering is used.
"""

from thunder_ir.lowering import pass_names as pass_names
