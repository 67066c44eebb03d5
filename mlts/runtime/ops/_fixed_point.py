"""gemmlowp-style fixed-point math for the quantized LOGISTIC, TANH and SOFTMAX kernels.

NNAPI's CPU kernels for these operations never touch floating point on the data path: the input is
rescaled into a signed 32-bit fixed-point number with a few integer bits (Q4.27 for LOGISTIC/TANH,
Q5.26 for SOFTMAX), and exp/logistic/tanh/reciprocal are evaluated with integer polynomials,
a barrel shifter of exp(-2^k) constants and Newton-Raphson division. Reproducing NNAPI's exact
integers means reproducing those steps, which this module does on whole numpy arrays at once.

Conventions: every value is an int64 numpy array that holds an int32 "raw" fixed-point value. A
format with `k` integer bits (written Qk) represents raw / 2**(31 - k). Plain additions and
subtractions wrap around like the C int32 arithmetic they model (`wrap32`); multiplications are
saturating rounding doubling high multiplies, as in gemmlowp.
"""
from __future__ import annotations

import math

import numpy as np

from .quant import INT32_MAX, INT32_MIN, rounding_divide_by_pot, saturating_rounding_doubling_high_mul

__all__ = [
    "as_raw", "wrap32", "mul", "rounding_divide_by_pot", "saturating_multiply_by_pot", "rescale",
    "rounding_half_sum", "exp_on_interval_between_negative_one_quarter_and_0_excl",
    "exp_on_negative_values", "one_over_one_plus_x_for_x_in_0_1",
    "one_minus_x_over_one_plus_x_for_x_in_0_1", "logistic", "tanh", "one", "constant_pot",
    "quantize_multiplier_greater_than_one", "calculate_input_radius",
    "multiply_by_quantized_multiplier_greater_than_one", "count_leading_zeros_u32",
]

_U32 = (1 << 32) - 1


def as_raw(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def wrap32(x) -> np.ndarray:
    """Two's-complement int32 wrap-around of an int64 array (C int32 overflow as it behaves in practice)."""
    x = as_raw(x)
    return ((x + (1 << 31)) & _U32) - (1 << 31)


def mul(a, b) -> np.ndarray:
    """Fixed-point product: Qa x Qb -> Q(a+b), i.e. the raw saturating rounding doubling high multiply."""
    return saturating_rounding_doubling_high_mul(a, b)


def saturating_multiply_by_pot(x, exponent: int) -> np.ndarray:
    """x * 2**exponent: a saturating left shift for exponent > 0, a rounding right shift for < 0."""
    x = as_raw(x)
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    shifted = x << exponent
    return np.where(x > threshold, INT32_MAX, np.where(x < -threshold, INT32_MIN, shifted))


def rescale(x, src_integer_bits: int, dst_integer_bits: int) -> np.ndarray:
    """Change the format of x from Q{src} to Q{dst}, rounding or saturating as needed."""
    return saturating_multiply_by_pot(x, src_integer_bits - dst_integer_bits)


def rounding_half_sum(a, b) -> np.ndarray:
    """(a + b) / 2 rounded to nearest, ties away from zero (ARM VRHADD semantics on int32)."""
    s = as_raw(a) + as_raw(b)
    t = s + np.where(s >= 0, 1, -1)
    return np.where(t >= 0, t // 2, -((-t) // 2))


def one(integer_bits: int) -> np.ndarray:
    """The fixed-point 1.0 in Qk; Q0 cannot hold 1.0 exactly and uses the largest raw value."""
    return np.int64(INT32_MAX if integer_bits == 0 else 1 << (31 - integer_bits))


def constant_pot(integer_bits: int, exponent: int) -> np.int64:
    """2**exponent in Qk (must be exactly representable)."""
    offset = 31 - integer_bits + exponent
    assert 0 <= offset < 31
    return np.int64(1 << offset)


# Constants of the gemmlowp algorithms, as raw Q0 / Q2 values.
_EXP_MINUS_ONE_EIGHTH_Q0 = 1895147668          # exp(-1/8)
_ONE_THIRD_Q0 = 715827883                      # 1/3
_FORTY_EIGHT_OVER_SEVENTEEN_Q2 = 1515870810    # 48/17
_MINUS_THIRTY_TWO_OVER_SEVENTEEN_Q2 = -1010580540  # -32/17
# exp(-2**k) in Q0 for the barrel shifter, k = -2 .. 4.
_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
               (2, 39332535), (3, 720401), (4, 242))


def exp_on_interval_between_negative_one_quarter_and_0_excl(a) -> np.ndarray:
    """exp(a) for a (Q0) in [-1/4, 0): 4th-order Taylor expansion around -1/8. Returns Q0."""
    x = wrap32(as_raw(a) + constant_pot(0, -3))
    x2 = mul(x, x)
    x3 = mul(x2, x)
    x4 = mul(x2, x2)
    x4_over_4 = saturating_multiply_by_pot(x4, -2)
    poly = saturating_multiply_by_pot(wrap32(mul(wrap32(x4_over_4 + x3), _ONE_THIRD_Q0) + x2), -1)
    return wrap32(_EXP_MINUS_ONE_EIGHTH_Q0 + mul(_EXP_MINUS_ONE_EIGHTH_Q0, wrap32(x + poly)))


def exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    """exp(a) for a <= 0 given in Q{integer_bits}; the result is Q0 (exp(0) gives the largest Q0 value)."""
    a = as_raw(a)
    fractional_bits = 31 - integer_bits
    one_quarter = constant_pot(integer_bits, -2)
    mask = one_quarter - 1
    a_mod_quarter_minus_one_quarter = wrap32((a & mask) - one_quarter)
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(
        rescale(a_mod_quarter_minus_one_quarter, integer_bits, 0))
    remainder = wrap32(a_mod_quarter_minus_one_quarter - a)
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            bit = np.int64(1) << (fractional_bits + exponent)
            result = np.where((remainder & bit) != 0, mul(result, multiplier), result)
    if integer_bits > 5:
        clamp = -(1 << (36 - integer_bits))  # -32.0 in Q{integer_bits}
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, one(0), result)


def _newton_raphson_reciprocal_of_half_denominator(half_denominator) -> np.ndarray:
    """Q2 approximation of 1 / half_denominator for half_denominator (Q0) in [1/2, 1)."""
    x = wrap32(_FORTY_EIGHT_OVER_SEVENTEEN_Q2 + mul(half_denominator, _MINUS_THIRTY_TWO_OVER_SEVENTEEN_Q2))
    one_q2 = one(2)
    for _ in range(3):
        half_denominator_times_x = mul(half_denominator, x)
        one_minus = wrap32(one_q2 - half_denominator_times_x)
        x = wrap32(x + rescale(mul(x, one_minus), 4, 2))
    return x


def one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """1 / (1 + a) for a (Q0) in [0, 1). Returns Q0."""
    half_denominator = rounding_half_sum(a, one(0))
    x = _newton_raphson_reciprocal_of_half_denominator(half_denominator)
    # x ~ 2 / (1 + a) in Q2; halving it exactly gives Q1, then convert to Q0.
    return rescale(x, 1, 0)


def one_minus_x_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """(1 - a) / (1 + a) for a (Q0) in [0, 1). Returns Q0."""
    half_denominator = rounding_half_sum(a, one(0))
    x = _newton_raphson_reciprocal_of_half_denominator(half_denominator)
    return rescale(wrap32(x - one(2)), 2, 0)


def logistic(a, integer_bits: int) -> np.ndarray:
    """1 / (1 + exp(-a)) for any a in Q{integer_bits}. Returns Q0."""
    a = as_raw(a)
    positive = a > 0
    abs_a = np.where(positive, a, wrap32(-a))
    result_if_positive = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(wrap32(-abs_a), integer_bits))
    result_if_negative = wrap32(one(0) - result_if_positive)
    result = np.where(positive, result_if_positive, result_if_negative)
    return np.where(a == 0, np.int64(1 << 30), result)


def tanh(a, integer_bits: int) -> np.ndarray:
    """tanh(a) for any a in Q{integer_bits}. Returns Q0."""
    a = as_raw(a)
    negative = a < 0
    n = np.where(negative, a, wrap32(-a))  # -|a|
    # exp(2n): the doubling is exact by reading n with one more integer bit.
    t = one_minus_x_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(n, integer_bits + 1))
    result = np.where(negative, wrap32(-t), t)
    return np.where(a == 0, 0, result)


# -- multipliers ------------------------------------------------------------------------------
def quantize_multiplier_greater_than_one(real_multiplier: float) -> tuple[int, int] | None:
    """NNAPI QuantizeMultiplierGreaterThanOne: (multiplier, left_shift) with
    real ~= multiplier * 2**(left_shift - 31); None when real <= 1 (NNAPI then fails the operation)."""
    if not real_multiplier > 1.0 or not math.isfinite(real_multiplier):
        return None
    q, shift = math.frexp(real_multiplier)
    q_fixed = int(math.floor(q * (1 << 31) + 0.5))  # std::round of a positive value
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < 0 or q_fixed > INT32_MAX:
        return None
    return q_fixed, shift


def calculate_input_radius(input_integer_bits: int, input_left_shift: int, total_signed_bits: int = 31) -> int:
    """Largest |input| whose rescaled value still fits the Q{input_integer_bits} format."""
    max_input_rescaled = (1.0 * ((1 << input_integer_bits) - 1) * (1 << (total_signed_bits - input_integer_bits))
                          / (1 << input_left_shift))
    return int(math.floor(max_input_rescaled))


def multiply_by_quantized_multiplier_greater_than_one(x, multiplier: int, left_shift: int) -> np.ndarray:
    """x * multiplier * 2**(left_shift - 31) with gemmlowp rounding (x*2**left_shift must fit int32)."""
    return mul(wrap32(as_raw(x) << left_shift), multiplier)


def count_leading_zeros_u32(x) -> np.ndarray:
    """Leading zero bits of x read as uint32 (32 for 0)."""
    v = as_raw(x) & _U32
    length = np.zeros_like(v)
    for s in (16, 8, 4, 2, 1):
        big = v >= (np.int64(1) << s)
        length = length + np.where(big, s, 0)
        v = np.where(big, v >> s, v)
    length = length + (v > 0)
    return 32 - length
