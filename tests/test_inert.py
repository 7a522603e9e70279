"""Importing thunder_ir, and running it, changes no torch object.

Each test runs in a fresh process: it records the identity of every attribute of torch's
modules and of their classes (and the code of ``torch.compiler.is_compiling``, and
Python's ``random``), imports thunder_ir, compiles and runs programs that take over
torch's Python-level functions while traced (``torch.manual_seed``, ``Function.apply``,
full backward hooks, ``vmap``, a symbolic size's text, Python's ``random`` refusal), and
records again: no function, method or descriptor may differ (torch's own counters and
caches move as torch runs). What tracing swaps in is in place only while a trace
runs (`thunder_ir.frontend.takeover.patched`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

_SNAPSHOT = textwrap.dedent("""
    import random, sys, types, warnings
    import torch
    warnings.simplefilter("ignore")

    def code(v):  # functions and descriptors (torch's counters and caches may move)
        return callable(v) or isinstance(v, (classmethod, staticmethod))

    def snapshot():
        out = {}
        mods = [m for n, m in list(sys.modules.items()) if isinstance(m, types.ModuleType)
                and (n == "torch" or n.startswith("torch."))]
        for m in [*mods, random]:
            for k, v in list(vars(m).items()):
                if code(v):
                    out[(m.__name__, k)] = id(v)
                if isinstance(v, type) and v.__module__.startswith("torch"):
                    for kk, vv in list(vars(v).items()):
                        if code(vv):
                            out[(m.__name__, k, kk)] = id(vv)
        out["is_compiling code"] = id(torch.compiler.is_compiling.__code__)
        return out

    def changed(before, after):
        return sorted(str(k) for k in set(before) & set(after) if before[k] != after[k])
""")

_WORK = textwrap.dedent("""
    import thunder_ir
    print("import:", changed(before, snapshot()))
    import torch.nn as nn

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    def f(x):
        torch.manual_seed(int(x.shape[0]))
        y = Scale.apply(x) + torch.rand(x.shape)
        z = torch.vmap(torch.sin)(y)
        return z * float(str(x.shape[0]))

    jf = thunder_ir.jit(f)
    for n in (3, 4, 5):  # the third size: a symbolic program
        jf(torch.randn(n, 2, requires_grad=True)).sum().backward()
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda mod, gi, go: None)
    thunder_ir.jit(m)(torch.randn(3, 2, requires_grad=True)).sum().backward()
    try:
        thunder_ir.jit(lambda x: x * random.random())(torch.randn(2))
    except thunder_ir.ThunderTraceError:
        pass
    print("run:", changed(before, snapshot()))
""")


def test_importing_and_running_thunder_ir_changes_no_torch_object() -> None:
    code = _SNAPSHOT + "before = snapshot()\n" + _WORK
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    lines = run.stdout.splitlines()
    assert "import: []" in lines, run.stdout
    assert "run: []" in lines, run.stdout


_RUN_PRINTED = textwrap.dedent("""
    import sys, torch
    import thunder_ir  # and nothing else of thunder_ir: the traces import what they call
    sources, x, w, ct = torch.load(sys.argv[1])
    scope = {}
    for src in sources:
        exec(compile(src, "<printed trace>", "exec"), scope)
    out, *saved = scope["forward"](x, w)
    grad = scope["backward"]([*saved, ct])
    torch.save((out, grad), sys.argv[2])
""")


def test_printed_traces_run_as_they_are_in_a_fresh_process(tmp_path: Any) -> None:
    """The printed forward and backward of a program that calls ``tir.setitem`` (a write
    with a step), an extension executor's operator (``scaled_ex.scaled_tanh``) and, in the
    backward, ``tir.operator_vjp``, run in a process that imported only thunder_ir: each
    trace imports the modules that register what it calls."""
    import torch
    from ext_scaled_tanh import scaled, scaled_ex

    import thunder_ir

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = w * 2
        y[:, ::2] = 1.0  # a step of 2: the opaque functional write
        return scaled(y + x, 3.0)

    jf = thunder_ir.jit(f, executors=[scaled_ex])
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4)
    ct = torch.randn(3, 4)
    out = jf(x, w)
    out.backward(ct)
    fwd = str(thunder_ir.last_traces(jf)[-1])
    bwd = str(thunder_ir.last_backward_traces(jf)[-1])
    assert "tir.setitem(" in fwd and "scaled_ex.scaled_tanh(" in fwd
    assert "tir.operator_vjp(" in bwd
    assert "import ext_scaled_tanh" in fwd and "import ext_scaled_tanh" in bwd
    data, result = tmp_path / "in.pt", tmp_path / "out.pt"
    torch.save(([fwd, bwd], x.detach(), w, ct), data)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", _RUN_PRINTED, str(data), str(result)],
                         capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    got_out, got_grad = torch.load(result)
    torch.testing.assert_close(got_out, out.detach())
    torch.testing.assert_close(got_grad, x.grad)
