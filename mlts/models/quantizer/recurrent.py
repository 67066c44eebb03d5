"""LSTM quantization for NNAPI's QUANTIZED_LSTM (signed 8-bit activations, 8-bit gate weights, 16-bit cell).

The QDQ form around each ONNX LSTM node (the contract the importer lowers to one QUANTIZED_LSTM
per time step):
- X: the input activation, quantized like any other (int8, calibrated);
- W [1, 4H, I] and R [1, 4H, H]: DequantizeLinear(int8, scale, zero point 0, axis=1), symmetric,
  one scale per gate block (the scale vector has 4H entries, constant over each gate's H rows),
  because QUANTIZED_LSTM takes one 8-bit weight tensor per gate, each with its own scale;
- B [1, 8H]: the float initializer, unchanged (the importer makes int32 gate biases of Wb + Rb at
  x_scale x the gate's W scale; the W scales are widened where that would overflow int32);
- Y and Y_h, where used: QuantizeLinear -> DequantizeLinear with one set of int8 parameters, the
  hidden state's range over every time step (so the per-step output state never saturates);
- Y_c: QuantizeLinear(int16, 2**n, 0), a power of two with n in [-15, -9] (QUANTIZED_LSTM's cell
  state), chosen from the cell state's largest magnitude over every time step; nothing reads it
  unless the graph does (then it is dequantized as well). int16 QuantizeLinear needs opset 21.

onnx.reference's LSTM returns the final cell state only, so calibration runs `lstm_states` (the same
recurrence, every step's h and c) on the LSTM's calibrated input.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from mlts.runtime import MltsError, ResultCode

from .graph import attributes
from .qparams import INT32, QParams, symmetric_scales

#: the opset int16 QuantizeLinear needs
LSTM_OPSET = 21
#: QUANTIZED_LSTM's cell state scale: 2**n for n in this range
CELL_SHIFT_RANGE = (-15, -9)
INT16_MAX = 32767
GATES = 4  # ONNX order: input, output, forget, cell
DEFAULT_ACTIVATIONS = ("sigmoid", "tanh", "tanh")
_CONSTANT_INPUTS = {1: "W", 2: "R", 3: "B", 5: "initial_h", 6: "initial_c"}


def _label(node) -> str:
    """The node's name, or its first named output."""
    return node.name or next((t for t in node.output if t), "")


def _bad(node, message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, f"LSTM {_label(node)!r}: {message}")


@dataclass(frozen=True)
class LstmPlan:
    """What the quantizer does with one LSTM node: its tensors and the range keys of its states."""

    node_label: str
    x: str
    w: str
    r: str
    b: str | None
    initial_h: str | None
    initial_c: str | None
    layout: int
    hidden_outputs: tuple[str, ...]  # Y / Y_h, where something reads them
    cell_output: str                 # Y_c (named by the quantizer if the node leaves it out)

    @property
    def hidden_key(self) -> str:
        """The calibration range of the hidden state over every step (shared by Y and Y_h)."""
        return f"{self.node_label}#hidden"

    @property
    def cell_key(self) -> str:
        """The calibration range of the cell state over every step."""
        return f"{self.node_label}#cell"


def cell_output_name(node) -> str:
    """The LSTM's Y_c tensor: its own name, or one the quantizer gives it."""
    if len(node.output) > 2 and node.output[2]:
        return node.output[2]
    return f"{_label(node)}_Y_c"


def plan_lstm(node, graph, scheme: str, used: set[str]) -> LstmPlan:
    """Checks that `node` is an LSTM QUANTIZED_LSTM can run and returns its plan.

    Supported: int8, one forward direction, layout 0 or 1, default activations, no peepholes, no
    clip, no input_forget, no sequence_lens; weights, bias and initial states (if any) initializers.
    """
    if scheme != "int8":
        raise _bad(node, f"NNAPI's QUANTIZED_LSTM is signed 8-bit: quantize this model with scheme 'int8', "
                         f"not {scheme!r}")
    attrs = attributes(node)
    initializers = {t.name for t in graph.initializer}
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction != "forward":
        raise _bad(node, f"direction {direction!r}: only one forward direction is supported")
    acts = tuple((a.decode() if isinstance(a, bytes) else a).lower() for a in attrs.get("activations", ()))
    if acts and acts != DEFAULT_ACTIVATIONS:
        raise _bad(node, f"activations {list(acts)}: only the default Sigmoid, Tanh, Tanh are supported")
    for name in ("activation_alpha", "activation_beta", "clip"):
        if name in attrs:
            raise _bad(node, f"the {name} attribute is not supported")
    if attrs.get("input_forget", 0):
        raise _bad(node, "input_forget (coupled gates) is not supported")
    layout = int(attrs.get("layout", 0))
    inputs = list(node.input) + [""] * (8 - len(node.input))
    if inputs[4]:
        raise _bad(node, "sequence_lens is not supported (every sequence runs all its steps)")
    if inputs[7]:
        raise _bad(node, "peepholes (input P) are not supported")
    for i, what in _CONSTANT_INPUTS.items():
        if inputs[i] and inputs[i] not in initializers:
            raise _bad(node, f"{what} ({inputs[i]!r}) must be an initializer")
    by_name = {t.name: t for t in graph.initializer}
    w_shape, r_shape = (tuple(int(d) for d in by_name[inputs[i]].dims) for i in (1, 2))
    hidden = r_shape[-1] if len(r_shape) == 3 else 0
    if len(w_shape) != 3 or w_shape[0] != 1 or w_shape[1] != GATES * hidden or r_shape != (1, GATES * hidden, hidden):
        raise _bad(node, f"W {list(w_shape)} and R {list(r_shape)} are not [1, 4H, I] and [1, 4H, H]")
    if int(attrs.get("hidden_size", hidden)) != hidden:
        raise _bad(node, f"hidden_size {attrs['hidden_size']} differs from R's {hidden}")
    hidden_outputs = tuple(t for t in node.output[:2] if t and t in used)
    if not hidden_outputs:
        raise _bad(node, "neither Y nor Y_h is used: nothing carries the hidden state's quantization")
    return LstmPlan(_label(node), inputs[0], inputs[1], inputs[2], inputs[3] or None, inputs[5] or None,
                    inputs[6] or None, layout, hidden_outputs, cell_output_name(node))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def lstm_states(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None = None,
                initial_h: np.ndarray | None = None, initial_c: np.ndarray | None = None, *,
                layout: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every step's hidden and cell state of a forward ONNX LSTM (default activations, no peepholes).

    x: [T, N, I] (layout 0) or [N, T, I] (layout 1); w [1, 4H, I], r [1, 4H, H], b [1, 8H], initial
    states [1, N, H] (layout 0) or [N, 1, H] (layout 1). Returns (h, c), each [T, N, H].
    """
    x = np.asarray(x, np.float32)
    if layout:
        x = x.transpose(1, 0, 2)
    steps, batch, _ = x.shape
    w = np.asarray(w, np.float32)[0]
    r = np.asarray(r, np.float32)[0]
    hidden = r.shape[1]
    bias = np.zeros(GATES * hidden, np.float32) if b is None else np.asarray(b, np.float32).reshape(2, -1).sum(0)

    def state(value) -> np.ndarray:
        if value is None:
            return np.zeros((batch, hidden), np.float32)
        value = np.asarray(value, np.float32)
        return np.broadcast_to(value[:, 0] if layout else value[0], (batch, hidden))

    h, c = state(initial_h), state(initial_c)
    hs = np.empty((steps, batch, hidden), np.float32)
    cs = np.empty((steps, batch, hidden), np.float32)
    projected = x @ w.T + bias  # [T, N, 4H]: the input part of every step at once
    for t in range(steps):
        i, o, f, g = np.split(projected[t] + h @ r.T, GATES, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        hs[t], cs[t] = h, c
    return hs, cs


class LstmStateStatistic:
    """Calibration of one LSTM's states: every step's h and c, computed from its input X's values."""

    def __init__(self, plan: LstmPlan, graph) -> None:
        from onnx import numpy_helper
        values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.plan = plan
        self.sources = (plan.x,)
        self.keys = (plan.hidden_key, plan.cell_key)
        self._constants = {k: (values[v] if v else None) for k, v in
                           (("w", plan.w), ("r", plan.r), ("b", plan.b), ("initial_h", plan.initial_h),
                            ("initial_c", plan.initial_c))}

    def compute(self, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """{hidden key: every h, cell key: every c} for a batch whose X is values[plan.x]."""
        h, c = lstm_states(values[self.plan.x], layout=self.plan.layout, **self._constants)
        # Given initial states are states too (absent ones are 0, which every range includes).
        initial_h, initial_c = self._constants["initial_h"], self._constants["initial_c"]
        return {self.plan.hidden_key: h if initial_h is None else np.append(h, initial_h),
                self.plan.cell_key: c if initial_c is None else np.append(c, initial_c)}


def cell_qparams(lo: float, hi: float) -> QParams:
    """int16 symmetric parameters of the cell state: scale 2**ceil(log2(max|c| / 32767)) in [2**-15, 2**-9].

    E.g. max|c| = 3.2 -> 2**-13 (range +-4); anything below 1 -> 2**-15; above ~64 saturates at 2**-9.
    """
    amax = max(abs(float(lo)), abs(float(hi)))
    if not np.isfinite(amax):
        raise ValueError(f"cannot quantize a non-finite cell state range [{lo}, {hi}]")
    low, high = CELL_SHIFT_RANGE
    shift = int(np.ceil(np.log2(amax / INT16_MAX))) if amax > 0 else low
    shift = min(max(shift, low), high)
    return QParams(np.array(2.0 ** shift, np.float32), np.array(0, np.int16))


def gate_weight_params(w: np.ndarray, hidden: int) -> QParams:
    """Symmetric int8 parameters of W or R [1, 4H, K]: one scale per gate block, repeated over its H rows."""
    amax = np.abs(np.asarray(w, np.float32).reshape(GATES, hidden, -1)).max(axis=(1, 2))
    scales = np.repeat(symmetric_scales(amax), hidden)
    return QParams(scales, np.zeros(scales.shape, np.int8), 1)


def fit_gate_bias(wq: QParams, b: np.ndarray | None, x_scale: np.float32, hidden: int) -> QParams:
    """Widens a gate's W scale where its int32 bias (Wb + Rb at x_scale x W scale) would overflow."""
    if b is None:
        return wq
    combined = np.abs(np.asarray(b, np.float64).reshape(2, GATES, hidden).sum(axis=0)).max(axis=1)
    need = (combined / (float(x_scale) * (float(INT32.max) - 1.0))).astype(np.float32) * np.float32(1.0001)
    block = wq.scale.reshape(GATES, hidden)[:, 0]
    if np.all(need <= block):
        return wq
    scales = np.repeat(np.maximum(block, need), hidden).astype(np.float32)
    return QParams(scales, wq.zero_point, wq.axis)


def lstm_inputs(builder, node, inputs: list[str], params: Mapping[str, QParams]) -> list[str]:
    """The LSTM's inputs with W and R read through per-gate DequantizeLinear (B and the states unchanged)."""
    from onnx import numpy_helper
    x_name = node.input[0]
    if x_name not in params:
        raise _bad(node, f"its input {x_name!r} is not quantized")
    x_scale = np.float32(params[x_name].scale)
    inputs = list(inputs)
    b_name = node.input[3] if len(node.input) > 3 and node.input[3] else None
    b = numpy_helper.to_array(builder.initializers[b_name]) if b_name else None
    hidden = int(builder.initializers[node.input[2]].dims[-1])
    for i in (1, 2):
        name = node.input[i]
        w = numpy_helper.to_array(builder.initializers[name]).astype(np.float32)
        wq = gate_weight_params(w, hidden)
        if i == 1:
            wq = fit_gate_bias(wq, b, x_scale, hidden)
        inputs[i] = builder.weights(name, w, wq)
    return inputs


def lstm_outputs(node) -> list[str]:
    """The LSTM's outputs with Y_c named (the quantizer records the cell state's scale on it)."""
    outputs = list(node.output) + [""] * (3 - len(node.output))
    outputs[2] = cell_output_name(node)
    return outputs

