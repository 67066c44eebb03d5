"""The graph being grown and what every operation's applier uses to extend it.

An applier (one per operation) takes the graph and one of its tensors and returns the output tensor
of the operation it added, or None when the tensor does not fit the operation. The graph tracks, per
tensor, whether its values are bit-exact across correct drivers and a bound on their magnitude, so
that rounding-sensitive operations only consume exact tensors and float arithmetic only small values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

import numpy as np

from ...runtime import FuseCode, OperandCode, OperandType, OperationCode
from ..graph_spec import GraphBuilder

F32 = OperandCode.TENSOR_FLOAT32
U8 = OperandCode.TENSOR_QUANT8_ASYMM
S8 = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
I32 = OperandCode.TENSOR_INT32
B8 = OperandCode.TENSOR_BOOL8
PC = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
QUANT = (U8, S8)
MAX_ELEMENTS = 4096
FLOAT_BOUND = 4.0  # float arithmetic only on tensors known to stay within this magnitude
INT_BOUND = 1 << 20

T = TypeVar("T")


@dataclass(frozen=True)
class Tensor:
    """A tensor operand of the graph being grown, with what the generator knows of its values."""

    index: int
    type: OperandType
    exact: bool = True  # bit-identical on every correct driver (no rounding-sensitive step made it)
    bound: float = 2.0  # an upper estimate of |value| (real value for quantized tensors)

    @property
    def code(self) -> OperandCode:
        return self.type.code

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(self.type.dimensions or ())

    @property
    def rank(self) -> int:
        return len(self.dims)


def element_count(dims: Sequence[int]) -> int:
    return int(np.prod(dims, dtype=np.int64)) if dims else 1


class GrowingGraph:
    """A graph under construction from one seed: the random source, the spec builder, the tensors so far
    (`pool`) and those already consumed by an operation."""

    def begin(self, seed: int) -> None:
        """Start a new graph; everything drawn from here on is deterministic in `seed`."""
        self.rng = np.random.default_rng(seed)
        self.b = GraphBuilder()
        self.consumed: set[int] = set()
        self.pool: list[Tensor] = []

    def choice(self, options: Sequence[T]) -> T:
        return options[int(self.rng.integers(len(options)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def quant_params(self, code: OperandCode) -> tuple[float, int]:
        scale = float(np.float32(math.exp(self.rng.uniform(math.log(0.004), math.log(0.1)))))
        zp = int(self.rng.integers(100, 157)) if code == U8 else int(self.rng.integers(-28, 29))
        return scale, zp

    def values(self, t: OperandType, *, nonzero: bool = False) -> np.ndarray:
        dims = t.dimensions or ()
        if t.code == F32:
            v = self.rng.uniform(-2, 2, dims)
            if nonzero:
                v = np.sign(v + 1e-9) * self.rng.uniform(0.5, 2, dims)
            return v.astype(np.float32)
        if t.code == I32:
            v = self.rng.integers(-8, 9, dims)
            if nonzero:
                v = np.where(v == 0, 3, v)
            return v.astype(np.int32)
        if t.code == B8:
            return self.rng.integers(0, 2, dims).astype(np.bool_)
        info = np.iinfo(t.dtype)
        return self.rng.integers(info.min, int(info.max) + 1, dims).astype(t.dtype)

    def operand(self, t: OperandType, *, nonzero: bool = False, const: bool | None = None) -> int:
        """A second operand: a constant or a new model input (both are worth testing)."""
        value = self.values(t, nonzero=nonzero)
        if const if const is not None else self.chance(0.5):
            return self.b.const(t, value)
        return self.b.input(t, value)

    def out(self, src: Tensor, t: OperandType, *, exact: bool, bound: float) -> Tensor:
        """A new temporary operand for the output of an operation on `src`."""
        i = self.b.temp(t)
        return Tensor(i, t, exact, bound)

    def emit(self, code: OperationCode, inputs: list[int], outs: list[Tensor], consumed: list[Tensor]) -> Tensor:
        self.b.op(code, inputs, [o.index for o in outs])
        for c in consumed:
            self.consumed.add(c.index)
        return outs[0]

    def real_bound(self, t: Tensor) -> float:
        if t.code in QUANT:
            info = np.iinfo(t.type.dtype)
            return t.type.scale * max(info.max - t.type.zero_point, t.type.zero_point - info.min)
        return t.bound

    def start_tensor(self, family: OperandCode, rank: int | None = None) -> Tensor:
        """A new model input of the `family` type, of random rank (mostly 4-D NHWC) and dimensions."""
        rank = rank or self.choice([4, 4, 4, 1, 2, 3])
        if rank == 4:
            dims = (int(self.rng.integers(1, 3)), int(self.rng.integers(3, 9)), int(self.rng.integers(3, 9)),
                    int(self.rng.integers(1, 7)))
        else:
            dims = tuple(int(self.rng.integers(1, 7)) for _ in range(rank))
        if family in QUANT:
            t = OperandType.tensor(family, dims, *self.quant_params(family))
        else:
            t = OperandType.tensor(family, dims)
        return Tensor(self.b.input(t, self.values(t)), t, True, 2.0 if family == F32 else 8.0)


#: Adds one operation consuming the tensor; returns its output, or None when the tensor does not fit.
Applier = Callable[[GrowingGraph, Tensor], "Tensor | None"]


def broadcast_partner(g: GrowingGraph, t: Tensor) -> tuple[int, ...]:
    """Dimensions of a second operand that broadcasts against `t` (same, some 1s, or a suffix)."""
    dims = list(t.dims)
    kind = int(g.rng.integers(3))
    if kind == 0 or not dims:
        return tuple(dims)
    if kind == 1:
        return tuple(1 if g.chance(0.5) else d for d in dims)
    return tuple(dims[int(g.rng.integers(len(dims))):]) or (1,)


def broadcast_dims(t: Tensor, partner: tuple[int, ...]) -> tuple[int, ...]:
    """The output dimensions of an element-wise operation on `t` and a `broadcast_partner` of it."""
    return tuple(max(a, b) for a, b in zip((1,) * (t.rank - len(partner)) + partner, t.dims))


def random_fuse(g: GrowingGraph) -> int:
    return int(g.choice([FuseCode.NONE, FuseCode.NONE, FuseCode.RELU, FuseCode.RELU1, FuseCode.RELU6]))


def fused_bound(fuse: int, bound: float) -> float:
    return {FuseCode.RELU1: 1.0, FuseCode.RELU6: 6.0}.get(fuse, bound)
