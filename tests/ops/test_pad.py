"""PAD and PAD_V2 through the public API (run_op on nnapi-reference).

Float results against onnx.reference Pad (constant mode); quantized results against a plain fill-and-copy
(PAD fills with the zero point, i.e. real 0; PAD_V2 with the given raw quantized value).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from support.op_runner import Const, expect_error, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import OperandCode, OperandType, OperationCode

F32 = OperandCode.TENSOR_FLOAT32
F16 = OperandCode.TENSOR_FLOAT16
U8 = OperandCode.TENSOR_QUANT8_ASYMM
S8 = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
I32 = OperandCode.TENSOR_INT32
PAD, PAD_V2 = OperationCode.PAD, OperationCode.PAD_V2

rng = np.random.default_rng(5)


def onnx_pad(x, paddings, value=0.0):
    paddings = np.asarray(paddings, dtype=np.int64)
    inits = [numpy_helper.from_array(np.concatenate([paddings[:, 0], paddings[:, 1]]), "pads"),
             numpy_helper.from_array(np.array(value, dtype=np.float32), "value")]
    node = helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode="constant")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ReferenceEvaluator(model).run(None, {"x": x.astype(np.float32)})[0]


def paddings_in(p, const=True):
    p = np.asarray(p, dtype=np.int32)
    return (OperandType.tensor(I32, p.shape), Const(p) if const else p)


def out_shape(shape, paddings):
    return tuple(b + s + a for s, (b, a) in zip(shape, paddings))


CASES = [((5,), [[2, 1]]), ((2, 3), [[0, 1], [2, 0]]), ((2, 3, 4), [[1, 1], [0, 0], [3, 2]]),
         ((1, 4, 4, 3), [[0, 0], [1, 2], [2, 1], [0, 0]]), ((1, 2, 2, 1), [[1, 0], [0, 0], [0, 3], [2, 2]])]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
def test_pad_float_against_onnx(case, code):
    shape, paddings = CASES[case]
    t = OperandType.tensor(code, shape)
    x = rng.standard_normal(shape).astype(t.dtype)
    expected = onnx_pad(x, paddings)
    (y,) = run_op(PAD, [(t, x), paddings_in(paddings)], [OperandType.tensor(code, expected.shape)])
    assert y.dtype == t.dtype
    assert_cts_close(y, expected, code)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # inf - inf in the tolerance check
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("code, value", [(F32, 1.5), (F32, -np.inf), (F16, -2.25)], ids=["f32", "f32-inf", "f16"])
def test_pad_v2_float_against_onnx(case, code, value):
    shape, paddings = CASES[case]
    t = OperandType.tensor(code, shape)
    x = rng.standard_normal(shape).astype(t.dtype)
    expected = onnx_pad(x, paddings, value)
    scalar = OperandType.scalar(OperandCode.FLOAT32 if code == F32 else OperandCode.FLOAT16)
    (y,) = run_op(PAD_V2, [(t, x), paddings_in(paddings), (scalar, value)], [OperandType.tensor(code, expected.shape)])
    assert_cts_close(y, expected, code)


def plain_pad(q, paddings, fill):
    out = np.full(out_shape(q.shape, paddings), fill, dtype=np.int64)
    out[tuple(slice(b, b + s) for s, (b, _) in zip(q.shape, paddings))] = q
    return out


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("code", [U8, S8], ids=["u8", "s8"])
def test_pad_quant8_fills_with_zero_point(case, code):
    shape, paddings = CASES[case]
    zp = 37 if code == U8 else -90
    t = OperandType.tensor(code, shape, 0.2, zp)
    lo, hi = (0, 255) if code == U8 else (-128, 127)
    q = rng.integers(lo, hi + 1, size=shape).astype(t.dtype)
    (y,) = run_op(PAD, [(t, q), paddings_in(paddings)], [OperandType.tensor(code, out_shape(shape, paddings), 0.2, zp)])
    np.testing.assert_array_equal(y.astype(np.int64), plain_pad(q, paddings, zp))
    # The padding is real zero.
    real = (y.astype(np.float64) - zp) * 0.2
    assert (real == 0).sum() >= y.size - q.size


@pytest.mark.parametrize("code, value", [(U8, 0), (U8, 255), (U8, 17), (S8, -128), (S8, 100)])
def test_pad_v2_quant8_fills_with_raw_value(code, value):
    shape, paddings = CASES[3]
    t = OperandType.tensor(code, shape, 0.5, 3)
    lo, hi = (0, 255) if code == U8 else (-128, 127)
    q = rng.integers(lo, hi + 1, size=shape).astype(t.dtype)
    (y,) = run_op(PAD_V2, [(t, q), paddings_in(paddings), (OperandType.scalar(OperandCode.INT32), value)],
                  [OperandType.tensor(code, out_shape(shape, paddings), 0.5, 3)])
    np.testing.assert_array_equal(y.astype(np.int64), plain_pad(q, paddings, value))


def test_paddings_as_model_input():
    x = rng.standard_normal((2, 3)).astype(np.float32)
    (y,) = run_op(PAD, [(OperandType.tensor(F32, x.shape), x), paddings_in([[1, 0], [0, 2]], const=False)],
                  [OperandType.tensor(F32, (0, 0))])
    assert_cts_close(y, onnx_pad(x, [[1, 0], [0, 2]]), F32)


def test_pad_signed_and_unsigned_agree_up_to_offset():
    shape, paddings = CASES[2]
    qu = rng.integers(0, 256, size=shape)
    outs = []
    for code, shift in ((U8, 0), (S8, 128)):
        t = OperandType.tensor(code, shape, 0.1, 140 - shift)
        (y,) = run_op(PAD, [(t, (qu - shift).astype(t.dtype)), paddings_in(paddings)],
                      [OperandType.tensor(code, out_shape(shape, paddings), 0.1, 140 - shift)])
        outs.append(y.astype(np.int64) + shift)
    np.testing.assert_array_equal(outs[0], outs[1])


# -- validation -------------------------------------------------------------------------------------
def f32(shape):
    return (OperandType.tensor(F32, shape), np.zeros(shape, np.float32))


def test_rejects_wrong_paddings_shape():
    expect_error(PAD, [f32((2, 3)), paddings_in([[1, 1, 1], [0, 0, 0]])], [OperandType.tensor(F32, (4, 3))],
                    "paddings")
    expect_error(PAD, [f32((2, 3)), paddings_in([[1, 1]])], [OperandType.tensor(F32, (4, 3))], "[2, 2]")
    expect_error(PAD, [f32((2, 3)), paddings_in([1, 1, 0, 0])], [OperandType.tensor(F32, (4, 3))], "2-D")


def test_rejects_negative_paddings():
    expect_error(PAD, [f32((2, 3)), paddings_in([[1, 1], [0, -1]])], [OperandType.tensor(F32, (4, 2))], ">= 0")


def test_rejects_bad_pad_values_and_counts():
    scalar_i = OperandType.scalar(OperandCode.INT32)
    expect_error(PAD_V2, [f32((2, 3)), paddings_in([[1, 1], [0, 0]]), (scalar_i, 0)],
                    [OperandType.tensor(F32, (4, 3))], "INT32")
    q = (OperandType.tensor(U8, (2, 3), 0.5, 3), np.zeros((2, 3), np.uint8))
    expect_error(PAD_V2, [q, paddings_in([[1, 1], [0, 0]]), (scalar_i, 300)],
                    [OperandType.tensor(U8, (4, 3), 0.5, 3)], "300")
    expect_error(PAD_V2, [f32((2, 3)), paddings_in([[1, 1], [0, 0]])], [OperandType.tensor(F32, (4, 3))], "inputs")
    expect_error(PAD, [f32((1, 1, 1, 1, 1)), paddings_in([[0, 0]] * 5)], [OperandType.tensor(F32, (1,) * 5)],
                    "rank")


def test_rejects_changed_quantization():
    q = (OperandType.tensor(U8, (2, 3), 0.5, 3), np.zeros((2, 3), np.uint8))
    expect_error(PAD, [q, paddings_in([[1, 1], [0, 0]])], [OperandType.tensor(U8, (4, 3), 0.5, 4)], "zp")
