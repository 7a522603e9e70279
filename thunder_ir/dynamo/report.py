"""``report``: standalone reproducer and benchmark scripts, one per FX graph.

``report(fn, *args)`` runs ``fn`` once through ``torch.compile`` with a `ThunderCompiler`
and writes, for every graph Dynamo handed over, ``graph{i}.py``: the graph's code as a
module, its inputs (saved beside it as ``graph{i}_inputs.pt``, with their metadata in the
script so that it can also draw random ones), how the backend split it and why, a
comparison of thunder_ir's result (and gradients, when inputs require grad) against eager,
and a benchmark of the graph under eager, Inductor and thunder_ir. Each script runs on its
own: ``python graph0.py`` (``--no-benchmark`` to skip the timing).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.fx import GraphModule

from thunder_ir.dynamo.compiler import SubgraphInfo, ThunderCompiler

_TEMPLATE = '''\
"""thunder_ir.dynamo.report: graph {index} of {name}.

{split}
Run: python {script} [--no-benchmark]
"""

import argparse
import os
import time

import torch

import thunder_ir
from thunder_ir.dynamo import ThunderCompiler

{imports}


class Graph(torch.nn.Module):
{code}

# Per input: shape, stride, dtype, device, requires_grad (or a Python value).
INPUTS = {metadata}
ATTRIBUTES = {attributes}
HERE = os.path.dirname(os.path.abspath(__file__))


def make_model() -> torch.nn.Module:
    model = Graph()
    saved = os.path.join(HERE, "{stem}_attributes.pt")
    if ATTRIBUTES:
        for path, value in torch.load(saved, weights_only=False).items():
            owner = model
            *parts, last = path.split(".")
            for p in parts:
                if not hasattr(owner, p):
                    owner.add_module(p, torch.nn.Module())
                owner = getattr(owner, p)
            setattr(owner, last, value)
    return model


def make_inputs() -> list:
    saved = os.path.join(HERE, "{stem}_inputs.pt")
    if os.path.exists(saved):
        values = torch.load(saved, weights_only=False)
    else:  # random values with the recorded metadata
        values = []
        for m in INPUTS:
            if not isinstance(m, tuple):
                values.append(m)
                continue
            shape, stride, dtype, device, _ = m
            t = torch.empty_strided(shape, stride, dtype=dtype, device=device)
            values.append(t.uniform_() if dtype.is_floating_point else t.random_(0, 2))
    return [v.detach().clone().requires_grad_(m[4]) if isinstance(m, tuple) else v
            for v, m in zip(values, INPUTS)]


def run(fn, args):
    out = fn(*args)
    outs = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
    diff = [o for o in outs if o.requires_grad]
    grads = []
    if diff:
        torch.autograd.backward(diff, [torch.ones_like(o) for o in diff])
        grads = [a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    return outs, grads


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-benchmark", action="store_true")
    opts = parser.parse_args()
    model = make_model()
    expected = run(model, make_inputs())
    backend = ThunderCompiler()
    compiled = torch.compile(model, backend=backend)
    actual = run(compiled, make_inputs())
    torch.testing.assert_close(actual, expected)
    info = backend.subgraph_infos[0]
    print(f"graph {index}: thunder_ir matches eager (outputs and input gradients); "
          f"{{len(info.submodule_to_compiled_functions)}} partitions, "
          f"{{len(info.thunder_compiled_fns)}} on thunder_ir")
    for reason in info.split_reasons:
        print("  split:", reason.info)
    if opts.no_benchmark:
        return
    inductor = torch.compile(make_model(), backend="inductor")
    timings = {{}}
    for label, fn in (("eager", model), ("inductor", inductor), ("thunder_ir", compiled)):
        args = make_inputs()
        run(fn, args)  # compiles
        n, t0 = 0, time.perf_counter()
        while n < 5 or time.perf_counter() - t0 < 0.5:
            run(fn, make_inputs())
            n += 1
        timings[label] = (time.perf_counter() - t0) / n
    for label, t in timings.items():
        print(f"  {{label:>10}}: {{t * 1e3:8.3f}} ms per forward+backward "
              f"({{t / timings['eager']:.2f}}x eager)")


if __name__ == "__main__":
    main()
'''


def _metadata(values: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append((tuple(v.shape), tuple(v.stride()), v.dtype, str(v.device),
                        v.requires_grad))
        else:
            out.append(v)
    return out


def _source(gm: GraphModule) -> tuple[str, str]:
    """The graph's forward as a method, and the imports its code needs."""
    from torch.fx.graph_module import _format_import_block
    from torch.package import sys_importer

    code = gm.graph.python_code(root_module="self")
    imports = _format_import_block(code.globals, sys_importer)
    return textwrap.indent(code.src.strip("\n"), "    "), imports


def _split_text(info: SubgraphInfo) -> str:
    parts = ", ".join(str(n.target) for n in info.split_graph_module.graph.nodes
                      if n.op == "call_module")
    lines = [f"ThunderCompiler split it into {parts}."]
    lines += [f"- {r.reason_type.name}: {r.info}" for r in info.split_reasons]
    return "\n".join(lines)


def _attributes(gm: GraphModule) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            obj: Any = gm
            for part in str(node.target).split("."):
                obj = getattr(obj, part)
            out[str(node.target)] = obj
    return out


def report(fn: Callable[..., Any], *args: Any, folder: str | Path = "thunder_ir_report",
           options: dict[str, Any] | None = None, **kwargs: Any) -> list[Path]:
    """Runs ``fn(*args, **kwargs)`` through ``torch.compile`` with a `ThunderCompiler`
    (built with ``options``) and writes a reproducer and benchmark script per FX graph
    into ``folder``; returns their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    recorded: list[tuple[GraphModule, list[Any]]] = []
    backend = ThunderCompiler(**(options or {}))

    def recording_backend(gm: GraphModule, example_inputs: Sequence[Any]) -> Any:
        compiled = backend(gm, example_inputs)
        slot = len(recorded)
        recorded.append((gm, []))

        def run(*inputs: Any) -> Any:
            if not recorded[slot][1]:  # the first call's real inputs, for the script
                recorded[slot][1].extend(
                    v.detach().clone().requires_grad_(v.requires_grad)
                    if isinstance(v, torch.Tensor) else v for v in inputs)
            return compiled(*inputs)

        return run

    torch.compile(fn, backend=recording_backend)(*args, **kwargs)
    paths: list[Path] = []
    for i, ((gm, inputs), info) in enumerate(zip(recorded, backend.subgraph_infos)):
        stem = f"graph{i}"
        torch.save(inputs, folder / f"{stem}_inputs.pt")
        attrs = _attributes(gm)
        if attrs:
            torch.save(attrs, folder / f"{stem}_attributes.pt")
        code, imports = _source(gm)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        metadata = _metadata(inputs) if inputs else _metadata(
            [n.meta.get("example_value") for n in placeholders])
        name = getattr(fn, "__qualname__", type(fn).__name__)
        path = folder / f"{stem}.py"
        path.write_text(_TEMPLATE.format(
            index=i, name=name, split=_split_text(info), script=path.name, imports=imports,
            code=code, metadata=repr(metadata),
            attributes=sorted(attrs), stem=stem))
        paths.append(path)
    return paths


__all__ = ["report"]
