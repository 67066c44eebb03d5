"""RNN: one step of a basic (fully connected) recurrent cell, and the cell the sequence RNNs share.

    output = activation(input x weights^T + hidden_state x recurrent_weights^T + bias)

Inputs: 0 input [batch, input_size], 1 weights [num_units, input_size], 2 recurrent weights
[num_units, num_units], 3 bias [num_units], 4 hidden state [batch, num_units], 5 fused activation
(INT32 FuseCode). Outputs: 0 the new hidden state, 1 the output, both [batch, num_units] and equal.
Types: TENSOR_FLOAT32 (1.0, relaxed allowed) and TENSOR_FLOAT16 (1.2), every tensor of one type.

`RnnCell` is the step UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN repeat over time; it
also takes an auxiliary input with its own weights, added as if concatenated to the regular input.
NNAPI keeps the hidden state in the operand type between steps, so every step rounds once to it:
float32 is computed in float64, float16 in float32.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..enums import FuseCode, OperationCode
from ._fp_errors import ignoring_fp_errors
from .base import Operation, OperationContext, Shape
from .common import FLOAT_TYPES
from .quant import apply_float_activation
from .registry import register


def work_dtype(dtype: np.dtype) -> type:
    """The precision a float kernel computes in before rounding once to `dtype`."""
    return np.float32 if dtype == np.float16 else np.float64


@dataclass(frozen=True)
class RnnCell:
    """One direction's weights (already in the working precision) and activation."""

    weights: np.ndarray                  # [num_units, input_size]
    recurrent_weights: np.ndarray        # [num_units, num_units]
    bias: np.ndarray                     # [num_units]
    fuse: int
    dtype: np.dtype                      # the operand type's storage dtype
    aux_weights: np.ndarray | None = None  # [num_units, aux_input_size]

    @classmethod
    def of(cls, weights: np.ndarray, recurrent_weights: np.ndarray, bias: np.ndarray, fuse: int,
           aux_weights: np.ndarray | None = None) -> "RnnCell":
        work = work_dtype(weights.dtype)
        aux = None if aux_weights is None else aux_weights.astype(work)
        return cls(weights.astype(work), recurrent_weights.astype(work), bias.astype(work), int(fuse),
                   weights.dtype, aux)

    def step(self, x: np.ndarray, hidden: np.ndarray, aux_x: np.ndarray | None = None) -> np.ndarray:
        """The next hidden state [batch, num_units] (storage dtype) from x [batch, input_size]."""
        return ignoring_fp_errors(self._step, x, hidden, aux_x)

    def _step(self, x: np.ndarray, hidden: np.ndarray, aux_x: np.ndarray | None) -> np.ndarray:
        work = self.weights.dtype
        acc = x.astype(work) @ self.weights.T + self.bias
        if aux_x is not None and self.aux_weights is not None:
            acc += aux_x.astype(work) @ self.aux_weights.T
        acc += hidden.astype(work) @ self.recurrent_weights.T
        return apply_float_activation(acc, self.fuse).astype(self.dtype)


# -- validation shared by the RNN family ----------------------------------------------------------
def check_float_family(ctx: OperationContext, tensors: range | list[int], *, optional: tuple[int, ...] = ()) -> None:
    """Input 0 is TENSOR_FLOAT32 or TENSOR_FLOAT16 and every listed tensor input has its type."""
    ctx.check_input_type(0, FLOAT_TYPES)
    code = ctx.input_code(0)
    for i in tensors:
        ctx.check_input_type(i, code, optional=i in optional)


def check_outputs_like_input(ctx: OperationContext) -> None:
    code = ctx.input_code(0)
    for k in range(ctx.num_outputs):
        ctx.check_output_type(k, code)


def check_ranks(ctx: OperationContext, ranks: dict[int, int]) -> None:
    """Declared ranks (a rank 0 type stands for "not known yet")."""
    for i, rank in ranks.items():
        if not ctx.is_omitted(i) and ctx.input_rank(i):
            ctx.check_input_rank(i, rank)


def check_dim(ctx: OperationContext, i: int, axis: int, expected: int, what: str) -> None:
    """Input i's dimension `axis` equals `expected` (what it should match, in words)."""
    actual = ctx.input_shape(i)[axis]
    ctx.check(actual == expected, f"dimension {axis} is {actual} but must equal {what} ({expected})", input=i)


def read_fuse_code(ctx: OperationContext, i: int) -> int:
    fuse = int(ctx.scalar(i))
    ctx.check(fuse in tuple(FuseCode), f"invalid fused activation code {fuse}", input=i)
    return fuse


def shape_of_rank(ctx: OperationContext, i: int, rank: int) -> Shape:
    shape = ctx.input_shape(i)
    ctx.check(len(shape) == rank, f"rank {len(shape)} not supported (expected {rank})", input=i)
    return shape


def check_cell_shapes(ctx: OperationContext, weights: int, recurrent_weights: int, bias: int,
                      hidden_state: int, input_size: int, batch: int) -> int:
    """One cell's weights, bias and hidden state against the input; its num_units."""
    units, w_input_size = shape_of_rank(ctx, weights, 2)
    ctx.check(w_input_size == input_size,
              f"dimension 1 is {w_input_size} but must equal the input size ({input_size})", input=weights)
    shape_of_rank(ctx, recurrent_weights, 2)
    check_dim(ctx, recurrent_weights, 0, units, "num_units")
    check_dim(ctx, recurrent_weights, 1, units, "num_units")
    shape_of_rank(ctx, bias, 1)
    check_dim(ctx, bias, 0, units, "num_units")
    shape_of_rank(ctx, hidden_state, 2)
    check_dim(ctx, hidden_state, 0, batch, "the batch size")
    check_dim(ctx, hidden_state, 1, units, "num_units")
    return units


@register
class Rnn(Operation):
    code = OperationCode.RNN
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(6, 2)
        check_float_family(ctx, range(1, 5))
        ctx.check_fuse_code(5)
        check_outputs_like_input(ctx)
        check_ranks(ctx, {0: 2, 1: 2, 2: 2, 3: 1, 4: 2})

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        batch, input_size = shape_of_rank(ctx, 0, 2)
        units = check_cell_shapes(ctx, 1, 2, 3, 4, input_size, batch)
        return [(batch, units), (batch, units)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        cell = RnnCell.of(ctx.input(1), ctx.input(2), ctx.input(3), read_fuse_code(ctx, 5))
        hidden = cell.step(ctx.input(0), ctx.input(4))
        return [hidden, hidden.copy()]
