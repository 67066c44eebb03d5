"""DEPTHWISE_CONV_2D as a plan step: one compiled pass, bias and activation fused.

Float: float32 sums. Quantized: exact integer sums (float32 for 3x3, provably below 2**24; float64
elsewhere), then NNAPI's integer requantization. For 3x3 filters with multiplier 1 the step asks
for its input inside a zero-bordered buffer (written so by the producing convolution), so that
every output pixel takes the unrolled path without bounds checks; quantized inputs may also come
centred in float32 (q - zero point), which spares the kernel its 8-bit conversions.
"""
from __future__ import annotations

import numpy as np

from ...enums import OperationCode
from ...ops import OperationContext
from ...ops import _conv_common as cc
from ...ops.common import QUANT8_TYPES
from ...ops.quant import quantized_activation_range
from .operation_table import nhwc_only, register_fast
from .step import F32, F64, ArrayOf, Bound, PlanNode, Shape, Step, Value, bound_call, channel_tile
from .steps_conv import Requantizer, centred_filter, float_bounds


class Depthwise(Step):
    """DEPTHWISE_CONV_2D: one compiled pass, bias and activation fused (float or NNAPI integer)."""

    writes_centred = True

    def __init__(self, node: PlanNode) -> None:
        ctx, values, x, out = node.ctx, node.values, node.x, node.out
        super().__init__(node.index, OperationCode.DEPTHWISE_CONV_2D, (x,), (out,))
        self.x, self.out = x, out
        lay = cc.conv_layout(ctx, depthwise=True)
        _, h, wd, _ = values[x].shape
        _, kh, kw, oc = ctx.input_type(1).dimensions
        p = cc.read_params(ctx, lay, (h, wd), (kh, kw))
        self.params = (p.stride_h, p.stride_w, p.pad_top, p.pad_left, p.dilation_h, p.dilation_w, p.multiplier)
        self.channels = oc
        self.out_w = values[out].shape[2]
        self.in_shape, self.out_shape = values[x].shape, values[out].shape
        self.fast3x3 = kh == kw == 3 and p.multiplier == 1
        self.quantized = values[x].quantized
        self.x_zp = int(ctx.input_type(0).zero_point) if self.quantized else 0
        if not self.quantized:
            self.w = np.ascontiguousarray(np.asarray(ctx.input(1), dtype=np.float32).reshape(kh, kw, oc))
            self.bias = channel_tile(np.asarray(ctx.input(2), dtype=np.float32))
            self.wt = channel_tile(self.w)
            self.lo, self.hi = float_bounds(p.fuse)
            self.label = f"{kh}x{kw}/{p.stride_h} float32"
            return
        self.w = np.ascontiguousarray(centred_filter(ctx).reshape(kh, kw, oc).astype(np.float32))
        self.bias = channel_tile(np.asarray(ctx.input(2), dtype=np.int64))
        self.wt = channel_tile(self.w)
        self.zero_tile = np.zeros(self.wt.shape[2], dtype=np.float32)
        out_t = ctx.output_type(0)
        self.zero_point = int(out_t.zero_point)
        self.lo, self.hi = quantized_activation_range(p.fuse, out_t)
        requantizer = Requantizer(cc.output_multipliers(ctx), oc, self.zero_point, self.lo, self.hi, ctx.input(2))
        self.rq, self.fq, self.exact = requantizer.rq, requantizer.fq, requantizer.exact
        self.value_range = (self.lo, self.hi)
        self.label = f"{kh}x{kw}/{p.stride_h} int32"

    def centred_input(self, operand: int) -> np.dtype | None:
        return F32 if self.quantized and self.fast3x3 else None

    def input_padding(self, operand: int) -> tuple[int, int, int, int] | None:
        """The border that puts every tap of every output inside the buffer (3x3 path only)."""
        if not self.fast3x3:
            return None
        sh, sw, pt, pl, dh, dw, _ = self.params
        _, h, w, _ = self.in_shape
        _, oh, ow, _ = self.out_shape
        bottom = max((oh - 1) * sh + 2 * dh + 1 - pt - h, 0)
        right = max((ow - 1) * sw + 2 * dw + 1 - pl - w, 0)
        return (pt, bottom, pl, right)

    def configure(self, values: dict[int, Value]) -> None:
        super().configure(values)
        self.x_sub = 0 if values[self.x].centred else self.x_zp
        self.padded_input = values[self.x].padding is not None

    def scratch(self) -> list[tuple[Shape, np.dtype]]:
        if not self.quantized:
            return [((self.channels,), F32)]
        return [((self.channels,), F64), ((self.out_w, self.channels), F32)]

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        x, out, acc = array(self.x), array(self.out), scratch[0]
        w, bias, lo, hi = self.w, self.bias, self.lo, self.hi
        sh, sw, pt, pl, dh, dw, mult = self.params
        if self.padded_input:  # the producer wrote the border: every tap is inside
            x, pt, pl = array.padded(self.x), 0, 0
        if not self.quantized:
            from .kernels_float import depthwise

            return bound_call(depthwise, x, w, self.wt, bias, out, acc, sh, sw, pt, pl, dh, dw, mult, lo, hi)
        from .kernels_quant import depthwise as qdepthwise

        return bound_call(qdepthwise, x, self.x_sub, w, self.wt, self.zero_tile, bias, self.rq, self.fq, self.exact,
                          self.zero_point, lo, hi, out, self.out_sub, acc, scratch[1], sh, sw, pt, pl, dh, dw, mult)


def _supports(ctx: OperationContext) -> str | None:
    """NHWC, and for 8-bit operands an accumulator range the vectorized int32 rescale takes."""
    reason = nhwc_only(ctx, cc.conv_layout(ctx, depthwise=True).layout)
    if reason is None and ctx.input_code(0) in QUANT8_TYPES and not Requantizer.applicable(ctx, depthwise=True):
        return "accumulator range beyond the vectorized int32 rescale"
    return reason


register_fast(OperationCode.DEPTHWISE_CONV_2D, data_inputs=(0,), build=Depthwise, supports=_supports)
