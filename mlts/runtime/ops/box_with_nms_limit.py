"""BOX_WITH_NMS_LIMIT: per-class (soft) non-maximum suppression of scored boxes, batch by batch.

Inputs: 0 scores [num_rois, num_classes] (class 0 is the background, never selected), 1 boxes
[num_rois, num_classes * 4], 2 batch index of each roi ([num_rois]; rois of one batch are consecutive),
3 score threshold (candidates need a score above it), 4 maximum detections per image (and per class;
negative: no limit), 5 NMS kernel (0 hard, 1 linear, 2 gaussian), 6 IoU threshold (hard, linear),
7 sigma (gaussian), 8 NMS score threshold (rescored boxes below it are dropped).
Outputs: 0 scores [n] (after rescoring), 1 boxes [n, 4], 2 classes [n], 3 batch indexes [n], where n is
only known once the kernel has run (it may be 0); within a batch, by class, then by score descending.

Types (NNAPI 1.2): float32 (FLOAT32 scalars), float16 (FLOAT16 scalars), quant8 asymm scores with
quant16 asymm boxes (scale 0.125, zero point 0; FLOAT32 scalars); quant8 asymm signed scores since 1.3.
Output scores keep input 0's quantization; output boxes are copies of the selected input boxes.
NNAPI computes in float32 for every type (see _boxes.py).
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._boxes import (NMS_GAUSSIAN, NMS_HARD, Suppression, check_box_quantization,
                     check_output_quantization_like_input, from_float32, greedy_nms, invalid_boxes, soft_suppression,
                     to_float32)
from .base import Operation, OperationContext, Shape, ValueUnknown
from .common import FLOAT_AND_QUANT8, FLOAT_SCALAR_OF, QUANT8_TYPES
from .registry import register

SCORES, BOXES, BATCHES, SCORE_THRESHOLD, MAX_DETECTIONS, NMS_KERNEL, IOU_THRESHOLD, SIGMA, \
    NMS_SCORE_THRESHOLD = range(9)
OUT_SCORES, OUT_BOXES, OUT_CLASSES, OUT_BATCHES = range(4)
Q16A, TI32 = OperandCode.TENSOR_QUANT16_ASYMM, OperandCode.TENSOR_INT32
INT32 = OperandCode.INT32


def batch_runs(batch_of_roi: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) of each run of equal consecutive batch indexes: NNAPI's batches (a batch index
    that comes back after another one starts a new batch)."""
    if batch_of_roi.size == 0:
        return []
    starts = np.flatnonzero(np.diff(batch_of_roi)) + 1
    bounds = [0, *starts.tolist(), batch_of_roi.size]
    return list(zip(bounds[:-1], bounds[1:]))


def select_detections(scores: np.ndarray, boxes: np.ndarray, score_threshold: float, max_detections: int,
                      suppress: Suppression) -> np.ndarray:
    """One batch: flat indexes (roi * num_classes + class) of the selected boxes, ordered by class and
    then score descending. `scores` ([rois, classes] float32) is rescored in place; `boxes` is
    [rois * classes, 4] float32."""
    num_classes = scores.shape[1]
    flat_scores = scores.reshape(-1)
    threshold = np.float32(score_threshold)
    selected = []
    for c in range(1, num_classes):
        candidates = np.flatnonzero(scores[:, c] > threshold) * num_classes + c
        selected.append(greedy_nms(flat_scores, boxes, candidates, max_detections, suppress))
    chosen = np.concatenate(selected) if selected else np.zeros(0, np.int64)
    chosen = chosen[np.argsort(-flat_scores[chosen], kind="stable")]
    if 0 <= max_detections < chosen.size:
        chosen = chosen[:max_detections]
    return chosen[np.lexsort((-flat_scores[chosen], chosen % num_classes))]


@register
class BoxWithNmsLimit(Operation):
    code = OperationCode.BOX_WITH_NMS_LIMIT
    supported_types = FLOAT_AND_QUANT8

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(9, 4)
        ctx.check_input_type(SCORES, self.supported_types)
        code = ctx.input_code(SCORES)
        quantized = code in QUANT8_TYPES
        scalar = OperandCode.FLOAT32 if quantized else FLOAT_SCALAR_OF[code]
        ctx.check_input_type(BOXES, Q16A if quantized else code)
        ctx.check_input_type(BATCHES, TI32)
        for i in (SCORE_THRESHOLD, IOU_THRESHOLD, SIGMA, NMS_SCORE_THRESHOLD):
            ctx.check_input_type(i, scalar)
        ctx.check_input_type(MAX_DETECTIONS, INT32)
        ctx.check_input_type(NMS_KERNEL, INT32)
        for k, out_code in enumerate((code, Q16A if quantized else code, TI32, TI32)):
            ctx.check_output_type(k, out_code)
        for i, rank in ((SCORES, 2), (BOXES, 2), (BATCHES, 1)):
            ctx.check_input_rank(i, rank)
        kernel = ctx.scalar_if_known(NMS_KERNEL)
        if kernel is not None:
            self._check_kernel(ctx, kernel)
        if quantized:
            check_box_quantization(ctx, input=BOXES)
            check_box_quantization(ctx, output=OUT_BOXES)
            check_output_quantization_like_input(ctx, SCORES, OUT_SCORES)
        for k, rank in ((OUT_SCORES, 1), (OUT_BOXES, 2), (OUT_CLASSES, 1), (OUT_BATCHES, 1)):
            dims = ctx.output_type(k).dimensions
            ctx.check(not dims or len(dims) == rank, f"rank {len(dims or ())} not supported (expected {rank})",
                      output=k)
        dims = ctx.output_type(OUT_BOXES).dimensions
        ctx.check(not dims or len(dims) != 2 or dims[1] in (0, 4),
                  f"output boxes must have shape [n, 4], got {list(dims or ())}", output=OUT_BOXES)

    @staticmethod
    def _check_kernel(ctx: OperationContext, kernel: int) -> None:
        ctx.check(NMS_HARD <= kernel <= NMS_GAUSSIAN,
                  f"NMS kernel {kernel} is not one of 0 (hard), 1 (linear), 2 (gaussian)", input=NMS_KERNEL)

    def _check_shapes(self, ctx: OperationContext) -> tuple[int, int]:
        scores, boxes, batches = ctx.input_shape(SCORES), ctx.input_shape(BOXES), ctx.input_shape(BATCHES)
        for i, shape, rank in ((SCORES, scores, 2), (BOXES, boxes, 2), (BATCHES, batches, 1)):
            ctx.check(len(shape) == rank, f"rank {len(shape)} not supported (expected {rank})", input=i)
        num_rois, num_classes = scores
        ctx.check(num_classes > 1, f"scores need at least 2 classes (class 0 is the background), got "
                                   f"{num_classes}", input=SCORES)
        ctx.check(tuple(boxes) == (num_rois, num_classes * 4),
                  f"boxes must have shape [{num_rois}, {num_classes * 4}] (num_rois, num_classes * 4), "
                  f"got {list(boxes)}", input=BOXES)
        ctx.check(batches[0] == num_rois, f"batch indexes have {batches[0]} elements but there are "
                                          f"{num_rois} rois", input=BATCHES)
        return num_rois, num_classes

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        self._check_shapes(ctx)
        self._check_kernel(ctx, ctx.scalar(NMS_KERNEL))
        if ctx.is_static:
            raise ValueUnknown(SCORES)  # the number of boxes kept depends on the values
        n = len(self._detections(ctx)[0])
        return [(n,), (n, 4), (n,), (n,)]

    def _detections(self, ctx: OperationContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(flat index roi * num_classes + class of each selected box, its batch index, the rescored
        float32 scores by flat index)."""
        num_rois, num_classes = self._check_shapes(ctx)
        if num_rois == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32)
        scores = to_float32(ctx.input(SCORES), ctx.input_type(SCORES)).copy()
        boxes = to_float32(ctx.input(BOXES), ctx.input_type(BOXES)).reshape(-1, 4)
        bad = np.flatnonzero(invalid_boxes(boxes))
        if bad.size:
            raise ctx.fail(f"box {bad[0] % num_classes} of roi {bad[0] // num_classes} "
                           f"{boxes[bad[0]].tolist()} is not a valid box (x1 <= x2, y1 <= y2)", input=BOXES)
        suppress = soft_suppression(ctx.scalar(NMS_KERNEL), ctx.scalar(IOU_THRESHOLD), ctx.scalar(SIGMA),
                                    ctx.scalar(NMS_SCORE_THRESHOLD))
        score_threshold, max_detections = ctx.scalar(SCORE_THRESHOLD), ctx.scalar(MAX_DETECTIONS)
        batch_of_roi = ctx.input(BATCHES)
        selected, batch_index = [], []
        for start, stop in batch_runs(batch_of_roi):
            chosen = select_detections(scores[start:stop], boxes[start * num_classes:stop * num_classes],
                                       score_threshold, max_detections, suppress)
            selected.append(chosen + start * num_classes)
            batch_index.append(np.full(chosen.size, batch_of_roi[start], np.int32))
        return np.concatenate(selected), np.concatenate(batch_index), scores.reshape(-1)

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        flat, batch_index, scores = self._detections(ctx)
        num_classes = ctx.input_shape(SCORES)[1]
        raw_boxes = ctx.input(BOXES).reshape(-1, 4)
        return [from_float32(scores[flat], ctx.output_type(OUT_SCORES)),
                raw_boxes[flat].astype(ctx.output_type(OUT_BOXES).dtype, copy=False),
                (flat % num_classes).astype(np.int32),
                batch_index]
