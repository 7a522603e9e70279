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

scripts/setup.sh installs torchvision and timm into ``.venv/vision``, out of
site-packages: transformers imports torchvision wherever it finds it, and a program that
imports transformers (a benchmark, a distributed test's worker process) must not meet the
broken import. `import_vision` puts that folder on ``sys.path`` only while it imports them.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
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


VISION_PACKAGES = Path(sys.prefix) / "vision"
"""Where scripts/setup.sh installs torchvision and timm (``--target``)."""


def import_vision() -> tuple[ModuleType, ModuleType]:
    """torchvision and timm, imported from `VISION_PACKAGES` (or wherever they are
    installed) with the stand-ins defined; the folder leaves ``sys.path`` again, so that
    child processes, which copy the path, do not find torchvision. Raises ImportError
    where either is missing."""
    where = os.fspath(VISION_PACKAGES)
    added = VISION_PACKAGES.is_dir() and where not in sys.path
    if added:
        sys.path.insert(0, where)
    try:
        install()
        import timm
        import torchvision
    finally:
        if added:
            sys.path.remove(where)
    return torchvision, timm


__all__ = ["VISION_PACKAGES", "import_vision", "install"]
