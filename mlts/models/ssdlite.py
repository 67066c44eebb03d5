"""SSD-lite on a MobileNet v2 backbone for the shapes detection set, and its ONNX graph from trained weights.

One description (`network`, `FEATURE_MAPS`, `anchors`) serves the build-time trainer
(`tools/train_detector.py`, torch) and the ONNX builder here, like `mobilenet.py` does for the
classifiers. The backbone is MobileNet v2 0.5 at 160 px (`mobilenet.layers`, batch norm folded,
initialized from the trained classifier): at 160 px the smallest shapes (about 0.1 of the side) are
still 17 px across, and 0.5 has the better classifier of the two small v2 sizes (95.2% against 93.5%
for 0.35_128), for 57M multiply-accumulates with the heads. Three feature maps feed SSD-lite heads (depthwise 3x3 +
ReLU6, then pointwise 1x1) for box encodings and class logits: the expansion layers of blocks 7 and
14 (strides 8 and 16) and the final 1x1 layer (stride 32). The shapes are small (boxes 0.1 to 0.53
of the side), so the stride-8 map replaces SSD's extra stride-64+ layers: with strides 16 and 32
only, 18% of the true boxes have no anchor at IoU >= 0.5 (median best IoU 0.58); with 8, 16 and 32
every box has several (median best IoU 0.72, 8.8 matched anchors per box). Trained for 3 minutes on
an H100 (tools/train_detector.py), it scores mAP@0.5 0.946 on the 500 held-out images.

Outputs follow NNAPI DETECTION_POSTPROCESSING (TFLite's SSD post-processing): box encodings
[1, A, 4] as (ty, tx, th, tw) against center-size anchors [A, 4] (ycenter, xcenter, h, w), scaled by
BOX_SCALES; class scores [1, A, 1 + classes] through a sigmoid, column 0 the background. With
`postprocess=True` the graph ends in one custom node ai.mlts.DetectionPostProcess carrying every
DETECTION_POSTPROCESSING parameter (POSTPROCESS), which the importer maps to that operation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .mobilenet import Layer, layers
from .weight_check import check_weights

ALPHA = 0.5
RESOLUTION = 160
MODEL_NAME = f"ssdlite_mobilenet_v2_{ALPHA:g}_{RESOLUTION}"
NUM_CLASSES = 10  # the shapes classes; the networks' class outputs add the background as column 0
ONNX_OPSET = 13
CUSTOM_DOMAIN = "ai.mlts"
POSTPROCESS_OP = "DetectionPostProcess"

#: (y, x, h, w) scales of the box encodings: ty = (y - ya) / ha * 10, th = log(h / ha) * 5, ...
BOX_SCALES = (10.0, 10.0, 5.0, 5.0)
#: The DETECTION_POSTPROCESSING parameters (attribute names of the ai.mlts.DetectionPostProcess node).
POSTPROCESS = {
    "scale_y": BOX_SCALES[0], "scale_x": BOX_SCALES[1], "scale_h": BOX_SCALES[2], "scale_w": BOX_SCALES[3],
    "use_regular_nms": 1,           # per-class NMS: mAP 0.946, against 0.918 with fast (class-agnostic) NMS
    "max_num_detections": 10,       # at most 4 shapes per image
    "max_classes_per_detection": 1,
    "detections_per_class": 10,
    "score_threshold": 0.3,         # 0.1 would add a point of mAP (0.956), with more low-score detections
    "iou_threshold": 0.5,
    "is_background_in_label": 0,    # labels 0..9 are the shapes classes
}
#: Output names of the graph, in NNAPI DETECTION_POSTPROCESSING's output order.
DETECTION_OUTPUTS = ("detection_scores", "detection_boxes", "detection_classes", "num_detections")


@dataclass(frozen=True)
class FeatureMap:
    """A backbone tensor that feeds a box head and a class head, with its anchors' shapes."""

    source: str  # the layer whose output it is
    channels: int
    stride: int
    scale: float
    next_scale: float  # the next map's scale: an extra square anchor of sqrt(scale * next_scale), as SSD adds
    aspect_ratios: tuple[float, ...] = (1.0, 1.5, 1 / 1.5)  # w / h (the boxes are 0.6 to 1.7)

    @property
    def grid(self) -> int:
        """Cells per side: every stride-2 layer is a 3x3 convolution padded by 1, ceil(size / 2)."""
        return math.ceil(RESOLUTION / self.stride)

    @property
    def anchor_shapes(self) -> list[tuple[float, float]]:
        """(h, w) of the anchors of one cell, in the order the heads emit them."""
        shapes = [(self.scale / math.sqrt(r), self.scale * math.sqrt(r)) for r in self.aspect_ratios]
        extra = math.sqrt(self.scale * self.next_scale)
        return shapes + [(extra, extra)]

    @property
    def anchors_per_cell(self) -> int:
        return len(self.aspect_ratios) + 1


def backbone_layers() -> list[Layer]:
    """MobileNet v2's convolutions and residual markers, without its classifier."""
    return [layer for layer in layers("v2", ALPHA) if layer.kind not in ("pool", "fc")]


def _channels(name: str) -> int:
    return next(layer.out_channels for layer in backbone_layers() if layer.name == name)


FEATURE_MAPS = (
    FeatureMap("block7_expand", _channels("block7_expand"), 8, 0.15, 0.27),
    FeatureMap("block14_expand", _channels("block14_expand"), 16, 0.27, 0.42),
    FeatureMap("head", _channels("head"), 32, 0.42, 0.6),
)


@dataclass(frozen=True)
class Op:
    """One step of the network: a convolution (`layer`) or a residual add, on named tensors."""

    layer: Layer
    inputs: tuple[str, ...]
    output: str


def head_layers(k: int) -> tuple[list[Layer], list[Layer]]:
    """(box layers, class layers) of feature map k: depthwise 3x3 + ReLU6, then a linear 1x1."""
    fm = FEATURE_MAPS[k]
    c, a = fm.channels, fm.anchors_per_cell
    heads = []
    for kind, per_anchor in (("box", 4), ("class", NUM_CLASSES + 1)):
        heads.append([Layer("conv", f"{kind}{k}_dw", c, c, 3, 1, groups=c),
                      Layer("conv", f"{kind}{k}_pw", c, a * per_anchor, 1, 1, relu6=False)])
    return heads[0], heads[1]


def network() -> list[Op]:
    """Every convolution and add in execution order; the input tensor is "image". The heads' last layers
    write `box{k}_pw` and `class{k}_pw` (NCHW, anchors x values along the channels)."""
    ops, current, saved = [], "image", {}
    for layer in backbone_layers():
        if layer.kind == "save":
            saved[layer.name] = current
        elif layer.kind == "add":
            out = f"{layer.name}_add"
            ops.append(Op(layer, (saved[layer.name], current), out))
            current = out
        else:
            ops.append(Op(layer, (current,), layer.name))
            current = layer.name
    for k, fm in enumerate(FEATURE_MAPS):
        for head in head_layers(k):
            source = fm.source
            for layer in head:
                ops.append(Op(layer, (source,), layer.name))
                source = layer.name
    return ops


def conv_layers() -> list[Layer]:
    return [op.layer for op in network() if op.layer.kind == "conv"]


def weight_shapes() -> dict[str, tuple[int, ...]]:
    """Names and shapes of the arrays a weights file holds (conv weights OIHW, biases [O])."""
    shapes = {}
    for layer in conv_layers():
        shapes[f"{layer.name}.weight"] = (layer.out_channels, layer.in_channels // layer.groups,
                                          layer.kernel, layer.kernel)
        shapes[f"{layer.name}.bias"] = (layer.out_channels,)
    return shapes


def parameters() -> int:
    return sum(int(np.prod(s)) for s in weight_shapes().values())


def macs() -> int:
    """Multiply-accumulates of one inference (convolutions; the post-processing is not counted)."""
    sizes, total = {"image": RESOLUTION}, 0
    for op in network():
        size = sizes[op.inputs[0]]
        if op.layer.kind == "conv":
            size = math.ceil(size / op.layer.stride)
            total += size * size * op.layer.out_channels * (op.layer.in_channels // op.layer.groups) \
                * op.layer.kernel ** 2
        sizes[op.output] = size
    return total


def num_anchors() -> int:
    return sum(fm.grid ** 2 * fm.anchors_per_cell for fm in FEATURE_MAPS)


def anchors() -> np.ndarray:
    """float32 [A, 4] (ycenter, xcenter, h, w), normalized: map by map, cells row-major, then the cell's
    anchor shapes: the order of the concatenated head outputs."""
    out = []
    for fm in FEATURE_MAPS:
        n = fm.grid
        centers = (np.arange(n) + 0.5) / n
        cy, cx = np.meshgrid(centers, centers, indexing="ij")
        for_map = np.empty((n, n, fm.anchors_per_cell, 4))
        for a, (h, w) in enumerate(fm.anchor_shapes):
            for_map[:, :, a] = np.stack([cy, cx, np.full_like(cy, h), np.full_like(cx, w)], axis=-1)
        out.append(for_map.reshape(-1, 4))
    return np.concatenate(out).astype(np.float32)


def encode_boxes(boxes: np.ndarray, anchor_boxes: np.ndarray) -> np.ndarray:
    """(ymin, xmin, ymax, xmax) boxes [..., 4] -> the encodings [..., 4] against center-size anchors
    (the inverse of DETECTION_POSTPROCESSING's decoding)."""
    sy, sx, sh, sw = BOX_SCALES
    h, w = boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]
    cy, cx = boxes[..., 0] + h / 2, boxes[..., 1] + w / 2
    ay, ax, ah, aw = (anchor_boxes[..., i] for i in range(4))
    return np.stack([(cy - ay) / ah * sy, (cx - ax) / aw * sx, np.log(h / ah) * sh, np.log(w / aw) * sw], axis=-1)


def output_count(postprocess: Mapping[str, float] = POSTPROCESS) -> int:
    """Detections per image the post-processing emits (max detections, times the classes per detection
    for fast NMS)."""
    n = int(postprocess["max_num_detections"])
    return n if postprocess["use_regular_nms"] else n * int(postprocess["max_classes_per_detection"])


def build_onnx(weights: Mapping[str, np.ndarray], *, postprocess: bool = True, name: str | None = None,
               postprocess_params: Mapping[str, float] | None = None):
    """The float32 ONNX model: input "image" [1, 3, R, R] in [-1, 1] (x / 127.5 - 1, like the MobileNets).

    postprocess=False: outputs "box_encodings" [1, A, 4] and "class_scores" [1, A, 1 + classes] (what
    onnxruntime can run). postprocess=True: those feed one ai.mlts.DetectionPostProcess node (anchors
    as an initializer) with outputs DETECTION_OUTPUTS: scores [1, N], boxes [1, N, 4] (ymin, xmin,
    ymax, xmax), classes [1, N] int32, count [1] int32."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    check_weights(weight_shapes(), weights, name or MODEL_NAME)
    params = dict(POSTPROCESS if postprocess_params is None else postprocess_params)
    if set(params) != set(POSTPROCESS):
        raise ValueError(f"postprocess parameters must be exactly {sorted(POSTPROCESS)}, got {sorted(params)}")
    params = {k: float(v) if isinstance(POSTPROCESS[k], float) else int(v) for k, v in params.items()}
    nodes, inits = [], []

    def const(array: np.ndarray, const_name: str) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array), const_name))
        return const_name

    const(np.array(0.0, np.float32), "relu6_min")
    const(np.array(6.0, np.float32), "relu6_max")
    for op in network():
        layer = op.layer
        if layer.kind == "add":
            nodes.append(helper.make_node("Add", list(op.inputs), [op.output], name=f"{layer.name}/add"))
            continue
        w = const(np.asarray(weights[f"{layer.name}.weight"], np.float32), f"{layer.name}.weight")
        b = const(np.asarray(weights[f"{layer.name}.bias"], np.float32), f"{layer.name}.bias")
        conv_out = f"{layer.name}_conv" if layer.relu6 else op.output
        nodes.append(helper.make_node("Conv", [op.inputs[0], w, b], [conv_out], name=f"{layer.name}/conv",
                                      kernel_shape=[layer.kernel] * 2, strides=[layer.stride] * 2,
                                      pads=[layer.kernel // 2] * 4, group=layer.groups))
        if layer.relu6:
            nodes.append(helper.make_node("Clip", [conv_out, "relu6_min", "relu6_max"], [op.output],
                                          name=f"{layer.name}/relu6"))
    total = num_anchors()
    for kind, per_anchor, joined in (("box", 4, "box_encodings"), ("class", NUM_CLASSES + 1, "class_logits")):
        parts = []
        for k, fm in enumerate(FEATURE_MAPS):
            src = f"{kind}{k}_pw"
            nodes.append(helper.make_node("Transpose", [src], [f"{src}_nhwc"], name=f"{src}/nhwc", perm=[0, 2, 3, 1]))
            shape = const(np.array([1, fm.grid ** 2 * fm.anchors_per_cell, per_anchor], np.int64), f"{src}_shape")
            nodes.append(helper.make_node("Reshape", [f"{src}_nhwc", shape], [f"{src}_anchors"], name=f"{src}/anchors"))
            parts.append(f"{src}_anchors")
        nodes.append(helper.make_node("Concat", parts, [joined], name=joined, axis=1))
    nodes.append(helper.make_node("Sigmoid", ["class_logits"], ["class_scores"], name="class_scores"))
    network_outputs = [helper.make_tensor_value_info("box_encodings", TensorProto.FLOAT, [1, total, 4]),
                       helper.make_tensor_value_info("class_scores", TensorProto.FLOAT, [1, total, NUM_CLASSES + 1])]
    opsets = [helper.make_opsetid("", ONNX_OPSET)]
    if postprocess:
        const(anchors(), "anchors")
        n = output_count(params)
        nodes.append(helper.make_node(POSTPROCESS_OP, ["box_encodings", "class_scores", "anchors"],
                                      list(DETECTION_OUTPUTS), name="postprocess", domain=CUSTOM_DOMAIN, **params))
        outputs = [helper.make_tensor_value_info(DETECTION_OUTPUTS[0], TensorProto.FLOAT, [1, n]),
                   helper.make_tensor_value_info(DETECTION_OUTPUTS[1], TensorProto.FLOAT, [1, n, 4]),
                   helper.make_tensor_value_info(DETECTION_OUTPUTS[2], TensorProto.INT32, [1, n]),
                   helper.make_tensor_value_info(DETECTION_OUTPUTS[3], TensorProto.INT32, [1])]
        opsets.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
    else:
        outputs = network_outputs
    graph = helper.make_graph(
        nodes, name or MODEL_NAME,
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, RESOLUTION, RESOLUTION])], outputs, inits)
    model = helper.make_model(graph, producer_name="mlts", opset_imports=opsets)
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
