"""``ThunderCompiler``: thunder_ir as a ``torch.compile`` backend.

Dynamo hands the backend one FX graph per region between graph breaks. Each graph is split
(`thunder_ir.dynamo.splitter`): what thunder_ir runs natively becomes a `ThunderModule`
(``thunder_ir.jit`` of the partition's ``GraphModule``, traced by running its generated
Python under thunder_ir's proxies); the rest is compiled by Inductor. The backend returns
the split module, whose forward calls the partitions in order. An Inductor partition is an
`InductorPartition`, which Inductor compiles on its first call.

Dynamo guards the graph's inputs (shapes, strides, dtypes, devices, requires_grad, grad
mode, the Python state it read), so a partition whose inputs are all tensors runs its
program after the first call without thunder_ir's own prologue: `_DynamoGuarded`, its fast-path
policy.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.fx import GraphModule
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.utils import _pytree as pytree

from thunder_ir.api import CompiledCallable, ThunderModule, build, jit
from thunder_ir.dynamo.splitter import SplitReason, partition
from thunder_ir.runtime.cache import unflatten_outputs
from thunder_ir.stages.policies import NOT_TAKEN


class _DynamoGuarded:
    """The fast path of a partition's program (`thunder_ir.stages.policies.FastPath`),
    once Dynamo guards it: the first call (and any call whose grad mode differs from it)
    goes through the usual keyed cache; then, while every argument is a tensor (a graph
    without symbolic sizes), a call is the program itself: Dynamo has checked what the key
    would."""

    def __init__(self) -> None:
        self.known: tuple[bool, Any] | None = None

    def call(self, dispatcher: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        known = self.known
        if known is None or kwargs or torch.is_grad_enabled() is not known[0]:
            return NOT_TAKEN
        entry = known[1]
        dispatcher.cache.last = entry
        outs = entry.fn(*entry.gather(args))
        env = dispatcher.write_back(entry, list(args), outs, args) if entry.after else None
        return unflatten_outputs(entry, outs, args, (), env)

    def saw(self, dispatcher: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not kwargs and all(type(a) is torch.Tensor or isinstance(a, torch.nn.Parameter)
                              for a in args):
            self.known = (torch.is_grad_enabled(), dispatcher.cache.last)


def _thunder_module(gm: GraphModule, options: dict[str, Any]) -> ThunderModule:
    """A partition's jitted module; the sizes Dynamo made symbolic in its inputs are
    symbolic in its programs from the first call (one program for every size Dynamo's
    graph serves, not one per size)."""
    tm: ThunderModule = build(gm, CompiledCallable, **options)
    tm._compiled.policies.dynamic.marks = dynamo_symbolic_inputs(gm)
    tm._compiled.fast_path = _DynamoGuarded()
    return tm


def dynamo_symbolic_inputs(gm: GraphModule) -> dict[int, tuple[int, ...]]:
    """Per placeholder of ``gm`` (by position), the dimensions Dynamo traced as symbols
    (its example value's ``SymInt`` sizes), or ``()`` for a ``SymInt`` placeholder."""
    out: dict[int, tuple[int, ...]] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        val = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(val, torch.SymInt) and not val.node.is_constant():
            out[i] = ()
        elif isinstance(val, torch.Tensor):
            dims = tuple(d for d, n in enumerate(val.shape)
                         if isinstance(n, torch.SymInt) and not n.node.is_constant())
            if dims:
                out[i] = dims
    return out


class InductorPartition(torch.nn.Module):
    """A partition thunder_ir does not run, compiled by Inductor itself
    (``torch._inductor.compile``: AOTAutograd and Inductor's code generation) on its
    first call with each input signature (shapes, strides, dtypes, devices,
    ``requires_grad``, the Python values, grad mode).

    Why not ``torch.compile(partition)``: the backend's split module runs inside the frame
    Dynamo compiled, where Dynamo does not compile again, so a ``torch.compile``d
    partition ran as a plain ``GraphModule``, eagerly.

    A call returns what the partition's graph returns (one tensor, or the tuple the split
    module indexes), for every signature: each compile gets a copy of the graph that
    returns its flat outputs as a tuple, and the call rebuilds the structure. (Inductor
    rewrites a graph that returns one value, in place, to return a list, and unwraps the
    list only for the callable of that compile: a second signature of the same graph, as
    a dynamic graph's next size, returned ``[tensor]``.)

    Attributes:
        graph_module: the partition (never changed by a compile).
        compiled: each input signature's compiled callable (flat outputs).
    """

    def __init__(self, graph_module: GraphModule, options: dict[str, Any]) -> None:
        super().__init__()
        self.graph_module = graph_module
        self.options = dict(options)
        self.compiled: dict[Any, Callable[..., Any]] = {}
        self._output_spec = pytree.tree_flatten(_output_node(graph_module).args[0])[1]

    def forward(self, *args: Any) -> Any:
        key = (torch.is_grad_enabled(), *(
            (a.shape, a.stride(), a.dtype, a.device, a.requires_grad)
            if isinstance(a, torch.Tensor) else a for a in args))
        fn = self.compiled.get(key)
        if fn is None:
            from torch._inductor import compile as inductor_compile

            fn = self.compiled[key] = inductor_compile(
                _flat_output_copy(self.graph_module), list(args), options=self.options or None)
        return pytree.tree_unflatten(list(fn(*args)), self._output_spec)


def _output_node(gm: GraphModule) -> torch.fx.Node:
    return next(n for n in reversed(gm.graph.nodes) if n.op == "output")


def _flat_output_copy(gm: GraphModule) -> GraphModule:
    """A copy of ``gm`` (its own graph, the same attributes) that returns its outputs'
    leaves as a flat tuple: what Inductor compiles without rewriting it."""
    graph = copy.deepcopy(gm.graph)
    out = next(n for n in reversed(graph.nodes) if n.op == "output")
    out.args = (tuple(pytree.tree_leaves(out.args[0])),)
    return GraphModule(gm, graph)


@dataclasses.dataclass
class SubgraphInfo:
    """What ``ThunderCompiler`` made of one FX graph that Dynamo handed it.

    Attributes:
        original_graph_module: the graph as Dynamo gave it.
        split_graph_module: the graph cut into ``thunder_i`` / ``inductor_i`` submodules,
            each replaced by its compiled form (this is what runs).
        thunder_compiled_fns: the `ThunderModule` of each ``thunder_i``, in order
            (``thunder_ir.last_traces`` works on each).
        submodule_to_compiled_functions: each partition's ``GraphModule`` -> what runs it.
        split_reasons: why each node outside thunder_ir's partitions is there.
    """

    original_graph_module: GraphModule
    split_graph_module: GraphModule
    thunder_compiled_fns: list[ThunderModule]
    submodule_to_compiled_functions: dict[GraphModule, Callable[..., Any]]
    split_reasons: list[SplitReason]


class ThunderCompiler:
    """A ``torch.compile`` backend that runs what it can with ``thunder_ir.jit``.

    ``torch.compile(model, backend=ThunderCompiler(**jit_options))``. Keyword arguments are
    ``thunder_ir.jit``'s options (``executors``, ``transforms``, ``remat``), applied to
    every thunder partition; ``torch_inductor_options`` is passed to Inductor (as
    ``torch.compile(..., options=...)``) for the partitions thunder_ir does not support.

    After a run, ``subgraph_infos`` holds a `SubgraphInfo` per graph Dynamo compiled.
    """

    def __init__(self, *, torch_inductor_options: dict[str, Any] | None = None,
                 **thunder_options: Any) -> None:
        jit(lambda: None, **thunder_options)  # invalid options fail here, not at run time
        self.thunder_options = thunder_options
        self.torch_inductor_options = dict(torch_inductor_options or {})
        self.subgraph_infos: list[SubgraphInfo] = []

    def __call__(self, gm: GraphModule, sample_args: Sequence[Any]) -> Callable[..., Any]:
        split_gm, kinds, reasons = partition(gm)
        original = {name: getattr(split_gm, name) for name in kinds}
        compiled: dict[GraphModule, Callable[..., Any]] = {}
        thunder_fns: list[ThunderModule] = []
        for name, on_thunder in kinds.items():
            sub = original[name]
            # A lazy GraphModule generates its code on first use, per class: do it now, on
            # the module itself, so that tracing's copy of it does not do it alone.
            _LazyGraphModule.force_recompile(sub)
            fn: torch.nn.Module
            if on_thunder:
                fn = _thunder_module(sub, self.thunder_options)
                thunder_fns.append(fn)  # type: ignore[arg-type]
            else:
                fn = InductorPartition(sub, self.torch_inductor_options)
            compiled[sub] = fn
            setattr(split_gm, name, fn)
        self.subgraph_infos.append(SubgraphInfo(
            gm, split_gm, thunder_fns, compiled, list(reasons.values())))
        return split_gm


class ThunderFXCompiledObject:
    """What `thunderfx` returns: the ``torch.compile``d callable and its backend.

    Attributes:
        backend: the `ThunderCompiler` (``subgraph_infos`` after a call).
        compiled: the ``torch.compile`` result that a call runs.
    """

    def __init__(self, fn: Callable[..., Any], backend: ThunderCompiler,
                 torch_compile_options: dict[str, Any]) -> None:
        self._fn = fn
        self.backend = backend
        self.compiled = torch.compile(fn, backend=backend, **torch_compile_options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.compiled(*args, **kwargs)

    @property
    def thunder_fns(self) -> list[ThunderModule]:
        """Every thunder partition of every graph, in the order Dynamo compiled them."""
        return [f for info in self.backend.subgraph_infos for f in info.thunder_compiled_fns]

    @property
    def last_traces(self) -> list[Any]:
        """The forward execution trace that ran last in each thunder partition."""
        from thunder_ir.api import last_traces

        return [last_traces(f)[-1] for f in self._ran()]

    @property
    def last_backward_traces(self) -> list[Any]:
        """The backward execution trace of each thunder partition that has one."""
        from thunder_ir.api import last_backward_traces

        return [t[-1] for t in (last_backward_traces(f) for f in self._ran()) if t]

    def _ran(self) -> list[ThunderModule]:
        fns = [f for f in self.thunder_fns if f._compiled.cache.last is not None]
        if not fns:
            raise RuntimeError("no traces yet: call the compiled function first")
        return fns


def thunderfx(fn: Callable[..., Any], *, torch_inductor_options: dict[str, Any] | None = None,
              **options: Any) -> ThunderFXCompiledObject:
    """``torch.compile(fn, backend=ThunderCompiler(...))`` in one call.

    Args:
        fn: a function or ``nn.Module``.
        torch_inductor_options: Inductor's options for the partitions thunder_ir does not
            run.
        options: ``thunder_ir.jit`` options, plus ``torch.compile``'s own ``dynamic``,
            ``fullgraph`` and ``mode``-free arguments (``dynamic=``, ``fullgraph=``).

    Returns:
        A callable whose ``last_traces`` / ``last_backward_traces`` list the execution
        trace that ran last in each of its thunder partitions, and whose
        ``backend.subgraph_infos`` describe every graph.
    """
    compile_options: dict[str, Any] = {k: options.pop(k) for k in ("dynamic", "fullgraph")
                                       if k in options}
    backend = ThunderCompiler(torch_inductor_options=torch_inductor_options, **options)
    return ThunderFXCompiledObject(fn, backend, compile_options)


def thunder_backend(gm: GraphModule, example_inputs: Sequence[Any],
                    options: dict[str, Any] | None = None, **_: Any) -> Callable[..., Any]:
    """The ``torch.compile(backend="thunder_ir")`` entry point; ``options=`` are
    `ThunderCompiler`'s keyword arguments."""
    return ThunderCompiler(**(options or {}))(gm, example_inputs)


__all__ = ["InductorPartition", "SubgraphInfo", "ThunderCompiler", "ThunderFXCompiledObject",
           "thunder_backend", "thunderfx"]
