"""RESHAPE: the same elements under a new shape given by a 1-D TENSOR_INT32 (one entry may be -1).

The -1 entry is inferred so that the element count is kept; the element counts must match. Quantized
outputs keep the input's scale and zero point. TENSOR_INT32 data is accepted too (shape arithmetic).
"""
from __future__ import annotations

import math

import numpy as np

from ..enums import OperandCode, OperationCode
from ._int_args import check_int_tensor, known_ints, require_ints
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8
from .registry import register


def _check_target(ctx: OperationContext, target: list[int]) -> None:
    ctx.check(target.count(-1) <= 1, f"shape {target} has more than one -1 entry", input=1)
    for d in target:
        ctx.check(d >= -1, f"shape {target} has a negative entry {d} (only -1 is special)", input=1)
    if -1 in target:
        ctx.check(0 not in target, f"shape {target} mixes 0 with -1: the -1 entry cannot be inferred", input=1)


@register
class Reshape(Operation):
    code = OperationCode.RESHAPE
    supported_types = FLOAT_AND_QUANT8 | {OperandCode.TENSOR_INT32}

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(2, 1)
        ctx.check_input_type(0, self.supported_types)
        check_int_tensor(ctx, 1, 1)
        ctx.check_input_rank(0, max_rank=4)
        ctx.check_same_quantization(0, output=0)
        target = known_ints(ctx, 1)
        if target is not None:
            _check_target(ctx, target.ravel().tolist())

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        target_arr = require_ints(ctx, 1)
        ctx.check(target_arr.ndim == 1, f"shape must be a 1-D tensor, got rank {target_arr.ndim}", input=1)
        target = target_arr.tolist()
        _check_target(ctx, target)
        in_shape = ctx.input_shape(0)
        count = math.prod(in_shape)
        if -1 in target:
            known = math.prod(d for d in target if d != -1)
            ctx.check(count % known == 0,
                      f"cannot reshape {list(in_shape)} ({count} elements) to {target}: not divisible", input=1)
            target[target.index(-1)] = count // known
        ctx.check(math.prod(target) == count,
                  f"cannot reshape {list(in_shape)} ({count} elements) to {target} ({math.prod(target)} elements)",
                  input=1)
        return [tuple(target)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        shape = self.prepare(ctx)[0]
        return [np.ascontiguousarray(ctx.input(0).reshape(shape))]
