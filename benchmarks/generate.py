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

With ``--quantize 8`` (or ``4``, or ``8 4``), weight-only quantized variants too (issue 55),
whose tokens are checked against an eager copy of the model with every linear weight
replaced by its dequantized value (``eager dequantized int8``):

* ``thunder_ir int8``: ``thunder_ir.jit(model, transforms=[QuantizeWeights(bits=8)])``,
  dynamic cache (``int4``: ``bits=4``, ``--group-size``);
* ``thunder_ir int8 bf16 compute``: ``QuantizeWeights(bits=8,
  compute_dtype=torch.bfloat16)`` (its tokens are reported, not required, to equal the
  dequantized model's: its activations are rounded to bfloat16);
* ``torchao int8`` and ``torchao int8 + torch.compile``: torchao's ``Int8WeightOnlyConfig``
  (same storage as ``QuantizeWeights(bits=8)``, bit for bit), where torchao imports.

The bytes of each variant's linear weights are what it keeps (`linear_bytes`; the
quantized thunder_ir variants call ``free_float_weights`` after their first run, as a
user would, so only the quantized storage is left: int8 codes and scales; int4 the CPU
kernel's packed codes, scales and zeros).

Each variant runs once (every compile; its tokens checked), then ``--runs - 1`` rounds
(at least one) run every variant in turn, so that a change in the machine's load touches
all of them alike; the table gives the first run's seconds and the median per-token
milliseconds over the rounds (decode steps only: total minus the first token's time,
over the new tokens after the first), with the minimum, and the load average before and
after. Usage::

    python benchmarks/generate.py [--tokens 64] [--prompt 16] [--layers 2] [--embd 256]
                                  [--runs 1] [--no-compile] [--quantize 8 4]
                                  [--group-size 32] [--only-quantized]
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

import thunder_ir


def tiny_llama(layers: int, embd: int, multiple: int = 1) -> Any:
    """A Llama with grouped-query attention (4 query heads per key/value head); its MLP
    width ``8/3 embd`` rounded up to a ``multiple`` (Llama's own configs use 256)."""
    import transformers as T

    inter = -(-(embd * 8 // 3) // multiple) * multiple
    cfg = T.LlamaConfig(hidden_size=embd, intermediate_size=inter,
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
    ap.add_argument("--quantize", type=int, nargs="*", default=[], choices=[8, 4],
                    help="also weight-only quantized variants (QuantizeWeights)")
    ap.add_argument("--group-size", type=int, default=32, help="int4 group size")
    ap.add_argument("--only-quantized", action="store_true",
                    help="of the float variants, eager and thunder_ir dynamic only")
    ap.add_argument("--skip", nargs="*", default=[],
                    help="leave out the variants whose names hold one of these words")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    model = tiny_llama(a.layers, a.embd, 256 if a.quantize else 1)
    print(f"tiny Llama: {a.layers} layers, width {a.embd} (MLP "
          f"{model.config.intermediate_size}), GQA 8/2 heads; prompt "
          f"{a.prompt}, {a.tokens} new tokens, greedy, {a.runs} run(s) per variant")

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
    if a.only_quantized:
        del variants["eager static"]
    else:
        variants["thunder_ir static"] = (lambda: thunder("thunder_ir static"), True)
    if not a.no_compile and not a.only_quantized:
        def compiled() -> Callable[..., torch.Tensor]:
            torch._dynamo.reset()
            m = copy.deepcopy(model)
            m.forward = torch.compile(m.forward)
            return m.generate

        variants["torch.compile"] = (compiled, False)
        variants["torch.compile static"] = (compiled, True)

    refs: dict[str, torch.Tensor] = {}
    for bits in a.quantize:
        add_quantized(variants, jitted, model, bits, a.group_size, a.no_compile)
    for name in [n for n in variants if any(w in n for w in a.skip)]:
        del variants[name]
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    run(model.generate, ids, a.tokens, False)  # a warm-up, so that eager's row is not a cold one
    gens: dict[str, Callable[..., torch.Tensor]] = {}
    firsts: dict[str, float] = {}
    per_tokens: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}

    def timed(name: str) -> None:
        out, total, first = run(gens[name], ids, a.tokens, variants[name][1])
        scheme = next((s for s in ("int8", "int4") if s in name), "float")
        ref = refs.setdefault(scheme, out)
        if not torch.equal(out, ref):
            if scheme == "float":
                raise SystemExit(f"{name}: tokens differ from eager's")
            if name not in firsts:
                print(f"{name}: tokens differ from the dequantized model's (its kernels "
                      "or its bfloat16 activations round otherwise)")
        firsts.setdefault(name, total)
        per_tokens.setdefault(name, []).append((total - first) / max(a.tokens - 1, 1))

    for name, (make, _) in variants.items():  # the first run of each: compiles, checks
        gens[name] = make()
        timed(name)
        if name in jitted and ("int8" in name or "int4" in name):
            from thunder_ir.transforms import free_float_weights

            free_float_weights(jitted[name])  # (what the user would do: one copy kept)
        sizes[name] = linear_bytes(getattr(gens[name], "__self__", None))
        print(f"{name:<34} first run {firsts[name]:6.2f} s, linear weights "
              f"{sizes[name] / 2**20:6.1f} MiB", flush=True)
    per_tokens.clear()
    for _ in range(max(a.runs - 1, 1)):  # then rounds, the variants interleaved
        for name in variants:
            timed(name)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    rows: dict[str, tuple[list[float], float]] = {}
    eager_token = statistics.median(per_tokens["eager"])
    print("\n| variant | per token, median (min) | vs eager fp32 | linear weight bytes |")
    print("|---|---|---|---|")
    for name in variants:
        med = statistics.median(per_tokens[name])
        rows[name] = ([firsts[name]], med)
        compiles = ""
        if name in jitted:
            compiles = f", {thunder_ir.cache_misses(jitted[name].__dict__['_forward_jit'])}"\
                       " programs"
        print(f"| {name}{compiles} | {med * 1e3:.2f} ms ({min(per_tokens[name]) * 1e3:.2f}) "
              f"| {med / eager_token:.2f}x | {sizes[name] / 2**20:.1f} MiB |", flush=True)

    def ratio(name: str, ref_name: str) -> str:
        if name not in rows or ref_name not in rows:
            return ""
        (t, p), (rt, rp) = rows[name], rows[ref_name]
        return (f"{name} / {ref_name}: total {t[0] / rt[0]:.2f}x, "
                f"per token {p / rp:.2f}x")

    print("ratios (below 1.00x is faster):")
    for bits in a.quantize:
        for r in ("eager", "thunder_ir dynamic", f"torchao int{bits} + torch.compile"):
            for v in (f"thunder_ir int{bits}", f"thunder_ir int{bits} bf16 compute"):
                line = ratio(v, r)
                if line:
                    print("  " + line)
    for name, refs in (("thunder_ir dynamic", ("eager", "torch.compile")),
                       ("thunder_ir static", ("eager static", "torch.compile static"))):
        for r in refs:
            line = ratio(name, r)
            if line:
                print("  " + line)


def linear_bytes(owner: Any) -> int:
    """Bytes kept for the linear weights of the model behind ``owner`` (a model, or a
    jitted one): a weight `QuantizeWeights` quantized counts as the storage kept for it
    (``thunder_ir.dialects.quant.QUANTIZED``: int8 codes and scales; int4 the kernel's
    packed codes, scales and zeros) plus what is left of its float storage (nothing after
    ``free_float_weights``); a torchao weight as its ``qdata`` and ``scale``; any other as
    its storage."""
    from thunder_ir.dialects import quant as Q

    module = getattr(owner, "_model", owner)
    if not isinstance(module, torch.nn.Module):
        return 0

    def nbytes(t: torch.Tensor) -> int:
        return t.untyped_storage().nbytes() if t.device.type != "meta" else 0

    total = 0
    for mod in module.modules():
        w = getattr(mod, "weight", None)
        if not isinstance(mod, torch.nn.Linear) or not isinstance(w, torch.Tensor):
            continue
        kept = Q.QUANTIZED.entries.get(id(w))
        if kept is not None and kept[0]() is w:
            total += sum(nbytes(t) for t in kept[3]) + nbytes(w)
        elif hasattr(w, "qdata"):
            total += nbytes(w.qdata) + nbytes(w.scale)
        else:
            total += nbytes(w)
    return total


def add_quantized(variants: dict[str, Any], jitted: dict[str, Any], model: torch.nn.Module,
                  bits: int, group_size: int, no_compile: bool) -> None:
    """The variants of one weight-only scheme: its dequantized eager reference, thunder_ir
    with `QuantizeWeights`, and (int8) torchao eager and under torch.compile."""
    from thunder_ir.dialects import quant as Q
    from thunder_ir.transforms import QuantizeWeights

    tag = f"int{bits}"
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for mod in ref.modules():
            if isinstance(mod, torch.nn.Linear) and Q.takes(bits, group_size,
                                                            tuple(mod.weight.shape),
                                                            mod.weight.dtype):
                w = mod.weight
                mod.weight.copy_(Q.int8_dequantize(*Q.int8_qparams(w)) if bits == 8 else
                                 Q.int4_dequantize(*Q.int4_qparams(w, group_size), group_size))
    variants[f"eager dequantized {tag}"] = (lambda: ref.generate, False)

    def thunder() -> Callable[..., torch.Tensor]:
        transform = QuantizeWeights(bits=bits, group_size=group_size)
        jitted[f"thunder_ir {tag}"] = thunder_ir.jit(copy.deepcopy(model), tiered=False,
                                                    transforms=[transform])
        return jitted[f"thunder_ir {tag}"].generate  # type: ignore[no-any-return]

    variants[f"thunder_ir {tag}"] = (thunder, False)

    def thunder_bf16() -> Callable[..., torch.Tensor]:
        transform = QuantizeWeights(bits=bits, group_size=group_size,
                                    compute_dtype=torch.bfloat16)
        name = f"thunder_ir {tag} bf16 compute"
        jitted[name] = thunder_ir.jit(copy.deepcopy(model), tiered=False,
                                      transforms=[transform])
        return jitted[name].generate  # type: ignore[no-any-return]

    variants[f"thunder_ir {tag} bf16 compute"] = (thunder_bf16, False)
    if bits != 8:
        return
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".venv", "torchao"))
    try:  # (scripts/setup.sh installs torchao there, out of transformers' way)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torchao.quantization import Int8WeightOnlyConfig, quantize_
    except ImportError as e:
        print(f"torchao variants skipped: {e}")
        return

    def torchao(compiled: bool) -> Callable[..., torch.Tensor]:
        m = copy.deepcopy(model)
        quantize_(m, Int8WeightOnlyConfig())
        if compiled:
            torch._dynamo.reset()
            m.forward = torch.compile(m.forward)
        return m.generate  # type: ignore[no-any-return]

    variants["torchao int8"] = (lambda: torchao(False), False)
    if not no_compile:
        variants["torchao int8 + torch.compile"] = (lambda: torchao(True), False)


if __name__ == "__main__":
    main()
