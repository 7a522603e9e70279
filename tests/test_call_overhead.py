"""The cached call's overhead outside the kernels (issue 53: ResNet's tiered step against
torch.compile's), cut without weakening a check: each check that decides whether a
cached program is valid still runs on every call, and each test changes one such thing
and compares the next calls with eager's (values, gradients, buffers, version counters).

- the inputs a call unwraps if they are dead functorch wrappers (`per_call_inputs`): an
  argument and a buffer that are dead wrappers;
- the write-backs as one plan (`thunder_ir.runtime.writes.WritePlan`);
- the parameters' and buffers' metadata and the module guard's dict versions, checked
  in C once Dynamo is imported (`thunder_ir.runtime.c_guards`): every change a program
  depends on, made after they took over, against eager.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import thunder_ir
from thunder_ir.runtime.autograd import per_call_inputs
from thunder_ir.runtime.origins import ArgLeaf, Captured, StateEntry
from thunder_ir.runtime.writes import JOIN, PLAIN, QUIET, WritePlan


def _dead_wrapper() -> torch.Tensor:
    """A tensor made inside ``torch.func.grad`` that outlived it (a dead wrapper)."""
    leak: list[torch.Tensor] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        leak.append(x * 2)
        return (x * x).sum()

    torch.func.grad(f)(torch.arange(3.0))
    assert torch._C._functorch.is_functorch_wrapped_tensor(leak[0])
    return leak[0]


class _Affine(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-1.0, 1.0, 3))
        self.register_buffer("b", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.w + self.b).sin()


def _check_affine(jm: Any, m: nn.Module, ref: nn.Module, x: torch.Tensor) -> None:
    m.w.grad = ref.w.grad = None
    got, want = jm(x), ref(x)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(m.w.grad, ref.w.grad)


def test_dead_wrappers_among_the_inputs_are_unwrapped_as_eager() -> None:
    """A dead wrapper passed as the argument, then bound as a buffer: the call unwraps
    each as ``Function.apply`` does, and the values and gradients are eager's."""
    m, ref = _Affine(), _Affine()
    jm = thunder_ir.jit(m)
    _check_affine(jm, m, ref, torch.randn(3, generator=torch.Generator().manual_seed(0)))
    _check_affine(jm, m, ref, _dead_wrapper())  # an argument
    m.b = ref.b = _dead_wrapper()  # a buffer that is a (dead) wrapper: bound, unwrapped
    _check_affine(jm, m, ref, _dead_wrapper())


def test_per_call_inputs_names_arguments_and_wrapped_bound_tensors() -> None:
    plain, wrapped = torch.ones(2), _dead_wrapper()
    origins = [ArgLeaf(0), StateEntry("w"), StateEntry("b"), Captured(plain),
               Captured(wrapped)]
    assert per_call_inputs(origins, {"w": plain, "b": wrapped}) == (0, 2, 4)


def test_write_plan_copies_in_order_and_sets_versions() -> None:
    """One copy for all the plain write-backs, in order (a target written twice ends
    with the second value), the version counters moved as each mode's bumps say, and a
    mode that is not plain written as `write_back` writes it."""
    a, b = torch.zeros(2), torch.zeros(2)
    va, vb = a._version, b._version
    plan = WritePlan([PLAIN | (-1 << 2), PLAIN | (2 << 2), PLAIN], [a, b, a])
    plan(None, [torch.ones(2), torch.full((2,), 2.0), torch.full((2,), 3.0)])
    assert a.tolist() == [3.0, 3.0] and b.tolist() == [2.0, 2.0]
    assert a._version - va == 2 - 1 and b._version - vb == 1 + 2
    c = torch.zeros(2)
    vc = c._version
    WritePlan([QUIET])([c], [torch.ones(2)])  # through .data: no bump
    assert c.tolist() == [1.0, 1.0] and c._version == vc
    with torch.inference_mode():
        inf = torch.zeros(2)
        WritePlan([PLAIN | (1 << 2)])([inf], [torch.ones(2)])  # no counter to move
    assert inf.tolist() == [1.0, 1.0]
    with torch.enable_grad():  # copied under no-grad, and grad mode is put back
        WritePlan([PLAIN], [a])(None, [torch.ones(2, requires_grad=True)])
        assert torch.is_grad_enabled() and not a.requires_grad


def test_write_plan_joins_a_value_that_requires_grad() -> None:
    """`JOIN` (a batch norm's running statistics, as traced): a value without gradient
    is copied with the others; one that requires grad, under grad mode, is copied with
    grad mode on (the target then carries the value's graph, as eager's write would)."""
    mode = JOIN | (-1 << 2)  # copied, its bump set back (eager's kernel does not bump)
    t = torch.zeros(2)
    v0 = t._version
    WritePlan([mode], [t])(None, [torch.ones(2)])
    assert t.tolist() == [1.0, 1.0] and t._version == v0 and t.grad_fn is None
    w = torch.full((2,), 2.0, requires_grad=True)
    with torch.no_grad():  # grad mode off: a plain copy
        WritePlan([mode], [t])(None, [w * 1])
    assert t.grad_fn is None and t._version == v0
    WritePlan([mode], [t])(None, [w * 1])
    assert t.requires_grad and t.grad_fn is not None
    t.sum().backward()
    assert w.grad is not None and w.grad.tolist() == [1.0, 1.0]


# ---- the checks made in C: the state's metadata (StateMeta), the module guard's dicts

class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.fc2 = nn.Linear(8, 3)
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.bn(self.fc1(x)).relu()) * self.scale


def _pair() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    a = _Net()
    torch.manual_seed(0)
    return a, _Net()


def _same_call(jm: Any, m: nn.Module, ref: nn.Module, x: torch.Tensor, what: str) -> None:
    """One call of each, compared: output (value, whether it requires grad), then the
    gradients (None where eager's is), the buffers and their version counters."""
    for p, q in zip(m.parameters(), ref.parameters(), strict=True):
        p.grad = q.grad = None
    got, want = jm(x), ref(x)
    torch.testing.assert_close(got, want, msg=what)
    assert got.requires_grad == want.requires_grad, what
    if want.requires_grad:
        got.square().sum().backward()
        want.square().sum().backward()
    for (k, p), (_, q) in zip(m.named_parameters(), ref.named_parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), f"{what}: {k}'s grad"
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, msg=f"{what}: {k}'s grad")
    for (k, b), (_, c) in zip(m.named_buffers(), ref.named_buffers(), strict=True):
        torch.testing.assert_close(b, c, msg=f"{what}: {k}")
        assert b._version - c._version == _VERSIONS[k], f"{what}: {k}'s version"


_VERSIONS: dict[str, int] = {}


def _c_checks(jm: Any) -> tuple[Any, list[Any]]:
    """The module guard's C check, and the prologues' state checks (white box: the test
    must exercise them)."""
    compiled = jm._compiled
    states = [p.fn.__globals__.get("_state") for p in compiled.prologues.values()]
    return compiled.guards[0].cheap, [s for s in states if s is not None]


def test_each_change_after_the_c_checks_took_over_takes_eagers_path() -> None:
    """Once the C checks stand in for the Python reads (the guard's dict versions, the
    parameters' and buffers' metadata), each change a cached program depends on is
    seen on the next call: requires_grad, dtype, shape, strides, a replaced parameter or
    buffer, a plain attribute, training mode, module hooks added and removed (with a
    handle, and written into the hook dict directly), a global hook, grad and inference
    mode. Every call is compared with eager's, ten calls after each change (the C
    checks are made again in between)."""
    import torch._dynamo  # (the C checks start once Dynamo is imported)

    from thunder_ir.runtime.c_guards import ready

    assert ready()
    m, ref = _pair()
    jm = thunder_ir.jit(m)
    gen = torch.Generator().manual_seed(1)
    dtype = [torch.float32]
    handles: dict[str, Any] = {}

    def both(f: Any) -> Any:
        return lambda: (f(m), f(ref))

    def with_data(path: str, make: Any) -> Any:
        value = make()

        def change(net: nn.Module) -> None:
            net.get_parameter(path).data = value.clone()
        return change

    def hook(net: nn.Module) -> None:
        handles[str(id(net))] = net.fc1.register_forward_hook(lambda mod, i, o: o * 2)

    def unhook(net: nn.Module) -> None:
        handles.pop(str(id(net))).remove()

    def global_hook() -> None:
        handles["global"] = torch.nn.modules.module.register_module_forward_hook(
            lambda mod, i, o: o + 1 if isinstance(mod, nn.Linear) else o)

    phases: list[tuple[str, Any]] = [
        ("requires_grad", both(lambda n: n.fc1.weight.requires_grad_(False))),
        ("requires_grad back", both(lambda n: n.fc1.weight.requires_grad_(True))),
        ("strides", both(lambda n: setattr(n.fc1.weight, "data",
                                           n.fc1.weight.data.t().contiguous().t()))),
        ("shape", lambda: [both(with_data("fc2.weight", lambda: torch.randn(
            5, 8, generator=gen)))(), both(with_data("fc2.bias", lambda: torch.randn(
                5, generator=gen)))()]),
        ("replaced parameter", lambda: [
            setattr(n.fc2, "weight", nn.Parameter(w.clone()))
            for w in [torch.randn(5, 8, generator=gen)] for n in (m, ref)]),
        ("replaced buffer", lambda: [
            n.bn.register_buffer("running_var", v.clone())
            for v in [torch.rand(8, generator=gen) + 0.5] for n in (m, ref)]),
        ("attribute", both(lambda n: setattr(n, "scale", 2.5))),
        ("hook", both(hook)),
        ("hook removed", both(unhook)),
        ("hook dict written", both(lambda n: n.bn._forward_hooks.__setitem__(
            10**9, lambda mod, i, o: o - 1))),
        ("hook dict entry deleted", both(lambda n: n.bn._forward_hooks.pop(10**9))),
        ("global hook", global_hook),
        ("global hook removed", lambda: handles.pop("global").remove()),
        ("eval", both(lambda n: n.eval())),
        ("train", both(lambda n: n.train())),
        ("dtype", lambda: [both(lambda n: n.double())(), dtype.__setitem__(0, torch.float64)]),
    ]
    x = torch.randn(6, 4, generator=gen)
    v0 = {k: b._version - c._version for (k, b), (_, c) in
          zip(m.named_buffers(), ref.named_buffers(), strict=True)}
    _VERSIONS.clear()
    _VERSIONS.update(v0)
    for i in range(12):
        _same_call(jm, m, ref, x, f"warm-up call {i}")
    cheap, states = _c_checks(jm)
    assert cheap is not None and states and all(s.memo is not None for s in states)
    for what, change in phases:
        change()
        for i in range(10):
            _same_call(jm, m, ref, x.to(dtype[0]), f"{what}, call {i}")
    for mode in (torch.no_grad, torch.inference_mode):  # and back, each ten calls
        for i in range(10):
            with mode():
                _same_call(jm, m, ref, x.to(dtype[0]), f"{mode.__name__}, call {i}")
            _same_call(jm, m, ref, x.to(dtype[0]), f"after {mode.__name__}, call {i}")
    cheap, states = _c_checks(jm)
    assert cheap is not None and any(s.memo is not None and s.memo[2] is not None
                                     for s in states)  # (one manager per thread state)


class _Lists(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.sizes = [2, 3]
        self.names = ["a", "b"]
        self.gains = [0.5, 2.0]
        self.steps = [4]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.lin(x)[:, :self.sizes[0]] * self.sizes[1] * self.gains[0]
        return y + 1 if self.names[1] == "b" else y - 1, torch.arange(self.steps[0])


def test_lists_changed_in_place_are_seen_by_the_guard() -> None:
    """Lists of ints and strings are compared by their items' types and values, others
    by `value_key` (floats by ``repr``: ``-0.0`` is not ``0.0``): an item changed in
    place, to a value of another type that compares equal (``4.0`` and ``True`` for
    ``4`` and ``1``: ``arange``'s dtype), or a float's sign, takes eager's path on the
    next call, after the C checks took over."""
    import torch._dynamo  # (the C checks start once Dynamo is imported)

    torch.manual_seed(0)
    m = _Lists()
    torch.manual_seed(0)
    ref = _Lists()
    jm = thunder_ir.jit(m)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))
    changes = [lambda n: n.sizes.__setitem__(0, 3), lambda n: n.sizes.__setitem__(1, True),
               lambda n: n.names.__setitem__(1, "c"), lambda n: n.gains.__setitem__(0, -0.0),
               lambda n: n.gains.__setitem__(0, 0.0), lambda n: n.sizes.append(7),
               lambda n: n.steps.__setitem__(0, 4.0), lambda n: n.steps.__setitem__(0, 4),
               lambda n: n.steps.__setitem__(0, True)]
    for k, change in enumerate([None, *changes]):
        if change is not None:
            change(m)
            change(ref)
        for i in range(10):
            got, want = jm(x), ref(x)
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w, msg=f"change {k}, call {i}")
                assert [str(v) for v in g.flatten()] == [str(v) for v in w.flatten()]
    assert jm._compiled.guards[0].cheap is not None
