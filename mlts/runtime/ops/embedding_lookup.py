"""EMBEDDING_LOOKUP: gather rows of a table by index (NNAPI 1.0 float32; int32 and quant8 asymm since
1.2; float16 and quant8 asymm signed since 1.3).

Inputs: 0 the lookups, a 1-D TENSOR_INT32 of indices into dimension 0 of the values; 1 the values, rank
>= 2. Output: the values' type (quantized: the values' scale and zero point, as NNAPI requires) and
shape with dimension 0 replaced by the number of lookups. Rows are copied bit for bit. An index outside
[0, rows) fails the execution (NNAPI checks indices only while running, even constant ones).

Drivers judge an operation by its input 0, here always TENSOR_INT32, so that is `supported_types`;
the values' types are checked in `validate`.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._int_args import check_int_tensor
from .base import Operation, OperationContext, Shape
from .common import FLOAT_QUANT8_AND_INT32
from .registry import register


def _take_rows(ctx: OperationContext, indices: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Rows `indices` of `table`; an index outside [0, rows) fails, naming the lookups (input 0)."""
    indices = np.asarray(indices, dtype=np.int64).reshape(-1)
    bad = (indices < 0) | (indices >= table.shape[0])
    if bad.any():
        raise ctx.fail(f"lookup {int(indices[bad][0])} is out of range [0, {table.shape[0]})", input=0)
    return np.ascontiguousarray(np.take(table, indices, axis=0))


@register
class EmbeddingLookup(Operation):
    code = OperationCode.EMBEDDING_LOOKUP
    supported_types = frozenset({OperandCode.TENSOR_INT32})
    value_types = FLOAT_QUANT8_AND_INT32

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(2, 1)
        ctx.check_input_type(1, self.value_types)
        self._check_ranks(ctx)
        ctx.check_output_type(0, ctx.input_code(1))
        ctx.check_same_quantization(1, output=0)
        values, out = ctx.input_type(1), ctx.output_type(0)
        if values.dimensions and out.dimensions:
            # Every dimension but the first is the values'; the first is the lookups' count.
            lookups = ctx.input_type(0).dimensions
            expected = tuple(lookups[:1] if lookups else (0,)) + tuple(values.dimensions[1:])
            ctx.check(len(out.dimensions) == len(expected) and all(
                a == b or a == 0 or b == 0 for a, b in zip(out.dimensions, expected)),
                f"dimensions {list(out.dimensions)} do not match the lookups and values "
                f"({list(expected)}, 0 unknown)", output=0)

    @staticmethod
    def _check_ranks(ctx: OperationContext) -> None:
        check_int_tensor(ctx, 0, 1)
        ctx.check_input_rank(1, min_rank=2)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        self._check_ranks(ctx)  # again: a rank unknown at build time is known at run time
        (lookups,) = ctx.input_shape(0)
        values = ctx.input_shape(1)
        return [(lookups,) + tuple(values[1:])]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        return [_take_rows(ctx, ctx.input(0), ctx.input(1))]
