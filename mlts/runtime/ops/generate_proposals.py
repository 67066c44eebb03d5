"""GENERATE_PROPOSALS: region proposals from anchors, box deltas and objectness scores (Faster R-CNN's RPN).

Inputs: 0 scores [batches, height, width, num_anchors], 1 deltas [batches, height, width, num_anchors * 4]
(NHWC; NCHW: channels second), 2 anchors [num_anchors, 4], 3 image info [batches, 2] ([height, width]),
4 / 5 height / width stride (image pixels per feature-map cell), 6 pre-NMS maximum (kept by score;
non-positive: all), 7 post-NMS maximum (negative: all; 0 keeps none, as NNAPI's kernel does), 8 IoU
threshold, 9 minimum box size, 10 layout (BOOL, true: NCHW).
Outputs: 0 scores [n], 1 boxes [n, 4], 2 batch indexes [n], where n is only known once the kernel has
run (it may be 0); each batch's proposals in NMS selection order (score descending).

For each batch: every anchor is shifted to every feature-map cell, moved by its deltas and clipped to
the image (as AXIS_ALIGNED_BBOX_TRANSFORM); the best pre-NMS-maximum scores are kept; boxes not wider
and taller than the minimum size or whose center lies outside the image are dropped; hard NMS keeps at
most the post-NMS maximum.

Types (NNAPI 1.2): float32 (FLOAT32 scalars), float16 (FLOAT16 scalars), quant8 asymm scores and deltas
with quant16 symm anchors and quant16 asymm image info and output boxes (scale 0.125, zero point 0;
FLOAT32 scalars); quant8 asymm signed since 1.3. Output scores keep input 0's quantization. NNAPI
computes in float32 for every type (see _boxes.py).
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._boxes import (apply_box_deltas, check_box_quantization, check_output_quantization_like_input, clip_boxes,
                     from_float32, greedy_nms, hard_suppression, invalid_boxes, to_float32)
from .base import Operation, OperationContext, Shape, ValueUnknown
from .common import FLOAT_AND_QUANT8, FLOAT_SCALAR_OF, QUANT8_TYPES
from .registry import register

SCORES, DELTAS, ANCHORS, IMAGE_INFO, HEIGHT_STRIDE, WIDTH_STRIDE, PRE_NMS_MAX, POST_NMS_MAX, IOU_THRESHOLD, \
    MIN_SIZE, LAYOUT = range(11)
OUT_SCORES, OUT_BOXES, OUT_BATCHES = range(3)
Q16A, Q16S, TI32 = OperandCode.TENSOR_QUANT16_ASYMM, OperandCode.TENSOR_QUANT16_SYMM, OperandCode.TENSOR_INT32
F32 = np.float32


def shifted_anchors(anchors: np.ndarray, height: int, width: int, height_stride: float,
                    width_stride: float) -> np.ndarray:
    """[height * width * num_anchors, 4] float32: each anchor moved to each feature-map cell (h, w) by
    (w * width stride, h * height stride), in (h, w, anchor) order."""
    shift_y = np.arange(height, dtype=F32) * F32(height_stride)
    shift_x = np.arange(width, dtype=F32) * F32(width_stride)
    shifts = np.stack(np.broadcast_arrays(shift_x[None, :], shift_y[:, None], shift_x[None, :], shift_y[:, None]),
                      axis=-1)
    return (anchors[None, None, :, :] + shifts[:, :, None, :]).reshape(-1, 4)


def keep_proposals(boxes: np.ndarray, candidates: np.ndarray, min_size: float, image_height: np.float32,
                   image_width: np.float32) -> np.ndarray:
    """The candidates whose box is wider and taller than `min_size` and whose center is inside the image."""
    x1, y1, x2, y2 = boxes[candidates].T
    width, height = x2 - x1, y2 - y1
    center_x, center_y = x1 + width / F32(2), y1 + height / F32(2)
    size = F32(min_size)
    return candidates[(width > size) & (height > size) & (center_x < image_width) & (center_y < image_height)]


def proposals_of_batch(scores: np.ndarray, boxes: np.ndarray, image_size: np.ndarray, pre_nms_max: int,
                       post_nms_max: int, iou_threshold: float, min_size: float) -> np.ndarray:
    """One batch: indexes of the proposals kept, in selection order. `scores` [k] and `boxes` [k, 4] are
    float32 (boxes already decoded and clipped)."""
    candidates = np.arange(scores.size)
    if 0 < pre_nms_max < scores.size:
        candidates = np.argsort(-scores, kind="stable")[:pre_nms_max]
    candidates = keep_proposals(boxes, candidates, min_size, image_size[0], image_size[1])
    return greedy_nms(scores.copy(), boxes, candidates, post_nms_max, hard_suppression(iou_threshold))


@register
class GenerateProposals(Operation):
    code = OperationCode.GENERATE_PROPOSALS
    supported_types = FLOAT_AND_QUANT8

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(11, 3)
        ctx.check_input_type(SCORES, self.supported_types)
        code = ctx.input_code(SCORES)
        quantized = code in QUANT8_TYPES
        scalar = OperandCode.FLOAT32 if quantized else FLOAT_SCALAR_OF[code]
        ctx.check_input_type(DELTAS, code)
        ctx.check_input_type(ANCHORS, Q16S if quantized else code)
        ctx.check_input_type(IMAGE_INFO, Q16A if quantized else code)
        for i in (HEIGHT_STRIDE, WIDTH_STRIDE, IOU_THRESHOLD, MIN_SIZE):
            ctx.check_input_type(i, scalar)
        ctx.check_input_type(PRE_NMS_MAX, OperandCode.INT32)
        ctx.check_input_type(POST_NMS_MAX, OperandCode.INT32)
        ctx.check_input_type(LAYOUT, OperandCode.BOOL)
        for k, out_code in enumerate((code, Q16A if quantized else code, TI32)):
            ctx.check_output_type(k, out_code)
        for i, rank in ((SCORES, 4), (DELTAS, 4), (ANCHORS, 2), (IMAGE_INFO, 2)):
            ctx.check_input_rank(i, rank)
        if quantized:
            check_box_quantization(ctx, input=ANCHORS, what="anchors")
            check_box_quantization(ctx, input=IMAGE_INFO, what="image sizes")
            check_box_quantization(ctx, output=OUT_BOXES)
            check_output_quantization_like_input(ctx, SCORES, OUT_SCORES)
        for k, rank in ((OUT_SCORES, 1), (OUT_BOXES, 2), (OUT_BATCHES, 1)):
            dims = ctx.output_type(k).dimensions
            ctx.check(not dims or len(dims) == rank, f"rank {len(dims or ())} not supported (expected {rank})",
                      output=k)
        dims = ctx.output_type(OUT_BOXES).dimensions
        ctx.check(not dims or len(dims) != 2 or dims[1] in (0, 4),
                  f"output boxes must have shape [n, 4], got {list(dims or ())}", output=OUT_BOXES)

    def _nhwc(self, ctx: OperationContext, shape: Shape) -> Shape:
        """A 4-D shape in NHWC terms, whatever the layout input says."""
        return (shape[0], shape[2], shape[3], shape[1]) if ctx.scalar(LAYOUT) else tuple(shape)

    def _check_shapes(self, ctx: OperationContext) -> tuple[int, int, int, int]:
        """(batches, height, width, num_anchors) after NNAPI's shape checks."""
        shapes = {i: ctx.input_shape(i) for i in (SCORES, DELTAS, ANCHORS, IMAGE_INFO)}
        for i, rank in ((SCORES, 4), (DELTAS, 4), (ANCHORS, 2), (IMAGE_INFO, 2)):
            ctx.check(len(shapes[i]) == rank, f"rank {len(shapes[i])} not supported (expected {rank})", input=i)
        batches, height, width, num_anchors = self._nhwc(ctx, shapes[SCORES])
        expected = {DELTAS: (batches, height, width, num_anchors * 4), ANCHORS: (num_anchors, 4),
                    IMAGE_INFO: (batches, 2)}
        layout = "NCHW" if ctx.scalar(LAYOUT) else "NHWC"
        for i, want in expected.items():
            got = self._nhwc(ctx, shapes[i]) if i == DELTAS else tuple(shapes[i])
            ctx.check(got == want, f"shape {list(shapes[i])} does not match the scores' "
                                   f"(expected {list(want)} in {layout} terms)", input=i)
        return batches, height, width, num_anchors

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        self._check_shapes(ctx)
        if ctx.is_static:
            raise ValueUnknown(SCORES)  # the number of proposals depends on the values
        n = len(self._proposals(ctx)[0])
        return [(n,), (n, 4), (n,)]

    def _proposals(self, ctx: OperationContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """float32 scores [n], float32 boxes [n, 4] and batch indexes [n] of the proposals."""
        batches, height, width, num_anchors = self._check_shapes(ctx)
        scores = to_float32(ctx.input(SCORES), ctx.input_type(SCORES))
        deltas = to_float32(ctx.input(DELTAS), ctx.input_type(DELTAS))
        if ctx.scalar(LAYOUT):
            scores, deltas = scores.transpose(0, 2, 3, 1), deltas.transpose(0, 2, 3, 1)
        cells = height * width * num_anchors
        scores, deltas = scores.reshape(batches, cells), deltas.reshape(batches, cells, 4)
        anchors = to_float32(ctx.input(ANCHORS), ctx.input_type(ANCHORS))
        image_info = to_float32(ctx.input(IMAGE_INFO), ctx.input_type(IMAGE_INFO))
        rois = shifted_anchors(anchors, height, width, ctx.scalar(HEIGHT_STRIDE), ctx.scalar(WIDTH_STRIDE))
        bad = np.flatnonzero(invalid_boxes(rois))
        if bad.size:
            raise ctx.fail(f"anchor {bad[0] % num_anchors} shifted to cell {bad[0] // num_anchors} is "
                           f"{rois[bad[0]].tolist()}, not a valid box (x1 <= x2, y1 <= y2)", input=ANCHORS)
        params = (ctx.scalar(PRE_NMS_MAX), ctx.scalar(POST_NMS_MAX), ctx.scalar(IOU_THRESHOLD),
                  ctx.scalar(MIN_SIZE))
        out_scores, out_boxes, out_batches = [], [], []
        for b in range(batches):
            boxes = clip_boxes(apply_box_deltas(rois, deltas[b]), image_info[b, 0], image_info[b, 1])
            kept = proposals_of_batch(scores[b], boxes, image_info[b], *params)
            out_scores.append(scores[b][kept])
            out_boxes.append(boxes[kept])
            out_batches.append(np.full(kept.size, b, np.int32))
        if not out_scores:
            return np.zeros(0, F32), np.zeros((0, 4), F32), np.zeros(0, np.int32)
        return np.concatenate(out_scores), np.concatenate(out_boxes), np.concatenate(out_batches)

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        scores, boxes, batch_index = self._proposals(ctx)
        return [from_float32(scores, ctx.output_type(OUT_SCORES)), from_float32(boxes, ctx.output_type(OUT_BOXES)),
                batch_index]
