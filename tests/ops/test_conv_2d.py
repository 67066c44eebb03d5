"""CONV_2D against independent expectations.

Float: onnx.reference.ReferenceEvaluator on an equivalent ONNX Conv (+ Relu/Clip) in float64 with
NCHW data and OIHW filters. Quantized: a plain Python-int loop with its own fixed-point rescale,
written from the NNAPI/gemmlowp description; exact match expected, plus within one step of
dequantize -> float conv -> requantize, and signed/unsigned variants agreeing up to the 128 offset.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from conv_reference import (dequantized_operands, f32, onnx_conv, onnx_pads, quant_filter_and_bias, random_quant_data,
                            ref_act_range, requantize_real, requantize_sums)
from mlts.runtime import FuseCode, OperandCode, OperandType, OperationCode
from mlts.runtime.operand_type import SymmPerChannelQuantParams
from support.op_runner import Const, expect_error, run_op
from support.tolerance import assert_cts_close

OP = OperationCode.CONV_2D
F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
PC = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
I32 = OperandCode.TENSOR_INT32
INT, BOOL = OperandType.scalar(OperandCode.INT32), OperandType.scalar(OperandCode.BOOL)
SAME, VALID = 1, 2


# -- building the NNAPI input list --------------------------------------------------------------
def conv_inputs(x_t, x, f_t, f, b_t, b, *, pads=None, code=None, strides=(1, 1), fuse=0, nchw=None,
                dilation=None):
    """NNAPI CONV_2D inputs; pads=(left, right, top, bottom) for explicit, code=SAME/VALID for implicit.
    nchw=None leaves out the layout flag; dilation=(w, h) adds it (and the flag)."""
    ins = [(x_t, x), (f_t, Const(f)), (b_t, Const(b))]
    if pads is not None:
        ins += [(INT, p) for p in pads]
    else:
        ins.append((INT, code))
    ins += [(INT, strides[0]), (INT, strides[1]), (INT, fuse)]
    if nchw is not None or dilation is not None:
        ins.append((BOOL, bool(nchw)))
    if dilation is not None:
        ins += [(INT, dilation[0]), (INT, dilation[1])]
    return ins


# -- float tests ----------------------------------------------------------------------------------
FLOAT_CASES = [
    # id, input NHWC, filter OHWI, padding (tuple = explicit pads, int = code), strides (w, h), dilation (w, h), nchw, fuse
    ("explicit-asym", (1, 6, 7, 3), (4, 3, 3, 3), (1, 2, 0, 1), (1, 1), None, None, FuseCode.NONE),
    ("explicit-stride-w2", (1, 6, 7, 3), (2, 3, 2, 3), (1, 0, 1, 1), (2, 1), None, None, FuseCode.RELU),
    ("explicit-layout-false", (2, 5, 5, 2), (3, 2, 2, 2), (0, 0, 0, 0), (1, 2), None, False, FuseCode.RELU1),
    ("explicit-nchw", (1, 5, 6, 3), (4, 3, 3, 3), (1, 1, 1, 1), (1, 1), None, True, FuseCode.RELU6),
    ("explicit-dilation", (1, 8, 9, 2), (3, 3, 3, 2), (2, 1, 1, 2), (1, 1), (2, 3), False, FuseCode.NONE),
    ("explicit-dilation-nchw", (1, 9, 8, 2), (3, 2, 3, 2), (0, 1, 2, 0), (2, 1), (3, 2), True, FuseCode.RELU),
    ("same-odd-stride2", (1, 7, 7, 3), (4, 3, 3, 3), SAME, (2, 2), None, None, FuseCode.RELU6),
    ("same-even-stride2", (1, 8, 6, 2), (3, 3, 3, 2), SAME, (2, 2), None, None, FuseCode.NONE),
    ("same-even-kernel", (1, 6, 8, 2), (3, 2, 4, 2), SAME, (1, 3), None, None, FuseCode.NONE),
    ("same-dilation", (1, 9, 8, 2), (2, 3, 3, 2), SAME, (1, 2), (2, 2), False, FuseCode.RELU1),
    ("same-nchw-dilation", (2, 7, 6, 3), (2, 3, 2, 3), SAME, (2, 1), (1, 3), True, FuseCode.NONE),
    ("valid", (1, 7, 6, 3), (4, 3, 3, 3), VALID, (1, 1), None, None, FuseCode.RELU1),
    ("valid-stride3-nchw", (1, 10, 8, 2), (2, 3, 2, 2), VALID, (3, 3), None, True, FuseCode.RELU),
    ("pointwise", (2, 4, 5, 6), (5, 1, 1, 6), VALID, (1, 1), None, None, FuseCode.NONE),
    ("pointwise-stride2", (1, 5, 5, 4), (3, 1, 1, 4), SAME, (2, 2), None, None, FuseCode.RELU),
]


def _float_case(case, code, rng):
    _, xs, fs, padding, strides, dilation, nchw, fuse = case
    dtype = np.float32 if code == F32 else np.float16
    x = rng.standard_normal(xs).astype(dtype)
    f = rng.standard_normal(fs).astype(dtype)
    b = rng.standard_normal(fs[0]).astype(dtype)
    if isinstance(padding, tuple):
        expected = onnx_conv(x, f, b, onnx_pads=onnx_pads(padding), strides=strides, dilation=dilation or (1, 1), fuse=fuse)
        kw = dict(pads=padding)
    else:
        expected = onnx_conv(x, f, b, auto_pad="SAME_UPPER" if padding == SAME else "VALID", strides=strides,
                             dilation=dilation or (1, 1), fuse=fuse)
        kw = dict(code=padding)
    x_in = np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2))) if nchw else x
    if nchw:
        expected = np.transpose(expected, (0, 3, 1, 2))
    ins = conv_inputs(OperandType.tensor(code, x_in.shape), x_in, OperandType.tensor(code, f.shape), f,
                      OperandType.tensor(code, b.shape), b, strides=strides, fuse=fuse, nchw=nchw,
                      dilation=dilation, **kw)
    return ins, expected


@pytest.mark.parametrize("case", FLOAT_CASES, ids=[c[0] for c in FLOAT_CASES])
def test_float32(case):
    rng = np.random.default_rng(zlib.crc32(case[0].encode()))
    ins, expected = _float_case(case, F32, rng)
    (out,) = run_op(OP, ins, [OperandType.tensor(F32, expected.shape)])
    assert out.dtype == np.float32
    assert_cts_close(out, expected, F32)


@pytest.mark.parametrize("case", FLOAT_CASES[::2], ids=[c[0] for c in FLOAT_CASES[::2]])
def test_float16(case):
    rng = np.random.default_rng(7)
    ins, expected = _float_case(case, F16, rng)
    (out,) = run_op(OP, ins, [OperandType.tensor(F16, expected.shape)])
    assert out.dtype == np.float16
    assert_cts_close(out, expected, F16)


def test_output_shape_unknown_dims_are_inferred():
    rng = np.random.default_rng(3)
    ins, expected = _float_case(FLOAT_CASES[6], F32, rng)
    (out,) = run_op(OP, ins, [OperandType.tensor(F32, (0, 0, 0, 0))])
    assert_cts_close(out, expected, F32)


# -- independent integer reference ----------------------------------------------------------------
def ref_conv_quant(x, zx, f, zf, bias, pads, strides, dilation, in_scale, f_scales, out_scale, out_zp, fuse, qrange):
    """Plain loops over NHWC/OHWI int data; f_scales has one entry per output channel."""
    left, _, top, _ = pads
    n_, h_, w_, c_ = x.shape
    o_, kh_, kw_, _ = f.shape
    (eff_h, eff_w) = ((kh_ - 1) * dilation[1] + 1, (kw_ - 1) * dilation[0] + 1)
    oh = (h_ + pads[2] + pads[3] - eff_h) // strides[1] + 1
    ow = (w_ + pads[0] + pads[1] - eff_w) // strides[0] + 1
    sums = np.zeros((n_, oh, ow, o_), dtype=np.int64)
    xi, fi = x.astype(int).tolist(), f.astype(int).tolist()
    for oc in range(o_):
        for n in range(n_):
            for oy in range(oh):
                for ox in range(ow):
                    acc = 0
                    for ky in range(kh_):
                        for kx in range(kw_):
                            iy = oy * strides[1] - top + ky * dilation[1]
                            ix = ox * strides[0] - left + kx * dilation[0]
                            if 0 <= iy < h_ and 0 <= ix < w_:
                                for ic in range(c_):
                                    acc += (xi[n][iy][ix][ic] - zx) * (fi[oc][ky][kx][ic] - zf)
                    sums[n, oy, ox, oc] = acc
    return requantize_sums(sums, bias, in_scale, f_scales, out_scale, out_zp, fuse, qrange)


def dequant_float_expected(x, zx, sx, f, zf, f_scales, bias, pads, strides, dilation, out_scale, out_zp, fuse, qrange):
    """dequantize -> float conv (ONNX) -> requantize with round-half-away and the real activation."""
    xr, fr, br = dequantized_operands(dict(x=x, zx=zx, sx=sx, f=f, zf=zf, f_scales=f_scales, bias=bias))
    real = onnx_conv(xr, fr, br, onnx_pads=onnx_pads(pads), strides=strides, dilation=dilation, fuse=fuse)
    return requantize_real(real, out_scale, out_zp, *qrange)


QUANT_CASES = [
    # id, input, filter, pads, strides, dilation, fuse, out_scale, per_channel
    ("explicit", (1, 5, 6, 3), (4, 3, 3, 3), (1, 1, 1, 1), (1, 1), (1, 1), FuseCode.NONE, 0.9, False),
    ("stride-relu", (1, 6, 5, 2), (3, 2, 3, 2), (0, 1, 1, 0), (2, 1), (1, 1), FuseCode.RELU, 0.6, False),
    ("dilation-relu6", (2, 6, 6, 2), (2, 2, 2, 2), (1, 0, 0, 1), (1, 2), (2, 2), FuseCode.RELU6, 0.05, False),
    ("relu1", (1, 4, 4, 2), (2, 2, 2, 2), (0, 0, 0, 0), (1, 1), (1, 1), FuseCode.RELU1, 0.02, False),
    ("multiplier>1", (1, 4, 5, 2), (2, 2, 2, 2), (1, 0, 0, 1), (1, 1), (1, 1), FuseCode.NONE, 0.0001, False),
    ("ties", (1, 4, 5, 2), (3, 2, 2, 2), (1, 0, 0, 1), (1, 1), (1, 1), FuseCode.NONE, 1.0, False),
    ("deep-float64-path", (1, 3, 3, 150), (2, 3, 3, 150), (1, 1, 1, 1), (1, 1), (1, 1), FuseCode.NONE, 1.0, False),
    ("per-channel", (1, 5, 5, 3), (4, 3, 3, 3), (1, 1, 1, 1), (1, 1), (1, 1), FuseCode.NONE, 0.4, True),
    ("per-channel-stride-dil", (1, 7, 6, 2), (3, 2, 3, 2), (1, 1, 0, 1), (2, 1), (1, 2), FuseCode.RELU, 0.3, True),
]


def _quant_case(case, rng):
    name, xs, fs, pads, strides, dilation, fuse, out_scale, per_channel = case
    c = random_quant_data(name, xs, fs, per_channel, rng)
    zx, sx, x, zf, f, f_scales, bias = (c[k] for k in ("zx", "sx", "x", "zf", "f", "f_scales", "bias"))
    if name == "ties":  # multiplier exactly 0.25: rounding ties everywhere, where fixed point rounds twice
        sx = 0.5
        f_scales = [0.5] * len(f_scales)
        x = rng.integers(zx - 4, zx + 5, x.shape)
        f = rng.integers(zf - 4, zf + 5, f.shape)
        bias = rng.integers(-9, 10, len(f_scales))
    if name == "deep-float64-path":  # extreme values on a deep filter: partial sums beyond float32's 2**24
        zx, zf = 128, 128
        x = rng.choice([0, 255], xs)
        f = rng.choice([0, 255], fs)
    return dict(x=x, zx=zx, sx=sx, f=f, zf=zf, f_scales=f_scales, bias=bias, pads=pads, strides=strides,
                dilation=dilation, fuse=fuse, out_scale=out_scale, per_channel=per_channel)


def _run_quant(c, code, out_shape, shift=0, *, nchw=None):
    """Run the quantized op for the case in type `code`; `shift` moves data and zero points (-128 for int8)."""
    x = (c["x"] + shift).astype(np.int64)
    in_t = OperandType.tensor(code, x.shape, c["sx"], c["zx"] + shift)
    f_t, f, b_t = quant_filter_and_bias(c, code, shift)
    x_in = np.transpose(x, (0, 3, 1, 2)) if nchw else x
    ins = conv_inputs(in_t.with_dimensions(x_in.shape), x_in, f_t, f, b_t, c["bias"], pads=c["pads"],
                      strides=c["strides"], fuse=c["fuse"], nchw=nchw,
                      dilation=None if c["dilation"] == (1, 1) else c["dilation"])
    n, h, w, ch = out_shape
    out_t = OperandType.tensor(code, (n, ch, h, w) if nchw else out_shape, c["out_scale"], 128 + shift)
    (out,) = run_op(OP, ins, [out_t])
    return np.transpose(out, (0, 2, 3, 1)) if nchw else out


@pytest.mark.parametrize("case", QUANT_CASES, ids=[c[0] for c in QUANT_CASES])
def test_quant8(case):
    c = _quant_case(case, np.random.default_rng(11))
    expected = ref_conv_quant(c["x"], c["zx"], c["f"], c["zf"], c["bias"], c["pads"], c["strides"], c["dilation"],
                              c["sx"], c["f_scales"], c["out_scale"], 128, c["fuse"], (0, 255))
    out = _run_quant(c, U8, expected.shape)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, expected)
    assert len(np.unique(expected)) > 5, "test data should not saturate"
    approx = dequant_float_expected(c["x"], c["zx"], c["sx"], c["f"], c["zf"], c["f_scales"], c["bias"], c["pads"],
                                    c["strides"], c["dilation"], c["out_scale"], 128, c["fuse"], (0, 255))
    approx = np.clip(approx, *ref_act_range(c["fuse"], c["out_scale"], 128, 0, 255))
    assert_cts_close(out, approx, U8)
    # the signed variant gives the same results up to the 128 offset
    signed = _run_quant(c, S8, expected.shape, -128)
    assert signed.dtype == np.int8
    np.testing.assert_array_equal(signed.astype(np.int64) + 128, out.astype(np.int64))


def test_quant8_nchw_and_implicit_padding():
    c = _quant_case(QUANT_CASES[0], np.random.default_rng(5))
    nhwc = _run_quant(c, U8, (1, 5, 6, 4))
    nchw = _run_quant(c, U8, (1, 5, 6, 4), nchw=True)
    np.testing.assert_array_equal(nchw, nhwc)
    # SAME on a 3x3 stride-1 filter is padding 1 on every side: same as the explicit case
    x = c["x"].astype(np.uint8)
    in_t = OperandType.tensor(U8, x.shape, c["sx"], c["zx"])
    f_t = OperandType.tensor(U8, c["f"].shape, c["f_scales"][0], c["zf"])
    b_t = OperandType.tensor(I32, c["bias"].shape, f32(f32(c["sx"]) * f32(c["f_scales"][0])), 0)
    ins = conv_inputs(in_t, x, f_t, c["f"], b_t, c["bias"], code=SAME)
    (out,) = run_op(OP, ins, [OperandType.tensor(U8, nhwc.shape, c["out_scale"], 128)])
    np.testing.assert_array_equal(out, nhwc)


# -- validation failures ----------------------------------------------------------------------------
def _valid_quant_inputs(**over):
    x = np.full((1, 4, 4, 2), 128, np.uint8)
    f = np.full((3, 2, 2, 2), 130, np.uint8)
    b = np.zeros(3, np.int32)
    in_t = OperandType.tensor(U8, x.shape, 0.5, 128)
    f_t = OperandType.tensor(U8, f.shape, 0.25, 128)
    b_t = OperandType.tensor(I32, b.shape, 0.125, 0)
    args = dict(x_t=in_t, x=x, f_t=f_t, f=f, b_t=b_t, b=b)
    args.update(over)
    return conv_inputs(args["x_t"], args["x"], args["f_t"], args["f"], args["b_t"], args["b"], pads=(0, 0, 0, 0))


def _expect_bad_data(ins, out_t, *words):
    expect_error(OP, ins, [out_t], "operation 0", *words)


OUT_Q = OperandType.tensor(U8, (1, 3, 3, 3), 1.0, 128)


def test_valid_inputs_run():
    (out,) = run_op(OP, _valid_quant_inputs(), [OUT_Q])
    assert out.shape == (1, 3, 3, 3)


def test_bad_bias_scale():
    b = np.zeros(3, np.int32)
    _expect_bad_data(_valid_quant_inputs(b_t=OperandType.tensor(I32, b.shape, 0.13, 0)), OUT_Q, "bias scale", "input 2")


def test_bias_scale_within_nnapi_tolerance_is_accepted():
    b = np.zeros(3, np.int32)
    (out,) = run_op(OP, _valid_quant_inputs(b_t=OperandType.tensor(I32, b.shape, 0.125 * (1 + 5e-7), 0)), [OUT_Q])
    assert out.shape == (1, 3, 3, 3)


def test_wrong_filter_channels():
    f = np.zeros((3, 2, 2, 3), np.uint8)
    _expect_bad_data(_valid_quant_inputs(f_t=OperandType.tensor(U8, f.shape, 0.25, 128), f=f), OUT_Q, "channels")


def test_wrong_bias_size():
    b = np.zeros(4, np.int32)
    _expect_bad_data(_valid_quant_inputs(b_t=OperandType.tensor(I32, b.shape, 0.125, 0), b=b), OUT_Q, "bias")


def test_bad_stride():
    ins = _valid_quant_inputs()
    ins[7] = (INT, 0)
    _expect_bad_data(ins, OUT_Q, "stride", "input 7")


def test_negative_padding():
    ins = _valid_quant_inputs()
    ins[4] = (INT, -1)
    _expect_bad_data(ins, OUT_Q, "padding")


def test_padding_not_smaller_than_filter():
    ins = _valid_quant_inputs()
    ins[3] = (INT, 2)  # filter width 2
    _expect_bad_data(ins, OUT_Q, "padding")


def test_bad_fuse_code():
    ins = _valid_quant_inputs()
    ins[9] = (INT, 7)
    _expect_bad_data(ins, OUT_Q, "activation")


def test_bad_padding_code():
    x = np.zeros((1, 4, 4, 2), np.float32)
    f = np.zeros((3, 2, 2, 2), np.float32)
    b = np.zeros(3, np.float32)
    ins = conv_inputs(OperandType.tensor(F32, x.shape), x, OperandType.tensor(F32, f.shape), f,
                      OperandType.tensor(F32, b.shape), b, code=3)
    _expect_bad_data(ins, OperandType.tensor(F32, (1, 3, 3, 3)), "padding code")


def test_wrong_input_count():
    ins = _valid_quant_inputs() + [(BOOL, False), (INT, 1)]  # 12: only one dilation factor
    _expect_bad_data(ins, OUT_Q, "dilation")
    _expect_bad_data(_valid_quant_inputs()[:6], OUT_Q, "inputs")
    _expect_bad_data(_valid_quant_inputs()[:8], OUT_Q, "input 7")


def test_wrong_type_for_implicit_layout_flag():
    x = np.zeros((1, 4, 4, 2), np.float32)
    f = np.zeros((3, 2, 2, 2), np.float32)
    b = np.zeros(3, np.float32)
    ins = conv_inputs(OperandType.tensor(F32, x.shape), x, OperandType.tensor(F32, f.shape), f,
                      OperandType.tensor(F32, b.shape), b, code=SAME) + [(INT, 0)]  # 8 inputs, input 7 INT32
    _expect_bad_data(ins, OperandType.tensor(F32, (1, 4, 4, 3)), "input 7")


def test_per_channel_wrong_channel_dim():
    f = np.zeros((2, 2, 2, 2), np.int8)  # channel dim 3 has 2 entries: valid operand, wrong for CONV_2D
    f_t = OperandType.tensor(PC, f.shape, 0.0, 0, SymmPerChannelQuantParams((0.1, 0.2), 3))
    b = np.zeros(2, np.int32)
    ins = _valid_quant_inputs(f_t=f_t, f=f, b_t=OperandType.tensor(I32, b.shape, 0.0, 0), b=b)
    _expect_bad_data(ins, OUT_Q, "channelDim")


def test_mismatched_filter_type():
    f = np.zeros((3, 2, 2, 2), np.int8)
    ins = _valid_quant_inputs(f_t=OperandType.tensor(S8, f.shape, 0.25, 0), f=f)
    _expect_bad_data(ins, OUT_Q, "input 1")


def test_output_type_must_match():
    _expect_bad_data(_valid_quant_inputs(), OperandType.tensor(S8, (1, 3, 3, 3), 1.0, 0), "output")


# -- kernel internals -------------------------------------------------------------------------------
def test_fast_rescale_matches_quant_helper():
    """The in-place rescale used by the kernels is bit-identical to quant.multiply_by_quantized_multiplier."""
    from mlts.runtime.ops._conv_common import rescale_in_place
    from mlts.runtime.ops.quant import multiply_by_quantized_multiplier, quantize_multiplier_array

    rng = np.random.default_rng(0)
    reals = [np.array([0.25, 0.5, 1.0, 2.0, 0.125, 3.0, 1e-12])]
    reals += [np.exp(rng.uniform(np.log(1e-9), np.log(1e3), 7)) for _ in range(40)]
    for i, real in enumerate(reals):
        x = rng.integers(-2**31, 2**31, (30, 7)) if i % 2 else rng.integers(-5000, 5000, (30, 7))
        m, s = quantize_multiplier_array(real)
        for mm, ss in ((m, s), (m[0], s[0])):
            expected = multiply_by_quantized_multiplier(x, mm, ss)
            np.testing.assert_array_equal(rescale_in_place(x.astype(np.int64), mm, ss), expected)


def test_exact_sum_dtype_bound():
    """Quantized sums go through float32 only when every partial sum is provably below 2**24."""
    from mlts.runtime.ops._conv_common import exact_sum_dtype

    x = np.full((4, 8), 255.0)
    assert exact_sum_dtype(x, np.full((3, 8), 255.0), out_axis=0)[0].dtype == np.float32  # 8*255*255 < 2**24
    assert exact_sum_dtype(x, np.full((3, 300), 255.0), out_axis=0)[0].dtype == np.float64  # 300*255*255 > 2**24
