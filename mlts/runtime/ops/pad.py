"""PAD and PAD_V2: pad a tensor (rank <= 4) by paddings[i] = (before, after) along each dimension i.

PAD fills with 0 (real zero: the zero point for quantized types). PAD_V2 takes the fill value as a
third input: a FLOAT32 scalar for TENSOR_FLOAT32, a FLOAT16 scalar for TENSOR_FLOAT16 and an INT32
scalar in quantized units (a raw stored value, not a real number) for the 8-bit quantized types; it
must fit the type's range. Quantized outputs keep the input's scale and zero point.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._int_args import check_int_tensor, known_ints, require_ints
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8, QUANT8_TYPES
from .quant import QUANT_RANGE
from .registry import register

PAD_VALUE_TYPE = {
    OperandCode.TENSOR_FLOAT32: OperandCode.FLOAT32,
    OperandCode.TENSOR_FLOAT16: OperandCode.FLOAT16,
    OperandCode.TENSOR_QUANT8_ASYMM: OperandCode.INT32,
    OperandCode.TENSOR_QUANT8_ASYMM_SIGNED: OperandCode.INT32,
}


def _check_paddings(ctx: OperationContext, paddings: np.ndarray, rank: int | None) -> None:
    ctx.check(paddings.ndim == 2 and paddings.shape[1] == 2,
              f"paddings must have shape [rank, 2], got {list(paddings.shape)}", input=1)
    if rank is not None:
        ctx.check(paddings.shape[0] == rank,
                  f"paddings must have shape [{rank}, 2] for a rank-{rank} input, got {list(paddings.shape)}", input=1)
    ctx.check(bool((paddings >= 0).all()), f"paddings must be >= 0, got {paddings.tolist()}", input=1)


class _Pad(Operation):
    supported_types = FLOAT_AND_QUANT8
    num_inputs = 2

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(self.num_inputs, 1)
        ctx.check_input_type(0, self.supported_types)
        check_int_tensor(ctx, 1, 2)
        ctx.check_input_rank(0, max_rank=4)
        ctx.check_same_quantization(0, output=0)
        rank = ctx.input_rank(0)
        if rank is not None and ctx.input_type(1).dimensions and ctx.input_type(1).rank == 2:
            d0, d1 = ctx.input_type(1).dimensions
            ctx.check(d0 in (0, rank) and d1 in (0, 2),
                      f"paddings must have shape [{rank}, 2] for a rank-{rank} input, got {[d0, d1]}", input=1)
        paddings = known_ints(ctx, 1)
        if paddings is not None:
            _check_paddings(ctx, paddings, rank)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        ctx.check(len(shape) <= 4, f"rank {len(shape)} exceeds the maximum of 4", input=0)
        paddings = require_ints(ctx, 1)
        _check_paddings(ctx, paddings, len(shape))
        return [tuple(int(before + s + after) for s, (before, after) in zip(shape, paddings.tolist()))]

    def pad_value(self, ctx: OperationContext):
        t = ctx.output_type(0)
        return t.zero_point if t.code in QUANT8_TYPES else 0

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        paddings = require_ints(ctx, 1)
        _check_paddings(ctx, paddings, x.ndim)
        out = np.pad(x, [tuple(p) for p in paddings.tolist()], mode="constant",
                     constant_values=np.asarray(self.pad_value(ctx)).astype(x.dtype))
        return [np.ascontiguousarray(out.astype(ctx.output_type(0).dtype, copy=False))]


@register
class Pad(_Pad):
    code = OperationCode.PAD


@register
class PadV2(_Pad):
    code = OperationCode.PAD_V2
    num_inputs = 3

    def validate(self, ctx: OperationContext) -> None:
        super().validate(ctx)
        code = ctx.input_code(0)
        ctx.check_input_type(2, PAD_VALUE_TYPE[code])
        value = ctx.scalar_if_known(2)
        if value is not None and code in QUANT8_TYPES:
            self._check_quant_value(ctx, value)

    @staticmethod
    def _check_quant_value(ctx: OperationContext, value: int) -> None:
        lo, hi = QUANT_RANGE[ctx.input_code(0)]
        ctx.check(lo <= value <= hi,
                  f"pad value {value} is outside the {ctx.input_code(0).name} range [{lo}, {hi}]", input=2)

    def pad_value(self, ctx: OperationContext):
        value = ctx.scalar(2)
        if ctx.input_code(0) in QUANT8_TYPES:
            self._check_quant_value(ctx, value)
        return value
