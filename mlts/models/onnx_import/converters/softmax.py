"""Softmax -> SOFTMAX (beta 1).

Opset 13 and later: softmax along one axis, mapped through the tensor's layout to NNAPI's axis.
Before opset 13 the input is coerced to 2-D at `axis` ([prod(dims < axis), prod(dims >= axis)]);
that equals an NNAPI softmax along the last axis when axis is the last dimension, otherwise the
input is RESHAPEd to the 2-D form and back. Quantized SOFTMAX outputs have scale 1/256 and zero
point 0 (uint8) or -128 (int8). A QDQ Softmax whose QuantizeLinear has other parameters (onnxruntime
writes 1/255) runs in float between DEQUANTIZE and QUANTIZE: one rounding instead of two (quantized
SOFTMAX to 1/256, then requantization); QLinearSoftmax graphs, which use 1/256, stay quantized.
"""
from __future__ import annotations

import math

import numpy as np

from mlts.runtime import OperationCode

from .. import layout
from ..ir import Graph, Node, Quant
from ..errors import NotQuantizable
from .base import OpConverter, all_quantized_same_dtype, register


def nnapi_output_quant(dtype) -> Quant:
    """SOFTMAX's (and LOGISTIC's) mandatory output quantization."""
    return Quant.make(1.0 / 256, -128 if np.dtype(dtype) == np.dtype(np.int8) else 0, dtype)


@register
class SoftmaxConverter(OpConverter):
    op_types = ("Softmax",)
    quantizable = True

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [0])
        q = graph.value(node.outputs[0]).quant
        if not q.same(nnapi_output_quant(q.dtype)):
            raise NotQuantizable("the output quantization is not NNAPI's 1/256")

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        rank = ctx.rank(x)
        forced = None
        if ctx.is_quantized(x):
            q = ctx.quant_of(x)
            forced = nnapi_output_quant(q.dtype)
        default_axis = -1 if node.opset >= 13 else 1
        axis = int(node.attr("axis", default_axis))
        if rank == 0:
            raise ctx.fail("softmax of a scalar")
        if axis < 0:
            axis += rank
        if not 0 <= axis < rank:
            raise ctx.fail(f"axis {node.attr('axis')} out of range for rank {rank}")
        if node.opset >= 13 or axis == rank - 1:
            if rank > 4:
                raise ctx.fail(f"rank {rank}: NNAPI SOFTMAX takes at most 4 dimensions")
            op, perm = ctx.native(x)
            nn_axis = layout.nn_axis(perm, axis)
            out = ctx.output(y, perm, forced=forced)
            inputs = [op, ctx.float_scalar(1.0)]
            if nn_axis != rank - 1:
                inputs.append(ctx.int_scalar(nn_axis))
            ctx.add_op(OperationCode.SOFTMAX, inputs, [out])
            return
        shape = ctx.shape(x)
        inner = shape[axis:]
        if any(d is None for d in inner):
            raise ctx.fail("the coerced 2-D softmax needs static dimensions from the axis on")
        cols = math.prod(inner)
        op = ctx.operand(x)
        t = ctx.operand_type(op)
        rows = math.prod(shape[:axis]) if all(d is not None for d in shape[:axis]) else 0
        flat = ctx.op(OperationCode.RESHAPE, [op, ctx.int_tensor([-1, cols])], t.with_dimensions([rows, cols]))
        soft_type = ctx.make_type(t.code, [rows, cols], forced) if forced is not None else t.with_dimensions(
            [rows, cols])
        soft = ctx.op(OperationCode.SOFTMAX, [flat, ctx.float_scalar(1.0)], soft_type)
        out = ctx.output(y, forced=forced)
        target = [(-1 if d is None else d) for d in shape]
        ctx.add_op(OperationCode.RESHAPE, [soft, ctx.int_tensor(target)], [out])
