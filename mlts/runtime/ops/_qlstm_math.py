"""Integer arithmetic of NNAPI's quantized LSTM cells (QUANTIZED_16BIT_LSTM, QUANTIZED_LSTM).

Both kernels keep their gates in 16-bit fixed point: gemmlowp's logistic and tanh run on int16 raw
values, whose constants are the int32 ones rounded by 16 bits and whose final exp addition
saturates. `_fixed_point` models the 32-bit formats only, so this module evaluates the same
algorithms for a raw width of `bits` (16 here; 32 reproduces `_fixed_point`, which the tests check).
The rest is the integer toolkit of NNAPI's QUANTIZED_LSTM (its QuantUtils): matrix x batch products
accumulated with saturation, the integer layer normalization with its Newton-Raphson inverse square
root, element-wise products with power-of-two or quantized rescaling.

Conventions as in `_fixed_point`: int64 numpy arrays hold the raw values; a format with `k` integer
bits (Qk) means raw / 2**(bits - 1 - k); plain additions wrap like the C integers they model.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from . import _fixed_point as fp
from .base import OperationContext
from .quant import INT32_MAX, rounding_divide_by_pot, saturating_rounding_doubling_high_mul

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1


# -- raw-width-generic gemmlowp fixed point ------------------------------------------------------
def wrap(x, bits: int = 16) -> np.ndarray:
    """Two's-complement wrap-around to `bits` (what a C cast to int16/int32 does)."""
    half = 1 << (bits - 1)
    return ((np.asarray(x, dtype=np.int64) + half) & ((1 << bits) - 1)) - half


def saturate(x, bits: int = 16) -> np.ndarray:
    return np.clip(np.asarray(x, dtype=np.int64), -(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def mul(a, b, bits: int = 16) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul on `bits`-wide raw values: Qa x Qb -> Q(a+b)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, np.int64(1 << (bits - 2)), np.int64(1 - (1 << (bits - 2))))
    n = ab + nudge
    high = np.where(n >= 0, n >> (bits - 1), -((-n) >> (bits - 1)))  # C division: toward zero
    lowest = -(1 << (bits - 1))
    return np.where((a == lowest) & (b == lowest), np.int64((1 << (bits - 1)) - 1), high)


def multiply_by_pot(x, exponent: int, bits: int = 16) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT: saturating left shift (exponent > 0), rounding right shift (< 0)."""
    x = np.asarray(x, dtype=np.int64)
    if exponent <= 0:
        return x if exponent == 0 else rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (bits - 1 - exponent)) - 1
    return np.where(x > threshold, (1 << (bits - 1)) - 1,
                    np.where(x < -threshold, -(1 << (bits - 1)), x << exponent))


def rescale(x, src_integer_bits: int, dst_integer_bits: int, bits: int = 16) -> np.ndarray:
    return multiply_by_pot(x, src_integer_bits - dst_integer_bits, bits)


def constant(raw32: int, bits: int = 16) -> int:
    """A gemmlowp constant given as an int32 raw value, rounded to a `bits`-wide raw value."""
    return int(rounding_divide_by_pot(np.int64(raw32), 32 - bits))


def one(integer_bits: int, bits: int = 16) -> int:
    return (1 << (bits - 1)) - 1 if integer_bits == 0 else 1 << (bits - 1 - integer_bits)


def _constant_pot(integer_bits: int, exponent: int, bits: int) -> int:
    return 1 << (bits - 1 - integer_bits + exponent)


# The gemmlowp constants (int32 raw values): exp(-1/8), 1/3, 48/17, -32/17 and the barrel shifter's
# exp(-2**k) in Q0; `_fixed_point` holds the same numbers for its 32-bit formats.
_EXP_MINUS_ONE_EIGHTH, _ONE_THIRD = 1895147668, 715827883
_FORTY_EIGHT_OVER_SEVENTEEN, _MINUS_THIRTY_TWO_OVER_SEVENTEEN = 1515870810, -1010580540
_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
               (3, 720401), (4, 242))


def exp_on_interval_between_negative_one_quarter_and_0_excl(a, bits: int = 16) -> np.ndarray:
    """exp(a) for a (Q0) in [-1/4, 0): Taylor expansion around -1/8. Q0; the last addition saturates
    for 16-bit raw values (exp of values just below 0 would otherwise wrap)."""
    c = constant(_EXP_MINUS_ONE_EIGHTH, bits)
    x = wrap(np.asarray(a, dtype=np.int64) + _constant_pot(0, -3, bits), bits)
    x2 = mul(x, x, bits)
    x3 = mul(x2, x, bits)
    x4 = mul(x2, x2, bits)
    x4_over_4 = multiply_by_pot(x4, -2, bits)
    poly = multiply_by_pot(wrap(mul(wrap(x4_over_4 + x3, bits), constant(_ONE_THIRD, bits), bits) + x2, bits),
                           -1, bits)
    total = c + mul(c, wrap(x + poly, bits), bits)
    return saturate(total, bits) if bits == 16 else wrap(total, bits)


def exp_on_negative_values(a, integer_bits: int, bits: int = 16) -> np.ndarray:
    """exp(a) for a <= 0 in Q{integer_bits}; Q0 result (exp(0): the largest Q0 value)."""
    a = np.asarray(a, dtype=np.int64)
    fractional_bits = bits - 1 - integer_bits
    one_quarter = _constant_pot(integer_bits, -2, bits)
    a_mod_quarter_minus_one_quarter = wrap((a & (one_quarter - 1)) - one_quarter, bits)
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(
        rescale(a_mod_quarter_minus_one_quarter, integer_bits, 0, bits), bits)
    remainder = wrap(a_mod_quarter_minus_one_quarter - a, bits)
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            bit = np.int64(1) << (fractional_bits + exponent)
            result = np.where((remainder & bit) != 0, mul(result, constant(multiplier, bits), bits), result)
    if integer_bits > 5:
        clamp = constant(-(1 << (36 - integer_bits)), bits)  # -32.0 in Q{integer_bits}
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, one(0, bits), result)


def _reciprocal_of_half_denominator(half_denominator, bits: int) -> np.ndarray:
    """Q2 Newton-Raphson approximation of 1 / half_denominator (Q0, in [1/2, 1))."""
    x = wrap(constant(_FORTY_EIGHT_OVER_SEVENTEEN, bits)
             + mul(half_denominator, constant(_MINUS_THIRTY_TWO_OVER_SEVENTEEN, bits), bits), bits)
    for _ in range(3):
        one_minus = wrap(one(2, bits) - mul(half_denominator, x, bits), bits)
        x = wrap(x + rescale(mul(x, one_minus, bits), 4, 2, bits), bits)
    return x


def one_over_one_plus_x_for_x_in_0_1(a, bits: int = 16) -> np.ndarray:
    """1 / (1 + a) for a (Q0) in [0, 1); Q0."""
    x = _reciprocal_of_half_denominator(fp.rounding_half_sum(a, one(0, bits)), bits)
    return rescale(x, 1, 0, bits)  # x ~ 2 / (1 + a) in Q2 read as Q1 is exactly the half


def one_minus_x_over_one_plus_x_for_x_in_0_1(a, bits: int = 16) -> np.ndarray:
    """(1 - a) / (1 + a) for a (Q0) in [0, 1); Q0."""
    x = _reciprocal_of_half_denominator(fp.rounding_half_sum(a, one(0, bits)), bits)
    return rescale(wrap(x - one(2, bits), bits), 2, 0, bits)


@functools.lru_cache(maxsize=None)
def _int16_table(function: str, integer_bits: int) -> np.ndarray:
    """`function` (logistic or tanh) of every int16 raw value, computed by the function itself: a lookup in it is
    the same arithmetic, without evaluating gemmlowp's polynomial and Newton steps on each gate vector again."""
    compute = {"logistic": _logistic, "tanh": _tanh}[function]
    table = compute(np.arange(INT16_MIN, INT16_MAX + 1, dtype=np.int64), integer_bits, 16)
    table.flags.writeable = False
    return table


def _looked_up(function: str, a: np.ndarray, integer_bits: int, bits: int) -> np.ndarray | None:
    """The int16 table's values for `a`, or None when the raw width is not 16 or `a` leaves int16's range."""
    if bits != 16 or a.size == 0 or a.min() < INT16_MIN or a.max() > INT16_MAX:
        return None
    return _int16_table(function, integer_bits)[a - INT16_MIN]


def logistic(a, integer_bits: int, bits: int = 16) -> np.ndarray:
    """1 / (1 + exp(-a)) for a in Q{integer_bits}; Q0."""
    a = np.asarray(a, dtype=np.int64)
    found = _looked_up("logistic", a, integer_bits, bits)
    return found if found is not None else _logistic(a, integer_bits, bits)


def tanh(a, integer_bits: int, bits: int = 16) -> np.ndarray:
    """tanh(a) for a in Q{integer_bits}; Q0."""
    a = np.asarray(a, dtype=np.int64)
    found = _looked_up("tanh", a, integer_bits, bits)
    return found if found is not None else _tanh(a, integer_bits, bits)


def _logistic(a: np.ndarray, integer_bits: int, bits: int) -> np.ndarray:
    positive = a > 0
    abs_a = np.where(positive, a, wrap(-a, bits))
    if_positive = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(wrap(-abs_a, bits), integer_bits, bits),
                                                    bits)
    result = np.where(positive, if_positive, wrap(one(0, bits) - if_positive, bits))
    return np.where(a == 0, constant(1 << 30, bits), result)


def _tanh(a: np.ndarray, integer_bits: int, bits: int) -> np.ndarray:
    negative = a < 0
    n = np.where(negative, a, wrap(-a, bits))  # -|a|; exp(2n) by reading n with one more integer bit
    t = one_minus_x_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(n, integer_bits + 1, bits), bits)
    return np.where(a == 0, 0, np.where(negative, wrap(-t, bits), t))


# -- NNAPI's quantized LSTM toolkit ---------------------------------------------------------------
def multiply_by_quantized_multiplier(x, multiplier, shift) -> np.ndarray:
    """x * multiplier * 2**(shift - 31) as NNAPI's LSTM kernels do it: the left shift wraps like the C
    int32 multiplication (quant.multiply_by_quantized_multiplier saturates it instead)."""
    shift = np.asarray(shift, dtype=np.int64)
    scaled = wrap(np.asarray(x, dtype=np.int64) << np.maximum(shift, 0), 32)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(scaled, multiplier), np.maximum(-shift, 0))


def matrix_batch_vector_multiply_accumulate(vectors: np.ndarray, bias: np.ndarray, weights: np.ndarray,
                                            multiplier: int, shift: int, accumulated: np.ndarray,
                                            output_zero_point: int = 0, bits: int = 16) -> np.ndarray:
    """saturate(rescale(bias + vectors . weights^T) + zero point + accumulated) per batch row: each
    product is added to what the gate holds already, saturating to the `bits`-wide result."""
    acc = wrap(bias[np.newaxis, :] + vectors.astype(np.int64) @ weights.astype(np.int64).T, 32)
    acc = multiply_by_quantized_multiplier(acc, multiplier, shift) + output_zero_point + accumulated
    return saturate(acc, bits)


def zero_point_times_weights(zero_point: int, weights: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """bias (or 0) + zero_point x the row sums of `weights`: what the matmuls add for the zero points."""
    sums = weights.astype(np.int64).sum(axis=1)
    base = np.zeros(weights.shape[0], np.int64) if bias is None else bias.astype(np.int64)
    return wrap(base + wrap(sums * zero_point, 32), 32)


def _c_divide(x, divisor: int) -> np.ndarray:
    """Integer division truncating toward zero (C semantics), divisor > 0."""
    x = np.asarray(x, dtype=np.int64)
    return np.where(x >= 0, x // divisor, -((-x) // divisor))


def inverse_sqrt_multiplier(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(multiplier, shift) per value with multiplier * 2**(shift - 31) ~ 1 / sqrt(value): the value is
    normalized by pairs of bits into [2**27, 2**29), its inverse square root found by five
    Newton-Raphson steps in Q3.28, times sqrt(2)/2. Values <= 1 give (INT32_MAX, 0)."""
    values = np.asarray(values, dtype=np.int64)
    small = values <= 1
    x = np.where(small, 1 << 28, values)
    exponent = np.full(x.shape, 11, dtype=np.int64)
    for _ in range(2):  # values below 2**31 need at most two divisions by 4
        big = x >= (1 << 29)
        x = np.where(big, x // 4, x)
        exponent = exponent + big
    pairs = (fp.count_leading_zeros_u32(x) - 1) // 2 - 1
    exponent = exponent - pairs
    x = x << (2 * pairs)
    half_input = rounding_divide_by_pot(x >> 1, 1)  # Q3
    half_three = (1 << 28) + (1 << 27)  # 1.5 in Q3
    r = np.full(x.shape, 1 << 28, dtype=np.int64)  # 1.0 in Q3
    for _ in range(5):
        r3 = fp.saturating_multiply_by_pot(fp.mul(fp.mul(r, r), r), 6)  # Q9 -> Q3
        r = fp.saturating_multiply_by_pot(fp.wrap32(fp.mul(half_three, r) - fp.mul(half_input, r3)), 3)
    r = fp.mul(r, 1518500250)  # sqrt(2)/2 in Q0
    negative = exponent < 0
    r = np.where(negative, fp.wrap32(r << np.where(negative, -exponent, 0)), r)
    exponent = np.where(negative, 0, exponent)
    return np.where(small, INT32_MAX, r), np.where(small, 0, -exponent)


def layer_norm(gates: np.ndarray, weights: np.ndarray, bias: np.ndarray, scale_multiplier: int,
               scale_shift: int, variance_limit: int) -> np.ndarray:
    """NNAPI's integer layer normalization of each batch row of int16 gates: mean and variance with
    10 extra fraction bits, the inverse standard deviation as a quantized multiplier, times the
    int16 weights plus the int32 bias (wrapping like int32), rounded by 10 bits, then rescaled by
    the weights' scale (12 more bits) and saturated to int16."""
    x = gates.astype(np.int64)
    n = x.shape[1]
    mean = _c_divide(x.sum(axis=1) * 1024, n)
    variance = _c_divide((x * x).sum(axis=1) * ((1 << 20) // n) - mean * mean, 1 << 20)
    variance = np.where(variance < 1, variance_limit, variance)
    inv_multiplier, inv_shift = inverse_sqrt_multiplier(variance)
    rescaled = multiply_by_quantized_multiplier(1024 * x - mean[:, np.newaxis], inv_multiplier[:, np.newaxis],
                                                inv_shift[:, np.newaxis])
    weighted = wrap(wrap(rescaled * weights.astype(np.int64), 32) + bias.astype(np.int64), 32)
    rounded = _c_divide(np.where(weighted > 0, weighted + 512, weighted - 512), 1024)
    return saturate(multiply_by_quantized_multiplier(rounded, scale_multiplier, scale_shift + 12), 16)


def checked_log2(x: float) -> int | None:
    """log2(x) when x (as float32) is within 1e-3 of a power of two, else None; float32 arithmetic."""
    x32 = np.float32(x)
    if not (x32 > 0 and math.isfinite(x32)):
        return None
    with np.errstate(all="ignore"):
        log2 = np.float32(np.log(x32)) * (np.float32(1.0) / np.float32(np.log(np.float32(2.0))))
    rounded = np.float32(math.floor(abs(log2) + 0.5) * (1 if log2 >= 0 else -1))
    return int(rounded) if abs(np.float32(log2 - rounded)) < 1e-3 else None


def known_dims(ctx: OperationContext, i: int) -> tuple[int, ...] | None:
    """Input i's dimensions; None for an omitted input, or while building a model where some of its
    dimensions are not known yet."""
    if ctx.is_omitted(i):
        return None
    if not ctx.is_static:
        return ctx.input_shape(i)
    t = ctx.input_type(i)
    if t.dimensions is None or not all(d > 0 for d in t.dimensions):
        return None
    return t.dimensions
