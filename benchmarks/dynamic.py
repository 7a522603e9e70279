"""Dynamic-shape benchmark, from one run: (1) inference calls with a new sequence length on
almost every call; (2) greedy generation with a growing KV cache.

Part (1):

The Llama-style test model (`tests/models.py`) runs ``--calls`` forward calls (no grad)
with lengths drawn from 16..``--max-len`` (the same draws for every variant, interleaved
round by round so that machine noise hits all alike). Variants:

* ``eager``;
* ``torch.compile`` (default: recompiles once, then marks the length dynamic) and
  ``torch.compile dynamic=True``;
* ``thunder_ir static`` (``cache="static"``: a program per length);
* ``thunder_ir auto`` (the default cache: the second length compiles a symbolic program
  that serves every later one).

Each variant's outputs are checked against eager's. The table gives each variant's total
seconds for all calls (compiles included), its steady per-call milliseconds (the median
of a second pass over the same lengths, everything compiled), the compiles it made, and
the ratios to eager and to torch.compile.

Part (2): a tiny Hugging Face Llama (``benchmarks/generate.py``'s) generates ``--tokens``
tokens greedily from a 16-token prompt with the default ``DynamicCache``, once per
variant (compiles included): eager, torch.compile (of ``model.forward``, default and
``dynamic=True``), thunder_ir with ``cache="static"`` (a program per cache length) and
with the default cache (the prefill, then one symbolic decode step). Every variant's tokens
must equal eager's.

Part (3), ``--compile-cost``: what a symbolic compile costs against a static one. Each
family (vision blocks and models with windows, shifted windows and unfolding, and a tiny
Hugging Face Llama) is jitted and called at batch 2 (the first, static compile) and then
at batch 3 (the second size: the symbolic compile that serves every later batch); the
table gives both compile times (the call's seconds), their ratio, the same in this
process's CPU seconds (``time.process_time``, which other load on a shared machine does
not inflate), and the programs made after a third size (which must reuse the symbolic
one). Outputs are checked against
eager's. The families run after a warm-up compile, so that neither pays a first import.
Usage::

    OMP_NUM_THREADS=1 python benchmarks/dynamic.py [--calls 50] [--max-len 256]
                                                   [--tokens 64] [--no-compile]
    OMP_NUM_THREADS=1 python benchmarks/dynamic.py --compile-cost [--families a,b]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

import thunder_ir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from models import Config, LlamaGPT


def _variants(model: torch.nn.Module, compile_: bool) -> dict[str, Callable[..., Any]]:
    out: dict[str, Callable[..., Any]] = {"eager": model}
    if compile_:
        torch._dynamo.reset()
        out["torch.compile"] = torch.compile(model)
        out["torch.compile dynamic=True"] = torch.compile(model, dynamic=True)
    out["thunder_ir static"] = thunder_ir.jit(model, cache="static", tiered=False)
    out["thunder_ir auto"] = thunder_ir.jit(model, tiered=False)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=64, help="part (2): new tokens; 0: skip")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--compile-cost", action="store_true",
                    help="part (3) only: first and second-size compile per family")
    ap.add_argument("--families", default="", help="part (3): a comma-separated subset")
    args = ap.parse_args()
    if args.compile_cost:
        compile_cost([f for f in args.families.split(",") if f])
        return
    torch.manual_seed(0)
    cfg = Config(block_size=args.max_len, n_layer=2, n_embd=128, n_head=4,
                 intermediate_size=344, vocab_size=512)
    model = LlamaGPT(cfg).eval()
    rng = random.Random(0)
    lengths = [rng.randint(16, args.max_len) for _ in range(args.calls)]
    inputs = [torch.randint(0, cfg.vocab_size, (2, n)) for n in lengths]
    variants = _variants(model, not args.no_compile)
    total = dict.fromkeys(variants, 0.0)
    steady: dict[str, list[float]] = {k: [] for k in variants}
    with torch.no_grad():
        refs = [model(x) for x in inputs]
        for timing in (total, None):
            for x, ref in zip(inputs, refs, strict=True):
                for name, fn in variants.items():  # interleaved: one call each, in turn
                    t0 = time.perf_counter()
                    out = fn(x)
                    dt = time.perf_counter() - t0
                    if timing is not None:
                        timing[name] += dt
                        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
                    else:
                        steady[name].append(dt)
    compiles = {name: (thunder_ir.cache_misses(fn) if name.startswith("thunder_ir") else "")
                for name, fn in variants.items()}
    print(f"{args.calls} calls, lengths 16..{args.max_len}, batch 2, Llama-style model "
          f"({cfg.n_layer} layers, {cfg.n_embd} wide); torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")
    ref_c = "torch.compile" if "torch.compile" in variants else None
    print(f"{'variant':28} {'total s':>8} {'steady ms':>10} {'compiles':>9} "
          f"{'total/eager':>12}" + (f" {'total/compile':>14}" if ref_c else ""))
    for name in variants:
        med = statistics.median(steady[name]) * 1e3
        row = (f"{name:28} {total[name]:8.2f} {med:10.2f} {compiles[name]!s:>9} "
               f"{total[name] / total['eager']:12.2f}")
        if ref_c:
            row += f" {total[name] / total[ref_c]:14.2f}"
        print(row)
    auto, static = (statistics.median(steady[k]) for k in ("thunder_ir auto",
                                                           "thunder_ir static"))
    print(f"steady per call, symbolic / static program: {auto / static:.3f}")
    if args.tokens:
        generation(args.tokens, not args.no_compile)


def generation(tokens: int, compile_: bool) -> None:
    """Part (2): greedy generation with a dynamic KV cache, one run per variant."""
    import copy
    import warnings

    from generate import run, tiny_llama

    warnings.filterwarnings("ignore")
    model = tiny_llama(2, 256)
    ids = torch.randint(1, 1024, (1, 16), generator=torch.Generator().manual_seed(1))
    makers: dict[str, Callable[[], tuple[Callable[..., torch.Tensor], Any]]] = {
        "eager": lambda: (model.generate, None)}

    def compiled(dynamic: bool | None) -> tuple[Callable[..., torch.Tensor], Any]:
        torch._dynamo.reset()
        m = copy.deepcopy(model)
        m.forward = torch.compile(m.forward, dynamic=dynamic)
        return m.generate, None

    def thunder(cache: str) -> tuple[Callable[..., torch.Tensor], Any]:
        jm = thunder_ir.jit(copy.deepcopy(model), cache=cache, tiered=False)
        return jm.generate, jm

    if compile_:
        makers["torch.compile"] = lambda: compiled(None)
        makers["torch.compile dynamic=True"] = lambda: compiled(True)
    makers["thunder_ir static"] = lambda: thunder("static")
    makers["thunder_ir auto"] = lambda: thunder("auto")
    print(f"\ngeneration: tiny HF Llama (2 layers, 256 wide), prompt 16, {tokens} new "
          "tokens, greedy, DynamicCache, one run each (compiles included)")
    print(f"{'variant':28} {'total s':>8} {'ms/token':>9} {'compiles':>9} {'total/eager':>12}")
    ref, eager_total = None, 0.0
    for name, make in makers.items():
        gen, jm = make()
        out, total, first = run(gen, ids, tokens, False)
        if ref is None:
            ref, eager_total = out, total
        elif not torch.equal(out, ref):
            raise SystemExit(f"{name}: tokens differ from eager's")
        per_token = (total - first) / max(tokens - 1, 1) * 1e3
        n = thunder_ir.cache_misses(jm) if jm is not None else ""
        print(f"{name:28} {total:8.2f} {per_token:9.2f} {n!s:>9} {total / eager_total:12.2f}")


def _families() -> dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]]:
    """Part (3)'s families: name -> (model maker, one sample's input shape)."""
    from torchvision_ops import import_vision

    tv, timm = import_vision()
    from timm.models import swin_transformer as timm_swin
    from timm.models import swin_transformer_v2 as timm_swin2
    from torchvision.models import swin_transformer as tv_swin
    from transformers import LlamaConfig, LlamaForCausalLM

    def llama() -> torch.nn.Module:
        cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
        return LlamaForCausalLM(cfg)

    return {
        "tv_swin_block": (lambda: tv_swin.SwinTransformerBlock(
            dim=32, num_heads=2, window_size=[4, 4], shift_size=[2, 2]), (8, 8, 32)),
        "tv_swin": (lambda: tv.models.SwinTransformer(
            patch_size=[4, 4], embed_dim=16, depths=[2], num_heads=[2], window_size=[4, 4],
            num_classes=10), (3, 32, 32)),
        "timm_swin": (lambda: timm_swin.SwinTransformer(
            img_size=32, patch_size=4, window_size=4, embed_dim=16, depths=(2, 1),
            num_heads=(1, 2), num_classes=10), (3, 32, 32)),
        "timm_swinv2": (lambda: timm_swin2.SwinTransformerV2(
            img_size=32, patch_size=4, window_size=4, embed_dim=16, depths=(2, 1),
            num_heads=(1, 2), num_classes=10), (3, 32, 32)),
        "timm_maxvit": (lambda: timm.create_model(
            "maxvit_nano_rw_256", pretrained=False, img_size=64, num_classes=10), (3, 64, 64)),
        "timm_mobilevitv2": (lambda: timm.create_model(
            "mobilevitv2_050", pretrained=False, num_classes=10), (3, 64, 64)),
        "hf_llama": (llama, (-16,)),  # (token ids: a length-16 sequence)
    }


def compile_cost(only: list[str]) -> None:
    """Part (3): first (static) and second-size (symbolic) compile per family."""
    import warnings

    warnings.filterwarnings("ignore")
    families = _families()
    unknown = set(only) - set(families)
    if unknown:
        raise SystemExit(f"unknown families {sorted(unknown)} (known: {sorted(families)})")
    warm = thunder_ir.jit(torch.nn.Linear(4, 4), tiered=False)  # (first imports, both paths)
    with torch.no_grad():
        for n in (2, 3):
            warm(torch.randn(n, 4))
    print(f"symbolic compile cost: batch 2 (static), then 3 (symbolic), then 5; torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads, "
          f"{platform.processor() or platform.machine()}")
    print(f"{'family':18} {'first s':>8} {'second s':>9} {'second/first':>13} "
          f"{'first cpu s':>12} {'second cpu s':>13} {'cpu ratio':>10} {'programs':>9}")
    for name, (make, shape) in families.items():
        if only and name not in only:
            continue
        torch.manual_seed(0)
        model = make().eval()
        jm = thunder_ir.jit(model, tiered=False)

        times, cpu = [], []
        with torch.no_grad():
            for n in (2, 3, 5):
                x = (torch.randint(0, 256, (n, -shape[0])) if shape[0] < 0
                     else torch.randn(n, *shape))
                t0, c0 = time.perf_counter(), time.process_time()
                out = jm(x)
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                ref = model(x)
                got, want = (out.logits, ref.logits) if hasattr(ref, "logits") else (out, ref)
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        print(f"{name:18} {times[0]:8.2f} {times[1]:9.2f} {times[1] / times[0]:13.1f} "
              f"{cpu[0]:12.3f} {cpu[1]:13.3f} {cpu[1] / cpu[0]:10.1f} "
              f"{thunder_ir.cache_misses(jm):>9}")


if __name__ == "__main__":
    main()
