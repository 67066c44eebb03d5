"""TOPK_V2: the k largest entries of each last-axis row, with their indices (NNAPI 1.2; quant8
signed since 1.3).

Inputs: the tensor (float32, float16, int32, quant8 asymm or signed; rank 1 or more) and k (an
INT32 scalar in [1, last dimension]). Outputs: the values (the input's type, scale and zero point)
and their indices along the last axis (TENSOR_INT32), both of shape [..., k].

Rows come out sorted in descending order. NNAPI documents ties the other way round from TFLite and
ONNX: of two equal values the one with the LARGER index comes first, and when equal values straddle
the k-th place the larger indices are the ones kept (NNAPI's kernel orders (value, index) pairs and
reverses them). Quantized rows are compared as stored integers (one scale and zero point, so the
order is the real values' order). NaN has no defined place in NNAPI's ordering; here it sorts above
every number (numpy's order).
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from .base import Operation, OperationContext, Shape
from .common import FLOAT_QUANT8_AND_INT32
from .registry import register


def top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, indices) of the k largest entries along the last axis, descending by (value, index)."""
    # A stable ascending sort orders equal values by ascending index; reversed, the order is
    # descending by value and, among equal values, by index.
    order = np.argsort(x, axis=-1, kind="stable")[..., ::-1][..., :k]
    values = np.take_along_axis(x, order, axis=-1)
    return values, order.astype(np.int32)


@register
class TopKV2(Operation):
    code = OperationCode.TOPK_V2
    supported_types = FLOAT_QUANT8_AND_INT32

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(2, 2)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_input_type(1, OperandCode.INT32)
        ctx.check_input_rank(0, min_rank=1)
        ctx.check_output_type(0, ctx.input_code(0))
        ctx.check_same_quantization(0, output=0)
        ctx.check_output_type(1, OperandCode.TENSOR_INT32)
        k = ctx.scalar_if_known(1)
        if k is not None:
            dims = ctx.input_type(0).dimensions
            self._check_k(ctx, k, dims[-1] if dims and dims[-1] > 0 else None)

    @staticmethod
    def _check_k(ctx: OperationContext, k: int, last_dim: int | None) -> None:
        ctx.check(k >= 1, f"k must be at least 1, got {k}", input=1)
        if last_dim is not None:
            ctx.check(k <= last_dim, f"k {k} exceeds the last dimension {last_dim}", input=1)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        ctx.check(len(shape) >= 1, "rank 0 is below the minimum of 1", input=0)
        k = ctx.scalar(1)
        self._check_k(ctx, k, shape[-1])
        out = tuple(shape[:-1]) + (k,)
        return [out, out]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        k = ctx.scalar(1)
        self._check_k(ctx, k, x.shape[-1])
        values, indices = top_k(x, k)
        return [np.ascontiguousarray(values.astype(ctx.output_type(0).dtype, copy=False)),
                np.ascontiguousarray(indices)]
