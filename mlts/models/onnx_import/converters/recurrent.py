"""LSTM -> NNAPI's sequence LSTM operations (float) or QUANTIZED_LSTM per step (int8 QDQ); RNN -> NNAPI's
sequence RNN operations (Relu) or an unrolled FULLY_CONNECTED / ADD / TANH chain (Tanh, Sigmoid).

Both operators: opsets 7 and 14 (layout 0 [T, B, I] and 1 [B, T, I]), forward / reverse / bidirectional,
constant W, R, B (and P), sequence_lens absent or equal to the sequence length everywhere, initial states
absent (zeros), constant or computed, Y / Y_h / Y_c each emitted only when used (shapes and layouts:
_recurrent_io). Refused with an error naming the node: `clip` (ONNX clips the gates' inputs; NNAPI's cell
clip bounds the cell state), activations NNAPI cannot express, non-constant weights, per-sequence lengths.
GRU has no NNAPI operation and stays an unsupported operator.

Float LSTM -> UNIDIRECTIONAL_SEQUENCE_LSTM (forward; reverse between two REVERSEs of the time axis) or
BIDIRECTIONAL_SEQUENCE_LSTM (merged outputs). ONNX packs the gates (i, o, f, c) in W, R, B and the
peepholes (i, o, f) in P; NNAPI takes one tensor per gate in the order (input, forget, cell, output),
the bias Wb + Rb, and one activation for the cell input and the hidden output (gates: sigmoid).
input_forget=1 (onnxruntime: f = 1 - i) becomes NNAPI's CIFG (i = 1 - f) with the input gate's
weights, bias and peephole negated as the forget gate's: sigmoid(-z) = 1 - sigmoid(z).

RNN with Relu -> UNIDIRECTIONAL_SEQUENCE_RNN / BIDIRECTIONAL_SEQUENCE_RNN. NNAPI's RNN activations
are only the fused ReLU family, so Tanh (ONNX's default) and Sigmoid are unrolled: one
FULLY_CONNECTED computes X W^T + Wb + Rb for every step at once, then each step adds
FULLY_CONNECTED(H_{t-1}, R) (absent for a zero initial state) and applies TANH / LOGISTIC / RELU.

Quantization (_recurrent_quant): the QDQ pass may hand the LSTM its integer X, W and R (data inputs
0-2). R is declared as `bias_input` only so that its per-axis (per-gate) DequantizeLinear passes the
pass's per-axis check, which admits per-axis parameters on `weight_input` and `bias_input`;
`check_quantized` then requires R to be int8 weights exactly like W. Anything outside the quantized
form keeps the node in float.
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import FuseCode, OperandCode, OperandType, OperationCode

from ..errors import NotQuantizable
from ..ir import Graph, Node
from . import _recurrent_quant
from ._recurrent_io import (NNAPI_GATES, Recurrence, bind_sequence, bind_states, bind_steps, float_code, omitted,
                            parse, reverse_time, sequence_input, split_gates, state_inputs)
from .base import OpConverter, register
from .normalization import float_param

#: ONNX activation -> NNAPI LSTM activation code (the cell input and hidden output activation)
LSTM_ACTIVATIONS = {"tanh": 4, "relu": 1, "sigmoid": 6}
RNN_UNROLLED = {"tanh": OperationCode.TANH, "sigmoid": OperationCode.LOGISTIC, "relu": OperationCode.RELU}


def lstm_activation(rec: Recurrence, fail) -> int:
    """NNAPI's LSTM activation code for the node's activations, or `fail`."""
    codes = set()
    for f, g, h in rec.activations:
        if f != "sigmoid" or g != h or g not in LSTM_ACTIVATIONS:
            raise fail(f"activations {[f, g, h]} are not supported: NNAPI's LSTM has sigmoid gates and one activation "
                       "(Tanh, Relu or Sigmoid) for both the cell input and the hidden output")
        codes.add(LSTM_ACTIVATIONS[g])
    if len(codes) > 1:
        raise fail(f"the directions have different activations {rec.activations}: NNAPI's bidirectional LSTM has one")
    return codes.pop()


def _type(code: OperandCode, shape) -> OperandType:
    return OperandType.tensor(code, [d or 0 for d in shape])


def _const(ctx, code: OperandCode, array: np.ndarray) -> int:
    array = np.asarray(array)
    return ctx.constant(array, OperandType.tensor(code, array.shape))


# -- LSTM ----------------------------------------------------------------------------------------------
def _lstm_cell(ctx, rec: Recurrence, d: int, code: OperandCode, cifg: bool) -> list[int]:
    """Direction d's 17 NNAPI cell tensors: input-to and recurrent-to weights, peepholes and biases per gate
    (input, forget, cell, output), then the absent projection weights and bias."""
    h = rec.hidden
    w = split_gates(np.asarray(rec.w[d], np.float64), h)
    r = split_gates(np.asarray(rec.r[d], np.float64), h)
    b = split_gates(rec.gate_bias(d), h)
    p = None if rec.peepholes is None else split_gates(np.asarray(rec.peepholes[d], np.float64), h, "iof")
    if cifg:  # f = 1 - sigmoid(z_i) = sigmoid(-z_i); NNAPI derives i = 1 - f
        for tensors in (w, r, b) + ((p,) if p is not None else ()):
            tensors["f"] = -tensors["i"]
    none = omitted(ctx, OperandType.tensor(code, [0]))
    ops = []
    for tensors in (w, r):
        ops += [none if cifg and g == "i" else _const(ctx, code, tensors[g]) for g in NNAPI_GATES]
    ops += [none if p is None or (cifg and g == "i") else _const(ctx, code, p[g]) for g in "ifo"]
    ops += [none if cifg and g == "i" else _const(ctx, code, b[g]) for g in NNAPI_GATES]
    return ops + [none, none]


def convert_lstm(ctx, rec: Recurrence, activation: int) -> None:
    x_op, time_major = sequence_input(ctx, rec.node.inputs[0], rec.layout)
    code = float_code(ctx, x_op)
    cifg = bool(rec.node.attr("input_forget", 0))
    y, y_h, y_c = rec.outputs
    state_type = _type(code, [rec.batch, rec.hidden])
    h0 = state_inputs(ctx, rec, rec.node.input(5), state_type)
    c0 = state_inputs(ctx, rec, rec.node.input(6), state_type)
    cells = [_lstm_cell(ctx, rec, d, code, cifg) for d in range(rec.num_directions)]
    none = omitted(ctx, OperandType.tensor(code, [0]))
    clip = float_param(ctx, code, 0.0)
    seq_dims = [rec.steps, rec.batch] if time_major else [rec.batch, rec.steps]
    out = ctx.temp(_type(code, seq_dims + [rec.num_directions * rec.hidden]))
    states = [ctx.temp(state_type) for _ in range(2 * rec.num_directions)] if (y_h or y_c) else []
    if rec.num_directions == 1:
        reverse = rec.directions[0] == "reverse"
        src = reverse_time(ctx, x_op, time_major) if reverse else x_op
        inputs = ([src] + cells[0] + [h0[0], c0[0], ctx.int_scalar(activation), clip, clip,
                                      ctx.bool_scalar(time_major)] + [none] * 4)
        ctx.add_op(OperationCode.UNIDIRECTIONAL_SEQUENCE_LSTM, inputs, [out] + states)
        if reverse:
            out = reverse_time(ctx, out, time_major)
        h_states, c_states = states[:1], states[1:]
    else:
        inputs = ([x_op] + cells[0] + cells[1] + [h0[0], c0[0], h0[1], c0[1]] + [none] * 9
                  + [ctx.int_scalar(activation), clip, clip, ctx.bool_scalar(True), ctx.bool_scalar(time_major)]
                  + [none] * 8)
        ctx.add_op(OperationCode.BIDIRECTIONAL_SEQUENCE_LSTM, inputs, [out] + states)
        h_states, c_states = states[0::2], states[1::2]
    if y:
        bind_sequence(ctx, rec, y, out, time_major)
    if y_h:
        bind_states(ctx, rec, y_h, h_states)
    if y_c:
        bind_states(ctx, rec, y_c, c_states)


# -- RNN -----------------------------------------------------------------------------------------------
def check_rnn_activations(rec: Recurrence, fail) -> None:
    for (name,) in rec.activations:
        if name not in RNN_UNROLLED:
            raise fail(f"activation {name!r} is not supported (Tanh, Relu or Sigmoid map to NNAPI)")


def convert_rnn(ctx, rec: Recurrence) -> None:
    x_op, time_major = sequence_input(ctx, rec.node.inputs[0], rec.layout)
    code = float_code(ctx, x_op)
    if all(a == ["relu"] for a in rec.activations):
        _rnn_sequence_op(ctx, rec, x_op, time_major, code)
    else:
        _rnn_unrolled(ctx, rec, x_op, time_major, code)


def _rnn_cell(ctx, rec: Recurrence, d: int, code: OperandCode) -> list[int]:
    return [_const(ctx, code, rec.w[d]), _const(ctx, code, rec.r[d]), _const(ctx, code, rec.gate_bias(d))]


def _rnn_sequence_op(ctx, rec: Recurrence, x_op: int, time_major: bool, code: OperandCode) -> None:
    """All-Relu RNN: UNIDIRECTIONAL_SEQUENCE_RNN (REVERSEd for reverse) or BIDIRECTIONAL_SEQUENCE_RNN."""
    y, y_h, _ = rec.outputs
    state_type = _type(code, [rec.batch, rec.hidden])
    h0 = state_inputs(ctx, rec, rec.node.input(5), state_type)
    seq_dims = [rec.steps, rec.batch] if time_major else [rec.batch, rec.steps]
    out = ctx.temp(_type(code, seq_dims + [rec.num_directions * rec.hidden]))
    finals = [ctx.temp(state_type) for _ in range(rec.num_directions)] if y_h else []
    relu = ctx.int_scalar(FuseCode.RELU)
    if rec.num_directions == 1:
        reverse = rec.directions[0] == "reverse"
        src = reverse_time(ctx, x_op, time_major) if reverse else x_op
        ctx.add_op(OperationCode.UNIDIRECTIONAL_SEQUENCE_RNN,
                   [src] + _rnn_cell(ctx, rec, 0, code) + [h0[0], relu, ctx.int_scalar(int(time_major))],
                   [out] + finals)
        if reverse:
            out = reverse_time(ctx, out, time_major)
    else:
        none = omitted(ctx, OperandType.tensor(code, [0]))
        inputs = ([x_op] + _rnn_cell(ctx, rec, 0, code) + [h0[0]] + _rnn_cell(ctx, rec, 1, code) + [h0[1]]
                  + [none] * 3 + [relu, ctx.bool_scalar(time_major), ctx.bool_scalar(True)])
        ctx.add_op(OperationCode.BIDIRECTIONAL_SEQUENCE_RNN, inputs, [out] + finals)
    if y:
        bind_sequence(ctx, rec, y, out, time_major)
    if y_h:
        bind_states(ctx, rec, y_h, finals)


def _projected_steps(ctx, rec: Recurrence, rows: int, time_major: bool, code: OperandCode, d: int) -> list[int]:
    """X W_d^T + Wb + Rb for every step at once (one FULLY_CONNECTED over the [T*B, I] or [B*T, I] rows of
    X), as T operands [B, H]."""
    t, b, h = rec.steps, rec.batch, rec.hidden
    xw = ctx.op(OperationCode.FULLY_CONNECTED, [rows, _const(ctx, code, rec.w[d]), _const(ctx, code, rec.gate_bias(d)),
                                                ctx.int_scalar(FuseCode.NONE)], _type(code, [t * b if b else None, h]))
    if not time_major:  # rows are (batch, time): [B, T*H] puts each step's units side by side
        xw = ctx.reshape_to(xw, [b, t * h])
    if t == 1:
        return [xw]
    parts = [ctx.temp(_type(code, [b, h])) for _ in range(t)]
    ctx.add_op(OperationCode.SPLIT, [xw, ctx.int_scalar(0 if time_major else 1), ctx.int_scalar(t)], parts)
    return parts


def _rnn_unrolled(ctx, rec: Recurrence, x_op: int, time_major: bool, code: OperandCode) -> None:
    """H_t = act(X_t W^T + Wb + Rb + H_{t-1} R^T), step by step (NNAPI's RNN has no tanh or sigmoid)."""
    if rec.steps is None:
        raise ctx.fail("Tanh and Sigmoid RNNs are unrolled over time, which needs a static sequence length")
    y, y_h, _ = rec.outputs
    state_type = _type(code, [rec.batch, rec.hidden])
    h_name = rec.node.input(5)
    zero_start = h_name is None or (ctx.is_const(h_name) and not np.any(ctx.value(h_name).const))
    h0 = [None] * rec.num_directions if zero_start else state_inputs(ctx, rec, h_name, state_type)
    outputs = [[None] * rec.num_directions for _ in range(rec.steps)]
    finals = []
    zeros = _const(ctx, code, np.zeros(rec.hidden))
    rows = ctx.reshape_to(x_op, [None, rec.input_size])
    for d, direction in enumerate(rec.directions):
        (act,) = rec.activations[d]
        parts = _projected_steps(ctx, rec, rows, time_major, code, d)
        r = _const(ctx, code, rec.r[d])
        h = h0[d]
        for t in (range(rec.steps) if direction == "forward" else reversed(range(rec.steps))):
            pre = parts[t]
            if h is not None:
                recurrent = ctx.op(OperationCode.FULLY_CONNECTED, [h, r, zeros, ctx.int_scalar(FuseCode.NONE)],
                                   state_type)
                fuse = FuseCode.RELU if act == "relu" else FuseCode.NONE
                pre = ctx.op(OperationCode.ADD, [pre, recurrent, ctx.int_scalar(fuse)], state_type)
            h = pre if act == "relu" and h is not None else ctx.op(RNN_UNROLLED[act], [pre], state_type)
            outputs[t][d] = h
        finals.append(h)
    if y:
        bind_steps(ctx, rec, y, outputs)
    if y_h:
        bind_states(ctx, rec, y_h, finals)


# -- the converters -------------------------------------------------------------------------------------
@register
class LstmConverter(OpConverter):
    op_types = ("LSTM",)
    quantizable = True
    data_inputs = (0, 1, 2)
    weight_input = 1
    bias_input = 2  # R: a second per-gate weight tensor (see the module docstring)
    optional_outputs = (0, 1, 2)  # Y, Y_h, Y_c: each written only when read

    def check_quantized(self, node: Node, graph: Graph) -> None:
        rec = parse(node, graph, NotQuantizable, 4)
        _recurrent_quant.check(node, graph, rec, lstm_activation(rec, NotQuantizable))

    def convert(self, node: Node, ctx) -> None:
        rec = parse(node, ctx.graph, ctx.fail, 4)
        activation = lstm_activation(rec, ctx.fail)
        if ctx.is_quantized(node.inputs[0]):
            _recurrent_quant.convert(ctx, rec)
        else:
            convert_lstm(ctx, rec, activation)


@register
class RnnConverter(OpConverter):
    op_types = ("RNN",)

    def convert(self, node: Node, ctx) -> None:
        rec = parse(node, ctx.graph, ctx.fail, 1)
        check_rnn_activations(rec, ctx.fail)
        convert_rnn(ctx, rec)
