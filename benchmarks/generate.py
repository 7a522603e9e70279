"""Generation benchmark: greedy decoding with a tiny Hugging Face Llama, from one run.

Variants (each generates from the same prompt; every variant's tokens are checked
against eager's before its time counts):

* ``eager``: ``model.generate(...)`` with the default ``DynamicCache``;
* ``torch.compile``: ``model.forward = torch.compile(model.forward)``, dynamic cache
  (Dynamo recompiles once for the second length, then marks the length dynamic);
* ``thunder_ir dynamic``: ``thunder_ir.jit(model).generate(...)``, dynamic cache (the
  prefill, then one symbolic decode step for every cache length: automatic dynamic,
  `thunder_ir.runtime.dynamic`);
* ``thunder_ir static``: the same with ``cache_implementation="static"`` (prefill and
  decode compile once each);
* ``eager static`` and ``torch.compile static``: the static cache under the other two, so
  that each thunder_ir row has a like-for-like reference.

Each variant runs ``--runs`` times (default 1, as the issue asks: the first run includes
every compile); the table gives the total seconds of each run and the per-token
milliseconds of the last run (its decode steps only: total minus the first token's time,
over the new tokens after the first), and the compiles thunder_ir made. Usage::

    python benchmarks/generate.py [--tokens 64] [--prompt 16] [--layers 2] [--embd 256]
                                  [--runs 1] [--no-compile]
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

import thunder_ir


def tiny_llama(layers: int, embd: int) -> Any:
    """A Llama with grouped-query attention (4 query heads per key/value head)."""
    import transformers as T

    cfg = T.LlamaConfig(hidden_size=embd, intermediate_size=embd * 8 // 3,
                        num_hidden_layers=layers, num_attention_heads=8,
                        num_key_value_heads=2, vocab_size=1024,
                        max_position_embeddings=512, pad_token_id=0)
    torch.manual_seed(0)
    model = T.LlamaForCausalLM(cfg).eval()
    model.generation_config.pad_token_id = 0
    return model


class FirstToken:
    """Seconds from the start of ``generate`` to the first new token (a logits
    processor sees the scores of each step just before its token is chosen)."""

    def __init__(self) -> None:
        self.start = 0.0
        self.first: float | None = None

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.first is None:
            self.first = time.perf_counter() - self.start
        return scores


def run(gen: Callable[..., torch.Tensor], ids: torch.Tensor, tokens: int,
        static: bool) -> tuple[torch.Tensor, float, float]:
    """One greedy generation: the tokens, total seconds and seconds to the first token."""
    from transformers import LogitsProcessorList

    probe = FirstToken()
    kw: dict[str, Any] = {"max_new_tokens": tokens, "min_new_tokens": tokens,
                          "do_sample": False, "logits_processor": LogitsProcessorList([probe])}
    if static:
        kw["cache_implementation"] = "static"
    probe.start = t = time.perf_counter()
    with torch.no_grad():
        out = gen(ids, **kw)
    total = time.perf_counter() - t
    return out, total, probe.first if probe.first is not None else total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64, help="new tokens (greedy)")
    ap.add_argument("--prompt", type=int, default=16, help="prompt length")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--runs", type=int, default=1, help="generations per variant")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"tiny Llama: {a.layers} layers, width {a.embd}, GQA 8/2 heads; prompt "
          f"{a.prompt}, {a.tokens} new tokens, greedy, {a.runs} run(s) per variant")

    model = tiny_llama(a.layers, a.embd)
    ids = torch.randint(1, 1024, (1, a.prompt), generator=torch.Generator().manual_seed(1))

    variants: dict[str, tuple[Callable[[], Callable[..., torch.Tensor]], bool]] = {
        "eager": (lambda: model.generate, False),
        "eager static": (lambda: model.generate, True),
    }
    jitted: dict[str, Any] = {}

    def thunder(name: str) -> Callable[..., torch.Tensor]:
        jitted[name] = thunder_ir.jit(copy.deepcopy(model), tiered=False)
        return jitted[name].generate

    variants["thunder_ir dynamic"] = (lambda: thunder("thunder_ir dynamic"), False)
    variants["thunder_ir static"] = (lambda: thunder("thunder_ir static"), True)
    if not a.no_compile:
        def compiled() -> Callable[..., torch.Tensor]:
            torch._dynamo.reset()
            m = copy.deepcopy(model)
            m.forward = torch.compile(m.forward)
            return m.generate

        variants["torch.compile"] = (compiled, False)
        variants["torch.compile static"] = (compiled, True)

    ref: torch.Tensor | None = None
    rows: dict[str, tuple[list[float], float]] = {}
    for name, (make, static) in variants.items():
        gen = make()
        totals, per_token = [], 0.0
        for _ in range(a.runs):
            out, total, first = run(gen, ids, a.tokens, static)
            if ref is None:
                ref = out
            elif not torch.equal(out, ref):
                raise SystemExit(f"{name}: tokens differ from eager's")
            totals.append(total)
            per_token = (total - first) / max(a.tokens - 1, 1)
        rows[name] = (totals, per_token)
        compiles = ""
        if name in jitted:
            compiles = f"  ({thunder_ir.cache_misses(jitted[name].__dict__['_forward_jit'])}"\
                       " programs compiled)"
        runs = " ".join(f"{t:7.2f}" for t in totals)
        print(f"{name:<22} total s: {runs}   per token {per_token * 1e3:7.2f} ms{compiles}",
              flush=True)

    def ratio(name: str, ref_name: str) -> str:
        if name not in rows or ref_name not in rows:
            return ""
        (t, p), (rt, rp) = rows[name], rows[ref_name]
        return (f"{name} / {ref_name}: total {t[0] / rt[0]:.2f}x, "
                f"per token {p / rp:.2f}x")

    print("ratios (below 1.00x is faster):")
    for name, refs in (("thunder_ir dynamic", ("eager", "torch.compile")),
                       ("thunder_ir static", ("eager static", "torch.compile static"))):
        for r in refs:
            line = ratio(name, r)
            if line:
                print("  " + line)


if __name__ == "__main__":
    main()
