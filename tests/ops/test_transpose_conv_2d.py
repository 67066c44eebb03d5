"""TRANSPOSE_CONV_2D against independent expectations.

Float: onnx.reference's ConvTranspose (float64, NCHW data, filters [in, out, h, w]) given the paddings
NNAPI derives (a negative tail becomes ONNX output_padding). Quantized: a scatter loop from each input
pixel with numpy int64 sums and a plain Python-int fixed-point rescale (conv_reference), exact match
expected, within one step of dequantize -> float transpose conv -> requantize, and the signed variant
equal up to the 128 offset. Plus AOSP's spec examples (V1_2/transpose_conv2d.mod.py).
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from conv_reference import (FLOAT_ACT_RANGE, dequantized_operands, nchw_of, quant_filter_and_bias, quantize_round,
                            random_quant_data, ref_act_range, requantize_real, requantize_sums)
from mlts.runtime import FuseCode, OperandCode, OperandType, OperationCode
from mlts.runtime.operand_type import SymmPerChannelQuantParams
from support.direct import run_op_direct
from support.op_runner import Const, expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

OP = OperationCode.TRANSPOSE_CONV_2D
F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
PC = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
I32 = OperandCode.TENSOR_INT32
INT, BOOL = OperandType.scalar(OperandCode.INT32), OperandType.scalar(OperandCode.BOOL)
SAME, VALID = 1, 2


def tconv_inputs(x_t, x, f_t, f, b_t, b, *, pads=None, code=None, out_shape=None, strides=(1, 1), fuse=0,
                 nchw=False, const_shape=True):
    """NNAPI TRANSPOSE_CONV_2D inputs: pads=(left, right, top, bottom) gives the explicit form (11 inputs);
    code=SAME/VALID with out_shape (in the layout's order) the implicit one (9)."""
    ins = [(x_t, x), (f_t, Const(f)), (b_t, Const(b))]
    if pads is not None:
        ins += [(INT, p) for p in pads]
    else:
        shape = np.asarray(out_shape, np.int32)
        ins += [(OperandType.tensor(I32, (4,)), Const(shape) if const_shape else shape), (INT, code)]
    ins += [(INT, strides[0]), (INT, strides[1]), (INT, fuse), (BOOL, nchw)]
    return ins


def nnapi_implicit_pads(out_hw, strides, filter_hw, code):
    """NNAPI's implicit paddings for a requested output (h, w), as (left, right, top, bottom): SAME puts the
    smaller half of (ceil(out / stride) - 1) * stride + filter - out at the head; the tail may be negative."""
    if code == VALID:
        return 0, 0, 0, 0
    pads = []
    for out, stride, k in zip(out_hw[::-1], strides, filter_hw[::-1]):  # width first
        total = (-(-out // stride) - 1) * stride + k - out
        head = total // 2 if total > 0 else 0
        pads += [head, total - head]
    return tuple(pads)


def onnx_transpose_conv(x_nhwc, f_nnapi, b, pads, strides, fuse=FuseCode.NONE):
    """Float64 ONNX ConvTranspose; pads (left, right, top, bottom) as NNAPI's, strides (w, h); returns NHWC."""
    left, right, top, bottom = pads
    attrs = dict(strides=[strides[1], strides[0]], pads=[top, left, max(bottom, 0), max(right, 0)],
                 output_padding=[max(-bottom, 0), max(-right, 0)])
    node = helper.make_node("ConvTranspose", ["X", "W", "B"], ["Y"], **attrs)
    graph = helper.make_graph([node], "tconv",
                              [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in "XWB"],
                              [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.transpose(np.asarray(x_nhwc, np.float64), (0, 3, 1, 2))
    w = np.transpose(np.asarray(f_nnapi, np.float64), (3, 0, 1, 2))  # [out, h, w, in] -> [in, out, h, w]
    y = ReferenceEvaluator(model).run(None, {"X": x, "W": w, "B": np.asarray(b, np.float64)})[0]
    return np.clip(np.transpose(y, (0, 2, 3, 1)), *FLOAT_ACT_RANGE[fuse])


# -- float -------------------------------------------------------------------------------------------
FLOAT_CASES = [
    # id, input NHWC, filter [out, h, w, in], padding (tuple: explicit, (code, (out_h, out_w)): implicit),
    # strides (w, h), nchw, fuse
    ("explicit", (1, 4, 5, 3), (2, 3, 3, 3), (1, 0, 2, 1), (1, 1), False, FuseCode.NONE),
    ("explicit-stride2-negative-tail", (1, 3, 4, 2), (3, 3, 2, 2), (0, -1, 1, -1), (2, 2), False, FuseCode.RELU),
    ("explicit-nchw-stride", (2, 3, 3, 2), (2, 2, 3, 2), (1, 1, 0, 0), (3, 2), True, FuseCode.RELU1),
    ("same-stride2", (1, 3, 4, 2), (3, 3, 3, 2), (SAME, (6, 8)), (2, 2), False, FuseCode.NONE),
    ("same-stride2-odd-output", (1, 3, 4, 2), (3, 3, 3, 2), (SAME, (5, 7)), (2, 2), False, FuseCode.RELU6),
    ("same-stride3-kernel4", (1, 2, 3, 1), (2, 4, 2, 1), (SAME, (6, 8)), (3, 3), False, FuseCode.NONE),
    ("same-nchw", (1, 4, 4, 3), (2, 3, 3, 3), (SAME, (4, 4)), (1, 1), True, FuseCode.NONE),
    ("same-request-not-reachable", (1, 3, 3, 1), (1, 3, 3, 1), (SAME, (4, 4)), (2, 2), False, FuseCode.NONE),
    ("valid-stride2", (1, 3, 3, 2), (2, 3, 3, 2), (VALID, (7, 7)), (2, 2), False, FuseCode.NONE),
    ("valid-nchw-stride-wh", (2, 2, 3, 3), (4, 2, 2, 3), (VALID, (4, 6)), (2, 2), True, FuseCode.RELU),
]


def _float_case(case, code, rng):
    _, xs, fs, padding, strides, nchw, fuse = case
    dtype = np.float32 if code == F32 else np.float16
    x = rng.standard_normal(xs).astype(dtype)
    f = rng.standard_normal(fs).astype(dtype)
    b = rng.standard_normal(fs[0]).astype(dtype)
    if isinstance(padding[1], tuple):
        pcode, out_hw = padding
        pads = nnapi_implicit_pads(out_hw, strides, fs[1:3], pcode)
        shape = (xs[0], fs[0]) + out_hw if nchw else (xs[0],) + out_hw + (fs[0],)
        kw = dict(code=pcode, out_shape=shape)
    else:
        pads = padding
        kw = dict(pads=padding)
    expected = onnx_transpose_conv(x, f, b, pads, strides, fuse)
    x_in = nchw_of(x) if nchw else x
    if nchw:
        expected = nchw_of(expected)
    ins = tconv_inputs(OperandType.tensor(code, x_in.shape), x_in, OperandType.tensor(code, f.shape), f,
                       OperandType.tensor(code, b.shape), b, strides=strides, fuse=fuse, nchw=nchw, **kw)
    return ins, expected


@pytest.mark.parametrize("case", FLOAT_CASES, ids=[c[0] for c in FLOAT_CASES])
def test_float32(case):
    ins, expected = _float_case(case, F32, np.random.default_rng(zlib.crc32(case[0].encode())))
    (out,) = run_op(OP, ins, [OperandType.tensor(F32, expected.shape)])
    assert out.dtype == np.float32
    assert_cts_close(out, expected, F32)


def test_unreachable_same_request_gives_nnapi_size():
    """SAME with ceil(out / stride) != input size: NNAPI's formula, not the request, sets the size."""
    ins, expected = _float_case(FLOAT_CASES[7], F32, np.random.default_rng(0))
    assert expected.shape == (1, 6, 6, 1)  # 3 * 2 + 3 - 2 - (0 + 1), not the requested 4
    (out,) = run_op(OP, ins, [OperandType.tensor(F32, (0, 0, 0, 0))])
    assert_cts_close(out, expected, F32)


@pytest.mark.parametrize("case", FLOAT_CASES[::2], ids=[c[0] for c in FLOAT_CASES[::2]])
def test_float16(case):
    ins, expected = _float_case(case, F16, np.random.default_rng(7))
    (out,) = run_op(OP, ins, [OperandType.tensor(F16, expected.shape)])
    assert out.dtype == np.float16
    assert_cts_close(out, expected, F16)


def _inferred_output(ins, out_t):
    return inferred_output_types(OP, ins, [out_t])[0]


def test_unknown_dims_and_output_shape_known_only_at_run_time():
    case = FLOAT_CASES[6]  # SAME, NCHW
    ins, expected = _float_case(case, F32, np.random.default_rng(3))
    unknown = OperandType.tensor(F32, (0, 0, 0, 0))
    assert _inferred_output(ins, unknown).dimensions == expected.shape
    (out,) = run_op(OP, ins, [unknown])
    assert_cts_close(out, expected, F32)
    # the output shape tensor as a model input: inference waits for run time
    _, xs, fs, (pcode, out_hw), strides, nchw, fuse = case
    x = ins[0][1]
    late = tconv_inputs(ins[0][0], x, ins[1][0], ins[1][1].value, ins[2][0], ins[2][1].value, code=pcode,
                        out_shape=(1, 2) + out_hw, strides=strides, nchw=nchw, const_shape=False)
    assert _inferred_output(late, unknown).dimensions == (0, 0, 0, 0)
    (out,) = run_op(OP, late, [unknown])
    assert_cts_close(out, expected, F32)
    # input dims unknown at build time
    ins[0] = (OperandType.tensor(F32, (0, 3, 0, 4)), x)
    assert _inferred_output(ins, unknown).dimensions == (0, 0, 0, 0)
    (out,) = run_op(OP, ins, [unknown])
    assert_cts_close(out, expected, F32)


@pytest.mark.parametrize("code", [F32, U8])
def test_zero_batch(code):
    """AOSP transpose_conv2d.mod.py TESTs 6 and 7 (zero-sized input): batch 0 gives an empty output of the
    computed size. Run directly: a model input cannot have batch 0."""
    q = code == U8
    dtype = np.uint8 if q else np.float32
    qp = (0.1, 128) if q else ()
    f_t = OperandType.tensor(code, (2, 3, 3, 1), *qp)
    b_t = OperandType.tensor(I32 if q else F32, (2,), *((0.01, 0) if q else ()))
    x = np.zeros((0, 2, 2, 1), dtype)
    ins = tconv_inputs(OperandType.tensor(code, x.shape, *qp), x, f_t, np.full((2, 3, 3, 1), 130, dtype), b_t,
                       np.zeros(2, b_t.dtype), code=VALID, out_shape=(0, 5, 5, 2), strides=(2, 2))
    (out,) = run_op_direct(OP, ins, [OperandType.tensor(code, (0, 5, 5, 2), *qp)])
    assert out.shape == (0, 5, 5, 2)
    x = np.zeros((0, 1, 4, 4), dtype)  # NCHW, explicit paddings [1, 2, 2, 1]
    ins = tconv_inputs(OperandType.tensor(code, x.shape, *qp), x, f_t, np.full((2, 3, 3, 1), 130, dtype), b_t,
                       np.zeros(2, b_t.dtype), pads=(1, 2, 2, 1), nchw=True)
    (out,) = run_op_direct(OP, ins, [OperandType.tensor(code, (0, 2, 3, 3), *qp)])
    assert out.shape == (0, 2, 3, 3)


# -- independent integer reference ---------------------------------------------------------------------
def ref_transpose_quant(x, zx, f, zf, bias, pads, strides, out_hw, sx, f_scales, out_scale, out_zp, fuse, qrange):
    """NHWC int data: every input pixel adds its int64 products to the output pixels its filter covers,
    then a Python-int rescale per element. f_scales has one entry per output channel."""
    left, _, top, _ = pads
    sw, sh = strides
    xc, fc = x.astype(np.int64) - zx, f.astype(np.int64) - zf
    n, h, w, _ = xc.shape
    o, kh, kw, _ = fc.shape
    oh, ow = out_hw
    acc = np.zeros((n, oh, ow, o), np.int64)
    for y in range(h):
        for xx in range(w):
            for i in range(kh):
                for j in range(kw):
                    oy, ox = y * sh - top + i, xx * sw - left + j
                    if 0 <= oy < oh and 0 <= ox < ow:
                        acc[:, oy, ox, :] += xc[:, y, xx, :] @ fc[:, i, j, :].T
    return requantize_sums(acc, bias, sx, f_scales, out_scale, out_zp, fuse, qrange)


QUANT_CASES = [
    # id, input, filter, padding (explicit tuple or (code, (out_h, out_w))), strides, fuse, out_scale, per_channel
    ("explicit", (1, 4, 4, 3), (2, 3, 3, 3), (1, 1, 1, 1), (1, 1), FuseCode.NONE, 0.9, False),
    ("same-stride2-relu", (1, 3, 4, 2), (3, 3, 3, 2), (SAME, (6, 8)), (2, 2), FuseCode.RELU, 0.6, False),
    ("valid-relu6", (2, 3, 3, 2), (2, 2, 2, 2), (VALID, (6, 6)), (2, 2), FuseCode.RELU6, 0.05, False),
    ("relu1-stride-wh", (1, 3, 3, 2), (2, 2, 3, 2), (0, 1, 1, 0), (3, 1), FuseCode.RELU1, 0.02, False),
    ("multiplier>1", (1, 3, 3, 2), (2, 2, 2, 2), (VALID, (4, 4)), (1, 1), FuseCode.NONE, 0.0001, False),
    ("per-channel", (1, 4, 4, 3), (4, 3, 3, 3), (SAME, (4, 4)), (1, 1), FuseCode.NONE, 0.4, True),
    ("per-channel-negative-tail", (1, 3, 4, 2), (3, 3, 2, 2), (0, -1, 1, -1), (2, 2), FuseCode.RELU, 0.3, True),
]


def _quant_case(case, rng):
    name, xs, fs, padding, strides, fuse, out_scale, per_channel = case
    c = random_quant_data(name, xs, fs, per_channel, rng)
    if isinstance(padding[1], tuple):
        pads = nnapi_implicit_pads(padding[1], strides, fs[1:3], padding[0])
    else:
        pads = padding
    out_hw = tuple(n * s + k - s - a - b for n, s, k, a, b in
                   zip(xs[1:3], strides[::-1], fs[1:3], pads[2::-2], pads[3::-2]))
    return dict(c, padding=padding, pads=pads, out_hw=out_hw, strides=strides, fuse=fuse, out_scale=out_scale)


def _run_quant(c, code, shift=0, *, nchw=False):
    """Run the case in type `code`; `shift` moves data and zero points (-128 for the signed type)."""
    x = (c["x"] + shift).astype(np.int64)
    in_t = OperandType.tensor(code, x.shape, c["sx"], c["zx"] + shift)
    f_t, f, b_t = quant_filter_and_bias(c, code, shift)
    x_in = nchw_of(x) if nchw else x
    if isinstance(c["padding"][1], tuple):
        n, o = x.shape[0], f.shape[0]
        shape = (n, o) + c["out_hw"] if nchw else (n,) + c["out_hw"] + (o,)
        kw = dict(code=c["padding"][0], out_shape=shape)
    else:
        kw = dict(pads=c["padding"])
    ins = tconv_inputs(in_t.with_dimensions(x_in.shape), x_in, f_t, f, b_t, c["bias"], strides=c["strides"],
                       fuse=c["fuse"], nchw=nchw, **kw)
    (out,) = run_op(OP, ins, [OperandType.tensor(code, (0, 0, 0, 0), c["out_scale"], 128 + shift)])
    return np.transpose(out, (0, 2, 3, 1)) if nchw else out


def dequant_float_expected(c, qrange):
    xr, fr, br = dequantized_operands(c)
    real = onnx_transpose_conv(xr, fr, br, c["pads"], c["strides"], c["fuse"])
    return requantize_real(real, c["out_scale"], 128, *ref_act_range(c["fuse"], c["out_scale"], 128, *qrange))


@pytest.mark.parametrize("case", QUANT_CASES, ids=[c[0] for c in QUANT_CASES])
def test_quant8(case):
    c = _quant_case(case, np.random.default_rng(zlib.crc32(case[0].encode())))
    expected = ref_transpose_quant(c["x"], c["zx"], c["f"], c["zf"], c["bias"], c["pads"], c["strides"], c["out_hw"],
                                   c["sx"], c["f_scales"], c["out_scale"], 128, c["fuse"], (0, 255))
    out = _run_quant(c, U8)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, expected)
    assert len(np.unique(expected)) > 5, "test data should not saturate"
    assert_cts_close(out, dequant_float_expected(c, (0, 255)), U8)
    signed = _run_quant(c, S8, -128, nchw=case[0].startswith("per-channel"))
    assert signed.dtype == np.int8
    np.testing.assert_array_equal(signed.astype(np.int64) + 128, out.astype(np.int64))


# -- AOSP spec examples (V1_2/transpose_conv2d.mod.py) -------------------------------------------------------
# TEST 1: VALID, stride 2, output shape [1, 5, 5, 2]
SPEC1_X = np.array([1, 2, 3, 4], np.float64).reshape(1, 2, 2, 1)
SPEC1_F = np.array([1, 3, 5, 7, 9, 11, 13, 15, 17, 2, 4, 6, 8, 10, 12, 14, 16, 18], np.float64).reshape(2, 3, 3, 1)
SPEC1_B = np.array([-1.5, -2])
SPEC1_OUT = np.array([-0.5, 0, 1.5, 2, 5.5, 8, 4.5, 6, 8.5, 10,
                      5.5, 6, 7.5, 8, 23.5, 26, 16.5, 18, 20.5, 22,
                      14.5, 18, 22.5, 26, 60.5, 70, 40.5, 46, 52.5, 58,
                      19.5, 22, 25.5, 28, 59.5, 66, 34.5, 38, 42.5, 46,
                      37.5, 40, 43.5, 46, 101.5, 108, 58.5, 62, 66.5, 70]).reshape(1, 5, 5, 2)


@pytest.mark.parametrize("nchw", [False, True])
@pytest.mark.parametrize("code,fuse", [(F32, FuseCode.NONE), (F32, FuseCode.RELU1), (F16, FuseCode.RELU6)])
def test_spec_example_float(code, fuse, nchw):
    dtype = np.float32 if code == F32 else np.float16
    x = (nchw_of(SPEC1_X) if nchw else SPEC1_X).astype(dtype)
    ins = tconv_inputs(OperandType.tensor(code, x.shape), x, OperandType.tensor(code, SPEC1_F.shape),
                       SPEC1_F.astype(dtype), OperandType.tensor(code, (2,)), SPEC1_B.astype(dtype), code=VALID,
                       out_shape=(1, 2, 5, 5) if nchw else (1, 5, 5, 2), strides=(2, 2), fuse=fuse, nchw=nchw)
    (out,) = run_op(OP, ins, [OperandType.tensor(code, (0, 0, 0, 0))])
    expected = np.clip(SPEC1_OUT, *FLOAT_ACT_RANGE[fuse])
    assert_cts_close(out, nchw_of(expected) if nchw else expected, code)


@pytest.mark.parametrize("variant", ["quant8", "quant8_mult_gt_1", "channelQuant8", "channelQuant8_mult_gt_1"])
def test_spec_example_quant8(variant):
    in_scale, in_zp, out_scale, out_zp = {"quant8": (0.5, 0, 0.5, 0), "quant8_mult_gt_1": (0.5, 100, 0.1, 80),
                                          "channelQuant8": (0.25, 100, 0.5, 80),
                                          "channelQuant8_mult_gt_1": (0.25, 100, 0.1, 80)}[variant]
    x = quantize_round(SPEC1_X, in_scale, in_zp).astype(np.uint8)
    if variant.startswith("channel"):
        f_scales = (0.25, 0.5)
        f = quantize_round(SPEC1_F / np.array(f_scales)[:, None, None, None], 1.0, 0, -127, 127).astype(np.int8)
        f_t = OperandType.tensor(PC, f.shape, 0.0, 0, SymmPerChannelQuantParams(f_scales, 0))
        b = quantize_round(SPEC1_B / (in_scale * np.array(f_scales)), 1.0, 0, -2**31, 2**31 - 1)
        b_t = OperandType.tensor(I32, (2,), 0.0, 0)
    else:
        f_zp = 0 if variant == "quant8" else 128
        f = quantize_round(SPEC1_F, 0.5, f_zp).astype(np.uint8)
        f_t = OperandType.tensor(U8, f.shape, 0.5, f_zp)
        b = quantize_round(SPEC1_B, 0.25, 0, -2**31, 2**31 - 1)
        b_t = OperandType.tensor(I32, (2,), 0.25, 0)
    ins = tconv_inputs(OperandType.tensor(U8, x.shape, in_scale, in_zp), x, f_t, f, b_t, b.astype(np.int32),
                       code=VALID, out_shape=(1, 5, 5, 2), strides=(2, 2))
    (out,) = run_op(OP, ins, [OperandType.tensor(U8, (1, 5, 5, 2), out_scale, out_zp)])
    assert_cts_close(out, quantize_round(SPEC1_OUT, out_scale, out_zp), U8)


def _run_spec_float(x, f, b, **kw):
    x, f, b = (np.asarray(a, np.float32) for a in (x, f, b))
    ins = tconv_inputs(OperandType.tensor(F32, x.shape), x, OperandType.tensor(F32, f.shape), f,
                       OperandType.tensor(F32, b.shape), b, **kw)
    return run_op(OP, ins, [OperandType.tensor(F32, (0, 0, 0, 0))])[0]


def test_spec_examples_same_explicit_and_negative_tail():
    # TEST 2: SAME, stride 3, RELU, output shape [1, 3, 4, 1]
    out = _run_spec_float(np.array([300, 500]).reshape(1, 1, 2, 1),
                          np.array([9, 5, 6, 9, 8, 5, 3, 1, 4]).reshape(1, 3, 3, 1), [-1000], code=SAME,
                          out_shape=(1, 3, 4, 1), strides=(3, 3), fuse=FuseCode.RELU)
    expected = np.array([500, 800, 3500, 1500, 1400, 500, 3500, 3000, 0, 200, 500, 0]).reshape(1, 3, 4, 1)
    assert_cts_close(out, expected, F32)
    # TEST 5: explicit paddings [1, 2, 2, 1], stride 1
    x = np.arange(1, 33).reshape(1, 4, 4, 2)
    f = np.arange(1, 19).reshape(1, 3, 3, 2)
    out = _run_spec_float(x, f, [0], pads=(1, 2, 2, 1))
    assert_cts_close(out, np.array([678, 1347, 1689, 1494, 2715, 3057, 1968, 3352, 3652]).reshape(1, 3, 3, 1), F32)
    # TEST 8: SAME, stride 2, 1x1 filter, output shape [1, 4, 4, 1]: the tail padding is -1
    out = _run_spec_float(np.array([1, 2, 3, 4]).reshape(1, 2, 2, 1), np.array([2]).reshape(1, 1, 1, 1), [0],
                          code=SAME, out_shape=(1, 4, 4, 1), strides=(2, 2))
    assert_cts_close(out, np.array([2, 0, 4, 0, 0, 0, 0, 0, 6, 0, 8, 0, 0, 0, 0, 0]).reshape(1, 4, 4, 1), F32)


# -- validation ----------------------------------------------------------------------------------------
def _valid_inputs(pads=(0, 0, 0, 0), **over):
    x = np.full((1, 3, 3, 2), 128, np.uint8)
    f = np.full((3, 2, 2, 2), 130, np.uint8)
    b = np.zeros(3, np.int32)
    args = dict(x_t=OperandType.tensor(U8, x.shape, 0.5, 128), x=x, f_t=OperandType.tensor(U8, f.shape, 0.25, 128),
                f=f, b_t=OperandType.tensor(I32, b.shape, 0.125, 0), b=b)
    args.update(over)
    kw = dict(pads=pads) if pads is not None else dict(code=SAME, out_shape=(1, 3, 3, 3))
    return tconv_inputs(args["x_t"], args["x"], args["f_t"], args["f"], args["b_t"], args["b"], **kw)


OUT_Q = OperandType.tensor(U8, (1, 4, 4, 3), 1.0, 128)


def _expect_bad_data(ins, out_t, *words):
    expect_error(OP, ins, [out_t], "operation 0", *words)


def test_valid_inputs_run():
    (out,) = run_op(OP, _valid_inputs(), [OUT_Q])
    assert out.shape == (1, 4, 4, 3)
    (out,) = run_op(OP, _valid_inputs(pads=None), [OperandType.tensor(U8, (1, 3, 3, 3), 1.0, 128)])
    assert out.shape == (1, 3, 3, 3)


def test_explicit_padding_rules():
    _expect_bad_data(_valid_inputs(pads=(-1, 0, 0, 0)), OUT_Q, "input 3", "padding left")
    _expect_bad_data(_valid_inputs(pads=(0, 0, -1, 0)), OUT_Q, "input 5", "padding top")
    (out,) = run_op(OP, _valid_inputs(pads=(0, -2, 0, -1)), [OperandType.tensor(U8, (0, 0, 0, 0), 1.0, 128)])
    assert out.shape == (1, 5, 6, 3)  # negative right/bottom padding grows the output
    _expect_bad_data(_valid_inputs(pads=(2, 2, 0, 0)), OUT_Q, "output spatial size")


def test_bad_scalars():
    for pos, value, words in ((7, 0, ("input 7", "stride width")), (8, -1, ("input 8", "stride height")),
                              (9, 4, ("input 9", "activation"))):
        ins = _valid_inputs()
        ins[pos] = (INT, value)
        _expect_bad_data(ins, OUT_Q, *words)
    ins = _valid_inputs()
    ins[10] = (INT, 0)  # the layout flag must be BOOL
    _expect_bad_data(ins, OUT_Q, "input 10", "BOOL")


def test_implicit_form_rules():
    out_t = OperandType.tensor(U8, (1, 3, 3, 3), 1.0, 128)
    ins = _valid_inputs(pads=None)
    ins[4] = (INT, 3)
    _expect_bad_data(ins, out_t, "input 4", "padding code")
    ins = _valid_inputs(pads=None)
    ins[3] = (OperandType.tensor(I32, (3,)), Const(np.array([1, 3, 3], np.int32)))
    _expect_bad_data(ins, out_t, "input 3", "4 elements")
    ins = _valid_inputs(pads=None)
    ins[3] = (OperandType.tensor(I32, (4,)), Const(np.array([1, 0, 3, 3], np.int32)))
    _expect_bad_data(ins, out_t, "input 3", "height and width > 0")
    ins = _valid_inputs(pads=None)
    ins[3] = (OperandType.tensor(F32, (4,)), Const(np.array([1, 3, 3, 3], np.float32)))
    _expect_bad_data(ins, out_t, "input 3", "TENSOR_INT32")
    _expect_bad_data(_valid_inputs(pads=None)[:8], out_t, "expected 9 or 11 inputs")
    _expect_bad_data(_valid_inputs() + [(INT, 1)], OUT_Q, "expected 9 or 11 inputs")


def test_filter_and_bias_rules():
    f = np.zeros((3, 2, 2, 3), np.uint8)
    _expect_bad_data(_valid_inputs(f_t=OperandType.tensor(U8, f.shape, 0.25, 128), f=f), OUT_Q, "input 1", "channels")
    b = np.zeros(4, np.int32)
    _expect_bad_data(_valid_inputs(b_t=OperandType.tensor(I32, b.shape, 0.125, 0), b=b), OUT_Q, "input 2", "bias")
    _expect_bad_data(_valid_inputs(b_t=OperandType.tensor(I32, (3,), 0.13, 0)), OUT_Q, "input 2", "bias scale")
    f = np.zeros((3, 2, 2, 2), np.int8)
    f_t = OperandType.tensor(PC, f.shape, 0.0, 0, SymmPerChannelQuantParams((0.1, 0.2), 3))
    _expect_bad_data(_valid_inputs(f_t=f_t, f=f, b_t=OperandType.tensor(I32, (3,), 0.0, 0)), OUT_Q, "channelDim")
    _expect_bad_data(_valid_inputs(f_t=OperandType.tensor(S8, f.shape, 0.25, 0), f=f), OUT_Q, "input 1")


def test_output_type_must_match():
    _expect_bad_data(_valid_inputs(), OperandType.tensor(S8, (1, 4, 4, 3), 1.0, 0), "output 0")
