"""Region compilation: each ``fusion.region`` compiled by the executor it names.

The ``fuse`` pass (`thunder_ir.passes.fuse`) decides the regions; code generation calls
`compile_kernels` for the callables it binds under the regions' kernel names. Kernels are
cached per executor by the region's structure (`region_key`), across programs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects.fusion import RegionOp
from thunder_ir.dialects.program import program_functions


def region_key(region: RegionOp) -> tuple[Any, ...]:
    """A structural key of a region: equal keys compute the same function.

    It covers the executor, the input types and each body op's name, properties, result
    types and which earlier values it reads; names, source locations and the kernel name
    do not count, so the repeated layers of a model share one key.
    """
    body = region.body.block
    num: dict[SSAValue, int] = {a: i for i, a in enumerate(body.args)}
    outer: dict[SSAValue, Any] = {}
    items: list[Any] = [region.executor.data, tuple(a.type for a in body.args)]
    for op in body.ops:
        reads = tuple(num[v] if v in num else _outer_key(v, outer) for v in op.operands)
        items.append(
            (
                op.name,
                tuple(sorted(op.properties.items())),
                reads,
                tuple(r.type for r in op.results),
            )
        )
        for r in op.results:
            num[r] = len(num)
    return tuple(items)


def _outer_key(v: SSAValue, memo: dict[SSAValue, Any]) -> Any:
    """The key of a value a region reads from outside without passing it in (CSE can
    replace a region's constant by an equal one outside): its defining ops' structure."""
    hit = memo.get(v)
    if hit is None:
        owner = v.owner
        if not isinstance(owner, Operation):
            raise ValueError("fusion.region reads a block argument from outside its body")
        hit = (
            "outer",
            owner.name,
            tuple(sorted(owner.properties.items())),
            tuple(_outer_key(o, memo) for o in owner.operands),
            tuple(r.type for r in owner.results),
            owner.results.index(v),
        )
        memo[v] = hit
    return hit


_KERNELS: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Callable[..., Any]]] = (
    weakref.WeakKeyDictionary()
)


def compile_kernels(module: ModuleOp | func.FuncOp, executors: Sequence[Any]
                    ) -> dict[str, Callable[..., Any]]:
    """Compiles every ``fusion.region`` of a program with the executor it names.

    Kernels are cached per executor by `region_key`, across programs: identical regions
    (the layers of a model, the same region in two compilations) compile once.

    Args:
        module: the program (every function of it), or one function.
        executors: the executors in use; a region naming another executor is left to the
            code generator's interpreter.

    Returns:
        Kernel name -> callable taking the region's inputs and returning its output (one)
        or a tuple of outputs (several), as `thunder_ir.lowering.codegen` calls them.
    """
    by_name = {e.name: e for e in executors if e.is_fusion}
    kernels: dict[str, Callable[..., Any]] = {}
    fns = [module] if isinstance(module, func.FuncOp) else program_functions(module)
    for op in (op for f in fns for op in f.body.block.ops):
        if not isinstance(op, RegionOp):
            continue
        ex = by_name.get(op.executor.data)
        if ex is None:
            continue
        cache = _KERNELS.get(ex)
        if cache is None:
            cache = _KERNELS[ex] = {}
        key = region_key(op)
        fn = cache.get(key)
        if fn is None:
            fn = cache[key] = ex.compile_region(op)
        kernels[op.kernel.data] = fn
    return kernels


__all__ = ["compile_kernels", "region_key"]
