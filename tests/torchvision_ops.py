"""torchvision beside the CPU torch: stand-ins for the C++ ops its import names.

The torchvision wheel for x86-64 on PyPI is a CUDA build: its C++ extension (``_C.so``,
the ops ``torchvision::nms``, ``roi_align``, ...) does not load beside the CPU build of
torch that CI installs (scripts/setup.sh installs torchvision ``--no-deps`` so that pip
never pulls a CUDA torch for it). torchvision then runs without its C++ ops, but its import
still registers fake (meta) kernels for ``torchvision::nms`` and ``torchvision::qnms``, which
fails when the ops do not exist ("operator torchvision::nms does not exist"). `install`
defines those two ops first, as stand-ins that raise when called, so that ``import
torchvision`` (and timm, which imports it) works for the models that use none of them:
the classification backbones the family tests build (tests/test_vision_families.py). A
model that calls a detection op gets the stand-in's error, never a made-up result.

Where the extension does load (a torchvision built for this torch), nothing is defined.
tests/conftest.py calls `install` before any test module imports torchvision, since
transformers imports it too where it is installed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from typing import Any

import torch

_SCHEMAS = {  # torchvision's own schemas (torchvision/csrc/ops/nms.cpp)
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}

_LIBRARY: list[Any] = []  # keeps the stand-ins registered for the process


def _extension_loads(package_dir: str) -> bool:
    """Whether torchvision's C++ extension loads here (it then defines the real ops)."""
    finder = importlib.machinery.FileFinder(
        package_dir, (importlib.machinery.ExtensionFileLoader,
                      importlib.machinery.EXTENSION_SUFFIXES))
    spec = finder.find_spec("_C")
    if spec is None or spec.origin is None:
        return False
    try:
        torch.ops.load_library(spec.origin)
    except (ImportError, OSError):
        return False
    return True


def _unavailable(name: str) -> Any:
    def op(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"torchvision::{name}: torchvision's C++ ops did not load beside this build of "
            "torch (tests/torchvision_ops.py defines this stand-in so that torchvision "
            "imports); a model that needs the op cannot run here")

    return op


def install() -> bool:
    """Defines the stand-ins where torchvision is installed and its extension does not load.
    Returns whether it defined them. Call it before anything imports torchvision."""
    if _LIBRARY:
        return True
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    if _extension_loads(os.fspath(next(iter(spec.submodule_search_locations)))):
        return False
    lib = torch.library.Library("torchvision", "DEF")
    for name, schema in _SCHEMAS.items():
        lib.define(schema)
        lib.impl(name, _unavailable(name), "CompositeExplicitAutograd")
    _LIBRARY.append(lib)
    return True


__all__ = ["install"]
