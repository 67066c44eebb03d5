"""CAST, QUANTIZE and DEQUANTIZE against independent expectations.

Float references come from onnx.reference.ReferenceEvaluator (Cast, QuantizeLinear,
DequantizeLinear). Where NNAPI deliberately differs from ONNX, the expectation is written out by
hand: CAST clamps to [0, 255] before converting to TENSOR_QUANT8_ASYMM and reads quant8 operands as
raw integers (scale and zero point play no part); QUANTIZE rounds halves away from zero (ONNX
rounds them to even), so it is checked exactly against a plain Python computation and within one
step of ONNX.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode
from mlts.runtime.operand_type import SymmPerChannelQuantParams
from support.onnx_reference import onnx_eval
from support.op_runner import run_op
from support.tolerance import assert_cts_close

F32, F16, I32 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16, OperandCode.TENSOR_INT32
U8, S8, B8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, OperandCode.TENSOR_BOOL8
SYMM8, PC8 = OperandCode.TENSOR_QUANT8_SYMM, OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
U16, S16 = OperandCode.TENSOR_QUANT16_ASYMM, OperandCode.TENSOR_QUANT16_SYMM
T = OperandType.tensor
O = OperationCode
ONNX_TYPE = {F32: TensorProto.FLOAT, F16: TensorProto.FLOAT16, I32: TensorProto.INT32, U8: TensorProto.UINT8}
NP_TYPE = {F32: np.float32, F16: np.float16, I32: np.int32, U8: np.uint8}


@pytest.fixture(autouse=True)
def _quiet_float16_overflow():
    with np.errstate(over="ignore"):
        yield


def make(code, shape, scale=None, zp=0):
    if code in (U8, S8, SYMM8, U16, S16):
        return T(code, shape, 0.5 if scale is None else scale, zp)
    return T(code, shape)


# -- CAST ------------------------------------------------------------------------------------------
# Values every type can hold exactly-ish and that stay inside [0, 255] (so ONNX and NNAPI agree).
IN_RANGE = np.array([[0.0, 1.0, 2.75, 100.5], [127.25, 200.0, 254.9, 255.0]])


@pytest.mark.parametrize("src", [F32, F16, I32, U8], ids=lambda c: c.name)
@pytest.mark.parametrize("dst", [F32, F16, I32, U8], ids=lambda c: c.name)
def test_cast_pairs_against_onnx(src, dst):
    x = IN_RANGE.astype(NP_TYPE[src]) if src in (F32, F16) else np.trunc(IN_RANGE).astype(NP_TYPE[src])
    out = run_op(O.CAST, [(make(src, x.shape), x)], [make(dst, x.shape)])[0]
    assert out.dtype == NP_TYPE[dst] and out.shape == x.shape
    assert_cts_close(out, onnx_eval("Cast", x, to=ONNX_TYPE[dst]), dst if dst != U8 else I32)


@pytest.mark.parametrize("src", [F32, F16], ids=lambda c: c.name)
def test_cast_float_to_integers_truncates_and_saturates(src):
    x = np.array([-300.0, -1.5, -0.5, 0.7, 254.9, 255.5, 1000.0, np.inf, -np.inf, np.nan], NP_TYPE[src])
    to_u8 = run_op(O.CAST, [(T(src, (10,)), x)], [T(U8, (10,), 0.5, 3)])[0]
    np.testing.assert_array_equal(to_u8, [0, 0, 0, 0, 254, 255, 255, 255, 0, 0])
    to_i32 = run_op(O.CAST, [(T(src, (10,)), x)], [T(I32, (10,))])[0]
    np.testing.assert_array_equal(to_i32, [-300, -1, 0, 0, 254, 255, 1000, 2**31 - 1, -2**31, 0])


def test_cast_int32_to_quant8_clamps():
    x = np.array([-2**31, -1, 0, 17, 255, 256, 2**31 - 1], np.int32)
    out = run_op(O.CAST, [(T(I32, (7,)), x)], [T(U8, (7,), 1.0, 0)])[0]
    np.testing.assert_array_equal(out, [0, 0, 0, 17, 255, 255, 255])


def test_cast_quant8_uses_raw_values():
    x = np.array([0, 3, 128, 255], np.uint8)
    t = T(U8, (4,), 0.25, 128)  # the quantization parameters must not be applied
    np.testing.assert_array_equal(run_op(O.CAST, [(t, x)], [T(F32, (4,))])[0], [0.0, 3.0, 128.0, 255.0])
    np.testing.assert_array_equal(run_op(O.CAST, [(t, x)], [T(I32, (4,))])[0], [0, 3, 128, 255])
    np.testing.assert_array_equal(run_op(O.CAST, [(t, x)], [T(U8, (4,), 2.0, 1)])[0], x)


def test_cast_to_float16_rounds_and_overflows():
    x32 = np.array([1.0 + 2**-11, 1.0 + 3 * 2**-11, 65504.0, 65520.0, 1e6, -1e6, 1e-8], np.float32)
    out = run_op(O.CAST, [(T(F32, (7,)), x32)], [T(F16, (7,))])[0]
    np.testing.assert_array_equal(out, onnx_eval("Cast", x32, to=TensorProto.FLOAT16))
    np.testing.assert_array_equal(out, np.array([1.0, 1.0 + 2**-9, 65504, np.inf, np.inf, -np.inf, 0], np.float16))
    xi = np.array([2049, 70000, -70000, 65504], np.int32)
    out = run_op(O.CAST, [(T(I32, (4,)), xi)], [T(F16, (4,))])[0]
    np.testing.assert_array_equal(out, np.array([2048, np.inf, -np.inf, 65504], np.float16))


@pytest.mark.parametrize("code,values", [
    (B8, np.array([[True, False], [False, True]])),
    (S8, np.array([[-128, -1], [0, 127]], np.int8)),
    (SYMM8, np.array([[-127, -1], [0, 127]], np.int8)),
    (U16, np.array([[0, 1], [40000, 65535]], np.uint16)),
    (S16, np.array([[-32768, -1], [0, 32767]], np.int16)),
], ids=lambda v: getattr(v, "name", ""))
def test_cast_identity_types(code, values):
    t = make(code, values.shape, zp=0)
    out = run_op(O.CAST, [(t, values)], [t])[0]
    assert out.dtype == values.dtype
    np.testing.assert_array_equal(out, values)


def assert_bad_data(code, inputs, outputs):
    with pytest.raises(MltsError) as err:
        run_op(code, inputs, outputs)
    assert err.value.code == ResultCode.BAD_DATA
    assert code.name in str(err.value)


def test_cast_validation():
    f = np.zeros((2, 2), np.float32)
    assert_bad_data(O.CAST, [(T(B8, (2, 2)), f.astype(bool))], [T(F32, (2, 2))])
    assert_bad_data(O.CAST, [(T(F32, (2, 2)), f)], [T(B8, (2, 2))])
    assert_bad_data(O.CAST, [(T(S8, (2, 2), 0.5, 0), f.astype(np.int8))], [T(U8, (2, 2), 0.5, 0)])
    assert_bad_data(O.CAST, [(T(F32, (2, 2)), f)], [T(S8, (2, 2), 0.5, 0)])
    assert_bad_data(O.CAST, [(T(F32, (2, 2)), f)] * 2, [T(F16, (2, 2))])
    assert_bad_data(O.CAST, [(T(F32, (2, 2)), f)], [T(F16, (4,))])


# -- QUANTIZE --------------------------------------------------------------------------------------
def plain_quantize(x, scale, zp, lo, hi):
    """NNAPI: clamp(zp + round_half_away(float32(x) / float32(scale))), one Python value at a time."""
    out = []
    for v in np.asarray(x, np.float32).ravel():
        q = float(np.float32(v) / np.float32(scale))
        if math.isnan(q):
            out.append(hi)
            continue
        r = math.floor(abs(q) + 0.5) * (1 if q >= 0 else -1) if math.isfinite(q) else q
        out.append(int(min(max(zp + r, lo), hi)))
    return np.array(out).reshape(np.shape(x))


@pytest.mark.parametrize("src", [F32, F16], ids=lambda c: c.name)
@pytest.mark.parametrize("scale,zp", [(0.1, 128), (0.5, 0), (1 / 3, 17), (0.02, 255)])
def test_quantize_against_onnx_and_plain(src, scale, zp):
    x = np.random.default_rng(3).uniform(-30, 30, (2, 3, 17)).astype(NP_TYPE[src])
    u = run_op(O.QUANTIZE, [(T(src, x.shape), x)], [T(U8, x.shape, scale, zp)])[0]
    assert u.dtype == np.uint8
    np.testing.assert_array_equal(u, plain_quantize(x, scale, zp, 0, 255))
    assert_cts_close(u, onnx_eval("QuantizeLinear", x.astype(np.float32), np.float32(scale), np.uint8(zp)), U8)

    s = run_op(O.QUANTIZE, [(T(src, x.shape), x)], [T(S8, x.shape, scale, zp - 128)])[0]
    assert s.dtype == np.int8
    np.testing.assert_array_equal(s, plain_quantize(x, scale, zp - 128, -128, 127))
    assert_cts_close(s, onnx_eval("QuantizeLinear", x.astype(np.float32), np.float32(scale), np.int8(zp - 128)), S8)
    np.testing.assert_array_equal(s.astype(np.int16) + 128, u.astype(np.int16))


def test_quantize_rounds_halves_away_from_zero_and_saturates():
    x = np.array([0.25, 0.75, -0.25, -0.75, 1.25, 1000.0, -1000.0, np.inf, -np.inf, np.nan], np.float32)
    u = run_op(O.QUANTIZE, [(T(F32, (10,)), x)], [T(U8, (10,), 0.5, 10)])[0]
    np.testing.assert_array_equal(u, [11, 12, 9, 8, 13, 255, 0, 255, 0, 255])
    s = run_op(O.QUANTIZE, [(T(F32, (10,)), x)], [T(S8, (10,), 0.5, 0)])[0]
    np.testing.assert_array_equal(s, [1, 2, -1, -2, 3, 127, -128, 127, -128, 127])


def test_quantize_validation():
    f = np.zeros((2, 2), np.float32)
    assert_bad_data(O.QUANTIZE, [(T(I32, (2, 2)), f.astype(np.int32))], [T(U8, (2, 2), 0.5, 0)])
    assert_bad_data(O.QUANTIZE, [(T(F32, (2, 2)), f)], [T(F32, (2, 2))])
    assert_bad_data(O.QUANTIZE, [(T(F32, (2, 2)), f)], [T(SYMM8, (2, 2), 0.5, 0)])
    assert_bad_data(O.QUANTIZE, [(T(F32, (2, 2)), f)] * 2, [T(U8, (2, 2), 0.5, 0)])


# -- DEQUANTIZE ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dst", [F32, F16], ids=lambda c: c.name)
@pytest.mark.parametrize("src,scale,zp", [(U8, 0.1, 128), (U8, 0.5, 0), (S8, 0.1, 0), (S8, 1 / 3, -100),
                                          (SYMM8, 0.05, 0)], ids=lambda v: getattr(v, "name", str(v)))
def test_dequantize_against_onnx(src, scale, zp, dst):
    lo, hi = (0, 256) if src == U8 else (-128, 128) if src == S8 else (-127, 128)
    q = np.arange(lo, hi, dtype=np.uint8 if src == U8 else np.int8)
    q = np.resize(q, (2, 2, 4, q.size // 16))
    out = run_op(O.DEQUANTIZE, [(T(src, q.shape, scale, zp), q)], [T(dst, q.shape)])[0]
    assert out.dtype == NP_TYPE[dst] and out.shape == q.shape
    zp_np = np.uint8(zp) if src == U8 else np.int8(zp)
    expected = onnx_eval("DequantizeLinear", q, np.float32(scale), zp_np)
    assert_cts_close(out, expected, dst)
    if dst == F16:  # NNAPI computes in float32 and rounds once to float16
        np.testing.assert_array_equal(out, expected.astype(np.float16))


@pytest.mark.parametrize("dst", [F32, F16], ids=lambda c: c.name)
@pytest.mark.parametrize("channel_dim", [0, 1, 3])
def test_dequantize_per_channel_against_onnx(dst, channel_dim):
    shape = [2, 3, 2, 4]
    n = shape[channel_dim]
    scales = tuple(float(s) for s in np.linspace(0.01, 0.5, n).astype(np.float32))
    q = np.random.default_rng(5).integers(-127, 128, shape).astype(np.int8)
    t = T(PC8, shape, 0.0, 0, SymmPerChannelQuantParams(scales, channel_dim))
    out = run_op(O.DEQUANTIZE, [(t, q)], [T(dst, shape)])[0]
    expected = onnx_eval("DequantizeLinear", q, np.array(scales, np.float32), np.zeros(n, np.int8), axis=channel_dim)
    assert_cts_close(out, expected, dst)


def test_dequantize_signed_matches_unsigned():
    u = np.arange(256, dtype=np.uint8).reshape(16, 16)
    s = (u.astype(np.int16) - 128).astype(np.int8)
    out_u = run_op(O.DEQUANTIZE, [(T(U8, u.shape, 0.07, 140), u)], [T(F32, u.shape)])[0]
    out_s = run_op(O.DEQUANTIZE, [(T(S8, s.shape, 0.07, 12), s)], [T(F32, s.shape)])[0]
    np.testing.assert_array_equal(out_s, out_u)


def test_dequantize_validation():
    q = np.zeros((2, 2), np.uint8)
    assert_bad_data(O.DEQUANTIZE, [(T(F32, (2, 2)), q.astype(np.float32))], [T(F32, (2, 2))])
    assert_bad_data(O.DEQUANTIZE, [(T(I32, (2, 2)), q.astype(np.int32))], [T(F32, (2, 2))])
    assert_bad_data(O.DEQUANTIZE, [(T(U8, (2, 2), 0.5, 0), q)], [T(I32, (2, 2))])
    assert_bad_data(O.DEQUANTIZE, [(T(U8, (2, 2), 0.5, 0), q)], [T(U8, (2, 2), 0.5, 0)])
    assert_bad_data(O.DEQUANTIZE, [(T(U8, (1, 1, 1, 2, 2), 0.5, 0), q.reshape(1, 1, 1, 2, 2))],
                    [T(F32, (1, 1, 1, 2, 2))])
    assert_bad_data(O.DEQUANTIZE, [(T(U8, (2, 2), 0.5, 0), q)] * 2, [T(F32, (2, 2))])
