"""References for the convolution tests: ONNX Conv on onnx.reference (float64, NHWC in and out),
NNAPI's integer rescaling written with exact fractions, independently of mlts.runtime.ops.quant, and
the quantized case data and dequantize -> float -> requantize helpers the conv tests share."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from mlts.runtime import FuseCode, OperandCode, OperandType
from mlts.runtime.operand_type import SymmPerChannelQuantParams

PC, I32 = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, OperandCode.TENSOR_INT32


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


def requantize_sums(acc, bias, in_scale, f_scales, out_scale, out_zp, fuse, qrange):
    """NHWC int64 sums (without bias) -> quantized outputs: bias added, a Python-int rescale per element
    with each output channel's multiplier, the zero point added and the activation range applied."""
    lo, hi = ref_act_range(fuse, out_scale, out_zp, *qrange)
    out = np.zeros_like(acc)
    for oc in range(acc.shape[-1]):
        m, e = ref_quantize_multiplier(f32(f32(in_scale) * f32(f_scales[oc])) / f32(out_scale))
        for idx in np.ndindex(acc.shape[:-1]):
            out[idx + (oc,)] = min(hi, max(lo, ref_rescale(int(acc[idx + (oc,)]) + int(bias[oc]), m, e) + out_zp))
    return out


# -- shared quantized case data ---------------------------------------------------------------------
def random_quant_data(name: str, x_shape, f_shape, per_channel: bool, rng: np.random.Generator) -> dict:
    """Random uint8 input (zero point 121, scale 0.03) and filter (uint8 at 133 / 0.006, or per-channel
    int8 with scales 0.004 * (channel + 1)) with int32 bias; "multiplier>1" gets tiny sums so that an output
    scale below input x filter scale stays in range."""
    zx, sx = 121, 0.03
    x = rng.integers(0, 256, x_shape)
    if per_channel:
        f = rng.integers(-127, 128, f_shape)
        zf, f_scales = 0, [0.004 * (i + 1) for i in range(f_shape[0])]
    else:
        f = rng.integers(0, 256, f_shape)
        zf, f_scales = 133, [0.006] * f_shape[0]
    bias = rng.integers(-3000, 3000, f_shape[0])
    if name == "multiplier>1":
        x = rng.integers(zx - 2, zx + 3, x_shape)
        f = rng.integers(zf - 3, zf + 4, f_shape)
        bias = rng.integers(-20, 21, f_shape[0])
    return dict(x=x, zx=zx, sx=sx, f=f, zf=zf, f_scales=f_scales, bias=bias, per_channel=per_channel)


def quant_filter_and_bias(c: dict, code, shift: int = 0, channel_dim: int = 0):
    """(filter type, filter data, bias type) for case `c` in input type `code`: a per-channel int8 filter
    when c["per_channel"], else `code` with the filter moved by `shift` (-128 for the signed type)."""
    if c["per_channel"]:
        f = c["f"].astype(np.int8)
        f_t = OperandType.tensor(PC, f.shape, 0.0, 0, SymmPerChannelQuantParams(tuple(c["f_scales"]), channel_dim))
        return f_t, f, OperandType.tensor(I32, c["bias"].shape, 0.0, 0)
    f = c["f"] + shift
    f_t = OperandType.tensor(code, f.shape, c["f_scales"][0], c["zf"] + shift)
    return f_t, f, OperandType.tensor(I32, c["bias"].shape, f32(f32(c["sx"]) * f32(c["f_scales"][0])), 0)


def dequantized_operands(c: dict):
    """Case `c`'s input, filter and bias as float64 reals (filter scales per output channel)."""
    scales = np.asarray(c["f_scales"], np.float64)
    xr = (c["x"].astype(np.float64) - c["zx"]) * c["sx"]
    fr = (c["f"].astype(np.float64) - c["zf"]) * scales[:, None, None, None]
    br = c["bias"].astype(np.float64) * c["sx"] * scales
    return xr, fr, br


def requantize_real(real, out_scale, out_zp, lo, hi):
    """Reals -> quantized values rounding half away from zero, clipped to [lo, hi] (not cast)."""
    q = np.sign(real) * np.floor(np.abs(real) / out_scale + 0.5) + out_zp
    return np.clip(q, lo, hi)


def quantize_round(values, scale, zp, lo=0, hi=255):
    """AOSP spec example quantization: round half away from zero, clipped, as int64."""
    return requantize_real(np.asarray(values, np.float64), scale, zp, lo, hi).astype(np.int64)


def nchw_of(a):
    return np.ascontiguousarray(np.transpose(a, (0, 3, 1, 2)))


FLOAT_ACT_RANGE = {FuseCode.NONE: (-np.inf, np.inf), FuseCode.RELU: (0, np.inf), FuseCode.RELU6: (0, 6),
                   FuseCode.RELU1: (-1, 1)}
