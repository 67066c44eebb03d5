"""HARD_SWISH against independent expectations.

Float: onnx.reference.ReferenceEvaluator HardSwish (x * max(0, min(1, x / 6 + 1 / 2)), the same
function as NNAPI's x * relu6(x + 3) / 6), float16 computed from the same values in float32 and
compared with the float16 CTS tolerance; the AOSP spec example (V1_3/hard_swish.mod.py). Quantized
(uint8 and int8): exact match, over every stored input value, with a plain Python-int transcription
of TFLite's reference integer kernel that NNAPI runs (int16 C semantics throughout), and within one
step of dequantize -> float hard swish -> requantize; the four quantized variants of the AOSP spec.
"""
from __future__ import annotations

import numpy as np
import pytest

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode
from support.int_reference import quantize_multiplier_ref
from support.onnx_reference import onnx_eval
from support.op_runner import Input, inferred_output_types, run_op
from support.tolerance import assert_cts_close

F32, F16, I32 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16, OperandCode.TENSOR_INT32
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
T = OperandType.tensor
OP = OperationCode.HARD_SWISH
RANGE = {U8: (0, 255), S8: (-128, 127)}
DTYPE = {U8: np.uint8, S8: np.int8, F32: np.float32, F16: np.float16}
RNG = np.random.default_rng(23)


def onnx_hard_swish(x):
    return onnx_eval("HardSwish", x)


def hard_swish(code, t_in, x, t_out):
    return run_op(code, [(t_in, x)], [t_out])[0]


# -- float ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("shape", [(7,), (2, 3, 4), (1, 2, 2, 2, 5)], ids=str)
def test_float_against_onnx(ftype, shape):
    x = RNG.uniform(-8, 8, shape).astype(DTYPE[ftype])
    x.flat[:4] = [-3.0, 3.0, 0.0, -1.5]  # the kinks and a point in between
    out = hard_swish(OP, T(ftype, shape), x, T(ftype, shape))
    assert out.dtype == DTYPE[ftype] and out.shape == shape
    assert_cts_close(out, onnx_hard_swish(x.astype(np.float32)), ftype)


AOSP_INPUT = [4.53125, 3.90625, 3.046875, -8.59375, -1.328125, 1.328125, 0.0, -8.515625, -8.984375, -0.234375,
              0.859375, 9.84375, -0.15625, -8.515625, 8.671875, 4.609375, 9.21875, -1.796875, 1.171875, 9.375,
              -8.75, 2.421875, -8.125, -1.09375, -9.609375, -1.015625, -9.84375, 2.578125, 4.921875, -5.078125,
              5.0, -0.859375, 1.953125, -6.640625, -7.8125, 4.453125, -4.453125, -6.875, 0.78125, 0.859375]
AOSP_OUTPUT = [4.53125, 3.90625, 3.046875, 0.0, -0.3700765, 0.9580485, 0.0, 0.0, 0.0, -0.1080322, 0.5527751,
               9.84375, -0.074056, 0.0, 8.671875, 4.609375, 9.21875, -0.3603109, 0.8148193, 9.375, 0.0, 2.1885173,
               0.0, -0.3474935, 0.0, -0.3358968, 0.0, 2.3968506, 4.921875, 0.0, 5.0, -0.3065999, 1.6123454, 0.0,
               0.0, 4.453125, 0.0, 0.0, 0.4923503, 0.5527751]


@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("shape", [(40,), (1, 2, 2, 2, 5)], ids=["simple", "5d_input"])
def test_aosp_spec_float_example(ftype, shape):
    """V1_3/hard_swish.mod.py, "simple" and "5d_input"."""
    x = np.array(AOSP_INPUT, DTYPE[ftype]).reshape(shape)
    out = hard_swish(OP, T(ftype, shape), x, T(ftype, shape))
    assert_cts_close(out, np.array(AOSP_OUTPUT).reshape(shape), ftype)


def test_float_special_values_without_warnings():
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 3e38], np.float32)
    with np.errstate(all="raise"):
        out = hard_swish(OP, T(F32, (5,)), x, T(F32, (5,)))
    np.testing.assert_array_equal(out, np.array([np.nan, np.inf, np.nan, -0.0, 3e38], np.float32))


# -- quantized: a plain transcription of the integer kernel ------------------------------------------
def to_int16(v: int) -> int:
    return (v + 2**15) % 2**16 - 2**15


def c_div(a: int, b: int) -> int:
    """C integer division (toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def srdhm16(a: int, b: int) -> int:
    if a == b == -2**15:
        return 2**15 - 1
    ab = a * b
    return to_int16(c_div(ab + (2**14 if ab >= 0 else 1 - 2**14), 2**15))


def sdhm16(a: int, b: int) -> int:
    if a == b == -2**15:
        return 2**15 - 1
    return to_int16(c_div(a * b, 2**15))


def saturating_left_shift16(v: int, amount: int) -> int:
    return min(max(v * 2**amount, -2**15), 2**15 - 1)


def rdbp16(x: int, e: int) -> int:
    """gemmlowp RoundingDivideByPOT on int16: the mask is an int16 too."""
    mask = to_int16((1 << e) - 1)
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return to_int16((x >> e) + (1 if (x & mask) > threshold else 0))


def int16_multiplier(m32: int) -> int:
    return 2**15 - 1 if m32 >= 2**31 - 1 - 2**15 else (m32 + 2**15) >> 16


def kernel_ref(q: int, qi, qo, qtype) -> int:
    (si, zi), (so, zo) = qi, qo
    f = np.float32
    hires_scale = f(1.0 / 128.0) * f(si)
    out_m, out_e = quantize_multiplier_ref(float(hires_scale / f(so)))
    rel_m, rel_e = quantize_multiplier_ref(float(hires_scale / (f(3.0) / f(32768.0))))
    out_m, rel_m = int16_multiplier(out_m), int16_multiplier(rel_m)
    hires = (q - zi) * 128
    preshift = srdhm16(hires, out_m)
    reluish = hires
    if rel_e > 0:
        reluish = saturating_left_shift16(reluish, rel_e - 1)
    reluish = srdhm16(reluish, rel_m)
    if rel_e > 0:
        reluish = saturating_left_shift16(reluish, 1)
    if rel_e < 0:
        reluish = rdbp16(reluish, -rel_e)
    reluish = (reluish + 2**15) >> 1
    value = to_int16(rdbp16(sdhm16(reluish, preshift), -out_e) + zo)
    lo, hi = RANGE[qtype]
    return min(max(value, lo), hi)


def float_requant(q, qi, qo, qtype):
    x = (q.astype(np.float64) - qi[1]) * qi[0]
    y = x * np.clip(x + 3, 0, 6) / 6
    return np.clip(np.round(y / qo[0]) + qo[1], *RANGE[qtype])


QUANT_PARAMS = {  # (input, output) as (scale, unsigned zero point)
    "aosp": ((0.078125, 128), (0.078125, 128)),
    "aosp_overflow": ((0.078125, 128), (0.03125, 0)),
    "mobilenet": ((0.0235, 110), (0.0214, 15)),
    "fine_in": ((0.004, 128), (0.003, 60)),       # relu-ish exponent < 0: a rounding right shift
    "coarse_in": ((0.6, 140), (0.5, 10)),         # relu-ish exponent > 0 and saturation
    "coarse_out": ((0.05, 128), (0.4, 3)),
}


@pytest.mark.parametrize("qtype", [U8, S8], ids=["u8", "s8"])
@pytest.mark.parametrize("params", list(QUANT_PARAMS), ids=str)
def test_quant_against_integer_reference(qtype, params):
    shift = 0 if qtype == U8 else 128
    qi, qo = ((s, z - shift) for s, z in QUANT_PARAMS[params])
    lo, hi = RANGE[qtype]
    q = np.arange(lo, hi + 1).astype(DTYPE[qtype]).reshape(4, 8, 8)  # every stored value
    out = hard_swish(OP, T(qtype, q.shape, *qi), q, T(qtype, q.shape, *qo))
    assert out.dtype == DTYPE[qtype] and out.shape == q.shape
    expected = np.array([kernel_ref(v, qi, qo, qtype) for v in q.ravel().tolist()]).reshape(q.shape)
    np.testing.assert_array_equal(out, expected)
    assert_cts_close(out, float_requant(q, qi, qo, qtype), qtype)


def test_quant_signed_and_unsigned_agree_up_to_offset():
    qi, qo = QUANT_PARAMS["mobilenet"]
    q = np.arange(256)
    u = hard_swish(OP, T(U8, (256,), *qi), q.astype(np.uint8), T(U8, (256,), *qo))
    s = hard_swish(OP, T(S8, (256,), qi[0], qi[1] - 128), (q - 128).astype(np.int8),
                   T(S8, (256,), qo[0], qo[1] - 128))
    np.testing.assert_array_equal(s.astype(int) + 128, u.astype(int))


def test_quant_very_coarse_output_follows_int16_rounding_shift():
    """Output scale > 512 x input scale: the final rounding shift is 16 bits or more, where the kernel's
    int16 mask wraps to -1; every output lands within one step of the zero point."""
    qi, qo = (0.01, 128), (10.0, 100)
    q = np.arange(256).astype(np.uint8)
    out = hard_swish(OP, T(U8, (256,), *qi), q, T(U8, (256,), *qo))
    np.testing.assert_array_equal(out, [kernel_ref(v, qi, qo, U8) for v in range(256)])
    assert_cts_close(out, float_requant(q, qi, qo, U8), U8)


def test_quant_output_zero_point_is_added_in_int16():
    """With no final shift (output scale just above input scale / 128) the kernel adds the output zero
    point to an int16 that may already be near 32767: the sum wraps around, and the largest input
    (255: 32537 + 255 = 32792 -> -32744) comes out at the bottom of the range."""
    qi, qo = (1.0, 0), (1.0 / 127.6, 255)
    q = np.arange(250, 256).astype(np.uint8)
    out = hard_swish(OP, T(U8, (6,), *qi), q, T(U8, (6,), *qo))
    np.testing.assert_array_equal(out, [255, 255, 255, 255, 255, 0])
    np.testing.assert_array_equal(out, [kernel_ref(v, qi, qo, U8) for v in range(250, 256)])


@pytest.mark.parametrize("qtype", [U8, S8], ids=["u8", "s8"])
@pytest.mark.parametrize("params", ["aosp", "aosp_overflow"])
def test_aosp_spec_quant_examples(qtype, params):
    """V1_3/hard_swish.mod.py quant8 / quant8_signed and their "overflow" variants (CTS: one step)."""
    shift = 0 if qtype == U8 else 128
    (si, zi), (so, zo) = ((s, z - shift) for s, z in QUANT_PARAMS[params])
    lo, hi = RANGE[qtype]

    def quantize(v, s, z):
        return np.clip(np.round(np.array(v) / s) + z, lo, hi).astype(DTYPE[qtype])

    out = hard_swish(OP, T(qtype, (40,), si, zi), quantize(AOSP_INPUT, si, zi), T(qtype, (40,), so, zo))
    assert_cts_close(out, quantize(AOSP_OUTPUT, so, zo), qtype)


def test_quant_output_scale_too_fine_fails_the_execution():
    """NNAPI requires input scale / (128 x output scale) < 1; otherwise the kernel fails (OP_FAILED)."""
    q = np.arange(4).astype(np.uint8)
    with pytest.raises(MltsError) as err:
        hard_swish(OP, T(U8, (4,), 1.0, 0), q, T(U8, (4,), 1.0 / 128, 0))
    assert err.value.code == ResultCode.OP_FAILED
    assert "HARD_SWISH" in str(err.value) and "output 0" in str(err.value)
    # Just below the limit works.
    out = hard_swish(OP, T(U8, (4,), 1.0, 0), q, T(U8, (4,), 1.0 / 127, 0))
    np.testing.assert_array_equal(out, [kernel_ref(v, (1.0, 0), (1.0 / 127, 0), U8) for v in range(4)])


# -- shapes and validation ----------------------------------------------------------------------------
def test_shape_inference():
    (y,) = inferred_output_types(OP, [(T(F32, (2, 3, 4, 5, 6)), Input())], [T(F32, (0, 0, 0, 0, 0))])
    assert y.dimensions == (2, 3, 4, 5, 6)


def assert_bad_data(inputs, outputs, *words):
    with pytest.raises(MltsError) as err:
        run_op(OP, inputs, outputs)
    assert err.value.code == ResultCode.BAD_DATA
    assert "HARD_SWISH" in str(err.value)
    for w in words:
        assert w in str(err.value)


def test_validation():
    tf = T(F32, (2, 2))
    F = np.zeros((2, 2), np.float32)
    assert_bad_data([(tf, F), (tf, F)], [tf], "expected 1 inputs")
    assert_bad_data([(T(I32, (2, 2)), F.astype(np.int32))], [T(I32, (2, 2))], "input 0", "TENSOR_INT32")
    assert_bad_data([(tf, F)], [T(F16, (2, 2))], "output 0")
    assert_bad_data([(T(U8, (2, 2), 0.5, 0), F.astype(np.uint8))], [T(S8, (2, 2), 0.5, 0)], "output 0")
    assert_bad_data([(tf, F)], [T(F32, (2, 3))], "[2, 2]")
