"""SQUEEZE: remove size-1 dimensions, the listed ones (which must be 1) or, when omitted, all of them.

Axes may be negative. When every dimension is removed the output has shape [1] (NNAPI's rule; a
rank-0 tensor is not produced). Quantized outputs keep the input's scale and zero point.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperationCode
from ._int_args import require_ints, resolve_axes, validate_data_movement
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8
from .registry import register


@register
class Squeeze(Operation):
    code = OperationCode.SQUEEZE
    supported_types = FLOAT_AND_QUANT8

    def validate(self, ctx: OperationContext) -> None:
        axes = validate_data_movement(ctx, self.supported_types)
        rank = ctx.input_rank(0)
        if axes is not None and rank is not None:
            resolve_axes(ctx, 1, axes, rank)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        rank = len(shape)
        ctx.check(rank <= 4, f"rank {rank} exceeds the maximum of 4", input=0)
        # An omitted (or empty) axes tensor squeezes every size-1 dimension.
        axes = None if ctx.is_omitted(1) else require_ints(ctx, 1)
        if axes is None or axes.size == 0:
            drop = {d for d in range(rank) if shape[d] == 1}
        else:
            ctx.check(axes.ndim == 1, f"axes must be a 1-D tensor, got rank {axes.ndim}", input=1)
            drop = set(resolve_axes(ctx, 1, axes, rank))
            for d in sorted(drop):
                ctx.check(shape[d] == 1, f"cannot squeeze dimension {d} of size {shape[d]} (must be 1)", input=1)
        out = tuple(s for d, s in enumerate(shape) if d not in drop)
        return [out or (1,)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        shape = self.prepare(ctx)[0]
        return [np.ascontiguousarray(ctx.input(0).reshape(shape))]
