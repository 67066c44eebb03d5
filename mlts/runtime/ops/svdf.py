"""SVDF: a rank-r singular value decomposition filter, one step of a stateful (streaming) layer.

Each of num_filters = num_units x rank filters projects the input on its feature weights, appends the
result to its memory of the last memory_size activations, and weights that memory with its time
weights; each unit sums its `rank` filters (consecutive), adds the bias and applies the activation.

Inputs: 0 input [batch, input_size], 1 weights_feature [num_filters, input_size], 2 weights_time
[num_filters, memory_size], 3 bias [num_units] (optional), 4 state [batch, memory_size x num_filters],
5 rank (INT32 > 0 dividing num_filters), 6 fused activation (FuseCode). Outputs: 0 the new state
(shape of the input state), 1 output [batch, num_units]. Types: TENSOR_FLOAT32 (1.0, relaxed allowed)
and TENSOR_FLOAT16 (1.2), every tensor of one type.

The state holds, per batch and filter, memory_size values (NNAPI's implementation and test vectors:
memory_size x num_filters per batch, not the (memory_size - 1) x num_filters of the documentation):
the current activation takes the last slot, the dot product with the time weights reads all of them,
then the memory shifts one slot towards the front and the last slot becomes 0 for the next step.
float32 is computed in float64, float16 in float32, each output rounded once.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._fp_errors import ignoring_fp_errors
from .base import Operation, OperationContext, Shape
from .common import FLOAT_TYPES
from .quant import apply_float_activation
from .registry import register
from .rnn import (check_dim, check_float_family, check_outputs_like_input, check_ranks, read_fuse_code,
                  shape_of_rank, work_dtype)

INPUT, WEIGHTS_FEATURE, WEIGHTS_TIME, BIAS, STATE_IN, RANK, ACTIVATION = range(7)


def svdf_step(x: np.ndarray, weights_feature: np.ndarray, weights_time: np.ndarray, bias: np.ndarray | None,
              state: np.ndarray, rank: int, fuse: int) -> tuple[np.ndarray, np.ndarray]:
    """(new state, output) of one SVDF step, in x's dtype (shapes as the operation's)."""
    work = work_dtype(x.dtype)
    batch = x.shape[0]
    num_filters, memory_size = weights_time.shape
    memory = state.astype(work).reshape(batch, num_filters, memory_size).copy()
    memory[:, :, -1] = x.astype(work) @ weights_feature.astype(work).T
    per_filter = np.einsum("bfm,fm->bf", memory, weights_time.astype(work))
    output = per_filter.reshape(batch, num_filters // rank, rank).sum(axis=-1)
    if bias is not None:
        output += bias.astype(work)
    output = apply_float_activation(output, fuse)
    new_state = np.zeros_like(memory)
    new_state[:, :, :-1] = memory[:, :, 1:]
    return new_state.reshape(state.shape).astype(x.dtype), output.astype(x.dtype)


@register
class Svdf(Operation):
    code = OperationCode.SVDF
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(7, 2)
        check_float_family(ctx, range(1, 5), optional=(BIAS,))
        ctx.check_input_type(RANK, OperandCode.INT32)
        ctx.check_fuse_code(ACTIVATION)
        check_outputs_like_input(ctx)
        check_ranks(ctx, {INPUT: 2, WEIGHTS_FEATURE: 2, WEIGHTS_TIME: 2, BIAS: 1, STATE_IN: 2})
        rank = ctx.scalar_if_known(RANK)
        if rank is not None:
            ctx.check(rank > 0, f"rank must be > 0, got {rank}", input=RANK)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        batch, input_size = shape_of_rank(ctx, INPUT, 2)
        num_filters, feature_size = shape_of_rank(ctx, WEIGHTS_FEATURE, 2)
        ctx.check(feature_size == input_size,
                  f"dimension 1 is {feature_size} but must equal the input size ({input_size})", input=WEIGHTS_FEATURE)
        rank = int(ctx.scalar(RANK))
        ctx.check(rank > 0, f"rank must be > 0, got {rank}", input=RANK)
        ctx.check(num_filters % rank == 0,
                  f"{num_filters} filters (dimension 0) are not a multiple of the rank {rank}", input=WEIGHTS_FEATURE)
        units = num_filters // rank
        _, memory_size = shape_of_rank(ctx, WEIGHTS_TIME, 2)
        ctx.check(memory_size > 0, "memory_size (dimension 1) must be > 0", input=WEIGHTS_TIME)
        check_dim(ctx, WEIGHTS_TIME, 0, num_filters, "the number of filters")
        if not ctx.is_omitted(BIAS):
            shape_of_rank(ctx, BIAS, 1)
            check_dim(ctx, BIAS, 0, units, "num_units (filters / rank)")
        shape_of_rank(ctx, STATE_IN, 2)
        check_dim(ctx, STATE_IN, 0, batch, "the batch size")
        check_dim(ctx, STATE_IN, 1, memory_size * num_filters, "memory_size x number of filters")
        return [(batch, memory_size * num_filters), (batch, units)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        bias = None if ctx.is_omitted(BIAS) else ctx.input(BIAS)
        state, output = ignoring_fp_errors(
            svdf_step, ctx.input(INPUT), ctx.input(WEIGHTS_FEATURE), ctx.input(WEIGHTS_TIME), bias,
            ctx.input(STATE_IN), int(ctx.scalar(RANK)), read_fuse_code(ctx, ACTIVATION))
        return [state, output]
