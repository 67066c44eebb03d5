"""Compiled float kernels of mlts-fast (NHWC, results written into caller-owned buffers).

numba compiles each kernel once (cached on disk, specialized per array dtype); the loops keep the
channel axis innermost so that it vectorizes, and fuse the bias and the activation clamp into the
pass that produces the values, so that no kernel needs a second pass or a temporary array.
Activation bounds are float32 (lo, hi), +-inf for "no clamp". Callers pass float32 scalars so that
nothing is promoted to float64 inside the loops.

Networks with few channels (8 to 48) get loops over the channel axis too short for LLVM's vector
loops (it wants 32 floats or more per iteration and falls back to scalar code). So per-channel
parameters come tiled (`step.channel_tile`: repeated to a length that is a multiple of the channel
count and at least TILE), and the kernels walk NHWC rows flat, a tile at a time.
"""
from __future__ import annotations

import numpy as np

from .jit import kernel


@kernel(inline="always")
def depthwise_taps(x, sub, w, acc, n, oh, ow, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, mult):
    """acc[k] += (x - sub) * w over the taps of output pixel (n, oh, ow) inside x [N,H,W,C] (taps in
    the padding are skipped), for any filter w [KH,KW,OC] and depth multiplier. The arithmetic is in
    the types of x, sub and w: float32 throughout for a float x and sub (x - 0 is exactly x)."""
    _, h, wd, _ = x.shape
    for i in range(w.shape[0]):
        ih = oh * stride_h - pad_top + i * dil_h
        if ih < 0 or ih >= h:
            continue
        for j in range(w.shape[1]):
            iw = ow * stride_w - pad_left + j * dil_w
            if iw < 0 or iw >= wd:
                continue
            for k in range(w.shape[2]):
                acc[k] += (x[n, ih, iw, k // mult] - sub) * w[i, j, k]


@kernel
def _depthwise_pixel(x, w, b, out, acc, n, oh, ow, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, mult,
                     lo, hi):
    """One output pixel, any filter size and depth multiplier."""
    oc = out.shape[3]
    for k in range(oc):
        acc[k] = b[k]
    depthwise_taps(x, np.float32(0), w, acc, n, oh, ow, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, mult)
    for k in range(oc):
        out[n, oh, ow, k] = min(max(acc[k], lo), hi)


@kernel
def interior(out_n, stride, pad, span, size):
    """[first, last) output positions whose whole (dilated) filter span lies inside the input."""
    first = 0
    while first < out_n and first * stride - pad < 0:
        first += 1
    last = out_n
    while last > first and (last - 1) * stride - pad + span - 1 >= size:
        last -= 1
    return first, last


@kernel
def unrolled_region(x, w, out, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, mult):
    """(first row, end row, first column, end column) of the output pixels of a depthwise convolution
    whose every tap lies inside x: the kernels' unrolled path. Empty unless the filter is 3x3 with
    depth multiplier 1."""
    if w.shape[0] != 3 or w.shape[1] != 3 or mult != 1:
        return 0, 0, 0, 0
    oh0, oh1 = interior(out.shape[1], stride_h, pad_top, 2 * dil_h + 1, x.shape[1])
    ow0, ow1 = interior(out.shape[2], stride_w, pad_left, 2 * dil_w + 1, x.shape[2])
    return oh0, oh1, ow0, ow1


@kernel
def depthwise(x, w, wt, b, out, acc, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, mult, lo, hi):
    """x [N,H,W,C], w [KH,KW,C*mult], b [C*mult] -> out [N,OH,OW,C*mult] = clamp(conv + b, lo, hi).

    3x3 filters with multiplier 1 away from the border take a path with the nine taps unrolled (the
    sum stays in a register): stride 1 along each row flat (w tiled in wt [3,3,T], b tiled), other
    strides a pixel at a time; everything else goes pixel by pixel. `acc`: float32 scratch of C*mult.
    """
    n_batch, oh_n, ow_n, oc = out.shape
    oh0, oh1, ow0, ow1 = unrolled_region(x, w, out, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, mult)
    for n in range(n_batch):
        for oh in range(oh_n):
            inside = oh0 <= oh < oh1
            for ow in range(ow_n):
                if not inside or ow < ow0 or ow >= ow1:
                    _depthwise_pixel(x, w, b, out, acc, n, oh, ow, stride_h, stride_w, pad_top, pad_left,
                                     dil_h, dil_w, mult, lo, hi)
            if not inside:
                continue
            ih = oh * stride_h - pad_top
            if stride_w == 1:
                depthwise_row_3x3(x[n, ih], x[n, ih + dil_h], x[n, ih + 2 * dil_h], wt, b, np.float32(0), ow0,
                                  ow1, pad_left, dil_w, lo, hi, out[n, oh])
                continue
            r0 = x[n, ih]
            r1 = x[n, ih + dil_h]
            r2 = x[n, ih + 2 * dil_h]
            o = out[n, oh]
            for ow in range(ow0, ow1):
                c0 = ow * stride_w - pad_left
                c1 = c0 + dil_w
                c2 = c1 + dil_w
                for k in range(oc):
                    s = b[k]
                    s += r0[c0, k] * w[0, 0, k]
                    s += r0[c1, k] * w[0, 1, k]
                    s += r0[c2, k] * w[0, 2, k]
                    s += r1[c0, k] * w[1, 0, k]
                    s += r1[c1, k] * w[1, 1, k]
                    s += r1[c2, k] * w[1, 2, k]
                    s += r2[c0, k] * w[2, 0, k]
                    s += r2[c1, k] * w[2, 1, k]
                    s += r2[c2, k] * w[2, 2, k]
                    o[ow, k] = min(max(s, lo), hi)


@kernel(inline="always")
def depthwise_row_3x3(r0, r1, r2, wt, b, sub, first, last, pad_left, dil_w, lo, hi, o):
    """Output columns [first, last) of one row of a stride-1 3x3 depthwise convolution, walked flat
    (pixel x channel), a tile at a time: o = clamp(b + sum of (r - sub) * w over the nine taps, lo,
    hi), summed in the order of the pixel loop. Rows r* [W, C] and o [OW, C]; wt [3, 3, T], b [T]
    tiled (T a multiple of C)."""
    c = o.shape[1]
    f0, f1, f2 = r0.reshape(-1), r1.reshape(-1), r2.reshape(-1)
    of = o.reshape(-1)
    d0 = -pad_left * c
    d1 = d0 + dil_w * c
    d2 = d1 + dil_w * c
    tile = b.shape[0]
    end = last * c
    for start in range(first * c, end, tile):
        m = min(tile, end - start)
        # one zero-based slice per tap: offset indexing (f0[p + d0]) keeps LLVM from vectorizing
        a0, a1, a2 = f0[start + d0:start + d0 + m], f0[start + d1:start + d1 + m], f0[start + d2:start + d2 + m]
        a3, a4, a5 = f1[start + d0:start + d0 + m], f1[start + d1:start + d1 + m], f1[start + d2:start + d2 + m]
        a6, a7, a8 = f2[start + d0:start + d0 + m], f2[start + d1:start + d1 + m], f2[start + d2:start + d2 + m]
        dst = of[start:start + m]
        for q in range(m):
            s = b[q]
            s += (a0[q] - sub) * wt[0, 0, q]
            s += (a1[q] - sub) * wt[0, 1, q]
            s += (a2[q] - sub) * wt[0, 2, q]
            s += (a3[q] - sub) * wt[1, 0, q]
            s += (a4[q] - sub) * wt[1, 1, q]
            s += (a5[q] - sub) * wt[1, 2, q]
            s += (a6[q] - sub) * wt[2, 0, q]
            s += (a7[q] - sub) * wt[2, 1, q]
            s += (a8[q] - sub) * wt[2, 2, q]
            dst[q] = min(max(s, lo), hi)


@kernel
def _bias_activation_into(y, b, lo, hi, out):
    """out [M, O] = clamp(y + b, lo, hi), out distinct from y; b tiled (see the module doc)."""
    src = y.reshape(-1)
    dst = out.reshape(-1)
    tile = b.shape[0]
    n = src.shape[0]
    for start in range(0, n, tile):
        m = min(tile, n - start)
        a, o = src[start:start + m], dst[start:start + m]
        for q in range(m):
            o[q] = min(max(a[q] + b[q], lo), hi)


@kernel
def bias_activation(y, b, lo, hi):
    """In place on a [M, O] GEMM result: y = clamp(y + b, lo, hi); b tiled. (A separate loop: written
    as `_bias_activation_into(y, ..., y)`, the possible aliasing keeps LLVM from vectorizing.)"""
    flat = y.reshape(-1)
    tile = b.shape[0]
    n = flat.shape[0]
    for start in range(0, n, tile):
        a = flat[start:start + min(tile, n - start)]
        for q in range(a.shape[0]):
            a[q] = min(max(a[q] + b[q], lo), hi)


@kernel(inline="always")
def bordered_row(out, g, h, pad_top, pad_left, w, fill):
    """Image row g (counted over batch x height) of out [N, Hp, Wp, C], a buffer whose h x w interior
    starts at (pad_top, pad_left): writes `fill` into the row's border pixels (and, at an image's
    first and last row, into the border rows above and below), and returns the row's w interior
    pixels for the caller to write."""
    n = g // h
    ih = g % h
    if ih == 0:
        for i in range(pad_top):
            out[n, i] = fill
    if ih == h - 1:
        for i in range(pad_top + h, out.shape[1]):
            out[n, i] = fill
    row = out[n, pad_top + ih]
    row[:pad_left] = fill
    row[pad_left + w:] = fill
    return row[pad_left:pad_left + w]


@kernel
def bias_activation_padded(y, b, lo, hi, out, pad_top, pad_left, h, w, g0, g1):
    """GEMM result rows of image rows [g0, g1) (counted over batch x height) -> clamp(y + b, lo, hi)
    in the h x w interior of out [N, Hp, Wp, O] at (pad_top, pad_left), zeros around it (an image's
    top and bottom border rows with its first and last row): the zero-bordered input its
    depthwise consumer reads."""
    for g in range(g0, g1):
        first = (g - g0) * w
        _bias_activation_into(y[first:first + w], b, lo, hi, bordered_row(out, g, h, pad_top, pad_left, w, 0))


@kernel
def add(a, b, out, lo, hi):
    """Element-wise out = clamp(a + b, lo, hi) on flat arrays of one size."""
    for i in range(out.shape[0]):
        out[i] = min(max(a[i] + b[i], lo), hi)


@kernel(inline="always")
def pool_window(x, n, oh, ow, filter_h, filter_w, stride_h, stride_w, pad_top, pad_left, is_max, lowest, acc):
    """The maximum (from `lowest`) or the sum over the real elements of output pixel (n, oh, ow)'s
    window of x [N,H,W,C], per channel into `acc`; returns how many elements the window holds."""
    _, h, wd, c = x.shape
    h0 = max(oh * stride_h - pad_top, 0)
    h1 = min(oh * stride_h - pad_top + filter_h, h)
    w0 = max(ow * stride_w - pad_left, 0)
    w1 = min(ow * stride_w - pad_left + filter_w, wd)
    for k in range(c):
        acc[k] = lowest if is_max else 0
    for ih in range(h0, h1):
        for iw in range(w0, w1):
            if is_max:
                for k in range(c):
                    acc[k] = max(acc[k], x[n, ih, iw, k])
            else:
                for k in range(c):
                    acc[k] += x[n, ih, iw, k]
    return (h1 - h0) * (w1 - w0)


@kernel
def pool(x, out, acc, filter_h, filter_w, stride_h, stride_w, pad_top, pad_left, is_max, lo, hi):
    """Average (over the real elements of each window) or max pooling, NHWC; `acc` a float32 row of C."""
    n_batch, oh_n, ow_n, c = out.shape
    for n in range(n_batch):
        for oh in range(oh_n):
            for ow in range(ow_n):
                count = np.float32(pool_window(x, n, oh, ow, filter_h, filter_w, stride_h, stride_w, pad_top,
                                               pad_left, is_max, -np.inf, acc))
                for k in range(c):
                    v = acc[k] if is_max else acc[k] / count
                    out[n, oh, ow, k] = min(max(v, lo), hi)


@kernel
def softmax(x, beta, out):
    """Softmax along the last axis of x [R, C], computed in float64 and rounded once to float32 (as
    the reference does): exp(beta * (x - max)) / sum."""
    for r in range(x.shape[0]):
        m = np.float64(x[r, 0])
        for c in range(x.shape[1]):
            m = max(m, np.float64(x[r, c]))
        total = 0.0
        for c in range(x.shape[1]):
            total += np.exp((np.float64(x[r, c]) - m) * beta)
        for c in range(x.shape[1]):
            out[r, c] = np.exp((np.float64(x[r, c]) - m) * beta) / total
