"""GATHER, TILE and EXPAND_DIMS (NNAPI 1.2): data movement, every type bit-exact. Types: TENSOR_FLOAT32,
TENSOR_FLOAT16, TENSOR_INT32, TENSOR_QUANT8_ASYMM, and TENSOR_QUANT8_ASYMM_SIGNED since 1.3; quantized
outputs keep the input's scale and zero point (NNAPI requires it).

- GATHER: input (n-D), axis (INT32 scalar in [-n, n)), indices (k-D TENSOR_INT32, k >= 1) -> shape
  input.shape[:axis] + indices.shape + input.shape[axis+1:]. An index outside [0, dim) is an execution
  failure (NNAPI checks indices only while running, even constant ones).
- TILE: the input repeated multiples[i] times along dimension i (multiples: 1-D TENSOR_INT32 of
  length n, non-negative; 0 gives a zero-sized output).
- EXPAND_DIMS: a dimension of size 1 inserted at axis (INT32 scalar in [-(n + 1), n + 1)).
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._int_args import check_int_tensor, known_ints, require_ints, resolve_axes
from .base import Operation, OperationContext, Shape
from .common import FLOAT_QUANT8_AND_INT32
from .registry import register



def _validate_data_op(ctx: OperationContext, supported: frozenset[OperandCode], num_inputs: int) -> None:
    """Counts, the data input's type (rank >= 1) and the output's type and quantization."""
    ctx.check_counts(num_inputs, 1)
    ctx.check_input_type(0, supported)
    ctx.check_input_rank(0, min_rank=1)
    ctx.check_same_quantization(0, output=0)


# -- GATHER -----------------------------------------------------------------------------------------
@register
class Gather(Operation):
    code = OperationCode.GATHER
    supported_types = FLOAT_QUANT8_AND_INT32

    def validate(self, ctx: OperationContext) -> None:
        _validate_data_op(ctx, self.supported_types, 3)
        ctx.check_input_type(1, OperandCode.INT32)
        ctx.check_input_type(2, OperandCode.TENSOR_INT32)
        ctx.check_input_rank(2, min_rank=1)
        axis, rank = ctx.scalar_if_known(1), ctx.input_rank(0)
        if axis is not None and rank is not None:
            resolve_axes(ctx, 1, [axis], rank)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        (axis,) = resolve_axes(ctx, 1, [ctx.scalar(1)], len(shape))
        indices_shape = ctx.input_shape(2)
        return [tuple(shape[:axis]) + tuple(indices_shape) + tuple(shape[axis + 1:])]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        (axis,) = resolve_axes(ctx, 1, [ctx.scalar(1)], x.ndim)
        indices = np.asarray(ctx.input(2), dtype=np.int64)
        bad = (indices < 0) | (indices >= x.shape[axis])
        if bad.any():
            raise ctx.fail(f"index {int(indices[bad][0])} is out of range [0, {x.shape[axis]}) for axis {axis}",
                           input=2)
        return [np.ascontiguousarray(np.take(x, indices, axis=axis))]


# -- TILE -------------------------------------------------------------------------------------------
def _check_multiples(ctx: OperationContext, multiples: np.ndarray, rank: int | None) -> list[int]:
    ctx.check(multiples.ndim == 1, f"multiples must be a 1-D tensor, got rank {multiples.ndim}", input=1)
    values = multiples.tolist()
    if rank is not None:
        ctx.check(len(values) == rank,
                  f"multiples must have {rank} entries (the input's rank), got {len(values)}", input=1)
    ctx.check(all(m >= 0 for m in values), f"multiples must be >= 0, got {values}", input=1)
    return values


@register
class Tile(Operation):
    code = OperationCode.TILE
    supported_types = FLOAT_QUANT8_AND_INT32

    def validate(self, ctx: OperationContext) -> None:
        _validate_data_op(ctx, self.supported_types, 2)
        check_int_tensor(ctx, 1, 1)
        rank, t = ctx.input_rank(0), ctx.input_type(1)
        if rank is not None and t.rank == 1 and t.dimensions[0] != 0:
            ctx.check(t.dimensions[0] == rank,
                      f"multiples must have {rank} entries (the input's rank), got {t.dimensions[0]}", input=1)
        multiples = known_ints(ctx, 1)
        if multiples is not None:
            _check_multiples(ctx, multiples, rank)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        multiples = _check_multiples(ctx, require_ints(ctx, 1), len(shape))
        return [tuple(d * m for d, m in zip(shape, multiples))]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        multiples = _check_multiples(ctx, require_ints(ctx, 1), x.ndim)
        return [np.ascontiguousarray(np.tile(x, multiples))]


# -- EXPAND_DIMS ------------------------------------------------------------------------------------
@register
class ExpandDims(Operation):
    code = OperationCode.EXPAND_DIMS
    supported_types = FLOAT_QUANT8_AND_INT32

    def validate(self, ctx: OperationContext) -> None:
        _validate_data_op(ctx, self.supported_types, 2)
        ctx.check_input_type(1, OperandCode.INT32)
        axis, rank = ctx.scalar_if_known(1), ctx.input_rank(0)
        if axis is not None and rank is not None:
            resolve_axes(ctx, 1, [axis], rank + 1)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        (axis,) = resolve_axes(ctx, 1, [ctx.scalar(1)], len(shape) + 1)
        return [tuple(shape[:axis]) + (1,) + tuple(shape[axis:])]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        (axis,) = resolve_axes(ctx, 1, [ctx.scalar(1)], x.ndim + 1)
        return [np.ascontiguousarray(np.expand_dims(x, axis))]
