"""CAST: element-wise type conversion.

NNAPI converts between TENSOR_FLOAT16, TENSOR_FLOAT32, TENSOR_INT32 and TENSOR_QUANT8_ASYMM in any
direction. Quantization parameters play no part: a TENSOR_QUANT8_ASYMM value is cast as its raw
stored integer, and casting to TENSOR_QUANT8_ASYMM clamps to [0, 255] before converting. Conversions
to integers truncate toward zero (C static_cast); out-of-range values saturate and NaN becomes 0
(C leaves those undefined). TENSOR_BOOL8, TENSOR_QUANT8_ASYMM_SIGNED, TENSOR_QUANT8_SYMM,
TENSOR_QUANT16_ASYMM and TENSOR_QUANT16_SYMM only support the identity cast (a plain copy).
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from .base import Operation, OperationContext, Shape
from .registry import register

CONVERTIBLE = frozenset({OperandCode.TENSOR_FLOAT16, OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_INT32,
                         OperandCode.TENSOR_QUANT8_ASYMM})
IDENTITY_ONLY = frozenset({OperandCode.TENSOR_BOOL8, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
                           OperandCode.TENSOR_QUANT8_SYMM, OperandCode.TENSOR_QUANT16_ASYMM,
                           OperandCode.TENSOR_QUANT16_SYMM})
_INT_RANGE = {OperandCode.TENSOR_INT32: (-(2**31), 2**31 - 1), OperandCode.TENSOR_QUANT8_ASYMM: (0, 255)}


@register
class Cast(Operation):
    code = OperationCode.CAST
    supported_types = CONVERTIBLE | IDENTITY_ONLY

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(1, 1)
        ctx.check_input_type(0, self.supported_types)
        code = ctx.input_code(0)
        if code in CONVERTIBLE:
            ctx.check_output_type(0, CONVERTIBLE)
        else:
            ctx.check(ctx.output_type(0).code == code,
                      f"{code.name} can only be cast to itself, not to {ctx.output_type(0).code.name}", output=0)
        t_in, t_out = ctx.input_type(0), ctx.output_type(0)
        if t_in.dimensions and t_out.dimensions:  # empty: rank not known yet
            ctx.check(len(t_in.dimensions) == len(t_out.dimensions),
                      f"output rank {len(t_out.dimensions)} differs from input rank {len(t_in.dimensions)}", output=0)
            ctx.check(all(a == b or a == 0 or b == 0 for a, b in zip(t_in.dimensions, t_out.dimensions)),
                      f"output dimensions {list(t_out.dimensions)} differ from input dimensions "
                      f"{list(t_in.dimensions)}", output=0)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [ctx.input_shape(0)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        out_code = ctx.output_type(0).code
        dtype = ctx.output_type(0).dtype
        if ctx.input_code(0) == out_code:
            return [x.astype(dtype, copy=True)]
        if out_code in _INT_RANGE:
            lo, hi = _INT_RANGE[out_code]
            if x.dtype.kind == "f":
                wide = x.astype(np.float64)
                wide = np.where(np.isnan(wide), 0.0, np.trunc(wide))
            else:
                wide = x.astype(np.int64)
            return [np.clip(wide, lo, hi).astype(dtype)]
        # To float: exact for 8-bit values, one round-to-nearest for int32 / float32 -> float16
        # (beyond float16's range that is +-inf).
        with np.errstate(over="ignore"):
            return [x.astype(dtype)]
