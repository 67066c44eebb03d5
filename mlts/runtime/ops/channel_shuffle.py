"""CHANNEL_SHUFFLE (NNAPI 1.2): interleave the channel groups of one axis, as ShuffleNet does.

Inputs: 0 the tensor (rank 1..4), 1 num_groups (INT32 > 0, dividing the axis size), 2 axis (INT32 in
[-rank, rank)). The axis, of size groups x group size, is read as a [groups, group size] matrix and
written transposed: output index i * groups + j holds input index j * group size + i. Types:
TENSOR_FLOAT32, TENSOR_FLOAT16, TENSOR_QUANT8_ASYMM (1.2), TENSOR_QUANT8_ASYMM_SIGNED (1.3); the
output keeps the input's type, shape, scale and zero point.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8
from .registry import register


def _check_axis(ctx: OperationContext, axis: int, rank: int) -> int:
    ctx.check(-rank <= axis < rank, f"axis {axis} out of range [{-rank}, {rank}) for a rank-{rank} input", input=2)
    return axis % rank


def _check_groups(ctx: OperationContext, groups: int, axis_size: int | None) -> None:
    ctx.check(groups > 0, f"num_groups must be > 0, got {groups}", input=1)
    if axis_size:
        ctx.check(axis_size % groups == 0,
                  f"num_groups {groups} must divide the size {axis_size} of the shuffled axis", input=1)


@register
class ChannelShuffle(Operation):
    code = OperationCode.CHANNEL_SHUFFLE
    supported_types = FLOAT_AND_QUANT8

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(3, 1)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_input_type(1, OperandCode.INT32)
        ctx.check_input_type(2, OperandCode.INT32)
        ctx.check_input_rank(0, max_rank=4)
        ctx.check_same_quantization(0, output=0)
        dims = ctx.input_type(0).dimensions
        axis = ctx.scalar_if_known(2)
        if axis is not None and dims:
            axis = _check_axis(ctx, axis, len(dims))
        groups = ctx.scalar_if_known(1)
        if groups is not None:
            _check_groups(ctx, groups, dims[axis] if axis is not None and dims else None)

    def _params(self, ctx: OperationContext, shape: Shape) -> tuple[int, int]:
        """(num_groups, non-negative axis), checked against the input shape."""
        ctx.check(1 <= len(shape) <= 4, f"rank {len(shape)} not supported (expected 1 to 4)", input=0)
        axis = _check_axis(ctx, ctx.scalar(2), len(shape))
        groups = ctx.scalar(1)
        _check_groups(ctx, groups, shape[axis])
        return groups, axis

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        self._params(ctx, shape)
        return [shape]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        groups, axis = self._params(ctx, x.shape)
        split = x.shape[:axis] + (groups, x.shape[axis] // groups) + x.shape[axis + 1:]
        return [np.ascontiguousarray(x.reshape(split).swapaxes(axis, axis + 1).reshape(x.shape))]
