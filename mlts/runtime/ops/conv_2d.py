"""CONV_2D: 2-D convolution with bias and fused activation (NNAPI semantics).

Inputs (explicit padding): input, filter [out, h, w, in], bias, pad left/right/top/bottom,
stride w/h, fused activation, [NCHW flag, [dilation w/h]] = 10, 11 or 13 inputs.
Inputs (implicit padding): input, filter, bias, padding code (SAME/VALID), stride w/h, fused
activation, [NCHW flag, [dilation w/h]] = 7, 8 or 10 inputs. Input 7 tells the forms apart when
both are possible: INT32 (a padding value) means explicit, BOOL (the layout flag) means implicit.

Types: FLOAT32/FLOAT16 (filter and bias of the same type); QUANT8_ASYMM(_SIGNED) input with a
filter of the same type or a TENSOR_QUANT8_SYMM_PER_CHANNEL filter (channelDim 0), INT32 bias of
scale input_scale x filter_scale and zero point 0. Quantized results use NNAPI's integer pipeline:
int32 sum of (input - zp_in) * (filter - zp_f) plus bias, fixed-point rescale by
input_scale x filter_scale / output_scale (per output channel for per-channel filters), output zero
point, clamp to the activation range.
"""
from __future__ import annotations

from ..enums import OperationCode
from . import _conv_common as cc
from ._convolution import Convolution
from .base import OperationContext, Shape
from .registry import register


@register
class Conv2D(Convolution):
    code = OperationCode.CONV_2D
    depthwise = False

    def check_known_filter(self, ctx: OperationContext, lay: cc.ConvLayout, d_in: Shape | None,
                           d_filter: Shape) -> int:
        out_c, _, _, f_c = d_filter
        nchw = cc.nchw_if_known(ctx, lay)
        if d_in is not None and nchw is not None:
            in_c = cc.input_hwc(d_in, nchw)[2]
            if cc.known(in_c, f_c):
                ctx.check(in_c == f_c, f"filter has {f_c} input channels but the input has {in_c}", input=1)
        return out_c

    def check_filter(self, ctx: OperationContext, f_shape: Shape, in_c: int) -> tuple[int, int, int]:
        out_c, f_h, f_w, f_c = f_shape
        ctx.check(out_c > 0 and f_h > 0 and f_w > 0, f"filter dimensions {list(f_shape)} must be > 0", input=1)
        ctx.check(f_c == in_c, f"filter has {f_c} input channels but the input has {in_c}", input=1)
        return out_c, f_h, f_w
