"""LOG_SOFTMAX (1.2; TENSOR_FLOAT32, TENSOR_FLOAT16): log of the softmax along one axis.

Inputs: 0 the tensor (any rank from 1), 1 beta (FLOAT32, or FLOAT16 for a TENSOR_FLOAT16 input;
positive), 2 axis (INT32 in [-rank, rank), required). The output has the input's type and shape:
    output = (x - max) * beta - log(sum(exp((x - max) * beta)))
Subtracting the maximum keeps exp from overflowing. Float16 is computed in float32 and rounded once,
float32 in float64.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._float32 import as_float32
from ._unary import float_kernel
from .base import Operation, OperationContext, Shape
from .common import FLOAT_TYPES
from .normalization import check_float_scalars, check_known_axis, check_output_shape_like_input, resolve_axis
from .registry import register


def log_softmax(x: np.ndarray, beta: float, axis: int) -> np.ndarray:
    scaled = (x - np.max(x, axis=axis, keepdims=True)) * beta
    return scaled - np.log(np.sum(np.exp(scaled), axis=axis, keepdims=True))


@register
class LogSoftmax(Operation):
    code = OperationCode.LOG_SOFTMAX
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(3, 1)
        ctx.check_input_type(0, self.supported_types)
        check_float_scalars(ctx, (1,))
        ctx.check_input_type(2, OperandCode.INT32)
        check_output_shape_like_input(ctx)
        beta = ctx.scalar_if_known(1)
        if beta is not None:
            ctx.check(beta > 0, f"beta must be positive, got {beta}", input=1)
        check_known_axis(ctx, 2)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        ctx.check(len(shape) >= 1, "rank 0 not supported (expected at least 1)", input=0)
        beta = ctx.scalar(1)
        ctx.check(beta > 0, f"beta must be positive, got {beta}", input=1)
        resolve_axis(ctx, 2, len(shape))
        return [shape]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        axis = resolve_axis(ctx, 2, x.ndim)
        beta = as_float32(ctx.scalar(1))
        return [float_kernel(x, lambda v: log_softmax(v, beta, axis))]
