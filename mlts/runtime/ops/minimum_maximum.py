"""MAXIMUM, MINIMUM: element-wise max / min of two tensors with NNAPI broadcasting.

Operand types: TENSOR_FLOAT32, TENSOR_FLOAT16, TENSOR_INT32, TENSOR_QUANT8_ASYMM (NNAPI 1.2) and
TENSOR_QUANT8_ASYMM_SIGNED (1.3); both inputs and the output share the type code, any rank.

Quantized inputs and the output may each carry their own scale and zero point: NNAPI's kernel
requantizes every input value to the output's parameters first (`quant.requantize_to_output`, float
arithmetic) and then takes the max / min of the stored integers. Float kernels are std::max /
std::min, so a NaN in the first input is returned and a NaN in the second one is not.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperationCode
from .base import OperationContext
from .common import FLOAT_QUANT8_AND_INT32, QUANT8_TYPES, BroadcastBinary
from .quant import requantize_to_output
from .registry import register

class _MaximumMinimum(BroadcastBinary):
    supported_types = FLOAT_QUANT8_AND_INT32

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        a, b = ctx.input(0), ctx.input(1)
        t_out = ctx.output_type(0)
        if ctx.input_code(0) in QUANT8_TYPES:
            qa = requantize_to_output(a, ctx.input_type(0), t_out)
            qb = requantize_to_output(b, ctx.input_type(1), t_out)
            return [self.pick(qa, qb).astype(t_out.dtype)]
        return [np.asarray(self.pick(a, b), dtype=t_out.dtype)]

    def pick(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@register
class Maximum(_MaximumMinimum):
    code = OperationCode.MAXIMUM

    def pick(self, a, b):
        return np.where(a < b, b, a)  # std::max(a, b)


@register
class Minimum(_MaximumMinimum):
    code = OperationCode.MINIMUM

    def pick(self, a, b):
        return np.where(b < a, b, a)  # std::min(a, b)
