"""Appliers of the operations over a 4-D NHWC window or with learnt weights: CONV_2D,
DEPTHWISE_CONV_2D, the pools and FULLY_CONNECTED, with float, quantized and per-channel weights."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...runtime import OperandType, OperationCode, PaddingCode, SymmPerChannelQuantParams
from .growing import (F32, FLOAT_BOUND, I32, MAX_ELEMENTS, PC, QUANT, S8, U8, Applier, GrowingGraph, Tensor,
                      element_count, fused_bound, random_fuse)


@dataclass(frozen=True)
class _Window:
    """A filter or pooling window over a 4-D NHWC tensor and the output size it gives."""

    kh: int
    kw: int
    sh: int
    sw: int
    padding: tuple  # ("explicit", left, right, top, bottom) or ("implicit", PaddingCode)
    oh: int
    ow: int

    def inputs(self, g: GrowingGraph) -> list[int]:
        """The padding scalars, then the strides (width first), as CONV_2D and the pools take them."""
        return [g.b.i32(v) for v in self.padding[1:]] + [g.b.i32(self.sw), g.b.i32(self.sh)]


def _window(g: GrowingGraph, t: Tensor, k_max: int = 3) -> _Window | None:
    """A random window over `t` (None when explicit padding leaves no output)."""
    n, h, w, c = t.dims
    kh, kw = int(g.rng.integers(1, min(k_max, h) + 1)), int(g.rng.integers(1, min(k_max, w) + 1))
    sh, sw = int(g.rng.integers(1, 3)), int(g.rng.integers(1, 3))
    if g.chance(0.3):  # explicit padding, each side smaller than the filter
        pl, pr = int(g.rng.integers(0, kw)), int(g.rng.integers(0, kw))
        pt, pb = int(g.rng.integers(0, kh)), int(g.rng.integers(0, kh))
        oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
        if oh <= 0 or ow <= 0:
            return None
        return _Window(kh, kw, sh, sw, ("explicit", pl, pr, pt, pb), oh, ow)
    code = g.choice([PaddingCode.SAME, PaddingCode.VALID])
    if code == PaddingCode.SAME:
        oh, ow = -(-h // sh), -(-w // sw)
    else:
        oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    return _Window(kh, kw, sh, sw, ("implicit", int(code)), oh, ow)


def _weights_and_bias(g: GrowingGraph, t: Tensor, weights: np.ndarray, channel_dim: int, out_dims: tuple,
                      fuse: int, *, per_channel: bool) -> tuple[int, int, OperandType, float]:
    """(weights operand, bias operand, output type, output bound) of a layer over `t` whose float
    `weights` hold its output channels along `channel_dim`: float, or quantized in `t`'s type, or (with
    `per_channel`, three times in ten) quantized per output channel."""
    out_c = weights.shape[channel_dim]
    fan_in = weights.size // out_c
    if t.code == F32:
        w_idx = g.b.const(OperandType.tensor(F32, weights.shape), weights)
        b_idx = g.b.const(OperandType.tensor(F32, (out_c,)), g.rng.uniform(-0.1, 0.1, out_c))
        return w_idx, b_idx, OperandType.tensor(F32, out_dims), fused_bound(fuse, 3 * t.bound + 0.1)
    s_in = t.type.scale
    if per_channel and g.chance(0.3):  # channelDim 0 for CONV_2D, 3 for DEPTHWISE_CONV_2D
        per = np.abs(weights).max(axis=tuple(a for a in range(weights.ndim) if a != channel_dim))
        scales = tuple(float(np.float32(max(s, 1e-3) / 127)) for s in per)
        shape = tuple(out_c if a == channel_dim else 1 for a in range(weights.ndim))
        q = np.clip(np.round(weights / np.asarray(scales).reshape(shape)), -127, 127).astype(np.int8)
        w_t = OperandType.tensor(PC, weights.shape, 0.0, 0, SymmPerChannelQuantParams(scales, channel_dim))
        b_t = OperandType.tensor(I32, (out_c,), 0.0, 0)
        product = max(scales) * s_in
    else:
        s_f = float(np.float32(np.abs(weights).max() / 127 or 1.0))
        zp_f = int(g.rng.integers(120, 137)) if t.code == U8 else 0
        q = np.clip(np.round(weights / s_f) + zp_f, *((0, 255) if t.code == U8 else (-127, 127)))
        w_t = OperandType.tensor(t.code, weights.shape, s_f, zp_f)
        product = float(np.float32(s_in) * np.float32(s_f))
        b_t = OperandType.tensor(I32, (out_c,), product, 0)
    w_idx = g.b.const(w_t, q)
    b_idx = g.b.const(b_t, np.round(g.rng.uniform(-0.1, 0.1, out_c) / product).astype(np.int32))
    o_scale = float(np.float32(max(g.real_bound(t) * math.sqrt(fan_in) * 2 / 255, product * 2)))
    return w_idx, b_idx, OperandType.tensor(t.code, out_dims, o_scale, g.quant_params(t.code)[1]), 0.0


def _conv(depthwise: bool) -> Applier:
    def apply(g: GrowingGraph, t: Tensor) -> Tensor | None:
        if t.code not in (F32, U8, S8) or t.rank != 4 or not t.exact and t.code in QUANT:
            return None
        if t.code == F32 and t.bound > FLOAT_BOUND:
            return None
        win = _window(g, t)
        if win is None:
            return None
        batch, channels = t.dims[0], t.dims[3]
        mult = int(g.rng.integers(1, 3)) if depthwise else 1
        out_c = channels * mult if depthwise else int(g.rng.integers(1, 9))
        if batch * win.oh * win.ow * out_c > MAX_ELEMENTS:
            return None
        f_dims = (1, win.kh, win.kw, out_c) if depthwise else (out_c, win.kh, win.kw, channels)
        fan_in = win.kh * win.kw * (1 if depthwise else channels)
        weights = g.rng.standard_normal(f_dims) / math.sqrt(fan_in)
        fuse = random_fuse(g)
        f_idx, b_idx, o_t, bound = _weights_and_bias(g, t, weights, 3 if depthwise else 0,
                                                     (batch, win.oh, win.ow, out_c), fuse, per_channel=True)
        ins = [t.index, f_idx, b_idx] + win.inputs(g)
        if depthwise:
            ins.append(g.b.i32(mult))
        ins.append(g.b.i32(fuse))
        if win.padding[0] == "implicit" and g.chance(0.15):  # layout flag (NHWC) and dilation 1 given explicitly
            ins += [g.b.boolean(False), g.b.i32(1), g.b.i32(1)]
        code = OperationCode.DEPTHWISE_CONV_2D if depthwise else OperationCode.CONV_2D
        return g.emit(code, ins, [g.out(t, o_t, exact=t.code != F32, bound=bound)], [t])
    return apply


def _pool(code: OperationCode) -> Applier:
    def apply(g: GrowingGraph, t: Tensor) -> Tensor | None:
        types = (F32,) if code == OperationCode.L2_POOL_2D else (F32, U8, S8)
        if t.code not in types or t.rank != 4:
            return None
        if code != OperationCode.MAX_POOL_2D and t.code in QUANT and not t.exact:
            return None
        win = _window(g, t)
        if win is None:
            return None
        fuse = random_fuse(g)
        ins = [t.index] + win.inputs(g) + [g.b.i32(win.kw), g.b.i32(win.kh), g.b.i32(fuse)]
        o_t = t.type.with_dimensions((t.dims[0], win.oh, win.ow, t.dims[3]))
        exact = t.exact and code == OperationCode.MAX_POOL_2D
        bound = fused_bound(fuse, t.bound * (win.kh * win.kw if code == OperationCode.L2_POOL_2D else 1))
        return g.emit(code, ins, [g.out(t, o_t, exact=exact, bound=bound)], [t])
    return apply


def _fully_connected(g: GrowingGraph, t: Tensor) -> Tensor | None:
    if t.code not in (F32, U8, S8) or not 2 <= t.rank <= 4 or (t.code in QUANT and not t.exact):
        return None
    if t.code == F32 and t.bound > FLOAT_BOUND:
        return None
    size = t.dims[-1]
    batch = element_count(t.dims) // size
    units = int(g.rng.integers(1, 9))
    weights = g.rng.standard_normal((units, size)) / math.sqrt(size)
    fuse = random_fuse(g)
    w_idx, b_idx, o_t, bound = _weights_and_bias(g, t, weights, 0, (batch, units), fuse, per_channel=False)
    return g.emit(OperationCode.FULLY_CONNECTED, [t.index, w_idx, b_idx, g.b.i32(fuse)],
                  [g.out(t, o_t, exact=t.code != F32, bound=bound)], [t])


APPLIERS: dict[str, Applier] = {
    "CONV_2D": _conv(False),
    "DEPTHWISE_CONV_2D": _conv(True),
    **{code.name: _pool(code) for code in (OperationCode.AVERAGE_POOL_2D, OperationCode.MAX_POOL_2D,
                                           OperationCode.L2_POOL_2D)},
    "FULLY_CONNECTED": _fully_connected,
}
