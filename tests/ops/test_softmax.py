"""SOFTMAX against independent expectations.

Float: onnx.reference.ReferenceEvaluator Softmax(axis) on beta * x (ONNX has no beta).
Quantized: a plain per-row Python-int transcription of NNAPI's integer softmax (Q5.26 scaled
differences, gemmlowp exp, Q12.19 accumulation, normalized reciprocal, rounding to 1/256), exact
match expected; also within one step of the float softmax of the dequantized input, published CTS
vectors, and signed/unsigned agreement up to the 128 offset.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode
from support.int_reference import M31, exp_negative, frexp_multiplier, one_over_one_plus, rdbp, srdhm
from support.onnx_reference import onnx_eval
from support.op_runner import run_op
from support.tolerance import assert_cts_close

OP = OperationCode.SOFTMAX
F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
T = OperandType.tensor
BETA32, BETA16, INT = (OperandType.scalar(OperandCode.FLOAT32), OperandType.scalar(OperandCode.FLOAT16),
                       OperandType.scalar(OperandCode.INT32))


def softmax(t_in, x, beta, t_out, axis=None, beta_type=None):
    inputs = [(t_in, x), (beta_type or (BETA16 if t_in.code == F16 else BETA32), beta)]
    if axis is not None:
        inputs.append((INT, axis))
    return run_op(OP, inputs, [t_out])[0]


def onnx_softmax(x, beta, axis):
    x = np.asarray(x, np.float32) * np.float32(beta)
    return onnx_eval("Softmax", x, axis=axis)


RNG = np.random.default_rng(1234)


# -- float ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("shape,axis", [((5,), None), ((2, 5), None), ((2, 5), 0), ((2, 3, 4), 1),
                                        ((2, 3, 4), -3), ((1, 2, 3, 4), None), ((2, 2, 3, 3), 2),
                                        ((2, 2, 3, 3), -4)])
@pytest.mark.parametrize("beta", [1.0, 0.25, 3.0])
def test_float_against_onnx(ftype, shape, axis, beta):
    x = RNG.uniform(-6, 6, shape).astype(np.float16 if ftype == F16 else np.float32)
    out = softmax(T(ftype, shape), x, beta, T(ftype, shape), axis)
    assert out.dtype == x.dtype
    assert_cts_close(out, onnx_softmax(x, beta, -1 if axis is None else axis), ftype)


def test_float_large_values_are_stable():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1000.0, -1000.0]], np.float32)
    out = softmax(T(F32, x.shape), x, 1.0, T(F32, x.shape))
    assert_cts_close(out, onnx_softmax(x, 1.0, -1), F32)


def test_float_cts_vector():
    # NNAPI CTS softmax_float_1: beta 1e-6 makes every output 1/4.
    x = np.array([[1.0, 2.0, 10.0, 20.0]], np.float32)
    assert_cts_close(softmax(T(F32, (1, 4)), x, 1e-6, T(F32, (1, 4))), np.full((1, 4), 0.25), F32)


# -- the plain integer reference ------------------------------------------------------------------
def reference_row(row, scale: float, beta: float) -> list[int]:
    """NNAPI's quantized softmax of one row of stored values (unsigned result)."""
    real = float(np.float32(beta)) * float(np.float32(scale)) * 2**26
    mult, e = frexp_multiplier(min(real, 2**31 - 1.0))
    diff_min = -math.floor(31 * 2**26 / 2**e)
    top = max(int(v) for v in row)
    exps = []
    for v in row:
        d = int(v) - top
        exps.append(exp_negative(srdhm(d << e, mult), 5) if d >= diff_min else None)
    total = sum(rdbp(x, 12) for x in exps if x is not None)
    headroom = 32 - total.bit_length()
    reciprocal = one_over_one_plus((total << headroom) - M31)
    bits_over_unit = 12 - headroom
    return [0 if x is None else min(255, max(0, rdbp(srdhm(reciprocal, x), bits_over_unit + 23))) for x in exps]


def reference_quant(q, scale, beta, axis, signed):
    moved = np.moveaxis(np.asarray(q, np.int64), axis, -1)
    out = np.array([reference_row(row, scale, beta) for row in moved.reshape(-1, moved.shape[-1])])
    out = np.moveaxis(out.reshape(moved.shape), -1, axis)
    return out - 128 if signed else out


def float_requant(q, scale, zp, beta, axis, out_zp):
    real = (np.asarray(q, np.float64) - zp) * scale * beta
    e = np.exp(real - real.max(axis=axis, keepdims=True))
    p = e / e.sum(axis=axis, keepdims=True)
    return np.clip(np.round(p * 256) + out_zp, out_zp, out_zp + 255)


# -- quantized --------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,axis", [((1, 10), -1), ((3, 7), 0), ((2, 3, 5), 1), ((1, 2, 2, 6), 3),
                                        ((2, 3, 2, 2), -3), ((40,), 0)])
@pytest.mark.parametrize("scale,zp,beta", [(0.5, 0, 1.0), (0.1, 128, 1.0), (0.05, 60, 2.0), (1 / 16, 200, 0.5),
                                           (0.25, 10, 0.0001), (2.0, 128, 1.0)])
def test_quant_against_integer_reference(shape, axis, scale, zp, beta):
    u = RNG.integers(0, 256, shape).astype(np.uint8)
    u_out = softmax(T(U8, shape, scale, zp), u, beta, T(U8, shape, 1 / 256, 0), axis)
    np.testing.assert_array_equal(u_out, reference_quant(u, scale, beta, axis, False))
    assert_cts_close(u_out, float_requant(u, scale, zp, beta, axis, 0), U8)

    s = (u.astype(np.int16) - 128).astype(np.int8)
    s_out = softmax(T(S8, shape, scale, zp - 128), s, beta, T(S8, shape, 1 / 256, -128), axis)
    np.testing.assert_array_equal(s_out, reference_quant(s, scale, beta, axis, True))
    np.testing.assert_array_equal(s_out.astype(np.int16) + 128, u_out.astype(np.int16))


def test_quant_default_axis_is_last():
    u = RNG.integers(0, 256, (2, 3, 4)).astype(np.uint8)
    t, to = T(U8, u.shape, 0.1, 100), T(U8, u.shape, 1 / 256, 0)
    np.testing.assert_array_equal(softmax(t, u, 1.0, to), softmax(t, u, 1.0, to, axis=-1))
    np.testing.assert_array_equal(softmax(t, u, 1.0, to), softmax(t, u, 1.0, to, axis=2))


def test_quant_cts_vectors():
    t = T(U8, (2, 5), 0.5, 0)
    x = np.array([[1, 2, 3, 4, 5], [255, 254, 253, 252, 251]], np.uint8)
    np.testing.assert_array_equal(softmax(t, x, 1.0, T(U8, (2, 5), 1 / 256, 0)),
                                  [[15, 24, 40, 67, 110], [110, 67, 40, 24, 15]])
    x = np.array([[1, 2, 10, 20]], np.uint8)
    np.testing.assert_array_equal(softmax(T(U8, (1, 4), 0.5, 0), x, 1e-5, T(U8, (1, 4), 1 / 256, 0)),
                                  [[64, 64, 64, 64]])
    xs = (x.astype(np.int16) - 128).astype(np.int8)
    np.testing.assert_array_equal(softmax(T(S8, (1, 4), 0.5, -128), xs, 1e-5, T(S8, (1, 4), 1 / 256, -128)),
                                  [[-64, -64, -64, -64]])


def test_quant_uniform_row_and_single_element():
    x = np.full((1, 8), 77, np.uint8)
    out = softmax(T(U8, (1, 8), 0.3, 7), x, 1.0, T(U8, (1, 8), 1 / 256, 0))
    np.testing.assert_array_equal(out, np.full((1, 8), 32))
    one = np.array([[9]], np.uint8)
    np.testing.assert_array_equal(softmax(T(U8, (1, 1), 0.3, 7), one, 1.0, T(U8, (1, 1), 1 / 256, 0)), [[255]])


# -- validation ------------------------------------------------------------------------------------
def assert_bad_data(inputs, outputs):
    with pytest.raises(MltsError) as err:
        run_op(OP, inputs, outputs)
    assert err.value.code == ResultCode.BAD_DATA
    assert "SOFTMAX" in str(err.value)


X = np.zeros((2, 4), np.float32)
Q = np.zeros((2, 4), np.uint8)


def test_rejects_bad_beta():
    assert_bad_data([(T(F32, (2, 4)), X), (BETA32, 0.0)], [T(F32, (2, 4))])
    assert_bad_data([(T(F32, (2, 4)), X), (BETA32, -1.0)], [T(F32, (2, 4))])
    assert_bad_data([(T(F16, (2, 4)), X.astype(np.float16)), (BETA32, 1.0)], [T(F16, (2, 4))])
    assert_bad_data([(T(F32, (2, 4)), X), (BETA16, 1.0)], [T(F32, (2, 4))])


def test_rejects_bad_axis_and_counts():
    assert_bad_data([(T(F32, (2, 4)), X), (BETA32, 1.0), (INT, 2)], [T(F32, (2, 4))])
    assert_bad_data([(T(F32, (2, 4)), X), (BETA32, 1.0), (INT, -3)], [T(F32, (2, 4))])
    assert_bad_data([(T(F32, (2, 4)), X), (BETA32, 1.0), (BETA32, 1.0)], [T(F32, (2, 4))])
    assert_bad_data([(T(F32, (2, 4)), X)], [T(F32, (2, 4))])
    assert_bad_data([(T(F32, (1, 1, 1, 2, 4)), X.reshape(1, 1, 1, 2, 4)), (BETA32, 1.0)], [T(F32, (1, 1, 1, 2, 4))])


def test_rejects_bad_types():
    i32 = OperandCode.TENSOR_INT32
    assert_bad_data([(T(i32, (2, 4)), Q.astype(np.int32)), (BETA32, 1.0)], [T(i32, (2, 4))])
    assert_bad_data([(T(F32, (2, 4)), X), (BETA32, 1.0)], [T(F16, (2, 4))])


@pytest.mark.parametrize("qtype,zp", [(U8, 0), (S8, -128)], ids=["u8", "s8"])
def test_rejects_wrong_output_quantization(qtype, zp):
    x = Q if qtype == U8 else Q.astype(np.int8)
    assert_bad_data([(T(qtype, (2, 4), 0.1, 0), x), (BETA32, 1.0)], [T(qtype, (2, 4), 1 / 128, zp)])
    assert_bad_data([(T(qtype, (2, 4), 0.1, 0), x), (BETA32, 1.0)], [T(qtype, (2, 4), 1 / 256, zp + 1)])
