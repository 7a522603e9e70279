"""Golden tests of the frontend: trace small torch functions, check the printed traces."""

from __future__ import annotations

import textwrap

import torch
import torch.nn.functional as F

import thunder_ir


def _traces(fn, *args) -> tuple[str, str]:
    jf = thunder_ir.jit(fn)
    jf(*args)
    traces = thunder_ir.last_traces(jf)

    def body(t: thunder_ir.Trace) -> str:
        return str(t).split("\n", 1)[1]  # drop the "# Constructed by … (took N ms)" line

    return body(traces[0]), body(traces[-1])


def _golden(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def test_linear_gelu_sum() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ w.T + 1, approximate="tanh").sum(-1)

    first, last = _traces(f, torch.randn(2, 3), torch.randn(4, 3))
    assert first == _golden('''
        import torch
        from thunder_ir.runtime import namespace as tir
        from thunder_ir.runtime.namespace import ltorch

        @tir.no_grad
        def forward(x, w):
          # x: "cpu f32[2, 3]"
          # w: "cpu f32[4, 3]"
          t0 = ltorch.transpose(w, dim0=0, dim1=1)  # t0: "cpu f32[3, 4]"
          t1 = ltorch.matmul(x, t0)  # t1: "cpu f32[2, 4]"
          t2 = ltorch.add(t1, 1, alpha=1)  # t2: "cpu f32[2, 4]"
          t3 = ltorch.gelu(t2, approximate='tanh')  # t3: "cpu f32[2, 4]"
          t4 = ltorch.sum(t3, dim=-1, keepdim=False)  # t4: "cpu f32[2]"
          return t4
        ''')
    assert last == _golden('''
        import torch
        import torch.nn.functional
        from thunder_ir.runtime import namespace as tir

        @tir.no_grad
        def forward(x, w):
          # x: "cpu f32[2, 3]"
          # w: "cpu f32[4, 3]"
          t0 = torch.transpose(w, dim0=0, dim1=1)  # t0: "cpu f32[3, 4]"
          del w
          t1 = torch.matmul(x, t0)  # t1: "cpu f32[2, 4]"
          del x, t0
          t2 = torch.add(t1, 1)  # t2: "cpu f32[2, 4]"
          del t1
          t3 = torch.nn.functional.gelu(t2, approximate='tanh')  # t3: "cpu f32[2, 4]"
          del t2
          t4 = torch.sum(t3, dim=-1)  # t4: "cpu f32[2]"
          del t3
          return t4
        ''')


def test_indexing_softmax_cast() -> None:
    first, _ = _traces(lambda x: x[:, 1:, None].softmax(-1).to(torch.bfloat16),
                       torch.randn(2, 3))
    assert first == _golden('''
        import torch
        from thunder_ir.runtime import namespace as tir
        from thunder_ir.runtime.namespace import ltorch

        @tir.no_grad
        def forward(x):
          # x: "cpu f32[2, 3]"
          t0 = ltorch.getitem(x, [], index=(slice(None, None, None), slice(1, None, None), None))  # t0: "cpu f32[2, 2, 1]"
          t1 = ltorch.softmax(t0, dim=-1)  # t1: "cpu f32[2, 2, 1]"
          t2 = ltorch.to_dtype(t1, dtype=torch.bfloat16)  # t2: "cpu bf16[2, 2, 1]"
          return t2
        ''')


def test_module_parameters_are_named_inputs() -> None:
    lin = torch.nn.Linear(3, 2)
    tm = thunder_ir.jit(lin)
    with torch.no_grad():
        tm(torch.randn(5, 3))
    first = str(thunder_ir.last_traces(tm)[0])
    assert "def forward(input, t_weight, t_bias):" in first
    assert ("t0 = ltorch.linear(input, t_weight, t_bias)  # t0: \"cpu f32[5, 2]\""
            in first)


def test_mlir_of_a_trace_parses_back() -> None:
    from thunder_ir.dialects.location import print_mlir
    from thunder_ir.dialects.program import parse

    jf = thunder_ir.jit(lambda x: torch.relu(x) * 2)
    jf(torch.randn(3))
    for t in thunder_ir.last_traces(jf):
        text = t.mlir()
        assert print_mlir(parse(text)) == text  # source locations included
