"""CONCATENATION: join n tensors of one type and rank along an axis (the last input, an INT32 scalar).

All dimensions but the axis must match. Quantized inputs may carry their own scale and zero point
(NNAPI 1.2+): each input whose parameters differ from the output's is requantized the way NNAPI's
CPU kernel does it (TFLite's concatenation-with-scaling: float32 `q * (s_in / s_out) - zp_in * that`,
rounded half away from zero, plus the output zero point, clamped). The signed variant goes through
the unsigned computation with every value and zero point shifted by 128, as NNAPI does, so the two
variants agree exactly up to the offset.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ..operand_type import OperandType
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8, QUANT8_TYPES
from .quant import round_half_away_array
from .registry import register


def requantize_like_nnapi(q: np.ndarray, t_in: OperandType, t_out: OperandType) -> np.ndarray:
    """Requantize `q` (type t_in) to t_out's scale/zero point with NNAPI's float32 arithmetic."""
    if t_in.scale == t_out.scale and t_in.zero_point == t_out.zero_point:
        return q.astype(t_out.dtype)
    shift = 128 if t_out.code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED else 0
    inverse_out = np.float32(1.0) / np.float32(t_out.scale)
    scale = np.float32(t_in.scale) * inverse_out
    bias = np.float32(-(t_in.zero_point + shift)) * scale
    real = (q.astype(np.int32) + shift).astype(np.float32) * scale + bias
    value = round_half_away_array(real).astype(np.int64) + (t_out.zero_point + shift)
    return (np.clip(value, 0, 255) - shift).astype(t_out.dtype)


@register
class Concatenation(Operation):
    code = OperationCode.CONCATENATION
    supported_types = FLOAT_AND_QUANT8

    def validate(self, ctx: OperationContext) -> None:
        n = ctx.num_inputs
        if n < 2:
            raise ctx.fail(f"expected at least 2 inputs (1 or more tensors and the axis), got {n}")
        ctx.check_counts(n, 1)
        ctx.check_input_type(0, self.supported_types)
        for i in range(1, n - 1):
            ctx.check_input_type(i, ctx.input_code(0))
        ctx.check_input_type(n - 1, OperandCode.INT32)
        ctx.check_output_type(0, ctx.input_code(0))
        ranks = set()
        for i in range(n - 1):
            ctx.check_input_rank(i, max_rank=4)
            if ctx.input_rank(i) is not None:
                ranks.add(ctx.input_rank(i))
                ctx.check(len(ranks) == 1, f"rank {ctx.input_rank(i)} differs from the other inputs' {min(ranks)}",
                          input=i)
        axis = ctx.scalar_if_known(n - 1)
        if axis is not None and ranks:
            rank = ranks.pop()
            ctx.check(0 <= axis < rank, f"axis {axis} out of range [0, {rank})", input=n - 1)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        n = ctx.num_inputs - 1
        shapes = [ctx.input_shape(i) for i in range(n)]
        rank = len(shapes[0])
        axis = ctx.scalar(n)
        ctx.check(rank <= 4, f"rank {rank} exceeds the maximum of 4", input=0)
        ctx.check(0 <= axis < rank, f"axis {axis} out of range [0, {rank})", input=n)
        total = 0
        for i, s in enumerate(shapes):
            ctx.check(len(s) == rank, f"rank {len(s)} differs from input 0's rank {rank}", input=i)
            for d in range(rank):
                if d != axis:
                    ctx.check(s[d] == shapes[0][d],
                              f"shape {list(s)} does not match input 0's {list(shapes[0])} outside axis {axis}",
                              input=i)
            total += s[axis]
        out = list(shapes[0])
        out[axis] = total
        return [tuple(out)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        n = ctx.num_inputs - 1
        axis = ctx.scalar(n)
        t_out = ctx.output_type(0)
        parts = [ctx.input(i) for i in range(n)]
        if t_out.code in QUANT8_TYPES:
            parts = [requantize_like_nnapi(p, ctx.input_type(i), t_out) for i, p in enumerate(parts)]
        return [np.ascontiguousarray(np.concatenate(parts, axis=axis).astype(t_out.dtype, copy=False))]
