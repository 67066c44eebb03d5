"""SOFTMAX: exp(beta * (x - max)) / sum along an axis (default the last), float and 8-bit quantized.

Inputs: 0 the tensor (rank 1..4), 1 beta (FLOAT32; FLOAT16 for a TENSOR_FLOAT16 input; > 0),
2 optional axis (INT32 in [-rank, rank), default -1). Quantized outputs have scale 1/256 and zero
point 0 (uint8) or -128 (int8).

The quantized kernel is NNAPI's integer one: differences to the row maximum are rescaled by
beta * input_scale into Q5.26 (differences below -radius are dropped), exponentiated with
gemmlowp's fixed-point exp, accumulated in Q12.19, the sum normalized into [1, 2) and inverted with
Newton-Raphson, and each exp multiplied by the reciprocal and rounded to 8 fraction bits.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ..errors import ResultCode
from . import _fixed_point as fp
from ._float32 import as_float32
from ._unary import check_quant_output, float_kernel
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8, QUANT8_TYPES, check_output_like_input
from .registry import register

SCALED_DIFF_INTEGER_BITS = 5
ACCUMULATION_INTEGER_BITS = 12


def _softmax_float(x: np.ndarray, beta: float, axis: int) -> np.ndarray:
    shifted = (x - np.max(x, axis=axis, keepdims=True)) * beta
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def quantized_input_multiplier(input_scale: float, beta: float) -> tuple[int, int] | None:
    """NNAPI's (multiplier, left shift) that rescales differences to the row maximum by beta x input
    scale (both as float32) into Q5.26; None when the integer kernel refuses it (product too small)."""
    real = min(as_float32(beta) * as_float32(input_scale) * float(1 << (31 - SCALED_DIFF_INTEGER_BITS)),
               float((1 << 31) - 1))
    return fp.quantize_multiplier_greater_than_one(real)


def exps_of_differences(diff: np.ndarray, multiplier: int, left_shift: int
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exp in Q0, used, Q12.19 contribution to the row sum) of differences to the row maximum (<= 0).

    Differences below -radius are dropped: not used, contributing 0 (their output is 0)."""
    diff_min = -fp.calculate_input_radius(SCALED_DIFF_INTEGER_BITS, left_shift)
    used = diff >= diff_min
    scaled_diff = fp.multiply_by_quantized_multiplier_greater_than_one(np.where(used, diff, 0), multiplier, left_shift)
    exps = fp.exp_on_negative_values(scaled_diff, SCALED_DIFF_INTEGER_BITS)
    contributions = np.where(used, fp.rescale(exps, 0, ACCUMULATION_INTEGER_BITS), 0)
    return exps, used, contributions


def reciprocals_of_sums(sum_of_exps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(reciprocal in Q0, right shift) per row sum (int32 in Q12.19): an exp times the reciprocal,
    shifted right, is the output with 8 fraction bits."""
    fixed_sum = sum_of_exps & 0xFFFFFFFF  # read as uint32
    headroom_plus_one = fp.count_leading_zeros_u32(fixed_sum)
    num_bits_over_unit = ACCUMULATION_INTEGER_BITS - headroom_plus_one
    # Normalize the sum into [1, 2) and keep the fraction: the leading one moves to bit 31 and drops.
    shifted_sum_minus_one = fp.wrap32(((fixed_sum << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31))
    return fp.one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one), num_bits_over_unit + 31 - 8


def _softmax_quant(q: np.ndarray, multiplier: int, left_shift: int, signed: bool) -> np.ndarray:
    """NNAPI's integer softmax along the last axis of `q` (int64 stored values); unsigned result 0..255."""
    exps, used, contributions = exps_of_differences(q - np.max(q, axis=-1, keepdims=True), multiplier, left_shift)
    reciprocals, shifts = reciprocals_of_sums(fp.wrap32(np.sum(contributions, axis=-1, keepdims=True)))
    out = fp.rounding_divide_by_pot(fp.mul(reciprocals, exps), shifts)
    out = np.where(used, np.clip(out, 0, 255), 0)
    return out - 128 if signed else out


@register
class Softmax(Operation):
    code = OperationCode.SOFTMAX
    supported_types = FLOAT_AND_QUANT8

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts((2, 3), 1)
        ctx.check_input_type(0, self.supported_types)
        code = ctx.input_code(0)
        ctx.check_input_type(1, OperandCode.FLOAT16 if code == OperandCode.TENSOR_FLOAT16 else OperandCode.FLOAT32)
        if ctx.num_inputs == 3:
            ctx.check_input_type(2, OperandCode.INT32)
        check_output_like_input(ctx)
        ctx.check_input_rank(0, max_rank=4)  # rank 0 may stand for "not known yet"
        beta = ctx.scalar_if_known(1)
        if beta is not None:
            ctx.check(beta > 0, f"beta must be positive, got {beta}", input=1)
        rank = ctx.input_rank(0)
        axis = ctx.scalar_if_known(2) if ctx.num_inputs == 3 else None
        if axis is not None and rank:
            ctx.check(-rank <= axis < rank, f"axis {axis} out of range for rank {rank}", input=2)
        if code in QUANT8_TYPES:
            check_quant_output(ctx, 1.0 / 256, -128 if code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED else 0)

    def _axis(self, ctx: OperationContext, rank: int) -> int:
        axis = ctx.scalar(2) if ctx.num_inputs == 3 else -1
        ctx.check(-rank <= axis < rank, f"axis {axis} out of range for rank {rank}", input=2)
        return axis % rank

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        ctx.check(1 <= len(shape) <= 4, f"rank {len(shape)} not supported (expected 1 to 4)", input=0)
        beta = ctx.scalar(1)
        ctx.check(beta > 0, f"beta must be positive, got {beta}", input=1)
        self._axis(ctx, len(shape))
        return [shape]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        axis = self._axis(ctx, x.ndim)
        beta = ctx.scalar(1)
        out_type = ctx.output_type(0)
        if x.size == 0:
            return [np.zeros(x.shape, dtype=out_type.dtype)]
        if ctx.input_code(0) in QUANT8_TYPES:
            q = np.moveaxis(x.astype(np.int64), axis, -1)
            signed = ctx.input_code(0) == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
            quantized = quantized_input_multiplier(ctx.input_type(0).scale, beta)
            if quantized is None:
                product = as_float32(beta) * as_float32(ctx.input_type(0).scale)
                raise ctx.fail(f"beta * input scale = {product:g} is too small for the quantized kernel",
                               code=ResultCode.OP_FAILED)
            out = _softmax_quant(q, *quantized, signed)
            return [np.moveaxis(out, -1, axis).astype(out_type.dtype)]
        beta = as_float32(beta)
        return [float_kernel(x, lambda v: _softmax_float(v, beta, axis))]
