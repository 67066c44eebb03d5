"""HARD_SWISH (NNAPI 1.3, feature level 4): x * relu6(x + 3) / 6, element-wise, any rank.

Operand types: TENSOR_FLOAT32, TENSOR_FLOAT16, TENSOR_QUANT8_ASYMM, TENSOR_QUANT8_ASYMM_SIGNED; the
output has the input's type code and shape, and (quantized) its own scale and zero point.

The quantized kernel is TFLite's reference integer HardSwish, which NNAPI's CPU kernel runs: the
centered input is scaled by 128 into a 16-bit "high resolution" value; one 16-bit multiplier brings
it to the output scale (not yet shifted), another maps [-3, 3] onto the 16-bit range (the
"relu-ish" value, saturating), which is then moved to [0, 1] and multiplied, truncating, with the
first; a final rounding shift and the output zero point give the result. Every step is int16
arithmetic, reproduced here on int64 arrays with the same saturation and wrap-around. NNAPI fails
the execution (OP_FAILED) when input scale / (128 x output scale) is not below 1.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..enums import OperationCode
from ..errors import ResultCode
from ._unary import float_kernel
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8, QUANT8_TYPES, check_output_like_input
from .quant import INT32_MAX, QUANT_RANGE, quantize_multiplier
from .registry import register

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
HIRES_INPUT_SHIFT = 7  # the centered input times 2**7 still fits int16 (|x| <= 255)


@dataclass(frozen=True)
class HardSwishParams:
    """The two 16-bit fixed-point multipliers of the quantized kernel, each with its power-of-two
    exponent (real ~= multiplier * 2**(exponent - 15))."""

    output_multiplier: int
    output_exponent: int
    reluish_multiplier: int
    reluish_exponent: int


def _int32_to_int16_multiplier(multiplier: int) -> int:
    """TFLite DownScaleInt32ToInt16Multiplier: round the top 16 bits of a non-negative Q31 multiplier."""
    if multiplier >= INT32_MAX - (1 << 15):
        return INT16_MAX
    return (multiplier + (1 << 15)) >> 16


def hard_swish_params(input_scale: float, output_scale: float) -> HardSwishParams:
    """The multipliers, derived in float32 from the operands' float32 scales as NNAPI does."""
    hires_input_scale = np.float32(1.0 / 128.0) * np.float32(input_scale)
    reluish_scale = np.float32(3.0) / np.float32(32768.0)  # real 3.0 is 2**15 on the relu-ish scale
    output_multiplier, output_exponent = quantize_multiplier(float(hires_input_scale / np.float32(output_scale)))
    reluish_multiplier, reluish_exponent = quantize_multiplier(float(hires_input_scale / reluish_scale))
    return HardSwishParams(_int32_to_int16_multiplier(output_multiplier), output_exponent,
                           _int32_to_int16_multiplier(reluish_multiplier), reluish_exponent)


# -- int16 fixed-point primitives (values held in int64 arrays) -------------------------------------
def _trunc_div_2_15(x: np.ndarray) -> np.ndarray:
    """C integer division by 2**15 (toward zero)."""
    return np.where(x >= 0, x >> 15, -((-x) >> 15))


def _saturating_rounding_doubling_high_mul16(a, b) -> np.ndarray:
    ab = np.asarray(a, dtype=np.int64) * np.asarray(b, dtype=np.int64)
    result = _trunc_div_2_15(ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14)))
    return np.where((np.asarray(a) == INT16_MIN) & (np.asarray(b) == INT16_MIN), INT16_MAX, result)


def _saturating_doubling_high_mul16(a, b) -> np.ndarray:
    """As above but truncating toward zero (ARM SQDMULH)."""
    ab = np.asarray(a, dtype=np.int64) * np.asarray(b, dtype=np.int64)
    return np.where((np.asarray(a) == INT16_MIN) & (np.asarray(b) == INT16_MIN), INT16_MAX, _trunc_div_2_15(ab))


def _saturating_left_shift16(x: np.ndarray, amount: int) -> np.ndarray:
    return np.clip(x * (1 << amount), INT16_MIN, INT16_MAX)


def _wrap16(x: np.ndarray) -> np.ndarray:
    return ((x + (1 << 15)) & 0xFFFF) - (1 << 15)


def _rounding_divide_by_pot16(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT on int16: its mask 2**exponent - 1 is itself an int16, so for
    exponents of 16 and more it wraps to -1 (and the result is 1 for x >= 0, -1 for x < 0)."""
    mask = int(_wrap16(np.int64((1 << exponent) - 1)))
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def hard_swish_quantized(q: np.ndarray, input_zero_point: int, output_zero_point: int,
                         params: HardSwishParams, qmin: int, qmax: int) -> np.ndarray:
    """TFLite's integer HardSwish on stored values `q` (any integer array); int64 result in [qmin, qmax]."""
    hires = (q.astype(np.int64) - input_zero_point) << HIRES_INPUT_SHIFT
    preshift_output = _saturating_rounding_doubling_high_mul16(hires, params.output_multiplier)
    reluish = hires
    if params.reluish_exponent > 0:  # saturating left shift split around the multiply, as TFLite does
        reluish = _saturating_left_shift16(reluish, params.reluish_exponent - 1)
    reluish = _saturating_rounding_doubling_high_mul16(reluish, params.reluish_multiplier)
    if params.reluish_exponent > 0:
        reluish = _saturating_left_shift16(reluish, 1)
    elif params.reluish_exponent < 0:
        reluish = _rounding_divide_by_pot16(reluish, -params.reluish_exponent)
    reluish = (reluish + (1 << 15)) >> 1  # [-1, 1] -> [0, 1]
    out = _saturating_doubling_high_mul16(reluish, preshift_output)
    out = _rounding_divide_by_pot16(out, -params.output_exponent)
    out = _wrap16(out + output_zero_point)  # added in int16
    return np.clip(out, qmin, qmax)


@register
class HardSwish(Operation):
    code = OperationCode.HARD_SWISH
    supported_types = FLOAT_AND_QUANT8

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(1, 1)
        ctx.check_input_type(0, self.supported_types)
        check_output_like_input(ctx)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [ctx.input_shape(0)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        if ctx.input_code(0) not in QUANT8_TYPES:
            return [float_kernel(x, lambda v: v * np.clip(v + 3, 0, 6) / 6)]
        t_in, t_out = ctx.input_type(0), ctx.output_type(0)
        params = hard_swish_params(t_in.scale, t_out.scale)
        if params.output_exponent > 0:
            raise ctx.fail(f"input scale / (128 x output scale) = {t_in.scale / (128 * t_out.scale):g} must be "
                           f"below 1 for the quantized kernel", output=0, code=ResultCode.OP_FAILED)
        out = hard_swish_quantized(x, t_in.zero_point, t_out.zero_point, params, *QUANT_RANGE[t_out.code])
        return [out.astype(t_out.dtype)]
