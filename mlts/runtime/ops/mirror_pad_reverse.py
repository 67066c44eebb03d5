"""MIRROR_PAD and REVERSE (NNAPI feature level 7): data movement that mirrors a tensor.

MIRROR_PAD pads each dimension i with paddings[i] = (before, after) mirrored copies of the tensor's
own values. Inputs: 0 the tensor (rank 1 or more), 1 paddings (TENSOR_INT32 [rank, 2], each >= 0),
2 mode (INT32: 0 REFLECT mirrors around the border element, which is not repeated, so a padding
may be at most dim - 1; 1 SYMMETRIC repeats the border element, a padding may be at most dim).
For [1, 2, 3] padded (0, 2): REFLECT gives [1, 2, 3, 2, 1], SYMMETRIC [1, 2, 3, 3, 2].

REVERSE reverses one dimension. Inputs: 0 the tensor (rank 1 to 8), 1 the axis (a TENSOR_INT32 of
shape [1] whose value is in [0, rank); NNAPI allows no negative axis).

Both: float32, float16, int32, quant8 asymm and signed; the output keeps the input's type, scale and
zero point (only stored values move).
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._int_args import check_int_tensor, known_ints, require_ints
from .base import Operation, OperationContext, Shape
from .common import FLOAT_QUANT8_AND_INT32, check_output_dims_like_input
from .registry import register

REFLECT, SYMMETRIC = 0, 1
MIRROR_MODES = {REFLECT: "reflect", SYMMETRIC: "symmetric"}
REVERSE_MAX_RANK = 8


def _check_output_rank(ctx: OperationContext) -> None:
    rank_in, rank_out = ctx.input_rank(0), ctx.output_type(0).rank
    if rank_in and rank_out:  # 0: not known yet
        ctx.check(rank_in == rank_out, f"rank {rank_out} does not match input 0's rank {rank_in}", output=0)


def _validate_data_movement(ctx: OperationContext, num_inputs: int, supported) -> None:
    ctx.check_counts(num_inputs, 1)
    ctx.check_input_type(0, supported)
    ctx.check_output_type(0, ctx.input_code(0))
    ctx.check_same_quantization(0, output=0)
    _check_output_rank(ctx)


# -- MIRROR_PAD -------------------------------------------------------------------------------------
def _check_mode(ctx: OperationContext, mode: int) -> None:
    ctx.check(mode in MIRROR_MODES, f"mode {mode} is neither 0 (REFLECT) nor 1 (SYMMETRIC)", input=2)


def _check_paddings(ctx: OperationContext, paddings: np.ndarray, shape: Shape | None, rank: int | None,
                    mode: int | None) -> None:
    """paddings is [rank, 2], non-negative, and (with the dimensions and mode known) within the mirror."""
    ctx.check(paddings.ndim == 2 and paddings.shape[1] == 2,
              f"paddings must have shape [rank, 2], got {list(paddings.shape)}", input=1)
    if rank is not None:
        ctx.check(paddings.shape[0] == rank,
                  f"paddings must have shape [{rank}, 2] for a rank-{rank} input, got {list(paddings.shape)}", input=1)
    ctx.check(bool((paddings >= 0).all()), f"paddings must be >= 0, got {paddings.tolist()}", input=1)
    if shape is None or mode is None:
        return
    for i, (dim, (before, after)) in enumerate(zip(shape, paddings.tolist())):
        if dim <= 0:
            continue
        limit = dim - 1 if mode == REFLECT else dim
        ctx.check(before <= limit and after <= limit,
                  f"paddings {[before, after]} of dimension {i} (size {dim}) exceed the {MIRROR_MODES[mode].upper()} "
                  f"limit {limit}", input=1)


@register
class MirrorPad(Operation):
    code = OperationCode.MIRROR_PAD
    supported_types = FLOAT_QUANT8_AND_INT32

    def validate(self, ctx: OperationContext) -> None:
        _validate_data_movement(ctx, 3, self.supported_types)
        ctx.check_input_rank(0, min_rank=1)
        check_int_tensor(ctx, 1, 2)
        ctx.check_input_type(2, OperandCode.INT32)
        rank = ctx.input_rank(0) or None
        t_pad = ctx.input_type(1)
        if t_pad.rank == 2:
            d0, d1 = t_pad.dimensions
            ctx.check(d1 in (0, 2), f"paddings must have shape [rank, 2], got {[d0, d1]}", input=1)
            if rank is not None:
                ctx.check(d0 in (0, rank),
                          f"paddings must have shape [{rank}, 2] for a rank-{rank} input, got {[d0, d1]}", input=1)
        mode = ctx.scalar_if_known(2)
        if mode is not None:
            _check_mode(ctx, mode)
        paddings = known_ints(ctx, 1)
        if paddings is not None:
            _check_paddings(ctx, paddings, ctx.input_type(0).dimensions, rank, mode)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        ctx.check(len(shape) >= 1, "rank 0 is below the minimum of 1", input=0)
        mode = ctx.scalar(2)
        _check_mode(ctx, mode)
        paddings = require_ints(ctx, 1)
        _check_paddings(ctx, paddings, shape, len(shape), mode)
        return [tuple(int(before + s + after) for s, (before, after) in zip(shape, paddings.tolist()))]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        self.prepare(ctx)
        x = ctx.input(0)
        paddings = require_ints(ctx, 1)
        out = np.pad(x, [tuple(p) for p in paddings.tolist()], mode=MIRROR_MODES[ctx.scalar(2)])
        return [np.ascontiguousarray(out.astype(ctx.output_type(0).dtype, copy=False))]


# -- REVERSE ----------------------------------------------------------------------------------------
def _check_axis(ctx: OperationContext, axis: np.ndarray, rank: int | None) -> None:
    ctx.check(axis.shape == (1,), f"axis must have shape [1], got {list(axis.shape)}", input=1)
    if rank is not None:
        value = int(axis[0])
        ctx.check(0 <= value < rank, f"axis {value} out of range [0, {rank}) for a rank-{rank} input", input=1)


@register
class Reverse(Operation):
    code = OperationCode.REVERSE
    supported_types = FLOAT_QUANT8_AND_INT32

    def validate(self, ctx: OperationContext) -> None:
        _validate_data_movement(ctx, 2, self.supported_types)
        ctx.check_input_rank(0, min_rank=1, max_rank=REVERSE_MAX_RANK)
        check_output_dims_like_input(ctx)
        check_int_tensor(ctx, 1, 1)
        t_axis = ctx.input_type(1)
        if t_axis.rank == 1:
            ctx.check(t_axis.dimensions[0] in (0, 1),
                      f"axis must have shape [1], got {list(t_axis.dimensions)}", input=1)
        axis = known_ints(ctx, 1)
        if axis is not None:
            _check_axis(ctx, axis, ctx.input_rank(0) or None)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        ctx.check(1 <= len(shape) <= REVERSE_MAX_RANK,
                  f"rank {len(shape)} not supported (expected 1 to {REVERSE_MAX_RANK})", input=0)
        _check_axis(ctx, require_ints(ctx, 1), len(shape))
        return [tuple(shape)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        self.prepare(ctx)
        axis = int(require_ints(ctx, 1)[0])
        out = np.flip(ctx.input(0), axis=axis)
        return [np.ascontiguousarray(out.astype(ctx.output_type(0).dtype, copy=False))]
