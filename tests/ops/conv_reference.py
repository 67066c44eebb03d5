"""References for the convolution tests: ONNX Conv on onnx.reference (float64, NHWC in and out), and
NNAPI's integer rescaling written with exact fractions, independently of mlts.runtime.ops.quant."""
from __future__ import annotations

import math
from fractions import Fraction

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


# -- independent integer reference ----------------------------------------------------------------
def ref_quantize_multiplier(real: float) -> tuple[int, int]:
    """real ~= m * 2**(e - 31) with m a 31-bit mantissa (rounded half away from zero)."""
    if real == 0:
        return 0, 0
    mant, e = math.frexp(real)
    m = int(Fraction(mant) * 2**31 + Fraction(1, 2))  # mant > 0: floor(x + 1/2) is round-half-away
    if m == 2**31:
        m, e = m // 2, e + 1
    if e < -31:
        return 0, 0
    return m, e


def ref_rescale(acc: int, m: int, e: int) -> int:
    """acc * m * 2**(e-31) the gemmlowp way: saturating left shift, doubling high multiply rounding
    half toward +infinity, then a rounding right shift rounding half away from zero."""
    left, right = max(e, 0), max(-e, 0)
    v = max(-2**31, min(2**31 - 1, acc * 2**left))
    if v == m == -2**31:
        hi = 2**31 - 1
    else:
        hi = math.floor(Fraction(v * m, 2**31) + Fraction(1, 2))
    q = Fraction(hi, 2**right)
    return int(math.floor(abs(q) + Fraction(1, 2))) * (1 if q >= 0 else -1)


def ref_act_range(fuse, scale, zp, qmin, qmax):
    def q(r):
        v = Fraction(r) / Fraction(scale)
        return zp + int(math.floor(abs(v) + Fraction(1, 2))) * (1 if v >= 0 else -1)
    if fuse == FuseCode.RELU:
        return max(qmin, q(0)), qmax
    if fuse == FuseCode.RELU6:
        return max(qmin, q(0)), min(qmax, q(6))
    if fuse == FuseCode.RELU1:
        return max(qmin, q(-1)), min(qmax, q(1))
    return qmin, qmax


def f32(v) -> float:
    return float(np.float32(v))
