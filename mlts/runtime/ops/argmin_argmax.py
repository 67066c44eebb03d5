"""ARGMAX, ARGMIN: the index of the largest / smallest value along one axis (NNAPI 1.2; quant8
signed since 1.3).

Inputs: the tensor (float32, float16, int32, quant8 asymm or signed; rank 1 or more) and the axis
(an INT32 scalar in [-rank, rank)). The output is a TENSOR_INT32 with that axis removed; a rank-1
input gives shape [1]. Quantized inputs are compared as stored integers (one scale and zero point,
so the order is the real values' order).

Like NNAPI's kernel, a scan that keeps the first element and moves only on a strictly larger
(smaller) value: ties pick the smallest index, a NaN never wins a comparison, and a NaN in the first
position therefore keeps index 0.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8
from .registry import register

ARG_MIN_MAX_TYPES = FLOAT_AND_QUANT8 | {OperandCode.TENSOR_INT32}


def _resolve_axis(ctx: OperationContext, axis: int, rank: int) -> int:
    ctx.check(-rank <= axis < rank, f"axis {axis} out of range [{-rank}, {rank}) for a rank-{rank} input", input=1)
    return axis + rank if axis < 0 else axis


def arg_min_max(x: np.ndarray, axis: int, *, is_arg_min: bool) -> np.ndarray:
    """Index of the first extreme value along `axis`, NaN handled as NNAPI's strict-comparison scan."""
    if x.dtype.kind != "f":
        return np.argmin(x, axis=axis) if is_arg_min else np.argmax(x, axis=axis)
    nan = np.isnan(x)
    # A NaN after the first element is never taken: make it lose every comparison.
    losing = np.where(nan, np.inf if is_arg_min else -np.inf, x)
    index = np.argmin(losing, axis=axis) if is_arg_min else np.argmax(losing, axis=axis)
    # A NaN first element is never replaced (nothing compares greater or less than it).
    return np.where(np.take(nan, 0, axis=axis), 0, index)


class _ArgMinMax(Operation):
    supported_types = frozenset(ARG_MIN_MAX_TYPES)
    is_arg_min: bool

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(2, 1)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_input_type(1, OperandCode.INT32)
        ctx.check_output_type(0, OperandCode.TENSOR_INT32)
        ctx.check_input_rank(0, min_rank=1)
        axis = ctx.scalar_if_known(1)
        rank = ctx.input_rank(0)
        if axis is not None and rank is not None:
            _resolve_axis(ctx, axis, rank)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        ctx.check(len(shape) >= 1, "rank 0 is below the minimum of 1", input=0)
        axis = _resolve_axis(ctx, ctx.scalar(1), len(shape))
        return [tuple(shape[:axis]) + tuple(shape[axis + 1:]) or (1,)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        (out_shape,) = self.prepare(ctx)
        axis = _resolve_axis(ctx, ctx.scalar(1), x.ndim)
        index = arg_min_max(x, axis, is_arg_min=self.is_arg_min)
        return [index.astype(np.int32).reshape(out_shape)]


@register
class ArgMax(_ArgMinMax):
    code = OperationCode.ARGMAX
    is_arg_min = False


@register
class ArgMin(_ArgMinMax):
    code = OperationCode.ARGMIN
    is_arg_min = True
