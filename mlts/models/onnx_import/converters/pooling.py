"""MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool -> MAX_POOL_2D / AVERAGE_POOL_2D (NHWC).

NNAPI pools ignore padded elements (the average divides by the real elements only), which is ONNX's
count_include_pad=0. count_include_pad=1 with padding becomes an explicit PAD with zeros followed
by an unpadded pool. ceil_mode becomes extra end padding (never counted). Dilated pools, indices
outputs and non-2-D pools have no NNAPI form. Global pools use the whole spatial extent as filter
(MEAN over H and W when the spatial size is unknown). Quantized pools keep the input's
quantization; other ONNX output parameters are reached by requantizing.
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import OperandCode, OperandType, OperationCode

from .. import layout
from ..ir import Graph, Node
from ._common import ceil_extra, conv_pads
from .base import OpConverter, all_quantized_same_dtype, ints, register

NHWC = layout.NHWC


class _Pool(OpConverter):
    quantizable = True
    fusable = True

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [0])

    def check_rank(self, node: Node, ctx) -> tuple:
        x = node.input(0)
        if ctx.rank(x) != 4:
            raise ctx.fail(f"only 2-D pooling (4-D input) maps to NNAPI, the input has rank {ctx.rank(x)}")
        return ctx.shape(x)

    def emit(self, node: Node, ctx, code: OperationCode, x_op: int, pads, strides, kernel) -> None:
        top, left, bottom, right = pads
        for p, k, what in ((top, kernel[0], "top"), (bottom, kernel[0], "bottom"), (left, kernel[1], "left"),
                           (right, kernel[1], "right")):
            if p >= k:
                raise ctx.fail(f"{what} padding {p} is not smaller than the kernel size {k} (NNAPI requires it)")
        x = node.input(0)
        out = ctx.output(node.outputs[0], NHWC, forced=ctx.quant_of(x))
        inputs = [x_op] + [ctx.int_scalar(v) for v in (left, right, top, bottom, strides[1], strides[0],
                                                         kernel[1], kernel[0], ctx.fuse_code(node))]
        ctx.add_op(code, inputs, [out])


@register
class PoolConverter(_Pool):
    op_types = ("MaxPool", "AveragePool")

    def convert(self, node: Node, ctx) -> None:
        shape = self.check_rank(node, ctx)
        x = node.input(0)
        if node.op_type == "MaxPool" and len([o for o in node.outputs if o]) > 1:
            raise ctx.fail("the Indices output of MaxPool is not supported")
        kernel = ints(node.attr("kernel_shape"), [])
        if len(kernel) != 2:
            raise ctx.fail(f"kernel_shape {kernel} must have 2 values")
        strides = ints(node.attr("strides"), [1, 1])
        dilations = ints(node.attr("dilations"), [1, 1])
        if dilations != [1, 1]:
            raise ctx.fail(f"dilated pooling {dilations} has no NNAPI equivalent")
        top, left, bottom, right = conv_pads(node, ctx, shape[2:], kernel, strides, dilations)
        if node.attr("ceil_mode", 0):
            h, w = shape[2], shape[3]
            if h is None or w is None:
                raise ctx.fail("ceil_mode needs static spatial dimensions")
            bottom += ceil_extra(h, kernel[0], strides[0], top, bottom)
            right += ceil_extra(w, kernel[1], strides[1], left, right)
        x_op = ctx.operand(x, NHWC)
        code = OperationCode.MAX_POOL_2D if node.op_type == "MaxPool" else OperationCode.AVERAGE_POOL_2D
        count_pads = node.op_type == "AveragePool" and node.attr("count_include_pad", 0)
        base = conv_pads(node, ctx, shape[2:], kernel, strides, dilations)
        if count_pads and any(base):
            # Padding that counts in the average: pad with (real) zeros first, then pool the padded tensor.
            bt, bl, bb, br = base
            t = ctx.operand_type(x_op)
            dims = list(t.dimensions)
            dims[1] = dims[1] + bt + bb if dims[1] else 0
            dims[2] = dims[2] + bl + br if dims[2] else 0
            paddings = ctx.constant(np.asarray([[0, 0], [bt, bb], [bl, br], [0, 0]], np.int32),
                                    OperandType.tensor(OperandCode.TENSOR_INT32, [4, 2]))
            x_op = ctx.op(OperationCode.PAD, [x_op, paddings], t.with_dimensions(dims))
            top, left, bottom, right = top - bt, left - bl, bottom - bb, right - br
        self.emit(node, ctx, code, x_op, (top, left, bottom, right), strides, kernel)


@register
class GlobalPoolConverter(_Pool):
    op_types = ("GlobalAveragePool", "GlobalMaxPool")
    fusable = False

    def convert(self, node: Node, ctx) -> None:
        shape = self.check_rank(node, ctx)
        x = node.input(0)
        x_op = ctx.operand(x, NHWC)
        h, w = shape[2], shape[3]
        if h is not None and w is not None:
            code = OperationCode.MAX_POOL_2D if node.op_type == "GlobalMaxPool" else OperationCode.AVERAGE_POOL_2D
            return self.emit(node, ctx, code, x_op, (0, 0, 0, 0), (1, 1), (h, w))
        if node.op_type == "GlobalMaxPool":
            raise ctx.fail("GlobalMaxPool needs static spatial dimensions")
        out = ctx.output(node.outputs[0], NHWC, forced=ctx.quant_of(x))
        ctx.add_op(OperationCode.MEAN, [x_op, ctx.int_tensor([1, 2]), ctx.int_scalar(1)], [out])
