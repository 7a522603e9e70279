#!/usr/bin/env bash
# The GPU check (issue 34): one command on a CUDA machine, from the repository root.
#
#   bash scripts/gpu_check.sh [STEP ...]      steps: install cuda bench interp (the default,
#                                             in this order); suite (the whole suite, with
#                                             TRITON_INTERPRET=0, only when named)
#
# install  the packages the machine lacks, from the wheels in .whl/ (xDSL and its
#          dependencies, expecttest) into /tmp/site, never torch or triton; thunder_ir
#          itself from the checkout (PYTHONPATH; thunder_ir/__init__.py maps dialects/,
#          passes/, lowering/, runtime/), with its entry points;
# cuda     the CUDA tests with TRITON_INTERPRET=0, so that Triton compiles for the device:
#          tests/test_cuda.py (OpInfo, Triton kernels, the Llama model's fused regions and
#          training, Hugging Face families; float32 and bfloat16) and the CUDA parts of
#          tests/test_sdpa_executor.py and tests/test_nvfuser_executor.py;
# bench    benchmarks/gpu.py: the Llama-style training step (8 layers, bf16, 8 x 1024
#          tokens) under eager, torch.compile and thunder_ir, the cached-call overhead and
#          the seed's MLP;
# interp   the CPU tests of the Triton executor and of thunder_ir.extend, in Triton's
#          interpreter as CI runs them, on this CUDA machine (where Triton is a default
#          executor).
#
# Everything goes under $OUT (a temporary folder when unset): gpu_check.log (this
# output), pytest_cuda.log, bench.log, bench.json, llama_traces.txt, pytest_interp.log
# (and pytest_suite.log) and results.json (each step's exit status, time and pytest
# summary, rewritten after every step, with the benchmark's figures). Each step runs under
# `timeout`, so a hang costs only its own budget: under 8 minutes with every default step
# at its limit (GPU_CHECK_T_CUDA, _BENCH, _INTERP, _SUITE seconds), about 5 expected.
#
# GPU_CHECK_SMOKE=1 (or a machine without CUDA) runs the benchmark at tiny sizes: a
# rehearsal on the CPU, where the CUDA tests skip. PYTHON picks the interpreter (python3).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d -t gpu_check.XXXXXX)}
mkdir -p "$OUT"
SITE=${GPU_CHECK_SITE:-/tmp/site}
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(install cuda bench interp)
T_CUDA=${GPU_CHECK_T_CUDA:-180}
T_BENCH=${GPU_CHECK_T_BENCH:-200}
T_INTERP=${GPU_CHECK_T_INTERP:-60}
T_SUITE=${GPU_CHECK_T_SUITE:-300}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# Cold compiler caches shared by the steps of this run (first steps include compiles).
CACHE=$(mktemp -d -t gpu_check_cache.XXXXXX)
export TORCHINDUCTOR_CACHE_DIR=$CACHE/inductor TRITON_CACHE_DIR=$CACHE/triton
if [ -z "${GPU_CHECK_TEED:-}" ]; then  # all output to $OUT/gpu_check.log too
  GPU_CHECK_TEED=1 OUT=$OUT bash "$0" "$@" 2>&1 | tee -a "$OUT/gpu_check.log"
  exit "${PIPESTATUS[0]}"
fi
echo "== gpu_check $(date -u +%FT%TZ) steps: ${STEPS[*]} OUT=$OUT"

# results.json: record NAME RC SECONDS [LOG] (adds the log's pytest summary line).
record() {
  "$PY" - "$OUT/results.json" "$@" <<'EOF'
import json, os, re, sys
path, name, rc, secs = sys.argv[1:5]
log = sys.argv[5] if len(sys.argv) > 5 else None
res = json.load(open(path)) if os.path.exists(path) else {}
entry = {"rc": int(rc), "seconds": round(float(secs), 1), "timed_out": rc in ("124", "137")}
if log and os.path.exists(log):
    text = open(log, errors="replace").read()
    lines = re.findall(r"^=*\s*((?:\d+ \w+(?:, )?)+ in [\d.]+s.*?|no tests ran.*?)\s*=*$",
                       text, re.M)
    if lines:
        entry["summary"] = lines[-1]
    entry["failed"] = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", text, re.M)))[:200]
bench = os.path.join(os.path.dirname(path), "bench.json")
if name == "bench" and os.path.exists(bench):
    entry["figures"] = json.load(open(bench))
res[name] = entry
json.dump(res, open(path, "w"), indent=2)
EOF
}

# run NAME TIMEOUT LOG CMD...: the command under timeout, its output to LOG and here.
run_step() {
  local name=$1 limit=$2 log=$3
  shift 3
  echo "== $name (at most ${limit}s): $*"
  local t0=$SECONDS
  timeout -k 15 "$limit" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  echo
  echo "== $name: exit $rc after $((SECONDS - t0))s$([ $rc -eq 124 ] && echo ' (timed out)')"
  record "$name" "$rc" "$((SECONDS - t0))" "$log"
  return 0
}

# pytest options: per-test timeout and xdist where the plugins exist.
pytest_opts() {
  local workers=$1
  local opts=(-q -rfEsx -p no:cacheprovider)
  "$PY" -c "import pytest_timeout" 2>/dev/null && opts+=(--timeout=240)
  if [ "$workers" -gt 1 ] && "$PY" -c "import xdist" 2>/dev/null; then
    opts+=(-n "$workers")
  fi
  echo "${opts[@]}"
}

has() { [[ " ${STEPS[*]} " == *" $1 "* ]]; }

if has install; then
  t0=$SECONDS
  (
    set -e
    if compgen -G ".whl/*.whl" >/dev/null; then
      if ls .whl | grep -Eiq '^(torch|triton|nvidia)[-_]'; then
        echo "refusing: .whl holds torch, triton or nvidia wheels"; exit 2
      fi
      "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/*.whl
      echo "installed into $SITE: $(ls .whl | tr '\n' ' ')"
    else
      echo "no .whl/ wheels: using what the machine has"
    fi
    # thunder_ir's entry points (torch.compile(backend="thunder_ir"), thunder-ir-opt) for
    # the checkout on PYTHONPATH, without building a wheel.
    mkdir -p "$SITE/thunder_ir-0.1.0.dist-info"
    printf 'Metadata-Version: 2.1\nName: thunder-ir\nVersion: 0.1.0\n' \
      > "$SITE/thunder_ir-0.1.0.dist-info/METADATA"
    printf '[console_scripts]\nthunder-ir-opt = thunder_ir.opt:main\n\n[torch_dynamo_backends]\nthunder_ir = thunder_ir.dynamo.compiler:thunder_backend\n' \
      > "$SITE/thunder_ir-0.1.0.dist-info/entry_points.txt"
  )
  rc=$?
  record install "$rc" "$((SECONDS - t0))"
  [ "$rc" -ne 0 ] && { echo "== install failed ($rc)"; exit "$rc"; }
fi
export PYTHONPATH=$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}

echo "== environment"
nvidia-smi -L 2>/dev/null || echo "(no nvidia-smi)"
"$PY" - <<'EOF' || { echo "== thunder_ir does not import"; exit 3; }
import importlib, os, sys
import torch
print("python", sys.version.split()[0], "| torch", torch.__version__, "| cuda",
      torch.version.cuda, "| device",
      torch.cuda.get_device_name() if torch.cuda.is_available() else "none")
for m in ("triton", "xdsl", "transformers", "expecttest", "hypothesis",
          "pytest", "xdist", "pytest_timeout", "typing_extensions"):
    try:
        mod = importlib.import_module(m)
        print(f"  {m} {getattr(mod, '__version__', '?')} at {os.path.dirname(mod.__file__)}")
    except ImportError as e:
        print(f"  {m}: missing ({e})")
import thunder_ir, thunder_ir.dialects
print("thunder_ir from", os.path.dirname(thunder_ir.__file__), "| dialects from",
      os.path.dirname(thunder_ir.dialects.__file__))
print("default executors:", [e.name for e in thunder_ir.get_default_executors()])
from importlib.metadata import entry_points
print("torch_dynamo_backends:", [e.name for e in entry_points(group="torch_dynamo_backends")])
EOF

if has cuda; then
  # shellcheck disable=SC2046
  TRITON_INTERPRET=0 run_step cuda "$T_CUDA" "$OUT/pytest_cuda.log" \
    "$PY" -m pytest $(pytest_opts 12) tests/test_cuda.py tests/test_sdpa_executor.py \
    tests/test_nvfuser_executor.py
fi

if has bench; then
  TRITON_INTERPRET=0 run_step bench "$T_BENCH" "$OUT/bench.log" \
    "$PY" benchmarks/gpu.py --json "$OUT/bench.json" --traces "$OUT/llama_traces.txt"
fi

if has interp; then
  # shellcheck disable=SC2046
  TRITON_INTERPRET=1 run_step interp "$T_INTERP" "$OUT/pytest_interp.log" \
    "$PY" -m pytest $(pytest_opts 4) tests/test_triton_executor.py tests/test_extend.py
fi

if has suite; then
  # shellcheck disable=SC2046
  TRITON_INTERPRET=0 run_step suite "$T_SUITE" "$OUT/pytest_suite.log" \
    "$PY" -m pytest $(pytest_opts 14) tests --ignore=tests/test_triton_executor.py \
    --ignore=tests/test_extend.py --ignore=tests/test_cuda.py
fi

echo "== results ($OUT/results.json)"
"$PY" - "$OUT/results.json" <<'EOF'
import json, sys
res = json.load(open(sys.argv[1]))
for name, e in res.items():
    line = f"{name:>8}: exit {e['rc']}, {e['seconds']} s"
    if e.get("timed_out"):
        line += " (TIMED OUT)"
    if "summary" in e:
        line += f" | {e['summary']}"
    print(line)
    for f in e.get("failed", [])[:40]:
        print(f"            FAILED {f}")
b = res.get("bench", {}).get("figures", {})
for sec, figs in b.items():
    if sec == "env":
        continue
    keys = [k for k in figs if k.startswith(("first_s", "steady", "ratio", "error",
                                             "model_tflops", "peak"))]
    print(f"  bench {sec}: " + ", ".join(
        f"{k}={figs[k]:.4g}" if isinstance(figs[k], float) else f"{k}={figs[k]}"
        for k in keys))
EOF
status=0
"$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(any(e['rc'] for e in r.values()))" \
  "$OUT/results.json" || status=1
echo "== gpu_check done in ${SECONDS}s, exit $status"
exit $status
