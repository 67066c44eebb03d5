"""HEATMAP_MAX_KEYPOINT: the most likely keypoint location in each heatmap, refined to sub-cell precision
and mapped into its box (Mask R-CNN keypoint head).

Inputs: 0 the heatmaps, [num_boxes, size, size, num_keypoints] (NCHW: [num_boxes, num_keypoints, size,
size]; size >= 2); 1 the boxes, [num_boxes, 4] (x1, y1, x2, y2); 2 the layout flag (BOOL, true: NCHW).
Outputs: 0 the keypoint scores [num_boxes, num_keypoints] of the heatmap type (8-bit: its own scale and
zero point); 1 the keypoints [num_boxes, num_keypoints, 2] as (x, y), of the boxes' type. The 8-bit
heatmap types take and give TENSOR_QUANT16_ASYMM boxes and keypoints with scale 0.125, zero point 0.

As NNAPI's CPU reference, in float32 (float16 and 8-bit data converted to float32 first, results
rounded or quantized once): the first maximum of each heatmap; the 3 x 3 neighbourhood around it
(mirrored at the border: index -1 reads 1, index size reads size - 2); a second-order Taylor expansion
there, whose stationary point is the correction delta = A^-1 b (A the Hessian, b minus the gradient,
by central differences), kept at 0 when |det A| < atol + rtol * A00 * A11 (1e-5 each; 1e-3 for
float16), scaled down to at most 1.5 cells in either direction; the score is the expansion's value at
delta, and the keypoint is box start + (cell + delta + 0.5) / size * box extent. Boxes with x2 < x1
or y2 < y1 fail the execution (OP_FAILED).
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._boxes import check_box_quantization, from_float32, invalid_boxes, to_float32
from ._fp_errors import ignoring_fp_errors
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8, QUANT8_TYPES
from .registry import register

HEATMAPS, BOXES, LAYOUT = 0, 1, 2
SCORES, KEYPOINTS = 0, 1
_F32 = np.float32
_FLT_MAX = np.finfo(np.float32).max


def _first_maximum(maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index, value) of the first maximum of each row of [..., cells] float32 maps, as a scan from
    -FLT_MAX that takes a value only when strictly greater (NaN never taken; none: index 0, -FLT_MAX)."""
    candidates = np.where(np.isnan(maps) | (maps <= -_FLT_MAX), -np.inf, maps)
    index = np.argmax(candidates, axis=-1)
    value = np.take_along_axis(candidates, index[..., None], axis=-1)[..., 0]
    none = value == -np.inf
    return np.where(none, 0, index), np.where(none, -_FLT_MAX, value).astype(_F32)


def _refine(grid: np.ndarray, score: np.ndarray, atol: float, rtol: float
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(delta x, delta y, refined score) from [..., 3, 3] float32 neighbourhoods, NNAPI's solveForDelta."""
    g = [[grid[..., r, c] for c in range(3)] for r in range(3)]
    two, four = _F32(2), _F32(4)
    b0 = -(g[1][2] - g[1][0]) / two
    b1 = -(g[2][1] - g[0][1]) / two
    a00 = g[1][0] - two * g[1][1] + g[1][2]
    a01 = (g[2][2] - g[2][0] - g[0][2] + g[0][0]) / four
    a11 = g[0][1] - two * g[1][1] + g[2][1]
    cross = a00 * a11
    det = cross - a01 * a01
    invertible = ~(np.abs(det) < (_F32(atol) + _F32(rtol) * cross))
    d0 = (a11 * b0 - a01 * b1) / det
    d1 = (a00 * b1 - a01 * b0) / det
    largest = np.maximum(np.abs(d0), np.abs(d1))
    too_far = (np.abs(d0) > _F32(1.5)) | (np.abs(d1) > _F32(1.5))
    shrink = np.where(too_far, _F32(1.5) / largest, _F32(1))
    d0 = np.where(too_far, d0 * shrink, d0)
    d1 = np.where(too_far, d1 * shrink, d1)
    refined = (g[1][1] - b0 * d0 - b1 * d1
               + ((a00 * d0 + a01 * d1) * d0 + (a01 * d0 + a11 * d1) * d1) / two)
    zero = _F32(0)
    return (np.where(invertible, d0, zero), np.where(invertible, d1, zero),
            np.where(invertible, refined, score).astype(_F32))


def heatmap_max_keypoint(heatmaps: np.ndarray, boxes: np.ndarray, atol: float, rtol: float
                         ) -> tuple[np.ndarray, np.ndarray]:
    """(scores [n, k], keypoints [n, k, 2]) in float32 from NHWC float32 heatmaps and float32 boxes."""
    n, size, _, k = heatmaps.shape
    maps = heatmaps.transpose(0, 3, 1, 2).reshape(n, k, size * size)
    index, score = _first_maximum(maps)
    row, col = index // size, index % size
    # The 3 x 3 neighbourhood, mirrored at the borders.
    offsets = np.arange(-1, 2)
    rows = row[..., None] + offsets
    cols = col[..., None] + offsets
    rows = np.where(rows < 0, 1, np.where(rows >= size, size - 2, rows))
    cols = np.where(cols < 0, 1, np.where(cols >= size, size - 2, cols))
    flat = rows[..., :, None] * size + cols[..., None, :]
    grid = np.take_along_axis(maps, flat.reshape(n, k, 9), axis=-1).reshape(n, k, 3, 3)
    dx, dy, score = _refine(grid, score, atol, rtol)
    x1, y1, x2, y2 = (boxes[:, i, None] for i in range(4))
    size_f = _F32(size)
    x = ((col.astype(_F32) + dx) + _F32(0.5)) / size_f * (x2 - x1) + x1
    y = ((row.astype(_F32) + dy) + _F32(0.5)) / size_f * (y2 - y1) + y1
    return score, np.stack([x, y], axis=-1).astype(_F32)


@register
class HeatmapMaxKeypoint(Operation):
    code = OperationCode.HEATMAP_MAX_KEYPOINT
    supported_types = FLOAT_AND_QUANT8

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(3, 2)
        ctx.check_input_type(HEATMAPS, self.supported_types)
        code = ctx.input_code(HEATMAPS)
        box_code = OperandCode.TENSOR_QUANT16_ASYMM if code in QUANT8_TYPES else code
        ctx.check_input_type(BOXES, box_code)
        ctx.check_input_type(LAYOUT, OperandCode.BOOL)
        ctx.check_output_type(SCORES, code)
        ctx.check_output_type(KEYPOINTS, box_code)
        ctx.check_input_rank(HEATMAPS, 4)
        ctx.check_input_rank(BOXES, 2)
        if code in QUANT8_TYPES:
            check_box_quantization(ctx, input=BOXES)
            check_box_quantization(ctx, output=KEYPOINTS, what="keypoints")

    def _shapes(self, ctx: OperationContext, heatmaps: Shape, boxes: Shape) -> list[Shape]:
        nchw = bool(ctx.scalar(LAYOUT))
        ctx.check(len(heatmaps) == 4, f"rank {len(heatmaps)} not supported (expected 4)", input=HEATMAPS)
        ctx.check(len(boxes) == 2, f"rank {len(boxes)} not supported (expected 2)", input=BOXES)
        n, height, width, k = (heatmaps[0], heatmaps[2], heatmaps[3], heatmaps[1]) if nchw else heatmaps
        ctx.check(height == width and width >= 2,
                  f"heatmaps must be square and at least 2 x 2, got {height} x {width}", input=HEATMAPS)
        ctx.check(tuple(boxes) == (n, 4), f"boxes must have shape [{n}, 4] for {n} heatmaps, got {list(boxes)}",
                  input=BOXES)
        return [(n, k), (n, k, 2)]

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return self._shapes(ctx, ctx.input_shape(HEATMAPS), ctx.input_shape(BOXES))

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        heatmaps, boxes = ctx.input(HEATMAPS), ctx.input(BOXES)
        self._shapes(ctx, heatmaps.shape, boxes.shape)
        if bool(ctx.scalar(LAYOUT)):
            heatmaps = heatmaps.transpose(0, 2, 3, 1)
        code = ctx.input_code(HEATMAPS)
        maps = to_float32(heatmaps, ctx.input_type(HEATMAPS))
        real_boxes = to_float32(boxes, ctx.input_type(BOXES))
        bad = np.flatnonzero(invalid_boxes(real_boxes))
        if bad.size:
            raise ctx.fail(f"box {int(bad[0])} ({boxes[bad[0]].tolist()}) has x2 < x1 or y2 < y1", input=BOXES)
        tol = 1e-3 if code == OperandCode.TENSOR_FLOAT16 else 1e-5
        scores, keypoints = ignoring_fp_errors(heatmap_max_keypoint, maps, real_boxes, tol, tol)
        return [from_float32(scores, ctx.output_type(SCORES)), from_float32(keypoints, ctx.output_type(KEYPOINTS))]

