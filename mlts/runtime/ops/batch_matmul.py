"""BATCH_MATMUL: the matrix product of each pair of slices of two tensors (NNAPI feature level 6).

Inputs: 0 x [..., r_x, c_x] and 1 y [..., r_y, c_y] (the same type and rank, 2 to 4, and the same
batch dimensions), 2 adj_x and 3 adj_y (optional BOOL scalars, default false: transpose the slices
of x / y first). Output [..., r_o, c_o] with r_o = c_x if adj_x else r_x, c_o = r_y if adj_y else c_y,
of the inputs' type.

Types are NNAPI's list: float32, float16, int32 and quant8 asymm SIGNED only (NNAPI does not allow
TENSOR_QUANT8_ASYMM here). Each operand keeps its own scale and zero point; the quantized kernel is
NNAPI's integer one: int32 sums of (x - zp_x)(y - zp_y), rescaled by the fixed-point form of
scale_x * scale_y (a float32 product) / scale_out, plus zp_out, clamped to [-128, 127] (NNAPI has no
fused activation here). TENSOR_INT32 products and sums wrap around like the C int32 they are.
float16 is computed in float32 and rounded once.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._float32 import as_float32
from .base import Operation, OperationContext, Shape
from .common import FLOAT_TYPES
from .quant import QUANT_RANGE, multiply_by_quantized_multiplier, quantize_multiplier, saturate_int32
from .registry import register

BATCH_MATMUL_TYPES = FLOAT_TYPES | {OperandCode.TENSOR_INT32, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED}


def output_multiplier(scale_x: float, scale_y: float, scale_out: float) -> tuple[int, int]:
    """NNAPI's (multiplier, shift) for the output rescale: the float32 product of the input scales,
    widened to double, over the output scale."""
    product = float(np.float32(scale_x) * np.float32(scale_y))
    return quantize_multiplier(product / as_float32(scale_out))


def _adjoint_flags(ctx: OperationContext) -> tuple[bool, bool]:
    return bool(ctx.scalar(2, False)), bool(ctx.scalar(3, False))


def _matrix_dims(shape: Shape, adjoint: bool) -> tuple[int, int]:
    """(rows, columns) of the slices as they enter the product."""
    rows, cols = shape[-2], shape[-1]
    return (cols, rows) if adjoint else (rows, cols)


@register
class BatchMatmul(Operation):
    code = OperationCode.BATCH_MATMUL
    supported_types = BATCH_MATMUL_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(4, 1)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_input_type(1, ctx.input_code(0))
        ctx.check_input_type(2, OperandCode.BOOL, optional=True)
        ctx.check_input_type(3, OperandCode.BOOL, optional=True)
        ctx.check_output_type(0, ctx.input_code(0))
        for i in (0, 1):
            ctx.check_input_rank(i, min_rank=2, max_rank=4)
        rank_x, rank_y = ctx.input_rank(0), ctx.input_rank(1)
        if rank_x is not None and rank_y is not None:
            ctx.check(rank_x == rank_y, f"rank {rank_y} differs from input 0's rank {rank_x}", input=1)
        if ctx.input_code(0) == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED:
            ctx.check(ctx.output_type(0).scale > 0, "quantized output must have a positive scale", output=0)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        x_shape, y_shape = ctx.input_shape(0), ctx.input_shape(1)
        for i, shape in enumerate((x_shape, y_shape)):
            ctx.check(2 <= len(shape) <= 4, f"rank {len(shape)} not supported (expected 2 to 4)", input=i)
        ctx.check(len(x_shape) == len(y_shape),
                  f"rank {len(y_shape)} differs from input 0's rank {len(x_shape)}", input=1)
        ctx.check(x_shape[:-2] == y_shape[:-2],
                  f"batch dimensions {list(y_shape[:-2])} differ from input 0's {list(x_shape[:-2])}", input=1)
        adj_x, adj_y = _adjoint_flags(ctx)
        rows, depth_x = _matrix_dims(x_shape, adj_x)
        depth_y, cols = _matrix_dims(y_shape, adj_y)
        ctx.check(depth_x == depth_y,
                  f"cannot multiply [{rows}, {depth_x}] by [{depth_y}, {cols}] slices "
                  f"(adj_x={adj_x}, adj_y={adj_y})", input=1)
        return [tuple(x_shape[:-2]) + (rows, cols)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        (out_shape,) = self.prepare(ctx)
        adj_x, adj_y = _adjoint_flags(ctx)
        x, y = ctx.input(0), ctx.input(1)
        t_x, t_y, t_out = ctx.input_type(0), ctx.input_type(1), ctx.output_type(0)
        code = t_x.code
        if code in FLOAT_TYPES:
            work = np.float32 if code == OperandCode.TENSOR_FLOAT16 else np.float64
            x, y = x.astype(work), y.astype(work)
        else:
            x, y = x.astype(np.int64), y.astype(np.int64)
            if code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED:
                x, y = x - t_x.zero_point, y - t_y.zero_point
        if adj_x:
            x = np.swapaxes(x, -1, -2)
        if adj_y:
            y = np.swapaxes(y, -1, -2)
        product = np.matmul(x, y)
        if code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED:
            product = self._requantize(product, t_x.scale, t_y.scale, t_out)
        return [np.ascontiguousarray(product.astype(t_out.dtype).reshape(out_shape))]

    @staticmethod
    def _requantize(acc: np.ndarray, scale_x: float, scale_y: float, t_out) -> np.ndarray:
        multiplier, shift = output_multiplier(scale_x, scale_y, t_out.scale)
        scaled = multiply_by_quantized_multiplier(saturate_int32(acc), multiplier, shift) + t_out.zero_point
        lo, hi = QUANT_RANGE[t_out.code]
        return np.clip(scaled, lo, hi)
