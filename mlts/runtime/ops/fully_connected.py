"""FULLY_CONNECTED: output = activation(input x weights^T + bias) (NNAPI semantics).

Inputs: input (rank 2 to 4, flattened to [batch, input_size] where input_size = weights dim 1 and
batch = element count / input_size), weights [num_units, input_size], bias [num_units], fused
activation. Output [batch, num_units].
Types: FLOAT32/FLOAT16 (weights and bias of the same type); QUANT8_ASYMM(_SIGNED) with weights of
the same type and an INT32 bias of scale input_scale x weights_scale, zero point 0; quantized
results use NNAPI's integer pipeline (int32 accumulation, fixed-point rescale, zero point, clamp).
"""
from __future__ import annotations

import numpy as np

from ..enums import OperationCode
from . import _conv_common as cc
from .base import Operation, OperationContext, Shape
from .registry import register


@register
class FullyConnected(Operation):
    code = OperationCode.FULLY_CONNECTED
    supported_types = cc.CONV_SUPPORTED_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(4, 1)
        cc.check_conv_types(ctx, filter_channel_dim=None, allow_per_channel=False)
        ctx.check_fuse_code(3)
        ctx.check_input_rank(0, min_rank=2, max_rank=4)
        ctx.check_input_rank(1, 2)
        ctx.check_input_rank(2, 1)
        d_in, d_w, d_b = (cc.dims_known(ctx.input_type(i)) for i in range(3))
        if d_w is None:
            return
        units, input_size = d_w
        if d_b is not None and cc.known(d_b[0], units):
            ctx.check(d_b[0] == units, f"bias has {d_b[0]} elements but weights have {units} units", input=2)
        if d_in is not None and cc.known(*d_in) and input_size > 0:
            count = int(np.prod(d_in))
            ctx.check(count % input_size == 0,
                      f"input of {count} elements cannot be flattened into rows of input_size {input_size}", input=0)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        in_shape, w_shape, b_shape = ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)
        ctx.check(2 <= len(in_shape) <= 4, f"input rank {len(in_shape)} not supported (expected 2 to 4)", input=0)
        ctx.check(len(w_shape) == 2, f"weights must have rank 2, got {len(w_shape)}", input=1)
        ctx.check(len(b_shape) == 1, f"bias must have rank 1, got {len(b_shape)}", input=2)
        units, input_size = w_shape
        ctx.check(units > 0 and input_size > 0, f"weights dimensions {list(w_shape)} must be > 0", input=1)
        ctx.check(b_shape[0] == units, f"bias has {b_shape[0]} elements but weights have {units} units", input=2)
        count = int(np.prod(in_shape, dtype=np.int64))
        ctx.check(count % input_size == 0,
                  f"input of {count} elements cannot be flattened into rows of input_size {input_size}", input=0)
        return [(count // input_size, units)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        (shape,) = self.prepare(ctx)
        fuse = int(ctx.scalar(3))
        x = cc.centred(ctx, 0).reshape(shape[0], ctx.input_shape(1)[1])
        w = cc.centred(ctx, 1)
        if cc.is_quantized(ctx):
            x, w = cc.exact_sum_dtype(x, w, out_axis=0)
        acc = x @ w.T
        if cc.is_quantized(ctx):
            out = cc.requantize(ctx, acc.astype(np.int64), ctx.input(2), fuse)
        else:
            out = cc.finish_float(ctx, acc + cc.centred(ctx, 2), fuse)
        return [out.reshape(shape)]
