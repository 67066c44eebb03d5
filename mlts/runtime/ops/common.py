"""Shape rules and type sets shared by several operations."""
from __future__ import annotations

from ..enums import OperandCode
from .base import Operation, OperationContext, Shape

FLOAT_TYPES = frozenset({OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16})
QUANT8_TYPES = frozenset({OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED})
FLOAT_AND_QUANT8 = FLOAT_TYPES | QUANT8_TYPES
FLOAT_QUANT8_AND_INT32 = FLOAT_AND_QUANT8 | {OperandCode.TENSOR_INT32}
#: the scalar type of a float parameter that goes with each float tensor type (FLOAT16 for TENSOR_FLOAT16)
FLOAT_SCALAR_OF = {OperandCode.TENSOR_FLOAT32: OperandCode.FLOAT32, OperandCode.TENSOR_FLOAT16: OperandCode.FLOAT16}


def broadcast_shape(ctx: OperationContext, a: Shape, b: Shape) -> Shape:
    """NNAPI calculateBroadcastedShape: right-aligned, each pair equal or one of them 1."""
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and x != 1 and y != 1:
            raise ctx.fail(f"shapes {list(a)} and {list(b)} cannot be broadcast (dimension {i}: {x} vs {y})")
        out.append(max(x, y) if min(x, y) != 0 or x == y else 0)
    return tuple(out)


def check_output_like_input(ctx: OperationContext, i: int = 0, output: int = 0) -> None:
    """Element-wise ops: the output has the input's operand type code."""
    t_in = ctx.input_type(i)
    if t_in is not None:
        ctx.check(ctx.output_type(output).code == t_in.code,
                  f"output type {ctx.output_type(output).code.name} must equal input type {t_in.code.name}",
                  output=output)


def check_output_dims_like_input(ctx: OperationContext, i: int = 0, output: int = 0) -> None:
    """Shape-keeping ops: the declared output dimensions agree with input `i`'s wherever both are known
    (0: unknown; a tensor of rank 0: unknown rank), so a conflict shows at build time even when shape
    inference has to wait for run time."""
    t_in, t_out = ctx.input_type(i), ctx.output_type(output)
    if t_in is None or not t_in.dimensions or not t_out.dimensions:
        return
    a, b = t_in.dimensions, t_out.dimensions
    ctx.check(len(a) == len(b) and all(x == y or x == 0 or y == 0 for x, y in zip(a, b)),
              f"dimensions {list(b)} do not match input {i}'s dimensions {list(a)}", output=output)


class BroadcastBinary(Operation):
    """Two inputs of one type code (among `supported_types`), an output of that code, its shape NNAPI's
    broadcast of the inputs' (MAXIMUM, MINIMUM, POW, PRELU)."""

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(2, 1)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_input_type(1, ctx.input_code(0))
        check_output_like_input(ctx)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [broadcast_shape(ctx, ctx.input_shape(0), ctx.input_shape(1))]
