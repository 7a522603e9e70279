"""Python numbers read from traced tensors (``thunder_ir/frontend/python_floats.py``,
``value_reads.py``, ``int_sizes.py``), against eager, with the programs they compile counted.

Arithmetic on a float ``.item()`` is Python's own, computed in the program in the order the
user's code runs it (sympy would reorder it: ``(s + 1e16) - 1e16`` is not ``s``); the
result is each call's number wherever it goes (an operand, an output, module state), one
program for every value.
"""

from __future__ import annotations

from typing import Any

import torch

import thunder_ir


def _same(a: Any, b: Any) -> None:
    """``a`` and ``b`` equal as eager's results: tensors by value, numbers by type and value
    (NaN as NaN), containers item by item."""
    if isinstance(b, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    elif isinstance(b, list | tuple):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    else:
        assert type(a) is type(b), (a, b)
        assert a == b or (a != a and b != b), (a, b)


def _twins(cls: type[torch.nn.Module]) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    m = cls()
    e = cls()
    e.load_state_dict(m.state_dict())
    return m, e


def _state(m: torch.nn.Module) -> dict[str, Any]:
    """The module's plain attributes (what forward may write), parameters aside."""
    return {k: v for k, v in vars(m).items() if not k.startswith("_") and k != "training"}


def _run(cls: type[torch.nn.Module], inputs: list[torch.Tensor], backward: bool = True
         ) -> Any:
    """Each input through a jitted module and its eager twin: outputs, module state after
    each call and (``backward``) gradients of the inputs and parameters equal eager's.
    Returns the jitted module."""
    m, e = _twins(cls)
    jm = thunder_ir.jit(m)
    for x in inputs:
        xj = x.detach().clone().requires_grad_(backward)
        xe = x.detach().clone().requires_grad_(backward)
        out, ref = jm(xj), e(xe)
        _same(out, ref)
        sj, se = _state(m), _state(e)
        assert sj.keys() == se.keys()
        for k in se:
            _same(sj[k], se[k])
        if backward:
            first = out[0] if isinstance(out, tuple) else out
            (first * torch.arange(first.numel()).reshape(first.shape)).sum().backward()
            first_e = ref[0] if isinstance(ref, tuple) else ref
            (first_e * torch.arange(first_e.numel()).reshape(first_e.shape)).sum().backward()
            torch.testing.assert_close(xj.grad, xe.grad)
            for (n, p), q in zip(m.named_parameters(), e.parameters(), strict=True):
                torch.testing.assert_close(p.grad, q.grad, msg=n)
    return jm


# --------------------------------------------------------------------------- float .item()


class _Arith(torch.nn.Module):
    """Float arithmetic sympy would reorder: cancellation, mixed with an integer
    ``.item()`` and the batch size, unary ops, ``%``, ``//``, an integer power."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.stat: Any = None

    def forward(self, x: torch.Tensor) -> Any:
        y = self.lin(x)
        s = y.detach().abs().sum().item()
        n = (x > 0).sum().item()
        t = (s + 1e16) - 1e16 + n * 0.5 - x.shape[0] / 3 + (-s) ** 2 % 7.0 // 1.5
        self.stat = abs(t * 3.0 - t)
        return y * t - s, t, s / x.shape[0], 1 - s


def test_float_item_arithmetic_is_eagers_over_every_value() -> None:
    inputs = [torch.randn(b, 3) * 10 for b in (2, 3, 4, 5, 3, 2)]
    jm = _run(_Arith, inputs)
    assert thunder_ir.cache_misses(jm) <= 2
    assert "operator.add" in str(thunder_ir.last_traces(jm)[-1])


def test_float_item_cancellation_is_not_simplified() -> None:
    """``(s + 1e16) - 1e16``: eager rounds to a multiple of 2; sympy's ``s`` would not."""
    def f(x: torch.Tensor) -> Any:
        s = x.sum().item()
        t = (s + 1e16) - 1e16
        return x * t, t, s * 3.0 - s

    jf = thunder_ir.jit(f)
    for v in ([1.0, 2.0], [3.0, 0.25], [5.0, 7.5], [0.1, 0.2]):
        x = torch.tensor(v, dtype=torch.float64)
        _same(jf(x), f(x))
    assert thunder_ir.cache_misses(jf) == 1


def test_decision_on_float_arithmetic_is_speculated() -> None:
    def f(x: torch.Tensor) -> Any:
        s = x.sum().item() * 2.0 - 1.0
        return x * 2 if s > 0 else x - s

    jf = thunder_ir.jit(f)
    for v in ([1.0, 2.0], [-3.0, 1.0], [0.5, 0.25], [-1.0, -1.0], [0.2, 0.3]):
        x = torch.tensor(v)
        _same(jf(x), f(x))
    assert thunder_ir.cache_misses(jf) == 2


# --------------------------------------------------------------------------- int(), float()


class _Stored(torch.nn.Module):
    """``int()``/``float()`` of values stored on the module at once, then read back."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.count: Any = 0
        self.first: Any = None
        self.loss: Any = None

    def forward(self, x: torch.Tensor) -> Any:
        y = self.lin(x)
        self.count = int((x > 0).sum().item())
        self.first = int(x.detach().argmax())
        self.loss = float(y.detach().sum())
        return y * self.count + self.loss, self.first - self.count


def test_int_and_float_stored_on_the_module_are_each_calls_value() -> None:
    """``self.count = int(n.item())``, ``int(t)``, ``float(t)`` stored at once: the module
    holds each call's Python number, with no speculation: one program for every value."""
    inputs = [torch.randn(4, 3) for _ in range(5)]
    jm = _run(_Stored, inputs)
    assert thunder_ir.cache_misses(jm) == 1
    assert "torch.eq(" not in str(thunder_ir.last_traces(jm)[-1])  # (signs checked only)


def test_float_of_a_tensor_used_as_data_is_checked_every_call() -> None:
    """``x * float(t)``: Python's ``float()`` must return a float, so its value is this
    call's, checked on every call (NaN as NaN): a new value compiles a variant."""
    def f(x: torch.Tensor) -> Any:
        return x * float(x.sum()), float(x[0])

    jf = thunder_ir.jit(f)
    for v in ([1.0, 2.0], [1.0, 2.0], [3.0, 4.0], [float("nan"), 1.0], [float("nan"), 2.0]):
        x = torch.tensor(v)
        _same(jf(x), f(x))
    assert thunder_ir.cache_misses(jf) == 3


# --------------------------------------------------------------------------- tolist()


def test_tolist_used_as_data_is_one_program() -> None:
    """Integers as a slice bound, an operand and an output; floats summed by Python (in
    eager's order) and returned; a 2-D list and a 0-d tensor's number."""
    def f(x: torch.Tensor, t: torch.Tensor) -> Any:
        ints = t.tolist()
        floats = x.detach().tolist()
        total = sum(floats)
        return (x[: ints[0]] * ints[1], total, floats, ints, x.reshape(2, -1).tolist(),
                t[2].tolist() - 1)

    jf = thunder_ir.jit(f)
    for k in range(5):
        x = torch.randn(6, dtype=torch.float64)
        t = torch.tensor([k + 1, 3 - 2 * k, -k])
        _same(jf(x, t), f(x, t))
    assert thunder_ir.cache_misses(jf) <= 2


def test_tolist_of_a_bool_tensor_is_speculated() -> None:
    def f(x: torch.Tensor, m: torch.Tensor) -> Any:
        return [x * 2 if b else x for b in m.tolist()]

    jf = thunder_ir.jit(f)
    for m in ([True, False], [True, False], [False, False]):
        x = torch.randn(3)
        _same(jf(x, torch.tensor(m)), f(x, torch.tensor(m)))
    assert thunder_ir.cache_misses(jf) == 2


# --------------------------------------------------------------------------- printing


class _Printing(torch.nn.Module):
    """Prints a loss and a count each call (f-string with a spec, ``str()``, the numbers
    themselves, ``sep``/``end``), keeps an integer count and returns its own text."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.steps: Any = None

    def forward(self, x: torch.Tensor) -> Any:
        y = self.lin(x)
        loss = y.detach().square().mean().item()
        n = (x > 0).sum().item()
        print(f"loss {loss:.3f} n={n}", str(loss / 2), loss, sep=" | ")
        print("count", n * 2, end=";\n")
        self.steps = n
        return y * loss


def _printed(capsys: Any, fn: Any, *args: Any) -> tuple[Any, str]:
    """``fn(*args)`` and what it printed."""
    out = fn(*args)
    return out, str(capsys.readouterr().out)


def test_printed_numbers_are_each_calls_as_eager(capsys: Any) -> None:
    """Each call prints its own values (as eager: no print while tracing, none twice), the
    text formatted as eager's; one program for every value."""
    m, e = _twins(_Printing)
    jm = thunder_ir.jit(m)
    for _ in range(4):
        x = torch.randn(4, 3)
        xj, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        rj, got = _printed(capsys, jm, xj)
        re, want = _printed(capsys, e, xe)
        assert got == want and got.count("loss") == 1, (got, want)
        _same(rj, re)
        assert m.steps == e.steps and type(m.steps) is int
        rj.sum().backward()
        re.sum().backward()
        torch.testing.assert_close(xj.grad, xe.grad)
    assert thunder_ir.cache_misses(jm) == 1
    assert "print_values" in str(thunder_ir.last_traces(jm)[-1])


def test_text_used_otherwise_is_checked_and_prints_once(capsys: Any) -> None:
    """``f"{s:.2f}"`` returned is this call's text (its value checked on every call: a new
    value compiles again); a print before that check is printed once per call."""
    def f(x: torch.Tensor) -> Any:
        s = x.sum().item()
        print("s is", s)
        return x * 2, f"{s:.2f}", format(s, "e")

    jf = thunder_ir.jit(f)
    for v in ([1.0, 2.0], [1.0, 2.0], [3.0, -0.25]):
        x = torch.tensor(v)
        rj, got = _printed(capsys, jf, x)
        re, want = _printed(capsys, f, x)
        assert got == want, (got, want)
        _same(rj, re)
    assert thunder_ir.cache_misses(jf) == 2


def test_sizes_printed_and_formatted_as_eager(capsys: Any) -> None:
    """A size printed is each call's (no guard: one symbolic program); a size's text in
    user code (f-string, ``str()``, ``torch.Size``) is eager's, never the symbol's name."""
    def f(x: torch.Tensor) -> Any:
        print("size", x.shape[0], x.shape[0] * 2, x.shape)
        return x * 2, f"{x.shape[0]}", str(x.shape[0] + 1), f"{x.shape[0]:03d}"

    jf = thunder_ir.jit(f)
    for b in (2, 3, 4, 5):
        x = torch.randn(b)
        rj, got = _printed(capsys, jf, x)
        re, want = _printed(capsys, f, x)
        assert got == want, (got, want)
        _same(rj, re)


def test_plain_print_in_forward_prints_every_call(capsys: Any) -> None:
    """``print("step", 3)`` in ``forward``: eager prints on every call (cache hits
    included); tensors printed: tests/test_print_tensors.py."""
    def f(x: torch.Tensor) -> Any:
        print("step", 3, 0.5, None, True, sep=",", end=".\n")
        return x * 2

    jf = thunder_ir.jit(f)
    for _ in range(3):
        x = torch.randn(2)
        assert _printed(capsys, jf, x)[1] == _printed(capsys, f, x)[1]
    assert thunder_ir.cache_misses(jf) == 1
