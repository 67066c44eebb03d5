"""REDUCE_SUM, REDUCE_PROD, REDUCE_MAX, REDUCE_MIN, REDUCE_ANY, REDUCE_ALL (NNAPI 1.2; quant8 signed
REDUCE_MAX/MIN since 1.3).

Inputs: the tensor (rank up to 4), the axes (1-D TENSOR_INT32, constant or model input; values in
[-rank, rank), duplicates allowed) and keep_dims (a BOOL scalar). Reducing every dimension without
keep_dims gives shape [1]. Unlike MEAN, an empty axes list would reduce nothing (NNAPI's kernel), but
no operand can be empty, so it never arrives.

Results follow NNAPI's CPU kernel, which folds each group from an initial value:
- SUM, PROD (float32, float16): computed in float64 and rounded once to the output type; PROD of a
  group holding a zero is +0 even beside inf or NaN (the kernel short-circuits zeros).
- MAX, MIN (float32, float16, quant8 asymm and signed): start from the type's lowest (MAX) or
  highest (MIN) finite value, so NaN never wins and -inf (MAX) / +inf (MIN) become that finite
  bound. Quantized outputs keep the input's scale and zero point: the stored integers are compared.
- ANY, ALL (bool8): logical or / and.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._int_args import check_int_tensor, known_ints, reduced_shape, reduction_axes, resolve_axes
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8, FLOAT_TYPES, QUANT8_TYPES
from .registry import register

MAX_RANK = 4
BOOL8_TYPES = frozenset({OperandCode.TENSOR_BOOL8})


def _float_bounds(x: np.ndarray) -> tuple[float, float]:
    info = np.finfo(x.dtype)
    return float(info.min), float(info.max)


def _reduce_sum(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    return x.astype(np.float64).sum(axis=axes)


def _reduce_prod(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    wide = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        product = wide.prod(axis=axes)
    return np.where((wide == 0).any(axis=axes), 0.0, product)


def _reduce_max(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    if x.dtype.kind != "f":
        return x.max(axis=axes)
    lowest, _ = _float_bounds(x)
    return np.where(np.isnan(x), lowest, x).max(axis=axes, initial=lowest)


def _reduce_min(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    if x.dtype.kind != "f":
        return x.min(axis=axes)
    _, highest = _float_bounds(x)
    return np.where(np.isnan(x), highest, x).min(axis=axes, initial=highest)


def _reduce_any(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    return x.astype(np.bool_).any(axis=axes)


def _reduce_all(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    return x.astype(np.bool_).all(axis=axes)


class _Reduce(Operation):
    """The shared parameter scheme: (input, axes, keep_dims) -> one output of the input's type."""

    @staticmethod
    def reduce(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(3, 1)
        ctx.check_input_type(0, self.supported_types)
        check_int_tensor(ctx, 1, 1)
        ctx.check_input_type(2, OperandCode.BOOL)
        ctx.check_input_rank(0, max_rank=MAX_RANK)
        ctx.check_output_type(0, ctx.input_code(0))
        if ctx.input_code(0) in QUANT8_TYPES:
            ctx.check_same_quantization(0, output=0)
        axes = known_ints(ctx, 1)
        rank = ctx.input_rank(0)
        if axes is not None and rank is not None:
            resolve_axes(ctx, 1, axes, rank)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        ctx.check(len(shape) <= MAX_RANK, f"rank {len(shape)} exceeds the maximum of {MAX_RANK}", input=0)
        axes = reduction_axes(ctx, 1, len(shape))
        return [reduced_shape(shape, axes, bool(ctx.scalar(2)))]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        axes = reduction_axes(ctx, 1, x.ndim)
        out_shape = reduced_shape(x.shape, axes, bool(ctx.scalar(2)))
        with np.errstate(over="ignore"):  # a float64 sum or product beyond the output type is inf
            result = np.asarray(self.reduce(x, axes)).astype(ctx.output_type(0).dtype)
        return [result.reshape(out_shape)]


@register
class ReduceSum(_Reduce):
    code = OperationCode.REDUCE_SUM
    supported_types = FLOAT_TYPES
    reduce = staticmethod(_reduce_sum)


@register
class ReduceProd(_Reduce):
    code = OperationCode.REDUCE_PROD
    supported_types = FLOAT_TYPES
    reduce = staticmethod(_reduce_prod)


@register
class ReduceMax(_Reduce):
    code = OperationCode.REDUCE_MAX
    supported_types = FLOAT_AND_QUANT8
    reduce = staticmethod(_reduce_max)


@register
class ReduceMin(_Reduce):
    code = OperationCode.REDUCE_MIN
    supported_types = FLOAT_AND_QUANT8
    reduce = staticmethod(_reduce_min)


@register
class ReduceAny(_Reduce):
    code = OperationCode.REDUCE_ANY
    supported_types = BOOL8_TYPES
    reduce = staticmethod(_reduce_any)


@register
class ReduceAll(_Reduce):
    code = OperationCode.REDUCE_ALL
    supported_types = BOOL8_TYPES
    reduce = staticmethod(_reduce_all)
