"""RANK and FILL (NNAPI 1.3): a tensor's rank as an INT32 scalar, and a tensor of a given shape filled
with one value.

- RANK takes a tensor of any type NNAPI lists for it (including BOOL8 and every quantized type) and
  returns its number of dimensions as an INT32 scalar output.
- FILL takes the output shape as a 1-D TENSOR_INT32 (non-negative entries) and the value as a scalar
  of the output's element type: FLOAT32 for TENSOR_FLOAT32, FLOAT16 for TENSOR_FLOAT16, INT32 for
  TENSOR_INT32. The value need not be a constant (e.g. RANK's output feeding FILL). The output shape
  is known at build time only when the shape tensor is a constant.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._int_args import check_int_tensor, require_ints
from .base import Operation, OperationContext, Shape
from .registry import register

RANK_TYPES = frozenset({
    OperandCode.TENSOR_FLOAT16, OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_INT32, OperandCode.TENSOR_BOOL8,
    OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, OperandCode.TENSOR_QUANT8_SYMM,
    OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, OperandCode.TENSOR_QUANT16_SYMM, OperandCode.TENSOR_QUANT16_ASYMM,
})

#: FILL's output type -> the type of its value scalar
FILL_VALUE_TYPE = {
    OperandCode.TENSOR_FLOAT32: OperandCode.FLOAT32,
    OperandCode.TENSOR_FLOAT16: OperandCode.FLOAT16,
    OperandCode.TENSOR_INT32: OperandCode.INT32,
}


@register
class Rank(Operation):
    code = OperationCode.RANK
    supported_types = RANK_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(1, 1)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_output_type(0, OperandCode.INT32)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [()]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        return [np.array(ctx.input(0).ndim, dtype=np.int32)]


@register
class Fill(Operation):
    code = OperationCode.FILL
    #: drivers judge an operation by input 0, here always the TENSOR_INT32 shape; validate checks the
    #: output type (FILL_VALUE_TYPE's keys).
    supported_types = frozenset({OperandCode.TENSOR_INT32})

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(2, 1)
        ctx.check_output_type(0, FILL_VALUE_TYPE.keys())
        check_int_tensor(ctx, 0, 1)
        ctx.check_input_type(1, FILL_VALUE_TYPE[ctx.output_type(0).code])
        dims_type, out_rank = ctx.input_type(0), ctx.output_type(0).rank
        if dims_type.rank == 1 and dims_type.dimensions[0] != 0 and out_rank:
            ctx.check(dims_type.dimensions[0] == out_rank,
                      f"the shape tensor has {dims_type.dimensions[0]} entries but the output has rank {out_rank}",
                      input=0)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        dims = require_ints(ctx, 0)
        ctx.check(dims.ndim == 1, f"the shape must be a 1-D tensor, got rank {dims.ndim}", input=0)
        ctx.check(dims.size >= 1, "the shape must have at least one entry", input=0)
        ctx.check(bool((dims >= 0).all()), f"the shape's entries must be >= 0, got {dims.tolist()}", input=0)
        return [tuple(dims.tolist())]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        shape = self.prepare(ctx)[0]
        return [np.full(shape, ctx.scalar(1), dtype=ctx.output_type(0).dtype)]
