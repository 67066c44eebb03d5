"""QUANTIZE: TENSOR_FLOAT32/TENSOR_FLOAT16 -> TENSOR_QUANT8_ASYMM or TENSOR_QUANT8_ASYMM_SIGNED.

q = clamp(zeroPoint + round(x / scale)) with NNAPI's float32 arithmetic and std::round (halves away
from zero). Like NNAPI's kernel (std::min/std::max with the bound first), NaN saturates to the
largest quantized value.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperationCode
from .base import Operation, OperationContext, Shape
from .common import FLOAT_TYPES, QUANT8_TYPES
from .quant import QUANT_RANGE, round_half_away_array
from .registry import register


@register
class Quantize(Operation):
    code = OperationCode.QUANTIZE
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(1, 1)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_output_type(0, QUANT8_TYPES)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [ctx.input_shape(0)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0).astype(np.float32)
        t = ctx.output_type(0)
        lo, hi = QUANT_RANGE[t.code]
        with np.errstate(all="ignore"):
            v = (x / np.float32(t.scale)).astype(np.float64)  # the float32 quotient, exactly
            q = t.zero_point + round_half_away_array(v)
        q = np.where(np.isnan(q), hi, q)
        return [np.clip(q, lo, hi).astype(t.dtype)]
