"""ABS, EXP, LOG, NEG, RSQRT, SIN, SQRT, FLOOR, ELU: element-wise math on one tensor.

The output has the input's operand type and shape. Operand types (NNAPI 1.3) and the version that
introduced each:
  - FLOOR: TENSOR_FLOAT32 (1.0), TENSOR_FLOAT16 (1.2); rank at most 4.
  - EXP, LOG, RSQRT, SIN, SQRT: TENSOR_FLOAT32, TENSOR_FLOAT16 (1.2); any rank.
  - NEG: TENSOR_FLOAT32, TENSOR_FLOAT16, TENSOR_INT32 (1.2); any rank.
  - ABS: TENSOR_FLOAT32, TENSOR_FLOAT16 (1.2), TENSOR_INT32 (1.3); any rank.
  - ELU: TENSOR_FLOAT32 with a FLOAT32 alpha, TENSOR_FLOAT16 with a FLOAT16 alpha (1.3); any rank.

Floats follow IEEE as NNAPI's kernels do: LOG(0) = -inf, LOG(x < 0) = NaN, SQRT(x < 0) = NaN,
RSQRT(+0) = +inf, EXP overflows to inf, never a numpy warning. Transcendental functions are
computed in a wider type and rounded once (`float_kernel`); ABS, NEG and FLOOR are exact in the
tensor's own type. int32 ABS and NEG wrap around at INT32_MIN, as the two's-complement kernels do.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._unary import float_kernel
from .base import Operation, OperationContext, Shape
from .common import FLOAT_SCALAR_OF, FLOAT_TYPES, check_output_dims_like_input, check_output_like_input
from .registry import register

FLOAT_AND_INT32 = FLOAT_TYPES | {OperandCode.TENSOR_INT32}


class _ElementwiseUnary(Operation):
    """One tensor in, one tensor of the same type and shape out; subclasses give the math."""

    supported_types = FLOAT_TYPES
    #: the most dimensions the input may have (None: any)
    max_rank: int | None = None
    #: inputs after the tensor (scalar parameters)
    num_parameters = 0

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(1 + self.num_parameters, 1)
        ctx.check_input_type(0, self.supported_types)
        check_output_like_input(ctx)
        if self.max_rank is not None:
            ctx.check_input_rank(0, max_rank=self.max_rank)
        check_output_dims_like_input(ctx)
        self.validate_parameters(ctx)

    def validate_parameters(self, ctx: OperationContext) -> None:
        """Check the scalar inputs after the tensor (none by default)."""

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        if self.max_rank is not None:
            ctx.check(len(shape) <= self.max_rank, f"rank {len(shape)} exceeds the maximum of {self.max_rank}",
                      input=0)
        return [shape]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        return [self.compute(ctx, ctx.input(0))]

    def compute(self, ctx: OperationContext, x: np.ndarray) -> np.ndarray:
        """The output array (the input's dtype and shape)."""
        raise NotImplementedError


class _Transcendental(_ElementwiseUnary):
    """Float-only functions that round: computed wider, rounded once to the tensor's type."""

    def compute(self, ctx: OperationContext, x: np.ndarray) -> np.ndarray:
        return float_kernel(x, self.real)

    def real(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@register
class Abs(_ElementwiseUnary):
    code = OperationCode.ABS
    supported_types = FLOAT_AND_INT32

    def compute(self, ctx: OperationContext, x: np.ndarray) -> np.ndarray:
        return np.abs(x)  # exact; int32: abs(INT32_MIN) wraps to INT32_MIN


@register
class Neg(_ElementwiseUnary):
    code = OperationCode.NEG
    supported_types = FLOAT_AND_INT32

    def compute(self, ctx: OperationContext, x: np.ndarray) -> np.ndarray:
        return np.negative(x)  # exact; int32: -INT32_MIN wraps to INT32_MIN


@register
class Floor(_ElementwiseUnary):
    code = OperationCode.FLOOR
    max_rank = 4

    def compute(self, ctx: OperationContext, x: np.ndarray) -> np.ndarray:
        return np.floor(x)  # exact in float16 and float32; inf and NaN stay as they are


@register
class Exp(_Transcendental):
    code = OperationCode.EXP

    def real(self, x: np.ndarray) -> np.ndarray:
        return np.exp(x)


@register
class Log(_Transcendental):
    code = OperationCode.LOG

    def real(self, x: np.ndarray) -> np.ndarray:
        return np.log(x)


@register
class Rsqrt(_Transcendental):
    code = OperationCode.RSQRT

    def real(self, x: np.ndarray) -> np.ndarray:
        return 1.0 / np.sqrt(x)  # -0.0 gives -inf, as 1 / sqrt(-0.0) does in IEEE


@register
class Sin(_Transcendental):
    code = OperationCode.SIN

    def real(self, x: np.ndarray) -> np.ndarray:
        return np.sin(x)


@register
class Sqrt(_Transcendental):
    code = OperationCode.SQRT

    def real(self, x: np.ndarray) -> np.ndarray:
        return np.sqrt(x)


@register
class Elu(_ElementwiseUnary):
    """ELU(x) = max(0, x) + min(0, alpha * (exp(x) - 1)), NNAPI's formula for any alpha.

    For alpha >= 0 this is the usual x (x >= 0) / alpha * (exp(x) - 1) (x < 0). The min ignores a
    NaN product (alpha = 0 with x = inf, or a NaN alpha), as NNAPI's std::min does, while a NaN input
    stays NaN through the max.
    """

    code = OperationCode.ELU
    num_parameters = 1

    def validate_parameters(self, ctx: OperationContext) -> None:
        ctx.check_input_type(1, FLOAT_SCALAR_OF[ctx.input_code(0)])

    def compute(self, ctx: OperationContext, x: np.ndarray) -> np.ndarray:
        alpha = ctx.scalar(1)
        return float_kernel(x, lambda v: np.maximum(v, 0) + np.fmin(0, alpha * np.expm1(v)))
