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

import numpy as np

from ..enums import OperationCode
from . import _conv_common as cc
from .base import Operation, OperationContext, Shape
from .registry import register


@register
class Conv2D(Operation):
    code = OperationCode.CONV_2D
    supported_types = cc.CONV_SUPPORTED_TYPES

    def validate(self, ctx: OperationContext) -> None:
        lay = cc.validate_convolution(ctx, depthwise=False)
        self._check_known_dims(ctx, lay)

    def _check_known_dims(self, ctx: OperationContext, lay: cc.ConvLayout) -> None:
        """Size consistency on whatever dimensions are already known (0 = unknown)."""
        d_in, d_f, d_b = (cc.dims_known(ctx.input_type(i)) for i in range(3))
        if d_f is None:
            return
        out_c, _, _, f_c = d_f
        nchw = cc.nchw_if_known(ctx, lay)
        if d_in is not None and nchw is not None:
            in_c = cc.input_hwc(d_in, nchw)[2]
            if cc.known(in_c, f_c):
                ctx.check(in_c == f_c, f"filter has {f_c} input channels but the input has {in_c}", input=1)
        if d_b is not None and cc.known(d_b[0], out_c):
            ctx.check(d_b[0] == out_c, f"bias has {d_b[0]} elements but the filter has {out_c} output channels",
                      input=2)

    def _setup(self, ctx: OperationContext):
        lay = cc.conv_layout(ctx, depthwise=False)
        in_shape, f_shape, b_shape = ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)
        ctx.check(len(in_shape) == 4, f"input must have rank 4, got {len(in_shape)}", input=0)
        ctx.check(len(f_shape) == 4, f"filter must have rank 4, got {len(f_shape)}", input=1)
        ctx.check(len(b_shape) == 1, f"bias must have rank 1, got {len(b_shape)}", input=2)
        nchw = bool(ctx.scalar(lay.layout)) if lay.layout is not None else False
        in_h, in_w, in_c = cc.input_hwc(in_shape, nchw)
        out_c, f_h, f_w, f_c = f_shape
        ctx.check(in_h > 0 and in_w > 0 and in_c > 0, f"input dimensions {list(in_shape)}: only the batch may be 0",
                  input=0)
        ctx.check(out_c > 0 and f_h > 0 and f_w > 0, f"filter dimensions {list(f_shape)} must be > 0", input=1)
        ctx.check(f_c == in_c, f"filter has {f_c} input channels but the input has {in_c}", input=1)
        ctx.check(b_shape[0] == out_c, f"bias has {b_shape[0]} elements but the filter has {out_c} output channels",
                  input=2)
        p = cc.read_params(ctx, lay, (in_h, in_w), (f_h, f_w))
        out_hw = cc.spatial_output(ctx, p, (in_h, in_w), (f_h, f_w))
        n = in_shape[0]
        shape = (n, out_c) + out_hw if nchw else (n,) + out_hw + (out_c,)
        return p, out_hw, shape

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [self._setup(ctx)[2]]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        p, out_hw, _ = self._setup(ctx)
        return [cc.run_convolution(ctx, p, out_hw, depthwise=False)]
