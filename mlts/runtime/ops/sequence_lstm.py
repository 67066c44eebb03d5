"""UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM (NNAPI 1.2; final state outputs 1.3): the
LSTM cell of _lstm_cell.py unrolled over a sequence, time-major [max_time, batch, input_size] or
batch-major [batch, max_time, input_size]. The states start from the given ones and are carried from
step to step (in float32 throughout for float16 operands).

UNIDIRECTIONAL_SEQUENCE_LSTM, 28 inputs: LSTM's 0-22 (the input now 3-D), 23 time_major (BOOL), 24-27
layer normalization weights (optional). Outputs: 0 the output (the input's layout, last dimension
output_size); with 3 outputs also 1 the last output state [batch, output_size] and 2 the last cell
state [batch, num_units].

BIDIRECTIONAL_SEQUENCE_LSTM, 61 inputs: 0 the input; 1-17 the forward cell's tensors and 18-34 the
backward cell's (LSTM's 1-17 each); 35, 36 forward output and cell states; 37, 38 backward ones; 39 the
auxiliary input (optional, the input's layout); 40-43 forward and 44-47 backward auxiliary
input-to-{input, forget, cell, output} weights (optional); 48 activation, 49 cell clip, 50 projection
clip; 51 merge_outputs, 52 time_major (BOOL); 53-56 forward and 57-60 backward layer normalization
weights (optional). The backward cell runs from the last step to the first (each output at its step's
index). Auxiliary input without auxiliary weights: parallel linking (the backward cell reads the
auxiliary input instead of the input); with them: cross linking (both cells add W_aux aux_t to each
gate). Outputs: the forward output (with merge_outputs, forward and backward outputs concatenated on
the last axis) and, unless merged, the backward output; then optionally the forward output and cell
states and the backward ones (1, 2, 5 or 6 outputs). Each cell's options (CIFG, peepholes, projection,
layer normalization) come from its own tensors, as the documentation describes two cells (NNAPI's
reference keeps one set of flags, the backward cell's, for both).
"""
from __future__ import annotations

import numpy as np

from ..enums import OperationCode
from ._lstm_cell import (CellConfig, CellInputs, CellWeights, all_or_none, check_cell, check_params, check_types,
                         dimension, expect_shape, presence, run_sequence, working_type)
from .base import Operation, OperationContext, Shape, ValueUnknown
from .common import FLOAT_TYPES
from .registry import register

INPUT = 0


def _sequence_dims(ctx: OperationContext, time_major_index: int
                   ) -> tuple[bool | None, int | None, int | None, int | None]:
    """(time_major, max_time, batch, input_size) of the 3-D input (None: not known yet)."""
    expect_shape(ctx, INPUT, (None, None, None), "the input")
    time_major = ctx.scalar_if_known(time_major_index)
    size = dimension(ctx, INPUT, 2)
    if time_major is None:
        return None, None, None, size
    time_major = bool(time_major)
    return (time_major, dimension(ctx, INPUT, 0 if time_major else 1), dimension(ctx, INPUT, 1 if time_major else 0),
            size)


def _sequence_shape(time_major: bool, max_time: int, batch: int, size: int) -> Shape:
    return (max_time, batch, size) if time_major else (batch, max_time, size)


def _time_major(x: np.ndarray, time_major: bool, work: type) -> np.ndarray:
    return (x if time_major else np.swapaxes(x, 0, 1)).astype(work)


def _in_layout(y: np.ndarray, time_major: bool, dtype: np.dtype) -> np.ndarray:
    return np.ascontiguousarray((y if time_major else np.swapaxes(y, 0, 1)).astype(dtype))


def _known(*values: object) -> None:
    """Shape inference needs every value: ValueUnknown (at build time) when one is not known yet."""
    if any(v is None for v in values):
        raise ValueUnknown(INPUT)


# -- UNIDIRECTIONAL_SEQUENCE_LSTM ---------------------------------------------------------------------------
UNI_CELL = CellInputs.at(1, (18, 19), layer_norm_first=24)
UNI_ACTIVATION, UNI_CELL_CLIP, UNI_PROJ_CLIP, UNI_TIME_MAJOR = 20, 21, 22, 23


@register
class UnidirectionalSequenceLstm(Operation):
    code = OperationCode.UNIDIRECTIONAL_SEQUENCE_LSTM
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(28, (1, 3))
        check_types(ctx, UNI_CELL.tensors, UNI_CELL.optional, activation=UNI_ACTIVATION,
                    clips=(UNI_CELL_CLIP, UNI_PROJ_CLIP), bools=(UNI_TIME_MAJOR,))
        check_params(ctx, UNI_ACTIVATION, UNI_CELL_CLIP, UNI_PROJ_CLIP)
        self._check(ctx)

    def _check(self, ctx: OperationContext) -> tuple[tuple, CellConfig]:
        dims = _sequence_dims(ctx, UNI_TIME_MAJOR)
        return dims, check_cell(ctx, UNI_CELL, dims[3], dims[2])

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        check_params(ctx, UNI_ACTIVATION, UNI_CELL_CLIP, UNI_PROJ_CLIP)
        ctx.scalar(UNI_TIME_MAJOR)  # required (ValueUnknown at build time when not a constant)
        (time_major, max_time, batch, _), config = self._check(ctx)
        _known(time_major, max_time, batch, config.n_output)
        shapes = [_sequence_shape(time_major, max_time, batch, config.n_output)]
        if ctx.num_outputs == 3:
            _known(config.n_cell)
            shapes += [(batch, config.n_output), (batch, config.n_cell)]
        return shapes

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        params = check_params(ctx, UNI_ACTIVATION, UNI_CELL_CLIP, UNI_PROJ_CLIP)
        time_major = bool(ctx.scalar(UNI_TIME_MAJOR))
        x = ctx.input(INPUT)
        work = working_type(ctx.input_code(INPUT))
        outputs, h, c, _ = run_sequence(CellWeights.load(ctx, UNI_CELL, work), params,
                                        _time_major(x, time_major, work),
                                        ctx.input(UNI_CELL.output_state_in).astype(work),
                                        ctx.input(UNI_CELL.cell_state_in).astype(work))
        results = [_in_layout(outputs, time_major, x.dtype)]
        if ctx.num_outputs == 3:
            results += [h.astype(x.dtype), c.astype(x.dtype)]
        return results


# -- BIDIRECTIONAL_SEQUENCE_LSTM ----------------------------------------------------------------------------
FW_CELL = CellInputs.at(1, (35, 36), layer_norm_first=53, aux_first=40, prefix="forward ")
BW_CELL = CellInputs.at(18, (37, 38), layer_norm_first=57, aux_first=44, prefix="backward ")
AUX_INPUT = 39
BI_ACTIVATION, BI_CELL_CLIP, BI_PROJ_CLIP, MERGE_OUTPUTS, BI_TIME_MAJOR = 48, 49, 50, 51, 52


def _check_output_count(ctx: OperationContext) -> None:
    """1 or 5 outputs with merge_outputs (the merged output, then the states), 2 or 6 without."""
    merge = ctx.scalar_if_known(MERGE_OUTPUTS)
    if merge is not None:
        allowed = (1, 5) if merge else (2, 6)
        ctx.check(ctx.num_outputs in allowed, f"with merge_outputs {bool(merge)} the operation has "
                  f"{' or '.join(map(str, allowed))} outputs, got {ctx.num_outputs}", input=MERGE_OUTPUTS)


def _check_aux_weights(ctx: OperationContext, cell: CellInputs, cifg: bool | None) -> bool | None:
    """One direction's auxiliary weights: all four or none (under CIFG the input one always omitted).
    Returns whether they are present (None: not known yet)."""
    aux = cell.aux_input_to
    has = {i: presence(ctx, i) for i in aux}
    all_or_none(ctx, has, aux[1:], "the auxiliary input-to-{forget, cell, output} weights", cell.name)
    if cifg is False:
        all_or_none(ctx, has, aux, "without CIFG, the four auxiliary weights", cell.name)
    if cifg is True and has[aux[0]] is True:
        raise ctx.fail(f"{cell.name(aux[0])} must be omitted with CIFG", input=aux[0])
    return has[aux[1]]


def _bw_input_index(has_aux_input: bool | None, has_aux_weights: bool | None) -> int | None:
    """Which input the backward cell reads: the auxiliary input under parallel linking, else the input."""
    if has_aux_input is False or has_aux_weights is True:
        return INPUT
    if has_aux_input is True and has_aux_weights is False:
        return AUX_INPUT
    return None


@register
class BidirectionalSequenceLstm(Operation):
    code = OperationCode.BIDIRECTIONAL_SEQUENCE_LSTM
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(61, (1, 2, 5, 6))
        check_types(ctx, (AUX_INPUT, *FW_CELL.tensors, *BW_CELL.tensors),
                    {AUX_INPUT, *FW_CELL.optional, *BW_CELL.optional}, activation=BI_ACTIVATION,
                    clips=(BI_CELL_CLIP, BI_PROJ_CLIP), bools=(MERGE_OUTPUTS, BI_TIME_MAJOR))
        check_params(ctx, BI_ACTIVATION, BI_CELL_CLIP, BI_PROJ_CLIP)
        _check_output_count(ctx)
        self._check(ctx)

    def _check(self, ctx: OperationContext) -> tuple[tuple, CellConfig, CellConfig, int | None]:
        """Every shape and presence rule; ((time_major, max_time, batch, input_size), forward and
        backward configurations, the input index the backward cell reads)."""
        dims = _sequence_dims(ctx, BI_TIME_MAJOR)
        time_major, _, batch, n_input = dims
        has_aux_input = presence(ctx, AUX_INPUT)
        n_aux_input = None
        if has_aux_input:
            expect_shape(ctx, AUX_INPUT, (dimension(ctx, INPUT, 0), dimension(ctx, INPUT, 1), None),
                         "the auxiliary input")
            n_aux_input = dimension(ctx, AUX_INPUT, 2)
        fw_has = presence(ctx, FW_CELL.aux_input_to[1])
        bw_has = presence(ctx, BW_CELL.aux_input_to[1])
        if None not in (fw_has, bw_has) and fw_has != bw_has:
            culprit = FW_CELL.aux_input_to[1] if not fw_has else BW_CELL.aux_input_to[1]
            raise ctx.fail("the forward and backward auxiliary weights must both have values or both be "
                           f"omitted, but {(FW_CELL if not fw_has else BW_CELL).name(culprit)} has no value",
                           input=culprit)
        has_aux_weights = fw_has if fw_has is not None else bw_has
        if has_aux_weights is True and has_aux_input is False:
            raise ctx.fail("auxiliary weights given without the auxiliary input", input=AUX_INPUT)
        bw_input = _bw_input_index(has_aux_input, has_aux_weights)
        n_bw_input = {INPUT: n_input, AUX_INPUT: n_aux_input, None: None}[bw_input]
        fw = check_cell(ctx, FW_CELL, n_input, batch, n_aux_input)
        bw = check_cell(ctx, BW_CELL, n_bw_input, batch, n_aux_input)
        _check_aux_weights(ctx, FW_CELL, fw.cifg)
        _check_aux_weights(ctx, BW_CELL, bw.cifg)
        return dims, fw, bw, bw_input

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        check_params(ctx, BI_ACTIVATION, BI_CELL_CLIP, BI_PROJ_CLIP)
        merge = bool(ctx.scalar(MERGE_OUTPUTS))
        ctx.scalar(BI_TIME_MAJOR)
        _check_output_count(ctx)
        (time_major, max_time, batch, _), fw, bw, _ = self._check(ctx)
        _known(time_major, max_time, batch, fw.n_output, bw.n_output)
        if merge:
            shapes = [_sequence_shape(time_major, max_time, batch, fw.n_output + bw.n_output)]
        else:
            shapes = [_sequence_shape(time_major, max_time, batch, fw.n_output),
                      _sequence_shape(time_major, max_time, batch, bw.n_output)]
        if ctx.num_outputs in (5, 6):
            _known(fw.n_cell, bw.n_cell)
            shapes += [(batch, fw.n_output), (batch, fw.n_cell), (batch, bw.n_output), (batch, bw.n_cell)]
        return shapes

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        params = check_params(ctx, BI_ACTIVATION, BI_CELL_CLIP, BI_PROJ_CLIP)
        merge, time_major = bool(ctx.scalar(MERGE_OUTPUTS)), bool(ctx.scalar(BI_TIME_MAJOR))
        x = ctx.input(INPUT)
        work = working_type(ctx.input_code(INPUT))
        steps = _time_major(x, time_major, work)
        aux = None if ctx.is_omitted(AUX_INPUT) else _time_major(ctx.input(AUX_INPUT), time_major, work)
        fw_weights = CellWeights.load(ctx, FW_CELL, work)
        bw_weights = CellWeights.load(ctx, BW_CELL, work)
        cross_linking = aux is not None and fw_weights.aux_input_to[1] is not None
        bw_steps = aux if aux is not None and not cross_linking else steps
        results = []
        for cell, weights, inputs, reverse in ((FW_CELL, fw_weights, steps, False),
                                               (BW_CELL, bw_weights, bw_steps, True)):
            results.append(run_sequence(weights, params, inputs, ctx.input(cell.output_state_in).astype(work),
                                        ctx.input(cell.cell_state_in).astype(work),
                                        aux_steps=aux if cross_linking else None, reverse=reverse))
        (fw_out, fw_h, fw_c, _), (bw_out, bw_h, bw_c, _) = results
        dtype = x.dtype
        if merge:
            outputs = [_in_layout(np.concatenate([fw_out, bw_out], axis=-1), time_major, dtype)]
        else:
            outputs = [_in_layout(fw_out, time_major, dtype), _in_layout(bw_out, time_major, dtype)]
        if ctx.num_outputs in (5, 6):
            outputs += [s.astype(dtype) for s in (fw_h, fw_c, bw_h, bw_c)]
        return outputs
