"""TRANSPOSE_CONV_2D: the transpose (gradient) of a 2-D convolution (NNAPI 1.2+).

Inputs (explicit padding, 11): input, filter [depth_out, h, w, depth_in], bias, pad
left/right/top/bottom, stride w/h, fused activation, NCHW flag.
Inputs (implicit padding, 9): input, filter, bias, output shape (TENSOR_INT32 [4], in the layout of
the flag), padding code (SAME/VALID), stride w/h, fused activation, NCHW flag.

Input pixel (h, w) adds input[h, w, :] . filter[k, i, j, :] to output pixel
(h x stride_h - pad_top + i, w x stride_w - pad_left + j) of channel k; the output is
in x stride + filter - stride - pad_head - pad_tail along each spatial axis. Left and top padding must
be >= 0; right and bottom may be negative (NNAPI uses that to reach the requested output size when
stride > 1). Implicit padding derives the paddings from the requested output height and width only
(batch and channels come from the input and the filter): SAME splits the shortfall
(ceil(out / stride) - 1) x stride + filter - out with the smaller half at the head and lets the tail
go negative; VALID pads nothing.

Types as CONV_2D (FLOAT32, FLOAT16, QUANT8_ASYMM, QUANT8_ASYMM_SIGNED from 1.3, per-channel filters
with channelDim 0): quantized results are int32 sums of (input - zp_in) x (filter - zp_f) plus bias,
rescaled with NNAPI's fixed point (`_conv_common.requantize`).
"""
from __future__ import annotations

import numpy as np

from ..enums import FuseCode, OperandCode, OperationCode, PaddingCode
from . import _conv_common as cc
from ._int_args import check_int_tensor, known_ints, require_ints
from .base import Operation, OperationContext, Shape
from .registry import register

NUM_INPUTS_IMPLICIT = 9
NUM_INPUTS_EXPLICIT = 11
OUTPUT_SHAPE = 3  # the output shape tensor of the implicit form


def transpose_layout(ctx: OperationContext) -> cc.ConvLayout:
    """Input positions of the parameters; NNAPI tells the forms apart by the count (11 explicit, 9 implicit)."""
    ctx.check_counts((NUM_INPUTS_IMPLICIT, NUM_INPUTS_EXPLICIT), 1)
    explicit = ctx.num_inputs == NUM_INPUTS_EXPLICIT
    padding = (3, 4, 5, 6) if explicit else (4,)
    stride_w = padding[-1] + 1
    return cc.ConvLayout(explicit=explicit, padding=padding, stride_w=stride_w, stride_h=stride_w + 1,
                         multiplier=None, fuse=stride_w + 2, layout=stride_w + 3, dilation=None)


def transpose_padding(out_size: int, stride: int, filter_size: int, code: int) -> tuple[int, int]:
    """calculateExplicitPaddingTransposeConv: (head, tail) for a requested output size; the tail may be < 0."""
    if code != PaddingCode.SAME:
        return 0, 0
    needed = ((out_size + stride - 1) // stride - 1) * stride + filter_size - out_size
    head = needed // 2 if needed > 0 else 0
    return head, needed - head


def transpose_out_size(in_size: int, filter_size: int, stride: int, head: int, tail: int) -> int:
    """computeOutSizeTransposeConv."""
    return in_size * stride + filter_size - stride - head - tail


def transpose_conv_nhwc(x: np.ndarray, w: np.ndarray, p: cc.ConvParams, out_hw: tuple[int, int]) -> np.ndarray:
    """x [N,H,W,C], w [O,KH,KW,C] -> [N,OH,OW,O]: one matmul per filter tap, added at its strided output
    positions in an uncropped buffer, then the padding cropped off (a negative tail extends it with zeros)."""
    n, h, wd, c = x.shape
    o, kh, kw, _ = w.shape
    oh, ow = out_hw
    span_h, span_w = (h - 1) * p.stride_h + 1, (wd - 1) * p.stride_w + 1
    full = np.zeros((n, max(span_h + kh - 1, p.pad_top + oh), max(span_w + kw - 1, p.pad_left + ow), o), x.dtype)
    if n == 0:
        return full[:, :oh, :ow]
    rows = x.reshape(-1, c)
    for i in range(kh):
        for j in range(kw):
            tap = (rows @ np.ascontiguousarray(w[:, i, j, :].T)).reshape(n, h, wd, o)
            full[:, i:i + span_h:p.stride_h, j:j + span_w:p.stride_w] += tap
    return full[:, p.pad_top:p.pad_top + oh, p.pad_left:p.pad_left + ow]


@register
class TransposeConv2D(Operation):
    code = OperationCode.TRANSPOSE_CONV_2D
    supported_types = cc.CONV_SUPPORTED_TYPES

    # -- validation -------------------------------------------------------------------------------
    def validate(self, ctx: OperationContext) -> None:
        lay = transpose_layout(ctx)
        cc.check_conv_types(ctx, filter_channel_dim=0)
        ctx.check_input_rank(0, 4)
        ctx.check_input_rank(1, 4)
        ctx.check_input_rank(2, 1)
        for i in lay.scalar_indices:
            ctx.check_input_type(i, OperandCode.INT32)
        ctx.check_input_type(lay.layout, OperandCode.BOOL)
        ctx.check_fuse_code(lay.fuse)
        if lay.explicit:
            for i, side in ((lay.padding[0], "left"), (lay.padding[2], "top")):
                v = ctx.scalar_if_known(i)
                if v is not None:
                    ctx.check(v >= 0, f"padding {side} must be >= 0, got {v}", input=i)
        else:
            check_int_tensor(ctx, OUTPUT_SHAPE, 1)
            dims = cc.dims_known(ctx.input_type(OUTPUT_SHAPE))
            if dims and dims[0]:
                ctx.check(dims[0] == 4, f"output shape must have 4 elements, got {dims[0]}", input=OUTPUT_SHAPE)
            v = ctx.scalar_if_known(lay.padding[0])
            if v is not None:
                ctx.check(v in (PaddingCode.SAME, PaddingCode.VALID),
                          f"invalid implicit padding code {v} (expected 1 = SAME or 2 = VALID)", input=lay.padding[0])
        for i, what in ((lay.stride_w, "stride width"), (lay.stride_h, "stride height")):
            v = ctx.scalar_if_known(i)
            if v is not None:
                ctx.check(v > 0, f"{what} must be > 0, got {v}", input=i)
        self._check_known_dims(ctx, lay)
        if not lay.explicit and known_ints(ctx, OUTPUT_SHAPE) is not None:
            self._requested_hw(ctx, lay, cc.nchw_if_known(ctx, lay))

    @staticmethod
    def _check_known_dims(ctx: OperationContext, lay: cc.ConvLayout) -> None:
        d_in, d_f, d_b = (cc.dims_known(ctx.input_type(i)) for i in range(3))
        if d_f is None:
            return
        out_c, f_c = d_f[0], d_f[3]
        if d_b is not None and cc.known(d_b[0], out_c):
            ctx.check(d_b[0] == out_c, f"bias has {d_b[0]} elements but the filter has {out_c} output channels",
                      input=2)
        nchw = cc.nchw_if_known(ctx, lay)
        if d_in is not None and nchw is not None:
            in_c = cc.input_hwc(d_in, nchw)[2]
            if cc.known(in_c, f_c):
                ctx.check(in_c == f_c, f"filter has {f_c} input channels but the input has {in_c}", input=1)

    @staticmethod
    def _requested_hw(ctx: OperationContext, lay: cc.ConvLayout, nchw: bool | None) -> tuple[int, int] | None:
        """(height, width) of the implicit form's output shape tensor (None while the layout is unknown)."""
        shape = require_ints(ctx, OUTPUT_SHAPE)
        ctx.check(shape.shape == (4,), f"output shape must be a 1-D tensor of 4 elements, got shape "
                  f"{list(shape.shape)}", input=OUTPUT_SHAPE)
        if nchw is None:
            return None
        out_h, out_w = (int(shape[2]), int(shape[3])) if nchw else (int(shape[1]), int(shape[2]))
        ctx.check(out_h > 0 and out_w > 0, f"output shape {shape.tolist()} must have a height and width > 0",
                  input=OUTPUT_SHAPE)
        return out_h, out_w

    # -- parameters and shape -------------------------------------------------------------------------
    def _read_params(self, ctx: OperationContext, lay: cc.ConvLayout, filter_hw: tuple[int, int]) -> cc.ConvParams:
        nchw = bool(ctx.scalar(lay.layout))
        stride_w, stride_h = int(ctx.scalar(lay.stride_w)), int(ctx.scalar(lay.stride_h))
        fuse = int(ctx.scalar(lay.fuse))
        ctx.check(stride_w > 0, f"stride width must be > 0, got {stride_w}", input=lay.stride_w)
        ctx.check(stride_h > 0, f"stride height must be > 0, got {stride_h}", input=lay.stride_h)
        ctx.check(fuse in tuple(FuseCode), f"invalid fused activation code {fuse}", input=lay.fuse)
        if lay.explicit:
            left, right, top, bottom = (int(ctx.scalar(i)) for i in lay.padding)
            ctx.check(left >= 0, f"padding left must be >= 0, got {left}", input=lay.padding[0])
            ctx.check(top >= 0, f"padding top must be >= 0, got {top}", input=lay.padding[2])
        else:
            code = int(ctx.scalar(lay.padding[0]))
            ctx.check(code in (PaddingCode.SAME, PaddingCode.VALID),
                      f"invalid implicit padding code {code} (expected 1 = SAME or 2 = VALID)", input=lay.padding[0])
            out_h, out_w = self._requested_hw(ctx, lay, nchw)
            f_h, f_w = filter_hw
            left, right = transpose_padding(out_w, stride_w, f_w, code)
            top, bottom = transpose_padding(out_h, stride_h, f_h, code)
        return cc.ConvParams(left, right, top, bottom, stride_w, stride_h, 1, 1, fuse, nchw)

    def _setup(self, ctx: OperationContext) -> tuple[cc.ConvParams, tuple[int, int], Shape]:
        lay = transpose_layout(ctx)
        in_shape, f_shape, nchw, (in_h, in_w, in_c) = cc.checked_conv_shapes(ctx, lay.layout)
        out_c, f_h, f_w, f_c = f_shape
        ctx.check(f_c == in_c, f"filter has {f_c} input channels but the input has {in_c}", input=1)
        p = self._read_params(ctx, lay, (f_h, f_w))
        out_h = transpose_out_size(in_h, f_h, p.stride_h, p.pad_top, p.pad_bottom)
        out_w = transpose_out_size(in_w, f_w, p.stride_w, p.pad_left, p.pad_right)
        ctx.check(out_h > 0 and out_w > 0, f"output spatial size {out_h}x{out_w} is empty (input {in_h}x{in_w}, "
                  f"filter {f_h}x{f_w}, paddings {[p.pad_left, p.pad_right, p.pad_top, p.pad_bottom]})")
        n = in_shape[0]
        shape = (n, out_c, out_h, out_w) if nchw else (n, out_h, out_w, out_c)
        return p, (out_h, out_w), shape

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [self._setup(ctx)[2]]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        """Scatter-accumulate (exact integer sums for quantized operands), add the bias, requantize or round."""
        p, out_hw, _ = self._setup(ctx)
        x = cc.to_nhwc(cc.centred(ctx, 0), p.nchw)
        w = cc.centred(ctx, 1)
        quantized = cc.is_quantized(ctx)
        if quantized:
            x, w = cc.exact_sum_dtype(x, w, out_axis=0)
        acc = transpose_conv_nhwc(np.ascontiguousarray(x), w, p, out_hw)
        if quantized:
            out = cc.requantize(ctx, acc.astype(np.int64), ctx.input(2), p.fuse)
        else:
            out = cc.finish_float(ctx, acc + cc.centred(ctx, 2), p.fuse)
        return [cc.from_nhwc(out, p.nchw)]
