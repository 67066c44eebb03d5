"""ai.mlts DetectionPostProcess -> DETECTION_POSTPROCESSING (TFLite's SSD post-processing in NNAPI).

ONNX has no standard operator for SSD's final step, so mlts's detector (mlts.models.ssdlite) ends in
one custom node, like TFLite's TFLite_Detection_PostProcess: inputs box encodings [B, A, >= 4]
(ty, tx, th, tw, ...), class scores [B, A, C] (already activated; column 0 the background) and
constant anchors [A, 4] (ycenter, xcenter, h, w); attributes carrying every DETECTION_POSTPROCESSING
parameter (ATTRIBUTES); outputs in NNAPI's order: scores [B, N] float32, boxes [B, N, 4] (ymin,
xmin, ymax, xmax) float32, classes [B, N] int32 and the number of detections [B] int32, where N is
max_num_detections (times max_classes_per_detection for fast NMS). Note NNAPI's inputs come scores
first; the node's come box encodings first, as TFLite's do.

NNAPI has this operation in float only: 8-bit inputs (a quantized network feeding the node
directly) are DEQUANTIZEd to float32 first, so the converter is not quantizable; float16 inputs are
refused (their parameters would have to be FLOAT16 scalars).
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import OperandCode, OperandType, OperationCode

from ..emitter import INT_DTYPES
from ..ir import Node
from .base import OpConverter, const_input, register

DOMAIN = "ai.mlts"
#: attribute -> (kind, rule NNAPI imposes), in DETECTION_POSTPROCESSING's input order (inputs 3 to 13)
ATTRIBUTES = {
    "scale_y": ("float", "> 0"), "scale_x": ("float", "> 0"), "scale_h": ("float", "> 0"),
    "scale_w": ("float", "> 0"), "use_regular_nms": ("bool", None), "max_num_detections": ("int", "> 0"),
    "max_classes_per_detection": ("int", None), "detections_per_class": ("int", None),
    "score_threshold": ("float", ">= 0"), "iou_threshold": ("float", ">= 0"), "is_background_in_label": ("bool", None),
}
_INT32_MAX = 2 ** 31 - 1


def postprocess_parameters(node: Node, ctx) -> dict[str, float | int | bool]:
    """The node's attributes checked against NNAPI's rules (all required, no others)."""
    unknown = sorted(a for a in node.attrs if not a.startswith("_") and a not in ATTRIBUTES)
    if unknown:
        raise ctx.fail(f"unknown attribute(s) {unknown} (expected {', '.join(ATTRIBUTES)})")
    missing = [a for a in ATTRIBUTES if a not in node.attrs]
    if missing:
        raise ctx.fail(f"missing attribute(s) {missing}: every DETECTION_POSTPROCESSING parameter must be given")
    values: dict[str, float | int | bool] = {}
    for name, (kind, rule) in ATTRIBUTES.items():
        value = node.attrs[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ctx.fail(f"attribute {name} must be a single {'number' if kind == 'float' else 'integer'}, "
                           f"got {value!r}")
        if kind == "float":
            if not np.isfinite(value):
                raise ctx.fail(f"attribute {name} must be finite, got {value}")
            values[name] = float(value)
        elif not isinstance(value, int):
            raise ctx.fail(f"attribute {name} must be an integer, got {value!r}")
        elif kind == "bool":
            if value not in (0, 1):
                raise ctx.fail(f"attribute {name} must be 0 or 1, got {value}")
            values[name] = bool(value)
        else:
            if not -_INT32_MAX - 1 <= value <= _INT32_MAX:
                raise ctx.fail(f"attribute {name} = {value} does not fit in INT32")
            values[name] = value
        if rule == "> 0" and not values[name] > 0 or rule == ">= 0" and not values[name] >= 0:
            raise ctx.fail(f"attribute {name} must be {rule}, got {value}")
    limit = "detections_per_class" if values["use_regular_nms"] else "max_classes_per_detection"
    if not values[limit] > 0:
        mode = "regular" if values["use_regular_nms"] else "fast"
        raise ctx.fail(f"attribute {limit} must be > 0 with {mode} NMS, got {values[limit]}")
    return values


def detections_per_batch(params: dict) -> int:
    n = int(params["max_num_detections"])
    return n if params["use_regular_nms"] else n * int(params["max_classes_per_detection"])


@register
class DetectionPostProcessConverter(OpConverter):
    domain = DOMAIN
    op_types = ("DetectionPostProcess",)
    data_inputs = (0, 1)

    def convert(self, node: Node, ctx) -> None:
        if len(node.inputs) != 3 or not all(node.inputs):
            raise ctx.fail(f"expects 3 inputs (box encodings, class scores, anchors), got {len(node.inputs)}")
        if len(node.outputs) > 4:
            raise ctx.fail(f"has {len(node.outputs)} outputs; DETECTION_POSTPROCESSING writes 4 (scores, boxes, "
                           "classes, number of detections)")
        params = postprocess_parameters(node, ctx)
        anchors = const_input(node, ctx.graph, 2, "anchors", ctx)
        boxes_name, scores_name = node.inputs[0], node.inputs[1]
        boxes_shape, scores_shape = ctx.shape(boxes_name), ctx.shape(scores_name)
        if len(boxes_shape) != 3 or len(scores_shape) != 3:
            raise ctx.fail(f"box encodings and class scores must have rank 3 ([batches, anchors, ...]), got "
                           f"{list(boxes_shape)} and {list(scores_shape)}")
        anchors = np.asarray(anchors)
        if anchors.dtype.kind not in "fiu" or anchors.ndim != 2 or anchors.shape[1] != 4:
            raise ctx.fail(f"anchors must be a real [anchors, 4] constant (ycenter, xcenter, h, w), got "
                           f"{anchors.dtype} {list(anchors.shape)}")
        if not np.all(np.isfinite(anchors)):
            raise ctx.fail("anchors hold non-finite values")
        count = anchors.shape[0]
        for what, shape in (("box encodings", boxes_shape), ("class scores", scores_shape)):
            if shape[1] is not None and shape[1] != count:
                raise ctx.fail(f"{what} have {shape[1]} anchors, the anchors constant {count}")
        if boxes_shape[2] is not None and boxes_shape[2] < 4:
            raise ctx.fail(f"box encodings need at least 4 values per anchor, got {boxes_shape[2]}")
        if scores_shape[2] is not None and scores_shape[2] < 2:
            raise ctx.fail(f"class scores need the background and at least one class, got {scores_shape[2]} columns")
        if None not in (boxes_shape[0], scores_shape[0]) and boxes_shape[0] != scores_shape[0]:
            raise ctx.fail(f"box encodings and class scores disagree on the batch: {boxes_shape[0]} and "
                           f"{scores_shape[0]}")
        batches = scores_shape[0] if scores_shape[0] is not None else boxes_shape[0]
        inputs = [self._float_input(scores_name, ctx), self._float_input(boxes_name, ctx),
                  ctx.float_tensor(anchors.astype(np.float32))]
        inputs += [ctx.float_scalar(params[a]) for a in ("scale_y", "scale_x", "scale_h", "scale_w")]
        inputs += [ctx.bool_scalar(params["use_regular_nms"])]
        inputs += [ctx.int_scalar(params[a]) for a in ("max_num_detections", "max_classes_per_detection",
                                                        "detections_per_class")]
        inputs += [ctx.float_scalar(params["score_threshold"]), ctx.float_scalar(params["iou_threshold"]),
                   ctx.bool_scalar(params["is_background_in_label"])]
        n = detections_per_batch(params)
        expected = (((batches, n), np.float32), ((batches, n, 4), np.float32), ((batches, n), np.int32),
                    ((batches,), np.int32))
        outputs = [self._output(node, k, shape, dtype, ctx) for k, (shape, dtype) in enumerate(expected)]
        ctx.add_op(OperationCode.DETECTION_POSTPROCESSING, inputs, outputs)

    @staticmethod
    def _float_input(name: str, ctx) -> int:
        """The operand of a float32 input, DEQUANTIZEd first when it is an 8-bit tensor."""
        v = ctx.value(name)
        operand = ctx.operand(name)
        if ctx.is_quantized(name):
            dims = ctx.operand_type(operand).dimensions
            return ctx.op(OperationCode.DEQUANTIZE, [operand], OperandType.tensor(OperandCode.TENSOR_FLOAT32, dims))
        if v.dtype != np.dtype(np.float32):
            raise ctx.fail(f"input {name!r} is {v.dtype}; DETECTION_POSTPROCESSING takes float32 (or 8-bit "
                           "quantized, dequantized first)")
        return operand

    @staticmethod
    def _output(node: Node, k: int, shape: tuple, dtype, ctx) -> int:
        """The operand for output k (a temporary when the node leaves it out), its ONNX type checked
        against what the operation writes, or filled in where shape inference could not know it."""
        code = OperandCode.TENSOR_FLOAT32 if dtype == np.float32 else OperandCode.TENSOR_INT32
        dims = [0 if d is None else d for d in shape]
        name = node.outputs[k] if k < len(node.outputs) else ""
        if not name:
            return ctx.temp(OperandType.tensor(code, dims))
        v = ctx.value(name)
        allowed = {np.dtype(np.float32)} if dtype == np.float32 else INT_DTYPES
        if v.dtype is None:
            v.dtype = np.dtype(dtype)
        elif v.dtype not in allowed or v.quant is not None:
            raise ctx.fail(f"output {k} {name!r} is declared {v.dtype}, but DETECTION_POSTPROCESSING writes "
                           f"{np.dtype(dtype).name}")
        if v.shape is not None:
            if len(v.shape) != len(shape) or any(a is not None and b is not None and a != b
                                                 for a, b in zip(v.shape, shape)):
                raise ctx.fail(f"output {k} {name!r} is declared with shape {list(v.shape)}, but "
                               f"DETECTION_POSTPROCESSING writes {list(shape)}")
            shape = tuple(a if a is not None else b for a, b in zip(v.shape, shape))
        v.shape = tuple(shape)
        return ctx.output(name)
