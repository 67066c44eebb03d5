"""Shapes and layouts shared by the LSTM and RNN converters: the parsed node, the input sequence, the
initial states, and the binding of Y / Y_h / Y_c in ONNX's shapes.

ONNX holds X as [T, B, I] (layout 0) or [B, T, I] (layout 1), Y as [T, D, B, H] or [B, T, D, H] and
the final states as [D, B, H] or [B, D, H] (D directions). NNAPI's sequence operations take either
time-major or batch-major inputs (a flag), write [T, B, D*H] or [B, T, D*H] (the directions side by
side on the last axis) and give each direction's state as [B, H]. The sequence is read in whichever
of the two orders its operand already holds (a Transpose(1, 0, 2) in front, as torch's batch_first
export writes, costs nothing), and the outputs are bound in the order produced: a RESHAPE to rank 4 or
3 and a layout permutation, so a TRANSPOSE is only emitted where a consumer needs another order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from mlts.runtime import OperandCode, OperandType, OperationCode

from ..ir import Graph, Node, Quant
from .base import ints

DIRECTIONS = {"forward": ("forward",), "reverse": ("reverse",), "bidirectional": ("forward", "reverse")}
#: ONNX's per-gate blocks of W, R and B: LSTM (i, o, f, c); NNAPI's order is (input, forget, cell, output)
LSTM_ONNX_GATES = "iofc"
NNAPI_GATES = "ifco"


@dataclass
class Recurrence:
    """An LSTM or RNN node's attributes, constants and shapes, checked."""

    node: Node
    gates: int                   # 4 (LSTM) or 1 (RNN)
    directions: tuple[str, ...]  # ("forward",), ("reverse",) or ("forward", "reverse")
    layout: int                  # 0: [T, B, ...]; 1: [B, T, ...]
    hidden: int
    steps: int | None            # T
    batch: int | None
    input_size: int
    w: np.ndarray                # [D, gates*H, I] as stored (float, or 8-bit integers in the quantized form)
    r: np.ndarray                # [D, gates*H, H]
    bias: np.ndarray | None      # [D, 2*gates*H] as stored (Wb then Rb), None when absent
    peepholes: np.ndarray | None  # LSTM: [D, 3H] (i, o, f)
    activations: list[list[str]]  # per direction, lower case
    outputs: tuple[str | None, str | None, str | None]  # Y, Y_h, Y_c: None when absent or unused

    @property
    def num_directions(self) -> int:
        return len(self.directions)

    def gate_bias(self, d: int) -> np.ndarray:
        """Wb + Rb of direction d (float64, [gates*H]); zeros when B is absent."""
        n = self.gates * self.hidden
        if self.bias is None:
            return np.zeros(n)
        b = np.asarray(self.bias[d], np.float64)
        return b[:n] + b[n:]


def parse(node: Node, graph: Graph, fail: Callable[[str], Exception], gates: int) -> Recurrence:
    """The checked attributes and constants of an LSTM (gates=4) or RNN (gates=1) node; `fail` builds the
    error for anything NNAPI cannot express."""
    direction = node.attr("direction", "forward")
    if direction not in DIRECTIONS:
        raise fail(f"unknown direction {direction!r}")
    directions = DIRECTIONS[direction]
    layout = int(node.attr("layout", 0)) if node.opset >= 14 else 0
    if layout not in (0, 1):
        raise fail(f"layout {layout} is not 0 or 1")
    if node.attr("clip") is not None:
        raise fail(f"clip={node.attr('clip')} is not supported: ONNX clips every gate's input before its "
                   "activation, which no NNAPI recurrent operation does (NNAPI's cell clip bounds the LSTM cell "
                   "state instead)")
    consts = []
    for i, what in ((1, "W"), (2, "R")):
        value = graph.const(node.input(i))
        if value is None:
            raise fail(f"input {i} ({what}) must be a constant: NNAPI takes the weights as separate per-gate "
                       "tensors, split at import")
        consts.append(np.asarray(value))
    w, r = consts
    optional = {}
    for i, what in ((3, "B"), (7, "P")):
        name = node.input(i)
        if name is not None and graph.const(name) is None:
            raise fail(f"input {i} ({what}) must be a constant")
        optional[what] = None if name is None else np.asarray(graph.const(name))
    d = len(directions)
    if w.ndim != 3 or r.ndim != 3 or w.shape[0] != d or r.shape[0] != d or r.shape[1] % gates:
        raise fail(f"W {list(w.shape)} and R {list(r.shape)} do not fit {d} direction(s)")
    hidden = r.shape[2]
    if node.attr("hidden_size") is not None and int(node.attr("hidden_size")) != hidden:
        raise fail(f"hidden_size {node.attr('hidden_size')} does not match R {list(r.shape)}")
    if r.shape[1] != gates * hidden or w.shape[1] != gates * hidden:
        raise fail(f"W {list(w.shape)} and R {list(r.shape)} must have {gates} x hidden_size rows")
    b, p = optional["B"], optional["P"]
    if b is not None and tuple(b.shape) != (d, 2 * gates * hidden):
        raise fail(f"B has shape {list(b.shape)}, expected {[d, 2 * gates * hidden]}")
    if p is not None and tuple(p.shape) != (d, 3 * hidden):
        raise fail(f"P has shape {list(p.shape)}, expected {[d, 3 * hidden]}")
    x_shape = graph.value(node.inputs[0]).shape
    if x_shape is None or len(x_shape) != 3:
        raise fail(f"X must have rank 3, got shape {x_shape}")
    steps, batch = (x_shape[0], x_shape[1]) if layout == 0 else (x_shape[1], x_shape[0])
    if x_shape[2] is not None and x_shape[2] != w.shape[2]:
        raise fail(f"X has {x_shape[2]} features but W {list(w.shape)} expects {w.shape[2]}")
    _check_sequence_lens(node, graph, fail, steps)
    return Recurrence(node, gates, directions, layout, hidden, steps, batch, w.shape[2], w, r, b, p,
                      _activations(node, fail, gates, d), _used_outputs(node, graph))


def _check_sequence_lens(node: Node, graph: Graph, fail, steps: int | None) -> None:
    """sequence_lens is accepted when absent or a constant equal to the sequence length everywhere (NNAPI's
    sequence operations have no per-batch lengths)."""
    name = node.input(4)
    if name is None:
        return
    lens = graph.const(name)
    if lens is None:
        raise fail("sequence_lens must be absent or a constant equal to the sequence length: NNAPI has no "
                   "per-sequence lengths")
    if steps is None or not np.all(np.asarray(lens) == steps):
        raise fail(f"sequence_lens {ints(lens, [])} differ from the sequence length "
                   f"{'(unknown)' if steps is None else steps}: NNAPI has no per-sequence lengths")


def _activations(node: Node, fail, gates: int, directions: int) -> list[list[str]]:
    per = 3 if gates == 4 else 1
    default = ["sigmoid", "tanh", "tanh"] if gates == 4 else ["tanh"]
    names = node.attr("activations")
    if names is None:
        return [list(default) for _ in range(directions)]
    names = [str(n).lower() for n in names]
    if len(names) != per * directions:
        raise fail(f"activations {names} must list {per} per direction ({directions} direction(s))")
    return [names[k * per:(k + 1) * per] for k in range(directions)]


def _used_outputs(node: Node, graph: Graph) -> tuple:
    consumers = graph.consumers()
    used = [o if o and (o in graph.outputs or consumers.get(o)) else None for o in node.outputs[:3]]
    return tuple(used + [None] * (3 - len(used)))


def split_gates(a: np.ndarray, hidden: int, order_from: str = LSTM_ONNX_GATES) -> dict[str, np.ndarray]:
    """The per-gate blocks of a [gates*H, ...] array (ONNX's order `order_from`), by gate letter."""
    return {g: a[k * hidden:(k + 1) * hidden] for k, g in enumerate(order_from)}


# -- the input sequence --------------------------------------------------------------------------------
def sequence_input(ctx, x: str, layout: int) -> tuple[int, bool]:
    """(operand, time_major) of X read without moving data when its operand holds it time-major or
    batch-major; any other held order is transposed to ONNX's."""
    op, perm = ctx.native(x)
    if tuple(perm) == (0, 1, 2):
        return op, layout == 0
    if tuple(perm) == (1, 0, 2):
        return op, layout != 0
    return ctx.operand(x), layout == 0


def time_steps(ctx, seq: int, time_major: bool, steps: int, batch: int | None) -> list[int]:
    """The T operands [B, size] of a 3-D sequence operand (SPLIT on the time axis, RESHAPE each step)."""
    t = ctx.operand_type(seq)
    size = t.dimensions[2]
    step_type = t.with_dimensions([batch or 0, size])
    if steps == 1:
        return [ctx.reshape_to(seq, [batch, size], out_type=step_type)]
    part = t.with_dimensions([1, batch or 0, size] if time_major else [batch or 0, 1, size])
    parts = [ctx.temp(part) for _ in range(steps)]
    ctx.add_op(OperationCode.SPLIT, [seq, ctx.int_scalar(0 if time_major else 1), ctx.int_scalar(steps)], parts)
    return [ctx.reshape_to(p, [batch, size], out_type=step_type) for p in parts]


def reverse_time(ctx, seq: int, time_major: bool) -> int:
    """The sequence operand reversed along its time axis (REVERSE)."""
    return ctx.op(OperationCode.REVERSE, [seq, ctx.int_tensor([0 if time_major else 1])], ctx.operand_type(seq))


# -- initial states ----------------------------------------------------------------------------------
def state_inputs(ctx, rec: Recurrence, name: str | None, t: OperandType) -> list[int]:
    """One [B, H] operand per direction of initial_h / initial_c ([D, B, H], or [B, D, H] with layout 1):
    constants sliced at import, computed tensors SPLIT on the direction axis; absent: zeros."""
    d, h, batch = rec.num_directions, rec.hidden, rec.batch
    dims = [batch or 0, h]
    if name is None or ctx.is_const(name):
        if name is None:
            if batch is None:
                raise ctx.fail("an absent initial state needs a static batch size (NNAPI takes the states as "
                               "tensors of known size)")
            arr = np.zeros((d, batch, h))
        else:
            arr = np.asarray(ctx.value(name).const)
            arr = arr if rec.layout == 0 else np.swapaxes(arr, 0, 1)
        return [ctx.constant(np.ascontiguousarray(arr[k]), t.with_dimensions(arr.shape[1:])) for k in range(d)]
    op = ctx.operand(name)
    if d == 1:
        return [ctx.reshape_to(op, [batch, h], out_type=t.with_dimensions(dims))]
    axis = 0 if rec.layout == 0 else 1
    part = t.with_dimensions([1, batch or 0, h] if axis == 0 else [batch or 0, 1, h])
    parts = [ctx.temp(part) for _ in range(d)]
    ctx.add_op(OperationCode.SPLIT, [op, ctx.int_scalar(axis), ctx.int_scalar(d)], parts)
    return [ctx.reshape_to(p, [batch, h], out_type=t.with_dimensions(dims)) for p in parts]


# -- outputs -----------------------------------------------------------------------------------------
def _bind_reshaped(ctx, name: str, src: int, nn_axes: str, onnx_axes: str, sizes: dict,
                   forced: Quant | None = None) -> None:
    """RESHAPE `src` to the axes `nn_axes` (letters, sizes from `sizes`, None unknown) and bind it as ONNX
    tensor `name` whose axes are `onnx_axes` (`forced`: the quantization `src` has, see Emitter.output)."""
    perm = tuple(onnx_axes.index(a) for a in nn_axes)
    ctx.reshape_to(src, [sizes[a] for a in nn_axes], out=ctx.output(name, perm, forced=forced))


def bind_sequence(ctx, rec: Recurrence, name: str, src: int, time_major: bool, forced: Quant | None = None) -> None:
    """Y from the NNAPI sequence output [T, B, D*H] (time_major) or [B, T, D*H]."""
    onnx_axes = "TDBH" if rec.layout == 0 else "BTDH"
    nn_axes = "TBDH" if time_major else "BTDH"
    if rec.num_directions == 1 and rec.layout == 0 and time_major:
        nn_axes = "TDBH"  # the size-1 direction axis where ONNX has it: the plain identity binding
    sizes = {"T": rec.steps, "B": rec.batch, "D": rec.num_directions, "H": rec.hidden}
    _bind_reshaped(ctx, name, src, nn_axes, onnx_axes, sizes, forced)


def bind_steps(ctx, rec: Recurrence, name: str, steps: Sequence[Sequence[int]], forced: Quant | None = None) -> None:
    """Y from per-step [B, H] operands (steps[t][d]): one CONCATENATION in ONNX's element order (time, then
    direction, then batch rows for layout 0; per batch row time, direction, units for layout 1), then RESHAPE."""
    flat = [op for per_time in steps for op in per_time]
    axis = 0 if rec.layout == 0 else 1
    joined = _concat(ctx, flat, axis)
    sizes = {"T": rec.steps, "B": rec.batch, "D": rec.num_directions, "H": rec.hidden}
    axes = "TDBH" if rec.layout == 0 else "BTDH"
    _bind_reshaped(ctx, name, joined, axes, axes, sizes, forced)


def bind_states(ctx, rec: Recurrence, name: str, states: Sequence[int], forced: Quant | None = None) -> None:
    """Y_h or Y_c from each direction's final state [B, H]: [D, B, H] (layout 0) or [B, D, H] (layout 1)."""
    axes = "DBH" if rec.layout == 0 else "BDH"
    joined = _concat(ctx, list(states), 0 if rec.layout == 0 else 1)
    sizes = {"B": rec.batch, "D": rec.num_directions, "H": rec.hidden}
    _bind_reshaped(ctx, name, joined, axes, axes, sizes, forced)


def _concat(ctx, ops: list[int], axis: int) -> int:
    """CONCATENATION of same-typed 2-D operands along `axis` (the operand itself when alone)."""
    if len(ops) == 1:
        return ops[0]
    t = ctx.operand_type(ops[0])
    dims = list(t.dimensions)
    dims[axis] = dims[axis] * len(ops)
    return ctx.op(OperationCode.CONCATENATION, ops + [ctx.int_scalar(axis)], t.with_dimensions(dims))


def omitted(ctx, t: OperandType) -> int:
    """An omitted optional operand (NO_VALUE) of type `t`."""
    index = ctx.add_operand(t)
    ctx.model.set_operand_value(index, None)
    return index


def float_code(ctx, x_op: int) -> OperandCode:
    code = ctx.operand_type(x_op).code
    if code not in (OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16):
        raise ctx.fail(f"X has type {code.name}: NNAPI's recurrent operations take float32 or float16 (or int8 "
                       "in the quantized LSTM form)")
    return code
