"""GROUPED_CONV_2D: a 2-D convolution whose channels are split into independent groups (NNAPI 1.2+).

Inputs (explicit padding, 12): input, filter [depth_out, h, w, depth_group], bias, pad
left/right/top/bottom, stride w/h, num_groups, fused activation, NCHW flag.
Inputs (implicit padding, 9): input, filter, bias, padding code (SAME/VALID), stride w/h, num_groups,
fused activation, NCHW flag. The layout flag is mandatory; there is no dilation.

depth_in = num_groups x depth_group and depth_out is a multiple of num_groups: output channel
g x (depth_out / num_groups) + d reads input channels g x depth_group ... (g + 1) x depth_group - 1.
Types as CONV_2D (FLOAT32, FLOAT16, QUANT8_ASYMM, QUANT8_ASYMM_SIGNED from 1.3, per-channel filters
with channelDim 0); quantized results use NNAPI's integer pipeline (see conv_2d). Parameter reading,
padding, quantization rules and kernels come from `_conv_common`; only the group split is new here.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from . import _conv_common as cc
from .base import Operation, OperationContext, Shape
from .registry import register

NUM_INPUTS_IMPLICIT = 9
NUM_INPUTS_EXPLICIT = 12


def grouped_layout(ctx: OperationContext) -> tuple[cc.ConvLayout, int]:
    """Input positions of the parameters (a ConvLayout without multiplier or dilation) and of num_groups.

    NNAPI tells the forms apart by the input count alone: 12 is explicit padding, 9 implicit.
    """
    ctx.check_counts((NUM_INPUTS_IMPLICIT, NUM_INPUTS_EXPLICIT), 1)
    explicit = ctx.num_inputs == NUM_INPUTS_EXPLICIT
    padding = (3, 4, 5, 6) if explicit else (3,)
    stride_w = 3 + len(padding)
    groups = stride_w + 2
    lay = cc.ConvLayout(explicit=explicit, padding=padding, stride_w=stride_w, stride_h=stride_w + 1,
                        multiplier=None, fuse=groups + 1, layout=groups + 2, dilation=None)
    return lay, groups


def grouped_conv_nhwc(x: np.ndarray, w: np.ndarray, groups: int, p: cc.ConvParams,
                      out_hw: tuple[int, int]) -> np.ndarray:
    """One `conv_nhwc` per group. x [N,H,W,G*Cg], w [G*Og,KH,KW,Cg] -> [N,OH,OW,G*Og]."""
    if groups == 1:
        return cc.conv_nhwc(x, w, p, out_hw)
    in_g = x.shape[3] // groups
    out_g = w.shape[0] // groups
    parts = [cc.conv_nhwc(np.ascontiguousarray(x[..., g * in_g:(g + 1) * in_g]),
                          w[g * out_g:(g + 1) * out_g], p, out_hw) for g in range(groups)]
    return np.concatenate(parts, axis=3)


@register
class GroupedConv2D(Operation):
    code = OperationCode.GROUPED_CONV_2D
    supported_types = cc.CONV_SUPPORTED_TYPES

    def validate(self, ctx: OperationContext) -> None:
        lay, groups_i = grouped_layout(ctx)
        cc.check_conv_types(ctx, filter_channel_dim=0)
        ctx.check_input_rank(0, 4)
        ctx.check_input_rank(1, 4)
        ctx.check_input_rank(2, 1)
        cc.check_static_scalars(ctx, lay)
        ctx.check_input_type(groups_i, OperandCode.INT32)
        groups = ctx.scalar_if_known(groups_i)
        if groups is not None:
            ctx.check(groups > 0, f"num_groups must be > 0, got {groups}", input=groups_i)
        self._check_known_dims(ctx, lay, groups)

    @staticmethod
    def _check_known_dims(ctx: OperationContext, lay: cc.ConvLayout, groups: int | None) -> None:
        """Channel consistency on whatever is already known (dimension 0 = unknown)."""
        d_in, d_f, d_b = (cc.dims_known(ctx.input_type(i)) for i in range(3))
        if d_f is None:
            return
        out_c, f_c = d_f[0], d_f[3]
        if d_b is not None and cc.known(d_b[0], out_c):
            ctx.check(d_b[0] == out_c, f"bias has {d_b[0]} elements but the filter has {out_c} output channels",
                      input=2)
        if groups is None or groups <= 0:
            return
        if cc.known(out_c):
            ctx.check(out_c % groups == 0,
                      f"filter's {out_c} output channels are not a multiple of num_groups {groups}", input=1)
        nchw = cc.nchw_if_known(ctx, lay)
        if d_in is not None and nchw is not None:
            in_c = cc.input_hwc(d_in, nchw)[2]
            if cc.known(in_c, f_c):
                ctx.check(in_c == f_c * groups, f"input has {in_c} channels but filter depth x num_groups = "
                          f"{f_c} x {groups} = {f_c * groups}", input=1)

    def _setup(self, ctx: OperationContext) -> tuple[cc.ConvParams, int, tuple[int, int], Shape]:
        lay, groups_i = grouped_layout(ctx)
        in_shape, f_shape, nchw, (in_h, in_w, in_c) = cc.checked_conv_shapes(ctx, lay.layout)
        out_c, f_h, f_w, f_c = f_shape
        groups = int(ctx.scalar(groups_i))
        ctx.check(groups > 0, f"num_groups must be > 0, got {groups}", input=groups_i)
        ctx.check(in_c == f_c * groups,
                  f"input has {in_c} channels but filter depth x num_groups = {f_c} x {groups} = {f_c * groups}",
                  input=1)
        ctx.check(out_c % groups == 0,
                  f"filter's {out_c} output channels are not a multiple of num_groups {groups}", input=1)
        p = cc.read_params(ctx, lay, (in_h, in_w), (f_h, f_w))
        out_hw = cc.spatial_output(ctx, p, (in_h, in_w), (f_h, f_w))
        n = in_shape[0]
        shape = (n, out_c) + out_hw if nchw else (n,) + out_hw + (out_c,)
        return p, groups, out_hw, shape

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [self._setup(ctx)[3]]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        """Accumulate per group (exact integer sums for quantized operands), add the bias, requantize or round."""
        p, groups, out_hw, _ = self._setup(ctx)
        x = cc.to_nhwc(cc.centred(ctx, 0), p.nchw)
        w = cc.centred(ctx, 1)
        quantized = cc.is_quantized(ctx)
        if quantized:
            x, w = cc.exact_sum_dtype(x, w, out_axis=0)
        acc = grouped_conv_nhwc(x, w, groups, p, out_hw)
        if quantized:
            out = cc.requantize(ctx, acc.astype(np.int64), ctx.input(2), p.fuse)
        else:
            out = cc.finish_float(ctx, acc + cc.centred(ctx, 2), p.fuse)
        return [cc.from_nhwc(out, p.nchw)]
