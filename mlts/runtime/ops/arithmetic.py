"""ADD, SUB, MUL, DIV: broadcasting binary arithmetic with a fused activation.

Quantized ADD/SUB follow NNAPI's kernel: both inputs are rescaled to twice the larger input scale
with a left shift of 20 bits, summed, then rescaled to the output; MUL multiplies the offset inputs
and rescales once. All with the fixed-point helpers of `quant`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..enums import FuseCode, OperandCode, OperationCode
from ..operand_type import OperandType
from ._float32 import as_float32
from ._fp_errors import ignore_fp_errors, restore_fp_errors
from .base import Operation, OperationContext, Shape
from .common import FLOAT_TYPES, QUANT8_TYPES, broadcast_shape, check_output_like_input
from .quant import (apply_float_activation, multiply_by_quantized_multiplier, quantize_multiplier,
                    quantized_activation_range)
from .registry import register

ADD_LEFT_SHIFT = 20


class _Binary(Operation):
    supported_types: frozenset = frozenset()

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(3, 1)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_input_type(1, ctx.input_code(0))
        ctx.check_fuse_code(2)
        check_output_like_input(ctx)
        ctx.check_input_rank(0, max_rank=4)
        ctx.check_input_rank(1, max_rank=4)
        if ctx.input_code(0) == OperandCode.TENSOR_INT32:
            fuse = ctx.scalar_if_known(2)
            ctx.check(fuse in (None, FuseCode.NONE), "TENSOR_INT32 requires fused activation NONE", input=2)
        if ctx.input_code(0) in QUANT8_TYPES:
            self.validate_quantized(ctx)

    def validate_quantized(self, ctx: OperationContext) -> None:
        pass

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        # The fused activation may be a run-time scalar: check it once its value is known.
        fuse = ctx.scalar_if_known(2)
        if fuse is not None:
            ctx.check(fuse in tuple(FuseCode), f"invalid fused activation code {fuse}", input=2)
            ctx.check(ctx.input_code(0) != OperandCode.TENSOR_INT32 or fuse == FuseCode.NONE,
                      "TENSOR_INT32 requires fused activation NONE", input=2)
        return [broadcast_shape(ctx, ctx.input_shape(0), ctx.input_shape(1))]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        a, b = ctx.input(0), ctx.input(1)
        fuse = ctx.scalar(2)
        code = ctx.input_code(0)
        if code in QUANT8_TYPES:
            return [self.quantized(ctx, a, b, fuse)]
        if code == OperandCode.TENSOR_INT32:
            return [self.integer(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)]
        token = ignore_fp_errors()  # inline, not ignoring_fp_errors(): on every float ADD's path
        try:
            out = self.real(a, b)
        finally:
            restore_fp_errors(token)
        if fuse != FuseCode.NONE:
            out = apply_float_activation(out, fuse)
        return [out.astype(a.dtype, copy=False)]  # a new array already

    def real(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def integer(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.real(a, b)

    def quantized(self, ctx: OperationContext, a, b, fuse) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True)
class AddRescale:
    """NNAPI's quantized ADD/SUB multipliers, each a (multiplier, shift) pair: both inputs go to twice
    the larger input scale (after a left shift of ADD_LEFT_SHIFT bits), their sum to the output scale."""

    input_a: tuple[int, int]
    input_b: tuple[int, int]
    output: tuple[int, int]


def add_rescale(ta: OperandType, tb: OperandType, to: OperandType) -> AddRescale:
    """The multipliers of a quantized ADD/SUB, derived from the float32 scales as NNAPI does."""
    sa, sb, so = as_float32(ta.scale), as_float32(tb.scale), as_float32(to.scale)
    twice_max_scale = 2.0 * max(sa, sb)
    return AddRescale(quantize_multiplier(sa / twice_max_scale), quantize_multiplier(sb / twice_max_scale),
                      quantize_multiplier(twice_max_scale / ((1 << ADD_LEFT_SHIFT) * so)))


def rescaled_add_input(q: np.ndarray, zero_point: int, multiplier: int, shift: int) -> np.ndarray:
    """One input of a quantized ADD/SUB in the common scale: (q - zero point) << ADD_LEFT_SHIFT, rescaled."""
    return multiply_by_quantized_multiplier((q.astype(np.int64) - zero_point) << ADD_LEFT_SHIFT, multiplier, shift)


def _add_or_sub_quantized(ctx: OperationContext, a: np.ndarray, b: np.ndarray, fuse: int, sign: int) -> np.ndarray:
    ta, tb, to = ctx.input_type(0), ctx.input_type(1), ctx.output_type(0)
    rescale = add_rescale(ta, tb, to)
    m2, s2 = rescale.input_b
    sx = rescaled_add_input(a, ta.zero_point, *rescale.input_a)
    sy = rescaled_add_input(b, tb.zero_point, sign * m2, s2)
    out = multiply_by_quantized_multiplier(sx + sy, *rescale.output) + to.zero_point
    lo, hi = quantized_activation_range(fuse, to)
    return np.clip(out, lo, hi).astype(to.dtype)


@register
class Add(_Binary):
    code = OperationCode.ADD
    supported_types = FLOAT_TYPES | QUANT8_TYPES | {OperandCode.TENSOR_INT32}

    def real(self, a, b):
        return a + b

    def quantized(self, ctx, a, b, fuse):
        return _add_or_sub_quantized(ctx, a, b, fuse, +1)


@register
class Sub(_Binary):
    code = OperationCode.SUB
    supported_types = FLOAT_TYPES | QUANT8_TYPES | {OperandCode.TENSOR_INT32}

    def real(self, a, b):
        return a - b

    def quantized(self, ctx, a, b, fuse):
        return _add_or_sub_quantized(ctx, a, b, fuse, -1)


@register
class Mul(_Binary):
    code = OperationCode.MUL
    supported_types = FLOAT_TYPES | QUANT8_TYPES | {OperandCode.TENSOR_INT32}

    def real(self, a, b):
        return a * b

    def validate_quantized(self, ctx: OperationContext) -> None:
        # NNAPI: output_scale > input1_scale * input2_scale (the rescale multiplier must be < 1).
        ta, tb, to = ctx.input_type(0), ctx.input_type(1), ctx.output_type(0)
        if ta is not None and tb is not None:
            product = np.float32(ta.scale) * np.float32(tb.scale)
            ctx.check(np.float32(to.scale) > product,
                      f"output scale {to.scale:g} must exceed input0 scale x input1 scale ({float(product):g})",
                      output=0)

    def quantized(self, ctx, a, b, fuse):
        ta, tb, to = ctx.input_type(0), ctx.input_type(1), ctx.output_type(0)
        # NNAPI forms the input scale product in float32, then divides in double.
        product = float(np.float32(ta.scale) * np.float32(tb.scale))
        mult, shift = quantize_multiplier(product / as_float32(to.scale))
        prod = (a.astype(np.int64) - ta.zero_point) * (b.astype(np.int64) - tb.zero_point)
        out = multiply_by_quantized_multiplier(prod, mult, shift) + to.zero_point
        lo, hi = quantized_activation_range(fuse, to)
        return np.clip(out, lo, hi).astype(to.dtype)


@register
class Div(_Binary):
    code = OperationCode.DIV
    supported_types = FLOAT_TYPES | {OperandCode.TENSOR_INT32}

    def real(self, a, b):
        return a / b

    def integer(self, a, b):
        # NNAPI int32 DIV floors (like TFLite's FloorDiv). Division by zero is undefined in NNAPI;
        # its CPU kernel returns 0 there rather than crashing, and so do we.
        zero = b == 0
        return np.where(zero, 0, np.floor_divide(a, np.where(zero, 1, b)))
