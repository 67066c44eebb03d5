"""RESHAPE, SQUEEZE, TRANSPOSE through the public API (run_op on nnapi-reference).

Float results are checked against onnx.reference (Reshape, Squeeze, Transpose); these operations only
move data, so every other type (float16, both 8-bit quantized types, int32 for RESHAPE) must come
back bit-exact, with the input's quantization kept.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from support import op_data
from support.onnx_reference import onnx_eval
from support.op_data import int_vec
from support.op_runner import expect_error, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import OperandCode, OperandType, OperationCode

F32 = OperandCode.TENSOR_FLOAT32
F16 = OperandCode.TENSOR_FLOAT16
U8 = OperandCode.TENSOR_QUANT8_ASYMM
S8 = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
I32 = OperandCode.TENSOR_INT32
QUANT = {U8: (0.5, 120), S8: (0.25, -3)}

rng = np.random.default_rng(77)
tensor_type = partial(op_data.tensor_type, quant=QUANT)
random_data = partial(op_data.random_data, rng)


def check_movement(code, x, y, expected_f32):
    """Float32 against ONNX within CTS tolerance; everything else bit-exact against the same movement."""
    assert y.dtype == x.dtype
    if code == F32:
        assert_cts_close(y, expected_f32, code)
    else:
        np.testing.assert_array_equal(y, expected_f32.astype(np.float64).astype(x.dtype)
                                      if code == F16 else expected_f32.astype(np.int64))


# -- RESHAPE ----------------------------------------------------------------------------------------
RESHAPE_CASES = [((2, 3, 4), (4, 6)), ((2, 3, 4), (-1, 2)), ((1, 2, 2, 3), (3, -1, 1, 2)), ((6,), (1, 1, 6)),
                 ((2, 3, 1, 2), (-1,))]


@pytest.mark.parametrize("code", [F32, F16, U8, S8, I32], ids=["f32", "f16", "u8", "s8", "i32"])
@pytest.mark.parametrize("case", range(len(RESHAPE_CASES)))
def test_reshape_against_onnx(code, case):
    shape, target = RESHAPE_CASES[case]
    x = random_data(code, shape)
    expected = onnx_eval("Reshape", x.astype(np.float32), np.array(target, np.int64), opset=18)
    (y,) = run_op(OperationCode.RESHAPE, [(tensor_type(code, shape), x), int_vec(target)],
                  [tensor_type(code, expected.shape)])
    assert y.shape == expected.shape
    check_movement(code, x, y, expected)


def test_reshape_with_shape_as_model_input():
    x = random_data(F32, (2, 6))
    (y,) = run_op(OperationCode.RESHAPE, [(tensor_type(F32, x.shape), x), int_vec([3, -1], const=False)],
                  [OperandType.tensor(F32, (0, 0))])
    np.testing.assert_array_equal(y, x.reshape(3, 4))


# -- SQUEEZE ----------------------------------------------------------------------------------------
SQUEEZE_CASES = [((1, 3, 1, 2), [0]), ((1, 3, 1, 2), [-2, 0]), ((1, 3, 1, 2), None), ((2, 1, 4), [1, 1]),
                 ((1, 1, 1), None), ((2, 3), None)]


@pytest.mark.parametrize("code", [F32, F16, U8, S8], ids=["f32", "f16", "u8", "s8"])
@pytest.mark.parametrize("case", range(len(SQUEEZE_CASES)))
def test_squeeze_against_onnx(code, case):
    shape, axes = SQUEEZE_CASES[case]
    x = random_data(code, shape)
    onnx_axes = [np.array(sorted(set(axes)), np.int64)] if axes is not None else []
    expected = onnx_eval("Squeeze", x.astype(np.float32), *onnx_axes, opset=18)
    if expected.ndim == 0:
        expected = expected.reshape(1)   # NNAPI: squeezing every dimension leaves shape [1]
    axes_in = int_vec(axes) if axes is not None else (OperandType.tensor(I32, (1,)), None)
    (y,) = run_op(OperationCode.SQUEEZE, [(tensor_type(code, shape), x), axes_in],
                  [tensor_type(code, expected.shape)])
    assert y.shape == expected.shape
    check_movement(code, x, y, expected)


# -- TRANSPOSE --------------------------------------------------------------------------------------
TRANSPOSE_CASES = [((2, 3), None), ((2, 3, 4), [1, 0, 2]), ((2, 3, 4, 5), [0, 2, 3, 1]),
                   ((2, 3, 4, 5), [0, 3, 1, 2]), ((2, 3, 4), None), ((5,), [0])]


@pytest.mark.parametrize("code", [F32, F16, U8, S8], ids=["f32", "f16", "u8", "s8"])
@pytest.mark.parametrize("case", range(len(TRANSPOSE_CASES)))
def test_transpose_against_onnx(code, case):
    shape, perm = TRANSPOSE_CASES[case]
    x = random_data(code, shape)
    expected = onnx_eval("Transpose", x.astype(np.float32), opset=18, **({"perm": perm} if perm is not None else {}))
    perm_in = int_vec(perm) if perm is not None else (OperandType.tensor(I32, (len(shape),)), None)
    (y,) = run_op(OperationCode.TRANSPOSE, [(tensor_type(code, shape), x), perm_in],
                  [tensor_type(code, expected.shape)])
    assert y.shape == expected.shape
    check_movement(code, x, y, expected)


def test_nhwc_nchw_round_trip():
    x = random_data(U8, (1, 4, 5, 3))
    t = tensor_type(U8, x.shape)
    (nchw,) = run_op(OperationCode.TRANSPOSE, [(t, x), int_vec([0, 3, 1, 2])], [tensor_type(U8, (1, 3, 4, 5))])
    (back,) = run_op(OperationCode.TRANSPOSE, [(tensor_type(U8, nchw.shape), nchw), int_vec([0, 2, 3, 1])],
                     [t])
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("op, second", [(OperationCode.RESHAPE, [2, 12]), (OperationCode.SQUEEZE, [1]),
                                        (OperationCode.TRANSPOSE, [2, 1, 0])])
def test_signed_and_unsigned_agree_up_to_offset(op, second):
    xu = random_data(U8, (2, 1, 12) if op == OperationCode.SQUEEZE else (2, 3, 4))
    outs = []
    for code, x, zp in ((U8, xu, 130), (S8, (xu.astype(np.int16) - 128).astype(np.int8), 2)):
        t = OperandType.tensor(code, x.shape, 0.3, zp)
        expected_shape = (2, 12) if op != OperationCode.TRANSPOSE else (4, 3, 2)
        (y,) = run_op(op, [(t, x), int_vec(second)], [OperandType.tensor(code, expected_shape, 0.3, zp)])
        outs.append(y.astype(np.int64))
    np.testing.assert_array_equal(outs[0] - 128, outs[1])


# -- validation -------------------------------------------------------------------------------------
def test_reshape_rejects_bad_shapes():
    x = random_data(F32, (2, 3, 4))
    t = tensor_type(F32, x.shape)
    expect_error(OperationCode.RESHAPE, [(t, x), int_vec([-1, -1])], [OperandType.tensor(F32, (0, 0))], "-1")
    expect_error(OperationCode.RESHAPE, [(t, x), int_vec([5, 5])], [OperandType.tensor(F32, (5, 5))], "24")
    expect_error(OperationCode.RESHAPE, [(t, x), int_vec([5, -1])], [OperandType.tensor(F32, (5, 0))])
    expect_error(OperationCode.RESHAPE, [(t, x), int_vec([[4, 6]])], [OperandType.tensor(F32, (4, 6))], "1-D")
    expect_error(OperationCode.RESHAPE, [(t, x)], [OperandType.tensor(F32, (4, 6))], "inputs")


def test_reshape_rejects_changed_quantization_and_type():
    x = random_data(U8, (2, 3))
    t = tensor_type(U8, x.shape)
    expect_error(OperationCode.RESHAPE, [(t, x), int_vec([6])], [OperandType.tensor(U8, (6,), 0.5, 121)], "zp")
    expect_error(OperationCode.RESHAPE, [(t, x), int_vec([6])], [OperandType.tensor(S8, (6,), 0.5, 120)])


def test_squeeze_rejects_bad_axes():
    x = random_data(F32, (1, 3, 1))
    t = tensor_type(F32, x.shape)
    expect_error(OperationCode.SQUEEZE, [(t, x), int_vec([1])], [OperandType.tensor(F32, (1, 1))], "size 3")
    expect_error(OperationCode.SQUEEZE, [(t, x), int_vec([3])], [OperandType.tensor(F32, (3,))], "out of range")
    expect_error(OperationCode.SQUEEZE, [(t, x), int_vec([-4])], [OperandType.tensor(F32, (3,))], "out of range")
    q = random_data(U8, (1, 3))
    expect_error(OperationCode.SQUEEZE, [(tensor_type(U8, q.shape), q), int_vec([0])],
                    [OperandType.tensor(U8, (3,), 0.25, 120)], "scale")


def test_transpose_rejects_bad_permutations():
    x = random_data(F32, (2, 3, 4))
    t = tensor_type(F32, x.shape)
    expect_error(OperationCode.TRANSPOSE, [(t, x), int_vec([0, 0, 1])], [OperandType.tensor(F32, (2, 2, 3))],
                    "permutation")
    expect_error(OperationCode.TRANSPOSE, [(t, x), int_vec([1, 0])], [OperandType.tensor(F32, (3, 2, 4))],
                    "rank 3")
    expect_error(OperationCode.TRANSPOSE, [(t, x), int_vec([0, 1, 3])], [OperandType.tensor(F32, (2, 3, 4))])
    x5 = random_data(F32, (1, 1, 1, 1, 2))
    expect_error(OperationCode.TRANSPOSE, [(tensor_type(F32, x5.shape), x5), int_vec([4, 3, 2, 1, 0])],
                    [OperandType.tensor(F32, (2, 1, 1, 1, 1))], "rank")
