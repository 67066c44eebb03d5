"""Evaluation of float and QDQ ONNX graphs for calibration and comparison: onnx.reference with a faster Conv.

Calibration needs the values of intermediate tensors, which onnx.reference.ReferenceEvaluator
returns when they are named as outputs. Its own Conv is the slow part. Measured on the zoo's eight
MobileNets (200 calibration images, batches of 16, OPENBLAS_NUM_THREADS=1, a shared 2-core machine):
with onnx.reference alone, calibration took 1.8-3.8x as long as with the quantizer's former numpy
evaluator (the whole quantized build, image rendering included, 1.2-2.8x; mobilenet_v2_1.0_224
the slowest), and the ranges differed by float32 rounding (up to 5e-7 relative), which moved
20-30 activation scales per v2 model by a few ulp and one int32 bias value by one step: the zoo's
quantized models would change. With Conv computed by `conv.conv2d` (the former evaluator's kernel)
the ranges and the quantized models are bit-identical and calibration takes 0.8-1.3x as long
(on a quiet machine 1.0x: mobilenet_v2_1.0_224 on 200 inputs, 17 s either way). onnx.reference keeps
every intermediate tensor of a batch, so that calibration peaks at 1.0 GB instead of 0.44 GB.

onnx.reference (1.23) runs QuantizeLinear/DequantizeLinear only from opset 19, and the quantizer
writes opset 13 QDQ models, so those two run as `qparams.quantize_array`/`dequantize_array`.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
from onnx.reference.ops.op_conv import Conv as _ReferenceConv

from .conv import conv2d
from .graph import constant_names, graph_input_names, input_ranks, toposort
from .qparams import dequantize_array, quantize_array


class Conv(_ReferenceConv):
    """onnx.reference's Conv, computed by `conv2d` for the 2-D convolutions without auto_pad."""

    op_domain = ""

    def _run(self, X, W, B=None, auto_pad=None, dilations=None, group=None, kernel_shape=None, pads=None,
             strides=None):
        if X.ndim != 4 or auto_pad not in (None, "NOTSET", b"NOTSET"):
            return super()._run(X, W, B, auto_pad=auto_pad, dilations=dilations, group=group,
                                kernel_shape=kernel_shape, pads=pads, strides=strides)
        return (conv2d(X, W, B, strides=tuple(strides or (1, 1)), pads=tuple(pads or (0, 0, 0, 0)),
                       dilations=tuple(dilations or (1, 1)), group=int(group or 1)),)


def _axis(scale: np.ndarray, axis: int | None) -> int | None:
    """The per-channel axis of a scale (None for a scalar); ONNX's default is 1."""
    return (1 if axis is None else int(axis)) if np.ndim(scale) else None


class QuantizeLinear(OpRun):
    """ONNX QuantizeLinear for any opset (8-bit and int32 zero points; no blocks, no float8)."""

    op_domain = ""

    def _run(self, x, scale, zero_point=None, axis=None, **_other_attributes):
        zero_point = np.array(0, np.uint8) if zero_point is None else zero_point
        return (quantize_array(x, scale, zero_point, zero_point.dtype, _axis(scale, axis)),)


class DequantizeLinear(OpRun):
    """ONNX DequantizeLinear for any opset (8-bit and int32 inputs; no blocks, no float8)."""

    op_domain = ""

    def _run(self, x, scale, zero_point=None, axis=None, **_other_attributes):
        return (dequantize_array(x, scale, 0 if zero_point is None else zero_point, _axis(scale, axis)),)


_OPS = [Conv, QuantizeLinear, DequantizeLinear]


def _sorted(model):
    """The model itself if its nodes are in data-dependency order, else a copy with sorted nodes."""
    graph = model.graph
    nodes = list(graph.node)
    ordered = toposort(nodes, constant_names(graph) | set(graph_input_names(graph)))
    if all(a is b for a, b in zip(ordered, nodes)):
        return model
    copy = type(model)()
    copy.CopyFrom(model)
    copy.graph.ClearField("node")
    copy.graph.node.extend(ordered)
    return copy


class Evaluator:
    """Runs an ONNX graph on numpy batches and returns any of its tensors, intermediate ones included.

    The declared batch size is not enforced, so a [1, 3, H, W] model runs on [N, 3, H, W] batches.
    """

    def __init__(self, model) -> None:
        graph = model.graph
        self.input_names = graph_input_names(graph)
        self.input_ranks = input_ranks(graph)  # None where the model does not declare a shape
        self.output_names = [o.name for o in graph.output]
        self._known = constant_names(graph) | set(self.input_names) | {o for n in graph.node for o in n.output}
        self._reference = ReferenceEvaluator(_sorted(model), new_ops=_OPS)

    def run(self, feeds: Mapping[str, np.ndarray] | np.ndarray,
            outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Runs the graph; returns `outputs` (default: the graph outputs; any tensor may be named)."""
        if not isinstance(feeds, Mapping):
            if len(self.input_names) != 1:
                raise ValueError(f"the model has inputs {self.input_names}: pass a dict")
            feeds = {self.input_names[0]: feeds}
        missing = [name for name in self.input_names if name not in feeds]
        if missing:
            raise ValueError(f"missing input {missing[0]!r}")
        wanted = list(self.output_names if outputs is None else outputs)
        unknown = [t for t in wanted if t not in self._known]
        if unknown:
            raise ValueError(f"unknown tensors {unknown}")
        values = self._reference.run(wanted, {name: np.asarray(feeds[name]) for name in self.input_names})
        return dict(zip(wanted, values))
