"""Compiled 8-bit kernels of mlts-fast: NNAPI's integer arithmetic, element for element.

Every kernel produces the integers of the reference kernels (`mlts.runtime.ops`): int32 sums of
centred values, the fixed-point output rescale (a doubling high multiply and a rounding right
shift: in float64 lanes where `steps_conv.Requantizer` proved that exact, else in int64 lanes),
the output zero point and the activation clamp. Outputs are written as `value - out_sub`
into an array of any dtype: uint8/int8 storage with out_sub 0, or (out_sub = zero point) the
centred values in float32/float64, ready to be the input matrix of the next BLAS GEMM.
Per-channel parameters (bias, requantizer) come tiled and rows are walked flat, as in
kernels_float (see its module doc).
"""
from __future__ import annotations

import numpy as np

from .jit import kernel
from .kernels_float import bordered_row, depthwise_row_3x3, depthwise_taps, pool_window, unrolled_region

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


_U31 = np.uint64(31)
_PRODUCT_OFFSET = (1 << 62) + (1 << 30)
_ROUNDING_OFFSET = np.uint64((1 << 40) - (1 << 31))


@kernel(inline="always")
def rescale(v, k, rq):
    """The conv output rescale of one value (`_conv_common.rescale_in_place`) for channel k.

    rq = (multiplier int32, left shift, half, negative mask, right shift, correction), see
    `steps_conv.Requantizer`. Preconditions checked at preparation: |v| << left fits int32 (so no
    saturation happens) and the multiplier is >= 0. The arithmetic is offset so that every shift is
    a logical shift of a non-negative 64-bit value, which AVX2 vectorizes:
    floor((v * m + 2**30) / 2**31) + 2**31 = (v * m + 2**62 + 2**30) >> 31, then the rounding right
    shift (ties away from zero) on that value plus 2**40, minus 2**(40 - right).
    """
    mult, left, half, negative_mask, right, correction = rq
    v = np.int64(np.int32(v << left[k]))
    y = np.uint64(v * np.int64(mult[k]) + _PRODUCT_OFFSET) >> _U31
    negative = np.uint64(1) if y < np.uint64(1 << 31) else np.uint64(0)
    t = y + half[k] - (negative & negative_mask[k]) + _ROUNDING_OFFSET
    return np.int64(t >> right[k]) - correction[k]


@kernel(inline="always")
def doubling_high_mul(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul on int32 values held in int64 (any signs)."""
    if a == INT32_MIN and b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    t = ab + ((1 << 30) if ab >= 0 else (1 - (1 << 30)))
    return (t >> 31) if t >= 0 else -((-t) >> 31)


@kernel(inline="always")
def rounding_divide_by_pot(x, exponent):
    """gemmlowp RoundingDivideByPOT: x / 2**exponent, ties away from zero."""
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if (x & mask) > threshold else 0)


@kernel(inline="always")
def multiply_by_quantized_multiplier(x, mult, left, right):
    """`quant.multiply_by_quantized_multiplier` on one value: saturating left shift, doubling high
    multiply, rounding right shift."""
    x = min(max(x << left, INT32_MIN), INT32_MAX)
    return rounding_divide_by_pot(doubling_high_mul(x, mult), right)


@kernel(inline="always")
def requantize_exact(a, q, fq, span, base):
    """The requantization of one exact sum `a` (float32/float64) for tiled channel q in float64 lanes,
    bit for bit what `rescale` + zero point + clamp gives, where `steps_conv.Requantizer` proved it:
    fq = (bias, scale, tau, k_positive, k_negative), see there. t = (a + bias) * scale is the doubling
    high multiply's product scaled by 2**-(31 + right) (exact: below 2**52 when it matters), the
    rounding offsets (ties up, then ties away from zero: one less below tau) and zero point minus lo
    added, floor by truncation of the clamped non-negative value, then `base` = lo - out_sub."""
    bias, scale, tau, kpos, kneg = fq
    t = (a + bias[q]) * scale[q]
    kp = kpos[q]
    kn = kneg[q]
    x = t + (kn if t < tau[q] else kp)
    return np.int32(np.int32(min(max(x, 0.0), span)) + base)


@kernel
def requantize_rows(acc, bias, rq, fq, exact, zero_point, lo, hi, out, out_sub):
    """[M, O] exact integer sums (held in float32/float64) + bias -> out [M, O] (see the module doc);
    acc and out C-contiguous, bias (int64) and rq, fq tiled. `exact`: the float64 form (fq) was proved
    bit-exact at preparation; else the int64 form (rq)."""
    src = acc.reshape(-1)
    dst = out.reshape(-1)
    tile = bias.shape[0]
    n = src.shape[0]
    span = np.float64(hi - lo)
    base = np.int32(lo - out_sub)
    for start in range(0, n, tile):
        m = min(tile, n - start)
        a, o = src[start:start + m], dst[start:start + m]
        if exact:
            for q in range(m):
                o[q] = requantize_exact(np.float64(a[q]), q, fq, span, base)
        else:
            for q in range(m):
                v = rescale(np.int64(np.int32(a[q])) + bias[q], q, rq) + zero_point
                o[q] = np.int32(min(max(v, lo), hi) - out_sub)


@kernel
def requantize_rows_padded(acc, bias, rq, fq, exact, zero_point, lo, hi, out, out_sub, pad_top, pad_left, h, w,
                           g0, g1):
    """`requantize_rows` of image rows [g0, g1) into the h x w interior of out [N, Hp, Wp, O], the border
    holding the zero point (centred: 0); see `kernels_float.bias_activation_padded`."""
    fill = np.int32(zero_point - out_sub)
    for g in range(g0, g1):
        first = (g - g0) * w
        requantize_rows(acc[first:first + w], bias, rq, fq, exact, zero_point, lo, hi,
                        bordered_row(out, g, h, pad_top, pad_left, w, fill), out_sub)


@kernel
def centre(x, out, sub):
    """[M, K] stored values -> out = x - sub (exact in out's float type): a GEMM's input matrix."""
    m, k = x.shape
    for r in range(m):
        for c in range(k):
            out[r, c] = x[r, c] - sub


@kernel
def _depthwise_pixel(x, x_zp, w, bias, rq, zero_point, lo, hi, out, out_sub, acc, n, oh, ow,
                     stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, depth_mult):
    """One output pixel, any filter size and multiplier; float64 sums of integers are exact."""
    oc = out.shape[3]
    for k in range(oc):
        acc[k] = 0.0
    depthwise_taps(x, np.float64(x_zp), w, acc, n, oh, ow, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w,
                   depth_mult)
    for k in range(oc):
        v = rescale(np.int64(np.int32(acc[k])) + bias[k], k, rq) + zero_point
        out[n, oh, ow, k] = np.int32(min(max(v, lo), hi) - out_sub)


@kernel
def depthwise(x, x_zp, w, wt, zero_tile, bias, rq, fq, exact, zero_point, lo, hi, out, out_sub, acc, sums,
              stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, depth_mult):
    """Quantized depthwise convolution, NHWC. x: stored values (x_zp their zero point) or values
    already centred in float32 (x_zp 0); w [KH,KW,OC] centred filter (float32, integer-valued), wt
    the same tiled along the channels (and `zero_tile` float32 zeros of its tile length); tiled int64
    bias and requantizer `rq`. Scratch: `acc` float64 [OC], `sums` float32 [OW, OC].

    Padding taps are skipped (they read the zero point: centred 0). Away from the border, 3x3 filters
    with multiplier 1 sum a row at a time in float32 (exact, since |sum| <= 9 * 255 * 255 < 2**24;
    stride 1 walks the row flat), then requantize the row: loops that vectorize. Border pixels and
    other filters go pixel by pixel.
    """
    n_batch, oh_n, ow_n, oc = out.shape
    oh0, oh1, ow0, ow1 = unrolled_region(x, w, out, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, depth_mult)
    zp = np.float32(x_zp)
    big = np.float32(np.inf)
    for n in range(n_batch):
        for oh in range(oh_n):
            inside = oh0 <= oh < oh1
            for ow in range(ow_n):
                if not inside or ow < ow0 or ow >= ow1:
                    _depthwise_pixel(x, x_zp, w, bias, rq, zero_point, lo, hi, out, out_sub, acc,
                                     n, oh, ow, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, depth_mult)
            if not inside:
                continue
            ih = oh * stride_h - pad_top
            r0, r1, r2 = x[n, ih], x[n, ih + dil_h], x[n, ih + 2 * dil_h]
            if stride_w == 1:
                depthwise_row_3x3(r0, r1, r2, wt, zero_tile, zp, ow0, ow1, pad_left, dil_w, -big, big, sums)
            else:
                for ow in range(ow0, ow1):
                    c0 = ow * stride_w - pad_left
                    c1 = c0 + dil_w
                    c2 = c1 + dil_w
                    for k in range(oc):
                        s = (np.float32(r0[c0, k]) - zp) * w[0, 0, k]
                        s += (np.float32(r0[c1, k]) - zp) * w[0, 1, k]
                        s += (np.float32(r0[c2, k]) - zp) * w[0, 2, k]
                        s += (np.float32(r1[c0, k]) - zp) * w[1, 0, k]
                        s += (np.float32(r1[c1, k]) - zp) * w[1, 1, k]
                        s += (np.float32(r1[c2, k]) - zp) * w[1, 2, k]
                        s += (np.float32(r2[c0, k]) - zp) * w[2, 0, k]
                        s += (np.float32(r2[c1, k]) - zp) * w[2, 1, k]
                        s += (np.float32(r2[c2, k]) - zp) * w[2, 2, k]
                        sums[ow, k] = s
            requantize_rows(sums[ow0:ow1], bias, rq, fq, exact, zero_point, lo, hi, out[n, oh, ow0:ow1], out_sub)


@kernel
def add(a, b, lut_a, lut_b, offset, mult, left, right, zero_point, lo, hi, out, out_sub):
    """Quantized ADD/SUB on flat arrays: the rescaled, left-shifted inputs come from 256-entry tables
    (indexed by stored value + offset), their sum is rescaled to the output (NNAPI's kernel)."""
    for i in range(out.shape[0]):
        s = lut_a[a[i] + offset] + lut_b[b[i] + offset]
        v = multiply_by_quantized_multiplier(s, mult, left, right) + zero_point
        out[i] = np.int32(min(max(v, lo), hi) - out_sub)


@kernel
def add_table(a, b, table, offset_a, offset_b, out):
    """Quantized ADD/SUB on flat arrays through a table of every pair of 8-bit stored values:
    out = table[(a + offset_a) * 256 + b + offset_b] (filled by `add` itself, so the same integers),
    a gather from at most 256 x 256 entries instead of the fixed-point rescales of each element."""
    for i in range(out.shape[0]):
        out[i] = table[(np.int64(a[i]) + offset_a) * 256 + np.int64(b[i]) + offset_b]


@kernel
def pool(x, out, acc, filter_h, filter_w, stride_h, stride_w, pad_top, pad_left, is_max, signed, lo, hi):
    """Quantized average (TFLite's integer rounding: halves up for uint8, away from zero for int8) or
    max pooling over the real elements of each window, NHWC; `acc` an int64 scratch row of C."""
    n_batch, oh_n, ow_n, c = out.shape
    for n in range(n_batch):
        for oh in range(oh_n):
            for ow in range(ow_n):
                count = pool_window(x, n, oh, ow, filter_h, filter_w, stride_h, stride_w, pad_top, pad_left,
                                    is_max, -(1 << 40), acc)
                half = count // 2
                for k in range(c):
                    v = acc[k]
                    if not is_max:
                        if not signed or v > 0:
                            v = (v + half) // count
                        else:
                            v = -((half - v) // count)
                    out[n, oh, ow, k] = min(max(v, lo), hi)


@kernel(inline="always")
def wrap32(x):
    """C int32 wrap-around of an int64 value."""
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


@kernel(inline="always")
def saturating_shift_left(x, exponent):
    """gemmlowp SaturatingMultiplyByPOT for exponent > 0."""
    threshold = (1 << (31 - exponent)) - 1
    if x > threshold:
        return INT32_MAX
    if x < -threshold:
        return INT32_MIN
    return x << exponent


@kernel(inline="always")
def reciprocal_of_sum(total):
    """`ops.softmax.reciprocals_of_sums` of one row sum (int32 in Q12.19): (reciprocal in Q0, right
    shift). The sum is normalized into [1, 2), and 1 / (1 + fraction) is three Newton-Raphson steps
    on the half denominator (gemmlowp one_over_one_plus_x_for_x_in_0_1), step for step."""
    fixed = total & 0xFFFFFFFF
    headroom_plus_one = 32
    v = fixed
    while v > 0:
        v >>= 1
        headroom_plus_one -= 1
    a = wrap32(((fixed << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31))
    s = a + INT32_MAX  # rounding half sum of a and one (Q0)
    t = s + (1 if s >= 0 else -1)
    half_denominator = t // 2 if t >= 0 else -((-t) // 2)
    x = wrap32(1515870810 + doubling_high_mul(half_denominator, -1010580540))  # 48/17 - 32/17 d (Q2)
    for _ in range(3):
        one_minus = wrap32((1 << 29) - doubling_high_mul(half_denominator, x))
        x = wrap32(x + saturating_shift_left(doubling_high_mul(x, one_minus), 2))
    return saturating_shift_left(x, 1), 12 - headroom_plus_one + 31 - 8


@kernel
def softmax(x, contributions, exps, used, offset, out_offset, out):
    """NNAPI's integer softmax of each row of x [R, C] (stored values). Per row: the maximum, the sum
    of the exp contributions (Q12.19, from a table indexed by value - max + offset) wrapped to int32,
    its reciprocal; then out = clamp(round(exp * reciprocal), 0, 255) (+ out_offset), 0 where dropped."""
    for r in range(x.shape[0]):
        m = np.int64(x[r, 0])
        for c in range(x.shape[1]):
            m = max(m, np.int64(x[r, c]))
        total = np.int64(0)
        for c in range(x.shape[1]):
            total += contributions[np.int64(x[r, c]) - m + offset]
        scale, shift = reciprocal_of_sum(wrap32(total))
        for c in range(x.shape[1]):
            d = np.int64(x[r, c]) - m + offset
            v = 0
            if used[d]:
                v = rounding_divide_by_pot(doubling_high_mul(scale, exps[d]), shift)
                v = min(max(v, 0), 255)
            out[r, c] = v + out_offset
