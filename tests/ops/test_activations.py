"""RELU, RELU1, RELU6, LOGISTIC, TANH against independent expectations.

Float: onnx.reference.ReferenceEvaluator on Relu / Clip / Sigmoid / Tanh (float16 compared with the
float16 CTS tolerance against the reference computed from the same values in float32).
Quantized: a plain per-element Python-int transcription of NNAPI's integer kernels (input rescale
to Q4.27, gemmlowp fixed-point logistic/tanh, rounding to the output format), exact match expected;
also within one step of dequantize -> float function -> requantize, published CTS vectors, and
signed/unsigned variants agreeing up to the 128 offset.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode
from support.int_reference import (M31, exp_negative, frexp_multiplier, one_over_one_plus, rdbp, reciprocal_q2,
                                   sat_pot, srdhm)
from support.onnx_reference import onnx_eval
from support.op_runner import run_op
from support.tolerance import assert_cts_close

F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
T = OperandType.tensor
RELUS = {OperationCode.RELU: (0.0, None), OperationCode.RELU1: (-1.0, 1.0), OperationCode.RELU6: (0.0, 6.0)}
# Required output quantization: (scale, zero point) for uint8, int8.
OUT_QUANT = {OperationCode.LOGISTIC: {U8: (1 / 256, 0), S8: (1 / 256, -128)},
             OperationCode.TANH: {U8: (1 / 128, 128), S8: (1 / 128, 0)}}


def run1(code, t_in, x, t_out):
    return run_op(code, [(t_in, x)], [t_out])[0]


def onnx_activation(code, x32):
    if code == OperationCode.RELU:
        return onnx_eval("Relu", x32)
    if code in RELUS:
        lo, hi = RELUS[code]
        return onnx_eval("Clip", x32, np.float32(lo), np.float32(hi))
    return onnx_eval({OperationCode.LOGISTIC: "Sigmoid", OperationCode.TANH: "Tanh"}[code], x32)


FLOAT_X = np.array([[-20.0, -6.5, -3.0, -1.0, -0.999, -0.25, 0.0],
                    [1e-3, 0.5, 0.999, 1.0, 1.5, 5.999, 6.0],
                    [6.001, 7.25, 15.0, 88.0, -88.0, 3.3, -0.7]], np.float32)


# -- float ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [*RELUS, OperationCode.LOGISTIC, OperationCode.TANH], ids=lambda c: c.name)
@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
def test_float_against_onnx(code, ftype):
    x = FLOAT_X.astype(np.float16 if ftype == F16 else np.float32).reshape(1, 3, 7, 1)
    out = run1(code, T(ftype, x.shape), x, T(ftype, x.shape))
    assert out.dtype == x.dtype and out.shape == x.shape
    assert_cts_close(out, onnx_activation(code, x.astype(np.float32)), ftype)


@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 1, 3), (1, 2, 2, 3)])
def test_float_ranks(shape):
    x = np.linspace(-8, 8, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    for code in (OperationCode.RELU6, OperationCode.TANH):
        out = run1(code, T(F32, shape), x, T(F32, shape))
        assert_cts_close(out, onnx_activation(code, x), F32)


def test_float_extremes():
    x = np.array([np.inf, -np.inf, 3e38, -3e38], np.float32)
    assert_cts_close(run1(OperationCode.LOGISTIC, T(F32, (4,)), x, T(F32, (4,))), [1, 0, 1, 0], F32)
    assert_cts_close(run1(OperationCode.TANH, T(F32, (4,)), x, T(F32, (4,))), [1, -1, 1, -1], F32)
    np.testing.assert_array_equal(run1(OperationCode.RELU, T(F32, (4,)), x, T(F32, (4,))),
                                  np.array([np.inf, 0, 3e38, 0], np.float32))


# -- the plain integer reference ------------------------------------------------------------------
def fx_logistic(a: int, ib: int) -> int:
    if a == 0:
        return 1 << 30
    r = one_over_one_plus(exp_negative(-abs(a), ib))
    return r if a > 0 else (M31 - 1) - r


def fx_tanh(a: int, ib: int) -> int:
    if a == 0:
        return 0
    t = sat_pot(reciprocal_q2(exp_negative(-abs(a), ib + 1)) - (1 << 29), 2)
    return t if a > 0 else -t


def reference_quant(code, q_values, scale, zp, signed):
    """Expected stored outputs of quantized LOGISTIC/TANH, element by element in Python ints."""
    scale = float(np.float32(scale))
    mult, shift = frexp_multiplier(scale * 2**27)
    radius = math.floor(15 * 2**27 / 2**shift)
    out = []
    for q in q_values:
        c = int(q) - zp
        if c <= -radius:
            u = 0
        elif c >= radius:
            u = 255
        else:
            x = srdhm(c << shift, mult)
            if code == OperationCode.LOGISTIC:
                u = min(rdbp(fx_logistic(x, 4), 23), 255)
            else:
                u = min(rdbp(fx_tanh(x, 4), 24) + 128, 255)
        out.append(u - 128 if signed else u)
    return np.array(out)


def float_requant(code, q, scale, zp, out_scale, out_zp, qmin, qmax):
    real = (q.astype(np.float64) - zp) * scale
    y = 1 / (1 + np.exp(-real)) if code == OperationCode.LOGISTIC else np.tanh(real)
    return np.clip(np.round(y / out_scale) + out_zp, qmin, qmax)


# -- quantized LOGISTIC / TANH ------------------------------------------------------------------------
@pytest.mark.parametrize("code", [OperationCode.LOGISTIC, OperationCode.TANH], ids=lambda c: c.name)
@pytest.mark.parametrize("scale,zp", [(0.5, 0), (0.05, 100), (0.1, 128), (1 / 16, 200), (0.003, 37), (2.5, 128)])
def test_quant_all_values(code, scale, zp):
    u_in = np.arange(256, dtype=np.uint8).reshape(4, 64)
    out_scale, out_zp = OUT_QUANT[code][U8]
    u_out = run1(code, T(U8, u_in.shape, scale, zp), u_in, T(U8, u_in.shape, out_scale, out_zp))
    np.testing.assert_array_equal(u_out.ravel(), reference_quant(code, u_in.ravel(), scale, zp, False))
    assert_cts_close(u_out, float_requant(code, u_in, scale, zp, out_scale, out_zp, 0, 255), U8)

    s_in = (u_in.astype(np.int16) - 128).astype(np.int8)
    s_scale, s_zp = OUT_QUANT[code][S8]
    s_out = run1(code, T(S8, s_in.shape, scale, zp - 128), s_in, T(S8, s_in.shape, s_scale, s_zp))
    np.testing.assert_array_equal(s_out.ravel(), reference_quant(code, s_in.ravel(), scale, zp - 128, True))
    np.testing.assert_array_equal(s_out.astype(np.int16) + 128, u_out.astype(np.int16))


def test_logistic_cts_vector():
    x = np.array([0, 1, 2, 127], np.uint8).reshape(1, 2, 2, 1)
    out = run1(OperationCode.LOGISTIC, T(U8, x.shape, 0.5, 0), x, T(U8, x.shape, 1 / 256, 0))
    np.testing.assert_array_equal(out.ravel(), [128, 159, 187, 255])


def test_tanh_cts_vector():
    # NNAPI CTS tanh_quantized: input scale 0.05, zero point 100, all 256 values.
    x = np.arange(256, dtype=np.uint8)
    out = run1(OperationCode.TANH, T(U8, (256,), 0.05, 100), x, T(U8, (256,), 1 / 128, 128))
    expected = np.full(256, 255)
    expected[:100] = [0] * 38 + [1] * 11 + [2] * 5 + [3] * 4 + [4, 4, 5, 5, 6, 6, 7, 8, 8, 9, 10, 11, 12, 13, 15,
                                                               16, 18, 19, 21, 23, 26, 28, 31, 33, 36, 40, 43, 47,
                                                               51, 55, 59, 64, 69, 74, 79, 85, 91, 97, 103, 109,
                                                               115, 122]
    expected[100:158] = [128, 134, 141, 147, 153, 159, 165, 171, 177, 182, 187, 192, 197, 201, 205, 209, 213, 216,
                         220, 223, 225, 228, 230, 233, 235, 237, 238, 240, 241, 243, 244, 245, 246, 247, 248, 248,
                         249, 250, 250, 251, 251, 252, 252, 253, 253, 253, 253, 254, 254, 254, 254, 254, 255, 255,
                         255, 255, 255, 255]
    np.testing.assert_array_equal(out, expected)


# -- quantized RELU family -------------------------------------------------------------------------
def round_away(v: float) -> int:
    return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)


@pytest.mark.parametrize("code", list(RELUS), ids=lambda c: c.name)
@pytest.mark.parametrize("qtype,scale,zp", [(U8, 0.05, 100), (U8, 0.1, 0), (U8, 0.02, 255), (S8, 0.05, -28),
                                            (S8, 0.1, -128), (S8, 0.03, 20)])
def test_quant_relu(code, qtype, scale, zp):
    qmin, qmax = (0, 255) if qtype == U8 else (-128, 127)
    x = np.arange(qmin, qmax + 1).astype(np.uint8 if qtype == U8 else np.int8).reshape(2, 128)
    t = T(qtype, x.shape, scale, zp)
    out = run1(code, t, x, t)
    low, high = RELUS[code]
    lo = max(qmin, zp + round_away(low / scale))
    hi = qmax if high is None else min(qmax, zp + round_away(high / scale))
    np.testing.assert_array_equal(out, np.clip(x.astype(int), lo, hi))
    real = (x.astype(np.float64) - zp) * scale
    clipped = np.maximum(real, low) if high is None else np.clip(real, low, high)
    assert_cts_close(out, np.clip(np.round(clipped / scale) + zp, qmin, qmax), qtype)


def test_quant_relu_signed_matches_unsigned():
    u = np.arange(256, dtype=np.uint8)
    s = (u.astype(np.int16) - 128).astype(np.int8)
    for code in RELUS:
        ut, st = T(U8, (256,), 0.04, 90), T(S8, (256,), 0.04, -38)
        np.testing.assert_array_equal(run1(code, st, s, st).astype(np.int16) + 128, run1(code, ut, u, ut))


# -- validation ------------------------------------------------------------------------------------
def assert_bad_data(code, inputs, outputs):
    with pytest.raises(MltsError) as err:
        run_op(code, inputs, outputs)
    assert err.value.code == ResultCode.BAD_DATA
    assert code.name in str(err.value)


X4 = np.zeros((1, 4), np.uint8)


@pytest.mark.parametrize("code", [*RELUS, OperationCode.LOGISTIC, OperationCode.TANH], ids=lambda c: c.name)
def test_rejects_bad_types_and_counts(code):
    f = np.zeros((1, 4), np.float32)
    assert_bad_data(code, [(T(OperandCode.TENSOR_INT32, (1, 4)), f.astype(np.int32))],
                    [T(OperandCode.TENSOR_INT32, (1, 4))])
    assert_bad_data(code, [(T(F32, (1, 4)), f)], [T(F16, (1, 4))])
    assert_bad_data(code, [(T(F32, (1, 4)), f), (T(F32, (1, 4)), f)], [T(F32, (1, 4))])
    assert_bad_data(code, [(T(F32, (1, 1, 1, 1, 4)), f.reshape(1, 1, 1, 1, 4))], [T(F32, (1, 1, 1, 1, 4))])


@pytest.mark.parametrize("code", list(RELUS), ids=lambda c: c.name)
def test_relu_rejects_changed_quantization(code):
    assert_bad_data(code, [(T(U8, (1, 4), 0.5, 10), X4)], [T(U8, (1, 4), 0.25, 10)])
    assert_bad_data(code, [(T(U8, (1, 4), 0.5, 10), X4)], [T(U8, (1, 4), 0.5, 11)])


@pytest.mark.parametrize("code", [OperationCode.LOGISTIC, OperationCode.TANH], ids=lambda c: c.name)
@pytest.mark.parametrize("qtype", [U8, S8], ids=["u8", "s8"])
def test_fixed_output_quantization_required(code, qtype):
    scale, zp = OUT_QUANT[code][qtype]
    x = X4 if qtype == U8 else X4.astype(np.int8)
    assert_bad_data(code, [(T(qtype, (1, 4), 0.1, 0), x)], [T(qtype, (1, 4), scale * 2, zp)])
    assert_bad_data(code, [(T(qtype, (1, 4), 0.1, 0), x)], [T(qtype, (1, 4), scale, zp + 1)])
