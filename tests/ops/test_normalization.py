"""LOCAL_RESPONSE_NORMALIZATION, L2_NORMALIZATION and INSTANCE_NORMALIZATION against independent
expectations.

Float: onnx.reference LRN (size = 2 * radius + 1 and alpha * size, since NNAPI's alpha multiplies the
plain window sum), LpNormalization(p=2) and InstanceNormalization (per-channel scale/bias filled
with NNAPI's scalar gamma/beta; NHWC data transposed to ONNX's NCHW); numpy formulas written from
NNAPI's documentation; examples from AOSP's test specs (cited).
Quantized L2_NORMALIZATION: a plain per-row Python-int transcription of NNAPI's integer kernel
(TFLite's GetInvSqrtQuantizedMultiplierExp, then 128 x difference scaled, or for int8 along the last
axis the 128 folded into the shift), exact match expected; within one step of the float result; and
AOSP's quantized spec examples.
"""
from __future__ import annotations

import numpy as np
import pytest
from support.int_reference import M31, rdbp, sat_pot, srdhm
from support.onnx_reference import onnx_eval
from support.op_runner import Const, Input, inferred_output_types, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
T = OperandType.tensor
INT, BOOL = OperandType.scalar(OperandCode.INT32), OperandType.scalar(OperandCode.BOOL)
FLOAT_SCALAR = {F32: OperandType.scalar(OperandCode.FLOAT32), F16: OperandType.scalar(OperandCode.FLOAT16)}
LRN, L2, INSTANCE = (OperationCode.LOCAL_RESPONSE_NORMALIZATION, OperationCode.L2_NORMALIZATION,
                     OperationCode.INSTANCE_NORMALIZATION)
RNG = np.random.default_rng(2024)


def assert_bad_data(code, inputs, outputs, *words):
    with pytest.raises(MltsError) as err:
        run_op(code, inputs, outputs)
    assert err.value.code == ResultCode.BAD_DATA
    message = str(err.value)
    assert code.name in message
    for word in words:
        assert word in message, message


def inferred_output_dims(code, input_type, params, output_type):
    """The output's inferred dims, with constant params."""
    inputs = [(input_type, Input())] + [(t, Const(v)) for t, v in params]
    return inferred_output_types(code, inputs, [output_type])[0].dimensions


# == LOCAL_RESPONSE_NORMALIZATION ==================================================================
def lrn(ftype, x, radius, bias, alpha, beta, axis=None, out_type=None, scalar_type=None):
    s = scalar_type or FLOAT_SCALAR[ftype]
    inputs = [(T(ftype, x.shape), x), (INT, radius), (s, bias), (s, alpha), (s, beta)]
    if axis is not None:
        inputs.append((INT, axis))
    return run_op(LRN, inputs, [out_type or T(ftype, x.shape)])[0]


def onnx_lrn(x, radius, bias, alpha, beta, axis):
    """ONNX LRN normalizes dimension 1 of NCHW data: the NNAPI axis becomes C and every other element
    a spatial position. onnx.reference's LRN visits channels with range(N) (batch size) rather than
    range(C), so the data is repeated C times along N and batch 0 is read back."""
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    channels = moved.shape[-1]
    rows = moved.reshape(-1, channels).T.reshape(1, channels, -1, 1)
    size = 2 * radius + 1
    y = onnx_eval("LRN", np.repeat(rows, channels, axis=0), opset=18, size=size, alpha=alpha * size, beta=beta,
                  bias=bias)
    return np.moveaxis(y[0, :, :, 0].T.reshape(moved.shape), -1, axis)


def numpy_lrn(x, radius, bias, alpha, beta, axis):
    """NNAPI's documented formula, one window at a time."""
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    out = np.empty_like(moved)
    for d in range(moved.shape[-1]):
        window = moved[..., max(0, d - radius):d + radius + 1]
        out[..., d] = moved[..., d] / (bias + alpha * np.sum(window ** 2, axis=-1)) ** beta
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("shape,axis", [((7,), None), ((3, 6), -1), ((3, 6), 0), ((2, 5, 4), 1), ((2, 3, 4, 5), None),
                                        ((2, 3, 4, 5), -3), ((2, 6, 3, 2), 1), ((4, 2, 2, 3), 0)])
@pytest.mark.parametrize("radius,bias,alpha,beta", [(0, 1.0, 1.0, 0.5), (1, 2.0, 0.5, 0.75), (2, 9.0, 4.0, 0.5),
                                                    (20, 1.0, 0.1, 1.0), (3, 0.5, 2.0, 1.5)])
def test_lrn_float_against_onnx(ftype, shape, axis, radius, bias, alpha, beta):
    x = RNG.uniform(-2, 2, shape).astype(np.float16 if ftype == F16 else np.float32)
    out = lrn(ftype, x, radius, bias, alpha, beta, axis)
    assert out.dtype == x.dtype
    assert_cts_close(out, onnx_lrn(x, radius, bias, alpha, beta, -1 if axis is None else axis), ftype)


def test_lrn_documented_formula_and_default_axis():
    x = RNG.uniform(-3, 3, (2, 3, 4, 6)).astype(np.float32)
    expected = numpy_lrn(x, 2, 1.5, 0.3, 0.6, 3)
    assert_cts_close(lrn(F32, x, 2, 1.5, 0.3, 0.6), expected, F32)
    assert_cts_close(lrn(F32, x, 2, 1.5, 0.3, 0.6, axis=-1), expected, F32)
    assert_cts_close(lrn(F32, x, 1, 1.0, 1.0, 0.5, axis=1), numpy_lrn(x, 1, 1.0, 1.0, 0.5, 1), F32)


@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
def test_lrn_aosp_spec_examples(ftype):
    dtype = np.float16 if ftype == F16 else np.float32
    x = np.array([-1.1, .6, .7, 1.2, -.7, .1], dtype)
    # V1_0/local_response_norm_float_1.mod.py (radius 20) and _float_4.mod.py (radius 2)
    assert_cts_close(lrn(ftype, x.reshape(1, 1, 1, 6), 20, 9.0, 4.0, 0.5),
                     np.array([-.22, .12, .14, .24, -.14, .02]).reshape(1, 1, 1, 6), ftype)
    four = np.array([-.26492569, .12510864, .14011213, .26726127, -.16178755, .0244266])
    assert_cts_close(lrn(ftype, x.reshape(1, 1, 1, 6), 2, 9.0, 4.0, 0.5), four.reshape(1, 1, 1, 6), ftype)
    # V1_2/local_response_normalization_v1_2.mod.py: the same rows in a {2, 2, 2, 6} tensor, other ranks,
    # and the axis moved to another dimension (the data transposed with it)
    data = np.tile(x, 8).reshape(2, 2, 2, 6)
    assert_cts_close(lrn(ftype, data, 2, 9.0, 4.0, 0.5, axis=-1), np.tile(four, 8).reshape(2, 2, 2, 6), ftype)
    assert_cts_close(lrn(ftype, x.reshape(1, 6), 2, 9.0, 4.0, 0.5), four.reshape(1, 6), ftype)
    moved = np.moveaxis(data, 3, 1)
    assert_cts_close(lrn(ftype, moved, 2, 9.0, 4.0, 0.5, axis=-3),
                     np.moveaxis(np.tile(four, 8).reshape(2, 2, 2, 6), 3, 1), ftype)


def test_lrn_unknown_dims():
    x = RNG.uniform(-1, 1, (2, 3, 5)).astype(np.float32)
    s = FLOAT_SCALAR[F32]
    params = [(INT, 1), (s, 1.0), (s, 0.5), (s, 0.75)]
    out = run_op(LRN, [(T(F32, (0, 0, 0)), x)] + params, [T(F32, (0, 0, 0))])[0]
    assert_cts_close(out, numpy_lrn(x, 1, 1.0, 0.5, 0.75, 2), F32)
    assert inferred_output_dims(LRN, T(F32, (2, 3, 5)), params, T(F32, (0, 0, 0))) == (2, 3, 5)
    assert inferred_output_dims(LRN, T(F32, (2, 0, 5)), params, T(F32, (0, 0, 0))) == (0, 0, 0)


def test_lrn_rejects_bad_parameters():
    x = np.zeros((1, 2, 2, 4), np.float32)
    t, s, s16 = T(F32, x.shape), FLOAT_SCALAR[F32], FLOAT_SCALAR[F16]
    good = [(t, x), (INT, 1), (s, 1.0), (s, 1.0), (s, 0.5)]
    assert_bad_data(LRN, good[:2] + [(s, 0.0)] + good[3:], [t], "input 2", "bias must not be zero")
    assert_bad_data(LRN, good[:1] + [(INT, -1)] + good[2:], [t], "input 1", "radius")
    assert_bad_data(LRN, good + [(INT, 4)], [t], "input 5", "axis 4 out of range")
    assert_bad_data(LRN, good + [(INT, -5)], [t], "input 5", "out of range")
    assert_bad_data(LRN, good[:3] + [(s16, 1.0)] + good[4:], [t], "input 3", "FLOAT16")
    x16 = x.astype(np.float16)
    assert_bad_data(LRN, [(T(F16, x.shape), x16), (INT, 1), (s, 1.0), (s16, 1.0), (s16, 0.5)], [T(F16, x.shape)],
                    "input 2", "FLOAT32")
    assert_bad_data(LRN, good[:4], [t], "expected 5 or 6 inputs")
    assert_bad_data(LRN, good + [(s, 1.0)], [t], "input 5", "FLOAT32")
    assert_bad_data(LRN, good, [T(F16, x.shape)], "output 0")
    assert_bad_data(LRN, good, [T(F32, (1, 2, 2, 5))], "output 0", "do not match")
    x5 = np.zeros((1, 1, 2, 2, 4), np.float32)
    assert_bad_data(LRN, [(T(F32, x5.shape), x5)] + good[1:], [T(F32, x5.shape)], "input 0", "rank 5")
    q = np.zeros((1, 4), np.uint8)
    assert_bad_data(LRN, [(T(U8, q.shape, 0.1, 0), q)] + good[1:], [T(U8, q.shape, 0.1, 0)], "input 0", "not allowed")


# == L2_NORMALIZATION ==============================================================================
def l2(t_in, x, t_out, axis=None):
    inputs = [(t_in, x)] + ([] if axis is None else [(INT, axis)])
    return run_op(L2, inputs, [t_out])[0]


@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("shape,axis", [((5,), None), ((3, 4), None), ((3, 4), 0), ((2, 3, 4), -2), ((2, 3, 4), 0),
                                        ((2, 2, 3, 5), None), ((2, 2, 3, 5), 1), ((2, 2, 3, 5), -4)])
def test_l2_float_against_onnx(ftype, shape, axis):
    x = RNG.uniform(-5, 5, shape).astype(np.float16 if ftype == F16 else np.float32)
    out = l2(T(ftype, shape), x, T(ftype, shape), axis)
    assert out.dtype == x.dtype
    expected = onnx_eval("LpNormalization", x.astype(np.float64), opset=18, axis=-1 if axis is None else axis, p=2)
    assert_cts_close(out, expected, ftype)


@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
def test_l2_zero_and_tiny_vectors(ftype):
    dtype = np.float16 if ftype == F16 else np.float32
    # V1_3/l2_normalization_zeros.mod.py: an all-zero vector gives zeros (not NaN)
    zeros = np.zeros(2, dtype)
    np.testing.assert_array_equal(l2(T(ftype, (2,)), zeros, T(ftype, (2,)), -1), [0, 0])
    # NNAPI divides by max(norm, 1e-6): a norm below the floor is not scaled up to 1 (ONNX would give 1)
    tiny = np.array([[1e-7, 0.0], [0.0, 3e-7]], dtype)
    expected = tiny.astype(np.float64) / 1e-6
    assert_cts_close(l2(T(ftype, (2, 2)), tiny, T(ftype, (2, 2))), expected, ftype)


@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
def test_l2_aosp_spec_examples(ftype):
    dtype = np.float16 if ftype == F16 else np.float32
    # V1_0/l2_normalization.mod.py, l2_normalization_2.mod.py, l2_normalization_large.mod.py
    cases = [([0, 3, 4], [0, .6, .8], (1, 1, 1, 3)),
             ([-1.1, 0.6, 0.7, 1.2, -0.7, 0.1], [-0.55, 0.3, 0.35, 0.6, -0.35, 0.05], (1, 1, 1, 6)),
             ([0, 3, 4, 0, 5, 12, 0, 8, 15, 0, 7, 24],
              [0, .6, .8, 0, 0.38461539149284363, 0.92307698726654053, 0, 0.47058823704719543,
               0.88235294818878174, 0, 0.28, 0.96], (1, 2, 2, 3))]
    for x, y, shape in cases:
        out = l2(T(ftype, shape), np.array(x, dtype).reshape(shape), T(ftype, shape))
        assert_cts_close(out, np.array(y).reshape(shape), ftype)


# -- the plain integer reference ----------------------------------------------------------------------
def inv_sqrt(s: int) -> tuple[int, int]:
    """(multiplier, right shift) with 1 / sqrt(s) ~= multiplier / 2**(31 + shift)."""
    if s <= 1:
        return M31 - 1, 0
    shift = 11
    while s >= 1 << 29:
        s //= 4
        shift += 1
    pairs = (32 - s.bit_length() - 1) // 2 - 1
    shift -= pairs
    s <<= 2 * pairs
    half = rdbp(s >> 1, 1)
    x = 1 << 28                                       # Q3 1.0
    for _ in range(5):
        x3 = sat_pot(srdhm(srdhm(x, x), x), 6)       # Q9 -> Q3
        x = sat_pot(srdhm(3 << 27, x) - srdhm(half, x3), 3)  # Q6 -> Q3
    x = srdhm(x, 1518500250)
    if shift < 0:
        x, shift = x << -shift, 0
    return x, shift


def reference_row(diffs: list[int], signed: bool, last_axis: bool) -> list[int]:
    m, r = inv_sqrt(sum(d * d for d in diffs))
    out = []
    for d in diffs:
        if signed and last_axis:  # MultiplyByQuantizedMultiplier(d, m, 7 - r)
            v = srdhm(d << (7 - r), m) if 7 - r > 0 else rdbp(srdhm(d, m), r - 7)
        else:
            v = rdbp(srdhm(d * 128, m), r)
        out.append(max(-128, min(127, v)) if signed else max(0, min(255, v + 128)))
    return out


def reference_l2_quant(q, zp, axis, signed):
    moved = np.moveaxis(np.asarray(q, np.int64), axis, -1)
    last = axis % q.ndim == q.ndim - 1
    rows = [reference_row([int(v) - zp for v in row], signed, last) for row in moved.reshape(-1, moved.shape[-1])]
    return np.moveaxis(np.array(rows).reshape(moved.shape), -1, axis)


def float_l2_requant(q, scale, zp, axis, out_zp):
    real = (np.asarray(q, np.float64) - zp) * scale
    norm = np.sqrt(np.sum(real ** 2, axis=axis, keepdims=True))
    y = np.where(norm > 0, real / np.where(norm > 0, norm, 1), 0)
    return np.clip(np.round(y * 128) + out_zp, out_zp - 128, out_zp + 127)


@pytest.mark.parametrize("shape,axis", [((1, 6), None), ((3, 7), 0), ((2, 3, 5), 1), ((2, 3, 4), -1), ((1, 2, 2, 6), 3),
                                        ((2, 3, 2, 2), -3), ((40,), 0), ((2, 1), -1), ((4, 300), -1)])
@pytest.mark.parametrize("scale,zp", [(0.5, 128), (0.1, 32), (0.05, 200), (2.0, 0), (0.9, 250)])
def test_l2_quant_against_integer_reference(shape, axis, scale, zp):
    u = RNG.integers(0, 256, shape).astype(np.uint8)
    ax = -1 if axis is None else axis
    u_out = l2(T(U8, shape, scale, zp), u, T(U8, shape, 1 / 128, 128), axis)
    np.testing.assert_array_equal(u_out, reference_l2_quant(u, zp, ax, False))
    assert_cts_close(u_out, float_l2_requant(u, scale, zp, ax, 128), U8)

    s = (u.astype(np.int16) - 128).astype(np.int8)
    s_out = l2(T(S8, shape, scale, zp - 128), s, T(S8, shape, 1 / 128, 0), axis)
    np.testing.assert_array_equal(s_out, reference_l2_quant(s, zp - 128, ax, True))
    assert_cts_close(s_out, float_l2_requant(s, scale, zp - 128, ax, 0), S8)


def test_l2_quant_signed_last_axis_rounds_like_tflite_reference():
    # differences [10, 14, 2]: 128 * 14 / sqrt(300) = 103.46. NNAPI's int8 kernel along the last axis
    # gives 103; along another axis (and the uint8 kernel) it rounds twice, to 207 / 2 = 103.5 -> 104.
    row = np.array([10, 14, 2], np.int8)
    t_in, t_out = T(S8, (1, 3), 0.1, 0), T(S8, (1, 3), 1 / 128, 0)
    np.testing.assert_array_equal(l2(t_in, row.reshape(1, 3), t_out), [[74, 103, 15]])
    t_in, t_out = T(S8, (3, 1), 0.1, 0), T(S8, (3, 1), 1 / 128, 0)
    np.testing.assert_array_equal(l2(t_in, row.reshape(3, 1), t_out, 0), [[74], [104], [15]])
    u = (row.astype(np.int16) + 128).astype(np.uint8).reshape(1, 3)
    np.testing.assert_array_equal(l2(T(U8, (1, 3), 0.1, 128), u, T(U8, (1, 3), 1 / 128, 128)), [[202, 232, 143]])


SPEC_INPUT = np.array([0, 3, 4, 3, 0, 4, 8, 6, 0, 12, 0, 9, 9, 12, 20, 12, 15, 16, 20, 9, 12, 16, 15, 12], np.float64)
SPEC_OUTPUT = np.array([0.00, 0.60, 0.80, 0.60, 0.00, 0.80, 0.80, 0.60, 0.00, 0.80, 0.00, 0.60,
                        0.36, 0.48, 0.80, 0.48, 0.60, 0.64, 0.80, 0.36, 0.48, 0.64, 0.60, 0.48])


@pytest.mark.parametrize("qtype,zp_in,zp_out", [(U8, 32, 128), (S8, -96, 0)], ids=["u8", "s8"])
@pytest.mark.parametrize("axis", [None, -1, 0, 2])
def test_l2_quant_aosp_spec_examples(qtype, zp_in, zp_out, axis):
    # V1_2/l2_normalization_axis.mod.py (quant8: input scale 0.1 zp 32) and V1_3/l2_normalization_quant8_signed
    # .mod.py (zp -96): rows of 3 along the last axis; moved to other axes with the data transposed.
    dtype = np.uint8 if qtype == U8 else np.int8
    q = (np.round(SPEC_INPUT / 0.1) + zp_in).astype(dtype).reshape(2, 2, 2, 3)
    expected = (np.round(SPEC_OUTPUT * 128) + zp_out).reshape(2, 2, 2, 3)
    if axis not in (None, -1):
        q, expected = np.moveaxis(q, 3, axis), np.moveaxis(expected, 3, axis)
    out = l2(T(qtype, q.shape, 0.1, zp_in), q, T(qtype, q.shape, 1 / 128, zp_out), axis)
    assert_cts_close(out, expected, qtype)


@pytest.mark.parametrize("axis", [-1, 0])
def test_l2_quant_aosp_corner_case_and_zeros(axis):
    # V1_2/l2_normalization_axis.mod.py "corner_case": one difference of +-1 per row (sum of squares 1)
    q = np.array([[245], [247]], np.uint8)
    t_in, t_out = T(U8, (2, 1), 0.904414, 246), T(U8, (2, 1), 0.0078125, 128)
    if axis == -1:
        np.testing.assert_array_equal(l2(t_in, q, t_out, -1), [[0], [255]])
    else:  # both elements in one vector: 128 + round(-+128 / sqrt(2)) = 128 -+ 91
        np.testing.assert_array_equal(l2(t_in, q, t_out, 0), [[37], [219]])
    # V1_3/l2_normalization_zeros.mod.py: zeros stay at the output zero point
    u_zeros = l2(T(U8, (2,), 0.1, 32), np.array([32, 32], np.uint8), T(U8, (2,), 1 / 128, 128), axis)
    np.testing.assert_array_equal(u_zeros, [128, 128])
    s_zeros = l2(T(S8, (2,), 0.1, -96), np.array([-96, -96], np.int8), T(S8, (2,), 1 / 128, 0), axis)
    np.testing.assert_array_equal(s_zeros, [0, 0])


def test_l2_unknown_dims():
    x = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
    out = run_op(L2, [(T(F32, (0, 0)), x), (INT, 0)], [T(F32, (0, 0))])[0]
    assert_cts_close(out, x / np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=0, keepdims=True)), F32)
    assert inferred_output_dims(L2, T(F32, (3, 4)), [], T(F32, (0, 0))) == (3, 4)
    assert inferred_output_dims(L2, T(F32, (3, 0)), [(INT, 0)], T(F32, (0, 0))) == (0, 0)


def test_l2_rejects_bad_inputs():
    x = np.zeros((2, 4), np.float32)
    t = T(F32, x.shape)
    assert_bad_data(L2, [(t, x), (INT, 2)], [t], "input 1", "axis 2 out of range")
    assert_bad_data(L2, [(t, x), (INT, -3)], [t], "input 1", "out of range")
    assert_bad_data(L2, [(t, x), (FLOAT_SCALAR[F32], 1.0)], [t], "input 1", "FLOAT32")
    assert_bad_data(L2, [(t, x), (INT, 0), (INT, 0)], [t], "expected 1 or 2 inputs")
    assert_bad_data(L2, [(t, x)], [T(F16, x.shape)], "output 0")
    x5 = np.zeros((1, 1, 1, 2, 4), np.float32)
    assert_bad_data(L2, [(T(F32, x5.shape), x5)], [T(F32, x5.shape)], "input 0", "rank 5")
    i32 = OperandCode.TENSOR_INT32
    assert_bad_data(L2, [(T(i32, x.shape), x.astype(np.int32))], [T(i32, x.shape)], "input 0", "not allowed")


@pytest.mark.parametrize("qtype,zp", [(U8, 128), (S8, 0)], ids=["u8", "s8"])
def test_l2_rejects_wrong_output_quantization(qtype, zp):
    q = np.zeros((2, 4), np.uint8 if qtype == U8 else np.int8)
    t_in = T(qtype, q.shape, 0.1, 0)
    assert_bad_data(L2, [(t_in, q)], [T(qtype, q.shape, 1 / 256, zp)], "output 0", "scale")
    assert_bad_data(L2, [(t_in, q)], [T(qtype, q.shape, 1 / 128, zp - 1)], "output 0", "zeroPoint")


# == INSTANCE_NORMALIZATION ========================================================================
def instance_norm(ftype, x, gamma, beta, epsilon, nchw, scalar_type=None, layout_type=BOOL):
    s = scalar_type or FLOAT_SCALAR[ftype]
    inputs = [(T(ftype, x.shape), x), (s, gamma), (s, beta), (s, epsilon), (layout_type, nchw)]
    return run_op(INSTANCE, inputs, [T(ftype, x.shape)])[0]


def onnx_instance_norm(x, gamma, beta, epsilon, nchw):
    data = x.astype(np.float64) if nchw else np.transpose(x, (0, 3, 1, 2)).astype(np.float64)
    channels = data.shape[1]
    y = onnx_eval("InstanceNormalization", data, np.full(channels, gamma), np.full(channels, beta), opset=18,
                 epsilon=epsilon)
    return y if nchw else np.transpose(y, (0, 2, 3, 1))


@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("shape", [(1, 3, 4, 2), (2, 2, 5, 3), (3, 1, 1, 4), (1, 4, 4, 1)])
@pytest.mark.parametrize("gamma,beta,epsilon", [(1.0, 0.0, 1e-4), (2.0, 10.0, 1e-4), (-0.5, 1.5, 0.01)])
def test_instance_norm_against_onnx(ftype, nchw, shape, gamma, beta, epsilon):
    x = RNG.uniform(-3, 3, shape).astype(np.float16 if ftype == F16 else np.float32)
    out = instance_norm(ftype, x, gamma, beta, epsilon, nchw)
    assert out.dtype == x.dtype
    assert_cts_close(out, onnx_instance_norm(x, gamma, beta, epsilon, nchw), ftype)


INSTANCE_SPEC_INPUT = np.array([0, 1, 0, 2, 0, 2, 0, 4, 1, -1, -1, 2, -1, -2, 1, 4], np.float64).reshape(2, 2, 2, 2)


@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
def test_instance_norm_aosp_spec_examples(ftype, nchw):
    # V1_2/instance_normalization.mod.py (NHWC data; the NCHW variants transpose it)
    dtype = np.float16 if ftype == F16 else np.float32
    cases = [(1.0, 0.0, INSTANCE_SPEC_INPUT,
              [0., -1.1470304, 0., -0.22940612, 0., -0.22940612, 0., 1.6058424, 0.99995005, -0.7337929, -0.99995005,
               0.52413774, -0.99995005, -1.1531031, 0.99995005, 1.3627582], (2, 2, 2, 2)),
             (2.0, 10.0, INSTANCE_SPEC_INPUT,
              [10., 7.7059393, 10., 9.541187, 10., 9.541187, 10., 13.211685, 11.9999, 8.532414, 8.0001, 11.048275,
               8.0001, 7.693794, 11.9999, 12.725516], (2, 2, 2, 2)),
             (1.0, 0.0, np.array([198, 198, 202, 202], np.float64),
              [-0.9999875, -0.9999875, 0.9999875, 0.9999875], (1, 2, 2, 1))]
    for gamma, beta, x, y, shape in cases:
        x, y = x.reshape(shape), np.array(y).reshape(shape)
        if nchw:
            x, y = np.transpose(x, (0, 3, 1, 2)), np.transpose(y, (0, 3, 1, 2))
        assert_cts_close(instance_norm(ftype, x.astype(dtype), gamma, beta, 1e-4, nchw), y, ftype)


def test_instance_norm_unknown_dims():
    x = RNG.uniform(-1, 1, (2, 3, 3, 2)).astype(np.float32)
    s = FLOAT_SCALAR[F32]
    params = [(s, 1.0), (s, 0.0), (s, 1e-3), (BOOL, False)]
    out = run_op(INSTANCE, [(T(F32, (0, 0, 0, 0)), x)] + params, [T(F32, (0, 0, 0, 0))])[0]
    assert_cts_close(out, onnx_instance_norm(x, 1.0, 0.0, 1e-3, False), F32)
    assert inferred_output_dims(INSTANCE, T(F32, (2, 3, 3, 2)), params, T(F32, (0, 0, 0, 0))) == (2, 3, 3, 2)


def test_instance_norm_rejects_bad_inputs():
    x = np.zeros((1, 2, 2, 3), np.float32)
    t, s, s16 = T(F32, x.shape), FLOAT_SCALAR[F32], FLOAT_SCALAR[F16]
    good = [(t, x), (s, 1.0), (s, 0.0), (s, 1e-4), (BOOL, False)]
    assert_bad_data(INSTANCE, good[:4] + [(INT, 0)], [t], "input 4", "BOOL")
    assert_bad_data(INSTANCE, good[:3] + [(s16, 1e-4)] + good[4:], [t], "input 3", "FLOAT16")
    assert_bad_data(INSTANCE, good[:4], [t], "expected 5 inputs")
    assert_bad_data(INSTANCE, good, [T(F16, x.shape)], "output 0")
    x3 = np.zeros((2, 2, 3), np.float32)
    assert_bad_data(INSTANCE, [(T(F32, x3.shape), x3)] + good[1:], [T(F32, x3.shape)], "input 0", "rank 3")
    x16 = x.astype(np.float16)
    assert_bad_data(INSTANCE, [(T(F16, x.shape), x16), (s, 1.0), (s16, 0.0), (s16, 1e-4), (BOOL, False)],
                    [T(F16, x.shape)], "input 1", "FLOAT32")
    q = np.zeros(x.shape, np.uint8)
    assert_bad_data(INSTANCE, [(T(U8, q.shape, 0.1, 0), q)] + good[1:], [T(U8, q.shape, 0.1, 0)], "input 0")
