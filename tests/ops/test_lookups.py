"""EMBEDDING_LOOKUP and HASHTABLE_LOOKUP through the public API (run_op on nnapi-reference).

Both only copy rows, so every type must come back bit-exact. Expectations: onnx.reference Gather
(axis 0) for EMBEDDING_LOOKUP, a Python dict from key to row for HASHTABLE_LOOKUP, hand-traced
binary-search probes for repeated or unsorted keys, and the examples of AOSP's spec files.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from support import op_data
from support.onnx_reference import onnx_eval
from support.op_data import ALL_TYPES, F16, F32, I32, S8, U8
from support.op_data import TYPE_IDS as IDS
from support.op_data import int_vec
from support.op_runner import Input, expect_error, inferred_output_types, run_op

from mlts.runtime import OperandCode, OperandType, OperationCode, ResultCode

EMBEDDING, HASHTABLE = OperationCode.EMBEDDING_LOOKUP, OperationCode.HASHTABLE_LOOKUP
QUANT = {U8: (0.5, 127), S8: (0.5, -1)}
HASHTABLE_TYPES = [F32, I32, U8]
HITS = OperandType.tensor(U8, (0,), 1.0, 0)

rng = np.random.default_rng(77)
tensor_type = partial(op_data.tensor_type, quant=QUANT)
random_data = partial(op_data.random_data, rng)


def hits_type(k: int) -> OperandType:
    return OperandType.tensor(U8, (k,), 1.0, 0)


# -- EMBEDDING_LOOKUP -------------------------------------------------------------------------------
EMBEDDING_CASES = [((3, 2), [1, 0, 2]), ((4, 1, 3), [3, 3, 0]), ((2, 3, 2, 2), [1]), ((5, 6), [4, 0, 1, 1, 2, 3, 0])]


@pytest.mark.parametrize("code", ALL_TYPES, ids=IDS.get)
@pytest.mark.parametrize("case", range(len(EMBEDDING_CASES)))
def test_embedding_lookup_against_onnx_gather(code, case):
    shape, lookups = EMBEDDING_CASES[case]
    values = random_data(code, shape)
    expected = onnx_eval("Gather", values, np.array(lookups, np.int64), opset=18, axis=0)
    (y,) = run_op(EMBEDDING, [int_vec(lookups, const=False), (tensor_type(code, shape), values)],
                  [tensor_type(code, expected.shape)])
    assert y.dtype == values.dtype
    np.testing.assert_array_equal(y, expected)


def test_embedding_lookup_spec_examples():
    # AOSP V1_0/embedding_lookup.mod.py and its V1_2 quant8 variation (scale 0.5, zero point 127).
    table = np.array([[[i + j / 10 + k / 100 for k in range(4)] for j in range(2)] for i in range(3)], np.float32)
    (y,) = run_op(EMBEDDING, [int_vec([1, 0, 2], const=False), (tensor_type(F32, (3, 2, 4)), table)],
                  [tensor_type(F32, (3, 2, 4))])
    np.testing.assert_array_equal(y, table[[1, 0, 2]])
    q = np.round(table / 0.5 + 127).astype(np.uint8)
    (y,) = run_op(EMBEDDING, [int_vec([1, 0, 2], const=False), (tensor_type(U8, (3, 2, 4)), q)],
                  [tensor_type(U8, (3, 2, 4))])
    np.testing.assert_array_equal(y.ravel()[:8], [129, 129, 129, 129, 129, 129, 129, 129])
    np.testing.assert_array_equal(y, q[[1, 0, 2]])


def test_embedding_lookup_constant_lookups_and_unknown_output_dims():
    values = random_data(S8, (4, 3))
    (y,) = run_op(EMBEDDING, [int_vec([2, 2, 3]), (tensor_type(S8, (4, 3)), values)], [tensor_type(S8, (0, 0))])
    np.testing.assert_array_equal(y, values[[2, 2, 3]])


def test_embedding_lookup_build_time_shape_inference():
    inputs = [int_vec([0, 1]), (tensor_type(F16, (5, 2, 3)), Input())]
    (out,) = inferred_output_types(EMBEDDING, inputs, [tensor_type(F16, (0, 0, 0))])
    assert out.dimensions == (2, 2, 3)
    # The lookups' count unknown until run time: the other dimensions are still the values'.
    inputs = [(OperandType.tensor(I32, (0,)), Input()), (tensor_type(F16, (5, 2, 3)), Input())]
    (out,) = inferred_output_types(EMBEDDING, inputs, [tensor_type(F16, (0, 0, 0))])
    assert out.dimensions == (0, 0, 0)


@pytest.mark.parametrize("bad", [3, -1], ids=["past-end", "negative"])
def test_embedding_lookup_out_of_range_fails_the_execution(bad):
    values = (tensor_type(F32, (3, 2)), np.zeros((3, 2), np.float32))
    expect_error(EMBEDDING, [int_vec([0, bad], const=False), values], [tensor_type(F32, (2, 2))],
                 "input 0", f"lookup {bad} is out of range [0, 3)", result=ResultCode.OP_FAILED)


def test_embedding_lookup_rejects_bad_operands():
    values = (tensor_type(F32, (3, 2)), np.zeros((3, 2), np.float32))
    out = [tensor_type(F32, (2, 2))]
    expect_error(EMBEDDING, [int_vec([0, 1])], out, "inputs")
    expect_error(EMBEDDING, [int_vec([[0, 1]]), values], out, "input 0", "1-D")
    floats = (OperandType.tensor(F32, (2,)), np.zeros(2, np.float32))
    expect_error(EMBEDDING, [floats, values], out, "input 0", "TENSOR_FLOAT32 not allowed")
    flat = (tensor_type(F32, (3,)), np.zeros(3, np.float32))
    expect_error(EMBEDDING, [int_vec([0, 1]), flat], [tensor_type(F32, (2,))], "input 1", "rank 1")
    b8 = OperandCode.TENSOR_BOOL8
    expect_error(EMBEDDING, [int_vec([0, 1]), (OperandType.tensor(b8, (3, 2)), np.zeros((3, 2), bool))],
                 [OperandType.tensor(b8, (2, 2))], "input 1", "not allowed")
    q = (tensor_type(U8, (3, 2)), np.zeros((3, 2), np.uint8))
    expect_error(EMBEDDING, [int_vec([0, 1]), q], [OperandType.tensor(U8, (2, 2), 0.25, 127)], "output 0", "scale")
    expect_error(EMBEDDING, [int_vec([0, 1]), values], [tensor_type(F16, (2, 2))], "output 0", "TENSOR_FLOAT16")
    expect_error(EMBEDDING, [int_vec([0, 1]), values], [tensor_type(F32, (3, 2))], "output 0", "[2, 2]")
    expect_error(EMBEDDING, [int_vec([0, 1]), values], [tensor_type(F32, (2, 5))], "output 0", "[2, 2]")


# -- HASHTABLE_LOOKUP -------------------------------------------------------------------------------
def dict_lookup(keys, values, lookups):
    """The documented semantics: row of the matching key, zeros and hit 0 for a miss."""
    table = {int(k): values[i] for i, k in enumerate(keys)}
    rows = [table.get(int(x), np.zeros(values.shape[1:], values.dtype)) for x in lookups]
    return np.array(rows, dtype=values.dtype).reshape((len(lookups),) + values.shape[1:]), \
        np.array([int(x) in table for x in lookups], np.uint8)


@pytest.mark.parametrize("code", HASHTABLE_TYPES, ids=IDS.get)
@pytest.mark.parametrize("value_shape", [(6,), (6, 2), (6, 1, 3)], ids=["rank1", "rank2", "rank3"])
def test_hashtable_lookup_against_a_dict(code, value_shape):
    keys = np.sort(rng.choice(np.arange(-50, 50), size=6, replace=False)).astype(np.int32)
    lookups = np.concatenate([keys[[4, 0, 5]], [-51, 50, 7, 7]]).astype(np.int32)
    values = random_data(code, value_shape)
    expected, expected_hits = dict_lookup(keys, values, lookups)
    out, hits = run_op(HASHTABLE, [int_vec(lookups, const=False), int_vec(keys, const=False),
                                   (tensor_type(code, value_shape), values)],
                       [tensor_type(code, expected.shape), hits_type(lookups.size)])
    assert out.dtype == values.dtype and hits.dtype == np.uint8
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(hits, expected_hits)


def test_hashtable_lookup_spec_examples():
    # AOSP V1_0/hashtable_lookup_float.mod.py and V1_0/hashtable_lookup_quant8.mod.py.
    table = np.array([[i + j / 10 for j in range(2)] for i in range(3)], np.float32)
    out, hits = run_op(HASHTABLE, [int_vec([1234, -292, -11, 0], const=False), int_vec([-11, 0, 1234]),
                                   (tensor_type(F32, (3, 2)), table)], [tensor_type(F32, (4, 2)), hits_type(4)])
    np.testing.assert_array_equal(out, np.array([[2.0, 2.1], [0, 0], [0.0, 0.1], [1.0, 1.1]], np.float32))
    np.testing.assert_array_equal(hits, [1, 0, 1, 1])
    q = np.array([[0, 1], [10, 11], [20, 21]], np.uint8)
    u8 = OperandType.tensor(U8, (3, 2), 0.5, 0)
    out, hits = run_op(HASHTABLE, [int_vec([123, 250, 255, 0], const=False), int_vec([0, 123, 255]), (u8, q)],
                       [OperandType.tensor(U8, (4, 2), 0.5, 0), hits_type(4)])
    np.testing.assert_array_equal(out, [[10, 11], [0, 0], [20, 21], [0, 1]])
    np.testing.assert_array_equal(hits, [1, 0, 1, 1])


def test_hashtable_lookup_extreme_keys_compare_without_overflow():
    keys = np.array([-2**31, -5, 0, 2**31 - 1], np.int32)
    lookups = np.array([2**31 - 1, -2**31, 0, 1, -5], np.int32)
    values = np.arange(4, dtype=np.int32).reshape(4, 1)
    out, hits = run_op(HASHTABLE, [int_vec(lookups, const=False), int_vec(keys), (tensor_type(I32, (4, 1)), values)],
                       [tensor_type(I32, (5, 1)), hits_type(5)])
    np.testing.assert_array_equal(out.ravel(), [3, 0, 2, 0, 1])
    np.testing.assert_array_equal(hits, [1, 1, 1, 0, 1])


def test_hashtable_lookup_probes_like_bsearch():
    # Hand-traced probes (middle of the remaining range, past the probe when larger).
    # Repeated keys [5, 5, 5, 5]: the first probe is row 2. Unsorted keys [3, 1, 2]: 1 is found at
    # row 1 (first probe); 3 goes right of 1, then right of 2, and misses.
    values = np.arange(4, dtype=np.int32).reshape(4, 1) * 10
    out, hits = run_op(HASHTABLE, [int_vec([5]), int_vec([5, 5, 5, 5]), (tensor_type(I32, (4, 1)), values)],
                       [tensor_type(I32, (1, 1)), hits_type(1)])
    assert out.ravel().tolist() == [20] and hits.tolist() == [1]
    out, hits = run_op(HASHTABLE, [int_vec([1, 3, 2]), int_vec([3, 1, 2]), (tensor_type(I32, (3, 1)), values[:3])],
                       [tensor_type(I32, (3, 1)), hits_type(3)])
    assert out.ravel().tolist() == [10, 0, 20] and hits.tolist() == [1, 0, 1]


def test_hashtable_lookup_build_time_shape_inference():
    inputs = [int_vec([1, 2, 3]), int_vec([1, 2]), (tensor_type(U8, (2, 4)), Input())]
    out, hits = inferred_output_types(HASHTABLE, inputs, [tensor_type(U8, (0, 0)), HITS])
    assert out.dimensions == (3, 4) and hits.dimensions == (3,)
    inputs[0] = (OperandType.tensor(I32, (0,)), Input())
    out, hits = inferred_output_types(HASHTABLE, inputs, [tensor_type(U8, (0, 0)), HITS])
    assert out.dimensions == (0, 0) and hits.dimensions == (0,)


def test_hashtable_lookup_rejects_bad_operands():
    lookups, keys = int_vec([1, 2], const=False), int_vec([1, 2, 3])
    values = (tensor_type(F32, (3, 2)), np.zeros((3, 2), np.float32))
    outs = [tensor_type(F32, (2, 2)), hits_type(2)]
    expect_error(HASHTABLE, [lookups, keys], outs, "inputs")
    expect_error(HASHTABLE, [lookups, keys, values], outs[:1], "outputs")
    expect_error(HASHTABLE, [int_vec([[1, 2]]), keys, values], outs, "input 0", "1-D")
    expect_error(HASHTABLE, [lookups, int_vec([[1, 2, 3]]), values], outs, "input 1", "1-D")
    floats = (OperandType.tensor(F32, (3,)), np.zeros(3, np.float32))
    expect_error(HASHTABLE, [lookups, floats, values], outs, "input 1", "TENSOR_FLOAT32 not allowed")
    expect_error(HASHTABLE, [lookups, int_vec([1, 2]), values], outs, "input 1", "2 keys for 3 value rows")
    s8 = (tensor_type(S8, (3, 2)), np.zeros((3, 2), np.int8))
    expect_error(HASHTABLE, [lookups, keys, s8], [tensor_type(S8, (2, 2)), hits_type(2)], "input 2",
                 "TENSOR_QUANT8_ASYMM_SIGNED not allowed")
    f16 = (tensor_type(F16, (3, 2)), np.zeros((3, 2), np.float16))
    expect_error(HASHTABLE, [lookups, keys, f16], [tensor_type(F16, (2, 2)), hits_type(2)], "input 2", "not allowed")
    expect_error(HASHTABLE, [lookups, keys, values], [tensor_type(I32, (2, 2)), hits_type(2)], "output 0")
    expect_error(HASHTABLE, [lookups, keys, values], [outs[0], OperandType.tensor(U8, (2,), 0.5, 0)],
                 "output 1", "scale 1 and zero point 0")
    expect_error(HASHTABLE, [lookups, keys, values], [outs[0], OperandType.tensor(I32, (2,))], "output 1",
                 "not allowed")
    expect_error(HASHTABLE, [lookups, keys, values], [tensor_type(F32, (2, 3)), hits_type(2)], "output 0", "[2, 2]")


def test_hashtable_lookup_key_count_checked_at_run_time():
    keys = (OperandType.tensor(I32, (0,)), np.array([1, 2], np.int32))
    values = (tensor_type(F32, (3, 2)), np.zeros((3, 2), np.float32))
    expect_error(HASHTABLE, [int_vec([1], const=False), keys, values], [tensor_type(F32, (1, 2)), hits_type(1)],
                 "input 1", "2 keys for 3 value rows", result=ResultCode.OP_FAILED)
