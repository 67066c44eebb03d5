"""EQUAL, NOT_EQUAL, LESS, LESS_EQUAL, GREATER, GREATER_EQUAL: broadcasting comparisons -> TENSOR_BOOL8.

Both inputs have the same operand type (TENSOR_BOOL8, TENSOR_FLOAT16, TENSOR_FLOAT32, TENSOR_INT32,
TENSOR_QUANT8_ASYMM or TENSOR_QUANT8_ASYMM_SIGNED). Quantized inputs may have different scales and
zero points: NNAPI compares their real values, each computed in float32 as (q - zeroPoint) * scale.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from .base import Operation, OperationContext, Shape
from .common import QUANT8_TYPES, broadcast_shape
from .registry import register

COMPARABLE_TYPES = frozenset({OperandCode.TENSOR_BOOL8, OperandCode.TENSOR_FLOAT16, OperandCode.TENSOR_FLOAT32,
                              OperandCode.TENSOR_INT32, OperandCode.TENSOR_QUANT8_ASYMM,
                              OperandCode.TENSOR_QUANT8_ASYMM_SIGNED})


class _Comparison(Operation):
    supported_types = COMPARABLE_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(2, 1)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_input_type(1, ctx.input_code(0))
        ctx.check_output_type(0, OperandCode.TENSOR_BOOL8)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [broadcast_shape(ctx, ctx.input_shape(0), ctx.input_shape(1))]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        a, b = ctx.input(0), ctx.input(1)
        code = ctx.input_code(0)
        if code in QUANT8_TYPES:
            a, b = (_real_float32(v, ctx.input_type(i)) for i, v in enumerate((a, b)))
        elif code == OperandCode.TENSOR_BOOL8:
            a, b = a.astype(np.uint8), b.astype(np.uint8)
        with np.errstate(invalid="ignore"):
            return [np.asarray(self.compare(a, b), dtype=np.bool_)]

    def compare(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError


def _real_float32(q: np.ndarray, t) -> np.ndarray:
    return (q.astype(np.int32) - np.int32(t.zero_point)).astype(np.float32) * np.float32(t.scale)


@register
class Equal(_Comparison):
    code = OperationCode.EQUAL

    def compare(self, a, b):
        return np.equal(a, b)


@register
class NotEqual(_Comparison):
    code = OperationCode.NOT_EQUAL

    def compare(self, a, b):
        return np.not_equal(a, b)


@register
class Less(_Comparison):
    code = OperationCode.LESS

    def compare(self, a, b):
        return np.less(a, b)


@register
class LessEqual(_Comparison):
    code = OperationCode.LESS_EQUAL

    def compare(self, a, b):
        return np.less_equal(a, b)


@register
class Greater(_Comparison):
    code = OperationCode.GREATER

    def compare(self, a, b):
        return np.greater(a, b)


@register
class GreaterEqual(_Comparison):
    code = OperationCode.GREATER_EQUAL

    def compare(self, a, b):
        return np.greater_equal(a, b)
