"""ROI_POOLING: the maximum of a feature map over each bin of each region of interest (Fast R-CNN).

Inputs as ROI_ALIGN's (roi_align.py) without the sampling ratios: 0 the 4-D feature map, 1 the boxes
(x1, y1, x2, y2; TENSOR_QUANT16_ASYMM with scale 0.125 and zero point 0 for the 8-bit types), 2 the
batch index of each box, 3, 4 the output height and width, 5, 6 the height and width strides, 7 the
layout flag (true: NCHW). Output: [num_rois, out_h, out_w, depth] (or NCHW) of the map's type; 8-bit
outputs keep the map's scale and zero point (values are copied, never requantized).

As NNAPI's CPU reference (float32 throughout; float16 maps compared in float32): each box is scaled by
1 / stride and its corners rounded half away from zero to whole cells, giving a region of
max(x2 - x1 + 1, 1) x max(y2 - y1 + 1, 1) cells cut into out_h x out_w bins of equal real size; bin
(i, j) covers cells [floor(i * step + y1), ceil((i + 1) * step + y1)) clipped to the map. A bin with no
cell gives 0 (the zero point for 8-bit maps). TENSOR_QUANT16_ASYMM boxes are dequantized first.
"""
from __future__ import annotations

import math

import numpy as np

from ..enums import OperationCode
from .base import OperationContext
from .common import QUANT8_TYPES
from .quant import round_half_away
from .registry import register
from .roi_align import FEATURES, OUT_HEIGHT, OUT_WIDTH, RoiOperation, scaled_region

_F32 = np.float32


def _bin_bounds(start: int, step: np.float32, count: int, limit: int) -> list[tuple[int, int]]:
    """[first, end) cells of each of `count` bins along one axis, in NNAPI's float32 arithmetic."""
    bounds = []
    for i in range(count):
        first = math.floor(step * _F32(i) + _F32(start))
        end = math.ceil(step * _F32(i + 1) + _F32(start))
        bounds.append((min(first, limit), min(end, limit)))
    return bounds


def _bin_max(window: np.ndarray, empty_value) -> np.ndarray:
    """Per channel, the maximum of an [h, w, depth] window scanned row by row as NNAPI does: the first
    value, then any greater one (so a NaN first value stays, later NaNs are passed over)."""
    if window.shape[0] == 0 or window.shape[1] == 0:
        return np.full(window.shape[2], empty_value, dtype=window.dtype)
    flat = window.reshape(-1, window.shape[2])
    if not np.issubdtype(flat.dtype, np.floating):
        return flat.max(axis=0)
    first = flat[0]
    rest = np.where(np.isnan(flat), -np.inf, flat).max(axis=0)
    return np.where(np.isnan(first) | (first >= rest), first, rest)


@register
class RoiPooling(RoiOperation):
    code = OperationCode.ROI_POOLING
    num_inputs = 8

    def check_output_quantization(self, ctx: OperationContext) -> None:
        if ctx.input_code(FEATURES) in QUANT8_TYPES:
            ctx.check_same_quantization(FEATURES, output=0)

    def kernel(self, ctx: OperationContext, feature_map: np.ndarray, r: int, roi: np.ndarray,
               strides: tuple[np.float32, np.float32], out_size: tuple[int, int], values: dict[int, object]
               ) -> np.ndarray:
        in_h, in_w = feature_map.shape[:2]
        x1, y1, x2, y2 = (round_half_away(float(v))
                          for v in scaled_region(ctx, r, roi, strides, in_h, in_w, box_scale_first=True))
        step_h = _F32(max(y2 - y1 + 1, 1)) / _F32(values[OUT_HEIGHT])
        step_w = _F32(max(x2 - x1 + 1, 1)) / _F32(values[OUT_WIDTH])
        rows = _bin_bounds(y1, step_h, out_size[0], in_h)
        cols = _bin_bounds(x1, step_w, out_size[1], in_w)
        t = ctx.input_type(FEATURES)
        empty = t.zero_point if t.code in QUANT8_TYPES else 0
        out = np.empty((len(rows), len(cols), feature_map.shape[2]), dtype=feature_map.dtype)
        for i, (h0, h1) in enumerate(rows):
            for j, (w0, w1) in enumerate(cols):
                out[i, j] = _bin_max(feature_map[h0:h1, w0:w1], empty)
        return out
