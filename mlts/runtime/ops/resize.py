"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR: resize the spatial dimensions of a 4-D image tensor.

Inputs: 0 the NHWC (or NCHW) tensor; 1 and 2 either the output width and height (INT32 scalars) or
width and height scales (FLOAT32 scalars; FLOAT16 for a TENSOR_FLOAT16 input), the output size then
being floor(in * scale) computed in float32; 3 optional NCHW flag (BOOL); 4 optional align_corners and
5 optional half_pixel_centers (BOOL, NNAPI 1.3; not both true). RESIZE_BILINEAR takes 3 to 6 inputs,
RESIZE_NEAREST_NEIGHBOR 4 to 6. Quantized outputs keep the input's scale and zero point.

Both kernels follow NNAPI's CPU reference in float32, operation by operation, so that the chosen
source pixels and the rounding match it:
- source coordinate of output index i: i * s, or (i + 0.5) * s (- 0.5 for bilinear) with half-pixel
  centers, where s = in / out, or (in - 1) / (out - 1) with align_corners and out > 1;
- bilinear (TFLite's reference ResizeBilinear, which NNAPI calls for every type): the two neighbours
  floor(v) clamped at 0 and ceil(v) clamped at in - 1, weighted by v - floor; the four products
  summed in a fixed order; 8-bit results rounded half up, floor(value + 0.5f). That is TFLite's
  static_cast<T>(value + 0.5f) for uint8; for int8 that cast truncates toward zero, one step above
  this where value + 0.5 is negative and not whole (-3 + 0.5 -> -2 there, -3 here): within NNAPI's
  one-step tolerance, and it keeps int8 results equal to uint8 ones up to the 128 offset;
- nearest neighbour (NNAPI's own kernel): floor(v), or round half away from zero with align_corners,
  clamped to [0, in - 1]; values are copied, never requantized.
"""
from __future__ import annotations

import math

import numpy as np

from ..enums import OperandCode, OperationCode
from ._fp_errors import ignoring_fp_errors
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8
from .quant import INT32_MAX, round_half_away_array
from .registry import register

WIDTH, HEIGHT, LAYOUT, ALIGN_CORNERS, HALF_PIXEL_CENTERS = 1, 2, 3, 4, 5
MAX_INPUTS = 6

#: the scale scalars' type for each input tensor type (the size scalars are INT32 for all)
SCALE_TYPE = {
    OperandCode.TENSOR_FLOAT32: OperandCode.FLOAT32,
    OperandCode.TENSOR_FLOAT16: OperandCode.FLOAT16,
    OperandCode.TENSOR_QUANT8_ASYMM: OperandCode.FLOAT32,
    OperandCode.TENSOR_QUANT8_ASYMM_SIGNED: OperandCode.FLOAT32,
}

_F32_HALF = np.float32(0.5)
_F32_ONE = np.float32(1.0)


# -- parameters -----------------------------------------------------------------------------------
def _flag(ctx: OperationContext, i: int) -> bool:
    """An optional trailing BOOL input; false when the operation has fewer inputs."""
    return bool(ctx.scalar(i)) if ctx.num_inputs > i else False


def _flags(ctx: OperationContext) -> tuple[bool, bool, bool]:
    """(nchw, align_corners, half_pixel_centers), checked for the forbidden combination."""
    align, half = _flag(ctx, ALIGN_CORNERS), _flag(ctx, HALF_PIXEL_CENTERS)
    ctx.check(not (align and half), "align_corners and half_pixel_centers cannot both be true",
              input=HALF_PIXEL_CENTERS)
    return _flag(ctx, LAYOUT), align, half


def _check_size_value(ctx: OperationContext, i: int, value) -> None:
    what = "width" if i == WIDTH else "height"
    if isinstance(value, float):
        # not (value > 0) also catches NaN
        ctx.check(value > 0 and math.isfinite(value), f"{what} scale must be a positive number, got {value}",
                  input=i)
    else:
        ctx.check(value > 0, f"output {what} must be > 0, got {value}", input=i)


def _output_extent(ctx: OperationContext, i: int, in_size: int) -> int:
    """Output width (i = WIDTH) or height (i = HEIGHT): the INT32 value, or floor(in * scale) in float32."""
    value = ctx.scalar(i)
    _check_size_value(ctx, i, value)
    if ctx.input_code(i) == OperandCode.INT32:
        return int(value)
    product = np.float32(in_size) * np.float32(value)
    what = "width" if i == WIDTH else "height"
    ctx.check(bool(product < INT32_MAX), f"{what} scale {value} gives an output {what} beyond INT32", input=i)
    size = int(np.floor(product))
    ctx.check(size > 0, f"{what} scale {value} gives output {what} floor({in_size} * {value}) = {size}", input=i)
    return size


def _nhwc_dims(ctx: OperationContext, shape: Shape, nchw: bool) -> tuple[int, int, int, int]:
    ctx.check(len(shape) == 4, f"rank {len(shape)} not supported (expected 4)", input=0)
    n, c, h, w = shape if nchw else (shape[0], shape[3], shape[1], shape[2])
    # Only the batch dimension may be zero (a zero-sized input at run time).
    ctx.check(h > 0 and w > 0 and c > 0, f"height, width and depth must be > 0, got shape {list(shape)}", input=0)
    return n, h, w, c


# -- kernels (NHWC) -------------------------------------------------------------------------------
def _source_scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    """NNAPI's float32 ratio of input to output coordinates."""
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def _bilinear_axis(in_size: int, out_size: int, align_corners: bool, half_pixel: bool
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower index, upper index, float32 fraction) of each output position along one axis."""
    scale = _source_scale(in_size, out_size, align_corners)
    position = np.arange(out_size, dtype=np.float32)
    source = (position + _F32_HALF) * scale - _F32_HALF if half_pixel else position * scale
    lower = np.maximum(np.floor(source).astype(np.int64), 0)
    upper = np.minimum(np.ceil(source).astype(np.int64), in_size - 1)
    return lower, upper, source - lower.astype(np.float32)


def resize_bilinear_nhwc(x: np.ndarray, out_h: int, out_w: int, align_corners: bool, half_pixel: bool
                         ) -> np.ndarray:
    """TFLite reference bilinear resize of an NHWC tensor of any supported dtype."""
    y0, y1, dy = _bilinear_axis(x.shape[1], out_h, align_corners, half_pixel)
    x0, x1, dx = _bilinear_axis(x.shape[2], out_w, align_corners, half_pixel)
    dy = dy[None, :, None, None]
    dx = dx[None, None, :, None]
    values = x.astype(np.float32, copy=False)
    rows0, rows1 = values[:, y0], values[:, y1]

    def blend() -> np.ndarray:
        # The reference's sum, term by term and left to right, in float32.
        return (rows0[:, :, x0] * (_F32_ONE - dy) * (_F32_ONE - dx)
                + rows1[:, :, x0] * dy * (_F32_ONE - dx)
                + rows0[:, :, x1] * (_F32_ONE - dy) * dx
                + rows1[:, :, x1] * dy * dx)

    result = ignoring_fp_errors(blend)
    if np.issubdtype(x.dtype, np.floating):
        return result.astype(x.dtype)
    # Round half up after the float32 addition (see the module docstring for int8).
    lo, hi = np.iinfo(x.dtype).min, np.iinfo(x.dtype).max
    return np.clip(np.floor(result + _F32_HALF), lo, hi).astype(x.dtype)


def _nearest_axis(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """The source index of each output position along one axis (NNAPI's nearest-neighbour kernel)."""
    scale = _source_scale(in_size, out_size, align_corners)
    position = np.arange(out_size, dtype=np.float32)
    source = (position + _F32_HALF) * scale if half_pixel else position * scale
    index = round_half_away_array(source.astype(np.float64)) if align_corners else np.floor(source)
    return np.clip(index.astype(np.int64), 0, in_size - 1)


def resize_nearest_nhwc(x: np.ndarray, out_h: int, out_w: int, align_corners: bool, half_pixel: bool
                        ) -> np.ndarray:
    rows = _nearest_axis(x.shape[1], out_h, align_corners, half_pixel)
    cols = _nearest_axis(x.shape[2], out_w, align_corners, half_pixel)
    return x[:, rows][:, :, cols]


# -- operations -----------------------------------------------------------------------------------
class _Resize(Operation):
    supported_types = FLOAT_AND_QUANT8
    min_inputs = 0

    def kernel(self, x: np.ndarray, out_h: int, out_w: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
        raise NotImplementedError

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(range(self.min_inputs, MAX_INPUTS + 1), 1)
        ctx.check_input_type(0, self.supported_types)
        code = ctx.input_code(0)
        # The height operand decides between the size and the scale form; the width must match it.
        ctx.check_input_type(HEIGHT, (OperandCode.INT32, SCALE_TYPE[code]))
        ctx.check_input_type(WIDTH, ctx.input_code(HEIGHT))
        for i in range(LAYOUT, ctx.num_inputs):
            ctx.check_input_type(i, OperandCode.BOOL)
        ctx.check_input_rank(0, 4)
        # NNAPI: the output has the input's type, and for 8-bit types its scale and zero point.
        ctx.check_same_quantization(0, output=0)
        for i in (WIDTH, HEIGHT):
            value = ctx.scalar_if_known(i)
            if value is not None:
                _check_size_value(ctx, i, value)
        known = {i: ctx.scalar_if_known(i) for i in range(ALIGN_CORNERS, ctx.num_inputs)}
        ctx.check(not (known.get(ALIGN_CORNERS) and known.get(HALF_PIXEL_CENTERS)),
                  "align_corners and half_pixel_centers cannot both be true", input=HALF_PIXEL_CENTERS)

    def _output_shape(self, ctx: OperationContext, shape: Shape) -> tuple[Shape, tuple[int, int]]:
        nchw, _, _ = _flags(ctx)
        n, h, w, c = _nhwc_dims(ctx, shape, nchw)
        out_h, out_w = _output_extent(ctx, HEIGHT, h), _output_extent(ctx, WIDTH, w)
        return ((n, c, out_h, out_w) if nchw else (n, out_h, out_w, c)), (out_h, out_w)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [self._output_shape(ctx, ctx.input_shape(0))[0]]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        nchw, align, half = _flags(ctx)
        out_shape, (out_h, out_w) = self._output_shape(ctx, x.shape)
        out_dtype = ctx.output_type(0).dtype
        if x.size == 0:
            return [np.zeros(out_shape, dtype=out_dtype)]
        nhwc = x.transpose(0, 2, 3, 1) if nchw else x
        out = self.kernel(nhwc, out_h, out_w, align, half)
        if nchw:
            out = out.transpose(0, 3, 1, 2)
        return [np.ascontiguousarray(out, dtype=out_dtype)]


@register
class ResizeBilinear(_Resize):
    code = OperationCode.RESIZE_BILINEAR
    min_inputs = 3

    def kernel(self, x: np.ndarray, out_h: int, out_w: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
        return resize_bilinear_nhwc(x, out_h, out_w, align_corners, half_pixel)


@register
class ResizeNearestNeighbor(_Resize):
    code = OperationCode.RESIZE_NEAREST_NEIGHBOR
    min_inputs = 4   # the layout flag is required here (NNAPI 1.2 introduced the operation with it)

    def kernel(self, x: np.ndarray, out_h: int, out_w: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
        return resize_nearest_nhwc(x, out_h, out_w, align_corners, half_pixel)
