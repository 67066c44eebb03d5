"""GROUPED_CONV_2D against independent expectations.

Float: onnx.reference's Conv with its `group` attribute (float64, NCHW data and OIHW filters, via
conv_reference.onnx_conv). Quantized: numpy int64 accumulation group by group plus a plain Python-int
fixed-point rescale (conv_reference), exact match expected, within one step of dequantize -> float
conv -> requantize, and the signed variant equal up to the 128 offset. Plus AOSP's spec examples
(V1_2/grouped_conv2d.mod.py).
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from conv_reference import (FLOAT_ACT_RANGE, dequantized_operands, nchw_of, onnx_conv, onnx_pads, quant_filter_and_bias,
                            quantize_round, random_quant_data, ref_act_range, requantize_real, requantize_sums)
from mlts.runtime import FuseCode, OperandCode, OperandType, OperationCode
from mlts.runtime.operand_type import SymmPerChannelQuantParams
from support.direct import run_op_direct
from support.op_runner import Const, expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

OP = OperationCode.GROUPED_CONV_2D
F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
PC = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
I32 = OperandCode.TENSOR_INT32
INT, BOOL = OperandType.scalar(OperandCode.INT32), OperandType.scalar(OperandCode.BOOL)
SAME, VALID = 1, 2


def gconv_inputs(x_t, x, f_t, f, b_t, b, *, groups, pads=None, code=None, strides=(1, 1), fuse=0, nchw=False):
    """NNAPI GROUPED_CONV_2D inputs: pads=(left, right, top, bottom) gives the explicit form (12 inputs),
    code=SAME/VALID the implicit one (9)."""
    ins = [(x_t, x), (f_t, Const(f)), (b_t, Const(b))]
    ins += [(INT, p) for p in pads] if pads is not None else [(INT, code)]
    ins += [(INT, strides[0]), (INT, strides[1]), (INT, groups), (INT, fuse), (BOOL, nchw)]
    return ins


# -- float -------------------------------------------------------------------------------------------
FLOAT_CASES = [
    # id, input NHWC, filter [out, h, w, depth_group], groups, padding (tuple: explicit, int: code),
    # strides (w, h), nchw, fuse
    ("explicit-2groups", (1, 5, 6, 4), (6, 3, 3, 2), 2, (1, 2, 0, 1), (1, 1), False, FuseCode.NONE),
    ("explicit-3groups-stride", (2, 6, 7, 6), (3, 2, 3, 2), 3, (1, 0, 1, 1), (2, 1), False, FuseCode.RELU),
    ("explicit-nchw", (1, 5, 5, 4), (4, 3, 2, 2), 2, (0, 1, 1, 0), (1, 2), True, FuseCode.RELU1),
    ("same-stride2", (1, 7, 7, 6), (6, 3, 3, 3), 2, SAME, (2, 2), False, FuseCode.RELU6),
    ("same-nchw-even-kernel", (1, 6, 8, 4), (8, 2, 4, 1), 4, SAME, (1, 3), True, FuseCode.NONE),
    ("valid-3groups", (1, 7, 6, 6), (9, 3, 3, 2), 3, VALID, (1, 1), False, FuseCode.NONE),
    ("one-group", (1, 4, 5, 3), (2, 2, 2, 3), 1, VALID, (1, 1), False, FuseCode.NONE),
    ("pointwise-4groups", (2, 4, 5, 8), (4, 1, 1, 2), 4, VALID, (1, 1), True, FuseCode.RELU),
]


def _float_case(case, code, rng):
    _, xs, fs, groups, padding, strides, nchw, fuse = case
    dtype = np.float32 if code == F32 else np.float16
    x = rng.standard_normal(xs).astype(dtype)
    f = rng.standard_normal(fs).astype(dtype)
    b = rng.standard_normal(fs[0]).astype(dtype)
    if isinstance(padding, tuple):
        expected = onnx_conv(x, f, b, onnx_pads=onnx_pads(padding), strides=strides, fuse=fuse, group=groups)
        kw = dict(pads=padding)
    else:
        expected = onnx_conv(x, f, b, auto_pad="SAME_UPPER" if padding == SAME else "VALID", strides=strides,
                             fuse=fuse, group=groups)
        kw = dict(code=padding)
    x_in = nchw_of(x) if nchw else x
    if nchw:
        expected = nchw_of(expected)
    ins = gconv_inputs(OperandType.tensor(code, x_in.shape), x_in, OperandType.tensor(code, f.shape), f,
                       OperandType.tensor(code, b.shape), b, groups=groups, strides=strides, fuse=fuse, nchw=nchw,
                       **kw)
    return ins, expected


@pytest.mark.parametrize("case", FLOAT_CASES, ids=[c[0] for c in FLOAT_CASES])
def test_float32(case):
    ins, expected = _float_case(case, F32, np.random.default_rng(zlib.crc32(case[0].encode())))
    (out,) = run_op(OP, ins, [OperandType.tensor(F32, expected.shape)])
    assert out.dtype == np.float32
    assert_cts_close(out, expected, F32)


@pytest.mark.parametrize("case", FLOAT_CASES[::2], ids=[c[0] for c in FLOAT_CASES[::2]])
def test_float16(case):
    ins, expected = _float_case(case, F16, np.random.default_rng(7))
    (out,) = run_op(OP, ins, [OperandType.tensor(F16, expected.shape)])
    assert out.dtype == np.float16
    assert_cts_close(out, expected, F16)


def test_output_dims_inferred_and_input_dims_unknown_at_build_time():
    ins, expected = _float_case(FLOAT_CASES[3], F32, np.random.default_rng(3))
    (out,) = run_op(OP, ins, [OperandType.tensor(F32, (0, 0, 0, 0))])
    assert_cts_close(out, expected, F32)
    ins[0] = (OperandType.tensor(F32, (0, 7, 0, 6)), ins[0][1])  # batch and width known only at run time
    (out,) = run_op(OP, ins, [OperandType.tensor(F32, (0, 0, 0, 0))])
    assert_cts_close(out, expected, F32)


def _inferred_output(ins, out_t):
    return inferred_output_types(OP, ins, [out_t])[0]


def test_build_time_shape_inference():
    ins, expected = _float_case(FLOAT_CASES[2], F32, np.random.default_rng(1))  # NCHW
    assert _inferred_output(ins, OperandType.tensor(F32, (0, 0, 0, 0))).dimensions == expected.shape
    ins[0] = (OperandType.tensor(F32, (1, 4, 0, 5)), ins[0][1])
    assert _inferred_output(ins, OperandType.tensor(F32, (0, 0, 0, 0))).dimensions == (0, 0, 0, 0)


@pytest.mark.parametrize("code", [F32, U8])
def test_zero_batch(code):
    """Batch 0 gives an empty output (run directly: a model input cannot have batch 0)."""
    q = code == U8
    dtype = np.uint8 if q else np.float32
    qp = (0.1, 128) if q else ()
    x = np.zeros((0, 4, 5, 4), dtype)
    b_t = OperandType.tensor(I32 if q else F32, (6,), *((0.01, 0) if q else ()))
    ins = gconv_inputs(OperandType.tensor(code, x.shape, *qp), x, OperandType.tensor(code, (6, 3, 3, 2), *qp),
                       np.full((6, 3, 3, 2), 130, dtype), b_t, np.zeros(6, b_t.dtype), groups=2, code=SAME,
                       strides=(2, 1))
    (out,) = run_op_direct(OP, ins, [OperandType.tensor(code, (0, 4, 3, 6), *qp)])
    assert out.shape == (0, 4, 3, 6)


# -- independent integer reference ---------------------------------------------------------------------
def ref_grouped_quant(x, zx, f, zf, bias, groups, pads, strides, sx, f_scales, out_scale, out_zp, fuse, qrange):
    """NHWC int data: int64 sums group by group over an explicitly padded input (zero point = real 0),
    then a Python-int rescale per element. f_scales has one entry per output channel."""
    left, right, top, bottom = pads
    sw, sh = strides
    xc = np.pad(x.astype(np.int64) - zx, ((0, 0), (top, bottom), (left, right), (0, 0)))
    fc = f.astype(np.int64) - zf
    n, hp, wp, _ = xc.shape
    o, kh, kw, dg = fc.shape
    og = o // groups
    oh, ow = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    acc = np.zeros((n, oh, ow, o), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            patch = xc[:, ky:ky + (oh - 1) * sh + 1:sh, kx:kx + (ow - 1) * sw + 1:sw, :]
            for g in range(groups):
                acc[..., g * og:(g + 1) * og] += np.einsum(
                    "nhwc,oc->nhwo", patch[..., g * dg:(g + 1) * dg], fc[g * og:(g + 1) * og, ky, kx, :])
    return requantize_sums(acc, bias, sx, f_scales, out_scale, out_zp, fuse, qrange)


def dequant_float_expected(c, qrange):
    """dequantize -> float grouped conv (ONNX) -> requantize with round-half-away and the real activation."""
    xr, fr, br = dequantized_operands(c)
    real = onnx_conv(xr, fr, br, onnx_pads=onnx_pads(c["pads"]), strides=c["strides"], fuse=c["fuse"],
                     group=c["groups"])
    return requantize_real(real, c["out_scale"], 128, *ref_act_range(c["fuse"], c["out_scale"], 128, *qrange))


QUANT_CASES = [
    # id, input, filter, groups, pads, strides, fuse, out_scale, per_channel
    ("explicit", (1, 5, 6, 4), (6, 3, 3, 2), 2, (1, 1, 1, 1), (1, 1), FuseCode.NONE, 0.9, False),
    ("stride-relu", (1, 6, 5, 6), (3, 2, 3, 2), 3, (0, 1, 1, 0), (2, 1), FuseCode.RELU, 0.6, False),
    ("relu1", (1, 4, 4, 4), (4, 2, 2, 2), 2, (0, 0, 0, 0), (1, 1), FuseCode.RELU1, 0.02, False),
    ("relu6-depthwise-like", (2, 5, 5, 4), (4, 2, 2, 1), 4, (1, 0, 0, 1), (1, 2), FuseCode.RELU6, 0.05, False),
    ("multiplier>1", (1, 4, 5, 4), (4, 2, 2, 2), 2, (1, 0, 0, 1), (1, 1), FuseCode.NONE, 0.0001, False),
    ("per-channel", (1, 5, 5, 6), (6, 3, 3, 3), 2, (1, 1, 1, 1), (1, 1), FuseCode.NONE, 0.4, True),
    ("per-channel-stride-relu", (1, 7, 6, 4), (8, 2, 3, 2), 2, (1, 1, 0, 1), (2, 1), FuseCode.RELU, 0.3, True),
]


def _quant_case(case, rng):
    name, xs, fs, groups, pads, strides, fuse, out_scale, per_channel = case
    c = random_quant_data(name, xs, fs, per_channel, rng)
    return dict(c, groups=groups, pads=pads, strides=strides, fuse=fuse, out_scale=out_scale)


def _run_quant(c, code, shift=0, *, nchw=False, pads=None, padding_code=None):
    """Run the case in type `code`; `shift` moves data and zero points (-128 for the signed type)."""
    x = (c["x"] + shift).astype(np.int64)
    in_t = OperandType.tensor(code, x.shape, c["sx"], c["zx"] + shift)
    f_t, f, b_t = quant_filter_and_bias(c, code, shift)
    x_in = nchw_of(x) if nchw else x
    kw = dict(code=padding_code) if padding_code else dict(pads=pads or c["pads"])
    ins = gconv_inputs(in_t.with_dimensions(x_in.shape), x_in, f_t, f, b_t, c["bias"], groups=c["groups"],
                       strides=c["strides"], fuse=c["fuse"], nchw=nchw, **kw)
    (out,) = run_op(OP, ins, [OperandType.tensor(code, (0, 0, 0, 0), c["out_scale"], 128 + shift)])
    return np.transpose(out, (0, 2, 3, 1)) if nchw else out


@pytest.mark.parametrize("case", QUANT_CASES, ids=[c[0] for c in QUANT_CASES])
def test_quant8(case):
    c = _quant_case(case, np.random.default_rng(zlib.crc32(case[0].encode())))
    expected = ref_grouped_quant(c["x"], c["zx"], c["f"], c["zf"], c["bias"], c["groups"], c["pads"], c["strides"],
                                 c["sx"], c["f_scales"], c["out_scale"], 128, c["fuse"], (0, 255))
    out = _run_quant(c, U8)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, expected)
    assert len(np.unique(expected)) > 5, "test data should not saturate"
    assert_cts_close(out, dequant_float_expected(c, (0, 255)), U8)
    signed = _run_quant(c, S8, -128)
    assert signed.dtype == np.int8
    np.testing.assert_array_equal(signed.astype(np.int64) + 128, out.astype(np.int64))


def test_quant8_nchw_and_implicit_padding():
    c = _quant_case(QUANT_CASES[5], np.random.default_rng(5))  # per-channel, 3x3 stride 1, pads 1
    nhwc = _run_quant(c, U8)
    np.testing.assert_array_equal(_run_quant(c, S8, -128, nchw=True).astype(np.int64) + 128, nhwc)
    # SAME on a 3x3 stride-1 filter pads 1 on every side, as the explicit case does
    np.testing.assert_array_equal(_run_quant(c, U8, padding_code=SAME), nhwc)
    valid = _run_quant(c, U8, padding_code=VALID)
    np.testing.assert_array_equal(valid, _run_quant(c, U8, pads=(0, 0, 0, 0)))
    assert valid.shape == (1, 3, 3, 6)


# -- AOSP spec examples ------------------------------------------------------------------------------
# V1_2/grouped_conv2d.mod.py, TEST 1 (pad 0, stride 1, 2 groups)
SPEC1_X = np.array([1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 1, 2, 3, 3, 3, 3, 3], np.float64).reshape(1, 3, 3, 2)
SPEC1_F = np.array([1, 2, 2, 1, 4, 3, 2, 1], np.float64).reshape(2, 2, 2, 1)
SPEC1_B = np.array([10, -33.5])
SPEC1_OUT = np.array([33, -0.5, 33, 7.5, 31, 4.5, 27, -9.5]).reshape(1, 2, 2, 2)


@pytest.mark.parametrize("nchw", [False, True])
@pytest.mark.parametrize("code,fuse", [(F32, FuseCode.NONE), (F32, FuseCode.RELU), (F16, FuseCode.RELU6),
                                       (F16, FuseCode.RELU1)])
def test_spec_example_float(code, fuse, nchw):
    dtype = np.float32 if code == F32 else np.float16
    x = (nchw_of(SPEC1_X) if nchw else SPEC1_X).astype(dtype)
    ins = gconv_inputs(OperandType.tensor(code, x.shape), x, OperandType.tensor(code, SPEC1_F.shape),
                       SPEC1_F.astype(dtype), OperandType.tensor(code, (2,)), SPEC1_B.astype(dtype), groups=2,
                       pads=(0, 0, 0, 0), fuse=fuse, nchw=nchw)
    (out,) = run_op(OP, ins, [OperandType.tensor(code, (0, 0, 0, 0))])
    expected = np.clip(SPEC1_OUT, *FLOAT_ACT_RANGE[fuse])
    assert_cts_close(out, nchw_of(expected) if nchw else expected, code)


@pytest.mark.parametrize("per_channel,out_scale", [(False, 0.5), (False, 0.05), (True, 0.5), (True, 0.1)])
def test_spec_example_quant8(per_channel, out_scale):
    """TEST 1's quant8, quant8_mult_gt_1, channelQuant8 and channelQuant8_mult_gt_1 variants."""
    x = quantize_round(SPEC1_X, 0.25, 100).astype(np.uint8)
    in_t = OperandType.tensor(U8, x.shape, 0.25, 100)
    if per_channel:
        f_scales = (0.25, 0.5)
        f = quantize_round(SPEC1_F / np.array(f_scales)[:, None, None, None], 1.0, 0, -127, 127).astype(np.int8)
        f_t = OperandType.tensor(PC, f.shape, 0.0, 0, SymmPerChannelQuantParams(f_scales, 0))
        b = quantize_round(SPEC1_B / (0.25 * np.array(f_scales)), 1.0, 0, -2**31, 2**31 - 1)
        b_t = OperandType.tensor(I32, (2,), 0.0, 0)
    else:
        f = quantize_round(SPEC1_F, 0.25, 128).astype(np.uint8)
        f_t = OperandType.tensor(U8, f.shape, 0.25, 128)
        b = quantize_round(SPEC1_B, 0.0625, 0, -2**31, 2**31 - 1)
        b_t = OperandType.tensor(I32, (2,), 0.0625, 0)
    ins = gconv_inputs(in_t, x, f_t, f, b_t, b.astype(np.int32), groups=2, pads=(0, 0, 0, 0))
    (out,) = run_op(OP, ins, [OperandType.tensor(U8, (1, 2, 2, 2), out_scale, 80)])
    assert_cts_close(out, quantize_round(SPEC1_OUT, out_scale, 80), U8)


def test_spec_example_channel_groups():
    """V1_2/grouped_conv2d.mod.py TEST 3 (3 groups, 1x1 filter, SAME), float32 and quant8."""
    x = np.array([1, 2, 3, 4, 55, 4, 3, 2, 1, 5, 4, 3, 2, 11, 2, 3, 4, 5,
                  2, 3, 2, 3, 22, 3, 2, 3, 2, 1, 0, 2, 1, 33, 1, 2, 0, 1], np.float64).reshape(1, 2, 2, 9)
    f = np.array([1, 2, 3, 2, 1, 0, 2, 3, 3, 6, 6, 6, 9, 8, 5, 2, 1, 1], np.float64).reshape(6, 1, 1, 3)
    b = np.array([10, -20, 30, -40, 50, -60], np.float64)
    expected = np.array([24, -16, 215, 338, 98, -51, 32, -6, 73, 50, 134, -45,
                         24, -13, 111, 128, 102, -51, 17, -18, 134, 170, 73, -55], np.float64).reshape(1, 2, 2, 6)
    ins = gconv_inputs(OperandType.tensor(F32, x.shape), x.astype(np.float32), OperandType.tensor(F32, f.shape),
                       f.astype(np.float32), OperandType.tensor(F32, (6,)), b.astype(np.float32), groups=3, code=SAME)
    (out,) = run_op(OP, ins, [OperandType.tensor(F32, (0, 0, 0, 0))])
    assert_cts_close(out, expected, F32)
    ins = gconv_inputs(OperandType.tensor(U8, x.shape, 0.5, 0), quantize_round(x, 0.5, 0).astype(np.uint8),
                       OperandType.tensor(U8, f.shape, 0.25, 0), quantize_round(f, 0.25, 0).astype(np.uint8),
                       OperandType.tensor(I32, (6,), 0.125, 0), quantize_round(b, 0.125, 0, -2**31, 2**31).astype(np.int32),
                       groups=3, code=SAME)
    (out,) = run_op(OP, ins, [OperandType.tensor(U8, (1, 2, 2, 6), 2.0, 60)])
    assert_cts_close(out, quantize_round(expected, 2.0, 60), U8)


# -- validation ----------------------------------------------------------------------------------------
def _valid_inputs(**over):
    x = np.full((1, 4, 4, 4), 128, np.uint8)
    f = np.full((6, 2, 2, 2), 130, np.uint8)
    b = np.zeros(6, np.int32)
    args = dict(x_t=OperandType.tensor(U8, x.shape, 0.5, 128), x=x, f_t=OperandType.tensor(U8, f.shape, 0.25, 128),
                f=f, b_t=OperandType.tensor(I32, b.shape, 0.125, 0), b=b, groups=2)
    args.update(over)
    return gconv_inputs(args["x_t"], args["x"], args["f_t"], args["f"], args["b_t"], args["b"], groups=args["groups"],
                        pads=(0, 0, 0, 0))


OUT_Q = OperandType.tensor(U8, (1, 3, 3, 6), 1.0, 128)


def _expect_bad_data(ins, out_t, *words):
    expect_error(OP, ins, [out_t], "operation 0", *words)


def test_valid_inputs_run():
    (out,) = run_op(OP, _valid_inputs(), [OUT_Q])
    assert out.shape == (1, 3, 3, 6)


def test_input_channels_not_groups_times_filter_depth():
    _expect_bad_data(_valid_inputs(groups=3), OUT_Q, "input 1", "num_groups")


def test_output_channels_not_multiple_of_groups():
    f = np.zeros((6, 2, 2, 1), np.uint8)
    _expect_bad_data(_valid_inputs(groups=4, f_t=OperandType.tensor(U8, f.shape, 0.25, 128), f=f), OUT_Q,
                     "input 1", "multiple of num_groups")


def test_num_groups_must_be_positive():
    _expect_bad_data(_valid_inputs(groups=0), OUT_Q, "input 9", "num_groups must be > 0")


def test_wrong_bias_size_and_scale():
    b = np.zeros(4, np.int32)
    _expect_bad_data(_valid_inputs(b_t=OperandType.tensor(I32, b.shape, 0.125, 0), b=b), OUT_Q, "input 2", "bias")
    _expect_bad_data(_valid_inputs(b_t=OperandType.tensor(I32, (6,), 0.13, 0)), OUT_Q, "input 2", "bias scale")


def test_bad_scalars():
    for pos, value, words in ((7, 0, ("input 7", "stride")), (3, -1, ("input 3", "padding")),
                              (4, 2, ("padding",)), (10, 9, ("input 10", "activation"))):
        ins = _valid_inputs()
        ins[pos] = (INT, value)
        _expect_bad_data(ins, OUT_Q, *words)
    ins = _valid_inputs()
    ins[11] = (INT, 0)  # the layout flag must be BOOL
    _expect_bad_data(ins, OUT_Q, "input 11", "BOOL")


def test_bad_padding_code_and_input_count():
    x, f, b = np.zeros((1, 4, 4, 4), np.float32), np.zeros((6, 2, 2, 2), np.float32), np.zeros(6, np.float32)
    ins = gconv_inputs(OperandType.tensor(F32, x.shape), x, OperandType.tensor(F32, f.shape), f,
                       OperandType.tensor(F32, b.shape), b, groups=2, code=3)
    _expect_bad_data(ins, OperandType.tensor(F32, (1, 4, 4, 6)), "input 3", "padding code")
    _expect_bad_data(ins[:8], OperandType.tensor(F32, (1, 4, 4, 6)), "expected 9 or 12 inputs")
    _expect_bad_data(_valid_inputs() + [(INT, 1)], OUT_Q, "expected 9 or 12 inputs")


def test_per_channel_wrong_channel_dim_and_mismatched_filter_type():
    f = np.zeros((6, 2, 2, 2), np.int8)
    f_t = OperandType.tensor(PC, f.shape, 0.0, 0, SymmPerChannelQuantParams((0.1,) * 2, 3))
    _expect_bad_data(_valid_inputs(f_t=f_t, f=f, b_t=OperandType.tensor(I32, (6,), 0.0, 0)), OUT_Q, "channelDim")
    _expect_bad_data(_valid_inputs(f_t=OperandType.tensor(S8, f.shape, 0.25, 0), f=f), OUT_Q, "input 1")


def test_output_type_must_match():
    _expect_bad_data(_valid_inputs(), OperandType.tensor(S8, (1, 3, 3, 6), 1.0, 0), "output 0")
