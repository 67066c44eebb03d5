"""LOG_SOFTMAX against independent expectations: onnx.reference LogSoftmax(axis) on beta * x (ONNX has
no beta), numpy's log of the documented softmax for extreme values, and the examples of AOSP's
V1_2/log_softmax.mod.py (cited)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from support.op_runner import Input, inferred_output_types, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

OP = OperationCode.LOG_SOFTMAX
F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
T = OperandType.tensor
INT = OperandType.scalar(OperandCode.INT32)
BETA = {F32: OperandType.scalar(OperandCode.FLOAT32), F16: OperandType.scalar(OperandCode.FLOAT16)}
RNG = np.random.default_rng(77)


def log_softmax(ftype, x, beta, axis, beta_type=None, out_type=None):
    inputs = [(T(ftype, x.shape), x), (beta_type or BETA[ftype], beta), (INT, axis)]
    return run_op(OP, inputs, [out_type or T(ftype, x.shape)])[0]


def onnx_log_softmax(x, beta, axis):
    x = np.asarray(x, np.float64) * beta
    graph = helper.make_graph([helper.make_node("LogSoftmax", ["x"], ["y"], axis=axis)], "g",
                              [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
                              [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("shape,axis", [((6,), 0), ((6,), -1), ((2, 5), 0), ((2, 5), -1), ((2, 3, 4), 1),
                                        ((2, 3, 4), -3), ((2, 2, 3, 3), 3), ((2, 2, 3, 3), -2),
                                        ((1, 2, 1, 3, 4), 4), ((2, 1, 3, 1, 2), -5)])
@pytest.mark.parametrize("beta", [1.0, 0.3, 2.5])
def test_float_against_onnx(ftype, shape, axis, beta):
    x = RNG.uniform(-4, 4, shape).astype(np.float16 if ftype == F16 else np.float32)
    out = log_softmax(ftype, x, beta, axis)
    assert out.dtype == x.dtype and out.shape == x.shape
    assert_cts_close(out, onnx_log_softmax(x, beta, axis), ftype)


@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
def test_large_and_equal_values_are_stable(ftype):
    dtype = np.float16 if ftype == F16 else np.float32
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1000.0, -1000.0], [30000.0, 0.0, -30000.0]], dtype)
    out = log_softmax(ftype, x, 1.0, -1)
    assert np.isfinite(out.astype(np.float64)).all()
    # log(softmax) from NNAPI's formula, evaluated where it cannot overflow: (x - max) - log(sum(exp(x - max)))
    shifted = x.astype(np.float64) - x.astype(np.float64).max(axis=-1, keepdims=True)
    assert_cts_close(out, shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True)), ftype)
    np.testing.assert_allclose(out[1].astype(np.float64), np.full(3, -np.log(3.0)), rtol=1e-3)


@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
def test_aosp_spec_examples(ftype):
    # V1_2/log_softmax.mod.py: four models, rank 5, axis given positive and negative, beta 1 and 10
    dtype = np.float16 if ftype == F16 else np.float32
    first = [-4.14297, -10.14297, -2.14297, -.142971, -7.00104, -12.00104, -.00104087, -9.00104]
    second = [-.00247565, -6.00247, -2.12692, -.126928, -.00671534, -5.00671, -.000123374, -9.00012]
    cases = [((1, 1, 1, 2, 4), [0, -6, 2, 4, 3, -2, 10, 1], 1.0, 4, first),
             ((1, 1, 1, 4, 2), [0, -6, 2, 4, 3, -2, 10, 1], 1.0, -1, second),
             ((1, 1, 2, 4, 1), [0, 2, 3, 10, -6, 4, -2, 1], 1.0, -3,
              [-.00247565, -2.12692, -.00671534, -.000123374, -6.00247, -.126928, -5.00671, -9.00012]),
             ((1, 1, 1, 2, 4), [0, -.6, .2, .4, .3, -.2, 1, .1], 10.0, 4, first)]
    for shape, x, beta, axis, y in cases:
        out = log_softmax(ftype, np.array(x, dtype).reshape(shape), beta, axis)
        assert_cts_close(out, np.array(y).reshape(shape), ftype)


def test_unknown_dims():
    x = RNG.uniform(-2, 2, (3, 4)).astype(np.float32)
    out = run_op(OP, [(T(F32, (0, 0)), x), (BETA[F32], 1.0), (INT, 0)], [T(F32, (0, 0))])[0]
    assert_cts_close(out, onnx_log_softmax(x, 1.0, 0), F32)
    (out_type,) = inferred_output_types(OP, [(T(F32, (3, 4)), Input()), (BETA[F32], 1.0), (INT, -1)], [T(F32, (0, 0))])
    assert out_type.dimensions == (3, 4)


def assert_bad_data(inputs, outputs, *words):
    with pytest.raises(MltsError) as err:
        run_op(OP, inputs, outputs)
    assert err.value.code == ResultCode.BAD_DATA
    message = str(err.value)
    assert "LOG_SOFTMAX" in message
    for word in words:
        assert word in message, message


X = np.zeros((2, 4), np.float32)
TX = T(F32, X.shape)


def test_rejects_bad_beta():
    assert_bad_data([(TX, X), (BETA[F32], 0.0), (INT, -1)], [TX], "input 1", "beta must be positive")
    assert_bad_data([(TX, X), (BETA[F32], -1.0), (INT, -1)], [TX], "input 1", "beta must be positive")
    assert_bad_data([(TX, X), (BETA[F16], 1.0), (INT, -1)], [TX], "input 1", "FLOAT32")
    x16 = X.astype(np.float16)
    assert_bad_data([(T(F16, X.shape), x16), (BETA[F32], 1.0), (INT, -1)], [T(F16, X.shape)], "input 1", "FLOAT16")


def test_rejects_bad_axis_counts_and_types():
    assert_bad_data([(TX, X), (BETA[F32], 1.0), (INT, 2)], [TX], "input 2", "axis 2 out of range")
    assert_bad_data([(TX, X), (BETA[F32], 1.0), (INT, -3)], [TX], "input 2", "out of range")
    assert_bad_data([(TX, X), (BETA[F32], 1.0)], [TX], "expected 3 inputs")
    assert_bad_data([(TX, X), (BETA[F32], 1.0), (BETA[F32], 1.0)], [TX], "input 2", "INT32")
    assert_bad_data([(TX, X), (BETA[F32], 1.0), (INT, -1)], [T(F16, X.shape)], "output 0")
    assert_bad_data([(TX, X), (BETA[F32], 1.0), (INT, -1)], [T(F32, (2, 5))], "output 0", "do not match")
    q = np.zeros(X.shape, np.uint8)
    u8 = T(OperandCode.TENSOR_QUANT8_ASYMM, X.shape, 0.1, 0)
    assert_bad_data([(u8, q), (BETA[F32], 1.0), (INT, -1)], [u8], "input 0", "not allowed")
