"""``thunder_ir.jit`` and the introspection calls: the public facade.

``jit(module)`` returns a `ThunderModule` (an ``nn.Module`` sharing the original's
parameters and buffers); ``jit(fn)`` returns a function, a `CompiledCallable`. A call goes
through the stages (`thunder_ir.stages`): the keyer computes its key with the generated
prologue, the program cache holds the compiled programs, the compiler traces, runs the
pass pipeline (recording a `Trace` after each pass) and generates Python on a miss, and
the dispatcher runs the program and writes back; policies (tier-up, dynamic sizes,
data parallelism, autocast, a backend's fast path) are objects the stages consult.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from thunder_ir.frontend import ThunderTraceError
from thunder_ir.lowering.executors import compile_context
from thunder_ir.runtime.cache import Entry
from thunder_ir.runtime.dynamic import CACHE_MODES
from thunder_ir.stages.compiler import Compiler
from thunder_ir.stages.dispatch import Dispatcher
from thunder_ir.stages.keyer import Keyer
from thunder_ir.stages.policies import DynamicSizes, Policies
from thunder_ir.stages.programs import ProgramCache
from thunder_ir.trace import Trace
from thunder_ir.transforms import STAGES, UserTransform, transform, user_transforms


class CompiledCallable(Dispatcher):
    """A jitted function or module's compiled side: the stages (`thunder_ir.stages`) a call
    goes through, and the options they were made with.

    Attributes:
        keyer: prologues and guards (`thunder_ir.stages.keyer.Keyer`).
        programs: compiled programs (`thunder_ir.stages.programs.ProgramCache`).
        compiler: how a call compiles (`thunder_ir.stages.compiler.Compiler`), with the
            callable's own `CompileContext` (``compiler.ctx``).
        policies: what the stages consult (`thunder_ir.stages.policies.Policies`).
        cache: the program cache's entries, counts and last entry (``programs.cache``).
        symbolic_failures: why symbolic compiles fell back to static ones.
    """

    def __init__(self, fn: Callable[..., Any] | None, module: torch.nn.Module | None,
                 executors: Sequence[Any] | None, transforms: Sequence[Any] | None = None,
                 *, remat: Any = None, cache: str = "auto") -> None:
        from thunder_ir.passes.remat import AUTO

        self.fn, self.module = fn, module
        self._options = (executors, transforms, AUTO if remat is None else remat, cache)
        self._reset()

    def _reset(self) -> None:
        """No programs, no guards (a new jitted callable, or a copy of one)."""
        executors, transforms, remat, cache = self._options
        lock = threading.RLock()
        old = self.__dict__.get("policies")
        policies = Policies(DynamicSizes(mode=cache),
                            tier_up=old.tier_up if old is not None else None)
        keyer = Keyer(self.fn, self.module, lock)
        programs = ProgramCache()
        compiler = Compiler(self.fn, self.module, compile_context(executors),
                            user_transforms(transforms), remat, keyer, policies,
                            programs.cache)
        if "compiler" in self.__dict__:
            compiler.method = self.compiler.method
        self._stages(keyer, programs, compiler, policies, lock)
        self.symbolic_failures = policies.dynamic.failures

    @property
    def tier_up(self) -> Any:
        """The tier-up policy (`thunder_ir.lowering.tier_up.TierUp`), or None."""
        return self.policies.tier_up

    @property
    def executors(self) -> list[Any]:
        """The executors this callable compiles with, in priority order."""
        return list(self.compiler.ctx.executors)

    # ---- copies (copy.deepcopy, pickle, torch.save): the compiled programs stay behind

    def __getstate__(self) -> dict[str, Any]:
        from thunder_ir.lowering.executors import executor_ref

        executors, transforms, remat, cache = self._options
        wrapper = {k: v for k, v in self.__dict__.items()
                   if k in ("__name__", "__qualname__", "__doc__", "__module__", "__wrapped__")}
        return {"fn": self.fn, "module": self.module, "method": self.compiler.method,
                "transforms": transforms, "cache": cache,
                "executors": None if executors is None else [executor_ref(e) for e in executors],
                "remat_policy": remat, "wrapper": wrapper,
                "tier_up": self.policies.tier_up is not None,
                "tier_devices": None if self.policies.tier_up is None
                else sorted(self.policies.tier_up.devices)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["fn"], state["module"], state["executors"],  # type: ignore[misc]
                      state["transforms"], remat=state["remat_policy"],
                      cache=state.get("cache", "auto"))
        if state.get("tier_up"):
            from thunder_ir.lowering.tier_up import TierUp

            self.policies.tier_up = TierUp(frozenset(state.get("tier_devices") or ("cpu",)))
        self.compiler.method = state.get("method")
        self.__dict__.update(state["wrapper"])


_OWN = frozenset({"_model", "_compiled", "__signature__", "training", "_forward_jit"})


class ThunderModule(torch.nn.Module):
    """A jitted module: same forward signature, shares the original's parameters.

    Its ``_parameters`` and ``_buffers`` are the model's own dicts, so what reaches the
    model's tensors by name reaches them through it too (``functional_call(jm, params,
    ...)`` swaps them in the model's dicts, as on the model); its ``training`` is the
    model's."""

    def __init__(self, model: torch.nn.Module, compiled: CompiledCallable) -> None:
        super().__init__()
        self._model = model
        self._compiled = compiled
        self.__signature__ = compiled.compiler.signature
        self.__dict__["_parameters"] = model._parameters
        self.__dict__["_buffers"] = model._buffers

    @property  # type: ignore[override]
    def training(self) -> bool:
        model = self.__dict__.get("_modules", {}).get("_model")
        return True if model is None else model.training

    @training.setter
    def training(self, mode: bool) -> None:
        model = self.__dict__.get("_modules", {}).get("_model")
        if model is not None:  # (Module.__init__ sets it before the model is there)
            model.training = mode

    def _apply(self, fn: Any, recurse: bool = True) -> ThunderModule:
        self._model._apply(fn, recurse)  # (its tensors once: the dicts are the model's)
        return self

    # Assigning through the jitted module changes the model (``jm.fc = nn.Linear(...)``,
    # ``jm.scale = 5.0``), as it would the module itself; the guards see the change.
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN or "_model" not in self.__dict__.get("_modules", {}):
            super().__setattr__(name, value)
        else:
            setattr(self._modules["_model"], name, value)

    def __delattr__(self, name: str) -> None:
        if name in _OWN:
            super().__delattr__(name)
        else:
            delattr(self._modules["_model"], name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._compiled(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """The model's ``generate`` (Hugging Face), each step's forward compiled: while it
        runs, the model's ``forward`` is ``thunder_ir.jit(model.forward)`` (with this
        module's options), as if the user had written that; afterwards it is the model's
        own again."""
        model: Any = self._model
        if not hasattr(type(model), "generate"):
            raise AttributeError(f"{type(model).__name__} has no generate()")
        fwd = self.__dict__.get("_forward_jit")
        if fwd is None:
            executors, transforms, remat, cache = self._compiled._options
            fwd = build(model.forward, type(self._compiled), executors=executors,
                        transforms=transforms, remat=remat, cache=cache)
            own = self._compiled.tier_up
            if own is not None:  # the decode steps tier up as the module's calls do
                from thunder_ir.lowering.tier_up import TierUp

                _compiled_of(fwd).policies.tier_up = TierUp(own.devices)
            self.__dict__["_forward_jit"] = fwd
        had, old = "forward" in model.__dict__, model.__dict__.get("forward")
        model.forward = fwd
        try:
            return model.generate(*args, **kwargs)
        finally:
            if had:
                model.forward = old
            else:
                del model.forward

    def no_sync(self) -> Any:
        """``with jitted.no_sync():`` backwards accumulate gradients without communication
        (a data-parallel module, `thunder_ir.distributed.no_sync`)."""
        from thunder_ir.distributed import no_sync

        return no_sync(self._model)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_model"], name)

    # The original's state passes through, with its own names.
    def state_dict(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._model.state_dict(*args, **kwargs)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._model.load_state_dict(*args, **kwargs)

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        return self._model.named_parameters(*args, **kwargs)

    def named_buffers(self, *args: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        return self._model.named_buffers(*args, **kwargs)

    def named_modules(self, *args: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        return self._model.named_modules(*args, **kwargs)


def _on_the_model(name: str) -> Callable[..., Any]:
    def method(self: ThunderModule, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._model, name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``{name}`` of the original module (its state dict is the model's)."
    return method


# State-dict hooks registered on the jitted module act on the model's state dict, which is
# what ``state_dict``/``load_state_dict`` return and fill.
for _name in ("register_state_dict_pre_hook", "register_state_dict_post_hook",
              "_register_state_dict_hook", "register_load_state_dict_pre_hook",
              "register_load_state_dict_post_hook", "_register_load_state_dict_pre_hook"):
    if hasattr(torch.nn.Module, _name):
        setattr(ThunderModule, _name, _on_the_model(_name))


def jit(fn: Callable[..., Any] | torch.nn.Module, *, executors: Sequence[Any] | None = None,
        transforms: Sequence[Any] | None = None, remat: Any = "auto", cache: str = "auto",
        tiered: bool | str = "auto", **options: Any) -> Any:
    """Compiles a module or function with thunder_ir.

    Args:
        fn: an ``nn.Module`` (returns a `ThunderModule`) or a function.
        executors: executor objects or names, in priority order (``"torch"`` is always last).
        transforms: user passes: ``ModulePass`` instances or lists of ``RewritePattern``
            (run on the traced ltorch program), or `transform` (pass, stage=...) for the
            ``"prims"``, ``"fusion"`` or ``"backward"`` stage. Each shows in ``last_traces``
            under its own name.
        remat: the rematerialization policy for training: ``"auto"`` (recompute cheap
            elementwise chains in the backward when that saves bytes and a fusion executor
            fuses the recomputation; views always), ``"min-cut"`` (recompute them even
            where each is an eager kernel of its own), ``"save-all"``, or a
            `thunder_ir.passes.remat.RematPolicy`.
        cache: ``"auto"`` (a size, ``int`` argument or ``int`` attribute of the module
            tree that changed between two compiles is symbolic from then on: one program
            serves every value its guards allow; `thunder_ir.runtime.symbolic_attrs`),
            ``"static"`` (a program per size but for `mark_dynamic`'s dimensions) or
            ``"symbolic values"`` (every size and
            ``int`` argument symbolic from the first compile; module attributes as under
            ``"auto"``). `mark_dynamic` marks
            single dimensions. See `thunder_ir.runtime.dynamic`.
        tiered: ``"auto"``: where the default executors fuse nothing (CPU), and for
            CUDA programs where a GPU is here, a program
            whose calls have taken a few seconds is lowered again with the Inductor
            executor, its kernels compile in the background, and the fused program
            replaces it at a call boundary once they are in (`thunder_ir.lowering
            .tier_up`). ``True``: fuse with the Inductor executor from the first call,
            its regions running unfused until their kernels are in (`thunder_ir.lowering
            .tiered`). ``False``: never. `compile_status` shows the compiles. Fusing needs
            what the Inductor executor needs (on CPU, a C++ compiler).

    Returns:
        A drop-in replacement that traces on the first call with new input metadata and
        then runs the cached program.
    """
    if tiered not in (True, False, "auto"):
        raise ValueError(f"tiered must be True, False or 'auto', got {tiered!r}")
    if tiered is True:
        from thunder_ir.lowering.inductor_executor import tiered_executors

        executors = tiered_executors(executors)
    out = build(fn, CompiledCallable, executors=executors, transforms=transforms, remat=remat,
                cache=cache, **options)
    compiled = _compiled_of(out)
    if tiered == "auto" and executors is None:
        from thunder_ir.lowering.tier_up import TierUp, tier_devices

        devices = tier_devices(compiled.executors, torch.cuda.is_available())
        if devices:
            compiled.policies.tier_up = TierUp(devices)
    return out


def build(fn: Callable[..., Any] | torch.nn.Module, cls: type[CompiledCallable], *,
          executors: Sequence[Any] | None = None, transforms: Sequence[Any] | None = None,
          remat: Any = "auto", cache: str = "auto", **options: Any) -> Any:
    """`jit` with the compiled callable of class ``cls`` (a `CompiledCallable`; the torch.compile
    backend's partitions use one that skips the prologue Dynamo makes redundant)."""
    if options:
        raise TypeError(f"jit() got unsupported options: {', '.join(options)}")
    if cache not in CACHE_MODES:
        raise ValueError(f"unknown cache mode {cache!r}; choose from "
                         f"{', '.join(map(repr, CACHE_MODES))}")
    from thunder_ir.passes.remat import POLICIES, RematPolicy

    if isinstance(remat, str):
        if remat not in POLICIES:
            raise ValueError(f"unknown remat policy {remat!r}; choose from "
                             f"{', '.join(POLICIES)} or pass a RematPolicy")
        remat = POLICIES[remat]
    elif not isinstance(remat, RematPolicy):
        raise TypeError(f"remat must be a policy name or a RematPolicy, got {remat!r}")
    if isinstance(fn, torch.nn.Module):
        return ThunderModule(fn, cls(None, fn, executors, transforms, remat=remat,
                                     cache=cache))
    if inspect.ismethod(fn) and isinstance(fn.__self__, torch.nn.Module):
        # ``model.forward = thunder_ir.jit(model.forward)`` (what `generate` calls): the
        # module's state is guarded and traced on a copy, as for ``jit(model)``; the
        # method runs on the copy (not ``model.forward``, which is now this callable).
        compiled = cls(None, fn.__self__, executors, transforms, remat=remat, cache=cache)
        compiled.compiler.method = fn.__func__
        compiled.compiler.signature = inspect.signature(fn)
        functools.update_wrapper(compiled, fn)  # type: ignore[arg-type]
        return compiled
    if not callable(fn):
        raise TypeError(f"jit() expects a function or an nn.Module, got {type(fn).__name__}")
    compiled = cls(fn, None, executors, transforms, remat=remat, cache=cache)
    functools.update_wrapper(compiled, fn)  # type: ignore[arg-type]
    return compiled


def _compiled_of(f: Any) -> CompiledCallable:
    c = getattr(f, "_compiled", None) if isinstance(f, ThunderModule) else f
    if not isinstance(c, CompiledCallable):
        raise TypeError(f"{f!r} is not a function or module returned by thunder_ir.jit")
    return c


def _last(f: Any) -> Entry:
    c = _compiled_of(f)
    if c.cache.last is None:
        raise RuntimeError("no traces yet: call the jitted function first")
    return c.cache.last


def last_traces(f: Any) -> list[Trace]:
    """Every trace of the last call, from acquisition to the execution trace."""
    return list(_last(f).traces)


def last_backward_traces(f: Any) -> list[Trace]:
    """The backward traces of the last call (empty when nothing required grad)."""
    return list(_last(f).backward_traces)


def last_prologue_traces(f: Any) -> list[str]:
    """The guard (cache-key) code of the last call, as Python source: the prologue that
    builds the key, then each guard on the Python state the programs read (module
    attributes, submodules, parameters, hooks, globals, closure cells), as checks."""
    c = _compiled_of(f)
    last = _last(f)
    src = last.prologue_source
    if last.shape_guard is not None:
        src += ("\n# A symbolic program: it runs for a call whose dynamic sizes pass\n"
                + last.shape_guard.source)
    if c.guards:
        src += "\n# The key's _tokens: one per guard below.\n"
        src += "\n\n".join(g.source() for g in c.guards) + "\n"
    return [src]


def _with_generate(f: Any) -> list[CompiledCallable]:
    """A jitted module's compiled callables: its own, and its ``generate``'s forward."""
    out = [_compiled_of(f)]
    if isinstance(f, ThunderModule):
        gen = f.__dict__.get("_forward_jit")
        if isinstance(gen, CompiledCallable):
            out.append(gen)
    return out


def cache_hits(f: Any) -> int:
    """How many calls ran a cached program (a jitted module's ``generate`` steps too)."""
    return sum(c.cache.stats.hits for c in _with_generate(f))


def cache_misses(f: Any) -> int:
    """How many calls compiled a new program (a jitted module's ``generate`` steps too)."""
    return sum(c.cache.stats.misses for c in _with_generate(f))


def compile_reasons(f: Any) -> list[str]:
    """Why each compile after the first compiled, newest last (a jitted module's
    ``generate`` steps' after its own): what differed from the closest program compiled
    before, in the user's terms (``argument 'x' dim 1: 64 -> 80 (now symbolic)``,
    ``self.cfg.scale changed 2.0 -> 3.0``, ``grad mode: enabled -> disabled``, ``autocast``,
    a speculated condition that came out otherwise). Each is also logged, as it happens, on
    the ``thunder_ir.recompiles`` logger (`thunder_ir.stages.reasons`)."""
    return [r for c in _with_generate(f) for r in c.programs.reasons.log]


def compile_status(f: Any, wait: float | None = 0.0) -> dict[str, Any]:
    """A jitted callable's background compiles (``jit(fn, tiered=...)``): kernels
    ``pending``, ``compiled`` and ``failed``, compile ``seconds``, ``ready`` (none
    pending), the compiled kernels kept ``unfused`` because their region ran faster
    without them, ``timings``: ``(kernel, fused_ms, unfused_ms)`` per region timed,
    ``cache_hits``: the kernels Inductor loaded from its FX graph cache, ``loaded``:
    the kernels loaded from thunder_ir's cache of compiled regions (an earlier process
    compiled them: no compile at all, `thunder_ir.lowering.region_cache`);
    under ``tiered="auto"``, ``swapped``: the hot programs whose fused version replaced
    them, and ``kept``: why others kept their unfused version; ``static``: why a call
    structure compiles a program per size instead of one symbolic program for every size
    (a symbolic compile that failed, a guard that fixes a size that varies, naming the
    op and the user's line, or a key part that changes with the sizes: the callable's
    ``symbolic_failures``). ``wait``: first wait up to this many seconds for the pending
    ones (None: until they are done)."""
    from thunder_ir.lowering.tier_up import status_of

    callables = _with_generate(f)
    out = status_of(callables, wait)
    out["static"] = [why for c in callables for why in c.symbolic_failures]
    return out


__all__ = ["STAGES", "ThunderModule", "ThunderTraceError", "UserTransform",
           "transform", "cache_hits", "cache_misses", "compile_reasons", "compile_status",
           "jit",
           "last_backward_traces", "last_prologue_traces", "last_traces"]
