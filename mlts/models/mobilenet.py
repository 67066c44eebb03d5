"""MobileNet v1 and v2 architectures, and their ONNX graphs built from trained weights.

One description of each architecture (`layers`) serves both the build-time trainer
(`tools/train_zoo.py`, torch) and the ONNX builder here, so the shipped weights and the graph can
never disagree. Weights are stored with batch normalization already folded into each convolution.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .weight_check import check_weights

NUM_CLASSES = 10
ONNX_OPSET = 13

# The MLTS sizes: (family, width multiplier, input resolution).
ZOO_CONFIGS = (
    ("v1", 1.0, 224), ("v1", 0.75, 192), ("v1", 0.5, 160), ("v1", 0.25, 128),
    ("v2", 1.0, 224), ("v2", 0.75, 192), ("v2", 0.5, 160), ("v2", 0.35, 128),
)


def model_name(family: str, alpha: float, resolution: int) -> str:
    return f"mobilenet_{family}_{alpha:g}_{resolution}" if alpha != 1.0 else f"mobilenet_{family}_1.0_{resolution}"


@dataclass(frozen=True)
class Layer:
    """One step: a convolution (with folded BN), a residual save/add marker, or the classifier."""

    kind: str  # "conv" | "save" | "add" | "pool" | "fc"
    name: str
    in_channels: int = 0
    out_channels: int = 0
    kernel: int = 1
    stride: int = 1
    groups: int = 1
    relu6: bool = True


def _make_divisible(value: float, divisor: int = 8) -> int:
    """MobileNet v2's channel rounding: nearest multiple of 8, never more than 10% below."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def layers(family: str, alpha: float) -> list[Layer]:
    if family == "v1":
        return _v1_layers(alpha)
    if family == "v2":
        return _v2_layers(alpha)
    raise ValueError(f"unknown MobileNet family {family!r}")


def _v1_layers(alpha: float) -> list[Layer]:
    """Depthwise-separable stack: a stem conv then 13 (depthwise 3x3, pointwise 1x1) blocks."""
    plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    c = max(8, int(32 * alpha))
    out = [Layer("conv", "stem", 3, c, 3, 2)]
    for i, (o, s) in enumerate(plan, start=1):
        o = max(8, int(o * alpha))
        out.append(Layer("conv", f"block{i}_dw", c, c, 3, s, groups=c))
        out.append(Layer("conv", f"block{i}_pw", c, o, 1, 1))
        c = o
    return out + [Layer("pool", "pool", c, c), Layer("fc", "classifier", c, NUM_CLASSES, relu6=False)]


def _v2_layers(alpha: float) -> list[Layer]:
    """Inverted residuals with linear bottlenecks (expansion t, channels c, repeats n, stride s)."""
    plan = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    c = _make_divisible(32 * alpha)
    out = [Layer("conv", "stem", 3, c, 3, 2)]
    block = 0
    for t, ch, n, s in plan:
        o = _make_divisible(ch * alpha)
        for k in range(n):
            block += 1
            stride = s if k == 0 else 1
            residual = stride == 1 and c == o
            if residual:
                out.append(Layer("save", f"block{block}"))
            hidden = c * t
            if t != 1:
                out.append(Layer("conv", f"block{block}_expand", c, hidden, 1, 1))
            out.append(Layer("conv", f"block{block}_dw", hidden, hidden, 3, stride, groups=hidden))
            out.append(Layer("conv", f"block{block}_project", hidden, o, 1, 1, relu6=False))
            if residual:
                out.append(Layer("add", f"block{block}"))
            c = o
    last = _make_divisible(1280 * max(1.0, alpha))
    out.append(Layer("conv", "head", c, last, 1, 1))
    return out + [Layer("pool", "pool", last, last), Layer("fc", "classifier", last, NUM_CLASSES, relu6=False)]


def weight_shapes(family: str, alpha: float) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the arrays a weights file holds (ONNX layouts: OIHW, and [out, in] for FC)."""
    shapes = {}
    for layer in layers(family, alpha):
        if layer.kind == "conv":
            shapes[f"{layer.name}.weight"] = (layer.out_channels, layer.in_channels // layer.groups,
                                              layer.kernel, layer.kernel)
            shapes[f"{layer.name}.bias"] = (layer.out_channels,)
        elif layer.kind == "fc":
            shapes[f"{layer.name}.weight"] = (layer.out_channels, layer.in_channels)
            shapes[f"{layer.name}.bias"] = (layer.out_channels,)
    return shapes


def macs(family: str, alpha: float, resolution: int) -> int:
    """Multiply-accumulates of one inference."""
    total, size = 0, resolution
    for layer in layers(family, alpha):
        if layer.kind == "conv":
            size = (size + layer.stride - 1) // layer.stride
            total += size * size * layer.out_channels * (layer.in_channels // layer.groups) * layer.kernel ** 2
        elif layer.kind == "fc":
            total += layer.in_channels * layer.out_channels
    return total


def build_onnx(family: str, alpha: float, resolution: int, weights: Mapping[str, np.ndarray], *,
               name: str | None = None):
    """The float32 ONNX model (NCHW input "input" [1,3,R,R] in [-1,1]; output "probabilities" [1,10])."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    check_weights(weight_shapes(family, alpha), weights, name or model_name(family, alpha, resolution))
    nodes, inits = [], []
    inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "relu6_min"))
    inits.append(numpy_helper.from_array(np.array(6.0, np.float32), "relu6_max"))
    current = "input"
    saved: dict[str, str] = {}
    for layer in layers(family, alpha):
        if layer.kind == "conv":
            w, b = f"{layer.name}.weight", f"{layer.name}.bias"
            inits.append(numpy_helper.from_array(np.asarray(weights[w], np.float32), w))
            inits.append(numpy_helper.from_array(np.asarray(weights[b], np.float32), b))
            out = f"{layer.name}_conv" if layer.relu6 else layer.name
            pad = layer.kernel // 2
            nodes.append(helper.make_node("Conv", [current, w, b], [out], name=f"{layer.name}/conv",
                                          kernel_shape=[layer.kernel] * 2, strides=[layer.stride] * 2,
                                          pads=[pad] * 4, group=layer.groups))
            if layer.relu6:
                nodes.append(helper.make_node("Clip", [out, "relu6_min", "relu6_max"], [layer.name],
                                              name=f"{layer.name}/relu6"))
            current = layer.name
        elif layer.kind == "save":
            saved[layer.name] = current
        elif layer.kind == "add":
            out = f"{layer.name}_add"
            nodes.append(helper.make_node("Add", [saved[layer.name], current], [out], name=f"{layer.name}/add"))
            current = out
        elif layer.kind == "pool":
            nodes.append(helper.make_node("GlobalAveragePool", [current], ["pooled"], name="pool"))
            nodes.append(helper.make_node("Flatten", ["pooled"], ["features"], name="flatten", axis=1))
            current = "features"
        elif layer.kind == "fc":
            w, b = f"{layer.name}.weight", f"{layer.name}.bias"
            inits.append(numpy_helper.from_array(np.asarray(weights[w], np.float32), w))
            inits.append(numpy_helper.from_array(np.asarray(weights[b], np.float32), b))
            nodes.append(helper.make_node("Gemm", [current, w, b], ["logits"], name="classifier", transB=1))
            nodes.append(helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1))
    graph = helper.make_graph(
        nodes, name or model_name(family, alpha, resolution),
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, resolution, resolution])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, NUM_CLASSES])], inits)
    model = helper.make_model(graph, producer_name="mlts", opset_imports=[helper.make_opsetid("", ONNX_OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
