"""ltorch ops, indexing by a tensor of positions: ``index_add``, ``index_copy``.

``index_add`` adds slices of ``source`` into ``input`` at the positions ``index`` names
along ``dim`` (positions may repeat: their slices sum). A mixture of experts adds each
expert's routed tokens back this way (``out.index_add_(0, top_x, expert_out)``: Mixtral,
OLMoE, Qwen-MoE), where ``index`` is a count only the values decide: an unbacked size
(`thunder_ir.dialects.symbols`). The type rule (`index_add_type`) therefore decides
nothing: it runs in a symbolic compile and answers where the sizes are proved to fit from
their expressions alone (the index's length and the source's ``dim`` size are then one
symbol), the meta kernel (eager's errors) otherwise. Eager runs the op as one library
kernel (``Library`` kind); its decomposition is ``prims.index_add`` of the source scaled
by ``alpha``, and its VJP is eager's (the cotangent for ``input``, the cotangent's slices
at ``index`` times ``alpha`` for ``source``), with the same symbols.

``index_copy`` replaces those slices instead (a KV cache written at the input positions:
``k_cache.index_copy_(2, input_pos, k)``). Its type rule is the same with no ``alpha``;
it decomposes to ``prims.index_copy`` (eager's kernel, so among repeated positions it
keeps the slice eager keeps), and its VJP is eager's: the cotangent with the copied slices
zeroed for ``input`` (an ``index_copy`` of zeros), the cotangent's slices at ``index`` for
``source``.

Conventions as in `thunder_ir.dialects.ltorch_core`: operands are the tensor arguments,
params are named as torch names them, and the reference is ``TORCH_FN(*operands,
**params)`` with absent params left out. The in-place ``Tensor.index_add_`` is this op
and a write of its result into ``input`` (`thunder_ir.frontend.inplace`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from xdsl.irdl import operand_def, opt_prop_def, prop_def, result_def, traits_def
from xdsl.traits import Pure

from thunder_ir.dialects.ltorch_base import ltorch_op
from thunder_ir.dialects.ltorch_core import CoreOp
from thunder_ir.dialects.prims_base import Int, Number
from thunder_ir.dialects.symbols import proved_equal
from thunder_ir.dialects.traits import Library
from thunder_ir.dialects.types import TensorType, is_float


def index_copy_type(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``index_copy``: `index_add_type`'s rule, with no ``alpha`` and an int64 index (eager
    refuses int32 here)."""
    index = operands[1]
    if type(index) is not TensorType or index.dtype is not torch.int64:
        return None
    return index_add_type(operands, {"dim": params.get("dim"), "alpha": None})


def index_add_type(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``index_add`` of a tensor of rank >= 1 along a dim in range, a 1-D int32/int64
    index, a source of the input's dtype, device and rank whose sizes are the input's but
    along ``dim``, where it has the index's length, and a number ``alpha`` eager takes
    (an int for integer tensors): the input's type. Sizes are compared by their
    expressions only (`proved_equal`: no guard, so an unbacked index length stays
    unbacked); anything else is None (the meta kernel then types it or raises eager's
    error)."""
    x, index, source = operands
    dim, alpha = params.get("dim"), params.get("alpha", 1)
    if type(x) is not TensorType or type(index) is not TensorType \
            or type(source) is not TensorType or type(dim) is not int:
        return None
    if x.rank == 0 or not -x.rank <= dim < x.rank or index.rank != 1 \
            or index.dtype not in (torch.int32, torch.int64) or index.dev != x.dev \
            or source.dtype != x.dtype or source.dev != x.dev or source.rank != x.rank:
        return None
    if alpha is not None and not (type(alpha) is int or (type(alpha) is float
                                                         and is_float(x.dtype))):
        return None
    d = dim % x.rank
    if not proved_equal(source.sizes[d], index.sizes[0]) or not all(
            proved_equal(a, b) for k, (a, b) in enumerate(zip(x.sizes, source.sizes))
            if k != d):
        return None
    return x


@ltorch_op(torch.index_add, type_rule=index_add_type, symbolic=True)
class IndexAddOp(CoreOp):
    """`%y = ltorch.index_add %input, %index, %source {dim, alpha}`: ``input`` with
    ``alpha * source[..., i, ...]`` added at ``input[..., index[i], ...]`` along ``dim``
    (out of place; repeated positions sum)"""

    name = "ltorch.index_add"

    input = operand_def(TensorType)
    index = operand_def(TensorType)
    source = operand_def(TensorType)
    dim = prop_def(Int)
    alpha = opt_prop_def(Number)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dim", "index", "source", "alpha")
    DEFAULTS: ClassVar[dict[str, Any]] = {"alpha": 1}

    @classmethod
    def ref(cls, input: Any, index: Any, source: Any, **params: Any) -> Any:
        """``torch.index_add(input, dim, index, source, alpha=alpha)``: torch's order puts
        ``dim`` between the tensors."""
        alpha = params.get("alpha")
        kw = {} if alpha is None else {"alpha": alpha}
        return torch.index_add(input, params["dim"], index, source, **kw)

    @classmethod
    def torch_call(cls, op: Any, args: list[Any], params: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]] | None:
        """The call in torch's order: ``(input, dim, index, source, alpha=)``."""
        x, index, source = args
        kw = {} if params.get("alpha") is None else {"alpha": params["alpha"]}
        return [x, params["dim"], index, source], kw


@ltorch_op(torch.index_copy, type_rule=index_copy_type, symbolic=True)
class IndexCopyOp(CoreOp):
    """`%y = ltorch.index_copy %input, %index, %source {dim}`: ``input`` with its slices
    at ``index[i]`` along ``dim`` replaced by ``source[..., i, ...]`` (out of place)"""

    name = "ltorch.index_copy"

    input = operand_def(TensorType)
    index = operand_def(TensorType)
    source = operand_def(TensorType)
    dim = prop_def(Int)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dim", "index", "source")

    @classmethod
    def ref(cls, input: Any, index: Any, source: Any, **params: Any) -> Any:
        """``torch.index_copy(input, dim, index, source)``."""
        return torch.index_copy(input, params["dim"], index, source)

    @classmethod
    def torch_call(cls, op: Any, args: list[Any], params: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]] | None:
        """The call in torch's order: ``(input, dim, index, source)``."""
        x, index, source = args
        return [x, params["dim"], index, source], {}


__all__ = ["IndexAddOp", "IndexCopyOp", "index_add_type", "index_copy_type"]
