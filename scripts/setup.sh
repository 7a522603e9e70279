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
# torchvision and timm (tests/test_vision_families.py), without their dependencies and in a
# folder of their own, .venv/vision, that only that test module puts on sys.path: PyPI's
# torchvision wheel pins the torch it was built with (0.28.0: torch==2.13.0) and is a CUDA
# build, and timm asks for torchvision unpinned, which pip would meet with the newest
# torchvision and the torch it pins, a CUDA build. Their own dependencies (numpy, pillow,
# pyyaml, huggingface_hub, safetensors) come with the test extra. The CUDA torchvision's
# C++ ops do not load beside the CPU torch (its import fails without stand-ins,
# tests/torchvision_ops.py), and transformers imports torchvision wherever it finds it:
# kept out of site-packages, it never breaks a program that imports transformers.
python -m pip uninstall -q -y torchvision timm 2>/dev/null || true
python -m pip install -q --no-deps --upgrade --target .venv/vision torchvision==0.28.0 \
  timm==1.0.31
# torchao (tests/test_quantize.py: QuantizeWeights against torchao's int8 weight-only;
# benchmarks/generate.py --quantize), without dependencies and in a folder of its own,
# .venv/torchao, that only those put on sys.path (the test in a subprocess): transformers
# imports torchao at every import of a model class when it finds it, which loads its
# extensions and registers pytree nodes in torch. Its wheel's Python ops run on the CPU
# torch (its CUDA extensions fail to load, which it reports); its int4 CPU path needs
# mslk, not installed.
python -m pip install -q --no-deps --upgrade --target .venv/torchao torchao==0.18.0
python -c "import torch, xdsl, thunder_ir; print('thunder_ir', thunder_ir.__version__, '| torch', torch.__version__, '| xdsl', xdsl.__version__ if hasattr(xdsl, '__version__') else '0.74.0')"
