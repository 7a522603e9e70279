"""Extending thunder_ir: a RoPE operator with Triton kernels and a custom backward.

The flow of the reference system's "Extending Thunder" tutorial, on thunder_ir:

1. an executor of our own (`thunder_ir.extend.OperatorExecutor`);
2. ``apply_rope``, a plain PyTorch function the model calls, registered as an operator
   that *replaces* it: traces record one ``my_ex.apply_rope`` op instead of its ten
   torch calls;
3. Triton RoPE kernels (forward and backward) registered as operators of their own;
4. an implementation of ``apply_rope``: a checker (4-d inputs the kernel supports) and an
   execution transform that routes it to the Triton forward kernel;
5. a grad transform (`get_grad`/`put_grads`) that makes the backward use the Triton
   backward kernel, visible in ``thunder_ir.last_backward_traces``.

Without a GPU the kernels run in Triton's interpreter (``TRITON_INTERPRET=1``, set below
before Triton is imported), so shapes are kept tiny.

Run: ``python examples/extend_rope.py``
"""

from __future__ import annotations

import os
from typing import Any

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when kernels are decorated

import triton
import triton.language as tl

import thunder_ir
from thunder_ir import TensorProxy
from thunder_ir.extend import OperatorExecutor, get_grad, put_grads

# --------------------------------------------------------------------------- the model


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding: rotates each (first half, second half) pair of ``x``'s
    last dimension by the angles whose cosines and sines ``cos``/``sin`` hold."""
    half = x.size(-1) // 2
    first, second = x[..., :half], x[..., half:]
    turned = torch.cat((-second, first), dim=-1)
    return (x * cos + turned * sin).to(dtype=x.dtype)


def rope_cache(seq_len: int, head_size: int, base: float = 10000.0
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` tables of shape (seq_len, head_size)."""
    theta = 1.0 / base ** (torch.arange(0, head_size, 2).float() / head_size)
    angles = torch.outer(torch.arange(seq_len).float(), theta).repeat(1, 2)
    return torch.cos(angles), torch.sin(angles)


class RopeAttentionScores(torch.nn.Module):
    """A small attention-score block: project to queries and keys, rotate both."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, n_embd: int = 16, n_head: int = 2, seq_len: int = 8) -> None:
        super().__init__()
        self.n_head = n_head
        self.qk = torch.nn.Linear(n_embd, 2 * n_embd, bias=False)
        cos, sin = rope_cache(seq_len, n_embd // n_head)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k = self.qk(x).split(c, dim=-1)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        q = apply_rope(q, self.cos[:t], self.sin[:t])
        k = apply_rope(k, self.cos[:t], self.sin[:t])
        return q @ k.transpose(-2, -1)


# --------------------------------------------------------------------------- Triton kernels


@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, seq_len,
                 HALF: tl.constexpr, BLOCK: tl.constexpr, BACKWARD: tl.constexpr):
    # One program per row of x (a batch, head, position triple); the row's two halves are
    # rotated together. The backward applies the transposed rotation.
    row = tl.program_id(0)
    pos = row % seq_len
    cols = tl.arange(0, BLOCK)
    mask = cols < HALF
    x_row = x_ptr + row * 2 * HALF
    t_row = pos * 2 * HALF
    a = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_row + HALF + cols, mask=mask, other=0.0).to(tl.float32)
    c_lo = tl.load(cos_ptr + t_row + cols, mask=mask, other=0.0).to(tl.float32)
    c_hi = tl.load(cos_ptr + t_row + HALF + cols, mask=mask, other=0.0).to(tl.float32)
    s_lo = tl.load(sin_ptr + t_row + cols, mask=mask, other=0.0).to(tl.float32)
    s_hi = tl.load(sin_ptr + t_row + HALF + cols, mask=mask, other=0.0).to(tl.float32)
    if BACKWARD:
        lo = a * c_lo + b * s_hi
        hi = b * c_hi - a * s_lo
    else:
        lo = a * c_lo - b * s_lo
        hi = b * c_hi + a * s_hi
    out_row = out_ptr + row * 2 * HALF
    tl.store(out_row + cols, lo.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_row + HALF + cols, hi.to(out_ptr.dtype.element_ty), mask=mask)


def _launch_config(head_size: int) -> tuple[int, int]:
    """Block size (the half head, rounded up to a power of two) and warps."""
    block = triton.next_power_of_2(head_size // 2)
    return block, 4 if block < 2048 else 8


def _launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, block: int,
            num_warps: int, backward: bool) -> torch.Tensor:
    x = x.contiguous()
    cos, sin = cos.contiguous(), sin.contiguous()
    out = torch.empty_like(x)
    head_size = x.shape[-1]
    _rope_kernel[(x.numel() // head_size,)](
        x, cos, sin, out, x.shape[-2], HALF=head_size // 2, BLOCK=block, BACKWARD=backward,
        num_warps=num_warps)
    return out


def rope_forward_triton(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                        ) -> tuple[torch.Tensor, tuple[int, int]]:
    """RoPE with the Triton kernel; also returns the launch configuration it used."""
    block, num_warps = _launch_config(x.shape[-1])
    return _launch(x, cos, sin, block, num_warps, backward=False), (block, num_warps)


def rope_backward_triton(block: int, num_warps: int, cos: torch.Tensor, sin: torch.Tensor,
                         grad_out: torch.Tensor) -> torch.Tensor:
    """The gradient of `rope_forward_triton` with respect to ``x``."""
    return _launch(grad_out, cos, sin, block, num_warps, backward=True)


def rope_forward_meta(x: Any, cos: Any, sin: Any) -> tuple[Any, tuple[int, int]]:
    """Output metadata of `rope_forward_triton` (launch configuration included)."""
    return TensorProxy(like=x), _launch_config(x.shape[-1])


def rope_backward_meta(block: int, num_warps: int, cos: Any, sin: Any, grad_out: Any) -> Any:
    """Output metadata of `rope_backward_triton`."""
    return TensorProxy(like=grad_out)


# --------------------------------------------------------------------------- registration


def triton_runs_on(t: Any) -> bool:
    """Triton runs on CUDA tensors, or on CPU tensors in its interpreter."""
    return t.device.type == "cuda" or (t.device.type == "cpu"
                                       and os.environ.get("TRITON_INTERPRET") == "1")


def register(name: str = "my_ex", grad: bool = True) -> dict[str, Any]:
    """Registers the executor, the operators and the implementation; returns them."""
    my_ex = OperatorExecutor(name, version="0.0.1")
    thunder_ir.extend.register_executor(my_ex)

    rope = my_ex.register_operator("apply_rope", like=apply_rope, fn=apply_rope,
                                   replaces=apply_rope)
    rope_fwd = my_ex.register_operator("rope_forward_triton", meta=rope_forward_meta,
                                       fn=rope_forward_triton)
    rope_bwd = my_ex.register_operator("rope_backward_triton", meta=rope_backward_meta,
                                       fn=rope_backward_triton)

    def checker(x: Any, cos: Any, sin: Any) -> bool:
        return (x.ndim == 4 and x.shape[-1] % 2 == 0 and tuple(cos.shape) == x.shape[-2:]
                and tuple(sin.shape) == x.shape[-2:] and x.dtype == cos.dtype == sin.dtype
                and all(triton_runs_on(t) for t in (x, cos, sin)))

    def to_triton(x: Any, cos: Any, sin: Any) -> Any:
        out, _ = rope_fwd(x, cos, sin)
        return out

    def rope_grad(x: Any, cos: Any, sin: Any) -> Any:
        out, (block, num_warps) = rope_fwd(x, cos, sin)
        grad_x = rope_bwd(block, num_warps, cos, sin, get_grad(out))
        put_grads((x,), (grad_x,))
        return out

    my_ex.register_implementation(rope, checker=checker, execution_transform=to_triton,
                                  grad_transform=rope_grad if grad else None)
    return {"executor": my_ex, "apply_rope": rope, "forward": rope_fwd, "backward": rope_bwd}


def main() -> None:
    torch.manual_seed(0)
    parts = register()
    my_ex = parts["executor"]
    executors = (my_ex, *thunder_ir.get_default_executors())

    model = RopeAttentionScores()
    x = torch.randn(2, 8, 16)

    # Inference: apply_rope is one operator, run by the Triton forward kernel.
    with torch.no_grad():
        jitted = thunder_ir.jit(model, executors=executors)
        print("inference deviation:", (jitted(x) - model(x)).abs().max().item())
    print(thunder_ir.last_traces(jitted)[0])  # as traced: the operator
    print(thunder_ir.last_traces(jitted)[-1])  # as run: the Triton forward kernel

    # Training: the backward runs the Triton backward kernel.
    jitted = thunder_ir.jit(model, executors=executors)
    x.requires_grad_()
    expected = model(x)
    go = torch.randn_like(expected)
    grads_expected = torch.autograd.grad(expected, (x, model.qk.weight), go)
    actual = jitted(x)
    grads_actual = torch.autograd.grad(actual, (x, model.qk.weight), go)
    print("training deviation:", (actual - expected).abs().max().item())
    print("grad deviation:", max((a - e).abs().max().item()
                                 for a, e in zip(grads_actual, grads_expected)))
    print(thunder_ir.last_backward_traces(jitted)[-1])
    print([line.strip() for line in str(thunder_ir.last_traces(jitted)[-1]).splitlines()
           if "rope" in line and "=" in line])


if __name__ == "__main__":
    main()
