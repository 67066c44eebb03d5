"""The float reference for the convolution tests: ONNX Conv on onnx.reference, in float64, NHWC in and out."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from mlts.runtime import FuseCode


def onnx_conv(x_nhwc, f_ohwi, b, *, onnx_pads=None, auto_pad=None, strides=(1, 1), dilation=(1, 1), fuse=0, group=1):
    """Float64 ONNX Conv (strides/dilation given as NNAPI (w, h)); returns NHWC."""
    x = np.transpose(np.asarray(x_nhwc, np.float64), (0, 3, 1, 2))
    w = np.transpose(np.asarray(f_ohwi, np.float64), (0, 3, 1, 2))
    attrs = dict(strides=[strides[1], strides[0]], dilations=[dilation[1], dilation[0]], group=group)
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    else:
        attrs["pads"] = list(onnx_pads)
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["C"], **attrs)]
    inits = []
    if fuse == FuseCode.NONE:
        nodes.append(helper.make_node("Identity", ["C"], ["Y"]))
    elif fuse == FuseCode.RELU:
        nodes.append(helper.make_node("Relu", ["C"], ["Y"]))
    else:
        lo, hi = (-1.0, 1.0) if fuse == FuseCode.RELU1 else (0.0, 6.0)
        inits = [helper.make_tensor("lo", TensorProto.DOUBLE, [], [lo]), helper.make_tensor("hi", TensorProto.DOUBLE, [], [hi])]
        nodes.append(helper.make_node("Clip", ["C", "lo", "hi"], ["Y"]))
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in "XWB"],
                              [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    y = ReferenceEvaluator(model).run(None, {"X": x, "W": w, "B": np.asarray(b, np.float64)})[0]
    return np.transpose(y, (0, 2, 3, 1))


def onnx_pads(pads):
    left, right, top, bottom = pads
    return [top, left, bottom, right]
