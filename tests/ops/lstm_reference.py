"""The LSTM cell of NNAPI's documentation in plain numpy, and operand lists for the LSTM family's tests.

Weights are a dict keyed by NNAPI's symbols: "x_i", "x_f", "x_c", "x_o" (input-to-gate W_x*), "h_*"
(recurrent W_h*), "c_i", "c_f", "c_o" (peephole W_c*), "b_*" (biases), "proj" and "proj_b" (projection),
"ln_*" (layer normalization) and "aux_*" (auxiliary input weights); a missing key is an omitted input.
The reference follows the equations of NeuralNetworks.h (ANEURALNETWORKS_LSTM) in float64:
  i = sigma(W_xi x + W_hi h + W_ci C + b_i)      (CIFG: i = 1 - f)
  f = sigma(W_xf x + W_hf h + W_cf C + b_f)
  C' = clip(f C + i g(W_xc x + W_hc h + b_c), t_cell)
  o = sigma(W_xo x + W_ho h + W_co C' + b_o)
  h' = clip(W_proj (o g(C')) + b_proj, t_proj), or o g(C') without projection
with layer normalization (Ba et al., section 3.1) replacing each "... + b" by LN * normalized(...) + b.
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import OperandCode, OperandType

GATES = "ifco"
#: the 17 per-cell tensors in NNAPI's input order (LSTM inputs 1-17)
CELL_KEYS = ["x_i", "x_f", "x_c", "x_o", "h_i", "h_f", "h_c", "h_o", "c_i", "c_f", "c_o",
             "b_i", "b_f", "b_c", "b_o", "proj", "proj_b"]
LN_KEYS = ["ln_i", "ln_f", "ln_c", "ln_o"]
AUX_KEYS = ["aux_i", "aux_f", "aux_c", "aux_o"]
ACT = {0: lambda v: v, 1: lambda v: np.maximum(v, 0), 3: lambda v: np.clip(v, 0, 6), 4: np.tanh,
       6: lambda v: 1 / (1 + np.exp(-v))}
T = OperandType.tensor
F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
SCALAR_OF = {F32: OperandCode.FLOAT32, F16: OperandCode.FLOAT16}
INT32, BOOL = OperandType.scalar(OperandCode.INT32), OperandType.scalar(OperandCode.BOOL)


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def make_weights(rng, n_input, n_cell, n_output=None, *, cifg=False, peephole=False, projection=False,
                 projection_bias=False, layer_norm=False, n_aux=None):
    """Random weights of one cell; n_output defaults to n_cell (no projection)."""
    n_output = n_output or n_cell
    u = lambda *shape: rng.uniform(-0.6, 0.6, shape)  # noqa: E731
    w = {}
    for g in GATES:
        if cifg and g == "i":
            continue
        w[f"x_{g}"], w[f"h_{g}"], w[f"b_{g}"] = u(n_cell, n_input), u(n_cell, n_output), u(n_cell)
        if peephole and g != "c":
            w[f"c_{g}"] = u(n_cell)
        if layer_norm:
            w[f"ln_{g}"] = rng.uniform(0.2, 1.0, n_cell)
        if n_aux is not None:
            w[f"aux_{g}"] = u(n_cell, n_aux)
    if projection:
        w["proj"] = u(n_output, n_cell)
        if projection_bias:
            w["proj_b"] = u(n_output)
    return w


def reference_step(w, x, h, c, *, activation=4, cell_clip=0.0, proj_clip=0.0, aux=None):
    """One step on [batch, ...] rows in float64: (h', C')."""
    x, h, c = (np.asarray(a, np.float64) for a in (x, h, c))
    g = ACT[activation]

    def gate(k, cell_state):
        z = x @ w[f"x_{k}"].T + h @ w[f"h_{k}"].T
        if aux is not None and f"aux_{k}" in w:
            z = z + np.asarray(aux, np.float64) @ w[f"aux_{k}"].T
        if f"c_{k}" in w and cell_state is not None:
            z = z + w[f"c_{k}"] * cell_state
        if "ln_o" in w:
            mu = z.mean(axis=1, keepdims=True)
            sd = np.sqrt(((z - mu) ** 2).mean(axis=1, keepdims=True) + 1e-8)
            return w[f"ln_{k}"] * (z - mu) / sd + w[f"b_{k}"]
        return z + w[f"b_{k}"]

    f = sigmoid(gate("f", c))
    i = 1 - f if "x_i" not in w else sigmoid(gate("i", c))
    c_new = f * c + i * g(gate("c", None))
    if cell_clip > 0:
        c_new = np.clip(c_new, -cell_clip, cell_clip)
    o = sigmoid(gate("o", c_new))
    h_new = o * g(c_new)
    if "proj" in w:
        h_new = h_new @ w["proj"].T + w.get("proj_b", 0)
        if proj_clip > 0:
            h_new = np.clip(h_new, -proj_clip, proj_clip)
    return h_new, c_new


def reference_sequence(w, xs, h, c, *, reverse=False, aux=None, **params):
    """Time-major xs [time, batch, input]: (outputs [time, batch, output], h, C)."""
    outputs = [None] * len(xs)
    for t in (reversed(range(len(xs))) if reverse else range(len(xs))):
        h, c = reference_step(w, xs[t], h, c, aux=None if aux is None else aux[t], **params)
        outputs[t] = h
    return np.stack(outputs), h, c


def onnx_lstm_inputs(w):
    """W, R, B, P of an ONNX LSTM node (one direction; gate order i, o, f, c; peepholes i, o, f)."""
    order = "iofc"
    W = np.concatenate([w[f"x_{k}"] for k in order])[None]
    R = np.concatenate([w[f"h_{k}"] for k in order])[None]
    B = np.concatenate([np.concatenate([w[f"b_{k}"] for k in order]), np.zeros(4 * len(w["b_f"]))])[None]
    P = np.concatenate([w.get(f"c_{k}", np.zeros(len(w["b_f"]))) for k in "iof"])[None]
    return W, R, B, P


def tensor_operands(w, keys, code, *, const=False):
    """(type, value) pairs for `keys` of w: model inputs (Const-wrapped when `const`), None when omitted."""
    from support.op_runner import Const

    dtype = np.float16 if code == F16 else np.float32
    out = []
    for k in keys:
        if k not in w:
            out.append((T(code, [0]), None))
        else:
            a = np.asarray(w[k], dtype)
            out.append((T(code, a.shape), Const(a) if const else a))
    return out


def scalar_operands(code, activation, cell_clip, proj_clip):
    s = OperandType.scalar(SCALAR_OF[code])
    return [(INT32, activation), (s, cell_clip), (s, proj_clip)]
