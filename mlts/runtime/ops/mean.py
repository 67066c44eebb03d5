"""MEAN: the average over the listed axes (1-D TENSOR_INT32, negative values allowed, duplicates
ignored), keeping the reduced dimensions with size 1 when keep_dims (an INT32 scalar) is positive.

An empty axes list reduces every dimension. A reduction of every dimension without keep_dims gives
shape [1]. Float16 is computed in float32.

Quantized (8-bit asymmetric, unsigned or signed):
- output scale and zero point equal to the input's (what NNAPI's CPU kernel assumes): the integer sum
  of the stored values divided by the element count with C's truncating division, exactly NNAPI
  (so 10.5 -> 10, and -2.5 -> -2 for the signed type);
- different output parameters (an mlts extension; NNAPI's kernel silently ignores them): TFLite's
  integer requantization, sum(q - zp_in) scaled by s_in / (s_out * count) with a fixed-point
  multiplier (round to nearest), plus zp_out, clamped to the type's range.
"""
from __future__ import annotations

import math

import numpy as np

from ..enums import OperandCode, OperationCode
from ._int_args import check_int_tensor, known_ints, reduced_shape, reduction_axes, resolve_axes
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8, QUANT8_TYPES
from .quant import QUANT_RANGE, multiply_by_quantized_multiplier, quantize_multiplier
from .registry import register


@register
class Mean(Operation):
    code = OperationCode.MEAN
    supported_types = FLOAT_AND_QUANT8

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(3, 1)
        ctx.check_input_type(0, self.supported_types)
        check_int_tensor(ctx, 1, 1)
        ctx.check_input_type(2, OperandCode.INT32)
        ctx.check_input_rank(0, max_rank=4)
        ctx.check_output_type(0, ctx.input_code(0))
        axes = known_ints(ctx, 1)
        rank = ctx.input_rank(0)
        if axes is not None and rank is not None:
            resolve_axes(ctx, 1, axes, rank)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        ctx.check(len(shape) <= 4, f"rank {len(shape)} exceeds the maximum of 4", input=0)
        return [reduced_shape(shape, reduction_axes(ctx, 1, len(shape), empty_means_all=True), ctx.scalar(2) > 0)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        axes = reduction_axes(ctx, 1, x.ndim, empty_means_all=True)
        out_shape = self.prepare(ctx)[0]
        t_in, t_out = ctx.input_type(0), ctx.output_type(0)
        count = math.prod(x.shape[a] for a in axes)
        if t_in.code not in QUANT8_TYPES:
            r = x.astype(np.float64).sum(axis=axes) / count if count else np.full(out_shape, np.nan)
            return [np.asarray(r, dtype=t_out.dtype).reshape(out_shape)]
        lo, hi = QUANT_RANGE[t_out.code]
        if count == 0:
            return [np.full(out_shape, t_out.zero_point, dtype=t_out.dtype)]
        if t_in.scale == t_out.scale and t_in.zero_point == t_out.zero_point:
            total = x.astype(np.int64).sum(axis=axes)
            r = np.where(total >= 0, total // count, -((-total) // count))
        else:
            acc = (x.astype(np.int64) - t_in.zero_point).sum(axis=axes)
            mult, shift = quantize_multiplier(t_in.scale / (t_out.scale * count))
            r = multiply_by_quantized_multiplier(acc, mult, shift) + t_out.zero_point
        return [np.clip(r, lo, hi).astype(t_out.dtype).reshape(out_shape)]
