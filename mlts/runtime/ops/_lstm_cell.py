"""The LSTM cell shared by LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM (a private
helper module, not an operation): where a cell's tensors sit in each operation's input list, NNAPI's
checks of which of them may be omitted and of their shapes, and the float kernel.

One time step, gate by gate in NNAPI's order (input i, forget f, cell g, output o), as NNAPI's reference
cell computes it:

    pre_k = W_xk x_t (+ W_auxk aux_t) + W_hk h_{t-1} (+ W_ck C_{t-1} for k in i, f: peephole)
    gate_k = pre_k + b_k, or with layer normalization LN_k * normalize(pre_k) + b_k
    i = sigmoid(gate_i) (CIFG: no input gate, i = 1 - f), f = sigmoid(gate_f), g = act(gate_g)
    C_t = clip(f * C_{t-1} + i * g, cell_clip)
    o = sigmoid(gate_o), where pre_o takes the peephole W_co C_t of the *new* cell state
    h_t = clip(W_proj (o * act(C_t)) + b_proj, proj_clip) with a projection, else o * act(C_t)

normalize() is the mean/standard-deviation normalization of each batch row over the cells (variance
+ 1e-8 under the square root, as TFLite's MeanStddevNormalization). A clip of 0 means no clipping.
A sequence carries (h, C) from step to step; float16 operands are computed in float32 throughout the
sequence and rounded once at the end, as NNAPI's float16 path does; float32 ones in float64.

The activation codes are the documented ones (0 None, 1 Relu, 3 Relu6, 4 Tanh, 6 Sigmoid); others are
refused. With None, act is the identity in both places, as the equations say (NNAPI's reference, whose
TFLite helper writes nothing for None, leaves h = o * g there instead of o * C_t).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from ..enums import OperandCode
from ._fp_errors import ignoring_fp_errors
from .base import OperationContext
from .common import FLOAT_SCALAR_OF, FLOAT_TYPES

GATES = ("input", "forget", "cell", "output")
LAYER_NORM_EPSILON = 1e-8


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


#: the cell activation g (NNAPI documents 0 None, 1 Relu, 3 Relu6, 4 Tanh, 6 Sigmoid)
ACTIVATIONS: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    0: lambda x: x,
    1: lambda x: np.maximum(x, 0.0),
    3: lambda x: np.minimum(np.maximum(x, 0.0), 6.0),
    4: np.tanh,
    6: _sigmoid,
}


# -- where a cell's tensors are -------------------------------------------------------------------------
@dataclass(frozen=True)
class CellInputs:
    """The input indices of one cell's tensors (gate tuples in the order input, forget, cell, output;
    peepholes: input, forget, output), and the words that name them in errors."""

    input_to: tuple[int, int, int, int]
    recurrent_to: tuple[int, int, int, int]
    cell_to: tuple[int, int, int]
    bias: tuple[int, int, int, int]
    projection_weights: int
    projection_bias: int
    output_state_in: int
    cell_state_in: int
    layer_norm: tuple[int, int, int, int] | None = None
    aux_input_to: tuple[int, int, int, int] | None = None
    prefix: str = ""

    @staticmethod
    def at(first: int, states: tuple[int, int], layer_norm_first: int | None = None,
           aux_first: int | None = None, prefix: str = "") -> "CellInputs":
        """NNAPI's layout: 17 consecutive tensors from `first` (4 input-to, 4 recurrent-to, 3 peephole
        weights, 4 biases, projection weights and bias), the states, 4 layer norm and 4 aux weights."""
        run = lambda start, n: tuple(range(start, start + n))  # noqa: E731
        return CellInputs(run(first, 4), run(first + 4, 4), run(first + 8, 3), run(first + 11, 4),
                          first + 15, first + 16, states[0], states[1],
                          None if layer_norm_first is None else run(layer_norm_first, 4),
                          None if aux_first is None else run(aux_first, 4), prefix)

    @property
    def required(self) -> tuple[int, ...]:
        return (*self.input_to[1:], *self.recurrent_to[1:], *self.bias[1:], self.output_state_in,
                self.cell_state_in)

    @property
    def tensors(self) -> tuple[int, ...]:
        return (*self.input_to, *self.recurrent_to, *self.cell_to, *self.bias, self.projection_weights,
                self.projection_bias, self.output_state_in, self.cell_state_in, *(self.layer_norm or ()),
                *(self.aux_input_to or ()))

    @property
    def optional(self) -> frozenset[int]:
        return frozenset(self.tensors) - frozenset(self.required)

    def name(self, i: int) -> str:
        """NNAPI's name of input `i` of this cell ("the forward input-to-forget weights", ...)."""
        peepholes = ("input", "forget", "output")
        names = {**{j: f"input-to-{g} weights" for j, g in zip(self.input_to, GATES)},
                 **{j: f"recurrent-to-{g} weights" for j, g in zip(self.recurrent_to, GATES)},
                 **{j: f"cell-to-{g} weights" for j, g in zip(self.cell_to, peepholes)},
                 **{j: f"{g} gate bias" for j, g in zip(self.bias, GATES)},
                 **{j: f"{g} layer normalization weights" for j, g in zip(self.layer_norm or (), GATES)},
                 **{j: f"auxiliary input-to-{g} weights" for j, g in zip(self.aux_input_to or (), GATES)},
                 self.projection_weights: "projection weights", self.projection_bias: "projection bias",
                 self.output_state_in: "output state (in)", self.cell_state_in: "cell state (in)"}
        return f"the {self.prefix}{names.get(i, f'input {i}')}"


# -- validation ---------------------------------------------------------------------------------------------
def check_types(ctx: OperationContext, tensors: Iterable[int], optional: Iterable[int], *, activation: int,
                clips: tuple[int, int], bools: Iterable[int] = ()) -> OperandCode:
    """NNAPI's operand types: every tensor (input 0's type, FLOAT32 or FLOAT16; `optional` ones may be
    omitted), an INT32 activation, clips of the matching float scalar type, BOOL flags, and every output
    of input 0's type. Returns that type."""
    ctx.check_input_type(0, FLOAT_TYPES)
    code = ctx.input_code(0)
    optional = frozenset(optional)
    for i in tensors:
        ctx.check_input_type(i, code, optional=i in optional)
    ctx.check_input_type(activation, OperandCode.INT32)
    for i in clips:
        ctx.check_input_type(i, FLOAT_SCALAR_OF[code])
    for i in bools:
        ctx.check_input_type(i, OperandCode.BOOL)
    for k in range(ctx.num_outputs):
        ctx.check_output_type(k, code)
    return code


@dataclass(frozen=True)
class CellParams:
    activation: int
    cell_clip: float
    proj_clip: float


def check_params(ctx: OperationContext, activation: int, cell_clip: int, proj_clip: int) -> CellParams | None:
    """The activation (a documented code) and the clips (>= 0); checked where known, None while any
    is unknown (at build time, a value that is not a constant)."""
    read = ctx.scalar_if_known if ctx.is_static else ctx.scalar  # at run time: every one required
    values = [read(i) for i in (activation, cell_clip, proj_clip)]
    if values[0] is not None:
        ctx.check(values[0] in ACTIVATIONS, f"activation {values[0]} is not one of NNAPI's LSTM activations "
                  f"(0 None, 1 Relu, 3 Relu6, 4 Tanh, 6 Sigmoid)", input=activation)
    for i, what, v in ((cell_clip, "cell", values[1]), (proj_clip, "projection", values[2])):
        if v is not None:
            ctx.check(v >= 0, f"the {what} clipping threshold must be >= 0 (0: no clipping), got {v}", input=i)
    if any(v is None for v in values):
        return None
    return CellParams(int(values[0]), float(values[1]), float(values[2]))


def presence(ctx: OperationContext, i: int) -> bool | None:
    """Whether input `i` has a value: known when omitted, when a constant, and at run time; None at build
    time for any other operand (a model input may still be omitted when the model runs)."""
    if ctx.is_omitted(i):
        return False
    if not ctx.is_static or ctx.value(i) is not None:
        return True
    return None


def dimension(ctx: OperationContext, i: int, axis: int) -> int | None:
    """Dimension `axis` of input `i`; None when omitted, of unknown rank or size, or of a smaller rank."""
    t = ctx.input_type(i)
    if t is None or t.dimensions is None or axis >= len(t.dimensions):
        return None
    d = t.dimensions[axis]
    return None if ctx.is_static and d == 0 else d


def expect_shape(ctx: OperationContext, i: int, expected: tuple[int | None, ...], name: str) -> None:
    """Input `i` (when its type is known) has len(expected) dimensions, each equal to the expected one
    wherever both are known (None, or 0 at build time: unknown)."""
    t = ctx.input_type(i)
    if t is None or t.dimensions is None:
        return
    dims = t.dimensions
    ctx.check(len(dims) == len(expected), f"{name} must have rank {len(expected)}, got rank {len(dims)}", input=i)
    for d, e in zip(dims, expected):
        if e is not None and not (ctx.is_static and d == 0) and d != e:
            shown = ", ".join("?" if x is None else str(x) for x in expected)
            raise ctx.fail(f"{name} has dimensions {list(dims)}, expected [{shown}]", input=i)


def all_or_none(ctx: OperationContext, has: dict[int, bool | None], indices: Iterable[int], what: str,
                names: Callable[[int], str]) -> None:
    """Inputs that must all have values or all be omitted (unknown presences are not held against it)."""
    indices = list(indices)
    known = [has[i] for i in indices if has[i] is not None]
    if True in known and False in known:
        culprit = next(i for i in indices if has[i] is False)
        raise ctx.fail(f"{what} must all have values or all be omitted, but {names(culprit)} has no value",
                       input=culprit)


@dataclass(frozen=True)
class CellConfig:
    """What shape inference needs of a checked cell (None: not known yet)."""

    n_cell: int | None
    n_output: int | None
    cifg: bool | None


def check_cell(ctx: OperationContext, cell: CellInputs, n_input: int | None, n_batch: int | None,
               n_aux_input: int | None = None) -> CellConfig:
    """NNAPI's checks of one cell: required tensors present, every present tensor of its documented
    shape, and the optional groups consistent (CIFG: input-to-input and recurrent-to-input weights and
    the input gate bias all omitted; peepholes all or none, the input one absent under CIFG; projection
    bias only with projection weights; layer normalization all or none, the input one absent under
    CIFG). Aux weights are checked for shape only (BIDIRECTIONAL_SEQUENCE_LSTM checks their presence)."""
    for i in cell.required:
        ctx.check(not ctx.is_omitted(i), f"{cell.name(i)}: required input is omitted", input=i)
    required = set(cell.required)
    has = {i: True if i in required else presence(ctx, i) for i in cell.tensors}
    n_cell = dimension(ctx, cell.input_to[3], 0)
    n_output = dimension(ctx, cell.recurrent_to[3], 1)
    expect_shape(ctx, cell.input_to[3], (None, n_input), cell.name(cell.input_to[3]))
    expect_shape(ctx, cell.recurrent_to[3], (n_cell, None), cell.name(cell.recurrent_to[3]))
    shapes = [*((i, (n_cell, n_input)) for i in cell.input_to),
              *((i, (n_cell, n_output)) for i in cell.recurrent_to),
              *((i, (n_cell,)) for i in (*cell.cell_to, *cell.bias, *(cell.layer_norm or ()))),
              (cell.projection_weights, (n_output, n_cell)), (cell.projection_bias, (n_output,)),
              (cell.output_state_in, (n_batch, n_output)), (cell.cell_state_in, (n_batch, n_cell)),
              *((i, (n_cell, n_aux_input)) for i in (cell.aux_input_to or ()))]
    for i, expected in shapes:
        if has[i]:
            expect_shape(ctx, i, expected, cell.name(i))

    all_or_none(ctx, has, (cell.input_to[0], cell.recurrent_to[0]),
                "the input-to-input and recurrent-to-input weights (omitted together: CIFG)", cell.name)
    cifg = None if has[cell.input_to[0]] is None else not has[cell.input_to[0]]
    if cifg is True and has[cell.bias[0]] is True:
        raise ctx.fail(f"{cell.name(cell.bias[0])} must be omitted with CIFG (no input-to-input weights)",
                       input=cell.bias[0])
    if cifg is False and has[cell.bias[0]] is False:
        raise ctx.fail(f"{cell.name(cell.bias[0])} is required without CIFG", input=cell.bias[0])
    peep_i, peep_f, peep_o = cell.cell_to
    all_or_none(ctx, has, (peep_f, peep_o), "the peephole (cell-to-forget and cell-to-output) weights", cell.name)
    if cifg is False:
        all_or_none(ctx, has, cell.cell_to, "without CIFG, the three peephole weights", cell.name)
    if has[peep_i] is True and False in (has[peep_f], has[peep_o]):
        culprit = peep_f if has[peep_f] is False else peep_o
        raise ctx.fail(f"{cell.name(peep_i)} given without the other peephole weights ({cell.name(culprit)} "
                       f"has no value)", input=peep_i)
    if has[cell.projection_bias] is True and has[cell.projection_weights] is False:
        raise ctx.fail(f"{cell.name(cell.projection_bias)} given without projection weights",
                       input=cell.projection_bias)
    if cell.layer_norm is not None:
        ln_i = cell.layer_norm[0]
        if cifg is True and has[ln_i] is True:
            raise ctx.fail(f"{cell.name(ln_i)} must be omitted with CIFG", input=ln_i)
        group = cell.layer_norm if cifg is False else cell.layer_norm[1:]
        all_or_none(ctx, has, group, "the layer normalization weights", cell.name)
    return CellConfig(n_cell, n_output, cifg)


# -- the kernel ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CellWeights:
    """One cell's tensors as arrays of the working float type (None: omitted)."""

    input_to: tuple[np.ndarray | None, ...]
    recurrent_to: tuple[np.ndarray, ...]
    cell_to: tuple[np.ndarray | None, ...]
    bias: tuple[np.ndarray | None, ...]
    projection_weights: np.ndarray | None
    projection_bias: np.ndarray | None
    layer_norm: tuple[np.ndarray | None, ...]
    aux_input_to: tuple[np.ndarray | None, ...]

    @staticmethod
    def load(ctx: OperationContext, cell: CellInputs, work: type) -> "CellWeights":
        def get(i: int | None) -> np.ndarray | None:
            v = None if i is None else ctx.value(i)
            return None if v is None else np.asarray(v, dtype=work)

        def group(indices: tuple[int, ...] | None, n: int) -> tuple[np.ndarray | None, ...]:
            return tuple(get(i) for i in indices) if indices is not None else (None,) * n

        return CellWeights(group(cell.input_to, 4), group(cell.recurrent_to, 4), group(cell.cell_to, 3),
                           group(cell.bias, 4), get(cell.projection_weights), get(cell.projection_bias),
                           group(cell.layer_norm, 4), group(cell.aux_input_to, 4))

    @property
    def cifg(self) -> bool:
        return self.input_to[0] is None

    @property
    def peephole(self) -> bool:
        return self.cell_to[2] is not None

    @property
    def uses_layer_norm(self) -> bool:
        return self.layer_norm[3] is not None


def _normalize(x: np.ndarray) -> np.ndarray:
    mean = np.mean(x, axis=-1, keepdims=True)
    variance = np.mean(np.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + LAYER_NORM_EPSILON)


def _gate(k: int, w: CellWeights, x: np.ndarray, aux: np.ndarray | None, h: np.ndarray,
          peephole: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Gate k's value before its activation (bias and layer normalization included)."""
    pre = x @ w.input_to[k].T + h @ w.recurrent_to[k].T
    if aux is not None:
        pre = pre + aux @ w.aux_input_to[k].T
    if peephole is not None:
        weights, cell_state = peephole
        pre = pre + weights * cell_state
    if w.uses_layer_norm:
        return _normalize(pre) * w.layer_norm[k] + w.bias[k]
    return pre + w.bias[k]


def lstm_step(w: CellWeights, params: CellParams, x: np.ndarray, aux: np.ndarray | None, h: np.ndarray,
              c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One time step on [batch, ...] rows: (h_t, C_t, scratch), where scratch is what NNAPI's reference
    leaves in its scratch buffer, [gate, batch, cell] (input gate unless CIFG, g(C_t), forget gate
    (1 - f under CIFG), o * g(C_t))."""
    act = ACTIVATIONS[params.activation]
    peep = w.peephole
    forget = _sigmoid(_gate(1, w, x, aux, h, (w.cell_to[1], c) if peep else None))
    cell_input = act(_gate(2, w, x, aux, h, None))
    if w.cifg:
        input_gate = 1.0 - forget
    else:
        input_gate = _sigmoid(_gate(0, w, x, aux, h, (w.cell_to[0], c) if peep else None))
    c_new = forget * c + input_gate * cell_input
    if params.cell_clip > 0:
        c_new = np.clip(c_new, -params.cell_clip, params.cell_clip)
    output_gate = _sigmoid(_gate(3, w, x, aux, h, (w.cell_to[2], c_new) if peep else None))
    activated_cell = act(c_new)
    hidden = output_gate * activated_cell
    if w.projection_weights is not None:
        h_new = hidden @ w.projection_weights.T
        if w.projection_bias is not None:
            h_new = h_new + w.projection_bias
        if params.proj_clip > 0:
            h_new = np.clip(h_new, -params.proj_clip, params.proj_clip)
    else:
        h_new = hidden
    gates = (activated_cell, 1.0 - forget, hidden) if w.cifg else (input_gate, activated_cell, forget, hidden)
    return h_new, c_new, np.stack(gates)


def working_type(code: OperandCode) -> type:
    """float32 for float16 operands (NNAPI's float16 path), float64 for float32 (rounded once)."""
    return np.float32 if code == OperandCode.TENSOR_FLOAT16 else np.float64


def run_sequence(w: CellWeights, params: CellParams, steps: np.ndarray, h0: np.ndarray, c0: np.ndarray, *,
                 aux_steps: np.ndarray | None = None, reverse: bool = False
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The cell over time-major `steps` [max_time, batch, input] (backwards when `reverse`, each output
    still at its step's index): (outputs [max_time, batch, output_size], h, C, the last step's scratch
    [batch, gates * cells])."""
    def run() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        max_time, batch = steps.shape[0], h0.shape[0]
        outputs = np.zeros((max_time, batch, h0.shape[1]), dtype=h0.dtype)
        h, c = h0, c0
        scratch = np.zeros((3 if w.cifg else 4, batch, c0.shape[1]), dtype=h0.dtype)
        for t in (range(max_time - 1, -1, -1) if reverse else range(max_time)):
            h, c, scratch = lstm_step(w, params, steps[t], None if aux_steps is None else aux_steps[t], h, c)
            outputs[t] = h
        return outputs, h, c, scratch.reshape(batch, -1)

    return ignoring_fp_errors(run)
