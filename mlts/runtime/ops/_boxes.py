"""Axis-aligned box arithmetic shared by the detection operations (a private helper module, not an op).

NNAPI's box kernels (AXIS_ALIGNED_BBOX_TRANSFORM, BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS, ...) work on
float32 whatever the operand type: float16 and quantized tensors are converted to float32, the
arithmetic is single precision, and the result is converted back once. Everything here therefore
takes and returns float32 arrays and keeps NNAPI's order of operations, so results round as NNAPI's do.
Boxes are [x1, y1, x2, y2] in the last axis; a valid box has x1 <= x2 and y1 <= y2.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..enums import OperandCode
from ..operand_type import OperandType
from .base import OperationContext
from .quant import QUANT_RANGE, round_half_away_array

#: quantized box coordinates (TENSOR_QUANT16_ASYMM / _SYMM) have this scale and zero point 0
BOX_SCALE = 0.125
#: BOX_WITH_NMS_LIMIT's NMS kernels (input 5)
NMS_HARD, NMS_LINEAR, NMS_GAUSSIAN = 0, 1, 2

F32 = np.float32

#: how a suppression step changes the scores of the remaining candidates: given their IoU with the
#: box just selected and their scores, (new scores, which candidates stay)
Suppression = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


# -- conversions --------------------------------------------------------------------------------
def to_float32(x: np.ndarray, t: OperandType) -> np.ndarray:
    """A tensor's real values as float32: floats widened, quantized values (q - zeroPoint) * scale
    computed in float32 (NNAPI's convertQuantToFloat32)."""
    if t.code in (OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16):
        return np.asarray(x, dtype=F32)
    return (np.asarray(x, dtype=F32) - F32(t.zero_point)) * F32(t.scale)


def from_float32(x: np.ndarray, t: OperandType) -> np.ndarray:
    """float32 results as values of type `t`: float16 rounded once; quantized as NNAPI's
    convertFloat32ToQuant does it: round(x / scale + zeroPoint) evaluated in float32, rounded half
    away from zero and saturated to the type's range."""
    x = np.asarray(x, dtype=F32)
    if t.code in (OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16):
        return x.astype(t.dtype)
    lo, hi = QUANT_RANGE[t.code]
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = (x / F32(t.scale) + F32(t.zero_point)).astype(np.float64)  # exact: float32 in float64
        return np.clip(round_half_away_array(scaled), lo, hi).astype(t.dtype)


# -- box geometry -------------------------------------------------------------------------------
def apply_box_deltas(boxes: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """Boxes moved and resized by [dx, dy, dw, dh] deltas (broadcast against each other): the center
    moves by (dx * width, dy * height), the size is scaled by (exp(dw), exp(dh))."""
    boxes, deltas = np.asarray(boxes, dtype=F32), np.asarray(deltas, dtype=F32)
    x1, y1, x2, y2 = np.moveaxis(boxes, -1, 0)
    dx, dy, dw, dh = np.moveaxis(deltas, -1, 0)
    width, height = x2 - x1, y2 - y1
    center_x, center_y = (x1 + x2) / F32(2), (y1 + y2) / F32(2)
    with np.errstate(over="ignore", invalid="ignore"):
        new_width, new_height = np.exp(dw) * width, np.exp(dh) * height
        new_x, new_y = center_x + dx * width, center_y + dy * height
        half_w, half_h = new_width / F32(2), new_height / F32(2)
        return np.stack([new_x - half_w, new_y - half_h, new_x + half_w, new_y + half_h], axis=-1).astype(F32)


def clip_boxes(boxes: np.ndarray, image_height: np.ndarray, image_width: np.ndarray) -> np.ndarray:
    """Boxes clipped to [0, width] x [0, height]; the image sizes broadcast against boxes[..., 0]."""
    boxes = np.asarray(boxes, dtype=F32)
    h = np.asarray(image_height, dtype=F32)
    w = np.asarray(image_width, dtype=F32)
    zero = F32(0)
    x1, y1, x2, y2 = np.moveaxis(boxes, -1, 0)
    return np.stack([np.minimum(np.maximum(x1, zero), w), np.minimum(np.maximum(y1, zero), h),
                     np.minimum(np.maximum(x2, zero), w), np.minimum(np.maximum(y2, zero), h)], axis=-1)


def invalid_boxes(boxes: np.ndarray) -> np.ndarray:
    """Which boxes break x1 <= x2 and y1 <= y2 (NaN coordinates included)."""
    boxes = np.asarray(boxes)
    return ~((boxes[..., 0] <= boxes[..., 2]) & (boxes[..., 1] <= boxes[..., 3]))


def iou_with(boxes: np.ndarray, box: np.ndarray) -> np.ndarray:
    """Intersection over union of each of `boxes` ([n, 4]) with one `box`, in float32."""
    boxes, box = np.asarray(boxes, dtype=F32), np.asarray(box, dtype=F32)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    box_area = (box[2] - box[0]) * (box[3] - box[1])
    width = np.maximum(np.minimum(boxes[:, 2], box[2]) - np.maximum(boxes[:, 0], box[0]), F32(0))
    height = np.maximum(np.minimum(boxes[:, 3], box[3]) - np.maximum(boxes[:, 1], box[1]), F32(0))
    intersection = width * height
    with np.errstate(divide="ignore", invalid="ignore"):
        return intersection / (area + box_area - intersection)


# -- non-maximum suppression --------------------------------------------------------------------
def hard_suppression(iou_threshold: float) -> Suppression:
    """Plain NMS: a candidate overlapping the selected box by IoU >= threshold is dropped."""
    threshold = F32(iou_threshold)
    return lambda iou, scores: (scores, ~(iou >= threshold))


def soft_suppression(kernel: int, iou_threshold: float, sigma: float, score_threshold: float) -> Suppression:
    """Soft NMS: every candidate's score is multiplied by the kernel's factor of its IoU with the
    selected box (hard: 1 below the IoU threshold, else 0; linear: 1 below it, else 1 - IoU;
    gaussian: exp(-IoU^2 / sigma)); candidates whose new score is below `score_threshold` are dropped."""
    iou_threshold, sigma, score_threshold = F32(iou_threshold), F32(sigma), F32(score_threshold)
    one = F32(1)

    def factor(iou: np.ndarray) -> np.ndarray:
        if kernel == NMS_HARD:
            return np.where(iou < iou_threshold, one, F32(0))
        if kernel == NMS_LINEAR:
            return np.where(iou < iou_threshold, one, one - iou)
        if kernel == NMS_GAUSSIAN:
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.exp(F32(-1) * iou * iou / sigma)
        raise ValueError(f"unknown NMS kernel {kernel}")

    def suppress(iou: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore", over="ignore"):
            new_scores = (scores * factor(iou)).astype(F32)
        return new_scores, ~(new_scores < score_threshold)

    return suppress


def greedy_nms(scores: np.ndarray, boxes: np.ndarray, candidates: np.ndarray, max_detections: int,
               suppress: Suppression) -> np.ndarray:
    """Greedy NMS over `candidates` (indices into `scores` and `boxes`): repeatedly select the best
    remaining candidate and let `suppress` rescore or drop the others, until none remain or
    `max_detections` are selected (negative: no limit). Returns the selected indices in selection order;
    `scores` (float32) is updated in place with the rescored values.

    Ties and order follow NNAPI's in-place kernel exactly: of equal best scores the first in the
    current arrangement wins, and a dropped candidate's slot is refilled from the end of the pending
    list (so the survivors in the tail come forward in reverse order)."""
    pending = np.array(candidates, dtype=np.int64)
    limit = len(pending) if max_detections < 0 else max_detections
    selected, end = 0, len(pending)
    while selected < end and selected < limit:
        best = selected + int(np.argmax(scores[pending[selected:end]]))
        pending[selected], pending[best] = pending[best], pending[selected]
        others = pending[selected + 1:end]
        new_scores, kept = suppress(iou_with(boxes[others], boxes[pending[selected]]), scores[others])
        scores[others] = new_scores
        n_kept = int(np.count_nonzero(kept))
        head = others[:n_kept].copy()
        head[~kept[:n_kept]] = others[n_kept:][kept[n_kept:]][::-1]
        pending[selected + 1:selected + 1 + n_kept] = head
        selected += 1
        end = selected + n_kept
    return pending[:selected]


# -- validation shared by the box operations ----------------------------------------------------
def check_box_quantization(ctx: OperationContext, *, input: int | None = None, output: int | None = None,
                           what: str = "box coordinates") -> None:
    """Quantized boxes and image sizes: scale 0.125 and zero point 0, as NNAPI requires."""
    t = ctx.input_type(input) if input is not None else ctx.output_type(output)
    if t is None:
        return
    ctx.check(F32(t.scale) == F32(BOX_SCALE) and t.zero_point == 0,
              f"{t.code.name} {what} must have scale {BOX_SCALE:g} and zeroPoint 0 "
              f"(got scale {t.scale:g}, zeroPoint {t.zero_point})", input=input, output=output)


def check_output_quantization_like_input(ctx: OperationContext, i: int, output: int) -> None:
    """A quantized output that must keep input `i`'s scale and zero point (NNAPI's output scores)."""
    a, b = ctx.input_type(i), ctx.output_type(output)
    if a is None or a.code != b.code:
        return
    ctx.check(F32(a.scale) == F32(b.scale) and a.zero_point == b.zero_point,
              f"quantization (scale {b.scale:g}, zeroPoint {b.zero_point}) must equal input {i}'s "
              f"(scale {a.scale:g}, zeroPoint {a.zero_point})", output=output)

