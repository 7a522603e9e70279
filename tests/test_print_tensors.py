"""``print`` and ``logging`` of traced tensors and numbers in traced code: each call prints
(logs) its own values, after the program's checks, in order with its other prints, as
eager's text; one program; nothing printed while tracing (issue 52)."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
import torch

import thunder_ir
from thunder_ir.frontend.errors import ThunderTraceError

_LOG = logging.getLogger("tests.print_tensors")


def _printer(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print(y)
    print("loss", y.sum(), (y[0], [1, "a", None]), (y,), sep="|", end="!\n",
          file=sys.stderr)
    y.add_(1)  # (the print before shows the value before)
    print("after", y, f"{y.sum().item():.2f}", flush=True)
    return y


def _outputs(capsys: Any, fn: Any, x: torch.Tensor) -> tuple[torch.Tensor, str, str]:
    out = fn(x)
    got = capsys.readouterr()
    return out, got.out, got.err


def test_print_tensors_each_call_as_eager(capsys: Any) -> None:
    """Tensors (alone, in tuples/lists, to ``sys.stderr``, with sep/end/flush) print each
    call's values, the text eager's (torch's repr); one program; nothing while tracing."""
    jf = thunder_ir.jit(_printer)
    for k in range(4):
        x = torch.randn(3) * (k + 1)
        rj, oj, ej = _outputs(capsys, jf, x)
        re, oe, ee = _outputs(capsys, _printer, x)
        assert (oj, ej) == (oe, ee) and oj.count("tensor") == 2 and ee, (oj, ej, oe, ee)
        assert "Proxy" not in oj + ej
        torch.testing.assert_close(rj, re)
    assert thunder_ir.cache_misses(jf) == 1
    assert "print_values" in str(thunder_ir.last_traces(jf)[-1])


def test_print_of_tensor_requiring_grad_is_refused_naming_the_line() -> None:
    """Eager's text names the ``grad_fn``, which the program cannot reproduce: refused,
    naming the line (nothing printed); ``print(t.detach())`` prints as eager."""
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = x * w
        print("y", y)
        return y

    w = torch.randn(3, requires_grad=True)
    with pytest.raises(ThunderTraceError, match=r"test_print_tensors.py:\d+: print of a "
                       "traced tensor that requires grad"):
        thunder_ir.jit(f)(torch.randn(3), w)
    assert w.grad is None and w.requires_grad


def test_print_detached_in_training_as_eager(capsys: Any) -> None:
    """``print(loss.detach())`` in a training forward: each call's value, gradients eager's."""
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        loss = (x * w).sum()
        print("loss", loss.detach())
        return loss

    jf = thunder_ir.jit(f)
    w1 = torch.randn(3, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_()
    for _ in range(3):
        x = torch.randn(3)
        lj, oj, _ = (jf(x, w1), *capsys.readouterr())
        le, oe, _ = (f(x, w2), *capsys.readouterr())
        assert oj == oe and "loss tensor(" in oj
        lj.backward()
        le.backward()
    torch.testing.assert_close(w1.grad, w2.grad)
    assert thunder_ir.cache_misses(jf) == 1


def _logs(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    loss = y.sum().item()
    _LOG.info("loss %s %.3f", y, loss)
    _LOG.debug("dbg %s", (y[0], 1))
    _LOG.log(logging.WARNING, "n=%d", y[0].gt(0).sum().item())
    print("p", y)
    return y


def test_logging_of_traced_values_each_call_as_eager(capsys: Any,
                                                      caplog: Any) -> None:
    """A logger call whose arguments hold a traced tensor or number makes its record on
    each call (level checked then: a level set later shows the debug line), with eager's
    message, level, file, line and function; one program."""
    jf = thunder_ir.jit(_logs)
    _LOG.setLevel(logging.INFO)
    try:
        for k in range(4):
            if k == 2:
                _LOG.setLevel(logging.DEBUG)
            x = torch.randn(3)
            caplog.clear()
            with caplog.at_level(_LOG.level, logger=_LOG.name):
                jf(x)
                got = [(r.levelno, r.getMessage(), r.filename, r.lineno, r.funcName)
                       for r in _mine(caplog)]
                pj = capsys.readouterr().out
                caplog.clear()
                _logs(x)
                want = [(r.levelno, r.getMessage(), r.filename, r.lineno, r.funcName)
                        for r in _mine(caplog)]
                pe = capsys.readouterr().out
            assert got == want and pj == pe, (got, want)
            assert len(want) == (2 if k < 2 else 3)
    finally:
        _LOG.setLevel(logging.NOTSET)
    assert thunder_ir.cache_misses(jf) == 1


def test_logging_with_other_arguments_is_refused() -> None:
    """``exc_info``/``extra`` with a traced value: refused naming the line."""
    def f(x: torch.Tensor) -> torch.Tensor:
        _LOG.warning("x %s", x, extra={"a": 1})
        return x + 1

    with pytest.raises(ThunderTraceError, match=r"test_print_tensors.py:\d+: logging"):
        thunder_ir.jit(f)(torch.randn(2))


def test_print_under_no_grad_of_module_output_as_eager(capsys: Any) -> None:
    """Under ``torch.no_grad()`` a module's output has no ``grad_fn``: printed as eager."""
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x)
            print("y", y, [y.sum()])
            return y

    m = M()
    jm = thunder_ir.jit(m)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2)
            _, oj, _ = _outputs(capsys, jm, x)
            _, oe, _ = _outputs(capsys, m, x)
            assert oj == oe and oj.count("tensor(") == 2, (oj, oe)
    assert thunder_ir.cache_misses(jm) == 1


def test_traced_tensor_in_a_dict_is_refused(capsys: Any) -> None:
    """A traced tensor in a dict (``OrderedDict`` too), printed or logged: refused naming the
    line (no proxy's text ever printed or logged)."""
    def p(x: torch.Tensor) -> torch.Tensor:
        print({"a": x})
        return x

    def q(x: torch.Tensor) -> torch.Tensor:
        _LOG.warning("%(a)s", {"a": x})
        return x

    for fn, what in ((p, "print"), (q, "logging")):
        with pytest.raises(ThunderTraceError, match=rf"test_print_tensors.py:\d+: {what}"):
            thunder_ir.jit(fn)(torch.randn(2))
    out = capsys.readouterr()
    assert "Proxy" not in out.out + out.err


def _mine(caplog: Any) -> list[logging.LogRecord]:
    """The records of this file's logger (torch's own debug records aside)."""
    return [r for r in caplog.records if r.name in (_LOG.name, "root")]


def _fstring_logs(x: torch.Tensor) -> torch.Tensor:
    loss = (x * 2).sum().item()
    _LOG.warning(f"loss {loss:.3f} {loss}")
    logging.warning(f"root {loss:.2f}")
    return x * loss


def test_logged_fstring_of_item_each_call_one_program(caplog: Any) -> None:
    """``logger.warning(f"{loss:.3f}")`` of a global logger and ``logging.warning(f"...")``:
    each call's text, in order, one program."""
    jf = thunder_ir.jit(_fstring_logs)
    for _ in range(3):
        x = torch.randn(3)
        caplog.clear()
        jf(x)
        got = [(r.getMessage(), r.lineno) for r in _mine(caplog)]
        caplog.clear()
        _fstring_logs(x)
        want = [(r.getMessage(), r.lineno) for r in _mine(caplog)]
        assert got == want and len(want) == 2, (got, want)
    assert thunder_ir.cache_misses(jf) == 1


def test_logged_fstring_alone_is_one_program(caplog: Any) -> None:
    """Only the global logger's f-string: one program for every value."""
    def f(x: torch.Tensor) -> torch.Tensor:
        loss = x.sum().item()
        _LOG.warning(f"loss {loss:.4f}")
        return x + 1

    jf = thunder_ir.jit(f)
    for _ in range(3):
        x = torch.randn(3)
        caplog.clear()
        jf(x)
        got = [r.getMessage() for r in _mine(caplog)]
        caplog.clear()
        f(x)
        assert got == [r.getMessage() for r in _mine(caplog)] and got
    assert thunder_ir.cache_misses(jf) == 1


def test_print_of_tolist_each_call_one_program(capsys: Any) -> None:
    """``print(t.tolist())`` and a tuple of an ``.item()``: each call's numbers (Python's
    ``repr`` of them in the container, as eager), one program for every value."""
    def f(x: torch.Tensor) -> torch.Tensor:
        print("v", x.tolist(), (x.sum().item(), 2), sep=":")
        return x + 1

    jf = thunder_ir.jit(f)
    for _ in range(4):
        x = torch.randn(2)
        _, oj, _ = _outputs(capsys, jf, x)
        _, oe, _ = _outputs(capsys, f, x)
        assert oj == oe and oj.startswith("v:["), (oj, oe)
    assert thunder_ir.cache_misses(jf) == 1
