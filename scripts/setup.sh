#!/usr/bin/env bash
# Creates .venv with thunder_ir and its test tools. torch comes from the local CPU wheel
# (`pip install torch==2.13.0`) first, so that no install ever pulls a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q torch==2.13.0
python -m pip install -q -e '.[test,examples]'
python -c "import torch, xdsl, thunder_ir; print('thunder_ir', thunder_ir.__version__, '| torch', torch.__version__, '| xdsl', xdsl.__version__ if hasattr(xdsl, '__version__') else '0.74.0')"
