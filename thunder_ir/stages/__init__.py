"""The stages of a jitted callable (after JAX's ``stages.py``): what a call goes through.

::

    call ──> Dispatcher ──(guards' tokens)──> Keyer: prologue ──> key
                 │                                                  │
                 │<──────────── ProgramCache: entry by key <────────┘
                 │   miss: layout-free / symbolic entry, else
                 │         Compiler: trace -> TracedProgram -> pipeline with the
                 │         CompileContext -> generate -> CompiledProgram -> Entry
                 v
             entry.fn(gather(leaves)) ──> write-back, epilogue ──> results

* `keyer.Keyer`: call structures, prologues, guards of Python state, layouts in the key,
  re-keying when a trace read more.
* `programs.ProgramCache`: entries by key, layout-free and symbolic entries, the
  recompile warning.
* `compiler.Compiler`: one call's compile, static or symbolic, as an entry.
* `dispatch.Dispatcher`: ``__call__``, misses, speculation variants, write-back, nested
  calls, a fast-path hook.
* `policies.Policies`: what the stages consult for a feature (dynamic sizes, tier-up,
  data parallelism, autocast, a backend's fast path): a new feature is a policy, never a
  branch in `thunder_ir.api`, which only assembles the stages (`CompiledCallable`).
"""
