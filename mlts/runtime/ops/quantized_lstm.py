"""QUANTIZED_LSTM (NNAPI 1.3): one step of an integer LSTM cell, with optional CIFG (coupled input
and forget gates), peephole connections, layer normalization and projection.

Inputs (32): 0 input [batches, input_size] (TENSOR_QUANT8_ASYMM_SIGNED); 1-4 input-to-{input,
forget, cell, output} weights [num_units, input_size] and 5-8 recurrent-to-{...} weights
[num_units, output_size] (TENSOR_QUANT8_SYMM; 1 and 5 omitted together for CIFG); 9-11 cell-to-
{input, forget, output} peephole weights [num_units] (TENSOR_QUANT16_SYMM, optional); 12-15 the
{input, forget, cell, output} gate biases [num_units] (TENSOR_INT32; 12 omitted for CIFG);
16 projection weights [output_size, num_units] (TENSOR_QUANT8_SYMM) and 17 its bias (TENSOR_INT32),
optional; 18 previous output [batches, output_size] (TENSOR_QUANT8_ASYMM_SIGNED); 19 previous cell
state [batches, num_units] (TENSOR_QUANT16_SYMM, scale a power of two, 2**-15 .. 2**-9);
20-23 {input, forget, cell, output} layer norm weights [num_units] (TENSOR_QUANT16_SYMM, optional);
24 cell clip, 25 projection clip (FLOAT32, 0: none); 26-29 the scales of the {input, forget, cell,
output} gates' matmul results; 30 hidden state zero point (INT32), 31 hidden state scale (FLOAT32).
Outputs: 0 output state, 1 cell state, 2 output (the output state again).

The arithmetic is NNAPI's integer kernel: int8 matmuls whose zero points are folded into effective
biases, rescaled into int16 gates (saturating after each product), integer layer normalization,
16-bit gemmlowp sigmoid / tanh, the cell state updated with power-of-two shifts, the hidden state
requantized to int8, then the projection. Where NNAPI's kernel reads memory it has not written or
drops an operand, this kernel follows the documented (TFLite) semantics instead: the forget and
input peepholes read the previous cell state, without layer normalization the gate biases join the
input matmul (scale input x weights), and the projection bias may be omitted.
"""
from __future__ import annotations

import math

import numpy as np

from ..enums import OperandCode, OperationCode
from ..errors import ResultCode
from . import _qlstm_math as qm
from .base import Operation, OperationContext, Shape
from .quant import quantize_multiplier, rounding_divide_by_pot
from .registry import register

Q8AS, Q8S, Q16S = (OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, OperandCode.TENSOR_QUANT8_SYMM,
                   OperandCode.TENSOR_QUANT16_SYMM)
TI32, F32, I32 = OperandCode.TENSOR_INT32, OperandCode.FLOAT32, OperandCode.INT32
INPUT, PROJECTION_WEIGHTS, PROJECTION_BIAS, PREV_OUTPUT, PREV_CELL_STATE = 0, 16, 17, 18, 19
CELL_CLIP, PROJECTION_CLIP, HIDDEN_ZERO_POINT, HIDDEN_SCALE = 24, 25, 30, 31
GATES = ("input", "forget", "cell", "output")
INPUT_WEIGHTS = dict(zip(GATES, (1, 2, 3, 4)))
RECURRENT_WEIGHTS = dict(zip(GATES, (5, 6, 7, 8)))
PEEPHOLE_WEIGHTS = {"input": 9, "forget": 10, "output": 11}
BIASES = dict(zip(GATES, (12, 13, 14, 15)))
LAYER_NORM_WEIGHTS = dict(zip(GATES, (20, 21, 22, 23)))
INTERMEDIATE_SCALES = dict(zip(GATES, (26, 27, 28, 29)))
OPTIONAL = frozenset({1, 5, 9, 10, 11, 12, 16, 17, 20, 21, 22, 23})
INPUT_TYPES = ((Q8AS,) + (Q8S,) * 8 + (Q16S,) * 3 + (TI32,) * 4 + (Q8S, TI32, Q8AS, Q16S) + (Q16S,) * 4
               + (F32,) * 6 + (I32, F32))
MATRICES = frozenset({INPUT, *INPUT_WEIGHTS.values(), *RECURRENT_WEIGHTS.values(), PROJECTION_WEIGHTS,
                      PREV_OUTPUT, PREV_CELL_STATE})
#: the cell state's scale is 2**cell_shift, cell_shift in this range (tanh of the state needs
#: cell_shift + 15 integer bits, 0 to 6)
CELL_SHIFTS = range(-15, -8)
f32 = np.float32


def presence(ctx: OperationContext, i: int) -> bool | None:
    """Whether optional input i is given: while building a model, None for a model input or computed
    operand, which a request may still omit."""
    if ctx.is_omitted(i):
        return False
    return True if not ctx.is_static or ctx.value(i) is not None else None


def check_omissions(ctx: OperationContext) -> None:
    """NNAPI's rules on which optional inputs go together (checked where the answer is known)."""
    def given(*inputs: int) -> list[bool | None]:
        return [presence(ctx, i) for i in inputs]

    def all_or_none(inputs: tuple[int, ...], what: str) -> None:
        states = given(*inputs)
        if None not in states:
            ctx.check(all(states) or not any(states), f"inputs {list(inputs)} ({what}) must all be given or "
                      f"all omitted; given: {[i for i, s in zip(inputs, states) if s]}", input=inputs[0])

    all_or_none((1, 5), "the CIFG input gate weights")
    cifg = None if presence(ctx, 1) is None else not presence(ctx, 1)
    peephole = given(9, 10, 11)
    if None not in peephole and cifg is not None:
        ctx.check(((peephole[0] or cifg) and peephole[1] and peephole[2]) or not any(peephole),
                  f"the peephole weights (inputs 9, 10, 11) must all be given or all omitted (input 9 may be "
                  f"omitted with CIFG); given: {[i for i, s in zip((9, 10, 11), peephole) if s]}", input=9)
    bias = presence(ctx, 12)
    if cifg is not None and bias is not None:
        ctx.check(bias != cifg, "the input gate bias must be omitted with CIFG (inputs 1 and 5 omitted) and given "
                  "otherwise", input=12)
    if cifg:
        ctx.check(presence(ctx, 20) is not True, "the input layer norm weights must be omitted with CIFG", input=20)
        all_or_none((21, 22, 23), "layer norm weights")
    elif cifg is False:
        all_or_none((20, 21, 22, 23), "layer norm weights")


def _multiplier(ctx: OperationContext, real: float, what: str) -> tuple[int, int]:
    if not (math.isfinite(real) and real >= 0):
        raise ctx.fail(f"the {what} scale {real:g} is not a finite non-negative number", code=ResultCode.OP_FAILED)
    return quantize_multiplier(real)


def _matmul_multiplier(ctx: OperationContext, weights: int, vector_scale: np.float32,
                       intermediate_scale: np.float32) -> tuple[int, int]:
    """weights scale x vector scale / intermediate scale, in float32 as NNAPI computes it."""
    with np.errstate(all="ignore"):
        real = f32(ctx.input_type(weights).scale) * vector_scale / intermediate_scale
    return _multiplier(ctx, float(real), f"effective input {weights}")


def _clip(value: float, scale: float, limit: int) -> int:
    """A clip value in steps of `scale` (float32 division, clamped, truncated); 0: no clipping."""
    if not value > 0:
        return 0
    with np.errstate(all="ignore"):
        steps = f32(value) / f32(scale)
    return int(min(max(steps, -limit - 1), limit))


@register
class QuantizedLstm(Operation):
    code = OperationCode.QUANTIZED_LSTM
    supported_types = frozenset({Q8AS})

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(32, 3)
        for i, code in enumerate(INPUT_TYPES):
            ctx.check_input_type(i, code, optional=i in OPTIONAL)
        for k, code in enumerate((Q8AS, Q16S, Q8AS)):
            ctx.check_output_type(k, code)
        for i in range(24):
            ctx.check_input_rank(i, 2 if i in MATRICES else 1)
        check_omissions(ctx)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        check_omissions(ctx)
        output_shape, state_shape = ctx.input_shape(PREV_OUTPUT), ctx.input_shape(PREV_CELL_STATE)
        for i, shape in ((PREV_OUTPUT, output_shape), (PREV_CELL_STATE, state_shape)):
            ctx.check(len(shape) == 2, f"rank {len(shape)} not supported (expected 2)", input=i)
        batches, output_size = output_shape
        num_units = state_shape[1]
        ctx.check(state_shape[0] == batches, f"has {state_shape[0]} batches but the previous output has {batches}",
                  input=PREV_CELL_STATE)
        input_shape = qm.known_dims(ctx, INPUT)
        input_size = None if input_shape is None else input_shape[1]
        if input_shape is not None:
            ctx.check(input_shape[0] == batches, f"has {input_shape[0]} batches but the previous output has "
                      f"{batches}", input=INPUT)
        expected = {i: (num_units, input_size) for i in INPUT_WEIGHTS.values()}
        expected.update({i: (num_units, output_size) for i in RECURRENT_WEIGHTS.values()})
        expected.update({i: (num_units,) for i in (*PEEPHOLE_WEIGHTS.values(), *BIASES.values(),
                                                   *LAYER_NORM_WEIGHTS.values())})
        expected.update({PROJECTION_WEIGHTS: (output_size, num_units), PROJECTION_BIAS: (output_size,)})
        for i, want in expected.items():
            dims = qm.known_dims(ctx, i)
            if dims is not None:
                ctx.check(len(dims) == len(want) and all(w is None or d == w for d, w in zip(dims, want)),
                          f"dimensions {list(dims)} must be {['?' if w is None else w for w in want]}", input=i)
        if presence(ctx, PROJECTION_WEIGHTS) is False:
            ctx.check(output_size == num_units, f"without projection weights the output size ({output_size}) must "
                      f"equal the number of units ({num_units})", input=PREV_OUTPUT)
        return [tuple(output_shape), tuple(state_shape), tuple(output_shape)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        cell_shift = qm.checked_log2(ctx.input_type(PREV_CELL_STATE).scale)
        if cell_shift not in CELL_SHIFTS:
            raise ctx.fail(f"the cell state scale {ctx.input_type(PREV_CELL_STATE).scale:g} must be a power of two "
                           "from 2^-15 to 2^-9", input=PREV_CELL_STATE, code=ResultCode.OP_FAILED)
        x = ctx.input(INPUT).astype(np.int64)
        h_prev = ctx.input(PREV_OUTPUT).astype(np.int64)
        c_prev = ctx.input(PREV_CELL_STATE).astype(np.int64)
        input_type, output_type = ctx.input_type(INPUT), ctx.input_type(PREV_OUTPUT)
        use_cifg = ctx.is_omitted(INPUT_WEIGHTS["input"])

        def gate(name: str, cell_state: np.ndarray) -> np.ndarray:
            """A gate's pre-activation: the two matmuls, the peephole, the layer normalization."""
            intermediate = f32(ctx.scalar(INTERMEDIATE_SCALES[name]))
            norm_weights = LAYER_NORM_WEIGHTS[name]
            layer_norm = not ctx.is_omitted(norm_weights)
            bias = None if layer_norm else ctx.input(BIASES[name])
            g = np.zeros(c_prev.shape, np.int64)
            for weights, vector, t, folded_bias in ((INPUT_WEIGHTS[name], x, input_type, bias),
                                                    (RECURRENT_WEIGHTS[name], h_prev, output_type, None)):
                w = ctx.input(weights)
                effective_bias = qm.zero_point_times_weights(-t.zero_point, w, folded_bias)
                multiplier, shift = _matmul_multiplier(ctx, weights, f32(t.scale), intermediate)
                g = qm.matrix_batch_vector_multiply_accumulate(vector, effective_bias, w, multiplier, shift, g)
            peephole = PEEPHOLE_WEIGHTS.get(name)
            if peephole is not None and not ctx.is_omitted(peephole):
                real = f32(2.0 ** cell_shift * float(f32(ctx.input_type(peephole).scale)) / float(intermediate))
                multiplier, shift = _multiplier(ctx, float(real), f"effective input {peephole}")
                product = ctx.input(peephole).astype(np.int64) * cell_state
                g = qm.saturate(qm.multiply_by_quantized_multiplier(product, multiplier, shift) + g)
            if layer_norm:
                norm_scale = f32(ctx.input_type(norm_weights).scale)
                multiplier, shift = _multiplier(ctx, float(norm_scale), f"input {norm_weights}")
                variance_limit = min(1, int(f32(10000) * norm_scale))
                g = qm.layer_norm(g, ctx.input(norm_weights), ctx.input(BIASES[name]), multiplier, shift,
                                  variance_limit)
            return g

        forget_gate = qm.logistic(gate("forget", c_prev), 3)
        cell_gate = qm.tanh(gate("cell", c_prev), 3)
        input_gate = (qm.INT16_MAX - forget_gate) if use_cifg else qm.logistic(gate("input", c_prev), 3)
        # Q0.15 x state >> 15 stays in the state's scale; Q0.15 x Q0.15 >> (30 + cell_shift) reaches it.
        cell = qm.saturate(qm.wrap(rounding_divide_by_pot(forget_gate * c_prev, 15))
                           + qm.wrap(rounding_divide_by_pot(input_gate * cell_gate, 30 + cell_shift)))
        cell_clip = _clip(ctx.scalar(CELL_CLIP), ctx.input_type(PREV_CELL_STATE).scale, qm.INT16_MAX)
        if cell_clip > 0:
            cell = np.clip(cell, -cell_clip, cell_clip)
        output_gate = qm.logistic(gate("output", cell), 3)

        hidden_scale = f32(ctx.scalar(HIDDEN_SCALE))
        hidden_zero_point = int(qm.wrap(int(ctx.scalar(HIDDEN_ZERO_POINT)), 8))  # NNAPI reads it as int8
        with np.errstate(all="ignore"):
            real = f32(2.0 ** -15 / float(hidden_scale) * 2.0 ** -15)
        multiplier, shift = _multiplier(ctx, float(real), "hidden state")
        hidden = qm.multiply_by_quantized_multiplier(output_gate * qm.tanh(cell, cell_shift + 15), multiplier, shift)
        hidden = np.clip(hidden - hidden_zero_point, -128, 127)

        if ctx.is_omitted(PROJECTION_WEIGHTS):
            output = hidden
        else:
            w = ctx.input(PROJECTION_WEIGHTS)
            bias = None if ctx.is_omitted(PROJECTION_BIAS) else ctx.input(PROJECTION_BIAS)
            with np.errstate(all="ignore"):
                real = f32(ctx.input_type(PROJECTION_WEIGHTS).scale) * hidden_scale / f32(output_type.scale)
            multiplier, shift = _multiplier(ctx, float(real), "projection")
            output = qm.matrix_batch_vector_multiply_accumulate(
                hidden, qm.zero_point_times_weights(hidden_zero_point, w, bias), w, multiplier, shift,
                np.zeros(h_prev.shape, np.int64), output_type.zero_point, bits=8)
            projection_clip = _clip(ctx.scalar(PROJECTION_CLIP), ctx.input_type(PROJECTION_WEIGHTS).scale, 127)
            if projection_clip > 0:
                output = np.clip(output, -projection_clip, projection_clip)
        output = output.astype(np.int8)
        return [output, cell.astype(np.int16), output.copy()]
