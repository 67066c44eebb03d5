"""MatMul (and MatMul + Add of a bias vector, fused by the graph passes) -> FULLY_CONNECTED.

A [..., K] x constant B [K, N]: weights B^T, results of rank != 2 RESHAPEd back; a 1-D B gives a
[1, K] weight and drops the last dimension. A constant 2-D A with a computed B is computed
transposed. Two computed operands would need BATCH_MATMUL, which mlts does not implement.
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import OperationCode

from ..emitter import QUANT_CODES
from ..errors import NotQuantizable
from ..ir import Graph, Node, Quant
from .base import OpConverter, all_quantized_same_dtype, register
from .fully_connected import fc_input, fully_connected


@register
class MatMulConverter(OpConverter):
    op_types = ("MatMul",)
    quantizable = True
    data_inputs = (0, 1)
    weight_input = 1
    fusable = True

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [0])
        b = graph.value(node.inputs[1])
        if b.const is None or b.quant is None or b.dtype not in QUANT_CODES or b.const.ndim != 2:
            raise NotQuantizable("B must be a 2-D 8-bit constant")
        if not b.quant.per_tensor:
            if b.quant.axis != 1:
                raise NotQuantizable("per-axis weights must be quantized per column")
            if np.any(b.quant.zero_point != 0):
                raise NotQuantizable("per-column weights must be symmetric")
        if len(node.inputs) > 2 and node.inputs[2]:
            raise NotQuantizable("bias fusion is float only")

    def convert(self, node: Node, ctx) -> None:
        a, b = node.input(0), node.input(1)
        bias_name = node.input(2)  # set by the MatMul + Add fusion (a float bias vector)
        bv = ctx.value(b)
        fuse = ctx.fuse_code(node)
        if bv.const is None:
            if ctx.is_const(a) and ctx.rank(a) == 2 and ctx.rank(b) == 2 and bias_name is None:
                return self._transposed(node, ctx, fuse)
            raise ctx.fail("B must be a constant (a product of two computed tensors needs BATCH_MATMUL, "
                           "which mlts does not implement)")
        raw = np.asarray(bv.const)
        if raw.ndim == 1:
            weights = raw.reshape(1, -1)
        elif raw.ndim == 2:
            weights = raw.T
        else:
            raise ctx.fail(f"a constant B of rank {raw.ndim} (batched MatMul) is not supported")
        units, k = weights.shape
        a_op = fc_input(ctx, a)
        w_quant = None
        if ctx.is_quantized(a):
            q = bv.quant
            w_quant = Quant(q.scale, q.zero_point, q.dtype, None if q.per_tensor else 0)
            weights = np.ascontiguousarray(weights)
        else:
            weights = weights.astype(np.float32)
        bias = None
        if bias_name is not None:
            bias = np.asarray(ctx.value(bias_name).const, np.float64).reshape(-1)
        fully_connected(ctx, a_op, k, weights, w_quant, bias, node.outputs[0], fuse)

    def _transposed(self, node: Node, ctx, fuse: int) -> None:
        a, b = node.input(0), node.input(1)
        a_const = np.asarray(ctx.value(a).const, np.float32)  # [M, K]
        b_t = ctx.operand(b, (1, 0))  # [N, K]
        m = a_const.shape[0]
        out_shape = ctx.static_shape(node.outputs[0])
        t = ctx.operand_type(b_t)
        yt = ctx.temp(t.with_dimensions([out_shape[1], m]))
        ctx.add_op(OperationCode.FULLY_CONNECTED, [b_t, ctx.float_tensor(a_const),
                                                   ctx.float_tensor(np.zeros(m, np.float32)), ctx.int_scalar(fuse)],
                   [yt])
        out = ctx.output(node.outputs[0])
        ctx.add_op(OperationCode.TRANSPOSE, [yt, ctx.int_tensor([1, 0])], [out])
