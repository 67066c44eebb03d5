"""DETECTION_POSTPROCESSING: TensorFlow Lite's SSD post-processing: decode box deltas against anchors,
select detections with non-maximum suppression, and emit a fixed-size list per batch.

Inputs: 0 class scores [batches, num_anchors, num_classes] (class 0 is the background; num_classes > 1);
1 box deltas [batches, num_anchors, length >= 4] (dy, dx, dh, dw, then ignored values); 2 anchors
[num_anchors, 4] (y center, x center, height, width); 3..6 the y, x, h and w scales (> 0); 7 use regular
NMS (BOOL); 8 max detections (> 0); 9 max classes per detection (> 0 for fast NMS); 10 max detections per
class (> 0 for regular NMS); 11 score threshold (>= 0); 12 IoU threshold (>= 0); 13 whether the
background counts as a label (BOOL). Scalars 3..6, 11, 12 are FLOAT32 (FLOAT16 for TENSOR_FLOAT16
tensors). Outputs: 0 scores [batches, d], 1 boxes [batches, d, 4] (y1, x1, y2, x2), 2 classes
[batches, d] (TENSOR_INT32), 3 the number of detections per batch [batches] (TENSOR_INT32), where d is
max detections, times max classes per detection for fast NMS; entries past the count are 0.

As NNAPI's CPU reference, in float32 (float16 converted to float32 and back once):
- decode: center = anchor center + anchor size * delta / scale, size = anchor size * exp(delta / scale);
- regular NMS: for each class but the background, the anchors scoring above the threshold go through
  hard NMS (at most `max detections per class`); all survivors are ordered by score (ties keep class
  then NMS order) and the best `max detections` are kept;
- fast NMS: each anchor's best non-background score is thresholded and hard NMS keeps at most
  `max detections` anchors; each emits its `min(num_classes - 1, max classes per detection)` best
  classes (ties: lower class first);
- a class label is the class index, minus one unless the background counts as a label.
The hard NMS is NNAPI's in-place greedy kernel (the first best score wins; IoU >= threshold
suppresses), shared with BOX_WITH_NMS_LIMIT in _boxes.py.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._boxes import greedy_nms, hard_suppression
from ._fp_errors import ignoring_fp_errors
from .base import Operation, OperationContext, Shape
from .common import FLOAT_SCALAR_OF, FLOAT_TYPES
from .registry import register

SCORES, DELTAS, ANCHORS = 0, 1, 2
SCALE_Y, SCALE_X, SCALE_H, SCALE_W = 3, 4, 5, 6
USE_REGULAR_NMS, MAX_DETECTIONS, MAX_CLASSES_PER_DETECTION, MAX_DETECTIONS_PER_CLASS = 7, 8, 9, 10
SCORE_THRESHOLD, IOU_THRESHOLD, BACKGROUND_IN_LABEL = 11, 12, 13
FLOAT_SCALARS = (SCALE_Y, SCALE_X, SCALE_H, SCALE_W, SCORE_THRESHOLD, IOU_THRESHOLD)
INT_SCALARS = (MAX_DETECTIONS, MAX_CLASSES_PER_DETECTION, MAX_DETECTIONS_PER_CLASS)
BOOL_SCALARS = (USE_REGULAR_NMS, BACKGROUND_IN_LABEL)
OUT_SCORES, OUT_BOXES, OUT_CLASSES, OUT_COUNTS = 0, 1, 2, 3

_F32 = np.float32


def decode_boxes(deltas: np.ndarray, anchors: np.ndarray, scales: tuple[float, float, float, float]) -> np.ndarray:
    """[num_anchors, 4] float32 boxes (y1, x1, y2, x2) from deltas [num_anchors, >= 4] and center-size anchors."""
    scale_y, scale_x, scale_h, scale_w = (_F32(s) for s in scales)
    y, x, h, w = (anchors[:, i] for i in range(4))
    y_center = y + h * deltas[:, 0] / scale_y
    x_center = x + w * deltas[:, 1] / scale_x
    half_h = h * np.exp(deltas[:, 2] / scale_h) * _F32(0.5)
    half_w = w * np.exp(deltas[:, 3] / scale_w) * _F32(0.5)
    return np.stack([y_center - half_h, x_center - half_w, y_center + half_h, x_center + half_w], axis=-1)


def _descending(values: np.ndarray) -> np.ndarray:
    """Indices ordering `values` from the largest down, equal values kept in their order."""
    return np.argsort(-values, kind="stable")


def regular_nms(scores: np.ndarray, boxes: np.ndarray, score_threshold: float, iou_threshold: float,
                max_detections: int, per_class: int) -> list[tuple[int, int]]:
    """(anchor, class) of the detections, best first: per-class hard NMS, then the overall best."""
    found: list[tuple[int, int]] = []
    for c in range(1, scores.shape[1]):
        candidates = np.flatnonzero(scores[:, c] > _F32(score_threshold))
        kept = greedy_nms(scores[:, c].copy(), boxes, candidates, per_class, hard_suppression(iou_threshold))
        found.extend((int(a), c) for a in kept)
    found_scores = np.array([scores[a, c] for a, c in found], dtype=_F32)
    return [found[i] for i in _descending(found_scores)[:max_detections]]


def fast_nms(scores: np.ndarray, boxes: np.ndarray, score_threshold: float, iou_threshold: float,
             max_detections: int, classes_per_detection: int) -> list[tuple[int, int]]:
    """(anchor, class) of the detections: hard NMS on each anchor's best class score, then the best
    `classes_per_detection` classes of every anchor kept."""
    best = scores[:, 1]
    for c in range(2, scores.shape[1]):  # a running maximum, as std::max_element scans
        best = np.where(scores[:, c] > best, scores[:, c], best)
    candidates = np.flatnonzero(best > _F32(score_threshold))
    kept = greedy_nms(best.copy(), boxes, candidates, max_detections, hard_suppression(iou_threshold))
    count = min(scores.shape[1] - 1, classes_per_detection)
    return [(int(a), int(c) + 1) for a in kept for c in _descending(scores[a, 1:])[:count]]


def _check_scalars(ctx: OperationContext, values: dict[int, object]) -> None:
    """NNAPI's rules on the scalar parameters that are known (None: not known yet)."""
    names = {SCALE_Y: "y scale", SCALE_X: "x scale", SCALE_H: "height scale", SCALE_W: "width scale"}
    for i, what in names.items():
        if values.get(i) is not None:
            ctx.check(values[i] > 0, f"{what} must be > 0, got {values[i]}", input=i)
    for i, what in ((SCORE_THRESHOLD, "score threshold"), (IOU_THRESHOLD, "IoU threshold")):
        if values.get(i) is not None:
            ctx.check(values[i] >= 0, f"{what} must be >= 0, got {values[i]}", input=i)
    if values.get(MAX_DETECTIONS) is not None:
        ctx.check(values[MAX_DETECTIONS] > 0, f"max detections must be > 0, got {values[MAX_DETECTIONS]}",
                  input=MAX_DETECTIONS)
    regular = values.get(USE_REGULAR_NMS)
    limit = MAX_DETECTIONS_PER_CLASS if regular else MAX_CLASSES_PER_DETECTION
    what = "max detections per class (regular NMS)" if regular else "max classes per detection (fast NMS)"
    if regular is not None and values.get(limit) is not None:
        ctx.check(values[limit] > 0, f"{what} must be > 0, got {values[limit]}", input=limit)


@register
class DetectionPostprocessing(Operation):
    code = OperationCode.DETECTION_POSTPROCESSING
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(14, 4)
        ctx.check_input_type(SCORES, self.supported_types)
        code = ctx.input_code(SCORES)
        for i in (DELTAS, ANCHORS):
            ctx.check_input_type(i, code)
        for i in FLOAT_SCALARS:
            ctx.check_input_type(i, FLOAT_SCALAR_OF[code])
        for i in INT_SCALARS:
            ctx.check_input_type(i, OperandCode.INT32)
        for i in BOOL_SCALARS:
            ctx.check_input_type(i, OperandCode.BOOL)
        for i in (OUT_SCORES, OUT_BOXES):
            ctx.check_output_type(i, code)
        for i in (OUT_CLASSES, OUT_COUNTS):
            ctx.check_output_type(i, OperandCode.TENSOR_INT32)
        ctx.check_input_rank(SCORES, 3)
        ctx.check_input_rank(DELTAS, 3)
        ctx.check_input_rank(ANCHORS, 2)
        _check_scalars(ctx, {i: ctx.scalar_if_known(i) for i in FLOAT_SCALARS + INT_SCALARS + BOOL_SCALARS})

    def _shapes(self, ctx: OperationContext, scores: Shape, deltas: Shape, anchors: Shape) -> list[Shape]:
        for i, shape, rank in ((SCORES, scores, 3), (DELTAS, deltas, 3), (ANCHORS, anchors, 2)):
            ctx.check(len(shape) == rank, f"rank {len(shape)} not supported (expected {rank})", input=i)
        batches, num_anchors, num_classes = scores
        ctx.check(num_classes > 1, f"needs a background and at least one class, got {num_classes} classes",
                  input=SCORES)
        ctx.check(tuple(deltas[:2]) == (batches, num_anchors) and deltas[2] >= 4,
                  f"box deltas must have shape [{batches}, {num_anchors}, >= 4], got {list(deltas)}", input=DELTAS)
        ctx.check(tuple(anchors) == (num_anchors, 4),
                  f"anchors must have shape [{num_anchors}, 4], got {list(anchors)}", input=ANCHORS)
        values = {i: ctx.scalar(i) for i in FLOAT_SCALARS + INT_SCALARS + BOOL_SCALARS}
        _check_scalars(ctx, values)
        detections = values[MAX_DETECTIONS]
        if not values[USE_REGULAR_NMS]:
            detections *= values[MAX_CLASSES_PER_DETECTION]
        return [(batches, detections), (batches, detections, 4), (batches, detections), (batches,)]

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return self._shapes(ctx, ctx.input_shape(SCORES), ctx.input_shape(DELTAS), ctx.input_shape(ANCHORS))

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        scores, deltas, anchors = (ctx.input(i).astype(_F32) for i in (SCORES, DELTAS, ANCHORS))
        shapes = self._shapes(ctx, scores.shape, deltas.shape, anchors.shape)
        out_scores = np.zeros(shapes[OUT_SCORES], dtype=_F32)
        out_boxes = np.zeros(shapes[OUT_BOXES], dtype=_F32)
        out_classes = np.zeros(shapes[OUT_CLASSES], dtype=np.int32)
        out_counts = np.zeros(shapes[OUT_COUNTS], dtype=np.int32)
        scales = tuple(ctx.scalar(i) for i in (SCALE_Y, SCALE_X, SCALE_H, SCALE_W))
        score_threshold, iou_threshold = ctx.scalar(SCORE_THRESHOLD), ctx.scalar(IOU_THRESHOLD)
        label_offset = 0 if ctx.scalar(BACKGROUND_IN_LABEL) else 1
        for b in range(scores.shape[0]):
            boxes = ignoring_fp_errors(decode_boxes, deltas[b], anchors, scales)
            if ctx.scalar(USE_REGULAR_NMS):
                found = regular_nms(scores[b], boxes, score_threshold, iou_threshold, ctx.scalar(MAX_DETECTIONS),
                                    ctx.scalar(MAX_DETECTIONS_PER_CLASS))
            else:
                found = fast_nms(scores[b], boxes, score_threshold, iou_threshold, ctx.scalar(MAX_DETECTIONS),
                                 ctx.scalar(MAX_CLASSES_PER_DETECTION))
            for k, (anchor, c) in enumerate(found):
                out_scores[b, k] = scores[b, anchor, c]
                out_boxes[b, k] = boxes[anchor]
                out_classes[b, k] = c - label_offset
            out_counts[b] = len(found)
        dtype = ctx.output_type(OUT_SCORES).dtype
        return [out_scores.astype(dtype), out_boxes.astype(dtype), out_classes, out_counts]
