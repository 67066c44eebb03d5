"""LOGICAL_AND, LOGICAL_OR (broadcasting) and LOGICAL_NOT on TENSOR_BOOL8 tensors."""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from .base import Operation, OperationContext, Shape
from .common import broadcast_shape
from .registry import register

BOOL8 = OperandCode.TENSOR_BOOL8


class _LogicalBinary(Operation):
    supported_types = frozenset({BOOL8})

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(2, 1)
        ctx.check_input_type(0, BOOL8)
        ctx.check_input_type(1, BOOL8)
        ctx.check_output_type(0, BOOL8)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [broadcast_shape(ctx, ctx.input_shape(0), ctx.input_shape(1))]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        a = ctx.input(0).astype(np.bool_)
        b = ctx.input(1).astype(np.bool_)
        return [np.asarray(self.apply(a, b), dtype=np.bool_)]

    def apply(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@register
class LogicalAnd(_LogicalBinary):
    code = OperationCode.LOGICAL_AND

    def apply(self, a, b):
        return np.logical_and(a, b)


@register
class LogicalOr(_LogicalBinary):
    code = OperationCode.LOGICAL_OR

    def apply(self, a, b):
        return np.logical_or(a, b)


@register
class LogicalNot(Operation):
    code = OperationCode.LOGICAL_NOT
    supported_types = frozenset({BOOL8})

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(1, 1)
        ctx.check_input_type(0, BOOL8)
        ctx.check_output_type(0, BOOL8)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [ctx.input_shape(0)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        return [np.logical_not(ctx.input(0).astype(np.bool_))]
