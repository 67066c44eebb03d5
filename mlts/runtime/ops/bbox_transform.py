"""AXIS_ALIGNED_BBOX_TRANSFORM: refine region proposals with per-class box deltas, clipped to the image.

Inputs: 0 rois [num_rois, 4] ([x1, y1, x2, y2]), 1 deltas [num_rois, num_classes * 4] ([dx, dy, dw, dh]
per class), 2 batch index of each roi (TENSOR_INT32 [num_rois]), 3 image info [batches, 2]
([height, width]). Output: [num_rois, num_classes * 4] boxes. num_rois may be 0.

Types (NNAPI 1.2): float32 and float16 throughout; or quant16 asymm rois, image info and output (scale
0.125, zero point 0) with quant8 asymm deltas (quant8 asymm signed deltas since NNAPI 1.3). NNAPI computes
in float32 for every type (see _boxes.py), and an invalid roi or batch index fails the execution.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._boxes import apply_box_deltas, check_box_quantization, clip_boxes, from_float32, invalid_boxes, to_float32
from .base import Operation, OperationContext, Shape
from .common import FLOAT_TYPES, QUANT8_TYPES
from .registry import register

ROIS, DELTAS, BATCHES, IMAGE_INFO = 0, 1, 2, 3
Q16A = OperandCode.TENSOR_QUANT16_ASYMM


@register
class AxisAlignedBboxTransform(Operation):
    code = OperationCode.AXIS_ALIGNED_BBOX_TRANSFORM
    supported_types = FLOAT_TYPES | {Q16A}

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(4, 1)
        ctx.check_input_type(ROIS, self.supported_types)
        code = ctx.input_code(ROIS)
        ctx.check_input_type(DELTAS, QUANT8_TYPES if code == Q16A else code)
        ctx.check_input_type(BATCHES, OperandCode.TENSOR_INT32)
        ctx.check_input_type(IMAGE_INFO, code)
        ctx.check_output_type(0, code)
        for i, rank in ((ROIS, 2), (DELTAS, 2), (BATCHES, 1), (IMAGE_INFO, 2)):
            ctx.check_input_rank(i, rank)
        if code == Q16A:
            check_box_quantization(ctx, input=ROIS)
            check_box_quantization(ctx, input=IMAGE_INFO, what="image sizes")
            check_box_quantization(ctx, output=0)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        rois, deltas = ctx.input_shape(ROIS), ctx.input_shape(DELTAS)
        batches, image_info = ctx.input_shape(BATCHES), ctx.input_shape(IMAGE_INFO)
        for i, shape, rank in ((ROIS, rois, 2), (DELTAS, deltas, 2), (BATCHES, batches, 1),
                               (IMAGE_INFO, image_info, 2)):
            ctx.check(len(shape) == rank, f"rank {len(shape)} not supported (expected {rank})", input=i)
        num_rois = rois[0]
        ctx.check(rois[1] == 4, f"rois must have shape [num_rois, 4], got {list(rois)}", input=ROIS)
        ctx.check(deltas[0] == num_rois, f"deltas have {deltas[0]} rows but there are {num_rois} rois",
                  input=DELTAS)
        ctx.check(deltas[1] > 0 and deltas[1] % 4 == 0,
                  f"deltas must have num_classes * 4 columns (num_classes > 0), got {deltas[1]}", input=DELTAS)
        ctx.check(batches[0] == num_rois, f"batch indexes have {batches[0]} elements but there are "
                                          f"{num_rois} rois", input=BATCHES)
        ctx.check(image_info[0] > 0 and image_info[1] == 2,
                  f"image info must have shape [batches, 2] with batches > 0, got {list(image_info)}",
                  input=IMAGE_INFO)
        return [(num_rois, deltas[1])]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        out_type = ctx.output_type(0)
        deltas = ctx.input(DELTAS)
        if deltas.size == 0:
            return [np.zeros(deltas.shape, dtype=out_type.dtype)]
        rois = to_float32(ctx.input(ROIS), ctx.input_type(ROIS))
        image_info = to_float32(ctx.input(IMAGE_INFO), ctx.input_type(IMAGE_INFO))
        batch_of_roi = ctx.input(BATCHES).astype(np.int64)
        bad = np.flatnonzero((batch_of_roi < 0) | (batch_of_roi >= image_info.shape[0]))
        if bad.size:
            raise ctx.fail(f"roi {bad[0]} has batch index {batch_of_roi[bad[0]]}, outside [0, "
                           f"{image_info.shape[0]})", input=BATCHES)
        bad = np.flatnonzero(invalid_boxes(rois))
        if bad.size:
            raise ctx.fail(f"roi {bad[0]} {rois[bad[0]].tolist()} is not a valid box (x1 <= x2, y1 <= y2)",
                           input=ROIS)
        num_rois = rois.shape[0]
        per_class = to_float32(deltas, ctx.input_type(DELTAS)).reshape(num_rois, -1, 4)
        boxes = apply_box_deltas(rois[:, None, :], per_class)
        sizes = image_info[batch_of_roi]
        clipped = clip_boxes(boxes, sizes[:, 0:1], sizes[:, 1:2])
        return [from_float32(clipped.reshape(num_rois, -1), out_type)]
