"""NNAPI's integer arithmetic for quantized kernels (gemmlowp/TFLite fixed point), vectorized with numpy.

Quantized kernels must produce NNAPI's exact integers, so they use these helpers instead of float
emulation: a real multiplier M becomes an int32 `multiplier` and a power-of-two `shift` with
M ~= multiplier * 2**(shift - 31), applied with a saturating rounding doubling high multiply and a
rounding right shift.
"""
from __future__ import annotations

import math

import numpy as np

from ..enums import FuseCode, OperandCode
from ..operand_type import OperandType

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

QUANT_RANGE = {
    OperandCode.TENSOR_QUANT8_ASYMM: (0, 255),
    OperandCode.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
    OperandCode.TENSOR_QUANT8_SYMM: (-127, 127),
    OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL: (-127, 127),
    OperandCode.TENSOR_QUANT16_ASYMM: (0, 65535),
    OperandCode.TENSOR_QUANT16_SYMM: (-32768, 32767),
}


def round_half_away(x: float) -> int:
    """C's std::round: halves go away from zero (Python's round() goes to even)."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def round_half_away_array(x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, np.floor(x + 0.5), -np.floor(-x + 0.5))


def quantize_multiplier(real_multiplier: float) -> tuple[int, int]:
    """TFLite QuantizeMultiplier: (multiplier, shift) with real ~= multiplier * 2**(shift-31)."""
    if real_multiplier == 0.0:
        return 0, 0
    q, shift = math.frexp(real_multiplier)
    q_fixed = round_half_away(q * (1 << 31))
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        return INT32_MAX, 30
    return int(q_fixed), int(shift)


def _trunc_div_pow2(x: np.ndarray, bits: int) -> np.ndarray:
    """Integer division by 2**bits truncating toward zero (C semantics)."""
    return np.where(x >= 0, x >> bits, -((-x) >> bits))


def saturating_rounding_doubling_high_mul(a, b) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int32 values held in int64 arrays."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    result = _trunc_div_pow2(ab + nudge, 31)
    overflow = (a == INT32_MIN) & (b == INT32_MIN)
    return np.where(overflow, np.int64(INT32_MAX), result)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT: x / 2**exponent rounded to nearest, ties away from zero."""
    x = np.asarray(x, dtype=np.int64)
    exponent = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0).astype(np.int64)
    return (x >> exponent) + (remainder > threshold).astype(np.int64)


def saturate_int32(x: np.ndarray) -> np.ndarray:
    return np.clip(x, INT32_MIN, INT32_MAX)


def multiply_by_quantized_multiplier(x, multiplier, shift) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier; multiplier/shift may be per-channel arrays."""
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    scaled = saturate_int32(np.asarray(x, dtype=np.int64) * (np.int64(1) << left))
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(scaled, multiplier), right)


def quantize_multiplier_array(real_multipliers) -> tuple[np.ndarray, np.ndarray]:
    pairs = [quantize_multiplier(float(m)) for m in np.ravel(real_multipliers)]
    mult = np.array([p[0] for p in pairs], dtype=np.int64)
    shift = np.array([p[1] for p in pairs], dtype=np.int64)
    return mult, shift


def quantized_activation_range(fuse: int, out: OperandType) -> tuple[int, int]:
    """NNAPI CalculateActivationRange for quantized outputs (std::round of the real bounds)."""
    qmin, qmax = QUANT_RANGE[out.code]

    def quantize(f: float) -> int:
        # NNAPI divides in float32 (the operand's scale is a float); doubles round differently at ties.
        return out.zero_point + round_half_away(float(np.float32(f) / np.float32(out.scale)))

    if fuse == FuseCode.RELU:
        return max(qmin, quantize(0.0)), qmax
    if fuse == FuseCode.RELU6:
        return max(qmin, quantize(0.0)), min(qmax, quantize(6.0))
    if fuse == FuseCode.RELU1:
        return max(qmin, quantize(-1.0)), min(qmax, quantize(1.0))
    return qmin, qmax


def float_activation_range(fuse: int) -> tuple[float, float]:
    if fuse == FuseCode.RELU:
        return 0.0, math.inf
    if fuse == FuseCode.RELU6:
        return 0.0, 6.0
    if fuse == FuseCode.RELU1:
        return -1.0, 1.0
    return -math.inf, math.inf


def apply_float_activation(x: np.ndarray, fuse: int) -> np.ndarray:
    """Fused activation on a float result; keeps NaN as NaN (as std::min/max chains do)."""
    if fuse == FuseCode.NONE:
        return x
    lo, hi = float_activation_range(fuse)
    return np.clip(x, lo, hi)


def quantize_array(real: np.ndarray, t: OperandType) -> np.ndarray:
    """Float -> quantized storage of type `t` with NNAPI's rounding (half away from zero) and clamping."""
    lo, hi = QUANT_RANGE[t.code]
    q = round_half_away_array(np.asarray(real, dtype=np.float64) / t.scale) + t.zero_point
    return np.clip(q, lo, hi).astype(t.dtype)


def dequantize_array(q: np.ndarray, t: OperandType) -> np.ndarray:
    """Quantized storage -> float64 real values (per-channel aware)."""
    q = np.asarray(q, dtype=np.float64)
    if t.channel_quant is not None:
        shape = [1] * q.ndim
        shape[t.channel_quant.channel_dim] = -1
        return q * np.asarray(t.channel_quant.scales, dtype=np.float64).reshape(shape)
    return (q - t.zero_point) * t.scale


def requantize_to_output(q: np.ndarray, t_in: OperandType, t_out: OperandType) -> np.ndarray:
    """NNAPI's requantize (MAXIMUM, MINIMUM, SELECT): the real value (q - zp_in) * scale_in is formed
    in float32, divided by the output scale in double, offset by the output zero point, clamped to the
    type's range and rounded half away from zero. Returns int64 stored values."""
    if t_in.scale == t_out.scale and t_in.zero_point == t_out.zero_point:
        return q.astype(np.int64)  # exact: |q - zp| <= 510 keeps the float32 error far below half a step
    real = (q.astype(np.int32) - np.int32(t_in.zero_point)).astype(np.float32) * np.float32(t_in.scale)
    value = real.astype(np.float64) / float(np.float32(t_out.scale)) + t_out.zero_point
    lo, hi = QUANT_RANGE[t_out.code]
    return round_half_away_array(np.clip(value, lo, hi)).astype(np.int64)
