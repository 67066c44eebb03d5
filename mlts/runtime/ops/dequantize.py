"""DEQUANTIZE: 8-bit quantized (asymm, asymm signed, symm, symm per-channel) -> TENSOR_FLOAT32/FLOAT16.

x = scale * (q - zeroPoint), evaluated in float32 as NNAPI does, then converted to the output type.
Per-channel inputs use the scale of each element's channel (zero point 0).
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from .base import Operation, OperationContext, Shape
from .common import FLOAT_TYPES
from .registry import register

QUANTIZED_INPUTS = frozenset({OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
                              OperandCode.TENSOR_QUANT8_SYMM, OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL})


@register
class Dequantize(Operation):
    code = OperationCode.DEQUANTIZE
    supported_types = QUANTIZED_INPUTS

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(1, 1)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_output_type(0, FLOAT_TYPES)
        ctx.check_input_rank(0, max_rank=4)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        ctx.check(len(shape) <= 4, f"rank {len(shape)} exceeds the maximum of 4", input=0)
        return [shape]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        q = ctx.input(0)
        t = ctx.input_type(0)
        centered = (q.astype(np.int32) - np.int32(t.zero_point)).astype(np.float32)
        if t.channel_quant is not None:
            shape = [1] * q.ndim
            shape[t.channel_quant.channel_dim] = -1
            scale = np.asarray(t.channel_quant.scales, dtype=np.float32).reshape(shape)
        else:
            scale = np.float32(t.scale)
        return [(scale * centered).astype(ctx.output_type(0).dtype)]
