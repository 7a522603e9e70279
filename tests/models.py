"""Test models, written as LitGPT, nanoGPT and torchvision users write them.

* `MLP`: the seed's 784-784-784-784-28-10 MLP with dropout (torchvision.ops.MLP layout).
* `LLaMAMLP`: LitGPT's SwiGLU MLP (seed 004).
* `LlamaGPT`: a Llama-2 style GPT (LitGPT): RMSNorm, RoPE from a buffer cache, causal SDPA
  with grouped-query attention, LLaMAMLP, tied or untied head; config object; mask built
  with torch.finfo; optional arguments left at None.
* `GPT2`: a GPT-2 style GPT (nanoGPT): LayerNorm, GELU (tanh), learned positions, causal
  attention written out (masked_fill with a tril buffer + softmax) or with SDPA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Sequential):
    """torchvision.ops.MLP(784, [784, 784, 784, 28, 10], dropout=0.1), rebuilt here."""

    def __init__(self, in_channels: int = 784,
                 hidden_channels: tuple[int, ...] = (784, 784, 784, 28, 10),
                 dropout: float = 0.1) -> None:
        layers: list[nn.Module] = []
        d = in_channels
        for h in hidden_channels[:-1]:
            layers += [nn.Linear(d, h), nn.ReLU(inplace=True), nn.Dropout(dropout)]
            d = h
        layers += [nn.Linear(d, hidden_channels[-1]), nn.Dropout(dropout)]
        super().__init__(*layers)


class LLaMAMLP(nn.Module):
    def __init__(self, n_embd: int, intermediate_size: int) -> None:
        super().__init__()
        self.fc_1 = nn.Linear(n_embd, intermediate_size, bias=False)
        self.fc_2 = nn.Linear(n_embd, intermediate_size, bias=False)
        self.proj = nn.Linear(intermediate_size, n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_fc_1 = self.fc_1(x)
        x_fc_2 = self.fc_2(x)
        x = torch.nn.functional.silu(x_fc_1) * x_fc_2
        return self.proj(x)


@dataclass
class Config:
    block_size: int = 64
    vocab_size: int = 96
    n_layer: int = 2
    n_head: int = 4
    n_query_groups: int = 2
    n_embd: int = 64
    intermediate_size: int = 172
    rotary_percentage: float = 1.0
    norm_eps: float = 1e-5
    bias: bool = False
    tie_embeddings: bool = False
    dropout: float = 0.0

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


class RMSNorm(nn.Module):
    """LitGPT's RMSNorm: written with pow/mean/rsqrt, computed in float32."""

    def __init__(self, size: int, dim: int = -1, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        norm_x = torch.mean(x * x, dim=self.dim, keepdim=True)
        x_normed = x * torch.rsqrt(norm_x + self.eps)
        return (x_normed * self.weight.float()).to(dtype=dtype)


def build_rope_cache(seq_len: int, n_elem: int, base: int = 10000,
                     device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    theta = 1.0 / (base ** (torch.arange(0, n_elem, 2, device=device).float() / n_elem))
    seq_idx = torch.arange(seq_len, device=device)
    idx_theta = torch.outer(seq_idx, theta).repeat(1, 2)
    return torch.cos(idx_theta), torch.sin(idx_theta)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    head_size = x.size(-1)
    x1 = x[..., : head_size // 2]
    x2 = x[..., head_size // 2 :]
    rotated = torch.cat((-x2, x1), dim=-1)
    roped = (x * cos) + (rotated * sin)
    return roped.to(dtype=x.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        shape = (config.n_head + 2 * config.n_query_groups) * config.head_size
        self.attn = nn.Linear(config.n_embd, shape, bias=config.bias)
        self.proj = nn.Linear(config.n_head * config.head_size, config.n_embd,
                              bias=config.bias)
        self.config = config

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, C = x.size()
        qkv = self.attn(x)
        q_per_kv = self.config.n_head // self.config.n_query_groups
        total_qkv = q_per_kv + 2
        qkv = qkv.view(B, T, self.config.n_query_groups, total_qkv, self.config.head_size)
        qkv = qkv.permute(0, 2, 3, 1, 4)
        q, k, v = qkv.split((q_per_kv, 1, 1), dim=2)
        if self.config.n_query_groups != self.config.n_head:
            k = k.expand(B, self.config.n_query_groups, q_per_kv, T, self.config.head_size)
            v = v.expand(B, self.config.n_query_groups, q_per_kv, T, self.config.head_size)
        q = q.reshape(B, -1, T, self.config.head_size)
        k = k.reshape(B, -1, T, self.config.head_size)
        v = v.reshape(B, -1, T, self.config.head_size)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        scale = 1.0 / math.sqrt(self.config.head_size)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0,
                                               scale=scale, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0,
                                               scale=scale, is_causal=False)
        y = y.transpose(1, 2).reshape(B, T, self.config.n_head * self.config.head_size)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.attn = CausalSelfAttention(config)
        self.norm_2 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.mlp = LLaMAMLP(config.n_embd, config.intermediate_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.norm_1(x), cos, sin, mask)
        return x + self.mlp(self.norm_2(x))


class LlamaGPT(nn.Module):
    """LitGPT-style Llama-2: tokens -> logits."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
            ln_f=RMSNorm(config.n_embd, eps=config.norm_eps),
        ))
        if config.tie_embeddings:
            self.lm_head.weight = self.transformer.wte.weight
        cos, sin = build_rope_cache(config.block_size, config.head_size)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, idx: torch.Tensor, input_pos: torch.Tensor | None = None,
                use_mask: bool = False) -> torch.Tensor:
        T = idx.size(1)
        if self.config.block_size < T:
            raise ValueError(f"Cannot forward sequence of length {T}, block size is only "
                             f"{self.config.block_size}")
        cos = self.cos[:T]
        sin = self.sin[:T]
        mask = None
        if use_mask:
            # A float additive mask, as HF-style models build it.
            min_value = torch.finfo(cos.dtype).min
            ones = torch.ones(T, T, dtype=torch.bool, device=idx.device)
            mask = torch.zeros(T, T, dtype=cos.dtype, device=idx.device).masked_fill(
                ~ones.tril(), min_value)
        x = self.transformer.wte(idx)
        for block in self.transformer.h:
            x = block(x, cos, sin, mask)
        x = self.transformer.ln_f(x)
        return self.lm_head(x)


class NanoAttention(nn.Module):
    def __init__(self, config: Config, flash: bool) -> None:
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = flash
        if not flash:
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size,
                                                               config.block_size))
                                 .view(1, 1, config.block_size, config.block_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0,
                is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class NanoMLP(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class NanoBlock(nn.Module):
    def __init__(self, config: Config, flash: bool) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = NanoAttention(config, flash)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = NanoMLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """nanoGPT-style GPT-2: tokens (and optional targets) -> logits (and loss)."""

    def __init__(self, config: Config, flash: bool = False) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([NanoBlock(config, flash) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])  # nanoGPT's inference-time shortcut
            loss = None
        return logits, loss
