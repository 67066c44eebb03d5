"""DEPTHWISE_CONV_2D: per-channel 2-D convolution with a depth multiplier (NNAPI semantics).

Inputs (explicit padding): input, filter [1, h, w, in*multiplier], bias, pad left/right/top/bottom,
stride w/h, depth multiplier, fused activation, [NCHW flag, [dilation w/h]] = 11, 12 or 14 inputs.
Inputs (implicit padding): input, filter, bias, padding code, stride w/h, depth multiplier, fused
activation, [NCHW flag, [dilation w/h]] = 8, 9 or 11 inputs. Input 8 tells the forms apart: INT32
(a stride) means explicit, BOOL (the layout flag) means implicit.

Output channel ic * multiplier + m reads input channel ic with filter channel ic * multiplier + m.
Types as CONV_2D, except that a per-channel filter has channelDim 3. Quantized results use
NNAPI's integer pipeline (see conv_2d).
"""
from __future__ import annotations

import numpy as np

from ..enums import OperationCode
from . import _conv_common as cc
from .base import Operation, OperationContext, Shape
from .registry import register


@register
class DepthwiseConv2D(Operation):
    code = OperationCode.DEPTHWISE_CONV_2D
    supported_types = cc.CONV_SUPPORTED_TYPES

    def validate(self, ctx: OperationContext) -> None:
        lay = cc.validate_convolution(ctx, depthwise=True)
        self._check_known_dims(ctx, lay)

    def _check_known_dims(self, ctx: OperationContext, lay: cc.ConvLayout) -> None:
        d_in, d_f, d_b = (cc.dims_known(ctx.input_type(i)) for i in range(3))
        if d_f is None:
            return
        ctx.check(d_f[0] in (0, 1), f"filter dimension 0 must be 1, got {d_f[0]}", input=1)
        out_c = d_f[3]
        if d_b is not None and cc.known(d_b[0], out_c):
            ctx.check(d_b[0] == out_c, f"bias has {d_b[0]} elements but the filter has {out_c} output channels",
                      input=2)
        nchw = cc.nchw_if_known(ctx, lay)
        mult = ctx.scalar_if_known(lay.multiplier)
        if d_in is not None and nchw is not None and mult is not None and mult > 0:
            in_c = cc.input_hwc(d_in, nchw)[2]
            if cc.known(in_c, out_c):
                ctx.check(in_c * mult == out_c, f"filter has {out_c} output channels but input channels x depth "
                          f"multiplier = {in_c} x {mult} = {in_c * mult}", input=1)

    def _setup(self, ctx: OperationContext):
        lay = cc.conv_layout(ctx, depthwise=True)
        in_shape, f_shape, b_shape = ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)
        ctx.check(len(in_shape) == 4, f"input must have rank 4, got {len(in_shape)}", input=0)
        ctx.check(len(f_shape) == 4, f"filter must have rank 4, got {len(f_shape)}", input=1)
        ctx.check(len(b_shape) == 1, f"bias must have rank 1, got {len(b_shape)}", input=2)
        nchw = bool(ctx.scalar(lay.layout)) if lay.layout is not None else False
        in_h, in_w, in_c = cc.input_hwc(in_shape, nchw)
        one, f_h, f_w, out_c = f_shape
        ctx.check(in_h > 0 and in_w > 0 and in_c > 0, f"input dimensions {list(in_shape)}: only the batch may be 0",
                  input=0)
        ctx.check(one == 1, f"filter dimension 0 must be 1, got {one}", input=1)
        ctx.check(f_h > 0 and f_w > 0 and out_c > 0, f"filter dimensions {list(f_shape)} must be > 0", input=1)
        ctx.check(b_shape[0] == out_c, f"bias has {b_shape[0]} elements but the filter has {out_c} output channels",
                  input=2)
        p = cc.read_params(ctx, lay, (in_h, in_w), (f_h, f_w))
        ctx.check(in_c * p.multiplier == out_c, f"filter has {out_c} output channels but input channels x depth "
                  f"multiplier = {in_c} x {p.multiplier} = {in_c * p.multiplier}", input=1)
        out_hw = cc.spatial_output(ctx, p, (in_h, in_w), (f_h, f_w))
        n = in_shape[0]
        shape = (n, out_c) + out_hw if nchw else (n,) + out_hw + (out_c,)
        return p, out_hw, shape

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [self._setup(ctx)[2]]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        p, out_hw, _ = self._setup(ctx)
        return [cc.run_convolution(ctx, p, out_hw, depthwise=True)]
