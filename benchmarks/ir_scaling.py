"""How compile steps scale with the size of the IR: µs per op at 1k, 10k and 50k ops.

The program is a stack of Llama-style decoder blocks (RMSNorm, q/k/v projections, head
reshapes and transposes, scaled scores, softmax, attention matmuls, output projection,
residual adds, a SiLU-gated MLP), built as ``ltorch`` ops as the frontend would. An op that
``ltorch`` lacks (or that has no decomposition yet) is built from prims instead, so the
benchmark runs whatever state the dialects are in. Every block has its own weights and
each op carries a source location, as traced programs do.

Steps timed, each on the module the previous one left:

* ``build``: emitting the ltorch program (shape rules included);
* ``verify``: ``module.verify()`` of the ltorch program;
* ``decompose``: the ``decompose-ltorch`` pass;
* ``canonicalize``, ``cse``, ``dce``: the clean-up passes, on prims;
* ``verify-prims``: verifying the prim program;
* ``snapshot``: one `Trace` snapshot (what the pipeline pays per recorded pass);
* ``print``: MLIR text; ``print-python``: the Python trace (when the printer exists).

µs/op divides by the ops the step reads: ltorch ops for build, verify and decompose, prim
ops for the rest. Run::

    python benchmarks/ir_scaling.py [--sizes 1000 10000 50000] [--repeat 3] [--gc-off]
"""

from __future__ import annotations

import argparse
import gc
import platform
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import xdsl
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import SSAValue

from thunder_ir.dialects import ltorch, prims
from thunder_ir.dialects.program import Program, context
from thunder_ir.dialects.types import TensorType, tensor_type
from thunder_ir.passes.canonicalize import CanonicalizePass
from thunder_ir.passes.cse_dce import CSEPass, DCEPass
from thunder_ir.passes.decompose_ltorch import DecomposeLtorchPass
from thunder_ir.passes.decompositions import load_rules
from thunder_ir.passes.pipeline import snapshot

B, S, D, H = 2, 16, 64, 4
DH = D // H
F32 = torch.float32


class BlockBuilder:
    """Emits one op per call: ltorch when the op and its decomposition exist, else prims."""

    def __init__(self, program: Program) -> None:
        self.e = program.emitter
        self.P = self.e.ns(prims.OPS)
        self.L = self.e.ns(ltorch.OPS)
        rules = load_rules()
        self.ltorch_ok = {n for n, op in ltorch.OPS.items() if op in rules}
        self.used: dict[str, str] = {}
        self.line = 0

    def at(self, line: int) -> None:
        """Sets the source location of the next ops (same lines in every block)."""
        self.e.loc = StringAttr(f"llama.py:{line}")

    def _try(self, name: str, fallback: Callable[[], SSAValue], *operands: Any,
             **params: Any) -> SSAValue:
        if name in self.ltorch_ok and self.used.get(name) != "prims":
            try:
                out = getattr(self.L, name)(*operands, **params)
                self.used[name] = "ltorch"
                return out
            except Exception:  # signature not as expected: fall back, once and for all
                self.used[name] = "prims"
        self.used.setdefault(name, "prims")
        return fallback()

    # ---- ops

    def linear(self, x: SSAValue, w: SSAValue) -> SSAValue:
        return self._try("linear", lambda: self.P.linear(x, w, None), x, w, None)

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._try("add", lambda: self.P.add(a, b), a, b)

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._try("mul", lambda: self.P.mul(a, b), a, b)

    def matmul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._try("matmul", lambda: self.P.matmul(a, b), a, b)

    def reshape(self, x: SSAValue, shape: tuple[int, ...]) -> SSAValue:
        return self._try("reshape", lambda: self.P.reshape(x, shape=shape), x, shape=shape)

    def transpose(self, x: SSAValue, d0: int, d1: int) -> SSAValue:
        def prim() -> SSAValue:
            perm = list(range(_t(x).rank))
            perm[d0], perm[d1] = perm[d1], perm[d0]
            return self.P.transpose(x, permutation=tuple(perm))

        return self._try("transpose", prim, x, dim0=d0, dim1=d1)

    def _last_dim_reduce(self, op: str, x: SSAValue) -> SSAValue:
        t = _t(x)
        r = getattr(self.P, op)(x, dims=(t.rank - 1,))
        return self.P.broadcast_in_dim(r, shape=t.sizes, broadcast_dims=tuple(range(t.rank - 1)))

    def softmax(self, x: SSAValue) -> SSAValue:
        def prim() -> SSAValue:
            e = self.P.exp(self.P.sub(x, self._last_dim_reduce("amax", x)))
            return self.P.div(e, self._last_dim_reduce("sum", e))

        return self._try("softmax", prim, x, dim=-1)

    def silu(self, x: SSAValue) -> SSAValue:
        def prim() -> SSAValue:
            one = self.P.constant(value=1.0)
            return self.P.mul(x, self.P.reciprocal(self.P.add(self.P.exp(self.P.neg(x)), one)))

        return self._try("silu", prim, x)

    def rms_norm(self, x: SSAValue, w: SSAValue) -> SSAValue:
        def prim() -> SSAValue:
            t = _t(x)
            ms = self.P.mul(self._last_dim_reduce("sum", self.P.mul(x, x)),
                            self.P.constant(value=1.0 / t.sizes[-1]))
            inv = self.P.rsqrt(self.P.add(ms, self.P.constant(value=1e-6)))
            wb = self.P.broadcast_in_dim(w, shape=t.sizes, broadcast_dims=(t.rank - 1,))
            return self.P.mul(self.P.mul(x, inv), wb)

        return self._try("rms_norm", prim, x, w, normalized_shape=(D,), eps=1e-6)

    def scale(self, x: SSAValue, s: float) -> SSAValue:
        c = self.P.constant(value=s)
        return self._try("mul", lambda: self.P.mul(x, c), x, c)

    # ---- a decoder block

    def block(self, x: SSAValue, ws: list[SSAValue]) -> SSAValue:
        n1, wq, wk, wv, wo, n2, wg, wu, wd = ws
        self.at(10)
        h = self.rms_norm(x, n1)
        heads = []
        for line, w in ((11, wq), (12, wk), (13, wv)):
            self.at(line)
            heads.append(self.transpose(self.reshape(self.linear(h, w), (B, S, H, DH)), 1, 2))
        q, k, v = heads
        self.at(14)
        scores = self.scale(self.matmul(q, self.transpose(k, 2, 3)), DH ** -0.5)
        self.at(15)
        p = self.softmax(scores)
        self.at(16)
        o = self.reshape(self.transpose(self.matmul(p, v), 1, 2), (B, S, D))
        self.at(17)
        x = self.add(x, self.linear(o, wo))
        self.at(18)
        h = self.rms_norm(x, n2)
        self.at(19)
        g = self.mul(self.silu(self.linear(h, wg)), self.linear(h, wu))
        self.at(20)
        return self.add(x, self.linear(g, wd))


def _t(v: SSAValue) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType)
    return t


def weight_types() -> list[TensorType]:
    """The weights of one block: norms, q/k/v/o projections, gate/up/down projections."""
    sq = tensor_type((D, D), F32)
    up = tensor_type((4 * D, D), F32)
    down = tensor_type((D, 4 * D), F32)
    norm = tensor_type((D,), F32)
    return [norm, sq, sq, sq, sq, norm, up, up, down]


def count_ops(module: ModuleOp) -> int:
    return sum(1 for _ in module.walk()) - 2  # not the module and the function


def build(n_ops: int) -> tuple[ModuleOp, dict[str, str]]:
    """A program of about ``n_ops`` ltorch-level ops (whole blocks)."""
    per_block = _ops_per_block()
    n_blocks = max(1, round(n_ops / per_block))
    wt = weight_types()
    x_t = tensor_type((B, S, D), F32)
    arg_types = [x_t] + wt * n_blocks
    names = ["x"] + [f"l{i}_{n}" for i in range(n_blocks)
                     for n in ("n1", "wq", "wk", "wv", "wo", "n2", "wg", "wu", "wd")]
    p = Program("llama", arg_types, names)
    b = BlockBuilder(p)
    x = p.args[0]
    for i in range(n_blocks):
        x = b.block(x, list(p.args[1 + 9 * i: 10 + 9 * i]))
    return p.finish([x]), b.used


_PER_BLOCK: list[int] = []


def _ops_per_block() -> int:
    if not _PER_BLOCK:
        p = Program("one", [tensor_type((B, S, D), F32), *weight_types()])
        out = BlockBuilder(p).block(p.args[0], list(p.args[1:]))
        _PER_BLOCK.append(count_ops(p.finish([out])) - 1)  # not func.return
    return _PER_BLOCK[0]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def run(n_ops: int, ctx: Context) -> list[tuple[str, int, float]]:
    """Runs every step once; returns (step, ops read, seconds) rows."""
    rows: list[tuple[str, int, float]] = []
    dt, (module, _) = timed(lambda: build(n_ops))
    n_l = count_ops(module)
    rows.append(("build", n_l, dt))
    rows.append(("verify", n_l, timed(module.verify)[0]))
    rows.append(("decompose", n_l, timed(lambda: DecomposeLtorchPass().apply(ctx, module))[0]))
    for p in (CanonicalizePass(), CSEPass(), DCEPass()):
        n = count_ops(module)
        rows.append((p.name, n, timed(partial(p.apply, ctx, module))[0]))
    n_p = count_ops(module)
    rows.append(("verify-prims", n_p, timed(module.verify)[0]))
    rows.append(("snapshot", n_p, timed(lambda: snapshot(module))[0]))
    rows.append(("print", n_p, timed(lambda: str(module))[0]))
    try:
        from thunder_ir.lowering.python_printer import print_python
    except ImportError:
        pass
    else:
        rows.append(("print-python", n_p, timed(lambda: print_python(module))[0]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 50_000])
    ap.add_argument("--gc-off", action="store_true", help="disable the cyclic GC while timing")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each size this many times and keep each step's best time "
                         "(steadier figures on a busy machine)")
    args = ap.parse_args()
    ctx = context()
    build(200)  # warm caches (shape rules, op classes) so the first size is not penalized
    if args.gc_off:
        gc.disable()
    _, used = build(10)
    print(f"python {platform.python_version()}, xdsl {xdsl.__version__}, "
          f"torch {torch.__version__}, {platform.machine()}, gc {'off' if args.gc_off else 'on'}")
    print("ops built as ltorch: " + ", ".join(sorted(k for k, v in used.items()
                                                       if v == "ltorch")))
    fallback = sorted(k for k, v in used.items() if v == "prims")
    print("ops built from prims (no ltorch op or rule): " + (", ".join(fallback) or "none"))
    print(f"ltorch ops per block: {_ops_per_block()}")
    table: dict[int, list[tuple[str, int, float]]] = {}
    for n in args.sizes:
        for _ in range(args.repeat):
            gc.collect()
            rows = run(n, ctx)
            best = table.get(n)
            table[n] = rows if best is None else [
                (a[0], a[1], min(a[2], b[2])) for a, b in zip(best, rows, strict=True)]
    steps = [r[0] for r in table[args.sizes[0]]]
    head = f"{'step':<14}" + "".join(f"{f'{n} ops':>26}" for n in args.sizes)
    print(head)
    for i, step in enumerate(steps):
        cells = []
        for n in args.sizes:
            _, ops, sec = table[n][i]
            cells.append(f"{sec * 1e6 / ops:8.1f} µs/op {ops:>7} ops")
        print(f"{step:<14}" + "".join(f"{c:>26}" for c in cells))
    for n in args.sizes:
        total = sum(sec for _, _, sec in table[n])
        print(f"total {n:>6} ops: {total:.2f} s")


if __name__ == "__main__":
    main()
