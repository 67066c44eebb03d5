"""The pieces an execution plan is made of: a Value per tensor operand, a Step per operation.

A Step is built once at preparation (parameters resolved, constants repacked, kernels chosen) and
bound once per workspace to that workspace's arrays: `bind` returns a closure without arguments,
so that a run is a loop over closures with no lookups and no allocation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import numpy as np

from ...enums import OperandCode, OperationCode
from ...operand_type import OperandType
from ...ops import OperationContext
from ...ops.common import QUANT8_TYPES
from ...ops.quant import QUANT_RANGE

Shape = tuple[int, ...]
Bound = Callable[[], None]


class ArrayOf:
    """A workspace's arrays as a step sees them when it binds: `array(i)` is operand i's array (for a
    bordered value, its interior view), `array.padded(i)` the whole bordered buffer."""

    def __call__(self, index: int) -> np.ndarray:
        raise NotImplementedError

    def padded(self, index: int) -> np.ndarray:
        raise NotImplementedError


@dataclass
class Value:
    """A tensor operand as the plan sees it.

    kind: "const" (value known at preparation), "input", "output" or "temp".
    Quantized temporaries may be stored centred (`centred_sub` = zero point, `dtype` float32 or
    float64) when every consumer wants a GEMM input matrix: the producer then writes q - zero point.
    `alias_of`: a view of another value (a RESHAPE, or with `perm` an elided TRANSPOSE).
    `padding` (top, bottom, left, right): an NHWC value stored inside a zero-bordered buffer (border
    = the zero point for quantized values), written so by its producer for a depthwise consumer
    that then reads every tap without bounds checks.
    """

    index: int
    type: OperandType
    shape: Shape
    kind: str
    const: np.ndarray | None = None
    dtype: np.dtype = field(default=None)  # type: ignore[assignment]
    centred_sub: int = 0
    alias_of: int | None = None
    perm: tuple[int, ...] | None = None
    padding: tuple[int, int, int, int] | None = None
    value_range: tuple[int, int] | None = None
    producer: int | None = None
    consumers: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.dtype is None:
            self.dtype = np.dtype(self.type.dtype)
        if self.value_range is None and self.type.code in QUANT_RANGE:
            self.value_range = QUANT_RANGE[self.type.code]

    @property
    def code(self) -> OperandCode:
        return self.type.code

    @property
    def quantized(self) -> bool:
        return self.type.code in QUANT8_TYPES

    @property
    def centred(self) -> bool:
        return self.dtype != np.dtype(self.type.dtype)

    @property
    def stored_shape(self) -> Shape:
        if self.padding is None:
            return self.shape
        top, bottom, left, right = self.padding
        n, h, w, c = self.shape
        return (n, top + h + bottom, left + w + right, c)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.stored_shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass(frozen=True)
class PlanNode:
    """One operation of the model as a step builder sees it: its index in the main subgraph, its
    context as at preparation (types, constant values), its operands, and the plan's values so far
    (its data inputs and its output included)."""

    index: int
    code: OperationCode
    ctx: OperationContext
    values: dict[int, Value]
    inputs: tuple[int, ...]
    out: int

    @property
    def x(self) -> int:
        """The operation's first input (its data input, for every operation but ADD's second)."""
        return self.inputs[0]


class Step:
    """One operation of the plan. Subclasses set `reads`/`writes` (non-constant operands) and `label`."""

    code: OperationCode
    label: str = ""
    #: a quantized output this step can write centred in a float type (GEMM-ready) instead of stored
    writes_centred: bool = False
    #: an NHWC output this step can write inside a zero-bordered buffer
    writes_padded: bool = False
    #: what the step subtracts from the values it writes (the zero point when its output is centred)
    out_sub: int = 0
    #: replaced by a view of its input (nothing to run)
    elided: bool = False

    def __init__(self, op_index: int, code: OperationCode, reads: tuple[int, ...], writes: tuple[int, ...]) -> None:
        self.op_index = op_index
        self.code = code
        self.reads = reads
        self.writes = writes

    def centred_input(self, operand: int) -> np.dtype | None:
        """The float type in which this step would like `operand` stored centred; None: stored values."""
        return None

    def input_padding(self, operand: int) -> tuple[int, int, int, int] | None:
        """The border (top, bottom, left, right) this step would like around `operand`; None: none."""
        return None

    def accepts_strided(self, operand: int) -> bool:
        """Whether this step reads `operand` correctly from any strided view (not only contiguous)."""
        return False

    def configure(self, values: dict[int, "Value"]) -> None:
        """Called once the plan has decided how every value is stored, before `scratch` and `bind`."""
        if self.writes:
            self.out_sub = values[self.writes[0]].centred_sub

    def scratch(self) -> list[tuple]:
        """Per-workspace scratch buffers: (shape, dtype) live only while the step runs, or
        (shape, dtype, True) for a buffer whose contents must persist from run to run."""
        return []

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.op_index}:{self.code.name}" + (f" [{self.label}]" if self.label else "")


def specialize(kernel, *args):
    """The numba kernel's compiled entry point for exactly these argument types (compiled now, or
    loaded from numba's on-disk cache), so that runs skip numba's per-call type dispatch."""
    return kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))


def bound_call(kernel, *args) -> Bound:
    """A call of a compiled kernel on fixed arguments (the workspace's arrays and constants)."""
    return partial(specialize(kernel, *args), *args)


#: the least length of a tiled per-channel parameter (`channel_tile`)
TILE = 128


def channel_tile(a: np.ndarray) -> np.ndarray:
    """Per-channel values (the last axis) repeated to a whole number of copies at least TILE long: the
    kernels then walk rows flat, a tile at a time, in loops long enough to vectorize (kernels_float)."""
    channels = a.shape[-1]
    copies = -(-TILE // channels)
    return np.ascontiguousarray(np.tile(a, (1,) * (a.ndim - 1) + (copies,)))


F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
