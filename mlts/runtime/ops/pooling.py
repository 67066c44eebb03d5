"""AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D: 2-D pooling over NHWC (or NCHW) 4-D tensors.

Inputs: the tensor, then either explicit paddings (left, right, top, bottom) or an implicit padding
code (SAME/VALID), strides (w, h), filter size (w, h), a fused activation and an optional NCHW flag.
The average and L2 divisors count only the real (non-padding) elements of each window. Quantized
outputs keep the input's scale and zero point; the quantized average uses TFLite's integer rounding.
L2_POOL_2D exists for float types only.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperationCode
from ._pool_common import pool_output_shape, run_pool, validate_pool
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8, FLOAT_TYPES
from .registry import register


class _Pool(Operation):
    kind = ""

    def validate(self, ctx: OperationContext) -> None:
        validate_pool(ctx, self.supported_types)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [pool_output_shape(ctx)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        return [run_pool(ctx, self.kind)]


@register
class AveragePool2D(_Pool):
    code = OperationCode.AVERAGE_POOL_2D
    supported_types = FLOAT_AND_QUANT8
    kind = "avg"


@register
class MaxPool2D(_Pool):
    code = OperationCode.MAX_POOL_2D
    supported_types = FLOAT_AND_QUANT8
    kind = "max"


@register
class L2Pool2D(_Pool):
    code = OperationCode.L2_POOL_2D
    supported_types = FLOAT_TYPES
    kind = "l2"
