"""NumPy values met by traced code, taken as eager takes them.

- A NumPy scalar (``np.float64(4.0)``, what ``np.sqrt(d)`` returns) among a torch call's
  arguments, in lists, tuples and slices too: eager's argument parser takes it for the
  Python number it holds, so ``x / np.sqrt(d)`` keeps float32 (`python_numbers`).
- A 0-d array as an operand (``x * np.array(2.0)``): ``Tensor.__mul__`` declines it, and
  NumPy computes the result from the tensor's values (``x.__array__()``) and wraps it as a
  tensor: NumPy's type promotion (float32 times a float64 array is float64), no autograd
  history, and eager's errors where the tensor requires grad, lives off the CPU, or has a
  dtype NumPy lacks (`array_operator`: a traced tensor's operators). The trace computes
  the same in torch: the detached tensor cast to the promoted dtype, with the array's
  value as a Python number. Bool
  operands are refused with the line (NumPy's bool arithmetic comes back as small
  integers, which is rarely what the code meant). Reflected and in-place operators and
  the other comparisons decline the array as eager does, so Python's fallbacks (``a * x``
  raises TypeError, ``x *= a`` rebinds ``x`` to ``x * a``, ``x != a`` is True, ``x < a``
  raises TypeError) are eager's; ``x == a`` is torch's, the array taken as a tensor.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch

from thunder_ir.frontend.errors import ThunderTraceError, user_location, where

try:
    import numpy as _np

    NP_SCALAR: type | tuple[type, ...] = _np.generic
    NDARRAY: type | None = _np.ndarray
except ImportError:  # no NumPy: nothing to convert
    NP_SCALAR = ()
    NDARRAY = None


def _has_np(a: Any, depth: int = 0) -> bool:
    if isinstance(a, NP_SCALAR):
        return True
    t = type(a)
    if t is slice:
        return _has_np(a.start, 2) or _has_np(a.stop, 2) or _has_np(a.step, 2)
    return depth < 2 and (t is list or t is tuple) and any(_has_np(b, depth + 1) for b in a)


def _to_python(a: Any) -> Any:
    if isinstance(a, NP_SCALAR):
        return a.item()  # type: ignore[attr-defined]
    t = type(a)
    if t is slice:
        return slice(_to_python(a.start), _to_python(a.stop), _to_python(a.step))
    if t is list or t is tuple:
        return t(_to_python(b) for b in a)
    return a


def python_numbers(args: Sequence[Any], kwargs: dict[str, Any]
                   ) -> tuple[Sequence[Any], dict[str, Any]]:
    """NumPy scalars among the arguments as the Python numbers eager's argument parser
    takes them for. Returns the arguments as they are where there is none."""
    if not any(map(_has_np, args)) and not any(map(_has_np, kwargs.values())):
        return args, kwargs
    return [_to_python(a) for a in args], {k: _to_python(v) for k, v in kwargs.items()}


def _array_result(x: Any, op: Callable[[Any, Any], Any], a: Any) -> Any:
    """``x <op> a`` for a traced tensor ``x`` and a NumPy array ``a``, as eager computes it
    (see the module's docstring)."""
    loc = where(user_location())
    if a.ndim != 0:
        raise ThunderTraceError(
            f"{loc}: a tensor combined with a {a.ndim}-d NumPy array is computed by NumPy in "
            "eager, which thunder_ir does not trace; make the array a tensor first "
            "(torch.from_numpy(a)) or pass it in as an argument.")
    if x.requires_grad:  # eager: x.__array__() -> x.numpy()
        raise RuntimeError(f"{loc}: Can't call numpy() on Tensor that requires grad. Use "
                           "tensor.detach().numpy() instead.")
    if x.device.type != "cpu":
        raise TypeError(f"{loc}: can't convert {x.device} device type tensor to numpy. Use "
                        "Tensor.cpu() to copy the tensor to host memory first.")
    if x.dtype == torch.bool or a.dtype == bool:
        raise ThunderTraceError(
            f"{loc}: a boolean tensor or NumPy array in NumPy arithmetic is not supported "
            "under jit (NumPy returns small integers for it); use a Python bool or a tensor "
            "instead.")
    try:  # eager's own path on a stand-in: NumPy's result dtype, or its error
        with torch._C.DisableTorchFunction():
            dtype = op(torch.zeros(1, dtype=x.dtype), a).dtype
    except (TypeError, ValueError, RuntimeError) as e:
        raise type(e)(f"{loc}: {e}") from None
    return op(x.detach().to(dtype), a.item())


def array_argument(loc: str, name: str, a: Any) -> ThunderTraceError:
    """The error for a NumPy array passed to a torch function while tracing
    (``torch.tensor(np.stack(rand_attn))``, BigBird's random blocks): eager computes the
    array in Python on every call (from sizes, from a tensor's values, from NumPy's
    random generator), a program would hold this call's values for every call; named by
    the user's line."""
    return ThunderTraceError(
        f"{loc}: {name} got a NumPy array ({a.dtype}, shape {tuple(a.shape)}) computed in "
        "Python while tracing: eager computes it again on every call (NumPy's random "
        "draws, a tensor's values, the sizes), and thunder_ir does not trace NumPy, so a "
        "program would keep this call's values for every call. Compute it with torch ops "
        "on tensors, or pass it in as an argument (a tensor).")


def array_operator(tensor_op: Callable[[Any, Any], Any], op: Callable[[Any, Any], Any]
                   ) -> Callable[[Any, Any], Any]:
    """A traced tensor's ``__mul__`` & co.: ``tensor_op`` (torch's), except for a NumPy
    array on the right, which eager lets NumPy compute. Reflected and in-place operators and
    comparisons need nothing: torch's decline arrays as in eager."""
    def method(self: Any, other: Any) -> Any:
        if type(other) is NDARRAY:
            return _array_result(self, op, other)
        return tensor_op(self, other)

    if tensor_op is torch.Tensor.__eq__:
        return _eq
    method.__name__ = tensor_op.__name__
    method.__doc__ = tensor_op.__doc__
    return method


def _eq(self: Any, other: Any) -> Any:
    """A traced tensor's ``==``: torch's own takes an array as a tensor (a 0-d float64
    array compares as a 0-d tensor: in ``x``'s float32)."""
    if type(other) is NDARRAY:
        with torch._C.DisableTorchFunction():  # a real tensor: lifted as a constant
            other = torch.as_tensor(other)
    return torch.Tensor.__eq__(self, other)


ARRAY_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "__add__": operator.add, "__sub__": operator.sub, "__mul__": operator.mul,
    "__truediv__": operator.truediv, "__floordiv__": operator.floordiv,
    "__mod__": operator.mod, "__pow__": operator.pow, "__and__": operator.and_,
    "__or__": operator.or_, "__xor__": operator.xor, "__eq__": operator.eq,
}
"""Tensor operators that eager lets NumPy compute when the other operand is an array (and
``==``, which torch computes itself)."""


__all__ = ["ARRAY_OPERATORS", "NP_SCALAR", "array_argument", "array_operator",
           "python_numbers"]
