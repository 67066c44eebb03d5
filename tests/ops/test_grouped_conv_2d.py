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

from conv_reference import f32, onnx_conv, onnx_pads, ref_act_range, ref_quantize_multiplier, ref_rescale
from mlts.runtime import FuseCode, MltsError, Model, OperandCode, OperandType, OperationCode, ResultCode
from mlts.runtime.operand_type import SymmPerChannelQuantParams
from support.direct import run_op_direct
from support.op_runner import Const, run_op
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


def nchw_of(a):
    return np.ascontiguousarray(np.transpose(a, (0, 3, 1, 2)))


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
    """Build (not run) the one-operation model; the output type that static shape inference gives."""
    model = Model()
    idx, model_inputs = [], []
    for t, v in ins:
        i = model.add_operand(t)
        idx.append(i)
        if isinstance(v, Const) or t.is_scalar:
            model.set_operand_value(i, np.asarray(v.value if isinstance(v, Const) else v, dtype=t.dtype))
        else:
            model_inputs.append(i)
    out = model.add_operand(out_t)
    model.add_operation(OP, idx, [out])
    model.identify_inputs_and_outputs(model_inputs, [out])
    model.finish()
    return model.inferred_operand_type(out)


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
    lo, hi = ref_act_range(fuse, out_scale, out_zp, *qrange)
    out = np.zeros_like(acc)
    for oc in range(o):
        m, e = ref_quantize_multiplier(f32(f32(sx) * f32(f_scales[oc])) / f32(out_scale))
        for idx in np.ndindex(n, oh, ow):
            out[idx + (oc,)] = min(hi, max(lo, ref_rescale(int(acc[idx + (oc,)]) + int(bias[oc]), m, e) + out_zp))
    return out


def dequant_float_expected(c, qrange):
    """dequantize -> float grouped conv (ONNX) -> requantize with round-half-away and the real activation."""
    scales = np.asarray(c["f_scales"], np.float64)
    xr = (c["x"].astype(np.float64) - c["zx"]) * c["sx"]
    fr = (c["f"].astype(np.float64) - c["zf"]) * scales[:, None, None, None]
    br = c["bias"].astype(np.float64) * c["sx"] * scales
    real = onnx_conv(xr, fr, br, onnx_pads=onnx_pads(c["pads"]), strides=c["strides"], fuse=c["fuse"],
                     group=c["groups"])
    q = np.sign(real) * np.floor(np.abs(real) / c["out_scale"] + 0.5) + 128
    return np.clip(q, *ref_act_range(c["fuse"], c["out_scale"], 128, *qrange))


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
    zx, sx = 121, 0.03
    x = rng.integers(0, 256, xs)
    if per_channel:
        f = rng.integers(-127, 128, fs)
        zf, f_scales = 0, [0.004 * (i + 1) for i in range(fs[0])]
    else:
        f = rng.integers(0, 256, fs)
        zf, f_scales = 133, [0.006] * fs[0]
    bias = rng.integers(-3000, 3000, fs[0])
    if name == "multiplier>1":  # out_scale < input x filter scale: tiny sums keep the output in range
        x = rng.integers(zx - 2, zx + 3, xs)
        f = rng.integers(zf - 3, zf + 4, fs)
        bias = rng.integers(-20, 21, fs[0])
    return dict(x=x, zx=zx, sx=sx, f=f, zf=zf, f_scales=f_scales, bias=bias, groups=groups, pads=pads,
                strides=strides, fuse=fuse, out_scale=out_scale, per_channel=per_channel)


def _run_quant(c, code, shift=0, *, nchw=False, pads=None, padding_code=None):
    """Run the case in type `code`; `shift` moves data and zero points (-128 for the signed type)."""
    x = (c["x"] + shift).astype(np.int64)
    in_t = OperandType.tensor(code, x.shape, c["sx"], c["zx"] + shift)
    if c["per_channel"]:
        f = c["f"].astype(np.int8)
        f_t = OperandType.tensor(PC, f.shape, 0.0, 0, SymmPerChannelQuantParams(tuple(c["f_scales"]), 0))
        b_t = OperandType.tensor(I32, c["bias"].shape, 0.0, 0)
    else:
        f = c["f"] + shift
        f_t = OperandType.tensor(code, f.shape, c["f_scales"][0], c["zf"] + shift)
        b_t = OperandType.tensor(I32, c["bias"].shape, f32(f32(c["sx"]) * f32(c["f_scales"][0])), 0)
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
def _quantize(values, scale, zp, lo=0, hi=255):
    v = np.asarray(values, np.float64) / scale
    return np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5) + zp, lo, hi).astype(np.int64)


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
    lo, hi = {FuseCode.NONE: (-np.inf, np.inf), FuseCode.RELU: (0, np.inf), FuseCode.RELU6: (0, 6),
              FuseCode.RELU1: (-1, 1)}[fuse]
    expected = np.clip(SPEC1_OUT, lo, hi)
    assert_cts_close(out, nchw_of(expected) if nchw else expected, code)


@pytest.mark.parametrize("per_channel,out_scale", [(False, 0.5), (False, 0.05), (True, 0.5), (True, 0.1)])
def test_spec_example_quant8(per_channel, out_scale):
    """TEST 1's quant8, quant8_mult_gt_1, channelQuant8 and channelQuant8_mult_gt_1 variants."""
    x = _quantize(SPEC1_X, 0.25, 100).astype(np.uint8)
    in_t = OperandType.tensor(U8, x.shape, 0.25, 100)
    if per_channel:
        f_scales = (0.25, 0.5)
        f = _quantize(SPEC1_F / np.array(f_scales)[:, None, None, None], 1.0, 0, -127, 127).astype(np.int8)
        f_t = OperandType.tensor(PC, f.shape, 0.0, 0, SymmPerChannelQuantParams(f_scales, 0))
        b = _quantize(SPEC1_B / (0.25 * np.array(f_scales)), 1.0, 0, -2**31, 2**31 - 1)
        b_t = OperandType.tensor(I32, (2,), 0.0, 0)
    else:
        f = _quantize(SPEC1_F, 0.25, 128).astype(np.uint8)
        f_t = OperandType.tensor(U8, f.shape, 0.25, 128)
        b = _quantize(SPEC1_B, 0.0625, 0, -2**31, 2**31 - 1)
        b_t = OperandType.tensor(I32, (2,), 0.0625, 0)
    ins = gconv_inputs(in_t, x, f_t, f, b_t, b.astype(np.int32), groups=2, pads=(0, 0, 0, 0))
    (out,) = run_op(OP, ins, [OperandType.tensor(U8, (1, 2, 2, 2), out_scale, 80)])
    assert_cts_close(out, _quantize(SPEC1_OUT, out_scale, 80), U8)


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
    ins = gconv_inputs(OperandType.tensor(U8, x.shape, 0.5, 0), _quantize(x, 0.5, 0).astype(np.uint8),
                       OperandType.tensor(U8, f.shape, 0.25, 0), _quantize(f, 0.25, 0).astype(np.uint8),
                       OperandType.tensor(I32, (6,), 0.125, 0), _quantize(b, 0.125, 0, -2**31, 2**31).astype(np.int32),
                       groups=3, code=SAME)
    (out,) = run_op(OP, ins, [OperandType.tensor(U8, (1, 2, 2, 6), 2.0, 60)])
    assert_cts_close(out, _quantize(expected, 2.0, 60), U8)


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
    with pytest.raises(MltsError) as info:
        run_op(OP, ins, [out_t])
    assert info.value.code == ResultCode.BAD_DATA
    msg = str(info.value)
    assert "GROUPED_CONV_2D" in msg and "operation 0" in msg, msg
    for w in words:
        assert w in msg, msg


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
