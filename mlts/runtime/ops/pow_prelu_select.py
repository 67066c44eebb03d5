"""POW, PRELU, SELECT: element-wise operations on two or three tensors (NNAPI 1.2; signed quant 1.3).

- POW: base ** exponent, TENSOR_FLOAT32 / TENSOR_FLOAT16, NNAPI broadcasting, IEEE results (negative
  base with a non-integer exponent gives NaN, 0 ** negative gives inf), computed in a wider type and
  rounded once.
- PRELU: x >= 0 ? x : x * alpha, TENSOR_FLOAT32 / TENSOR_FLOAT16 / TENSOR_QUANT8_ASYMM (1.2) /
  TENSOR_QUANT8_ASYMM_SIGNED (1.3); alpha has the input's type code and broadcasts against it (the
  output shape is the broadcast shape, as NNAPI's kernel computes it). Quantized PRELU is NNAPI's
  integer kernel: the offset input is rescaled with one multiplier (input scale / output scale)
  where it is >= 0, and its product with the offset alpha with another (input scale x alpha scale /
  output scale) where it is negative; then the output zero point is added and the result clamped.
- SELECT: condition ? input1 : input2 element-wise; the condition is TENSOR_BOOL8, the two inputs
  and the output share one of TENSOR_FLOAT32, TENSOR_FLOAT16, TENSOR_INT32, TENSOR_QUANT8_ASYMM
  (1.2), TENSOR_QUANT8_ASYMM_SIGNED (1.3); all three inputs have the same shape, any rank. Quantized
  inputs are requantized to the output's scale and zero point as MAXIMUM does.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._fp_errors import ignoring_fp_errors
from .base import Operation, OperationContext, Shape
from .common import (FLOAT_AND_QUANT8, FLOAT_QUANT8_AND_INT32, FLOAT_TYPES, QUANT8_TYPES, BroadcastBinary,
                     check_output_like_input)
from .quant import QUANT_RANGE, multiply_by_quantized_multiplier, quantize_multiplier, requantize_to_output
from .registry import register



def _wider(dtype: np.dtype) -> type:
    """Where a float kernel computes before rounding once: float32 for float16, float64 for float32."""
    return np.float32 if dtype == np.float16 else np.float64


@register
class Pow(BroadcastBinary):
    code = OperationCode.POW
    supported_types = FLOAT_TYPES

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        base, exponent = ctx.input(0), ctx.input(1)
        work, dtype = _wider(base.dtype), ctx.output_type(0).dtype
        return [ignoring_fp_errors(lambda: np.power(base.astype(work), exponent.astype(work)).astype(dtype))]


def prelu_multipliers(input_scale: float, alpha_scale: float, output_scale: float
                      ) -> tuple[tuple[int, int], tuple[int, int]]:
    """NNAPI's quantized PRELU multipliers (multiplier, shift) for x >= 0 and for x < 0.

    The scales are float32: input / output is divided in float32; input x alpha is multiplied in
    float32 and then divided by the output scale in double, as NNAPI's kernel does."""
    s_in, s_alpha, s_out = np.float32(input_scale), np.float32(alpha_scale), np.float32(output_scale)
    identity = quantize_multiplier(float(s_in / s_out))
    alpha = quantize_multiplier(float(s_in * s_alpha) / float(s_out))
    return identity, alpha


@register
class Prelu(BroadcastBinary):
    code = OperationCode.PRELU
    supported_types = FLOAT_AND_QUANT8

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x, alpha = ctx.input(0), ctx.input(1)
        t_out = ctx.output_type(0)
        if ctx.input_code(0) in QUANT8_TYPES:
            return [self.quantized(ctx, x, alpha).astype(t_out.dtype)]
        work = _wider(x.dtype)
        xw = x.astype(work)
        return [ignoring_fp_errors(lambda: np.where(xw >= 0, xw, xw * alpha.astype(work)).astype(t_out.dtype))]

    def quantized(self, ctx: OperationContext, x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        t_in, t_alpha, t_out = ctx.input_type(0), ctx.input_type(1), ctx.output_type(0)
        identity, negative = prelu_multipliers(t_in.scale, t_alpha.scale, t_out.scale)
        centered = x.astype(np.int64) - t_in.zero_point
        centered_alpha = alpha.astype(np.int64) - t_alpha.zero_point
        positive_part = multiply_by_quantized_multiplier(centered, *identity)
        negative_part = multiply_by_quantized_multiplier(centered * centered_alpha, *negative)
        out = np.where(centered >= 0, positive_part, negative_part) + t_out.zero_point
        return np.clip(out, *QUANT_RANGE[t_out.code])


@register
class Select(Operation):
    code = OperationCode.SELECT
    # Drivers judge an operation by input 0's type: for SELECT that is the TENSOR_BOOL8 condition.
    # The value types (FLOAT_QUANT8_AND_INT32) are checked in validate.
    supported_types = frozenset({OperandCode.TENSOR_BOOL8})

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(3, 1)
        ctx.check_input_type(0, OperandCode.TENSOR_BOOL8)
        ctx.check_input_type(1, FLOAT_QUANT8_AND_INT32)
        ctx.check_input_type(2, ctx.input_code(1))
        check_output_like_input(ctx, 1)
        # Shapes known only in part (0: unknown) must already agree where known; prepare checks them whole.
        first = ctx.input_type(1).dimensions
        for i in (0, 2):
            other = ctx.input_type(i).dimensions
            if first and other:
                ctx.check(len(other) == len(first) and all(x == y or 0 in (x, y) for x, y in zip(other, first)),
                          self._mismatch(i, other, first), input=i)

    @staticmethod
    def _mismatch(i: int, shape: Shape, first: Shape) -> str:
        return f"{'condition ' if i == 0 else ''}shape {list(shape)} differs from input 1's shape {list(first)}"

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        condition, first, second = (ctx.input_shape(i) for i in range(3))
        ctx.check(condition == first, self._mismatch(0, condition, first), input=0)
        ctx.check(second == first, self._mismatch(2, second, first), input=2)
        return [first]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        condition = ctx.input(0).astype(np.bool_)
        first, second = ctx.input(1), ctx.input(2)
        t_out = ctx.output_type(0)
        if ctx.input_code(1) in QUANT8_TYPES:
            first = requantize_to_output(first, ctx.input_type(1), t_out)
            second = requantize_to_output(second, ctx.input_type(2), t_out)
        return [np.where(condition, first, second).astype(t_out.dtype)]
