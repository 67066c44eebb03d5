"""Operand types: NNAPI's ANeuralNetworksOperandType plus per-channel quantization, and their checks."""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Sequence

import numpy as np

from .enums import OperandCode
from .errors import bad_data

SCALAR_CODES = frozenset({OperandCode.FLOAT32, OperandCode.INT32, OperandCode.UINT32,
                          OperandCode.BOOL, OperandCode.FLOAT16})
QUANT_ASYMM_CODES = frozenset({OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
                               OperandCode.TENSOR_QUANT16_ASYMM})
QUANT_SYMM_CODES = frozenset({OperandCode.TENSOR_QUANT8_SYMM, OperandCode.TENSOR_QUANT16_SYMM})
QUANT8_CODES = frozenset({OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED})

# numpy storage of every operand code (row-major, no padding, as NNAPI lays data out).
NUMPY_DTYPE: dict[OperandCode, np.dtype] = {
    OperandCode.FLOAT32: np.dtype(np.float32),
    OperandCode.INT32: np.dtype(np.int32),
    OperandCode.UINT32: np.dtype(np.uint32),
    OperandCode.BOOL: np.dtype(np.bool_),
    OperandCode.FLOAT16: np.dtype(np.float16),
    OperandCode.TENSOR_FLOAT32: np.dtype(np.float32),
    OperandCode.TENSOR_FLOAT16: np.dtype(np.float16),
    OperandCode.TENSOR_INT32: np.dtype(np.int32),
    OperandCode.TENSOR_BOOL8: np.dtype(np.bool_),
    OperandCode.TENSOR_QUANT8_ASYMM: np.dtype(np.uint8),
    OperandCode.TENSOR_QUANT8_ASYMM_SIGNED: np.dtype(np.int8),
    OperandCode.TENSOR_QUANT8_SYMM: np.dtype(np.int8),
    OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.dtype(np.int8),
    OperandCode.TENSOR_QUANT16_ASYMM: np.dtype(np.uint16),
    OperandCode.TENSOR_QUANT16_SYMM: np.dtype(np.int16),
}

# Zero-point ranges for the asymmetric types.
ZERO_POINT_RANGE = {
    OperandCode.TENSOR_QUANT8_ASYMM: (0, 255),
    OperandCode.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
    OperandCode.TENSOR_QUANT16_ASYMM: (0, 65535),
}


def _as_dimension(d) -> int:
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
        raise ValueError(f"dimension {d!r} is not an int")
    return int(d)


@dataclass(frozen=True)
class SymmPerChannelQuantParams:
    """ANeuralNetworksSymmPerChannelQuantParams: one scale per slice along `channel_dim`."""

    scales: tuple[float, ...]
    channel_dim: int

    def __post_init__(self) -> None:
        # Normalize here so that every later check compares numbers (a malformed value is BAD_DATA).
        try:
            if isinstance(self.scales, (str, bytes)):
                raise TypeError("scales must be a sequence of numbers")
            object.__setattr__(self, "scales", tuple(float(s) for s in self.scales))
            if isinstance(self.channel_dim, bool):
                raise TypeError("channelDim must be an int")
            object.__setattr__(self, "channel_dim", operator.index(self.channel_dim))
        except (TypeError, ValueError) as e:
            raise bad_data(f"per-channel quantization parameters (scales {self.scales!r}, channelDim "
                           f"{self.channel_dim!r}): {e}") from None


@dataclass(frozen=True)
class OperandType:
    """An operand's type: code, dimensions (0 = unknown; None = unknown rank), quantization."""

    code: OperandCode
    dimensions: tuple[int, ...] | None = ()
    scale: float = 0.0
    zero_point: int = 0
    channel_quant: SymmPerChannelQuantParams | None = field(default=None, compare=True)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "code", OperandCode(self.code))
        except (ValueError, TypeError):
            raise bad_data(f"unknown operand type code {self.code!r}") from None
        if self.dimensions is not None:
            try:
                dims = tuple(_as_dimension(d) for d in self.dimensions)
            except (TypeError, ValueError):
                raise bad_data(f"{self.code.name}: dimensions must be a sequence of ints, got {self.dimensions!r}") from None
            object.__setattr__(self, "dimensions", dims)
        try:
            object.__setattr__(self, "scale", float(self.scale))
            object.__setattr__(self, "zero_point", int(self.zero_point))
        except (TypeError, ValueError):
            raise bad_data(f"{self.code.name}: scale/zeroPoint must be numbers") from None
        if self.channel_quant is not None and not isinstance(self.channel_quant, SymmPerChannelQuantParams):
            raise bad_data(f"{self.code.name}: channel_quant must be SymmPerChannelQuantParams or None, "
                           f"got {type(self.channel_quant).__name__}")

    # -- convenience constructors -------------------------------------------------------------
    @staticmethod
    def tensor(code: OperandCode, dims, scale: float = 0.0, zero_point: int = 0,
               channel_quant: SymmPerChannelQuantParams | None = None) -> "OperandType":
        return OperandType(code, None if dims is None else tuple(dims), scale, zero_point, channel_quant)

    @staticmethod
    def scalar(code: OperandCode) -> "OperandType":
        return OperandType(code, ())

    # -- properties (a type never changes: each is computed on first use and kept, as every execution asks) --
    @cached_property
    def is_scalar(self) -> bool:
        return self.code in SCALAR_CODES

    @cached_property
    def is_tensor(self) -> bool:
        return not self.is_scalar and self.code != OperandCode.MODEL

    @property
    def rank(self) -> int | None:
        return None if self.dimensions is None else len(self.dimensions)

    @cached_property
    def is_fully_specified(self) -> bool:
        return self.dimensions is not None and all(d > 0 for d in self.dimensions)

    @cached_property
    def dtype(self) -> np.dtype:
        return NUMPY_DTYPE[self.code]

    def element_count(self) -> int:
        return math.prod(int(d) for d in self.dimensions) if self.dimensions else 1  # exact: no int64 wrap-around

    def byte_size(self) -> int:
        """Bytes a value of this type occupies; 0 when unknown (unknown rank or a 0 dimension)."""
        return self._byte_size

    @cached_property
    def _byte_size(self) -> int:
        if self.code == OperandCode.MODEL:
            return 0
        if self.is_scalar:
            return self.dtype.itemsize
        if not self.is_fully_specified:
            return 0
        return self.element_count() * self.dtype.itemsize

    def with_dimensions(self, dims) -> "OperandType":
        return OperandType(self.code, tuple(dims), self.scale, self.zero_point, self.channel_quant)

    def describe(self) -> str:
        parts = [self.code.name]
        if self.is_tensor:
            parts.append("[?]" if self.dimensions is None else "[" + ",".join(map(str, self.dimensions)) + "]")
        if self.code in QUANT_ASYMM_CODES or self.code in QUANT_SYMM_CODES:
            parts.append(f"scale={self.scale:g} zp={self.zero_point}")
        if self.channel_quant is not None:
            parts.append(f"per-channel dim={self.channel_quant.channel_dim} x{len(self.channel_quant.scales)}")
        return " ".join(parts)


def validate_operand_type(t: OperandType, what: str, *, allow_unspecified_dims: bool = True,
                          allow_missing_channel_quant: bool = False) -> None:
    """NNAPI's validateOperandType: the rules every operand type obeys whatever uses it."""
    if t.is_scalar or t.code == OperandCode.MODEL:
        if t.dimensions:
            raise bad_data(f"{what}: scalar type {t.code.name} must have no dimensions, got {list(t.dimensions)}")
        if t.scale != 0.0 or t.zero_point != 0:
            raise bad_data(f"{what}: scalar type {t.code.name} must have scale 0 and zeroPoint 0")
        if t.channel_quant is not None:
            raise bad_data(f"{what}: scalar type {t.code.name} cannot have per-channel quantization")
        return
    if t.dimensions is not None:
        for d in t.dimensions:
            if d < 0:
                raise bad_data(f"{what}: negative dimension in {list(t.dimensions)}")
            if d > 0xFFFFFFFF:
                raise bad_data(f"{what}: dimension {d} does not fit in uint32")
        if not allow_unspecified_dims and not t.is_fully_specified:
            raise bad_data(f"{what}: dimensions must be fully specified, got {t.dimensions}")
        if t.is_fully_specified and t.element_count() * t.dtype.itemsize > 2**40:
            raise bad_data(f"{what}: tensor of {t.element_count()} elements is too large")
    code = t.code
    if not -2**31 <= t.zero_point < 2**31:
        raise bad_data(f"{what}: {code.name} zeroPoint {t.zero_point} does not fit in int32")
    if code in QUANT_ASYMM_CODES or code in QUANT_SYMM_CODES:
        if not (t.scale > 0.0) or not math.isfinite(t.scale):
            raise bad_data(f"{what}: {code.name} requires a positive finite scale, got {t.scale}")
    elif code != OperandCode.TENSOR_INT32 and t.scale != 0.0:
        raise bad_data(f"{what}: {code.name} must have scale 0, got {t.scale}")
    elif code == OperandCode.TENSOR_INT32 and (t.scale < 0.0 or not math.isfinite(t.scale)):
        raise bad_data(f"{what}: TENSOR_INT32 scale must be >= 0, got {t.scale}")
    if code in ZERO_POINT_RANGE:
        lo, hi = ZERO_POINT_RANGE[code]
        if not lo <= t.zero_point <= hi:
            raise bad_data(f"{what}: {code.name} zeroPoint {t.zero_point} outside [{lo}, {hi}]")
    elif code not in (OperandCode.TENSOR_INT32,) and t.zero_point != 0:
        raise bad_data(f"{what}: {code.name} must have zeroPoint 0, got {t.zero_point}")
    if code == OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        cq = t.channel_quant
        if cq is None:
            if allow_missing_channel_quant:
                return
            raise bad_data(f"{what}: TENSOR_QUANT8_SYMM_PER_CHANNEL needs per-channel quantization parameters")
        if t.scale != 0.0:
            raise bad_data(f"{what}: per-channel operand must have scale 0 (scales are per channel)")
        if t.dimensions is None:
            raise bad_data(f"{what}: per-channel operand needs a known rank")
        if not 0 <= cq.channel_dim < len(t.dimensions):
            raise bad_data(f"{what}: channelDim {cq.channel_dim} out of range for rank {len(t.dimensions)}")
        n = t.dimensions[cq.channel_dim]
        if n != 0 and len(cq.scales) != n:
            raise bad_data(f"{what}: {len(cq.scales)} channel scales for dimension of size {n}")
        for s in cq.scales:
            if not (s > 0.0) or not math.isfinite(s):
                raise bad_data(f"{what}: channel scales must be positive and finite, got {s}")
    elif t.channel_quant is not None:
        raise bad_data(f"{what}: per-channel parameters are only valid for TENSOR_QUANT8_SYMM_PER_CHANNEL")


def as_operand_array(value: object, t: OperandType, what: str) -> np.ndarray:
    """`value` as an array of `t`'s dtype, by one rule for constants and execution arguments alike.

    A numpy array or scalar must already have the operand's dtype (a silent float64 -> float32 or
    int64 -> int32 cast would change the values the application meant); plain Python values (bools,
    ints, floats and nested lists of them) are converted when that loses nothing but float rounding:
    ints in range for integer operands, bools for boolean ones, ints and floats (not overflowing)
    for float ones. Anything else is BAD_DATA naming `what` and both types.
    """
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype != t.dtype:
            kind = "array" if isinstance(value, np.ndarray) else "value"
            raise bad_data(f"{what}: {kind} dtype {value.dtype} does not match {t.code.name} ({t.dtype})")
        return np.asarray(value)
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError, OverflowError) as e:
        raise bad_data(f"{what}: value cannot be converted to {t.code.name} ({t.dtype}): {e}") from None
    src, dst = arr.dtype.kind, t.dtype.kind
    allowed = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}[dst]
    if src not in "biuf":
        raise bad_data(f"{what}: value cannot be converted to {t.code.name} ({t.dtype}): a "
                       f"{type(value).__name__} is not a number, a bool or a list of them")
    if src not in allowed:
        raise bad_data(f"{what}: a {type(value).__name__} of {arr.dtype} values does not match "
                       f"{t.code.name} ({t.dtype})")
    if dst in "iu" and arr.size:
        info = np.iinfo(t.dtype)
        if arr.min() < info.min or arr.max() > info.max:
            raise bad_data(f"{what}: value out of range for {t.code.name} [{info.min}, {info.max}]")
    with np.errstate(over="ignore"):
        out = arr.astype(t.dtype)
    if dst == "f" and np.any(np.isfinite(arr) & ~np.isfinite(out)):
        raise bad_data(f"{what}: value out of range for {t.code.name} ({t.dtype})")
    return out


def combine_dimensions(a: Sequence[int] | None, b: Sequence[int] | None) -> tuple[int, ...] | None:
    """The most specific dimensions agreeing with both (0 = unknown; None = unknown rank, only when both
    are); None also when they conflict, so callers with a possibly-None input check that first."""
    if a is None:
        return None if b is None else tuple(b)
    if b is None:
        return tuple(a)
    if len(a) != len(b):
        return None
    out = []
    for x, y in zip(a, b):
        if x and y and x != y:
            return None
        out.append(x or y)
    return tuple(out)


def same_operand_kind(a: OperandType, b: OperandType) -> bool:
    """Same data type and quantization: what all roles of one memory must share (dimensions aside)."""
    return (a.code, a.scale, a.zero_point, a.channel_quant) == (b.code, b.scale, b.zero_point, b.channel_quant)


def check_dimensions(dimensions: Any, what: str) -> tuple[int, ...]:
    """A sequence of non-negative ints (0 = unknown) as a tuple; BAD_DATA naming `what` otherwise."""
    try:
        dims = tuple(dimensions)
    except TypeError:
        raise bad_data(f"{what}: dimensions must be a sequence of ints, got {dimensions!r}") from None
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in dims):
        raise bad_data(f"{what}: dimensions must be non-negative ints, got {list(dims)}")
    return tuple(int(d) for d in dims)
