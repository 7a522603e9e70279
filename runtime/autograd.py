"""The bridge into torch.autograd: thunder_ir's forward and backward as one autograd node.

`ThunderFunction` runs the augmented forward (outputs + residuals) and saves the tensor
residuals with ``save_for_backward``, so autograd frees them once the backward has run and
keeps them under ``retain_graph=True``. A residual that is the autograd graph of an opaque
torch call (`thunder_ir.runtime.autograd_fallback.GradHandle`) is saved the same way,
through its tensors. Its backward runs the generated backward program, handing it the
residuals in one list that the program empties, and lets autograd release its own
references first (``maybe_clear_saved_tensors``, which keeps them under
``retain_graph=True``): each residual is freed right after its last use in ``@backward``.
A program that saves no residual reads nothing back, so a second backward through its
node runs (``out.backward()`` then a backward through a written argument), as through
eager's nodes that saved nothing.
Residuals that saved-tensor hooks packed (activation offloading) are unpacked one by one
instead, as the lazy form of ``@backward`` first reads each (`_Unpacking`), so that they
do not all come back at the backward's start.
Outputs show ``grad_fn=<ThunderFunctionBackward>``. Side outputs (non-differentiable
ones the call only copies into the caller's tensors: a batch norm's running statistics,
`with_side_outputs`) do not pass through the node: the forward hands them to the runner
through a list, so autograd neither marks nor wraps them (24 of ResNet's 26 outputs).

Gradients are ``None`` where eager's are: autograd hands the backward ``None`` for outputs
that did not reach the loss (grads are not materialized), and an input whose dependent
outputs all got ``None`` gets ``None``; the program sees zeros for the others' missing
cotangents.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from thunder_ir.runtime.autograd_fallback import GradHandle
from thunder_ir.runtime.origins import Captured, StateEntry


@dataclass
class TrainingProgram:
    """What the bridge needs from a compiled training program."""

    forward: Callable[..., Any]
    backward: Callable[..., Any]
    """Takes one list (residuals, then cotangents) and empties it."""
    n_inputs: int
    n_outputs: int
    n_residuals: int
    grad_inputs: list[int]
    ct_outputs: list[int]
    nondiff_outputs: list[int]
    backward_n_outputs: int
    reaches: list[tuple[int, ...]] = field(default_factory=list)
    ct_meta: list[tuple[tuple[int, ...] | None, torch.dtype, str]] = field(
        default_factory=list)
    """Per differentiated output, what its zero cotangent is made as (shape None: a
    symbolic one, read from the output each call: ``symbolic_outputs``)."""
    symbolic_outputs: bool = False
    tensor_residuals: bool = False
    """Every residual is typed a tensor (no opaque call's graph, no number): they are
    saved as they come, without sorting them per call."""
    lazy_backward: Callable[[], Callable[..., Any]] | None = None
    """Makes ``backward`` in the form that reads each argument right before its first
    use (`print_python`'s ``lazy``): for residuals packed by saved-tensor hooks."""
    kept_outputs: tuple[int, ...] | None = None
    """Set on the form of the program `make_runner` applies with side outputs
    (`with_side_outputs`): the outputs autograd sees, by their index among all
    ``n_full_outputs`` (``n_outputs``, ``ct_outputs`` and ``nondiff_outputs`` then count
    those alone)."""
    n_full_outputs: int = 0
    _lazy: Callable[..., Any] | None = None

    def unpacking_backward(self) -> Callable[..., Any] | None:
        """``lazy_backward()``, made once; None without one."""
        if self._lazy is None and self.lazy_backward is not None:
            self._lazy = self.lazy_backward()
        return self._lazy


class _Unpacking(list):  # type: ignore[type-arg]
    """``@backward``'s argument list when saved-tensor hooks packed the residuals: the
    raw saved tensors, then the cotangents. Reading an item takes it out of the list and
    unpacks a residual there (the hook's ``unpack``), so the lazy ``@backward`` unpacks
    each residual right before its first use, as eager's nodes unpack theirs."""

    __slots__ = ()

    def __getitem__(self, i: Any) -> Any:
        v = list.__getitem__(self, i)
        list.__setitem__(self, i, None)
        return v.unpack() if type(v) is _SavedTensor else v


_SavedTensor = torch._C._autograd.SavedTensor
_hooks = torch._C._autograd._top_saved_tensors_default_hooks


def _as_tuple(x: Any, n: int) -> tuple[Any, ...]:
    return (x,) if n == 1 else tuple(x)


class ThunderFunction(torch.autograd.Function):
    """One autograd node for a whole thunder_ir program."""

    @staticmethod
    def forward(ctx: Any, prog: TrainingProgram, side: list[Any] | None,  # type: ignore[override]
                *inputs: Any) -> Any:
        kept = prog.kept_outputs
        if kept is None:
            res = _as_tuple(prog.forward(*inputs), prog.n_outputs + prog.n_residuals)
            outs, residuals = res[:prog.n_outputs], res[prog.n_outputs:]
        else:  # the side outputs go to the caller through ``side``, not autograd
            res = tuple(prog.forward(*inputs))
            assert side is not None
            side.append(res)
            outs, residuals = tuple(map(res.__getitem__, kept)), res[prog.n_full_outputs:]
        ctx.prog = prog
        if prog.symbolic_outputs:  # the shapes of zero cotangents, this call's
            ctx.ct_shapes = [outs[i].shape for i in prog.ct_outputs]
        ctx.set_materialize_grads(False)
        if prog.tensor_residuals:
            ctx.layout = None
            ctx.hooked = prog.lazy_backward is not None and _hooks(False) is not None
            if ctx.hooked:  # an output saved as itself could not be unpacked alone
                ids = {id(o) for o in outs}
                residuals = tuple(r.detach() if id(r) in ids else r for r in residuals)
            ctx.save_for_backward(*residuals)
        else:
            _save_mixed(ctx, residuals)
        if prog.nondiff_outputs:
            outs = _mark_nondiff(ctx, prog, outs)
        return outs if len(outs) != 1 else outs[0]

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
        if torch.is_grad_enabled():
            raise RuntimeError(
                "thunder_ir does not support double backward yet (create_graph=True or "
                "differentiating a gradient): its backward is a compiled program without "
                "its own backward. Compute higher-order gradients without thunder_ir.jit.")
        prog: TrainingProgram = ctx.prog
        result: list[Any] = [None] * (prog.n_inputs + 2)  # (prog, side, *inputs)
        present = [grads[i] is not None for i in prog.ct_outputs]
        if not any(present):
            return tuple(result)
        # The residuals, unpacked (saved-tensor hooks' unpack, version checks), then let
        # go by the node unless the graph is retained: the generated backward empties the
        # list, so each residual is freed after its last use, as eager's nodes free theirs.
        hooked = ctx.layout is None and getattr(ctx, "hooked", False)
        args: list[Any]
        if not prog.n_residuals:  # nothing saved: another backward through the node runs,
            args, hooked = [], False  # as eager's nodes that saved nothing do
        elif hooked:  # packed by saved-tensor hooks: each unpacked when first read
            args = _Unpacking(ctx._raw_saved_tensors)
        else:
            try:
                args = list(ctx.saved_tensors) if ctx.layout is None else _unpack_mixed(ctx)
            except RuntimeError as e:
                raise _modified_since(e) from None
        clear = getattr(ctx, "maybe_clear_saved_tensors", None)
        if clear is not None and not hooked:
            clear()
        n = len(args)
        for i, p in zip(prog.ct_outputs, present):
            g = grads[i]
            if p:
                args.append(g.contiguous())
            else:  # the program wants a cotangent for every output it differentiates
                shape, dtype, device = prog.ct_meta[len(args) - n]
                if shape is None:
                    shape = ctx.ct_shapes[len(args) - n]
                args.append(torch.zeros(shape, dtype=dtype, device=device))
        del grads
        if hooked:
            out = prog.unpacking_backward()(args)  # type: ignore[misc]
            if clear is not None:
                clear()
        else:
            out = prog.backward(args)
        grads_in = _as_tuple(out, prog.backward_n_outputs)
        every = all(present)
        for pos, g, reach in zip(prog.grad_inputs, grads_in, prog.reaches):
            if reach and (every or any(present[j] for j in reach)):
                result[pos + 2] = g
        return tuple(result)


class ThunderFunctorchFunction(torch.autograd.Function):
    """`ThunderFunction` in the form torch.func's transforms (``grad``, ``vjp``,
    ``jacrev``, ``vmap``) require of a ``Function``: ``forward`` without ``ctx`` (it
    returns the outputs *and* the residuals), ``setup_context`` saving the residuals, and a
    vmap rule generated by running forward and backward on batched tensors. Used only
    while a functorch transform is active (the plain one is cheaper on a cached call)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(prog: TrainingProgram, *inputs: Any) -> Any:  # type: ignore[override]
        if not prog.tensor_residuals:
            raise RuntimeError(
                "thunder_ir: this training program saves an opaque torch call's autograd "
                "graph for its backward, which torch.func transforms (grad, vmap, jacrev) "
                "cannot carry through a custom Function. Call the jitted function outside "
                "the transform, or the eager function inside it.")
        res = _as_tuple(prog.forward(*inputs), prog.n_outputs + prog.n_residuals)
        given = {id(x) for x in inputs}
        # (a residual that is an input as it is must be saved as a view of it here)
        return tuple(r.view_as(r) if i >= prog.n_outputs and id(r) in given else r
                     for i, r in enumerate(res))

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        prog: TrainingProgram = inputs[0]
        ctx.prog = prog
        ctx.layout = None
        ctx.set_materialize_grads(False)
        residuals = output[prog.n_outputs:]
        ctx.save_for_backward(*residuals)
        ctx.mark_non_differentiable(*residuals, *(output[i] for i in prog.nondiff_outputs))

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
        grads = grads[:ctx.prog.n_outputs]
        with torch.no_grad():
            result = ThunderFunction.backward(ctx, *grads)
        return (result[0], *result[2:])  # (this forward takes no ``side``)


def _differentiating_levels() -> int:
    """How many torch.func transforms that differentiate (grad, vjp, jvp) are active."""
    from torch._C._functorch import TransformType
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

    return sum(i.key() in (TransformType.Grad, TransformType.Jvp)
               for i in retrieve_all_functorch_interpreters())


def _functorch_apply(prog: TrainingProgram, inputs: tuple[Any, ...]) -> Any:
    if _differentiating_levels() > 1:  # grad(grad(f)): the inner backward is differentiated
        raise RuntimeError(
            "thunder_ir does not support higher-order gradients yet (torch.func transforms "
            "that differentiate a gradient, such as grad(grad(f))): its backward is a "
            "compiled program without its own backward. Compute them without "
            "thunder_ir.jit.")
    outs = ThunderFunctorchFunction.apply(prog, *inputs)[:prog.n_outputs]
    return outs[0] if prog.n_outputs == 1 else outs


def _modified_since(e: RuntimeError) -> RuntimeError:
    """Autograd's version-check error, told in terms of the program: its backward is one
    node for the whole call, holding every residual of the call, where eager keeps one
    node per op and may not need the tensor written since (a state that carries an earlier
    call's graph, ``self.h = h`` not detached, reached with ``retain_graph=True`` after an
    optimizer step: eager's backward goes through the earlier call's recurrence alone)."""
    if "modified by an inplace operation" not in str(e):
        return e
    return RuntimeError(
        f"{e}\nthunder_ir: this backward runs a compiled program's backward, one autograd "
        "node for the whole call it was saved by, which needs every tensor that call saved "
        "(parameters included); one was written in place since. Where eager's "
        "per-op graph does not need it (backward through an earlier call's graph, reached "
        "through a tensor that call returned or left in module state, `self.h = h` not "
        "detached, after an optimizer step), detach the state between calls "
        "(`self.h = h.detach()`) or step the optimizer after the last backward that "
        "reaches that call.")


def _save_mixed(ctx: Any, residuals: Sequence[Any]) -> None:
    """Saves tensors, opaque calls' graphs (through their tensors) and other values."""
    saved: list[torch.Tensor] = []
    layout: list[tuple[int, Any, int]] = []  # (residual index, handle or None, count)
    others = []
    for i, r in enumerate(residuals):
        if isinstance(r, torch.Tensor):
            saved.append(r)
            layout.append((i, None, 1))
        elif isinstance(r, GradHandle):
            ts = r.tensors()
            saved.extend(ts)
            layout.append((i, r, len(ts)))
        else:
            others.append((i, r))
    ctx.save_for_backward(*saved)
    ctx.layout = layout
    ctx.others = others


def _unpack_mixed(ctx: Any) -> list[Any]:
    """The residuals `_save_mixed` saved, in their order."""
    saved = ctx.saved_tensors
    residuals: list[Any] = [None] * (len(ctx.layout) + len(ctx.others))
    k = 0
    for i, handle, n in ctx.layout:
        residuals[i] = saved[k] if handle is None else handle.from_tensors(saved[k:k + n])
        k += n
    for i, v in ctx.others:
        residuals[i] = v
    return residuals


def _mark_nondiff(ctx: Any, prog: TrainingProgram, outs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Marks the outputs that carry no gradient non-differentiable (returns the outputs,
    some replaced by aliases of their own)."""
    diff = {id(outs[i]) for i in prog.ct_outputs}
    if any(id(outs[i]) in diff or outs[i]._is_view() for i in prog.nondiff_outputs):
        # A tensor that is also a differentiable output (x.sin() and
        # x.sin().detach(), merged), or a view of an input (x.detach()[0]): autograd
        # would let it require grad; an alias of its own does not.
        nd = set(prog.nondiff_outputs)
        outs = tuple(o.detach() if i in nd and (id(o) in diff or o._is_view()) else o
                     for i, o in enumerate(outs))
    ctx.mark_non_differentiable(*(outs[i] for i in prog.nondiff_outputs))
    return outs


def with_side_outputs(prog: TrainingProgram, side: Sequence[int]) -> TrainingProgram:
    """``prog`` in the form whose ``side`` outputs (non-differentiable ones the caller only
    copies into its tensors: a batch norm's running statistics) leave the forward by a
    list the runner passes, not through the autograd node: autograd then neither marks
    them non-differentiable nor wraps them (ResNet: 24 of its 26 outputs a call)."""
    drop = set(side)
    kept = tuple(i for i in range(prog.n_outputs) if i not in drop)
    where = {i: k for k, i in enumerate(kept)}
    return dataclasses.replace(
        prog, n_outputs=len(kept), kept_outputs=kept, n_full_outputs=prog.n_outputs,
        ct_outputs=[where[i] for i in prog.ct_outputs],
        nondiff_outputs=[where[i] for i in prog.nondiff_outputs if i not in drop])


def per_call_inputs(origins: Sequence[Any], state: Mapping[str, Any]) -> tuple[int, ...]:
    """The program inputs that may be a different object on each call (an argument, a
    tensor read from the module on each call), or that are bound but are functorch
    wrappers (which may have died since): those a call unwraps if dead, as
    ``Function.apply`` does. A bound parameter, buffer or captured tensor that is a plain
    tensor stays that very object, never a wrapper (ResNet: 2 of its 53 inputs)."""
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    out = []
    for i, kind in enumerate(origins):
        bound = (state.get(kind.name) if type(kind) is StateEntry
                 else kind.tensor if type(kind) is Captured else None)
        if not isinstance(bound, torch.Tensor) or wrapped(bound):
            out.append(i)
    return tuple(out)


def _unwrap_some(inputs: tuple[Any, ...], which: tuple[int, ...]) -> tuple[Any, ...]:
    """``inputs`` with the dead functorch wrappers among those at ``which`` unwrapped."""
    out: list[Any] | None = None
    for i in which:
        x = inputs[i]
        if isinstance(x, torch.Tensor):
            y = _unwrap_if_dead(x)
            if y is not x:
                if out is None:
                    out = list(inputs)
                out[i] = y
    return inputs if out is None else tuple(out)


_unwrap_if_dead = torch._C._functorch.unwrap_if_dead


def _direct_apply() -> Callable[..., Any] | None:
    """``ThunderFunction``'s C++ ``apply`` without ``Function.apply``'s Python steps (a
    quarter of a small program's cached call), or None where this torch lacks one of
    them. Its result is called only while no functorch transform is active, on inputs
    with functorch's dead wrappers unwrapped (those at ``which``, where given: the
    others are plain bound tensors, `per_call_inputs`): what ``Function.apply`` does
    then; under a transform it applies ``full``, the program with all its outputs."""
    try:
        c_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, ThunderFunction)
        from torch._functorch.utils import unwrap_dead_wrappers
        active = torch._C._are_functorch_transforms_active
    except (AttributeError, ImportError, KeyError):  # pragma: no cover - torch build
        return None
    def run(prog: TrainingProgram, full: TrainingProgram, side: list[Any] | None,
            inputs: tuple[Any, ...], which: tuple[int, ...] | None = None) -> Any:
        if active():
            return _functorch_apply(full, inputs)
        if which is None:
            return c_apply(prog, side, *unwrap_dead_wrappers(inputs))
        return c_apply(prog, side, *_unwrap_some(inputs, which))

    return run


_APPLY = _direct_apply()


def make_runner(prog: TrainingProgram, enable_grad: bool = False,
                side_outputs: Sequence[int] = (),
                per_call: tuple[int, ...] | None = None) -> Callable[..., Any]:
    """A callable with the forward program's calling convention that records autograd.

    ``enable_grad``: record even when called with grad mode off (the traced code turned it
    on itself, with ``torch.enable_grad()``). ``side_outputs``: non-differentiable outputs
    the caller only copies from (`with_side_outputs`), returned in their places but
    without passing through the autograd node. ``per_call``: the inputs that may be dead
    functorch wrappers (`per_call_inputs`; None: any)."""
    direct = _APPLY
    if direct is None:
        fn_apply = ThunderFunction.apply

        def run(*inputs: Any) -> Any:
            return fn_apply(prog, None, *inputs)
    elif side_outputs:
        kept_prog = with_side_outputs(prog, side_outputs)
        kept = kept_prog.kept_outputs
        assert kept is not None
        n_full = prog.n_outputs

        def run(*inputs: Any) -> Any:
            side: list[Any] = []
            outs = direct(kept_prog, prog, side, inputs, per_call)
            if not side:  # (under a functorch transform: all outputs, from autograd)
                return outs
            full = list(side[0][:n_full])
            if len(kept) == 1:
                full[kept[0]] = outs
            else:
                for i, o in zip(kept, outs):
                    full[i] = o
            return tuple(full)
    else:
        def run(*inputs: Any) -> Any:
            return direct(prog, prog, None, inputs, per_call)

    if not enable_grad:
        return run

    def run_with_grad(*inputs: Any) -> Any:
        with torch.enable_grad():
            return run(*inputs)

    return run_with_grad


__all__ = ["ThunderFunction", "ThunderFunctorchFunction", "TrainingProgram", "make_runner",
           "Sequence", "per_call_inputs", "with_side_outputs"]
