"""LSTM: one time step of a long short-term memory cell (NNAPI 1.0; float16 and the four layer
normalization weights 1.2), the cell of _lstm_cell.py.

Inputs (23, or 27 with layer normalization): 0 the input [batch, input_size]; 1-4 input-to-{input,
forget, cell, output} weights [num_units, input_size] (input-to-input optional); 5-8 recurrent-to-* weights
[num_units, output_size] (recurrent-to-input optional); 9-11 cell-to-{input, forget, output} peephole
weights [num_units] (optional); 12-15 gate biases [num_units] (input gate bias optional); 16 projection
weights [output_size, num_units] and 17 projection bias [output_size] (optional); 18 output state
[batch, output_size]; 19 cell state [batch, num_units]; 20 activation (INT32); 21 cell clip and 22
projection clip (FLOAT32, FLOAT16 for float16 tensors); 23-26 layer normalization weights [num_units]
(optional). Outputs: 0 scratch buffer [batch, num_units * 3 (CIFG) or 4], 1 output state, 2 cell
state, 3 output (the output state again).
"""
from __future__ import annotations

import numpy as np

from ..enums import OperationCode
from ._fp_errors import ignoring_fp_errors
from ._lstm_cell import (CellConfig, CellInputs, CellWeights, check_cell, check_params, check_types, dimension,
                         expect_shape, lstm_step, working_type)
from .base import Operation, OperationContext, Shape, ValueUnknown
from .common import FLOAT_TYPES
from .registry import register

INPUT = 0
ACTIVATION, CELL_CLIP, PROJ_CLIP = 20, 21, 22
CELL_WITHOUT_LAYER_NORM = CellInputs.at(1, (18, 19))
CELL_WITH_LAYER_NORM = CellInputs.at(1, (18, 19), layer_norm_first=23)


def _cell(ctx: OperationContext) -> CellInputs:
    return CELL_WITH_LAYER_NORM if ctx.num_inputs == 27 else CELL_WITHOUT_LAYER_NORM


@register
class Lstm(Operation):
    code = OperationCode.LSTM
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts((23, 27), 4)
        cell = _cell(ctx)
        check_types(ctx, cell.tensors, cell.optional, activation=ACTIVATION, clips=(CELL_CLIP, PROJ_CLIP))
        check_params(ctx, ACTIVATION, CELL_CLIP, PROJ_CLIP)
        self._check(ctx)

    def _check(self, ctx: OperationContext) -> tuple[CellConfig, int | None]:
        """The cell's checks against the input [batch, input_size]; (its configuration, batch)."""
        expect_shape(ctx, INPUT, (None, None), "the input")
        n_batch, n_input = dimension(ctx, INPUT, 0), dimension(ctx, INPUT, 1)
        return check_cell(ctx, _cell(ctx), n_input, n_batch), n_batch

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        check_params(ctx, ACTIVATION, CELL_CLIP, PROJ_CLIP)
        config, n_batch = self._check(ctx)
        if None in (n_batch, config.n_cell, config.n_output, config.cifg):
            raise ValueUnknown(INPUT)
        n_cell, n_output = config.n_cell, config.n_output
        gates = 3 if config.cifg else 4
        return [(n_batch, n_cell * gates), (n_batch, n_output), (n_batch, n_cell), (n_batch, n_output)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        cell = _cell(ctx)
        params = check_params(ctx, ACTIVATION, CELL_CLIP, PROJ_CLIP)
        dtype = ctx.input(INPUT).dtype
        work = working_type(ctx.input_code(INPUT))
        weights = CellWeights.load(ctx, cell, work)
        x = ctx.input(INPUT).astype(work)
        h0 = ctx.input(cell.output_state_in).astype(work)
        c0 = ctx.input(cell.cell_state_in).astype(work)
        h, c, scratch = ignoring_fp_errors(lstm_step, weights, params, x, None, h0, c0)
        scratch = scratch.reshape(x.shape[0], -1)
        return [scratch.astype(dtype), h.astype(dtype), c.astype(dtype), h.astype(dtype)]
