"""CONCATENATION through the public API (run_op on nnapi-reference).

Float32 against onnx.reference Concat; float16 and same-parameter quantized inputs bit-exact; quantized
inputs with their own scale/zero point against a plain per-value requantization (within one step),
and the signed variant against the unsigned one.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from support.op_runner import Const, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

F32 = OperandCode.TENSOR_FLOAT32
F16 = OperandCode.TENSOR_FLOAT16
U8 = OperandCode.TENSOR_QUANT8_ASYMM
S8 = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
CONCAT = OperationCode.CONCATENATION

rng = np.random.default_rng(99)


def onnx_concat(arrays, axis):
    names = [f"x{i}" for i in range(len(arrays))]
    node = helper.make_node("Concat", names, ["y"], axis=axis)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ReferenceEvaluator(model).run(None, {n: a.astype(np.float32) for n, a in zip(names, arrays)})[0]


def axis_scalar(axis):
    return (OperandType.scalar(OperandCode.INT32), axis)


def shapes_for(base, axis, sizes):
    out = []
    for s in sizes:
        shape = list(base)
        shape[axis] = s
        out.append(tuple(shape))
    return out


CASES = [((5,), 0, [2, 3]), ((2, 3), 0, [1, 2, 3]), ((2, 3), 1, [4, 1]), ((2, 3, 4), 1, [2, 2, 1]),
         ((1, 4, 4, 3), 3, [3, 8]), ((2, 2, 3, 2), 2, [1, 3]), ((2, 2, 3, 2), 0, [1, 1, 2])]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
def test_float_against_onnx(case, code):
    base, axis, sizes = CASES[case]
    dtype = np.float32 if code == F32 else np.float16
    parts = [rng.standard_normal(s).astype(dtype) for s in shapes_for(base, axis, sizes)]
    expected = onnx_concat(parts, axis)
    inputs = [(OperandType.tensor(code, p.shape), p if i else Const(p)) for i, p in enumerate(parts)]
    (y,) = run_op(CONCAT, inputs + [axis_scalar(axis)], [OperandType.tensor(code, expected.shape)])
    assert y.dtype == dtype and y.shape == expected.shape
    if code == F32:
        assert_cts_close(y, expected, code)
    else:
        np.testing.assert_array_equal(y, expected.astype(np.float16))


def test_single_input():
    x = rng.standard_normal((2, 3)).astype(np.float32)
    (y,) = run_op(CONCAT, [(OperandType.tensor(F32, x.shape), x), axis_scalar(1)], [OperandType.tensor(F32, x.shape)])
    np.testing.assert_array_equal(y, x)


def plain_requantize(q, s_in, zp_in, s_out, zp_out, qmin, qmax):
    out = []
    for v in q.ravel().tolist():
        r = (v - zp_in) * s_in / s_out
        rounded = int(np.floor(abs(r) + 0.5)) * (1 if r >= 0 else -1)
        out.append(min(max(rounded + zp_out, qmin), qmax))
    return np.array(out, dtype=np.int64).reshape(q.shape)


@pytest.mark.parametrize("code", [U8, S8], ids=["u8", "s8"])
def test_quant8_same_parameters_is_exact(code):
    lo, hi = (0, 255) if code == U8 else (-128, 127)
    t = dict(scale=0.5, zero_point=7)
    parts = [rng.integers(lo, hi + 1, size=s).astype(OperandType.tensor(code, s).dtype)
             for s in shapes_for((2, 3, 4), 2, [4, 1, 2])]
    inputs = [(OperandType.tensor(code, p.shape, **t), p) for p in parts]
    (y,) = run_op(CONCAT, inputs + [axis_scalar(2)], [OperandType.tensor(code, (2, 3, 7), **t)])
    np.testing.assert_array_equal(y, np.concatenate(parts, axis=2))


QPARAMS = [(0.5, 10), (0.25, 200), (1.0 / 3.0, 128), (0.75, 0)]   # unsigned; the signed case shifts zp by -128


@pytest.mark.parametrize("code", [U8, S8], ids=["u8", "s8"])
@pytest.mark.parametrize("out_params", [(0.5, 10), (0.3, 100), (1.1, 3)])
def test_quant8_inputs_requantized_to_output(code, out_params):
    shift = 128 if code == S8 else 0
    qmin, qmax = -shift, 255 - shift
    shapes = shapes_for((2, 5, 3), 1, [5, 2, 3, 4])
    parts = [rng.integers(qmin, qmax + 1, size=s) for s in shapes]
    s_out, zp_out = out_params[0], out_params[1] - shift
    inputs = [(OperandType.tensor(code, p.shape, s, zp - shift), p.astype(OperandType.tensor(code, ()).dtype))
              for p, (s, zp) in zip(parts, QPARAMS)]
    (y,) = run_op(CONCAT, inputs + [axis_scalar(1)], [OperandType.tensor(code, (2, 14, 3), s_out, zp_out)])
    expected = np.concatenate([plain_requantize(p, s, zp - shift, s_out, zp_out, qmin, qmax)
                               for p, (s, zp) in zip(parts, QPARAMS)], axis=1)
    assert_cts_close(y, expected, code)
    # Inputs whose parameters equal the output's are copied untouched.
    if out_params == (0.5, 10):
        np.testing.assert_array_equal(y[:, :5, :], parts[0])


def test_signed_and_unsigned_agree_up_to_offset():
    shapes = shapes_for((3, 4), 0, [3, 2])
    parts = [rng.integers(0, 256, size=s) for s in shapes]
    outs = []
    for code, shift in ((U8, 0), (S8, 128)):
        inputs = [(OperandType.tensor(code, p.shape, s, zp - shift),
                   (p - shift).astype(OperandType.tensor(code, ()).dtype)) for p, (s, zp) in zip(parts, QPARAMS)]
        (y,) = run_op(CONCAT, inputs + [axis_scalar(0)], [OperandType.tensor(code, (5, 4), 0.4, 90 - shift)])
        outs.append(y.astype(np.int64) + shift)
    np.testing.assert_array_equal(outs[0], outs[1])


# -- validation -------------------------------------------------------------------------------------
def expect_bad_data(inputs, outputs, *words):
    with pytest.raises(MltsError) as info:
        run_op(CONCAT, inputs, outputs)
    assert info.value.code == ResultCode.BAD_DATA
    assert "CONCATENATION" in str(info.value)
    for w in words:
        assert w in str(info.value)


def f32(shape):
    return (OperandType.tensor(F32, shape), np.zeros(shape, np.float32))


def test_rejects_axis_out_of_range():
    expect_bad_data([f32((2, 3)), f32((2, 3)), axis_scalar(2)], [OperandType.tensor(F32, (2, 6))], "axis")
    expect_bad_data([f32((2, 3)), f32((2, 3)), axis_scalar(-1)], [OperandType.tensor(F32, (2, 6))], "axis")


def test_rejects_mismatched_shapes_and_ranks():
    expect_bad_data([f32((2, 3)), f32((3, 3)), axis_scalar(1)], [OperandType.tensor(F32, (2, 6))], "input 1")
    expect_bad_data([f32((2, 3)), f32((2, 3, 1)), axis_scalar(0)], [OperandType.tensor(F32, (4, 3))], "rank")
    expect_bad_data([f32((1, 1, 1, 1, 2)), f32((1, 1, 1, 1, 2)), axis_scalar(0)],
                    [OperandType.tensor(F32, (2, 1, 1, 1, 2))], "rank")


def test_rejects_wrong_counts_and_types():
    expect_bad_data([axis_scalar(0)], [OperandType.tensor(F32, (2,))], "inputs")
    f16 = (OperandType.tensor(F16, (2, 3)), np.zeros((2, 3), np.float16))
    expect_bad_data([f32((2, 3)), f16, axis_scalar(0)], [OperandType.tensor(F32, (4, 3))], "TENSOR_FLOAT16")
    expect_bad_data([f32((2, 3)), f32((2, 3)), (OperandType.scalar(OperandCode.FLOAT32), 0.0)],
                    [OperandType.tensor(F32, (4, 3))], "FLOAT32")
    expect_bad_data([f32((2, 3)), f32((2, 3)), axis_scalar(0)], [OperandType.tensor(F16, (4, 3))], "output")
