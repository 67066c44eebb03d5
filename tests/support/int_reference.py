"""Plain Python-int transcriptions of the gemmlowp / TFLite integer primitives NNAPI's CPU kernels use.

The ops tests compare the quantized kernels bit-exactly against these: they are written from the
documented arithmetic with unbounded Python integers (never from mlts's own kernels), so that they
stay an independent expectation. One home, so that every test agrees on the same primitives.
"""
from __future__ import annotations

import math

import numpy as np

M31 = 1 << 31


def srdhm(a: int, b: int) -> int:
    """Saturating rounding doubling high multiply of two int32 values (gemmlowp)."""
    if a == b == -M31:
        return M31 - 1
    ab = a * b
    n = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
    return n // M31 if n >= 0 else -((-n) // M31)


def rdbp(x: int, e: int) -> int:
    """Rounding divide by 2**e: round to nearest, ties away from zero (gemmlowp RoundingDivideByPOT)."""
    mask = (1 << e) - 1
    remainder, threshold = x & mask, (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if remainder > threshold else 0)


def sat_pot(x: int, e: int) -> int:
    """x * 2**e: rounding for e < 0, saturating to int32 for e > 0 (SaturatingRoundingMultiplyByPOT)."""
    if e <= 0:
        return rdbp(x, -e)
    limit = (1 << (31 - e)) - 1
    return M31 - 1 if x > limit else -M31 if x < -limit else x << e


def exp_negative(a: int, integer_bits: int) -> int:
    """exp(a) for a <= 0 in Q{integer_bits}; result in Q0 (gemmlowp exp_on_negative_values)."""
    fb = 31 - integer_bits
    quarter = 1 << (fb - 2)
    a_mod = (a & (quarter - 1)) - quarter            # in [-1/4, 0)
    x = sat_pot(a_mod, integer_bits) + (1 << 28)       # Q0, shifted by +1/8
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    poly = sat_pot(srdhm(sat_pot(x4, -2) + x3, 715827883) + x2, -1)
    r = 1895147668 + srdhm(1895147668, x + poly)      # exp(-1/8) * (1 + x + x^2/2 + ...)
    rem = a_mod - a
    for k, m in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
                 (3, 720401), (4, 242)):
        if integer_bits > k and rem & (1 << (fb + k)):
            r = srdhm(r, m)
    return M31 - 1 if a == 0 else r


def reciprocal_q2(a: int) -> int:
    """~2 / (1 + a) in Q2 for a in Q0 [0, 1), by Newton-Raphson on the half denominator."""
    h = (a + M31 - 1 + 1) // 2
    x = 1515870810 + srdhm(h, -1010580540)
    for _ in range(3):
        x = x + sat_pot(srdhm(x, (1 << 29) - srdhm(h, x)), 2)
    return x


def one_over_one_plus(a: int) -> int:
    """1 / (1 + a) in Q0 for a in Q0 [0, 1) (gemmlowp one_over_one_plus_x_for_x_in_0_1)."""
    return sat_pot(reciprocal_q2(a), 1)


def frexp_multiplier(real: float) -> tuple[int, int]:
    """(multiplier, shift) with real ~= multiplier * 2**(shift - 31), the mantissa rounded half up."""
    m, e = math.frexp(real)
    q = math.floor(m * M31 + 0.5)
    if q == M31:
        q, e = q // 2, e + 1
    return q, e


def multiplier_below_one(real: float) -> tuple[int, int]:
    """frexp_multiplier for a real multiplier below one: shift <= 0."""
    q, e = frexp_multiplier(real)
    assert e <= 0
    return q, e


def quantize_multiplier_ref(real: float) -> tuple[int, int]:
    """TFLite QuantizeMultiplier: frexp_multiplier, with multipliers below 2**-31 flushed to (0, 0)."""
    if real == 0:
        return 0, 0
    q, e = frexp_multiplier(real)
    return (0, 0) if e < -31 else (q, e)


def rescale(x: int, multiplier: int, shift: int) -> int:
    """x * multiplier * 2**(shift - 31): left shift, srdhm, rounding right shift (MultiplyByQuantizedMultiplier)."""
    return rdbp(srdhm(x * (1 << max(shift, 0)), multiplier), max(-shift, 0))


def requantize_ref(q: int, scale_in: float, zp_in: int, scale_out: float, zp_out: int, lo: int, hi: int) -> int:
    """One value, as NNAPI's requantize: float32 (q - zp) * scale, then double arithmetic, clamped."""
    real = float(np.float32(q - zp_in) * np.float32(scale_in))
    v = real / float(np.float32(scale_out)) + zp_out
    if v < lo:
        return lo
    if v > hi:
        return hi
    return math.floor(v + 0.5) if v >= 0 else -math.floor(-v + 0.5)
