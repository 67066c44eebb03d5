"""PACK: stack N tensors of one shape along a new axis (NNAPI feature level 6).

Inputs: 0 the axis (an INT32 scalar in [0, R], R the inputs' rank; NNAPI allows no negative axis),
then N >= 1 tensors of the same type and dimensions, rank 1 or more. The output has rank R + 1 and
N at the axis. Types: float32, float16, int32, quant8 asymm and signed; quantized inputs and the
output must all share one scale and zero point, so packing only moves stored values.

The operation's first input is the axis scalar, so `supported_types` lists INT32: drivers judge an
operation by its input 0 (ops/control_flow.py primary_operand_code); the tensor types are checked
in `validate`.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from .base import Operation, OperationContext, Shape
from .common import FLOAT_QUANT8_AND_INT32, QUANT8_TYPES
from .registry import register


def _check_axis(ctx: OperationContext, axis: int, input_rank: int) -> None:
    ctx.check(0 <= axis <= input_rank,
              f"axis {axis} out of range [0, {input_rank}] for rank-{input_rank} inputs", input=0)


@register
class Pack(Operation):
    code = OperationCode.PACK
    supported_types = frozenset({OperandCode.INT32})
    tensor_types = FLOAT_QUANT8_AND_INT32

    def validate(self, ctx: OperationContext) -> None:
        n = ctx.num_inputs
        if n < 2:
            raise ctx.fail(f"expected at least 2 inputs (the axis and 1 or more tensors), got {n}")
        ctx.check_counts(n, 1)
        ctx.check_input_type(0, OperandCode.INT32)
        out = ctx.output_type(0)
        ctx.check_output_type(0, self.tensor_types)
        input_rank = None if out.rank is None or out.rank == 0 else out.rank - 1
        for i in range(1, n):
            ctx.check_input_type(i, out.code)
            t = ctx.input_type(i)
            if out.code in QUANT8_TYPES:
                ctx.check(t.scale == out.scale and t.zero_point == out.zero_point,
                          f"quantization (scale {t.scale:g}, zp {t.zero_point}) must equal the output's "
                          f"(scale {out.scale:g}, zp {out.zero_point})", input=i)
            if t.rank:  # known and not 0
                if input_rank is not None:
                    ctx.check(t.rank == input_rank, f"rank {t.rank} does not match the other inputs' rank "
                              f"{input_rank} (the output's rank minus 1)", input=i)
                input_rank = t.rank
        axis = ctx.scalar_if_known(0)
        if axis is not None and input_rank is not None:
            _check_axis(ctx, axis, input_rank)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(1)
        ctx.check(len(shape) >= 1, "rank 0 is below the minimum of 1", input=1)
        for i in range(2, ctx.num_inputs):
            other = ctx.input_shape(i)
            ctx.check(other == shape, f"dimensions {list(other)} differ from input 1's {list(shape)}", input=i)
        axis = ctx.scalar(0)
        _check_axis(ctx, axis, len(shape))
        return [tuple(shape[:axis]) + (ctx.num_inputs - 1,) + tuple(shape[axis:])]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        self.prepare(ctx)
        parts = [ctx.input(i) for i in range(1, ctx.num_inputs)]
        out = np.stack(parts, axis=ctx.scalar(0))
        return [np.ascontiguousarray(out.astype(ctx.output_type(0).dtype, copy=False))]
