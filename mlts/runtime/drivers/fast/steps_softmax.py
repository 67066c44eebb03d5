"""SOFTMAX along the last axis as plan steps: float (compiled, float64 inside) and quantized (tables).

Both reproduce the reference: the float kernel computes in float64 and rounds once to float32;
the quantized one is NNAPI's integer kernel, with its per-element part tabled at preparation.
"""
from __future__ import annotations

import numpy as np

from ...enums import OperandCode, OperationCode
from ...ops import OperationContext
from ...ops import _fixed_point as fp
from ...ops.quant import QUANT_RANGE
from .step import ArrayOf, Bound, Shape, Step, Value, bound_call, specialize


def _f32(x: float) -> float:
    return float(np.float32(x))


class QuantSoftmax(Step):
    """Quantized SOFTMAX along the last axis, NNAPI's integer kernel with the per-element part tabled.

    A row's differences to its maximum take at most 256 values, so their fixed-point exp (and its
    Q12.19 contribution to the sum) are computed once at preparation by the reference's own
    fixed-point functions; per run, a compiled pass sums the row, the reference's functions invert
    the per-row sums (one value per row), and a second pass scales every exp.
    """

    SCALED_DIFF_INTEGER_BITS = 5
    ACCUMULATION_INTEGER_BITS = 12

    def __init__(self, j: int, ctx: OperationContext, values: dict[int, Value], x: int, out: int,
                 multiplier: int, left_shift: int) -> None:
        super().__init__(j, OperationCode.SOFTMAX, (x,), (out,))
        self.x, self.out = x, out
        t = ctx.input_type(0)
        qmin, qmax = QUANT_RANGE[t.code]
        diff = np.arange(qmin - qmax, 1, dtype=np.int64)
        diff_min = -fp.calculate_input_radius(self.SCALED_DIFF_INTEGER_BITS, left_shift)
        used = diff >= diff_min
        scaled = fp.multiply_by_quantized_multiplier_greater_than_one(np.where(used, diff, 0), multiplier, left_shift)
        exps = fp.exp_on_negative_values(scaled, self.SCALED_DIFF_INTEGER_BITS)
        self.exps = np.ascontiguousarray(exps, dtype=np.int64)
        self.used = np.ascontiguousarray(used)
        self.contributions = np.where(used, fp.rescale(exps, 0, self.ACCUMULATION_INTEGER_BITS), 0).astype(np.int64)
        self.offset = qmax - qmin
        self.out_offset = -128 if t.code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED else 0
        shape = values[x].shape
        self.rows, self.cols = int(np.prod(shape[:-1], dtype=np.int64)), shape[-1]
        self.label = "int tables"

    @staticmethod
    def multiplier(ctx: OperationContext) -> tuple[int, int] | None:
        """NNAPI's input multiplier for beta x input scale; None when the kernel would refuse it."""
        beta = float(np.float32(ctx.scalar(1)))
        real = min(beta * _f32(ctx.input_type(0).scale) * float(1 << (31 - QuantSoftmax.SCALED_DIFF_INTEGER_BITS)),
                   float((1 << 31) - 1))
        return fp.quantize_multiplier_greater_than_one(real)

    def scratch(self) -> list[tuple[Shape, np.dtype]]:
        return [((self.rows,), np.dtype(np.int64)), ((self.rows,), np.dtype(np.int64))]

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        from .kernels_quant import softmax_outputs, softmax_sums

        x = array(self.x).reshape(self.rows, self.cols)
        out = array(self.out).reshape(self.rows, self.cols)
        maxima, sums = scratch
        exps, used, offset, out_offset = self.exps, self.used, self.offset, self.out_offset
        acc_bits = self.ACCUMULATION_INTEGER_BITS
        row_sums = bound_call(softmax_sums, x, self.contributions, offset, maxima, sums)
        zeros = np.zeros(self.rows, dtype=np.int64)
        outputs = specialize(softmax_outputs, x, exps, used, offset, maxima, zeros, zeros, out_offset, out)

        def run() -> None:
            row_sums()
            fixed_sum = sums & 0xFFFFFFFF
            headroom_plus_one = fp.count_leading_zeros_u32(fixed_sum)
            shifted_sum_minus_one = fp.wrap32(((fixed_sum << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31))
            scales = fp.one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one)
            shifts = (acc_bits - headroom_plus_one) + 31 - 8
            outputs(x, exps, used, offset, maxima, scales, shifts, out_offset, out)
        return run


class FloatSoftmax(Step):
    """Float32 SOFTMAX along the last axis in one compiled pass (float64 inside, like the reference)."""

    def __init__(self, j: int, ctx: OperationContext, values: dict[int, Value], x: int, out: int) -> None:
        super().__init__(j, OperationCode.SOFTMAX, (x,), (out,))
        self.x, self.out = x, out
        self.beta = float(np.float32(ctx.scalar(1)))
        shape = values[x].shape
        self.rows, self.cols = int(np.prod(shape[:-1], dtype=np.int64)), shape[-1]
        self.label = "float64 inside"

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        from .kernels_float import softmax

        x = array(self.x).reshape(self.rows, self.cols)
        out = array(self.out).reshape(self.rows, self.cols)
        return bound_call(softmax, x, self.beta, out)
