"""Shared pieces of AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D (a private helper module, not an op).

- Input-list parsing: 10 or 11 inputs is the explicit-padding form (pad left/right/top/bottom, stride
  w/h, filter w/h, fused activation, [NCHW flag]); 7 or 8 inputs the implicit form (padding code,
  stride w/h, filter w/h, fused activation, [NCHW flag]).
- NNAPI's calculateExplicitPadding (SAME/VALID) and computeOutSize, written out here.
- NNAPI's constraints on the resolved parameters: paddings >= 0, strides and filter sizes > 0, and
  every padding strictly smaller than the filter along its axis (so every window sees at least one
  real element and the average/L2 divisor is never 0).
- Vectorized NHWC kernels: one strided slice of the padded input per filter tap (filter_h x filter_w
  numpy operations whatever the spatial size), which is fast for the small filters of MobileNet and
  still fine for a global 7x7 average.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..enums import FuseCode, OperandCode, PaddingCode
from ._padding import WindowParams, explicit_padding, out_size
from .base import OperationContext, Shape
from .quant import apply_float_activation, quantized_activation_range


# -- input list -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PoolLayout:
    """Where each parameter sits in the input list of a pooling operation."""

    explicit: bool
    padding: tuple[int, ...]   # (left, right, top, bottom) indices, or (code,) for the implicit form
    stride_w: int
    stride_h: int
    filter_w: int
    filter_h: int
    fuse: int
    layout: int | None         # index of the NCHW flag, None when absent

    @property
    def int_scalars(self) -> list[int]:
        return list(self.padding) + [self.stride_w, self.stride_h, self.filter_w, self.filter_h, self.fuse]


def pool_layout(ctx: OperationContext) -> PoolLayout:
    n = ctx.num_inputs
    if n >= 10:
        return PoolLayout(True, (1, 2, 3, 4), 5, 6, 7, 8, 9, 10 if n == 11 else None)
    return PoolLayout(False, (1,), 2, 3, 4, 5, 6, 7 if n == 8 else None)


@dataclass(frozen=True)
class PoolParams(WindowParams):
    filter_w: int
    filter_h: int
    fuse: int
    nchw: bool


def validate_pool(ctx: OperationContext, supported: frozenset) -> None:
    """Counts, types, rank, output quantization and whatever constant parameters are known."""
    ctx.check_counts((7, 8, 10, 11), 1)
    ctx.check_input_type(0, supported)
    lay = pool_layout(ctx)
    for i in lay.int_scalars:
        ctx.check_input_type(i, OperandCode.INT32)
    if lay.layout is not None:
        ctx.check_input_type(lay.layout, OperandCode.BOOL)
    ctx.check_input_rank(0, 4)
    # NNAPI: the output keeps the input's type, and for quantized types its scale and zero point.
    ctx.check_same_quantization(0, output=0)
    ctx.check_fuse_code(lay.fuse)

    known = {i: ctx.scalar_if_known(i) for i in lay.int_scalars}
    if not lay.explicit:
        code = known[lay.padding[0]]
        if code is not None and code not in (PaddingCode.SAME, PaddingCode.VALID):
            raise ctx.fail(f"invalid implicit padding code {code} (expected 1 = SAME or 2 = VALID)",
                           input=lay.padding[0])
    else:
        for i in lay.padding:
            if known[i] is not None:
                ctx.check(known[i] >= 0, f"padding must be >= 0, got {known[i]}", input=i)
    for i, what in ((lay.stride_w, "stride width"), (lay.stride_h, "stride height"),
                    (lay.filter_w, "filter width"), (lay.filter_h, "filter height")):
        if known[i] is not None:
            ctx.check(known[i] > 0, f"{what} must be > 0, got {known[i]}", input=i)
    if lay.explicit:
        for pads, filt, axis in ((lay.padding[:2], lay.filter_w, "width"), (lay.padding[2:], lay.filter_h, "height")):
            for p in pads:
                if known[p] is not None and known[filt] is not None:
                    ctx.check(known[filt] > known[p],
                              f"padding {known[p]} must be smaller than the filter {axis} {known[filt]}", input=p)


def pool_params(ctx: OperationContext) -> PoolParams:
    """Resolve every parameter (implicit padding included) and check NNAPI's constraints."""
    lay = pool_layout(ctx)
    nchw = bool(ctx.scalar(lay.layout)) if lay.layout is not None else False
    stride_w, stride_h = ctx.scalar(lay.stride_w), ctx.scalar(lay.stride_h)
    filter_w, filter_h = ctx.scalar(lay.filter_w), ctx.scalar(lay.filter_h)
    fuse = ctx.scalar(lay.fuse)
    for i, v, what in ((lay.stride_w, stride_w, "stride width"), (lay.stride_h, stride_h, "stride height"),
                       (lay.filter_w, filter_w, "filter width"), (lay.filter_h, filter_h, "filter height")):
        ctx.check(v > 0, f"{what} must be > 0, got {v}", input=i)
    ctx.check(fuse in tuple(FuseCode), f"invalid fused activation code {fuse}", input=lay.fuse)
    if lay.explicit:
        left, right, top, bottom = (ctx.scalar(i) for i in lay.padding)
    else:
        code = ctx.scalar(lay.padding[0])
        ctx.check(code in (PaddingCode.SAME, PaddingCode.VALID),
                  f"invalid implicit padding code {code} (expected 1 = SAME or 2 = VALID)", input=lay.padding[0])
        shape = ctx.input_shape(0)
        ctx.check(len(shape) == 4, f"rank {len(shape)} not supported (expected 4)", input=0)
        h, w = (shape[2], shape[3]) if nchw else (shape[1], shape[2])
        left, right = explicit_padding(w, stride_w, filter_w, code)
        top, bottom = explicit_padding(h, stride_h, filter_h, code)
    for v, what, filt in ((left, "left", filter_w), (right, "right", filter_w),
                          (top, "top", filter_h), (bottom, "bottom", filter_h)):
        ctx.check(v >= 0, f"{what} padding must be >= 0, got {v}")
        ctx.check(v < filt, f"{what} padding {v} must be smaller than the filter size {filt}")
    return PoolParams(left, right, top, bottom, stride_w, stride_h, filter_w, filter_h, fuse, nchw)


def pool_output_shape(ctx: OperationContext) -> Shape:
    p = pool_params(ctx)
    shape = ctx.input_shape(0)
    ctx.check(len(shape) == 4, f"rank {len(shape)} not supported (expected 4)", input=0)
    if p.nchw:
        n, c, h, w = shape
    else:
        n, h, w, c = shape
    oh = out_size(h, p.filter_h, p.stride_h, p.pad_top, p.pad_bottom)
    ow = out_size(w, p.filter_w, p.stride_w, p.pad_left, p.pad_right)
    ctx.check(oh > 0 and ow > 0,
              f"filter {p.filter_h}x{p.filter_w} does not fit the padded {h}x{w} input (output {oh}x{ow})", input=0)
    return (n, c, oh, ow) if p.nchw else (n, oh, ow, c)


# -- kernels (NHWC) -------------------------------------------------------------------------------
def _padded(x: np.ndarray, p: PoolParams, oh: int, ow: int, fill) -> np.ndarray:
    """The input with `fill` around it, exactly covering every window (cropped where unused)."""
    h, w = x.shape[1], x.shape[2]
    need_h = (oh - 1) * p.stride_h + p.filter_h
    need_w = (ow - 1) * p.stride_w + p.filter_w
    bottom = need_h - p.pad_top - h
    right = need_w - p.pad_left - w
    x = x[:, :h + min(bottom, 0), :w + min(right, 0), :]
    pads = ((0, 0), (p.pad_top, max(bottom, 0)), (p.pad_left, max(right, 0)), (0, 0))
    if any(a or b for a, b in pads):
        x = np.pad(x, pads, mode="constant", constant_values=fill)
    return x


def _taps(xp: np.ndarray, p: PoolParams, oh: int, ow: int):
    """Each filter tap's view: element (n, i, j, c) is the tap of window (i, j)."""
    for dy in range(p.filter_h):
        rows = slice(dy, dy + (oh - 1) * p.stride_h + 1, p.stride_h)
        for dx in range(p.filter_w):
            yield xp[:, rows, dx:dx + (ow - 1) * p.stride_w + 1:p.stride_w, :]


def _window_counts(size: int, out: int, stride: int, head: int, filt: int) -> np.ndarray:
    starts = np.arange(out, dtype=np.int64) * stride - head
    return np.minimum(starts + filt, size) - np.maximum(starts, 0)


def window_counts(h: int, w: int, oh: int, ow: int, p: PoolParams) -> np.ndarray:
    """Number of real (non-padding) elements of every window, shaped (1, oh, ow, 1)."""
    ch = _window_counts(h, oh, p.stride_h, p.pad_top, p.filter_h)
    cw = _window_counts(w, ow, p.stride_w, p.pad_left, p.filter_w)
    return (ch[:, None] * cw[None, :])[None, :, :, None]


def pool_sum(x: np.ndarray, p: PoolParams, oh: int, ow: int, acc_dtype, square: bool = False) -> np.ndarray:
    xp = _padded(x.astype(acc_dtype, copy=False), p, oh, ow, 0)
    if square:
        xp = xp * xp
    acc = np.zeros((x.shape[0], oh, ow, x.shape[3]), dtype=acc_dtype)
    for tap in _taps(xp, p, oh, ow):
        acc += tap
    return acc


def pool_max(x: np.ndarray, p: PoolParams, oh: int, ow: int) -> np.ndarray:
    if np.issubdtype(x.dtype, np.floating):
        fill = -np.inf
    else:
        fill = np.iinfo(x.dtype).min
    xp = _padded(x, p, oh, ow, fill)
    out = None
    for tap in _taps(xp, p, oh, ow):
        out = tap.copy() if out is None else np.maximum(out, tap, out=out)
    return out


def run_pool(ctx: OperationContext, kind: str) -> np.ndarray:
    """Execute one pooling kind ('avg', 'max', 'l2') on input 0 with the op's parameters."""
    p = pool_params(ctx)
    x = ctx.input(0)
    if p.nchw:
        x = x.transpose(0, 2, 3, 1)
    n, h, w, c = x.shape
    oh = out_size(h, p.filter_h, p.stride_h, p.pad_top, p.pad_bottom)
    ow = out_size(w, p.filter_w, p.stride_w, p.pad_left, p.pad_right)
    out_t = ctx.output_type(0)
    code = ctx.input_code(0)
    if n == 0 or c == 0:
        out = np.zeros((n, oh, ow, c), dtype=out_t.dtype)
    elif code in (OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16):
        xf = x.astype(np.float32, copy=False)   # float16 is computed in float32, as NNAPI does
        with np.errstate(all="ignore"):
            if kind == "max":
                r = pool_max(xf, p, oh, ow)
            elif kind == "avg":
                r = pool_sum(xf, p, oh, ow, np.float32) / window_counts(h, w, oh, ow, p).astype(np.float32)
            else:
                r = np.sqrt(pool_sum(xf, p, oh, ow, np.float32, square=True)
                            / window_counts(h, w, oh, ow, p).astype(np.float32))
        out = apply_float_activation(r, p.fuse).astype(out_t.dtype)
    else:
        lo, hi = quantized_activation_range(p.fuse, out_t)
        if kind == "max":
            r = pool_max(x, p, oh, ow).astype(np.int64)
        else:
            # TFLite integer average: round the sum over the real elements to the nearest integer,
            # halves up for uint8 ((sum + count/2) / count on non-negative sums) and away from zero for
            # int8 (the sign-aware reference_integer_ops rounding).
            acc = pool_sum(x, p, oh, ow, np.int64)
            cnt = window_counts(h, w, oh, ow, p)
            half = cnt // 2
            if code == OperandCode.TENSOR_QUANT8_ASYMM:
                r = (acc + half) // cnt
            else:
                r = np.where(acc > 0, (acc + half) // cnt, -((half - acc) // cnt))
        out = np.clip(r, lo, hi).astype(out_t.dtype)
    if p.nchw:
        out = out.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(out)
