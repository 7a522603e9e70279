"""`OperatorExecutor`, and registering executors by name."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.fusion import claim
from thunder_ir.dialects.types import pretty_type
from thunder_ir.extend.grads import grad_transform_rule
from thunder_ir.extend.ops import OperatorOp
from thunder_ir.extend.replaces import REPLACEMENTS, divert_calls
from thunder_ir.extend.subtrace import Unresolved, checker_args, clone_into, subtrace
from thunder_ir.extend.symbols import OPERATORS, Symbol, operator_call, suspend_diversion
from thunder_ir.frontend.errors import ThunderTraceError
from thunder_ir.lowering.codegen import namespace as op_namespace
from thunder_ir.lowering.executors import Executor
from thunder_ir.lowering.executors import register_executor as _register_executor
from thunder_ir.runtime.namespace import set_home


@dataclass
class _Implementation:
    """How an executor runs (and differentiates) one op."""

    checker: Callable[..., bool] | None
    execution_transform: Callable[..., Any] | None
    grad_transform: Callable[..., Any] | None


def _operator_named(namespace: str, short: str) -> Callable[..., Any]:
    """An executor namespace's attribute no trace bound: its operator, by name."""
    op_name = f"{namespace}.{short}"
    if op_name not in OPERATORS:
        raise AttributeError(f"executor namespace {namespace!r} has no operator {short!r}")
    return operator_call(op_name)


class OperatorExecutor(Executor):
    """An executor of operators and implementations of your own (see the module doc).

    Args:
        name: unique; its operators' ops are named ``<name>.<operator>``.
        version: free-form, shown by ``repr``.
    """

    def __init__(self, name: str, *, version: str | None = None) -> None:
        if not name:
            raise ValueError("an executor needs a name")
        self.name = name
        self.version = str(version) if version is not None else "0"
        ns = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
        if not ns or ns[0].isdigit() or ns in ("torch", "prims", "ltorch", "fusion"):
            ns = f"ex_{ns}"
        self.namespace = ns
        self.home: str = sys._getframe(1).f_globals.get("__name__", "__main__")
        """The module that made the executor: importing it registers its operators (the
        import generated code that calls them makes first)."""
        self.opmap: dict[str, Symbol] = {}
        self.implmap: dict[Any, _Implementation] = {}

    # ---- registration

    def register_operator(self, name: str, *, like: Callable[..., Any] | None = None,
                          meta: Callable[..., Any] | None = None,
                          fn: Callable[..., Any],
                          replaces: Callable[..., Any] | None = None) -> Symbol:
        """Registers an operator that this executor runs with ``fn``.

        Args:
            name: the operator's name (a Python identifier); its ops are
                ``<executor>.<name>``.
            like: a function with ``fn``'s signature that computes outputs of the right
                shapes: a meta function, or simply a torch implementation. It runs on
                proxies while tracing (its torch calls are recorded into a scratch trace,
                never into the program).
            meta: the same as ``like`` (give one of them). Return ``TensorProxy(like=x)``
                for an output shaped like ``x``; non-tensor outputs (launch parameters)
                are passed through to the caller.
            fn: the implementation, called by generated code with real tensors.
            replaces: a Python function (or method, or torch function) whose calls are
                recorded as this operator while a program is traced.

        Returns:
            The operator's symbol: call it in traced code (or outside, where it runs
            ``fn``), pass it to `register_implementation`.
        """
        if (like is None) == (meta is None):
            raise TypeError("register_operator() needs exactly one of like= and meta=")
        if not name.isidentifier():
            raise ValueError(f"operator name {name!r} is not a Python identifier")
        m = like if like is not None else meta
        assert m is not None
        sym = Symbol(self, name, m, fn, replaces)
        self.opmap[name] = sym
        OPERATORS[f"{self.namespace}.{name}"] = sym
        self._publish()
        if replaces is not None:
            divert_calls(replaces, sym)
        return sym

    def register_implementation(self, op: Symbol | type[ThunderOp], *,
                                checker: Callable[..., bool] | None = None,
                                execution_transform: Callable[..., Any] | None = None,
                                grad_transform: Callable[..., Any] | None = None) -> None:
        """Lets this executor run ``op`` (an operator's symbol or an ltorch op class).

        Args:
            checker: called with the op's arguments (proxies for tensors); True if this
                executor takes this call. Default: always.
            execution_transform: called like the op, written with torch functions and
                operators; its trace replaces the op. Default: the op stays as it is
                (claimed by this executor).
            grad_transform: called like the op while autodiff builds the backward: it
                computes the outputs, asks `get_grad` for their cotangents and hands the
                arguments' gradients to `put_grads`. Its backward ops appear in
                ``last_backward_traces``.
        """
        if not isinstance(op, Symbol) and not (isinstance(op, type)
                                              and issubclass(op, ThunderOp)):
            raise TypeError("register_implementation() takes an operator (the symbol "
                            f"register_operator returned) or an ltorch op class, got {op!r}")
        self.implmap[op] = _Implementation(checker, execution_transform, grad_transform)

    def _publish(self) -> None:
        """Generated code calls this executor's operators as ``<namespace>.<name>``: the
        namespace exists from the first operator on, finds an operator no trace has made
        an op class for by its name (printed source run in a fresh process), and is known
        to come from `home`."""
        ns = op_namespace(self.namespace)
        if "__getattr__" not in vars(ns):
            ns.__getattr__ = functools.partial(_operator_named, self.namespace)  # type: ignore[attr-defined]
        set_home(self.namespace, self.home)

    # ---- the executor interface

    def _impl(self, op: Operation) -> _Implementation | None:
        key: Any = type(op)
        if isinstance(op, OperatorOp):
            key = type(op).SYMBOL
        return self.implmap.get(key)

    def _accepts(self, op: Operation, impl: _Implementation) -> bool:
        if impl.checker is None:
            return True
        assert isinstance(op, ThunderOp)
        try:
            args, kwargs = checker_args(op)
        except Unresolved:
            return False
        with suspend_diversion():
            return bool(impl.checker(*args, **kwargs))

    def can_claim(self, op: ThunderOp) -> bool:
        """Ops with an implementation here whose checker accepts them, and this
        executor's own operators."""
        impl = self._impl(op)
        if impl is not None and self._accepts(op, impl):
            return True
        return isinstance(op, OperatorOp) and type(op).SYMBOL.executor is self

    def expand(self, op: ThunderOp) -> tuple[list[Operation], list[SSAValue]] | None:
        """The execution transform of a claimed op, traced into ops (None: keep the op).

        The claim pass replaces ``op`` with these ops and claims them in turn.
        """
        impl = self._impl(op)
        if impl is None or impl.execution_transform is None or not self._accepts(op, impl):
            return None
        sub = subtrace(impl.execution_transform, op, "execution transform")
        results = list(op.results)
        if len(sub.outputs) != len(results):
            raise ThunderTraceError(
                f"the execution transform of {op.name} returned {len(sub.outputs)} tensors, "
                f"but the op has {len(results)} results")
        vm = dict(sub.mapping)
        new_ops = clone_into(sub.ops, vm, op.location)
        values = [vm.get(v, v) for v in sub.outputs]
        for v, r in zip(values, results):
            if v.type != r.type:
                raise ThunderTraceError(
                    f"the execution transform of {op.name} returned {pretty_type(v.type)} "
                    f"where the op has {pretty_type(r.type)}")
        for o in new_ops:  # the transform may fall back to the op itself: do not recurse
            if type(o) is type(op):
                claim(o, self.name)
        return new_ops, values

    def vjp_rule(self, op: Operation) -> Callable[..., Any] | None:
        """The grad transform registered for ``op``, as a VJP rule, when its checker
        accepts ``op``."""
        impl = self._impl(op)
        if impl is None or impl.grad_transform is None or not self._accepts(op, impl):
            return None
        return grad_transform_rule(impl.grad_transform)

    def __repr__(self) -> str:
        return f"OperatorExecutor(name={self.name!r}, version={self.version!r})"


def register_executor(ex: Executor) -> Executor:
    """Registers ``ex`` under its name, so ``jit(..., executors=["name"])`` finds it."""
    return _register_executor(ex)


def add_default_executor(ex: Executor) -> Executor:
    """Registers ``ex`` and puts it first in `get_default_executors`."""
    return _register_executor(ex, default=True, priority=0)


def deregister_executor(ex: Executor) -> None:
    """Forgets ``ex``: its name no longer resolves, and the functions its operators
    replaced are no longer diverted."""
    from thunder_ir.lowering.executors import unregister_executor

    unregister_executor(ex)
    for key, r in list(REPLACEMENTS.items()):
        if r.symbol.executor is ex:
            del REPLACEMENTS[key]
