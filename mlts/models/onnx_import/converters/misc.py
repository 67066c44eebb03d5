"""ReduceMean -> MEAN, BatchNormalization (what the graph passes could not fold), QuantizeLinear ->
QUANTIZE, DequantizeLinear -> DEQUANTIZE, Cast -> CAST, Constant (always folded at import).
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from mlts.runtime import OperationCode

from .. import layout
from ..emitter import FLOAT_CODES, QUANT_CODES
from ..ir import Graph, Node
from ._common import alias
from .base import OpConverter, all_quantized_same_dtype, const_input, ints, register


@register
class ReduceMeanConverter(OpConverter):
    op_types = ("ReduceMean",)
    quantizable = True

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [0])

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        rank = ctx.rank(x)
        if rank > 4:
            raise ctx.fail(f"rank {rank}: NNAPI MEAN takes at most 4 dimensions")
        if node.opset >= 18:
            value = const_input(node, ctx.graph, 1, "axes", ctx)
            axes = None if value is None else ints(value, [])
        else:
            axes = node.attr("axes")
            axes = None if axes is None else ints(axes, [])
        if not axes:
            if node.attr("noop_with_empty_axes", 0):
                return alias(ctx, y, x)
            axes = list(range(rank))
        axes = sorted({a + rank if a < 0 else a for a in axes})
        keep = int(node.attr("keepdims", 1))
        op, perm = ctx.native(x)
        out_perm = perm if keep else layout.after_removing(perm, axes)
        out = ctx.output(y, out_perm, forced=ctx.quant_of(x))
        ctx.add_op(OperationCode.MEAN, [op, ctx.int_tensor([layout.nn_axis(perm, a) for a in axes]),
                                        ctx.int_scalar(keep)], [out])


@register
class BatchNormalizationConverter(OpConverter):
    op_types = ("BatchNormalization",)

    def convert(self, node: Node, ctx) -> None:
        if node.attr("training_mode", 0) or len([o for o in node.outputs if o]) > 1:
            raise ctx.fail("training mode (running statistics outputs) is not supported")
        raise ctx.fail("scale, bias, mean and variance must be constants")


@register
class QuantizeLinearConverter(OpConverter):
    op_types = ("QuantizeLinear",)

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        q = ctx.quant_of(y)
        if q is None or not q.per_tensor or q.dtype not in QUANT_CODES:
            raise ctx.fail("only per-tensor uint8/int8 quantization of a computed tensor maps to NNAPI QUANTIZE")
        op, perm = ctx.native(x)
        out = ctx.output(y, perm)
        ctx.add_op(OperationCode.QUANTIZE, [op], [out])


@register
class DequantizeLinearConverter(OpConverter):
    op_types = ("DequantizeLinear",)

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        if not ctx.is_quantized(x):
            raise ctx.fail(f"input {x!r} is not an 8-bit quantized tensor")
        op, perm = ctx.native(x)
        out = ctx.output(y, perm)
        ctx.add_op(OperationCode.DEQUANTIZE, [op], [out])


@register
class CastConverter(OpConverter):
    op_types = ("Cast",)

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        try:
            to = np.dtype(helper.tensor_dtype_to_np_dtype(int(node.attr("to"))))
        except Exception:
            raise ctx.fail(f"cast to type {node.attr('to')} is not supported") from None
        src = ctx.value(x).dtype
        if ctx.is_quantized(x):
            raise ctx.fail("casting a quantized tensor is not supported")
        allowed = set(FLOAT_CODES) | {np.dtype(np.int32), np.dtype(np.int64)}
        if src not in allowed or to not in allowed:
            raise ctx.fail(f"cast from {src} to {to} has no NNAPI equivalent")
        if ctx.code_of(ctx.value(x)) == ctx.code_of(ctx.value(y)):
            return alias(ctx, y, x)
        op, perm = ctx.native(x)
        out = ctx.output(y, perm)
        ctx.add_op(OperationCode.CAST, [op], [out])


@register
class ConstantConverter(OpConverter):
    op_types = ("Constant",)

    def convert(self, node: Node, ctx) -> None:  # pragma: no cover - Constant nodes are folded at import
        raise ctx.fail("Constant node was not folded (its value could not be read)")
