"""LSH_PROJECTION through the public API (run_op on nnapi-reference), and its farmhash Fingerprint64.

Expectations: Fingerprint64 values of Google's farmhash (computed with the pyfarmhash 0.5.1 binding of
its C++ code, which the project does not depend on), a plain-Python transcription of NNAPI's
documented projection (seed bytes + row bytes, fingerprint, weighted sum in row order, sign) and the
examples of AOSP's spec files.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest
from support.op_data import F16, F32, I32, S8, U8
from support.op_data import TYPE_IDS as IDS
from support.op_data import int_scalar
from support.op_runner import Input, expect_error, inferred_output_types, run_op

from mlts.runtime import OperandCode, OperandType, OperationCode, ResultCode
from mlts.runtime.ops._farmhash import fingerprint64, fingerprint64_of_bytes

LSH = OperationCode.LSH_PROJECTION
SPARSE_DEPRECATED, DENSE, SPARSE = 1, 2, 3
INPUT_TYPES = [F32, F16, I32, U8]
QUANT = {U8: (0.5, 3)}

rng = np.random.default_rng(15)

# -- farmhash ---------------------------------------------------------------------------------------
# Fingerprint64 of bytes (7 i + 3) mod 256, i < n, from Google's farmhash (one length per code path).
FARMHASH_KNOWN = {0: 0x9AE16A3B2F90404F, 1: 0xBEC09CC447469D8B, 2: 0x16F8263645A8ECF5, 3: 0x40B4412E33EEFD64,
                  4: 0xF3C7EE05197A7B92, 7: 0x4FEF0B39C12AA9A4, 8: 0x0C97ECBC1E9D2626, 12: 0x07E11FA045E761BC,
                  16: 0x7EDA0ED8C837A168, 17: 0xC9518FE63EBF6127, 32: 0xA53F806F23A314E8, 33: 0xC24F9D7CE864F0E9,
                  64: 0x0566266CB579ECA2, 65: 0x77E0867714E6B0E4, 128: 0x666823960B3AC271,
                  200: 0x6D7105B27CBE2FD7}


def pattern(n: int) -> bytes:
    return bytes((7 * i + 3) & 0xFF for i in range(n))


@pytest.mark.parametrize("n", sorted(FARMHASH_KNOWN))
def test_fingerprint64_matches_farmhash(n):
    assert fingerprint64_of_bytes(pattern(n)) == FARMHASH_KNOWN[n]


def test_fingerprint64_hashes_rows_independently():
    assert fingerprint64_of_bytes(b"abc") == 0x24A5B3A074E7F369
    keys = rng.integers(0, 256, size=(4, 70)).astype(np.uint8)
    hashes = fingerprint64(keys)
    assert hashes.dtype == np.uint64
    assert [int(h) for h in hashes] == [fingerprint64_of_bytes(k.tobytes()) for k in keys]


# -- the documented projection, transcribed -----------------------------------------------------------
def reference_bits(seeds: np.ndarray, data: np.ndarray, weights) -> list[int]:
    rows = data.shape[0]
    row_bytes = [np.ascontiguousarray(data[i]).tobytes() for i in range(rows)]
    bits = []
    for seed in np.asarray(seeds, np.float32).ravel():
        score = 0.0
        for i in range(rows):
            h = fingerprint64_of_bytes(struct.pack("<f", float(seed)) + row_bytes[i])
            value = float(h - (1 << 64) if h >= 1 << 63 else h)
            score += value if weights is None else float(weights[i]) * value
        bits.append(1 if score > 0 else 0)
    return bits


def reference_output(seeds: np.ndarray, data: np.ndarray, weights, kind: int) -> list[int]:
    bits = reference_bits(seeds, data, weights)
    if kind == DENSE:
        return bits
    num_hash, num_bits = seeds.shape
    out = []
    for k in range(num_hash):
        signature = int("".join(map(str, bits[k * num_bits:(k + 1) * num_bits])), 2)
        if kind == SPARSE:
            signature += k << num_bits
        out.append(signature - (1 << 32) if signature >= 1 << 31 else signature)
    return out


def input_data(code, shape):
    if code == U8:
        return rng.integers(0, 256, size=shape).astype(np.uint8)
    if code == I32:
        return rng.integers(-10**6, 10**6, size=shape).astype(np.int32)
    return rng.standard_normal(shape).astype(np.float16 if code == F16 else np.float32)


def run_lsh(hash_code, seeds, in_code, data, weights, kind, out_dims=None):
    hash_t = OperandType.tensor(hash_code, seeds.shape)
    scale, zp = QUANT.get(in_code, (0.0, 0))
    inputs = [(hash_t, seeds), (OperandType.tensor(in_code, data.shape, scale, zp), data),
              (OperandType.tensor(hash_code, (data.shape[0],)), weights), int_scalar(kind)]
    n = seeds.shape[0] * seeds.shape[1] if kind == DENSE else seeds.shape[0]
    (y,) = run_op(LSH, inputs, [OperandType.tensor(I32, out_dims or (n,))])
    assert y.dtype == np.int32 and y.shape == (n,)
    return y


@pytest.mark.parametrize("in_code", INPUT_TYPES, ids=IDS.get)
@pytest.mark.parametrize("hash_code", [F32, F16], ids=IDS.get)
@pytest.mark.parametrize("kind", [SPARSE_DEPRECATED, DENSE, SPARSE], ids=["sparse_deprecated", "dense", "sparse"])
@pytest.mark.parametrize("weighted", [True, False], ids=["weights", "no-weights"])
def test_lsh_projection_against_the_documented_formula(in_code, hash_code, kind, weighted):
    dtype = np.float16 if hash_code == F16 else np.float32
    seeds = rng.standard_normal((3, 4)).astype(dtype)
    data = input_data(in_code, (5, 2))
    weights = rng.uniform(-1, 1, 5).astype(dtype) if weighted else None
    y = run_lsh(hash_code, seeds, in_code, data, weights, kind)
    expected = reference_output(seeds, data, None if weights is None else weights.astype(np.float64), kind)
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("shape", [(4,), (2, 3, 2), (3, 40)], ids=["rank1", "rank3", "long-rows"])
def test_lsh_projection_input_ranks_and_long_keys(shape):
    # Rows of 160 bytes take farmhash's block loop.
    seeds = rng.standard_normal((2, 3)).astype(np.float32)
    data = input_data(F32, shape)
    y = run_lsh(F32, seeds, F32, data, None, DENSE)
    np.testing.assert_array_equal(y, reference_output(seeds, data, None, DENSE))


def test_lsh_projection_spec_examples():
    # AOSP V1_0/lsh_projection.mod.py (DENSE, weights), V1_0/lsh_projection_2.mod.py (SPARSE_DEPRECATED,
    # weights omitted), V1_2/lsh_projection_3_relaxed.mod.py (SPARSE), V1_2/lsh_projection_float16.mod.py.
    seeds = np.array([0.123, 0.456, -0.321, -0.654, 1.234, 5.678, -4.321, -8.765], np.float32).reshape(4, 2)
    data = np.array([12345, 54321, 67890, 9876, -12345678, -87654321], np.int32).reshape(3, 2)
    weights = np.array([0.12, 0.34, 0.56], np.float32)
    np.testing.assert_array_equal(run_lsh(F32, seeds, I32, data, weights, DENSE), [1, 1, 1, 0, 1, 1, 1, 0])
    np.testing.assert_array_equal(run_lsh(F32, seeds, I32, data, None, SPARSE_DEPRECATED), [1, 2, 2, 0])
    np.testing.assert_array_equal(run_lsh(F32, seeds, I32, data, None, SPARSE), [1, 6, 10, 12])
    np.testing.assert_array_equal(run_lsh(F16, seeds.astype(np.float16), I32, data, weights.astype(np.float16),
                                          DENSE), [1, 1, 1, 1, 1, 0, 0, 0])


def test_lsh_projection_32_bit_signatures_wrap_to_int32():
    seeds = rng.standard_normal((1, 32)).astype(np.float32)
    data = input_data(I32, (3, 2))
    y = run_lsh(F32, seeds, I32, data, None, SPARSE)
    assert y.tolist() == reference_output(seeds, data, None, SPARSE)
    dense = reference_bits(seeds, data, None)
    assert (y[0] < 0) == (dense[0] == 1)


def test_lsh_projection_type_as_model_input_resolved_at_run_time():
    seeds = rng.standard_normal((3, 2)).astype(np.float32)
    data = input_data(U8, (4, 3))
    inputs = [(OperandType.tensor(F32, (3, 2)), seeds), (OperandType.tensor(U8, (4, 3), 0.5, 3), data),
              (OperandType.tensor(F32, (4,)), None), (OperandType.scalar(OperandCode.INT32), Input(DENSE))]
    (out,) = inferred_output_types(LSH, inputs, [OperandType.tensor(I32, (0,))])
    assert out.dimensions == (0,)  # the output's size depends on the type
    (y,) = run_op(LSH, inputs, [OperandType.tensor(I32, (0,))])
    np.testing.assert_array_equal(y, reference_output(seeds, data, None, DENSE))


@pytest.mark.parametrize("kind,size", [(DENSE, 8), (SPARSE, 4), (SPARSE_DEPRECATED, 4)])
def test_lsh_projection_build_time_shape_inference(kind, size):
    inputs = [(OperandType.tensor(F16, (4, 2)), Input()), (OperandType.tensor(I32, (0, 2)), Input()),
              (OperandType.tensor(F16, (0,)), Input()), int_scalar(kind)]
    (out,) = inferred_output_types(LSH, inputs, [OperandType.tensor(I32, (0,))])
    assert out.dimensions == (size,)


def test_lsh_projection_rejects_bad_operands():
    seeds = (OperandType.tensor(F32, (4, 2)), np.zeros((4, 2), np.float32))
    data = (OperandType.tensor(I32, (3, 2)), np.zeros((3, 2), np.int32))
    weights = (OperandType.tensor(F32, (3,)), np.ones(3, np.float32))
    no_weights = (OperandType.tensor(F32, (3,)), None)
    out = [OperandType.tensor(I32, (8,))]
    expect_error(LSH, [seeds, data, weights], out, "inputs")
    expect_error(LSH, [(OperandType.tensor(F32, (8,)), np.zeros(8, np.float32)), data, weights, int_scalar(DENSE)],
                 out, "input 0", "rank 1")
    expect_error(LSH, [(OperandType.tensor(I32, (4, 2)), np.zeros((4, 2), np.int32)), data, no_weights, int_scalar(DENSE)],
                 out, "input 0", "TENSOR_INT32 not allowed")
    wide = (OperandType.tensor(F32, (1, 33)), np.zeros((1, 33), np.float32))
    expect_error(LSH, [wide, data, no_weights, int_scalar(DENSE)], [OperandType.tensor(I32, (33,))], "input 0",
                 "33 bits per hash function exceed the maximum of 32")
    crowded = (OperandType.tensor(F32, (5, 30)), np.zeros((5, 30), np.float32))
    expect_error(LSH, [crowded, data, no_weights, int_scalar(SPARSE)], [OperandType.tensor(I32, (5,))], "input 0",
                 "do not fit a SPARSE int32 signature")
    run_op(LSH, [crowded, data, no_weights, int_scalar(SPARSE_DEPRECATED)], [OperandType.tensor(I32, (5,))])
    s8 = (OperandType.tensor(S8, (3, 2), 0.5, 0), np.zeros((3, 2), np.int8))
    expect_error(LSH, [seeds, s8, weights, int_scalar(DENSE)], out, "input 1", "TENSOR_QUANT8_ASYMM_SIGNED")
    f16_weights = (OperandType.tensor(F16, (3,)), np.ones(3, np.float16))
    expect_error(LSH, [seeds, data, f16_weights, int_scalar(DENSE)], out, "input 2", "TENSOR_FLOAT16 not allowed")
    expect_error(LSH, [seeds, data, (OperandType.tensor(F32, (3, 1)), np.ones((3, 1), np.float32)),
                       int_scalar(DENSE)], out, "input 2", "rank 2")
    expect_error(LSH, [seeds, data, (OperandType.tensor(F32, (2,)), np.ones(2, np.float32)), int_scalar(DENSE)],
                 out, "input 2", "2 weights for 3 input rows")
    for kind in (0, 4):
        expect_error(LSH, [seeds, data, weights, int_scalar(kind)], out, "input 3", f"projection type {kind}")
    expect_error(LSH, [seeds, data, weights, int_scalar(DENSE)], [OperandType.tensor(F32, (8,))], "output 0")
    expect_error(LSH, [seeds, data, weights, int_scalar(DENSE)], [OperandType.tensor(I32, (4,))], "output 0", "[8]")


def test_lsh_projection_weight_count_checked_at_run_time():
    seeds = (OperandType.tensor(F32, (2, 2)), np.zeros((2, 2), np.float32))
    data = (OperandType.tensor(I32, (3, 2)), np.zeros((3, 2), np.int32))
    weights = (OperandType.tensor(F32, (0,)), np.ones(4, np.float32))
    expect_error(LSH, [seeds, data, weights, int_scalar(DENSE)], [OperandType.tensor(I32, (4,))], "input 2",
                 "4 weights for 3 input rows", result=ResultCode.OP_FAILED)
