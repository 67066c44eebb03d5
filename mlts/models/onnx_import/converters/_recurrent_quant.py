"""The int8 QDQ LSTM as NNAPI QUANTIZED_LSTM, one operation per time step.

The form (what the project's quantizer writes; the QDQ pass hands the node its integer tensors):
X int8 (per tensor); W [1, 4H, I] and R [1, 4H, H] int8 constants, symmetric (zero point 0), one
scale per tensor or per axis 1 with one value per gate block; B a float constant (or absent); Y and/or
Y_h quantized int8 (the hidden state's parameters). One direction (forward), layout 0 or 1, default
activations, no peepholes, no CIFG, no clip, initial states absent or constant (quantized at import:
initial_h with the hidden state's parameters, initial_c at the cell state's scale); anything else runs
in float.

QUANTIZED_LSTM is a single step: the input is SPLIT on its time axis, each step's output state and
cell state feed the next step (starting from the initial states, or h_zero_point and 0), Y is the
CONCATENATION of the steps' outputs and Y_h the last one. The cell state is int16 at the scale an
unread int16 QuantizeLinear on Y_c records (the quantizer's 2**n, n in [-15, -9]; anything else is an
error), else 2**-11 (QUANTIZED_16BIT_LSTM's fixed scale). A read Y_c keeps the node in float: NNAPI has
no operation that reshapes or converts the TENSOR_QUANT16_SYMM cell state into ONNX's rank-3 Y_c.

Without layer normalization each gate's bias joins the input matmul, so it is int32 at scale
x_scale * w_gate_scale; the "intermediate scales" are then the scales of the int16 gate accumulators,
which the gate activations read as Q3.12: 2**-12 is the value that gives the LSTM's gates (they are
not layer-norm parameters here). The hidden state's zero point is passed negated: the operation
writes hidden - hidden_zero_point (NNAPI's kernel convention, see runtime/ops/quantized_lstm.py), so
-h_zero_point yields the usual round(h / h_scale) + h_zero_point of the output operand.
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import OperandCode, OperandType, OperationCode

from ..errors import NotQuantizable, import_error
from ..ir import Graph, Node, Quant
from ._recurrent_io import NNAPI_GATES, Recurrence, bind_states, bind_steps, omitted, sequence_input, split_gates, \
    time_steps

Q8AS, Q8S, Q16S = (OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, OperandCode.TENSOR_QUANT8_SYMM,
                   OperandCode.TENSOR_QUANT16_SYMM)
#: the cell state's scale 2**shift: QUANTIZED_LSTM accepts these shifts (runtime/ops/quantized_lstm.py); without
#: a recorded scale, 2**CELL_SHIFT (QUANTIZED_16BIT_LSTM's fixed one: the cell state in [-16, 16))
CELL_SHIFTS = range(-15, -8)
CELL_SHIFT = -11
GATE_SCALE = 2.0 ** -12  # the int16 gate accumulators, read as Q3.12 by the gate activations
INT8 = np.dtype(np.int8)


def _hard(node: Node, message: str):
    """A refusal of the quantized form (an error, not a float fallback)."""
    return import_error(f"{node.describe()}: quantized LSTM: {message}")


def gate_scales(node: Node, name: str, q: Quant, hidden: int) -> dict[str, float]:
    """One scale per ONNX gate letter of quantized W or R (per tensor, or per axis 1 constant per gate)."""
    if q.dtype != INT8 or np.any(q.zero_point != 0):
        raise _hard(node, f"{name} must be int8 with zero point 0 (NNAPI's TENSOR_QUANT8_SYMM weights), got "
                          f"{q.describe()} zero point(s) {sorted(set(q.zero_point.tolist()))[:4]}")
    if q.per_tensor:
        return {g: q.s for g in "iofc"}
    if q.axis != 1 or q.scale.size != 4 * hidden:
        raise _hard(node, f"{name} is quantized per axis {q.axis} with {q.scale.size} scales: only per tensor, or "
                          "per axis 1 with one scale per gate block, maps to NNAPI's per-gate weights")
    blocks = split_gates(q.scale, hidden)
    for g, s in blocks.items():
        if np.any(s != s[0]):
            raise _hard(node, f"{name} has different scales within gate {g!r}: NNAPI's per-gate weights have one "
                              "scale each")
    return {g: float(s[0]) for g, s in blocks.items()}


def cell_shift(node: Node, graph: Graph) -> int:
    """log2 of the cell state's scale: the int16 QuantizeLinear a quantizer leaves unread on Y_c records it
    (graph.unread_quant), else 2**CELL_SHIFT."""
    y_c = node.outputs[2] if len(node.outputs) > 2 else ""
    q = graph.unread_quant.get(y_c) if y_c else None
    if q is None:
        return CELL_SHIFT
    shift = float(np.log2(q.s)) if q.per_tensor and q.s > 0 else 0.5
    if q.dtype != np.dtype(np.int16) or q.zp != 0 or shift != round(shift) or int(round(shift)) not in CELL_SHIFTS:
        raise _hard(node, f"the cell state's quantization recorded on Y_c ({q.describe()}) must be int16, zero point 0, "
                          f"scale a power of two from 2**{CELL_SHIFTS[0]} to 2**{CELL_SHIFTS[-1]} (QUANTIZED_LSTM)")
    return int(round(shift))


def hidden_quant(node: Node, graph: Graph, rec: Recurrence) -> Quant:
    """The hidden state's quantization: Y_h's (Y is requantized to it if it differs), else Y's."""
    y, y_h, _ = rec.outputs
    q = graph.value(y_h or y).quant
    if q.zp == -128:
        raise _hard(node, f"the hidden state zero point -128 ({q.describe()}) cannot be given to QUANTIZED_LSTM, "
                          "which takes it negated as an int8 (use a zero point in [-127, 127])")
    return q


def check(node: Node, graph: Graph, rec: Recurrence, activation: int) -> None:
    """NotQuantizable outside the form (the node then runs in float); an error where the form is broken."""
    x = graph.value(node.inputs[0])
    if x.quant is None or x.dtype != INT8:
        raise NotQuantizable("QUANTIZED_LSTM takes an int8 input")
    if rec.directions != ("forward",) or activation != 4 or node.attr("input_forget", 0) or rec.peepholes is not None:
        raise NotQuantizable("QUANTIZED_LSTM: one forward direction, tanh, no CIFG or peepholes")
    if any(node.input(i) and graph.const(node.input(i)) is None for i in (5, 6)):
        raise NotQuantizable("computed initial states (constant ones are quantized at import)")
    if rec.steps is None or rec.batch is None:
        raise NotQuantizable("the sequence length and batch size must be static")
    y, y_h, y_c = rec.outputs
    if y_c is not None:
        raise NotQuantizable("Y_c is used: QUANTIZED_LSTM's int16 cell state cannot be given as Y_c (no NNAPI "
                             "operation reshapes or converts TENSOR_QUANT16_SYMM)")
    hidden = graph.value(y_h or y).quant if (y or y_h) else None
    if hidden is None or hidden.dtype != INT8:
        raise NotQuantizable("the hidden state (Y_h, else Y) must be an int8 output (QUANTIZED_LSTM's output type)")
    if any(graph.value(node.inputs[i]).quant is None for i in (1, 2)):
        raise NotQuantizable("W and R must be quantized")
    # In the form: what NNAPI cannot express is an error naming the node.
    for i, name in ((1, "W"), (2, "R")):
        gate_scales(node, name, graph.value(node.inputs[i]).quant, rec.hidden)
    hidden_quant(node, graph, rec)
    cell_shift(node, graph)
    _biases(node, rec, x.quant.s, graph.value(node.inputs[1]).quant)


def _biases(node: Node, rec: Recurrence, x_scale: float, w_quant: Quant) -> dict[str, np.ndarray]:
    """int32 gate biases (Wb + Rb) at scale x_scale * w_gate_scale, by ONNX gate letter."""
    scales = gate_scales(node, "W", w_quant, rec.hidden)
    out = {}
    for g, b in split_gates(rec.gate_bias(0), rec.hidden).items():
        q = np.rint(b / (np.float64(np.float32(x_scale)) * scales[g]))
        if np.any(np.abs(q) > 2**31 - 1):
            raise _hard(node, f"the {g} gate bias does not fit in int32 at scale x_scale * w_scale")
        out[g] = q.astype(np.int32)
    return out


def _initial_state(ctx, name: str | None, batch: int, hidden: int, scale: float, zero_point: int,
                   dtype) -> np.ndarray:
    """initial_h / initial_c ([1, B, H] or [B, 1, H]: one direction) quantized as ONNX's QuantizeLinear does
    (round half to even, saturate); absent: the zero state."""
    real = np.zeros((batch, hidden)) if name is None else np.asarray(ctx.value(name).const, np.float64)
    info = np.iinfo(dtype)
    q = np.rint(real.reshape(batch, hidden) / np.float64(np.float32(scale))) + zero_point
    return np.clip(q, info.min, info.max).astype(dtype)


def convert(ctx, rec: Recurrence) -> None:
    node = rec.node
    x = node.inputs[0]
    h, b, t = rec.hidden, rec.batch, rec.steps
    wv, rv = ctx.value(node.inputs[1]), ctx.value(node.inputs[2])
    x_q = ctx.quant_of(x)
    state_q = hidden_quant(node, ctx.graph, rec)
    shift = cell_shift(node, ctx.graph)
    ops = []
    for v, name in ((wv, "W"), (rv, "R")):
        scales = gate_scales(node, name, v.quant, h)
        blocks = split_gates(np.asarray(v.const)[0], h)
        ops += [ctx.constant(blocks[g], OperandType.tensor(Q8S, blocks[g].shape, scales[g])) for g in NNAPI_GATES]
    biases = _biases(node, rec, x_q.s, wv.quant)
    bias_ops = [ctx.constant(biases[g], OperandType.tensor(OperandCode.TENSOR_INT32, [h])) for g in NNAPI_GATES]
    no_peephole = omitted(ctx, OperandType.tensor(Q16S, [0], 1.0))
    no_projection = omitted(ctx, OperandType.tensor(Q8S, [0], 1.0))
    no_projection_bias = omitted(ctx, OperandType.tensor(OperandCode.TENSOR_INT32, [0]))
    h_type = ctx.make_type(Q8AS, [b, h], state_q)
    c_type = OperandType.tensor(Q16S, [b, h], 2.0 ** shift)
    params = ([ctx.float_scalar(0.0)] * 2 + [ctx.float_scalar(GATE_SCALE)] * 4
              + [ctx.int_scalar(-state_q.zp), ctx.float_scalar(state_q.s)])
    x_op, time_major = sequence_input(ctx, x, rec.layout)
    h_prev = ctx.constant(_initial_state(ctx, node.input(5), b, h, state_q.s, state_q.zp, np.int8), h_type)
    c_prev = ctx.constant(_initial_state(ctx, node.input(6), b, h, 2.0 ** shift, 0, np.int16), c_type)
    outputs = []
    for x_t in time_steps(ctx, x_op, time_major, t, b):
        outs = [ctx.temp(h_type), ctx.temp(c_type), ctx.temp(h_type)]
        inputs = ([x_t] + ops + [no_peephole] * 3 + bias_ops + [no_projection, no_projection_bias, h_prev, c_prev]
                  + [no_peephole] * 4 + params)
        ctx.add_op(OperationCode.QUANTIZED_LSTM, inputs, outs)
        h_prev, c_prev = outs[0], outs[1]
        outputs.append([outs[2]])
    y, y_h, _ = rec.outputs
    if y:
        bind_steps(ctx, rec, y, outputs, forced=state_q)
    if y_h:
        bind_states(ctx, rec, y_h, [h_prev], forced=state_q)
