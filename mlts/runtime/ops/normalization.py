"""LOCAL_RESPONSE_NORMALIZATION, L2_NORMALIZATION, INSTANCE_NORMALIZATION: normalizations that keep
the input's shape.

LOCAL_RESPONSE_NORMALIZATION (TENSOR_FLOAT32 in 1.0; TENSOR_FLOAT16, ranks 1-3 and the axis in 1.2):
inputs 0 the tensor (rank 1..4), 1 radius (INT32, >= 0), 2 bias (must not be zero), 3 alpha,
4 beta (FLOAT32, or FLOAT16 for a TENSOR_FLOAT16 input), 5 optional axis (INT32, default -1).
    sqr_sum[..., d, ...] = sum(input[..., d - radius : d + radius + 1, ...] ** 2)   along the axis
    output = input / (bias + alpha * sqr_sum) ** beta
alpha multiplies the plain window sum (it is not divided by the window size, unlike ONNX/Caffe).

L2_NORMALIZATION (TENSOR_FLOAT32 in 1.0; TENSOR_FLOAT16, TENSOR_QUANT8_ASYMM, ranks 1-3 and the
axis in 1.2; TENSOR_QUANT8_ASYMM_SIGNED in 1.3): inputs 0 the tensor (rank 1..4), 1 optional axis
(INT32, default -1). Floats: x / max(sqrt(sum(x ** 2)), 1e-6), so an all-zero vector gives 0.
Quantized outputs have scale 1/128 and zero point 128 (uint8) or 0 (int8), and the integer kernel is
NNAPI's (TFLite's): the int32 sum of squared differences to the zero point gets an inverse square
root as a fixed-point multiplier (Newton-Raphson in Q3, see `inv_sqrt_multiplier`), which then scales
128 x each difference. NNAPI's int8 kernel along the last axis folds the 128 into the shift instead
(TFLite's reference_integer_ops), which rounds differently: both are reproduced.

INSTANCE_NORMALIZATION (1.2; TENSOR_FLOAT32, TENSOR_FLOAT16): inputs 0 the 4-D tensor, 1 gamma,
2 beta, 3 epsilon (FLOAT32, or FLOAT16 for a TENSOR_FLOAT16 input), 4 layout (BOOL, true: NCHW).
Per batch and channel, over height x width:
    output = (x - mean) * gamma / sqrt(variance + epsilon) + beta

Float16 tensors are computed in float32 and rounded once, float32 in float64.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..enums import OperandCode, OperationCode
from . import _fixed_point as fp
from ._float32 import as_float32
from ._unary import check_quant_output, float_kernel
from .base import Operation, OperationContext, Shape
from .common import (FLOAT_AND_QUANT8, FLOAT_SCALAR_OF, FLOAT_TYPES, check_output_dims_like_input,
                     check_output_like_input)
from .quant import INT32_MAX, multiply_by_quantized_multiplier
from .registry import register

#: NNAPI's floor on the L2 norm (a float32 constant in its kernel)
L2_NORM_EPSILON = as_float32(1e-6)
#: quantized L2_NORMALIZATION outputs hold values in [-1, 1) with 7 fraction bits
L2_OUTPUT_FRACTION_BITS = 7


# -- shared validation --------------------------------------------------------------------------------
def check_output_shape_like_input(ctx: OperationContext, i: int = 0, output: int = 0) -> None:
    """Shape-keeping ops: the output has the input's type code and dimensions (where known)."""
    if ctx.input_type(i) is None:
        return
    check_output_like_input(ctx, i, output)
    check_output_dims_like_input(ctx, i, output)


def check_float_scalars(ctx: OperationContext, indexes: Iterable[int]) -> None:
    """Float parameters have the scalar type of the float tensor (FLOAT16 for TENSOR_FLOAT16)."""
    scalar_type = FLOAT_SCALAR_OF.get(ctx.input_code(0), OperandCode.FLOAT32)
    for i in indexes:
        ctx.check_input_type(i, scalar_type)


def check_known_axis(ctx: OperationContext, i: int) -> None:
    """Build time: a constant axis must lie in [-rank, rank) when the rank is known (rank 0: unknown)."""
    axis = ctx.scalar_if_known(i) if ctx.num_inputs > i else None
    rank = ctx.input_rank(0)
    if axis is not None and rank:
        ctx.check(-rank <= axis < rank, f"axis {axis} out of range [{-rank}, {rank})", input=i)


def resolve_axis(ctx: OperationContext, i: int, rank: int) -> int:
    """The axis input `i` (default -1 when the operation has fewer inputs), made non-negative."""
    axis = ctx.scalar(i) if ctx.num_inputs > i else -1
    ctx.check(-rank <= axis < rank, f"axis {axis} out of range [{-rank}, {rank})", input=i)
    return axis % rank


def _shape_with_rank(ctx: OperationContext, low: int, high: int) -> Shape:
    shape = ctx.input_shape(0)
    expected = str(low) if low == high else f"{low} to {high}"
    ctx.check(low <= len(shape) <= high, f"rank {len(shape)} not supported (expected {expected})", input=0)
    return shape


# -- LOCAL_RESPONSE_NORMALIZATION ---------------------------------------------------------------------
def local_response_norm(x: np.ndarray, radius: int, bias: float, alpha: float, beta: float,
                        axis: int) -> np.ndarray:
    """input / (bias + alpha * windowed sum of squares) ** beta along `axis`, in x's dtype."""
    moved = np.moveaxis(x, axis, -1)
    reach = min(radius, moved.shape[-1] - 1)  # a window wider than the axis sees the whole axis
    squares = moved * moved
    padded = np.pad(squares, [(0, 0)] * (moved.ndim - 1) + [(reach, reach)])
    window_sums = sliding_window_view(padded, 2 * reach + 1, axis=-1).sum(axis=-1)
    return np.moveaxis(moved * np.power(bias + alpha * window_sums, -beta), -1, axis)


@register
class LocalResponseNormalization(Operation):
    code = OperationCode.LOCAL_RESPONSE_NORMALIZATION
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts((5, 6), 1)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_input_type(1, OperandCode.INT32)
        check_float_scalars(ctx, range(2, 5))
        if ctx.num_inputs == 6:
            ctx.check_input_type(5, OperandCode.INT32)
        check_output_shape_like_input(ctx)
        ctx.check_input_rank(0, max_rank=4)
        self._check_parameters(ctx, ctx.scalar_if_known(1), ctx.scalar_if_known(2))
        check_known_axis(ctx, 5)

    @staticmethod
    def _check_parameters(ctx: OperationContext, radius: int | None, bias: float | None) -> None:
        if radius is not None:
            ctx.check(radius >= 0, f"radius must not be negative, got {radius}", input=1)
        if bias is not None:
            ctx.check(bias != 0, "bias must not be zero", input=2)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = _shape_with_rank(ctx, 1, 4)
        self._check_parameters(ctx, ctx.scalar(1), ctx.scalar(2))
        resolve_axis(ctx, 5, len(shape))
        return [shape]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        axis = resolve_axis(ctx, 5, x.ndim)
        radius, bias, alpha, beta = ctx.scalar(1), ctx.scalar(2), ctx.scalar(3), ctx.scalar(4)
        self._check_parameters(ctx, radius, bias)
        bias, alpha, beta = as_float32(bias), as_float32(alpha), as_float32(beta)
        return [float_kernel(x, lambda v: local_response_norm(v, radius, bias, alpha, beta, axis))]


# -- L2_NORMALIZATION ---------------------------------------------------------------------------------
_HALF_THREE_Q3 = (1 << 28) + (1 << 27)  # 1.5 in Q3
_HALF_SQRT_2_Q0 = 1518500250            # sqrt(2) / 2 in Q0


def inv_sqrt_multiplier(sum_of_squares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TFLite GetInvSqrtQuantizedMultiplierExp (with a reverse shift): per int32 sum s, the int32
    multiplier m and right shift r >= 0 with 1 / sqrt(s) ~= m * 2**-(31 + r).

    s is normalized by powers of four into [2**27, 2**29), read as Q3 (s / 2**29 in [1/4, 1)), and
    1/sqrt is refined from 1.0 by five Newton-Raphson steps x <- 1.5 x - (s/2) x**3 in Q3 fixed point.
    Sums of 0 and 1 give the largest multiplier and no shift."""
    s = fp.wrap32(sum_of_squares)
    trivial = s <= 1
    value = np.where(trivial, 2, s)
    shift = np.full(value.shape, 11, dtype=np.int64)
    while True:  # runs at most once for an int32
        big = value >= (1 << 29)
        if not big.any():
            break
        value = np.where(big, value // 4, value)
        shift = shift + big
    left_shift_bit_pairs = (fp.count_leading_zeros_u32(value) - 1) // 2 - 1
    shift = shift - left_shift_bit_pairs
    value = value << (2 * left_shift_bit_pairs)
    half_input = fp.rounding_divide_by_pot(value >> 1, 1)  # s / 2 in Q3
    x = np.full(value.shape, 1 << 28, dtype=np.int64)     # 1.0 in Q3
    for _ in range(5):
        x_cubed = fp.rescale(fp.mul(fp.mul(x, x), x), 9, 3)
        x = fp.rescale(fp.wrap32(fp.mul(_HALF_THREE_Q3, x) - fp.mul(half_input, x_cubed)), 6, 3)
    x = fp.mul(x, _HALF_SQRT_2_Q0)
    # A negative right shift is applied to the multiplier itself (a plain int32 left shift).
    x = np.where(shift < 0, fp.wrap32(x << np.maximum(-shift, 0)), x)
    shift = np.maximum(shift, 0)
    return np.where(trivial, INT32_MAX, x), np.where(trivial, 0, shift)


def l2_norm_quantized(q: np.ndarray, zero_point: int, axis: int, signed: bool) -> np.ndarray:
    """NNAPI's integer L2 normalization of stored 8-bit values along `axis`: stored outputs (int64)
    with scale 1/128 and zero point 128 (unsigned) or 0 (signed)."""
    diff = np.moveaxis(q.astype(np.int64), axis, -1) - zero_point
    multiplier, right_shift = inv_sqrt_multiplier(np.sum(diff * diff, axis=-1, keepdims=True))
    if signed and axis == q.ndim - 1:
        # TFLite reference_integer_ops: the difference itself, the 128 folded into the shift.
        scaled = multiply_by_quantized_multiplier(diff, multiplier, L2_OUTPUT_FRACTION_BITS - right_shift)
    else:
        scaled = fp.rounding_divide_by_pot(fp.mul(diff << L2_OUTPUT_FRACTION_BITS, multiplier), right_shift)
    out = np.clip(scaled, -128, 127) if signed else np.clip(scaled + 128, 0, 255)
    return np.moveaxis(out, -1, axis)


def l2_norm_float(x: np.ndarray, axis: int) -> np.ndarray:
    norm = np.sqrt(np.sum(x * x, axis=axis, keepdims=True))
    return x / np.maximum(norm, L2_NORM_EPSILON)


@register
class L2Normalization(Operation):
    code = OperationCode.L2_NORMALIZATION
    supported_types = FLOAT_AND_QUANT8

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts((1, 2), 1)
        ctx.check_input_type(0, self.supported_types)
        if ctx.num_inputs == 2:
            ctx.check_input_type(1, OperandCode.INT32)
        check_output_shape_like_input(ctx)
        ctx.check_input_rank(0, max_rank=4)
        check_known_axis(ctx, 1)
        code = ctx.input_code(0)
        if code == OperandCode.TENSOR_QUANT8_ASYMM:
            check_quant_output(ctx, 1.0 / 128, 128)
        elif code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED:
            check_quant_output(ctx, 1.0 / 128, 0)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = _shape_with_rank(ctx, 1, 4)
        resolve_axis(ctx, 1, len(shape))
        return [shape]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        axis = resolve_axis(ctx, 1, x.ndim)
        code = ctx.input_code(0)
        if code in FLOAT_TYPES:
            return [float_kernel(x, lambda v: l2_norm_float(v, axis))]
        signed = code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
        out = l2_norm_quantized(x, ctx.input_type(0).zero_point, axis, signed)
        return [out.astype(ctx.output_type(0).dtype)]


# -- INSTANCE_NORMALIZATION ---------------------------------------------------------------------------
def instance_norm(x: np.ndarray, gamma: float, beta: float, epsilon: float, nchw: bool) -> np.ndarray:
    spatial = (2, 3) if nchw else (1, 2)
    centered = x - np.mean(x, axis=spatial, keepdims=True)
    variance = np.mean(centered * centered, axis=spatial, keepdims=True)
    return centered * gamma / np.sqrt(variance + epsilon) + beta


@register
class InstanceNormalization(Operation):
    code = OperationCode.INSTANCE_NORMALIZATION
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(5, 1)
        ctx.check_input_type(0, self.supported_types)
        check_float_scalars(ctx, range(1, 4))
        ctx.check_input_type(4, OperandCode.BOOL)
        check_output_shape_like_input(ctx)
        rank = ctx.input_rank(0)
        if rank:
            ctx.check(rank == 4, f"rank {rank} not supported (expected 4)", input=0)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [_shape_with_rank(ctx, 4, 4)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        gamma, beta, epsilon = (as_float32(ctx.scalar(i)) for i in (1, 2, 3))
        nchw = bool(ctx.scalar(4))
        return [float_kernel(x, lambda v: instance_norm(v, gamma, beta, epsilon, nchw))]
