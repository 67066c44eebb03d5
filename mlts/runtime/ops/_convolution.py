"""The operation class CONV_2D and DEPTHWISE_CONV_2D share (a private helper module, not an op).

Both take the same input lists (see `_conv_common.conv_layout`), check their operands in the same
order and run the same pipeline (accumulate, add the bias, requantize or round); they differ in the
filter layout ([out, h, w, in] against [1, h, w, in * multiplier]) and in the depth multiplier,
which each subclass checks in its hooks.
"""
from __future__ import annotations

import numpy as np

from . import _conv_common as cc
from .base import Operation, OperationContext, Shape


class Convolution(Operation):
    """A 2-D convolution; subclasses set `depthwise` and check their filter in the hooks below."""

    depthwise: bool = False
    supported_types = cc.CONV_SUPPORTED_TYPES

    # -- hooks ----------------------------------------------------------------------------------
    def check_known_filter(self, ctx: OperationContext, lay: cc.ConvLayout, d_in: Shape | None,
                           d_filter: Shape) -> int:
        """Validate-phase filter checks on the known dimensions; returns the output channels (0 = unknown)."""
        raise NotImplementedError

    def check_known_multiplier(self, ctx: OperationContext, lay: cc.ConvLayout, d_in: Shape | None,
                               out_c: int) -> None:
        """Validate-phase depth multiplier checks (after the bias's)."""

    def check_filter(self, ctx: OperationContext, f_shape: Shape, in_c: int) -> tuple[int, int, int]:
        """Preparation-phase filter checks; returns (output channels, filter height, filter width)."""
        raise NotImplementedError

    def check_multiplier(self, ctx: OperationContext, p: cc.ConvParams, in_c: int, out_c: int) -> None:
        """Preparation-phase depth multiplier check (once the parameters are read)."""

    # -- the operation -----------------------------------------------------------------------------
    def validate(self, ctx: OperationContext) -> None:
        lay = cc.conv_layout(ctx, depthwise=self.depthwise)
        cc.check_conv_types(ctx, filter_channel_dim=3 if self.depthwise else 0)
        ctx.check_input_rank(0, 4)
        ctx.check_input_rank(1, 4)
        ctx.check_input_rank(2, 1)
        cc.check_static_scalars(ctx, lay)
        self._check_known_dims(ctx, lay)

    def _check_known_dims(self, ctx: OperationContext, lay: cc.ConvLayout) -> None:
        """Size consistency on whatever dimensions are already known (0 = unknown)."""
        d_in, d_f, d_b = (cc.dims_known(ctx.input_type(i)) for i in range(3))
        if d_f is None:
            return
        out_c = self.check_known_filter(ctx, lay, d_in, d_f)
        if d_b is not None and cc.known(d_b[0], out_c):
            ctx.check(d_b[0] == out_c, f"bias has {d_b[0]} elements but the filter has {out_c} output channels",
                      input=2)
        self.check_known_multiplier(ctx, lay, d_in, out_c)

    def _setup(self, ctx: OperationContext) -> tuple[cc.ConvParams, tuple[int, int], Shape]:
        lay = cc.conv_layout(ctx, depthwise=self.depthwise)
        in_shape, f_shape, b_shape = ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)
        ctx.check(len(in_shape) == 4, f"input must have rank 4, got {len(in_shape)}", input=0)
        ctx.check(len(f_shape) == 4, f"filter must have rank 4, got {len(f_shape)}", input=1)
        ctx.check(len(b_shape) == 1, f"bias must have rank 1, got {len(b_shape)}", input=2)
        nchw = bool(ctx.scalar(lay.layout)) if lay.layout is not None else False
        in_h, in_w, in_c = cc.input_hwc(in_shape, nchw)
        ctx.check(in_h > 0 and in_w > 0 and in_c > 0, f"input dimensions {list(in_shape)}: only the batch may be 0",
                  input=0)
        out_c, f_h, f_w = self.check_filter(ctx, f_shape, in_c)
        ctx.check(b_shape[0] == out_c, f"bias has {b_shape[0]} elements but the filter has {out_c} output channels",
                  input=2)
        p = cc.read_params(ctx, lay, (in_h, in_w), (f_h, f_w))
        self.check_multiplier(ctx, p, in_c, out_c)
        out_hw = cc.spatial_output(ctx, p, (in_h, in_w), (f_h, f_w))
        n = in_shape[0]
        shape = (n, out_c) + out_hw if nchw else (n,) + out_hw + (out_c,)
        return p, out_hw, shape

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [self._setup(ctx)[2]]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        """Accumulate (exact integer sums for quantized operands), add the bias, requantize or round."""
        p, out_hw, _ = self._setup(ctx)
        x = cc.to_nhwc(cc.centred(ctx, 0), p.nchw)
        w = cc.centred(ctx, 1)
        if cc.is_quantized(ctx):
            x, w = cc.exact_sum_dtype(x, w, out_axis=3 if self.depthwise else 0)
        acc = cc.depthwise_nhwc(x, w, p, out_hw) if self.depthwise else cc.conv_nhwc(x, w, p, out_hw)
        if cc.is_quantized(ctx):
            out = cc.requantize(ctx, acc.astype(np.int64), ctx.input(2), p.fuse)
        else:
            out = cc.finish_float(ctx, acc + cc.centred(ctx, 2), p.fuse)
        return [cc.from_nhwc(out, p.nchw)]
