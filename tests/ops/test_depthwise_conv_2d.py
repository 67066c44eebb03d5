"""DEPTHWISE_CONV_2D against independent expectations.

Float: onnx.reference.ReferenceEvaluator on an ONNX Conv with group = input channels (filter
[1, h, w, C*M] becomes OIHW [C*M, 1, h, w]; group g's M outputs are NNAPI's channels g*M .. g*M+M-1),
in float64. Quantized: plain Python-int loops with their own fixed-point rescale (exact), plus
within one step of dequantize -> float -> requantize, and signed/unsigned agreement up to 128.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from conv_reference import f32, onnx_conv, onnx_pads, quant_filter_and_bias, requantize_sums
from mlts.runtime import FuseCode, OperandCode, OperandType, OperationCode
from mlts.runtime.operand_type import SymmPerChannelQuantParams
from support.op_runner import Const, expect_error, run_op
from support.tolerance import assert_cts_close

OP = OperationCode.DEPTHWISE_CONV_2D
F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
PC = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
I32 = OperandCode.TENSOR_INT32
INT, BOOL = OperandType.scalar(OperandCode.INT32), OperandType.scalar(OperandCode.BOOL)
SAME, VALID = 1, 2


def dw_inputs(x_t, x, f_t, f, b_t, b, *, multiplier, pads=None, code=None, strides=(1, 1), fuse=0, nchw=None,
              dilation=None):
    """NNAPI DEPTHWISE_CONV_2D inputs; pads=(left, right, top, bottom) explicit, code=SAME/VALID implicit."""
    ins = [(x_t, x), (f_t, Const(f)), (b_t, Const(b))]
    if pads is not None:
        ins += [(INT, p) for p in pads]
    else:
        ins.append((INT, code))
    ins += [(INT, strides[0]), (INT, strides[1]), (INT, multiplier), (INT, fuse)]
    if nchw is not None or dilation is not None:
        ins.append((BOOL, bool(nchw)))
    if dilation is not None:
        ins += [(INT, dilation[0]), (INT, dilation[1])]
    return ins


def onnx_depthwise(x_nhwc, f_1hwc, b, *, onnx_pads=None, auto_pad=None, strides=(1, 1), dilation=(1, 1), fuse=0):
    """Float64 ONNX grouped Conv; strides/dilation as NNAPI (w, h); NHWC in and out."""
    # A depthwise [1, h, w, C*M] filter is the OHWI [C*M, h, w, 1] filter of a conv with group = C.
    return onnx_conv(x_nhwc, np.transpose(np.asarray(f_1hwc), (3, 1, 2, 0)), b, onnx_pads=onnx_pads,
                     auto_pad=auto_pad, strides=strides, dilation=dilation, fuse=fuse, group=np.shape(x_nhwc)[3])


# -- float ----------------------------------------------------------------------------------------
FLOAT_CASES = [
    # id, input NHWC, (kh, kw), multiplier, padding (tuple explicit / code), strides (w, h), dilation, nchw, fuse
    ("explicit", (1, 5, 6, 3), (3, 3), 1, (1, 1, 1, 1), (1, 1), None, None, FuseCode.NONE),
    ("explicit-mult2-asym", (1, 6, 5, 2), (2, 3), 2, (2, 0, 1, 0), (1, 1), None, None, FuseCode.RELU),
    ("explicit-mult3-stride", (2, 7, 7, 2), (3, 3), 3, (0, 1, 1, 2), (2, 3), None, False, FuseCode.RELU6),
    ("explicit-nchw", (1, 5, 5, 4), (3, 2), 1, (1, 1, 0, 2), (1, 2), None, True, FuseCode.RELU1),
    ("explicit-dilation", (1, 9, 8, 3), (3, 3), 2, (1, 2, 2, 1), (1, 1), (2, 3), False, FuseCode.NONE),
    ("explicit-dilation-nchw", (1, 8, 9, 2), (2, 3), 1, (0, 2, 1, 1), (2, 1), (3, 2), True, FuseCode.RELU),
    ("same-odd-stride2", (1, 7, 7, 3), (3, 3), 1, SAME, (2, 2), None, None, FuseCode.RELU6),
    ("same-even-stride2-mult2", (1, 8, 6, 2), (3, 3), 2, SAME, (2, 2), None, None, FuseCode.NONE),
    ("same-even-kernel", (1, 6, 8, 3), (2, 4), 1, SAME, (1, 3), None, None, FuseCode.RELU1),
    ("same-dilation-nchw", (2, 9, 7, 2), (3, 2), 2, SAME, (1, 2), (2, 2), True, FuseCode.NONE),
    ("valid", (1, 7, 6, 4), (3, 3), 1, VALID, (1, 1), None, None, FuseCode.RELU),
    ("valid-stride3-dilation", (1, 11, 10, 2), (2, 2), 1, VALID, (3, 3), (3, 2), False, FuseCode.NONE),
]


def _float_case(case, code, rng):
    _, xs, (kh, kw), mult, padding, strides, dilation, nchw, fuse = case
    dtype = np.float32 if code == F32 else np.float16
    x = rng.standard_normal(xs).astype(dtype)
    f = rng.standard_normal((1, kh, kw, xs[3] * mult)).astype(dtype)
    b = rng.standard_normal(xs[3] * mult).astype(dtype)
    dil = dilation or (1, 1)
    if isinstance(padding, tuple):
        expected = onnx_depthwise(x, f, b, onnx_pads=onnx_pads(padding), strides=strides, dilation=dil, fuse=fuse)
        kw_ = dict(pads=padding)
    else:
        expected = onnx_depthwise(x, f, b, auto_pad="SAME_UPPER" if padding == SAME else "VALID", strides=strides,
                                  dilation=dil, fuse=fuse)
        kw_ = dict(code=padding)
    x_in = np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2))) if nchw else x
    if nchw:
        expected = np.transpose(expected, (0, 3, 1, 2))
    ins = dw_inputs(OperandType.tensor(code, x_in.shape), x_in, OperandType.tensor(code, f.shape), f,
                    OperandType.tensor(code, b.shape), b, multiplier=mult, strides=strides, fuse=fuse, nchw=nchw,
                    dilation=dilation, **kw_)
    return ins, expected


@pytest.mark.parametrize("case", FLOAT_CASES, ids=[c[0] for c in FLOAT_CASES])
def test_float32(case):
    ins, expected = _float_case(case, F32, np.random.default_rng(zlib.crc32(case[0].encode())))
    (out,) = run_op(OP, ins, [OperandType.tensor(F32, expected.shape)])
    assert out.dtype == np.float32
    assert_cts_close(out, expected, F32)


@pytest.mark.parametrize("case", FLOAT_CASES[1::2], ids=[c[0] for c in FLOAT_CASES[1::2]])
def test_float16(case):
    ins, expected = _float_case(case, F16, np.random.default_rng(zlib.crc32(case[0].encode())))
    (out,) = run_op(OP, ins, [OperandType.tensor(F16, expected.shape)])
    assert out.dtype == np.float16
    assert_cts_close(out, expected, F16)


def test_output_shape_unknown_dims_are_inferred():
    ins, expected = _float_case(FLOAT_CASES[2], F32, np.random.default_rng(1))
    (out,) = run_op(OP, ins, [OperandType.tensor(F32, (0, 0, 0, 0))])
    assert_cts_close(out, expected, F32)


# -- independent integer reference ------------------------------------------------------------------
def ref_dw_quant(x, zx, f, zf, bias, mult, pads, strides, dilation, in_scale, f_scales, out_scale, out_zp, fuse, qrange):
    left, right, top, bottom = pads
    n_, h_, w_, c_ = x.shape
    _, kh_, kw_, cm = f.shape
    oh = (h_ + top + bottom - ((kh_ - 1) * dilation[1] + 1)) // strides[1] + 1
    ow = (w_ + left + right - ((kw_ - 1) * dilation[0] + 1)) // strides[0] + 1
    sums = np.zeros((n_, oh, ow, cm), dtype=np.int64)
    xi, fi = x.astype(int).tolist(), f.astype(int).tolist()
    for ic in range(c_):
        for k in range(mult):
            oc = ic * mult + k
            for n in range(n_):
                for oy in range(oh):
                    for ox in range(ow):
                        acc = 0
                        for ky in range(kh_):
                            for kx in range(kw_):
                                iy = oy * strides[1] - top + ky * dilation[1]
                                ix = ox * strides[0] - left + kx * dilation[0]
                                if 0 <= iy < h_ and 0 <= ix < w_:
                                    acc += (xi[n][iy][ix][ic] - zx) * (fi[0][ky][kx][oc] - zf)
                        sums[n, oy, ox, oc] = acc
    return requantize_sums(sums, bias, in_scale, f_scales, out_scale, out_zp, fuse, qrange)


QUANT_CASES = [
    # id, input, (kh, kw), multiplier, pads, strides, dilation, fuse, out_scale, per_channel
    ("explicit", (1, 5, 6, 3), (3, 3), 1, (1, 1, 1, 1), (1, 1), (1, 1), FuseCode.NONE, 0.2, False),
    ("mult2-stride-relu", (1, 7, 6, 2), (3, 2), 2, (0, 1, 1, 1), (2, 1), (1, 1), FuseCode.RELU, 0.15, False),
    ("dilation-relu6", (2, 7, 7, 2), (2, 2), 1, (1, 0, 0, 1), (1, 2), (2, 3), FuseCode.RELU6, 0.05, False),
    ("relu1", (1, 4, 5, 2), (2, 2), 1, (0, 0, 0, 0), (1, 1), (1, 1), FuseCode.RELU1, 0.02, False),
    ("multiplier>1", (1, 4, 4, 3), (2, 2), 1, (1, 0, 1, 0), (1, 1), (1, 1), FuseCode.NONE, 0.0001, False),
    ("ties", (1, 4, 5, 3), (2, 2), 2, (1, 0, 0, 1), (1, 1), (1, 1), FuseCode.NONE, 1.0, False),
    ("per-channel", (1, 5, 5, 3), (3, 3), 1, (1, 1, 1, 1), (1, 1), (1, 1), FuseCode.NONE, 0.1, True),
    ("per-channel-mult2-dil", (1, 7, 6, 2), (2, 3), 2, (1, 1, 0, 1), (2, 1), (1, 2), FuseCode.RELU, 0.08, True),
]


def _quant_case(case, rng):
    name, xs, (kh, kw), mult, pads, strides, dilation, fuse, out_scale, per_channel = case
    cm = xs[3] * mult
    zx, sx = 121, 0.03
    x = rng.integers(0, 256, xs)
    if per_channel:
        f = rng.integers(-127, 128, (1, kh, kw, cm))
        zf, f_scales = 0, [0.004 * (i + 1) for i in range(cm)]
    else:
        f = rng.integers(0, 256, (1, kh, kw, cm))
        zf, f_scales = 133, [0.006] * cm
    bias = rng.integers(-2000, 2000, cm)
    if name == "ties":  # multiplier exactly 0.25: rounding ties everywhere, where fixed point rounds twice
        sx = 0.5
        f_scales = [0.5] * len(f_scales)
        x = rng.integers(zx - 4, zx + 5, x.shape)
        f = rng.integers(zf - 4, zf + 5, f.shape)
        bias = rng.integers(-9, 10, len(f_scales))
    if name == "multiplier>1":
        x = rng.integers(zx - 3, zx + 4, xs)
        f = rng.integers(zf - 3, zf + 4, (1, kh, kw, cm))
        bias = rng.integers(-20, 21, cm)
    return dict(x=x, zx=zx, sx=sx, f=f, zf=zf, f_scales=f_scales, bias=bias, mult=mult, pads=pads, strides=strides,
                dilation=dilation, fuse=fuse, out_scale=out_scale, per_channel=per_channel)


def _reference(c):
    return ref_dw_quant(c["x"], c["zx"], c["f"], c["zf"], c["bias"], c["mult"], c["pads"], c["strides"], c["dilation"],
                        c["sx"], c["f_scales"], c["out_scale"], 128, c["fuse"], (0, 255))


def _run_quant(c, code, out_shape, shift=0, *, nchw=None):
    x = c["x"] + shift
    in_t = OperandType.tensor(code, x.shape, c["sx"], c["zx"] + shift)
    f_t, f, b_t = quant_filter_and_bias(c, code, shift, channel_dim=3)
    x_in = np.transpose(x, (0, 3, 1, 2)) if nchw else x
    ins = dw_inputs(in_t.with_dimensions(x_in.shape), x_in, f_t, f, b_t, c["bias"], multiplier=c["mult"],
                    pads=c["pads"], strides=c["strides"], fuse=c["fuse"], nchw=nchw,
                    dilation=None if c["dilation"] == (1, 1) else c["dilation"])
    n, h, w, ch = out_shape
    out_t = OperandType.tensor(code, (n, ch, h, w) if nchw else out_shape, c["out_scale"], 128 + shift)
    (out,) = run_op(OP, ins, [out_t])
    return np.transpose(out, (0, 2, 3, 1)) if nchw else out


@pytest.mark.parametrize("case", QUANT_CASES, ids=[c[0] for c in QUANT_CASES])
def test_quant8(case):
    c = _quant_case(case, np.random.default_rng(zlib.crc32(case[0].encode())))
    expected = _reference(c)
    assert len(np.unique(expected)) > 5, "test data should not saturate"
    out = _run_quant(c, U8, expected.shape)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, expected)
    # within one step of dequantize -> float depthwise conv -> requantize
    xr = (c["x"] - c["zx"]) * c["sx"]
    scales = np.asarray(c["f_scales"], np.float64)
    fr = (c["f"] - c["zf"]) * scales
    br = c["bias"] * c["sx"] * scales
    real = onnx_depthwise(xr, fr, br, onnx_pads=onnx_pads(c["pads"]), strides=c["strides"], dilation=c["dilation"],
                          fuse=c["fuse"])
    approx = np.clip(np.sign(real) * np.floor(np.abs(real) / c["out_scale"] + 0.5) + 128, 0, 255)
    assert_cts_close(out, approx, U8)
    # the signed variant agrees up to the 128 offset
    signed = _run_quant(c, S8, expected.shape, -128)
    assert signed.dtype == np.int8
    np.testing.assert_array_equal(signed.astype(np.int64) + 128, out.astype(np.int64))


def test_quant8_nchw_matches_nhwc():
    c = _quant_case(QUANT_CASES[1], np.random.default_rng(4))
    expected = _reference(c)
    np.testing.assert_array_equal(_run_quant(c, U8, expected.shape, nchw=True), expected)
    c = _quant_case(QUANT_CASES[6], np.random.default_rng(4))
    expected = _reference(c)
    np.testing.assert_array_equal(_run_quant(c, S8, expected.shape, -128, nchw=True).astype(np.int64) + 128, expected)


def test_quant8_implicit_same_padding():
    # SAME with a 3x3 filter at stride 1 pads 1 on every side: the explicit (1, 1, 1, 1) case.
    c = _quant_case(QUANT_CASES[0], np.random.default_rng(9))
    expected = _reference(c)
    in_t = OperandType.tensor(U8, c["x"].shape, c["sx"], c["zx"])
    f_t = OperandType.tensor(U8, c["f"].shape, c["f_scales"][0], c["zf"])
    b_t = OperandType.tensor(I32, c["bias"].shape, f32(f32(c["sx"]) * f32(c["f_scales"][0])), 0)
    ins = dw_inputs(in_t, c["x"], f_t, c["f"], b_t, c["bias"], multiplier=1, code=SAME)
    (out,) = run_op(OP, ins, [OperandType.tensor(U8, expected.shape, c["out_scale"], 128)])
    np.testing.assert_array_equal(out, expected)


# -- validation failures ----------------------------------------------------------------------------
def _valid_quant_inputs(**over):
    x = np.full((1, 4, 4, 2), 128, np.uint8)
    f = np.full((1, 2, 2, 4), 130, np.uint8)
    b = np.zeros(4, np.int32)
    args = dict(x_t=OperandType.tensor(U8, x.shape, 0.5, 128), x=x, f_t=OperandType.tensor(U8, f.shape, 0.25, 128), f=f,
                b_t=OperandType.tensor(I32, b.shape, 0.125, 0), b=b, multiplier=2)
    args.update(over)
    return dw_inputs(args["x_t"], args["x"], args["f_t"], args["f"], args["b_t"], args["b"],
                     multiplier=args["multiplier"], pads=(0, 0, 0, 0))


OUT_Q = OperandType.tensor(U8, (1, 3, 3, 4), 1.0, 128)


def _expect_bad_data(ins, out_t, *words):
    expect_error(OP, ins, [out_t], "operation 0", *words)


def test_valid_inputs_run():
    (out,) = run_op(OP, _valid_quant_inputs(), [OUT_Q])
    assert out.shape == (1, 3, 3, 4)


def test_bad_bias_scale():
    b = np.zeros(4, np.int32)
    _expect_bad_data(_valid_quant_inputs(b_t=OperandType.tensor(I32, b.shape, 0.25, 0)), OUT_Q, "bias scale", "input 2")


def test_multiplier_does_not_match_channels():
    _expect_bad_data(_valid_quant_inputs(multiplier=3), OUT_Q, "multiplier")


def test_bad_depth_multiplier():
    _expect_bad_data(_valid_quant_inputs(multiplier=0), OUT_Q, "multiplier", "input 9")


def test_filter_dim0_must_be_1():
    f = np.full((2, 2, 2, 4), 130, np.uint8)
    _expect_bad_data(_valid_quant_inputs(f_t=OperandType.tensor(U8, f.shape, 0.25, 128), f=f), OUT_Q, "input 1")


def test_bad_stride():
    ins = _valid_quant_inputs()
    ins[8] = (INT, -1)
    _expect_bad_data(ins, OUT_Q, "stride", "input 8")


def test_bad_dilation():
    ins = _valid_quant_inputs() + [(BOOL, False), (INT, 1), (INT, 0)]
    _expect_bad_data(ins, OUT_Q, "dilation", "input 13")


def test_per_channel_wrong_channel_dim():
    f = np.zeros((4, 2, 2, 4), np.int8)  # valid per-channel operand, but DEPTHWISE needs channelDim 3
    f_t = OperandType.tensor(PC, f.shape, 0.0, 0, SymmPerChannelQuantParams((0.1, 0.2, 0.3, 0.4), 0))
    ins = _valid_quant_inputs(f_t=f_t, f=f, b_t=OperandType.tensor(I32, (4,), 0.0, 0))
    _expect_bad_data(ins, OUT_Q, "channelDim")


def test_wrong_input_count():
    _expect_bad_data(_valid_quant_inputs() + [(BOOL, False), (INT, 1)], OUT_Q, "dilation")
    _expect_bad_data(_valid_quant_inputs()[:7], OUT_Q, "inputs")


def test_implicit_form_with_int_at_input_8():
    x = np.zeros((1, 4, 4, 2), np.float32)
    f = np.zeros((1, 2, 2, 2), np.float32)
    b = np.zeros(2, np.float32)
    ins = dw_inputs(OperandType.tensor(F32, x.shape), x, OperandType.tensor(F32, f.shape), f,
                    OperandType.tensor(F32, b.shape), b, multiplier=1, code=SAME) + [(INT, 1)]
    _expect_bad_data(ins, OperandType.tensor(F32, (1, 4, 4, 2)), "input 8")


def test_bad_padding_code():
    x = np.zeros((1, 4, 4, 2), np.float32)
    f = np.zeros((1, 2, 2, 2), np.float32)
    b = np.zeros(2, np.float32)
    ins = dw_inputs(OperandType.tensor(F32, x.shape), x, OperandType.tensor(F32, f.shape), f,
                    OperandType.tensor(F32, b.shape), b, multiplier=1, code=0)
    _expect_bad_data(ins, OperandType.tensor(F32, (1, 4, 4, 2)), "padding code", "input 3")


def test_float_bias_type_must_match():
    x = np.zeros((1, 4, 4, 2), np.float32)
    f = np.zeros((1, 2, 2, 2), np.float32)
    b = np.zeros(2, np.float16)
    ins = dw_inputs(OperandType.tensor(F32, x.shape), x, OperandType.tensor(F32, f.shape), f,
                    OperandType.tensor(F16, b.shape), b, multiplier=1, code=VALID)
    _expect_bad_data(ins, OperandType.tensor(F32, (1, 3, 3, 2)), "input 2")
