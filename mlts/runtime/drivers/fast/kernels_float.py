"""Compiled float kernels of mlts-fast (NHWC, results written into caller-owned buffers).

numba compiles each kernel once (cached on disk, specialized per array dtype); the loops keep the
channel axis innermost so that it vectorizes, and fuse the bias and the activation clamp into the
pass that produces the values, so that no kernel needs a second pass or a temporary array.
Activation bounds are float32 (lo, hi), +-inf for "no clamp". Callers pass float32 scalars so that
nothing is promoted to float64 inside the loops.
"""
from __future__ import annotations

import numpy as np
from numba import njit

JIT = dict(cache=True, nogil=True, boundscheck=False)


@njit(inline="always", **JIT)
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


@njit(**JIT)
def _depthwise_pixel(x, w, b, out, acc, n, oh, ow, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, mult,
                     lo, hi):
    """One output pixel, any filter size and depth multiplier."""
    oc = out.shape[3]
    for k in range(oc):
        acc[k] = b[k]
    depthwise_taps(x, np.float32(0), w, acc, n, oh, ow, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, mult)
    for k in range(oc):
        out[n, oh, ow, k] = min(max(acc[k], lo), hi)


@njit(**JIT)
def interior(out_n, stride, pad, span, size):
    """[first, last) output positions whose whole (dilated) filter span lies inside the input."""
    first = 0
    while first < out_n and first * stride - pad < 0:
        first += 1
    last = out_n
    while last > first and (last - 1) * stride - pad + span - 1 >= size:
        last -= 1
    return first, last


@njit(**JIT)
def unrolled_region(x, w, out, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, mult):
    """(first row, end row, first column, end column) of the output pixels of a depthwise convolution
    whose every tap lies inside x: the kernels' unrolled path. Empty unless the filter is 3x3 with
    depth multiplier 1."""
    if w.shape[0] != 3 or w.shape[1] != 3 or mult != 1:
        return 0, 0, 0, 0
    oh0, oh1 = interior(out.shape[1], stride_h, pad_top, 2 * dil_h + 1, x.shape[1])
    ow0, ow1 = interior(out.shape[2], stride_w, pad_left, 2 * dil_w + 1, x.shape[2])
    return oh0, oh1, ow0, ow1


@njit(**JIT)
def depthwise(x, w, b, out, acc, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, mult, lo, hi):
    """x [N,H,W,C], w [KH,KW,C*mult], b [C*mult] -> out [N,OH,OW,C*mult] = clamp(conv + b, lo, hi).

    3x3 filters with multiplier 1 away from the border take a path with the nine taps unrolled (the
    sum stays in a register); everything else goes pixel by pixel. `acc`: float32 scratch of C*mult.
    """
    n_batch, oh_n, ow_n, oc = out.shape
    oh0, oh1, ow0, ow1 = unrolled_region(x, w, out, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, mult)
    for n in range(n_batch):
        for oh in range(oh_n):
            if oh < oh0 or oh >= oh1:
                for ow in range(ow_n):
                    _depthwise_pixel(x, w, b, out, acc, n, oh, ow, stride_h, stride_w, pad_top, pad_left,
                                     dil_h, dil_w, mult, lo, hi)
                continue
            ih = oh * stride_h - pad_top
            r0 = x[n, ih]
            r1 = x[n, ih + dil_h]
            r2 = x[n, ih + 2 * dil_h]
            o = out[n, oh]
            for ow in range(ow_n):
                if ow < ow0 or ow >= ow1:
                    _depthwise_pixel(x, w, b, out, acc, n, oh, ow, stride_h, stride_w, pad_top, pad_left,
                                     dil_h, dil_w, mult, lo, hi)
                    continue
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


@njit(**JIT)
def _bias_activation_into(y, b, lo, hi, out):
    """out [M, O] = clamp(y + b, lo, hi) (out may be y itself)."""
    m, o = y.shape
    for r in range(m):
        for k in range(o):
            out[r, k] = min(max(y[r, k] + b[k], lo), hi)


@njit(**JIT)
def bias_activation(y, b, lo, hi):
    """In place on a [M, O] GEMM result: y = clamp(y + b, lo, hi)."""
    _bias_activation_into(y, b, lo, hi, y)


@njit(inline="always", **JIT)
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


@njit(**JIT)
def bias_activation_padded(y, b, lo, hi, out, pad_top, pad_left, h, w, g0, g1):
    """GEMM result rows of image rows [g0, g1) (counted over batch x height) -> clamp(y + b, lo, hi)
    in the h x w interior of out [N, Hp, Wp, O] at (pad_top, pad_left), zeros around it (an image's
    top and bottom border rows with its first and last row): the zero-bordered input its
    depthwise consumer reads."""
    for g in range(g0, g1):
        first = (g - g0) * w
        _bias_activation_into(y[first:first + w], b, lo, hi, bordered_row(out, g, h, pad_top, pad_left, w, 0))


@njit(**JIT)
def add(a, b, out, lo, hi):
    """Element-wise out = clamp(a + b, lo, hi) on flat arrays of one size."""
    for i in range(out.shape[0]):
        out[i] = min(max(a[i] + b[i], lo), hi)


@njit(inline="always", **JIT)
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


@njit(**JIT)
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


@njit(**JIT)
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
