"""A fast numpy 2-D convolution: the quantizer's evaluator computes Conv with it, not with onnx.reference.

onnx.reference's Conv builds its im2col with fancy indexing and runs depthwise layers as batched
1-row products; calibrating the zoo's MobileNets with it took 1.8-3.8x as long (see evaluator.py).
"""
from __future__ import annotations

import numpy as np


def _cnhw(shape: tuple[int, int, int, int]) -> np.ndarray:
    """A zeroed NCHW-shaped view of a channel-major (C, N, H, W) buffer.

    Convolutions keep their results channel-major, so a 1x1 convolution is one matrix product
    (O, C) @ (C, N*H*W) over the whole batch, with no copies in between (a few large products are
    much faster than many small ones, above all when BLAS threads compete for busy cores).
    """
    n, c, h, w = shape
    return np.zeros((c, n, h, w), np.float32).transpose(1, 0, 2, 3)


def _channel_major(x: np.ndarray) -> np.ndarray:
    """x (N, C, H, W) as a (C, N*H*W) matrix (free when x is a channel-major view)."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.transpose(1, 0, 2, 3)).reshape(c, n * h * w)


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, strides=(1, 1), pads=(0, 0, 0, 0),
           dilations=(1, 1), group: int = 1) -> np.ndarray:
    """2-D convolution of NCHW x with OIHW w (im2col + one matmul; depthwise by shifted slices)."""
    x = np.asarray(x, np.float32)
    w = np.asarray(w, np.float32)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    sh, sw = strides
    dh, dw = dilations
    pt, pl, pb, pr = pads
    if any(pads):
        xp = _cnhw((n, c, h + pt + pb, wd + pl + pr))
        xp[:, :, pt:pt + h, pl:pl + wd] = x
        x = xp
    hp, wp = x.shape[2], x.shape[3]
    oh = (hp - dh * (kh - 1) - 1) // sh + 1
    ow = (wp - dw * (kw - 1) - 1) // sw + 1

    def window(src: np.ndarray, i: int, j: int) -> np.ndarray:
        return src[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]

    if group == 1:
        if kh == kw == 1 and sh == sw == 1:
            cols = _channel_major(x)
        else:
            cols = np.empty((c, kh, kw, n, oh, ow), np.float32)
            for i in range(kh):
                for j in range(kw):
                    cols[:, i, j] = window(x, i, j).transpose(1, 0, 2, 3)
            cols = cols.reshape(c * kh * kw, n * oh * ow)
        out = np.matmul(w.reshape(o, c * kh * kw), cols).reshape(o, n, oh, ow).transpose(1, 0, 2, 3)
    elif group == c and cg == 1:
        mult = o // c
        if mult != 1:
            x = np.repeat(x, mult, axis=1)
        out = _cnhw((n, o, oh, ow))
        # Channel blocks small enough to stay in cache while the kernel taps accumulate.
        xc, oc = x.transpose(1, 0, 2, 3), out.transpose(1, 0, 2, 3)
        step = max(1, (1 << 17) // max(1, n * oh * ow))
        for c0 in range(0, o, step):
            c1 = min(o, c0 + step)
            acc, src = oc[c0:c1], xc[c0:c1]
            tmp = np.empty_like(acc)
            for i in range(kh):
                for j in range(kw):
                    np.multiply(window(src, i, j), w[c0:c1, 0, i, j][:, None, None, None], out=tmp)
                    acc += tmp
    else:
        og = o // group
        out = np.concatenate([
            conv2d(x[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og], None, strides=strides, dilations=dilations)
            for g in range(group)], axis=1)
    if b is not None:
        out += np.asarray(b, np.float32)[None, :, None, None]
    return out
