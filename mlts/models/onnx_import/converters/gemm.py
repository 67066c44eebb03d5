"""Gemm: Y = alpha * A' x B' + beta * C -> FULLY_CONNECTED with constant B.

Weights are B' laid out [N, K] (B itself when transB, else B transposed) scaled by alpha (for
quantized weights, alpha goes into the weight scale); beta * C becomes the bias when it broadcasts
along rows ([N], [1, N] or one value), otherwise a broadcasting ADD after the product. transA
transposes A (a TRANSPOSE, or nothing when the layout already matches). A constant A with a
non-constant B is computed transposed: (B'^T A'^T)^T.
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import OperationCode

from ..errors import NotQuantizable
from ..ir import Graph, Node, Quant
from .base import register
from .conv import WeightedConverter
from .fully_connected import as_vector, fully_connected, is_vector_bias


@register
class GemmConverter(WeightedConverter):
    op_types = ("Gemm",)
    weights_name = "B"
    outputs_name = "units"

    def check_quantized(self, node: Node, graph: Graph) -> None:
        b = self.quantized_weights(node, graph)
        if float(node.attr("alpha", 1.0)) <= 0:
            raise NotQuantizable("alpha must be positive")
        self.check_per_channel(b, axis=0 if node.attr("transB", 0) else 1)
        c = node.input(2)
        if c is not None:
            cv = graph.value(c)
            units = b.const.shape[0 if node.attr("transB", 0) else 1]
            if cv.const is None or not is_vector_bias(cv.const, units):
                raise NotQuantizable("C must be a constant bias vector")

    def convert(self, node: Node, ctx) -> None:
        a, b, c = node.input(0), node.input(1), node.input(2)
        alpha = float(node.attr("alpha", 1.0))
        beta = float(node.attr("beta", 1.0))
        trans_a, trans_b = int(node.attr("transA", 0)), int(node.attr("transB", 0))
        if ctx.rank(a) != 2 or ctx.rank(b) != 2:
            raise ctx.fail("Gemm inputs must be 2-D")
        fuse = ctx.fuse_code(node)
        bv = ctx.value(b)
        if bv.const is None:
            if ctx.is_const(a) and not ctx.is_quantized(b):
                return self._transposed(node, ctx, alpha, beta, trans_a, trans_b, fuse)
            raise ctx.fail("B must be a constant (a product of two computed tensors needs BATCH_MATMUL, "
                           "which mlts does not implement)")
        raw = np.asarray(bv.const)
        weights = raw if trans_b else raw.T
        units, k = weights.shape
        a_op = ctx.operand(a, (1, 0) if trans_a else (0, 1))
        w_quant = None
        if ctx.is_quantized(a):
            q = bv.quant
            w_quant = Quant(q.scale * np.float32(alpha), q.zero_point, q.dtype, 0 if not q.per_tensor else None)
            weights = np.ascontiguousarray(weights)
        else:
            weights = weights.astype(np.float32) * np.float32(alpha)
        bias, extra = None, None
        if c is not None:
            cv = ctx.value(c)
            if cv.const is not None:
                real = cv.quant.dequantize(cv.const) if cv.quant is not None else np.asarray(cv.const, np.float64)
                real = beta * real
                if is_vector_bias(real, units):
                    bias = as_vector(real, units)
                else:
                    extra = ctx.constant(np.asarray(real, np.float32),
                                         ctx.make_type(ctx.operand_type(a_op).code, real.shape or (1,)))
            else:
                extra = ctx.operand(c)
                if beta != 1.0:
                    t = ctx.operand_type(extra)
                    scale = ctx.constant(np.asarray([beta], np.float32), t.with_dimensions([1]))
                    extra = ctx.op(OperationCode.MUL, [extra, scale, ctx.int_scalar(0)], t)
        fully_connected(ctx, a_op, k, weights, w_quant, bias, node.outputs[0], fuse, extra_add=extra)

    def _transposed(self, node: Node, ctx, alpha, beta, trans_a, trans_b, fuse) -> None:
        """Y = A' B' with constant A: Y^T = B'^T A'^T = FULLY_CONNECTED(B'^T, weights A') then TRANSPOSE."""
        a, b, c = node.input(0), node.input(1), node.input(2)
        a_prime = np.asarray(ctx.value(a).const, np.float32)
        a_prime = (a_prime.T if trans_a else a_prime) * np.float32(alpha)  # [M, K]
        b_t = ctx.operand(b, (0, 1) if trans_b else (1, 0))  # B'^T: [N, K]
        m, _ = a_prime.shape
        out_shape = ctx.static_shape(node.outputs[0])
        t = ctx.operand_type(b_t)
        yt = ctx.temp(t.with_dimensions([out_shape[1], m]))
        bias = np.zeros(m, np.float32)
        ctx.add_op(OperationCode.FULLY_CONNECTED, [b_t, ctx.float_tensor(a_prime), ctx.float_tensor(bias),
                                                   ctx.int_scalar(0)], [yt])
        y = ctx.op(OperationCode.TRANSPOSE, [yt, ctx.int_tensor([1, 0])], t.with_dimensions(out_shape))
        c_op = None
        if c is not None:
            cv = ctx.value(c)
            if cv.const is None:
                raise ctx.fail("C must be a constant when A is the constant")
            c_op = ctx.float_tensor(beta * np.asarray(cv.const, np.float32))
        out = ctx.output(node.outputs[0])
        if c_op is None:
            c_op = ctx.float_tensor(np.zeros(1, np.float32))
        ctx.add_op(OperationCode.ADD, [y, c_op, ctx.int_scalar(fuse)], [out])
