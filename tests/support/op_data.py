"""Operand types and random data for the ops tests, with each test file's own quantization and generator.

The files pass their QUANT table (scale, zero point per quantized code) and their numpy Generator, so
that their data stays what it was: bind them once per file with functools.partial.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from mlts.runtime import OperandCode, OperandType
from support.op_runner import Const

F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
I32, B8 = OperandCode.TENSOR_INT32, OperandCode.TENSOR_BOOL8
ALL_TYPES = [F32, F16, U8, S8, I32]
TYPE_IDS = {F32: "f32", F16: "f16", U8: "u8", S8: "s8", I32: "i32"}
QUANT_RANGE = {U8: (0, 255), S8: (-128, 127)}


def tensor_type(code: OperandCode, shape: Sequence[int],
                quant: Mapping[OperandCode, tuple[float, int]] | None = None) -> OperandType:
    """A tensor type of `code`, with `quant`'s (scale, zero point) for it when it has one."""
    scale, zp = (quant or {}).get(code, (0.0, 0))
    return OperandType.tensor(code, shape, scale, zp)


def random_data(rng: np.random.Generator, code: OperandCode, shape: Sequence[int]) -> np.ndarray:
    """Values for `code`: the whole range of an 8-bit type, int32 in [-1000, 1000), floats standard normal."""
    if code in (U8, S8):
        lo, hi = (0, 255) if code == U8 else (-128, 127)
        return rng.integers(lo, hi + 1, size=shape).astype(tensor_type(code, shape).dtype)
    if code == OperandCode.TENSOR_INT32:
        return rng.integers(-1000, 1000, size=shape).astype(np.int32)
    return rng.standard_normal(shape).astype(tensor_type(code, shape).dtype)


def int_vec(values: Any, const: bool = True) -> tuple[OperandType, Any]:
    """An int32 tensor input, a constant unless `const` is False."""
    v = np.asarray(values, dtype=np.int32)
    return (OperandType.tensor(OperandCode.TENSOR_INT32, v.shape), Const(v) if const else v)


def int_scalar(v: int) -> tuple[OperandType, int]:
    """An INT32 scalar input."""
    return (OperandType.scalar(OperandCode.INT32), v)
