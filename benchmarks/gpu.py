"""GPU benchmark: eager, torch.compile and ``thunder_ir.jit`` (default executors: on CUDA
SDPA, Triton, torch) in one process, on one CUDA device.

Sections (each writes its figures to the JSON as soon as it has them, and one that fails
records its error and lets the others run):

* ``llama``: the Llama-style model of ``tests/models.py`` (8 layers, bf16; 2048 wide, 16
  heads in 4 query groups, vocabulary 32000: about 0.5 B parameters), a training step
  (forward, cross-entropy, backward, Adam) on batch 8 x 1024 tokens. Each variant's first
  step (trace, compile and kernel builds included; Inductor's and Triton's caches start
  empty), then the steady steps timed interleaved (``harness.time_interleaved``: rounds in
  which every variant runs in turn, CUDA synchronized after each sample; eager and
  thunder_ir are also timed before torch.compile compiles, as ``llama_before_compile``,
  so that a compile that runs out of time loses no ratio to eager). Also peak memory over
  a variant's first steps, tokens per second, and the model FLOP rate (6 x parameters x
  tokens, attention left out).
* ``overhead``: the cached call of ``x + 1`` on a (4,) CUDA tensor (what a call costs
  besides its kernels).
* ``mlp``: the seed's MLP (``examples/train_mnist.py``'s, 784-784-784-784-28-10, dropout
  0.1, Adam), a training step at batch 8 on random digits-shaped data.
* ``dynamic``: the Llama-style model (``--dyn-layers``, no grad) called at ``--dyn-calls``
  random lengths (1/16 to 1/2 of ``--seq``, batch ``--batch``/2): each variant's total
  time (compiles and kernel builds included), a second pass (steady), thunder_ir's
  compiles with the default cache (symbolic from the second length: Triton kernels that
  take sizes as arguments) and with ``cache="static"``.

Prints each figure and the ratios of thunder_ir to eager and to torch.compile (below 1.00x
is faster), and the first-step ratio torch.compile / thunder_ir. Usage::

    python benchmarks/gpu.py [--json PATH] [--traces PATH] [--sections llama,overhead,mlp,dynamic]
                             [--layers 8 --embd 2048 --heads 16 --groups 4 --seq 1024
                              --batch 8 --vocab 32000] [--seconds 8 --rounds 8] [--smoke]

``--smoke`` (or ``GPU_CHECK_SMOKE=1``, or no CUDA device) runs tiny sizes for a second
each, on the CPU where there is no CUDA: every code path but CUDA's, for rehearsing
``scripts/gpu_check.sh``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

# Cold caches, so that first steps include every compile (set before torch imports).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="gpu-bench-inductor-"))
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="gpu-bench-triton-"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from harness import time_interleaved  # noqa: E402

import thunder_ir  # noqa: E402

VARIANTS = ("eager", "thunder_ir", "torch.compile")


class Bench:
    """Collects results, writes them to the JSON after every change, syncs the device."""

    def __init__(self, path: str | None, device: str) -> None:
        self.path, self.device = path, device
        self.results: dict[str, Any] = {}

    def put(self, section: str, key: str, value: Any) -> None:
        self.results.setdefault(section, {})[key] = value
        self.save()

    def save(self) -> None:
        if self.path:
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.results, f, indent=2, default=str)
            os.replace(tmp, self.path)

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def first(self, section: str, name: str, step: Callable[[], Any]) -> Any:
        """Times ``step()`` once (synchronized), records it as ``name``'s first step."""
        self.sync()
        t = time.perf_counter()
        out = step()
        self.sync()
        s = time.perf_counter() - t
        self.put(section, f"first_s.{name}", s)
        print(f"  first step {name:>14}: {s:8.2f} s", flush=True)
        return out

    def steady(
        self,
        section: str,
        steps: dict[str, Callable[[], Any]],
        seconds: float,
        rounds: int,
        unit: str = "ms",
    ) -> dict[str, float]:
        """Interleaved steady timing; records and prints each variant and the ratios."""
        timings, _ = time_interleaved(steps, self.device, seconds, rounds)
        ms = {n: t.ms for n, t in timings.items()}
        scale = {"ms": 1.0, "us": 1e3}[unit]
        for n, v in ms.items():
            self.put(section, f"steady_{unit}.{n}", v * scale)
            print(f"  steady {n:>18}: {v * scale:10.3f} {unit}", flush=True)
        ratios = {}
        for base in ("eager", "torch.compile"):
            if "thunder_ir" in ms and base in ms:
                ratios[f"thunder_ir/{base}"] = ms["thunder_ir"] / ms[base]
        for k, v in ratios.items():
            self.put(section, f"ratio.{k}", v)
            print(f"  {k}: {v:.3f}x", flush=True)
        return ms


def memory_peak(device: str) -> Callable[[], float | None]:
    """Starts a peak-memory window; the returned function gives GiB above its start."""
    if device != "cuda":
        return lambda: None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    return lambda: (torch.cuda.max_memory_allocated() - base) / 2**30


def compiled(variant: str, model: Any) -> Any:
    if variant == "thunder_ir":
        return thunder_ir.jit(model, executors=thunder_ir.get_default_executors())
    if variant == "torch.compile":
        return torch.compile(model)
    return model


# --------------------------------------------------------------------------- llama


def llama_config(a: argparse.Namespace, layers: int) -> Any:
    """The Llama-style model's config from the command line, with ``layers`` layers."""
    from models import Config

    return Config(
        n_layer=layers,
        n_embd=a.embd,
        n_head=a.heads,
        n_query_groups=a.groups,
        intermediate_size=a.intermediate or int(a.embd * 2.75),
        block_size=a.seq,
        vocab_size=a.vocab,
    )


def llama(b: Bench, a: argparse.Namespace) -> None:
    from models import LlamaGPT

    dev, dtype = b.device, torch.bfloat16
    cfg = llama_config(a, a.layers)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), generator=g).to(dev)
    tgt = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), generator=g).to(dev)
    tokens = a.batch * a.seq
    print(
        f"llama: {cfg.n_layer} layers x {cfg.n_embd}, {cfg.n_head} heads in "
        f"{cfg.n_query_groups} groups, MLP {cfg.intermediate_size}, vocabulary "
        f"{cfg.vocab_size}; batch {a.batch} x {a.seq} tokens, bf16",
        flush=True,
    )
    b.put("llama", "config", {**vars(cfg), "batch": a.batch, "dtype": "bf16"})
    steps: dict[str, Callable[[], Any]] = {}
    losses: dict[str, float] = {}

    def build(v: str) -> None:
        """``v``'s model and optimizer; its first step timed, two more, its peak memory."""
        torch.manual_seed(0)
        model = LlamaGPT(cfg).to(dev, dtype)
        if v == "eager":
            params = sum(p.numel() for p in model.parameters())
            b.put("llama", "parameters", params)
            print(f"  {params / 1e6:.0f} M parameters", flush=True)
        fn = compiled(v, model)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)

        def step() -> torch.Tensor:
            logits = fn(idx)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss.detach()

        peak = memory_peak(dev)
        losses[v] = float(b.first("llama", v, step))
        step()
        step()
        b.put("llama", f"peak_gib.{v}", peak())
        b.put("llama", f"first_loss.{v}", losses[v])
        # the same weights and data: the same first loss, up to bf16
        if abs(losses[v] - losses["eager"]) > 2e-2 * max(1.0, abs(losses["eager"])):
            raise AssertionError(f"first loss {v} {losses[v]} != eager {losses['eager']}")
        steps[v] = step
        if v == "thunder_ir":
            thunder_ir_details(b, fn, a.traces)

    build("eager")
    build("thunder_ir")
    # Without torch.compile first: these figures survive a compile that runs out of time.
    b.steady("llama_before_compile", steps, a.seconds / 2, a.rounds)
    build("torch.compile")
    r = b.results["llama"]
    ratio = r["first_s.torch.compile"] / r["first_s.thunder_ir"]
    b.put("llama", "ratio.first_s.torch.compile/thunder_ir", ratio)
    print(f"  first step: torch.compile / thunder_ir = {ratio:.2f}x", flush=True)
    ms = b.steady("llama", steps, a.seconds, a.rounds)
    params = r["parameters"]
    for v, t in ms.items():
        b.put("llama", f"tokens_per_s.{v}", tokens / (t / 1e3))
        b.put("llama", f"model_tflops.{v}", 6 * params * tokens / (t / 1e3) / 1e12)


def thunder_ir_details(b: Bench, jm: Any, traces: str | None) -> None:
    """The executors, Triton's interpreter fallbacks and (to ``traces``) the traces."""
    ex = thunder_ir.get_default_executors()
    b.put("llama", "thunder_ir_executors", [e.name for e in ex])
    triton = [e for e in ex if e.name == "triton"]
    if triton:
        b.put("llama", "triton_fallbacks", list(triton[0].fallbacks))
    if traces:
        with open(traces, "w") as f:
            f.write("# thunder_ir: the Llama training step's forward, as it ran\n")
            f.write(str(thunder_ir.last_traces(jm)[-1]))
            f.write("\n# ... and its backward\n")
            f.write(str(thunder_ir.last_backward_traces(jm)[-1]))
            f.write("\n# pass times (s)\n")
            for t in thunder_ir.last_traces(jm):
                f.write(f"#   {t.pass_name}: {t.duration_s}\n")


# --------------------------------------------------------------------------- overhead


def overhead(b: Bench, a: argparse.Namespace) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    x = torch.ones(4, device=b.device)
    print("overhead: cached call of x + 1 on a (4,) tensor", flush=True)
    calls = {}
    for v in VARIANTS:
        fn = compiled(v, f)
        b.first("overhead", v, lambda fn=fn: fn(x))
        assert torch.equal(fn(x), f(x)), v
        calls[v] = lambda fn=fn: fn(x)
    b.steady("overhead", calls, a.seconds / 4, a.rounds, unit="us")


# --------------------------------------------------------------------------- mlp


def mlp(b: Bench, a: argparse.Namespace) -> None:
    spec = importlib.util.spec_from_file_location(
        "train_mnist", os.path.join(ROOT, "examples", "train_mnist.py")
    )
    assert spec is not None and spec.loader is not None
    mnist = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mnist)
    dev = b.device
    g = torch.Generator().manual_seed(0)
    data = torch.rand(a.mlp_batch, 784, generator=g).to(dev)
    targets = torch.randint(0, 10, (a.mlp_batch,), generator=g).to(dev)
    print(f"mlp: the seed's MLP, training step at batch {a.mlp_batch}", flush=True)
    steps = {}
    for v in VARIANTS:
        torch.manual_seed(0)
        model = mnist.make_mlp().to(dev).train()
        fn = compiled(v, model)
        opt = torch.optim.Adam(model.parameters())

        def step(fn: Any = fn, opt: Any = opt) -> torch.Tensor:
            loss = F.cross_entropy(fn(data), targets)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.detach()

        b.first("mlp", v, step)
        steps[v] = step
    b.steady("mlp", steps, a.seconds / 2, a.rounds)


# --------------------------------------------------------------------------- dynamic


def dynamic(b: Bench, a: argparse.Namespace) -> None:
    """Inference at a new length on every call: each variant's total time over the calls
    (compiles and kernel builds included) and a second pass over the same lengths (steady),
    with thunder_ir's compiles; every variant's outputs against eager's."""
    from models import LlamaGPT

    dev, dtype = b.device, torch.bfloat16
    cfg = llama_config(a, a.dyn_layers)
    g = torch.Generator().manual_seed(1)
    lengths = [int(t) for t in torch.randint(a.seq // 16, a.seq // 2 + 1, (a.dyn_calls,),
                                             generator=g)]
    inputs = [torch.randint(0, cfg.vocab_size, (a.batch // 2 or 1, t), generator=g).to(dev)
              for t in lengths]
    print(f"dynamic: {cfg.n_layer} layers, no grad, bf16, batch {a.batch // 2 or 1}, "
          f"lengths {lengths}", flush=True)
    b.put("dynamic", "lengths", lengths)
    torch.manual_seed(0)
    model = LlamaGPT(cfg).to(dev, dtype).eval()
    variants = {
        "eager": model,
        "thunder_ir": thunder_ir.jit(model),
        "thunder_ir static": thunder_ir.jit(model, cache="static"),
        "torch.compile": torch.compile(model),
    }
    want: list[torch.Tensor] = []
    for v, fn in variants.items():
        with torch.no_grad():
            for rep in ("total", "steady"):
                outs = []
                b.sync()
                t0 = time.perf_counter()
                for x in inputs:
                    outs.append(fn(x))
                b.sync()
                s = time.perf_counter() - t0
                b.put("dynamic", f"{rep}_s.{v}", s)
                print(f"  {rep:>6} {v:>18}: {s:8.3f} s", flush=True)
        if v == "eager":
            want = outs
        else:
            for o, w in zip(outs, want, strict=True):
                torch.testing.assert_close(o.float(), w.float(), rtol=2e-2, atol=2e-2)
        if v.startswith("thunder_ir"):
            b.put("dynamic", f"compiles.{v}", thunder_ir.cache_misses(fn))
            b.put("dynamic", f"symbolic_failures.{v}", fn._compiled.symbolic_failures)
            print(f"  {v}: {thunder_ir.cache_misses(fn)} compiles", flush=True)
    r = b.results["dynamic"]
    for base in ("eager", "thunder_ir static", "torch.compile"):
        for rep in ("total", "steady"):
            k = f"ratio.{rep}_s.thunder_ir/{base}"
            b.put("dynamic", k, r[f"{rep}_s.thunder_ir"] / r[f"{rep}_s.{base}"])
            print(f"  {k}: {r[k]:.3f}x", flush=True)


SECTIONS = {"llama": llama, "overhead": overhead, "mlp": mlp, "dynamic": dynamic}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the results here (rewritten after each figure)")
    ap.add_argument("--traces", help="write the thunder_ir Llama step's traces here")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--embd", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--mlp-batch", type=int, default=8)
    ap.add_argument("--dyn-layers", type=int, default=2, help="dynamic: the model's layers")
    ap.add_argument("--dyn-calls", type=int, default=8, help="dynamic: calls (lengths)")
    ap.add_argument(
        "--seconds",
        type=float,
        default=8.0,
        help="steady timing per variant, all rounds together (llama)",
    )
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, a second each (on the CPU where there is no CUDA)",
    )
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    if a.smoke or os.environ.get("GPU_CHECK_SMOKE") == "1" or not cuda:
        a.smoke = True
        a.layers, a.embd, a.heads, a.groups, a.intermediate = 2, 64, 4, 2, 172
        a.seq, a.batch, a.vocab, a.seconds, a.rounds = 32, 2, 96, 1.0, 2
    b = Bench(a.json, "cuda" if cuda else "cpu")
    env = {
        "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "smoke": a.smoke,
        "executors": [e.name for e in thunder_ir.get_default_executors()],
    }
    for mod in ("triton", "transformers", "xdsl"):
        try:
            env[mod] = str(__import__(mod).__version__)
        except (ImportError, AttributeError):
            env[mod] = None
    b.results["env"] = env
    b.save()
    print(f"# {json.dumps(env, default=str)}", flush=True)
    failed = []
    for name in a.sections.split(","):
        t = time.perf_counter()
        try:
            SECTIONS[name](b, a)
        except Exception as e:  # one section's failure must not lose the others' figures
            traceback.print_exc()
            b.put(name, "error", f"{type(e).__name__}: {e}"[:2000])
            failed.append(name)
        b.put(name, "section_s", time.perf_counter() - t)
        if cuda:
            torch.cuda.empty_cache()
    print(f"# sections failed: {failed or 'none'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
