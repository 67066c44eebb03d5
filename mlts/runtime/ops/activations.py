"""RELU, RELU1, RELU6, LOGISTIC, TANH: element-wise activations on float and 8-bit quantized tensors.

Quantized RELU* clamp the stored values to the quantized image of the activation range (the
output keeps the input's scale and zero point). Quantized LOGISTIC and TANH follow NNAPI's integer
kernels: the centered input is rescaled into Q4.27 with an integer multiplier, inputs beyond the
representable radius saturate, the rest go through gemmlowp's fixed-point logistic/tanh, and the
Q0.31 result is rounded to the fixed output format (LOGISTIC: scale 1/256, TANH: scale 1/128).
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
from .quant import QUANT_RANGE
from .registry import register

# The rescaled input of quantized LOGISTIC/TANH has 4 integer bits (Q4.27): |x| < 16.
INPUT_INTEGER_BITS = 4


class _Activation(Operation):
    supported_types = FLOAT_AND_QUANT8

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(1, 1)
        ctx.check_input_type(0, self.supported_types)
        check_output_like_input(ctx)
        ctx.check_input_rank(0, max_rank=4)
        if ctx.input_code(0) in QUANT8_TYPES:
            self.validate_quant_output(ctx)

    def validate_quant_output(self, ctx: OperationContext) -> None:
        raise NotImplementedError

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        ctx.check(len(shape) <= 4, f"rank {len(shape)} exceeds the maximum of 4", input=0)
        return [shape]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        if ctx.input_code(0) in QUANT8_TYPES:
            out = self.quantized(ctx, x.astype(np.int64))
            return [out.astype(ctx.output_type(0).dtype)]
        return [float_kernel(x, self.real)]

    def real(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def quantized(self, ctx: OperationContext, q: np.ndarray) -> np.ndarray:
        raise NotImplementedError


# -- RELU family ---------------------------------------------------------------------------------
class _Relu(_Activation):
    low: float = 0.0
    high: float | None = None  # None: unbounded

    def validate_quant_output(self, ctx: OperationContext) -> None:
        ctx.check_same_quantization(0, output=0)

    def real(self, x: np.ndarray) -> np.ndarray:
        # np.maximum/np.minimum keep NaN as NaN and +inf as +inf (the mathematical max(low, min(high, x))).
        y = np.maximum(x, x.dtype.type(self.low))
        return y if self.high is None else np.minimum(y, x.dtype.type(self.high))

    def quantized(self, ctx: OperationContext, q: np.ndarray) -> np.ndarray:
        t = ctx.input_type(0)
        qmin, qmax = QUANT_RANGE[t.code]
        scale = np.float32(t.scale)

        def quantize(real: float) -> int:
            # zero_point + std::round(real / scale), the division in float32 as NNAPI does it.
            v = float(np.float32(real) / scale)
            r = np.floor(abs(v) + 0.5)
            return t.zero_point + int(r if v >= 0 else -r)

        lo = max(qmin, quantize(self.low))
        hi = qmax if self.high is None else min(qmax, quantize(self.high))
        return np.clip(q, lo, hi)


@register
class Relu(_Relu):
    code = OperationCode.RELU


@register
class Relu1(_Relu):
    code = OperationCode.RELU1
    low, high = -1.0, 1.0


@register
class Relu6(_Relu):
    code = OperationCode.RELU6
    low, high = 0.0, 6.0


# -- LOGISTIC / TANH -----------------------------------------------------------------------------
def _input_rescaling(ctx: OperationContext) -> tuple[int, int, int]:
    """(multiplier, left_shift, range_radius) that bring centered inputs into Q4.27."""
    real_multiplier = as_float32(ctx.input_type(0).scale) * float(1 << (31 - INPUT_INTEGER_BITS))
    quantized = fp.quantize_multiplier_greater_than_one(real_multiplier)
    if quantized is None:
        raise ctx.fail(f"input scale {ctx.input_type(0).scale:g} is too small for the quantized kernel",
                       input=0, code=ResultCode.OP_FAILED)
    multiplier, left_shift = quantized
    return multiplier, left_shift, fp.calculate_input_radius(INPUT_INTEGER_BITS, left_shift)


def _fixed_point_activation(ctx: OperationContext, q: np.ndarray, fn, output_fraction_bits: int,
                            unsigned_zero_point: int) -> np.ndarray:
    """Shared body of quantized LOGISTIC (fn=fp.logistic, 8 fraction bits) and TANH (fp.tanh, 7).

    Works in the unsigned output convention and shifts by 128 for the signed type, which is exactly
    how NNAPI's uint8 and int8 kernels relate (the int8 kernel subtracts 128 and clamps where the
    uint8 kernel maps 256 to 255).
    """
    t = ctx.input_type(0)
    multiplier, left_shift, radius = _input_rescaling(ctx)
    centered = q - t.zero_point
    inside = (centered > -radius) & (centered < radius)
    safe = np.where(inside, centered, 0)
    x_q4 = fp.multiply_by_quantized_multiplier_greater_than_one(safe, multiplier, left_shift)
    y_q0 = fn(x_q4, INPUT_INTEGER_BITS)
    out = fp.rounding_divide_by_pot(y_q0, 31 - output_fraction_bits) + unsigned_zero_point
    out = np.where(centered <= -radius, 0, np.where(centered >= radius, 255, out))
    out = np.clip(out, 0, 255)
    if t.code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED:
        out = out - 128
    return out


@register
class Logistic(_Activation):
    code = OperationCode.LOGISTIC

    def validate_quant_output(self, ctx: OperationContext) -> None:
        signed = ctx.input_code(0) == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
        check_quant_output(ctx, 1.0 / 256, -128 if signed else 0)

    def real(self, x: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-x))

    def quantized(self, ctx: OperationContext, q: np.ndarray) -> np.ndarray:
        return _fixed_point_activation(ctx, q, fp.logistic, 8, 0)


@register
class Tanh(_Activation):
    code = OperationCode.TANH

    def validate_quant_output(self, ctx: OperationContext) -> None:
        signed = ctx.input_code(0) == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
        check_quant_output(ctx, 1.0 / 128, 0 if signed else 128)

    def real(self, x: np.ndarray) -> np.ndarray:
        return np.tanh(x)

    def quantized(self, ctx: OperationContext, q: np.ndarray) -> np.ndarray:
        return _fixed_point_activation(ctx, q, fp.tanh, 7, 128)
