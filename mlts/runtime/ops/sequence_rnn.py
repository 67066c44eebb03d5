"""UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN: the RNN cell (rnn.RnnCell) run over time.

Both take [batch, max_time, input_size] inputs, or [max_time, batch, input_size] when time major, and
give outputs in the same layout; each step feeds the previous step's output back as hidden state.
Types: TENSOR_FLOAT32 (relaxed allowed) and TENSOR_FLOAT16, all tensors of one type (1.2).

UNIDIRECTIONAL_SEQUENCE_RNN inputs: 0 input, 1 weights, 2 recurrent weights, 3 bias, 4 hidden state,
5 fused activation, 6 time major (INT32, 0 or 1). Outputs: 0 output [.., num_units]; 1 (1.3) the
final hidden state [batch, num_units].

BIDIRECTIONAL_SEQUENCE_RNN inputs: 0 input, 1-4 forward weights, recurrent weights, bias, hidden
state, 5-8 the same for the backward cell, 9 auxiliary input, 10 forward and 11 backward auxiliary
weights (all three optional), 12 fused activation, 13 time major (BOOL), 14 merge outputs (BOOL).
The auxiliary tensors link the cells in one of three ways: none of them (no linking); all three
(cross linking: both cells add aux_input x aux_weights^T); the input only (1.3, parallel linking:
the forward cell reads the input, the backward cell the auxiliary input). Outputs: the forward output
and, unless merged, the backward output (merged: one output, forward units then backward units on
the last axis); then (1.3) the final forward and backward hidden states [batch, units].
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from .base import Operation, OperationContext, Shape, ValueUnknown
from .common import FLOAT_TYPES
from .registry import register
from .rnn import (RnnCell, check_cell_shapes, check_dim, check_float_family, check_outputs_like_input,
                  check_ranks, read_fuse_code, shape_of_rank)


def to_time_major(x: np.ndarray, time_major: bool) -> np.ndarray:
    """[max_time, batch, ...] view of a sequence tensor in either layout (also its inverse)."""
    return x if time_major else np.swapaxes(x, 0, 1)


def run_sequence(cell: RnnCell, inputs: np.ndarray, hidden: np.ndarray, aux_inputs: np.ndarray | None = None,
                 *, reverse: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(outputs [max_time, batch, num_units], final hidden state) of `cell` over time-major inputs,
    from the last step back to the first when `reverse`."""
    max_time = inputs.shape[0]
    outputs = np.empty((max_time, hidden.shape[0], cell.weights.shape[0]), dtype=cell.dtype)
    hidden = hidden.astype(cell.dtype)
    for t in (reversed(range(max_time)) if reverse else range(max_time)):
        hidden = cell.step(inputs[t], hidden, None if aux_inputs is None else aux_inputs[t])
        outputs[t] = hidden
    return outputs, hidden


def sequence_dims(ctx: OperationContext, time_major: bool) -> tuple[int, int, int]:
    """(max_time, batch, input_size) of input 0."""
    first, second, input_size = shape_of_rank(ctx, 0, 3)
    return (first, second, input_size) if time_major else (second, first, input_size)


def output_dims(max_time: int, batch: int, units: int, time_major: bool) -> Shape:
    return (max_time, batch, units) if time_major else (batch, max_time, units)


@register
class UnidirectionalSequenceRnn(Operation):
    code = OperationCode.UNIDIRECTIONAL_SEQUENCE_RNN
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(7, (1, 2))
        check_float_family(ctx, range(1, 5))
        ctx.check_fuse_code(5)
        ctx.check_input_type(6, OperandCode.INT32)
        check_outputs_like_input(ctx)
        check_ranks(ctx, {0: 3, 1: 2, 2: 2, 3: 1, 4: 2})
        time_major = ctx.scalar_if_known(6)
        if time_major is not None:
            ctx.check(time_major in (0, 1), f"time major must be 0 or 1, got {time_major}", input=6)

    def _time_major(self, ctx: OperationContext) -> bool:
        time_major = ctx.scalar(6)
        ctx.check(time_major in (0, 1), f"time major must be 0 or 1, got {time_major}", input=6)
        return bool(time_major)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        time_major = self._time_major(ctx)
        max_time, batch, input_size = sequence_dims(ctx, time_major)
        units = check_cell_shapes(ctx, 1, 2, 3, 4, input_size, batch)
        return [output_dims(max_time, batch, units, time_major), (batch, units)][:ctx.num_outputs]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        time_major = self._time_major(ctx)
        cell = RnnCell.of(ctx.input(1), ctx.input(2), ctx.input(3), read_fuse_code(ctx, 5))
        outputs, final = run_sequence(cell, to_time_major(ctx.input(0), time_major), ctx.input(4))
        results = [np.ascontiguousarray(to_time_major(outputs, time_major)), final]
        return results[:ctx.num_outputs]


# BIDIRECTIONAL_SEQUENCE_RNN input positions
INPUT, FW_CELL, BW_CELL = 0, (1, 2, 3, 4), (5, 6, 7, 8)
AUX_INPUT, FW_AUX_WEIGHTS, BW_AUX_WEIGHTS = 9, 10, 11
ACTIVATION, TIME_MAJOR, MERGE_OUTPUTS = 12, 13, 14
NO_LINKING, CROSS_LINKING, PARALLEL_LINKING = "no linking", "cross linking", "parallel linking"


def linking_mode(ctx: OperationContext) -> str:
    """How the auxiliary tensors link the two cells (which of them are omitted)."""
    has_input = not ctx.is_omitted(AUX_INPUT)
    has_fw, has_bw = not ctx.is_omitted(FW_AUX_WEIGHTS), not ctx.is_omitted(BW_AUX_WEIGHTS)
    ctx.check(has_fw == has_bw, "the forward and backward auxiliary weights must both be given or both omitted",
              input=FW_AUX_WEIGHTS if has_fw else BW_AUX_WEIGHTS)
    if not has_input:
        ctx.check(not has_fw, "auxiliary weights are given without an auxiliary input", input=AUX_INPUT)
        return NO_LINKING
    return CROSS_LINKING if has_fw else PARALLEL_LINKING


def output_counts(merge_outputs: bool) -> tuple[int, int]:
    """Allowed output counts: without and with (1.3) the final hidden states."""
    return (1, 3) if merge_outputs else (2, 4)


@register
class BidirectionalSequenceRnn(Operation):
    code = OperationCode.BIDIRECTIONAL_SEQUENCE_RNN
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(15, (1, 2, 3, 4))
        check_float_family(ctx, range(1, 12), optional=(AUX_INPUT, FW_AUX_WEIGHTS, BW_AUX_WEIGHTS))
        ctx.check_fuse_code(ACTIVATION)
        ctx.check_input_type(TIME_MAJOR, OperandCode.BOOL)
        ctx.check_input_type(MERGE_OUTPUTS, OperandCode.BOOL)
        check_outputs_like_input(ctx)
        # The auxiliary tensors' ranks wait for prepare: a model input may stand for an omitted one.
        check_ranks(ctx, {0: 3, 1: 2, 2: 2, 3: 1, 4: 2, 5: 2, 6: 2, 7: 1, 8: 2})
        linking_mode(ctx)
        merge = ctx.scalar_if_known(MERGE_OUTPUTS)
        if merge is not None:
            self._check_output_count(ctx, bool(merge))

    @staticmethod
    def _check_output_count(ctx: OperationContext, merge: bool) -> None:
        allowed = output_counts(merge)
        ctx.check(ctx.num_outputs in allowed,
                  f"{'merged' if merge else 'unmerged'} outputs need {' or '.join(map(str, allowed))} outputs, "
                  f"got {ctx.num_outputs}", input=MERGE_OUTPUTS)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        merge, time_major = bool(ctx.scalar(MERGE_OUTPUTS)), bool(ctx.scalar(TIME_MAJOR))
        self._check_output_count(ctx, merge)
        max_time, batch, input_size = sequence_dims(ctx, time_major)
        fw_units = check_cell_shapes(ctx, *FW_CELL, input_size, batch)
        bw_units = check_cell_shapes(ctx, *BW_CELL, input_size, batch)
        mode = linking_mode(ctx)
        if mode != NO_LINKING:
            try:
                self._check_aux_shapes(ctx, mode, fw_units, bw_units)
            except ValueUnknown:
                if not ctx.is_static:
                    raise
        if merge:
            shapes = [output_dims(max_time, batch, fw_units + bw_units, time_major)]
        else:
            shapes = [output_dims(max_time, batch, fw_units, time_major),
                      output_dims(max_time, batch, bw_units, time_major)]
        if ctx.num_outputs == len(shapes) + 2:
            shapes += [(batch, fw_units), (batch, bw_units)]
        return shapes

    @staticmethod
    def _check_aux_shapes(ctx: OperationContext, mode: str, fw_units: int, bw_units: int) -> None:
        """The auxiliary input (and weights) against the input and the cells; ValueUnknown at build
        time while the auxiliary input's shape is not known."""
        input_shape = ctx.input_shape(INPUT)
        aux_shape = shape_of_rank(ctx, AUX_INPUT, 3)
        check_dim(ctx, AUX_INPUT, 0, input_shape[0], "the input's dimension 0")
        check_dim(ctx, AUX_INPUT, 1, input_shape[1], "the input's dimension 1")
        if mode == PARALLEL_LINKING:  # the backward cell reads it with its regular weights
            check_dim(ctx, AUX_INPUT, 2, input_shape[2], "the input size of the backward weights")
            return
        for weights, units in ((FW_AUX_WEIGHTS, fw_units), (BW_AUX_WEIGHTS, bw_units)):
            shape_of_rank(ctx, weights, 2)
            check_dim(ctx, weights, 0, units, "the cell's num_units")
            check_dim(ctx, weights, 1, aux_shape[2], "the auxiliary input size")

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        merge, time_major = bool(ctx.scalar(MERGE_OUTPUTS)), bool(ctx.scalar(TIME_MAJOR))
        fuse = read_fuse_code(ctx, ACTIVATION)
        mode = linking_mode(ctx)
        cross = mode == CROSS_LINKING
        inputs = to_time_major(ctx.input(INPUT), time_major)
        aux = None if mode == NO_LINKING else to_time_major(ctx.input(AUX_INPUT), time_major)
        fw_cell = RnnCell.of(*(ctx.input(i) for i in FW_CELL[:3]), fuse,
                             aux_weights=ctx.input(FW_AUX_WEIGHTS) if cross else None)
        bw_cell = RnnCell.of(*(ctx.input(i) for i in BW_CELL[:3]), fuse,
                             aux_weights=ctx.input(BW_AUX_WEIGHTS) if cross else None)
        fw_out, fw_final = run_sequence(fw_cell, inputs, ctx.input(FW_CELL[3]), aux if cross else None)
        bw_out, bw_final = run_sequence(bw_cell, aux if mode == PARALLEL_LINKING else inputs, ctx.input(BW_CELL[3]),
                                        aux if cross else None, reverse=True)
        if merge:
            outputs = [np.concatenate([fw_out, bw_out], axis=-1)]
        else:
            outputs = [fw_out, bw_out]
        outputs = [np.ascontiguousarray(to_time_major(o, time_major)) for o in outputs]
        if ctx.num_outputs == len(outputs) + 2:
            outputs += [fw_final, bw_final]
        return outputs
