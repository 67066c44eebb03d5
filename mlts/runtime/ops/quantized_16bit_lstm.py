"""QUANTIZED_16BIT_LSTM (NNAPI 1.2): one step of an LSTM cell on 8-bit data with a 16-bit cell state.

Inputs: 0 input [batches, input_size] (TENSOR_QUANT8_ASYMM, scale 1/128, zero point 128); 1-4 the
input-to-{input, forget, cell, output} weights [output_size, input_size] and 5-8 the
recurrent-to-{input, forget, cell, output} weights [output_size, output_size], all TENSOR_QUANT8_ASYMM
sharing one scale and zero point; 9-12 the {input, forget, cell, output} gate biases [output_size]
(TENSOR_INT32, scale weights_scale / 128, zero point 0); 13 the previous cell state
[batches, output_size] (TENSOR_QUANT16_SYMM, scale 2**-11, zero point 0); 14 the previous output
[batches, output_size] (quantized as the input). Outputs: 0 the new cell state, 1 the output.

The arithmetic is NNAPI's (gemmlowp fixed point, no floating point on the data path): each gate's
int32 accumulator is rescaled into Q3.12 int16 (multiplier 4096 x bias scale), the gates go
through 16-bit logistic / tanh, the cell state is updated in Q4.11 with a saturating addition, and
the output gate x tanh(cell state) is rounded by 8 bits to the output's 1/128 steps.
The accumulator is the bias plus the concatenation [input, previous output] (centred by 128) times
the weight row [recurrent weights, input weights] (centred by their zero point): NNAPI's kernel
pairs them this way, not input with input weights, and its test vectors are computed so.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from . import _qlstm_math as qm
from .base import Operation, OperationContext, Shape
from .quant import quantize_multiplier, rounding_divide_by_pot
from .registry import register

Q8A, Q16S, I32 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT16_SYMM, OperandCode.TENSOR_INT32
INPUT, PREV_CELL_STATE, PREV_OUTPUT = 0, 13, 14
INPUT_WEIGHTS = (1, 2, 3, 4)  # input-to-{input, forget, cell, output}
RECURRENT_WEIGHTS = (5, 6, 7, 8)
BIASES = (9, 10, 11, 12)
INPUT_GATE, FORGET_GATE, CELL_GATE, OUTPUT_GATE = range(4)
#: the cell state's integer bits: its scale must be 2**(STATE_INTEGER_BITS - 15)
STATE_INTEGER_BITS = 4
#: the gates' pre-activations are Q3.12
GATE_INTEGER_BITS = 3


def _float32(x: float) -> float:
    return float(np.float32(x))


@register
class Quantized16BitLstm(Operation):
    code = OperationCode.QUANTIZED_16BIT_LSTM
    supported_types = frozenset({Q8A})

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(15, 2)
        for i in (INPUT, *INPUT_WEIGHTS, *RECURRENT_WEIGHTS, PREV_OUTPUT):
            ctx.check_input_type(i, Q8A)
        for i in BIASES:
            ctx.check_input_type(i, I32)
        ctx.check_input_type(PREV_CELL_STATE, Q16S)
        ctx.check_output_type(0, Q16S)
        ctx.check_output_type(1, Q8A)
        for i in (INPUT, PREV_OUTPUT):
            t = ctx.input_type(i)
            ctx.check(_float32(t.scale) == 1.0 / 128 and t.zero_point == 128,
                      f"scale must be 1/128 and zero point 128, got scale {t.scale:g}, zero point {t.zero_point}",
                      input=i)
        weights = ctx.input_type(1)
        ctx.check(weights.scale != 0, "weights scale must not be 0", input=1)
        for i in (*INPUT_WEIGHTS, *RECURRENT_WEIGHTS)[1:]:
            t = ctx.input_type(i)
            ctx.check(_float32(t.scale) == _float32(weights.scale) and t.zero_point == weights.zero_point,
                      f"quantization (scale {t.scale:g}, zero point {t.zero_point}) must equal input 1's "
                      f"(scale {weights.scale:g}, zero point {weights.zero_point})", input=i)
        for i in BIASES:
            t = ctx.input_type(i)
            ctx.check(_float32(t.scale) == _float32(weights.scale) / 128 and t.zero_point == 0,
                      f"scale must be the weights scale / 128 ({_float32(weights.scale) / 128:g}) and zero point 0, "
                      f"got scale {t.scale:g}, zero point {t.zero_point}", input=i)
        state = ctx.input_type(PREV_CELL_STATE)
        log2 = qm.checked_log2(state.scale)
        ctx.check(state.zero_point == 0 and log2 is not None and log2 + 15 == STATE_INTEGER_BITS,
                  f"scale must be 2^{STATE_INTEGER_BITS - 15} and zero point 0, got scale {state.scale:g}, "
                  f"zero point {state.zero_point}", input=PREV_CELL_STATE)
        for i in (INPUT, *INPUT_WEIGHTS, *RECURRENT_WEIGHTS, PREV_CELL_STATE, PREV_OUTPUT):
            ctx.check_input_rank(i, 2)
        for i in BIASES:
            ctx.check_input_rank(i, 1)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        state_shape, output_shape = ctx.input_shape(PREV_CELL_STATE), ctx.input_shape(PREV_OUTPUT)
        ctx.check(len(output_shape) == 2, f"rank {len(output_shape)} not supported (expected 2)", input=PREV_OUTPUT)
        batches, output_size = output_shape
        ctx.check(tuple(state_shape) == (batches, output_size),
                  f"dimensions {list(state_shape)} must be [batches, output_size] = {[batches, output_size]}",
                  input=PREV_CELL_STATE)
        input_shape = qm.known_dims(ctx, INPUT)
        input_size = None
        if input_shape is not None:
            ctx.check(len(input_shape) == 2, f"rank {len(input_shape)} not supported (expected 2)", input=INPUT)
            ctx.check(input_shape[0] == batches,
                      f"has {input_shape[0]} batches but the previous output has {batches}", input=INPUT)
            input_size = input_shape[1]
        expected = {i: (output_size, input_size) for i in INPUT_WEIGHTS}
        expected.update({i: (output_size, output_size) for i in RECURRENT_WEIGHTS})
        expected.update({i: (output_size,) for i in BIASES})
        for i, want in expected.items():
            dims = qm.known_dims(ctx, i)
            if dims is not None:
                ctx.check(len(dims) == len(want) and all(w is None or d == w for d, w in zip(dims, want)),
                          f"dimensions {list(dims)} must be {['?' if w is None else w for w in want]}", input=i)
        return [tuple(state_shape), tuple(output_shape)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(INPUT).astype(np.int64) - 128
        h = ctx.input(PREV_OUTPUT).astype(np.int64) - 128
        weights_zero_point = ctx.input_type(1).zero_point
        # The fully-connected output is Q3.12 (scale 2**-12); the accumulator's scale is the bias's.
        multiplier, shift = quantize_multiplier(4096 * _float32(ctx.input_type(BIASES[0]).scale))
        # NNAPI's kernel multiplies the concatenation [input, previous output] by weight rows laid out
        # as [recurrent weights, input weights]; its test vectors depend on that pairing.
        concatenated = np.concatenate([x, h], axis=1)
        gates = []
        for gate in range(4):
            rows = np.concatenate([ctx.input(RECURRENT_WEIGHTS[gate]), ctx.input(INPUT_WEIGHTS[gate])], axis=1)
            acc = qm.wrap(ctx.input(BIASES[gate]).astype(np.int64)
                          + concatenated @ (rows.astype(np.int64) - weights_zero_point).T, 32)
            gates.append(qm.saturate(qm.multiply_by_quantized_multiplier(acc, multiplier, shift), 16))
        input_gate = qm.logistic(gates[INPUT_GATE], GATE_INTEGER_BITS)
        modulation = qm.tanh(gates[CELL_GATE], GATE_INTEGER_BITS)
        forget_gate = qm.logistic(gates[FORGET_GATE], GATE_INTEGER_BITS)
        output_gate = qm.logistic(gates[OUTPUT_GATE], GATE_INTEGER_BITS)
        prev_state = ctx.input(PREV_CELL_STATE).astype(np.int64)
        # Q0 x Q0 -> Q0 rescaled to Q4, plus Q0 x Q4 -> Q4, saturating.
        new_state = qm.saturate(qm.rescale(qm.mul(input_gate, modulation), 0, STATE_INTEGER_BITS)
                                + qm.mul(forget_gate, prev_state), 16)
        # tanh on the state clamped to Q3 (NNAPI reuses its Q3 tanh rather than a Q4 one).
        activation = qm.mul(output_gate, qm.tanh(qm.rescale(new_state, STATE_INTEGER_BITS, GATE_INTEGER_BITS),
                                                 GATE_INTEGER_BITS))
        output = np.clip(rounding_divide_by_pot(activation, 8), -128, 127) + 128
        return [new_state.astype(np.int16), output.astype(np.uint8)]
