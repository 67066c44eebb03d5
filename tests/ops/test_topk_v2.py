"""TOPK_V2 through the public API (run_op on nnapi-reference).

Tie-free rows against onnx.reference TopK (axis -1, largest=1, sorted=1); ties against hand values
following NNAPI's documented rule (of two equal values the one with the larger index comes first,
the opposite of ONNX and TFLite); the examples of AOSP's V1_2/topk_v2.mod.py and
V1_3/topk_v2_quant8_signed.mod.py.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from support import op_data
from support.onnx_reference import ONNX_TYPE
from support.op_data import F16, F32, I32, S8, U8
from support.op_runner import Input, inferred_output_types, run_op

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

INT = OperandType.scalar(OperandCode.INT32)
TOPK = OperationCode.TOPK_V2

rng = np.random.default_rng(90)


def onnx_topk(x, k):
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=-1, largest=1, sorted=1)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", ONNX_TYPE[x.dtype], None)],
        [helper.make_tensor_value_info("values", ONNX_TYPE[x.dtype], None),
         helper.make_tensor_value_info("indices", TensorProto.INT64, None)],
        initializer=[numpy_helper.from_array(np.array([k], np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ReferenceEvaluator(model).run(None, {"x": x})


ttype = partial(op_data.tensor_type, quant={U8: (0.5, 3), S8: (0.5, -7)})


def run_topk(t, x, k):
    out_dims = tuple(t.dimensions[:-1]) + (k,)
    return run_op(TOPK, [(t, x), (INT, k)], [t.with_dimensions(out_dims), OperandType.tensor(I32, out_dims)])


def distinct_values(code, shape):
    """Rows without repeated values, so the ONNX tie rule does not matter."""
    n = shape[-1]
    if code in (U8, S8):
        rows = [rng.choice(256, size=n, replace=False) for _ in range(int(np.prod(shape[:-1])))]
        q = np.array(rows).reshape(shape)
        return (q if code == U8 else q - 128).astype(ttype(code, shape).dtype)
    rows = [rng.permutation(4 * n)[:n] for _ in range(int(np.prod(shape[:-1])))]
    values = np.array(rows).reshape(shape) - 2 * n
    if code == I32:
        return (values * 1000003).astype(np.int32)
    return (values / 8).astype(ttype(code, shape).dtype)


CASES = [((8,), 3), ((2, 5), 1), ((2, 5), 5), ((2, 3, 6), 4), ((1, 2, 3, 7), 2), ((2, 1, 1, 1, 9), 6)]


@pytest.mark.parametrize("shape, k", CASES)
@pytest.mark.parametrize("code", [F32, F16, I32, U8, S8], ids=["f32", "f16", "i32", "u8", "s8"])
def test_against_onnx(shape, k, code):
    t = ttype(code, shape)
    x = distinct_values(code, shape)
    values, indices = run_topk(t, x, k)
    expected_values, expected_indices = onnx_topk(x, k)
    assert values.dtype == t.dtype and indices.dtype == np.int32
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


@pytest.mark.parametrize("row, k, values, indices", [
    ([1, 3, 3, 2, 3], 2, [3, 3], [4, 2]),          # the larger index first, and the larger ones kept
    ([1, 3, 3, 2, 3], 4, [3, 3, 3, 2], [4, 2, 1, 3]),
    ([3, 2, 3, 3, 1], 2, [3, 3], [3, 2]),
    ([5, 5, 5], 3, [5, 5, 5], [2, 1, 0]),
    ([0, 7, 0, 7], 3, [7, 7, 0], [3, 1, 2]),
    ([-1, -1], 1, [-1], [1]),
])
@pytest.mark.parametrize("code", [F32, F16, I32, U8, S8], ids=["f32", "f16", "i32", "u8", "s8"])
def test_ties_put_the_larger_index_first(row, k, values, indices, code):
    if code == U8:
        row, values = [v + 1 for v in row], [v + 1 for v in values]
    x = np.array([row]).astype(ttype(code, ()).dtype)
    got_values, got_indices = run_topk(ttype(code, x.shape), x, k)
    assert got_values.tolist() == [values] and got_indices.tolist() == [indices]


def test_ties_row_by_row():
    x = np.array([[[2, 2, 1], [1, 2, 2]], [[0, 0, 0], [9, 8, 9]]], np.int32)
    values, indices = run_topk(OperandType.tensor(I32, x.shape), x, 2)
    assert values.tolist() == [[[2, 2], [2, 2]], [[0, 0], [9, 9]]]
    assert indices.tolist() == [[[1, 0], [2, 1]], [[2, 1], [2, 0]]]


def test_quantized_values_keep_scale_and_zero_point():
    t = OperandType.tensor(U8, (1, 4), 0.25, 200)
    values, indices = run_topk(t, np.array([[10, 250, 200, 90]], np.uint8), 2)
    assert values.tolist() == [[250, 200]] and indices.tolist() == [[1, 2]]


# -- AOSP spec examples -----------------------------------------------------------------------------
SPEC = [  # V1_2/topk_v2.mod.py
    ((2, 2), [-2.0, 0.2, 0.8, 0.1], [0.2, -2.0, 0.8, 0.1], [1, 0, 0, 1]),
    ((2, 3), [-2.0, -3.0, 0.2, 0.8, 0.1, -0.1], [0.2, -2.0, 0.8, 0.1], [2, 0, 0, 1]),
    ((2, 4), [-2.0, -3.0, -4.0, 0.2, 0.8, 0.1, -0.1, -0.8], [0.2, -2.0, 0.8, 0.1], [3, 0, 0, 1]),
    ((8,), [-2.0, -3.0, -4.0, 0.2, 0.8, 0.1, -0.1, -0.8], [0.8, 0.2], [4, 3]),
]


@pytest.mark.parametrize("case", range(len(SPEC)))
@pytest.mark.parametrize("code", [F32, F16])
def test_spec_float_examples(case, code):
    shape, x, values, indices = SPEC[case]
    t = OperandType.tensor(code, shape)
    got_values, got_indices = run_topk(t, np.array(x, t.dtype).reshape(shape), 2)
    np.testing.assert_array_equal(got_values.ravel(), np.array(values, t.dtype))
    assert got_indices.ravel().tolist() == indices


@pytest.mark.parametrize("t, x, values", [
    (OperandType.tensor(U8, (2, 3), 2.0, 128), [1, 2, 3, 251, 250, 249], [3, 2, 251, 250]),         # V1_2
    (OperandType.tensor(I32, (2, 3)), [1, 2, 3, 10251, 10250, 10249], [3, 2, 10251, 10250]),         # V1_2
    (OperandType.tensor(S8, (2, 3), 2.0, 0), [-127, -126, -125, 123, 122, 121], [-125, -126, 123, 122]),  # V1_3
], ids=["u8", "i32", "s8"])
def test_spec_integer_examples(t, x, values):
    got_values, got_indices = run_topk(t, np.array(x, t.dtype).reshape(2, 3), 2)
    assert got_values.ravel().tolist() == values
    assert got_indices.ravel().tolist() == [2, 1, 0, 1]


# -- shapes -----------------------------------------------------------------------------------------
def inferred_dims(input_dims, k, *, const_k=True):
    unknown = (0,) * len(input_dims)
    values, indices = inferred_output_types(TOPK, [(OperandType.tensor(F32, input_dims), Input()),
                                                   (INT, k if const_k else Input())],
                                            [OperandType.tensor(F32, unknown), OperandType.tensor(I32, unknown)])
    return values.dimensions, indices.dimensions


def test_build_time_shape_inference():
    assert inferred_dims((2, 3, 5), 2) == ((2, 3, 2), (2, 3, 2))
    assert inferred_dims((7,), 7) == ((7,), (7,))
    assert inferred_dims((2, 0, 5), 2) == ((0, 0, 0), (0, 0, 0))
    assert inferred_dims((2, 3, 5), 2, const_k=False) == ((0, 0, 0), (0, 0, 0))


def test_unknown_dims_and_k_at_run_time():
    x = distinct_values(F32, (3, 6))
    (values, indices) = run_op(TOPK, [(OperandType.tensor(F32, (0, 0)), x), (INT, 4)],
                               [OperandType.tensor(F32, (0, 0)), OperandType.tensor(I32, (0, 0))])
    expected_values, expected_indices = onnx_topk(x, 4)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


# -- validation -------------------------------------------------------------------------------------
def expect_bad_data(inputs, outputs, *words, result=ResultCode.BAD_DATA):
    with pytest.raises(MltsError) as info:
        run_op(TOPK, inputs, outputs)
    assert info.value.code == result
    assert "TOPK_V2" in str(info.value)
    for w in words:
        assert w in str(info.value), str(info.value)


def f32(shape):
    return OperandType.tensor(F32, shape), np.zeros(shape, np.float32)


def outs(shape, code=F32, index_code=I32):
    return [OperandType.tensor(code, shape), OperandType.tensor(index_code, shape)]


def test_rejects_bad_k():
    expect_bad_data([f32((2, 3)), (INT, 0)], outs((2, 1)), "input 1", "k must be at least 1")
    expect_bad_data([f32((2, 3)), (INT, -2)], outs((2, 1)), "input 1", "at least 1")
    expect_bad_data([f32((2, 3)), (INT, 4)], outs((2, 4)), "input 1", "k 4 exceeds the last dimension 3")
    expect_bad_data([f32((2, 3)), (OperandType.scalar(OperandCode.FLOAT32), 2.0)], outs((2, 2)), "input 1", "FLOAT32")


def test_rejects_bad_k_known_only_at_run_time():
    # The last dimension is known only while running: the same check then fails the execution.
    expect_bad_data([(OperandType.tensor(F32, (2, 0)), np.zeros((2, 3), np.float32)), (INT, 5)], outs((0, 0)),
                    "input 1", "k 5 exceeds", result=ResultCode.OP_FAILED)


def test_rejects_bad_operands():
    expect_bad_data([f32(()), (INT, 1)], outs((1,)), "input 0", "rank 0")
    tb = OperandType.tensor(OperandCode.TENSOR_BOOL8, (2, 3))
    expect_bad_data([(tb, np.zeros((2, 3), bool)), (INT, 1)], outs((2, 1)), "input 0", "TENSOR_BOOL8")
    expect_bad_data([f32((2, 3)), (INT, 1)], outs((2, 1), code=F16), "output 0", "TENSOR_FLOAT16")
    expect_bad_data([f32((2, 3)), (INT, 1)], outs((2, 1), index_code=F32), "output 1", "TENSOR_FLOAT32")
    expect_bad_data([f32((2, 3))], outs((2, 1)), "inputs")
    expect_bad_data([f32((2, 3)), (INT, 1)], outs((2, 1))[:1], "outputs")
    q = OperandType.tensor(U8, (2, 3), 0.5, 3)
    expect_bad_data([(q, np.zeros((2, 3), np.uint8)), (INT, 1)],
                    [OperandType.tensor(U8, (2, 1), 0.5, 4), OperandType.tensor(I32, (2, 1))], "output 0", "zp")
