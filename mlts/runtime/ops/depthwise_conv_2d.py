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

from ..enums import OperationCode
from . import _conv_common as cc
from ._convolution import Convolution
from .base import OperationContext, Shape
from .registry import register


@register
class DepthwiseConv2D(Convolution):
    code = OperationCode.DEPTHWISE_CONV_2D
    depthwise = True

    def check_known_filter(self, ctx: OperationContext, lay: cc.ConvLayout, d_in: Shape | None,
                           d_filter: Shape) -> int:
        ctx.check(d_filter[0] in (0, 1), f"filter dimension 0 must be 1, got {d_filter[0]}", input=1)
        return d_filter[3]

    def check_known_multiplier(self, ctx: OperationContext, lay: cc.ConvLayout, d_in: Shape | None,
                               out_c: int) -> None:
        nchw = cc.nchw_if_known(ctx, lay)
        mult = ctx.scalar_if_known(lay.multiplier)
        if d_in is not None and nchw is not None and mult is not None and mult > 0:
            in_c = cc.input_hwc(d_in, nchw)[2]
            if cc.known(in_c, out_c):
                ctx.check(in_c * mult == out_c, f"filter has {out_c} output channels but input channels x depth "
                          f"multiplier = {in_c} x {mult} = {in_c * mult}", input=1)

    def check_filter(self, ctx: OperationContext, f_shape: Shape, in_c: int) -> tuple[int, int, int]:
        one, f_h, f_w, out_c = f_shape
        ctx.check(one == 1, f"filter dimension 0 must be 1, got {one}", input=1)
        ctx.check(f_h > 0 and f_w > 0 and out_c > 0, f"filter dimensions {list(f_shape)} must be > 0", input=1)
        return out_c, f_h, f_w

    def check_multiplier(self, ctx: OperationContext, p: cc.ConvParams, in_c: int, out_c: int) -> None:
        ctx.check(in_c * p.multiplier == out_c, f"filter has {out_c} output channels but input channels x depth "
                  f"multiplier = {in_c} x {p.multiplier} = {in_c * p.multiplier}", input=1)
