"""SOFTMAX along the last axis as plan steps: float (compiled, float64 inside) and quantized (tables).

Both reproduce the reference: the float kernel computes in float64 and rounds once to float32;
the quantized one is NNAPI's integer kernel, with its per-element part tabled at preparation.
"""
from __future__ import annotations

import numpy as np

from ...enums import OperandCode, OperationCode
from ...ops._float32 import as_float32
from ...ops.quant import QUANT_RANGE
from ...ops.softmax import exps_of_differences, quantized_input_multiplier
from .operation_table import register_fast
from .step import ArrayOf, Bound, PlanNode, Step, bound_call
from .steps_other import Delegate


class QuantSoftmax(Step):
    """Quantized SOFTMAX along the last axis, NNAPI's integer kernel with the per-element part tabled.

    A row's differences to its maximum take at most 256 values, so their fixed-point exp (and its
    Q12.19 contribution to the sum) are computed once at preparation by the reference's own
    functions; per run, one compiled kernel sums each row, inverts the sum (the reference's
    fixed-point Newton-Raphson, transcribed) and scales every exp.
    """

    def __init__(self, node: PlanNode, multiplier: int, left_shift: int) -> None:
        x = node.x
        super().__init__(node.index, OperationCode.SOFTMAX, (x,), (node.out,))
        self.x, self.out = x, node.out
        t = node.ctx.input_type(0)
        qmin, qmax = QUANT_RANGE[t.code]
        exps, used, contributions = exps_of_differences(np.arange(qmin - qmax, 1, dtype=np.int64), multiplier,
                                                        left_shift)
        self.exps = np.ascontiguousarray(exps, dtype=np.int64)
        self.used = np.ascontiguousarray(used)
        self.contributions = contributions.astype(np.int64)
        self.offset = qmax - qmin
        self.out_offset = -128 if t.code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED else 0
        shape = node.values[x].shape
        self.rows, self.cols = int(np.prod(shape[:-1], dtype=np.int64)), shape[-1]
        self.label = "int tables"

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        from .kernels_quant import softmax

        x = array(self.x).reshape(self.rows, self.cols)
        out = array(self.out).reshape(self.rows, self.cols)
        return bound_call(softmax, x, self.contributions, self.exps, self.used, self.offset, self.out_offset, out)


class FloatSoftmax(Step):
    """Float32 SOFTMAX along the last axis in one compiled pass (float64 inside, like the reference)."""

    def __init__(self, node: PlanNode) -> None:
        x = node.x
        super().__init__(node.index, OperationCode.SOFTMAX, (x,), (node.out,))
        self.x, self.out = x, node.out
        self.beta = as_float32(node.ctx.scalar(1))
        shape = node.values[x].shape
        self.rows, self.cols = int(np.prod(shape[:-1], dtype=np.int64)), shape[-1]
        self.label = "float64 inside"

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        from .kernels_float import softmax

        x = array(self.x).reshape(self.rows, self.cols)
        out = array(self.out).reshape(self.rows, self.cols)
        return bound_call(softmax, x, self.beta, out)


def _softmax(node: PlanNode) -> Step:
    """Along the last axis: compiled (quantized: when the integer kernel takes beta x input scale);
    along another axis, or a multiplier the kernel refuses: the reference kernel."""
    ctx, x = node.ctx, node.values[node.x]
    rank = len(x.shape)
    axis = int(ctx.scalar(2)) if ctx.num_inputs == 3 and not ctx.is_omitted(2) else -1
    if axis % rank == rank - 1:
        if not x.quantized:
            return FloatSoftmax(node)
        multiplier = quantized_input_multiplier(ctx.input_type(0).scale, ctx.scalar(1))
        if multiplier is not None:
            return QuantSoftmax(node, *multiplier)
    return Delegate(node)


register_fast(OperationCode.SOFTMAX, data_inputs=(0,), build=_softmax)
