"""RANDOM_MULTINOMIAL through the public API (run_op on nnapi-reference), and its Philox generator.

Expectations: the Philox4x32-10 known-answer vectors published with Random123 (the reference
implementation of the Philox paper), a scalar pure-Python Philox and TensorFlow's double conversion
written here from their descriptions, the documented sampling (the first class whose running sum of
exp(logit - max) exceeds u times the total), and the class frequencies against softmax (what NNAPI's
CTS checks, with its 0.025 tolerance).
"""
from __future__ import annotations

import struct

import numpy as np
import pytest
from support.op_data import F16, F32, I32
from support.op_data import TYPE_IDS as IDS
from support.op_data import int_scalar, int_vec
from support.op_runner import Input, expect_error, inferred_output_types, run_op

from mlts.runtime import OperandCode, OperandType, OperationCode, ResultCode
from mlts.runtime.ops._philox import philox_blocks, uniform_doubles

MULTINOMIAL = OperationCode.RANDOM_MULTINOMIAL
M32 = 0xFFFFFFFF

rng = np.random.default_rng(3)


# -- Philox -----------------------------------------------------------------------------------------
# Random123's kat_vectors: counter words 0..3, key words 0..1 -> output words 0..3.
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M32, M32, M32, M32), (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("case", range(len(KNOWN_ANSWERS)))
def test_philox_known_answers(case):
    counter, key, expected = KNOWN_ANSWERS[case]
    value = sum(w << (32 * i) for i, w in enumerate(counter))
    assert philox_blocks(key, value, 1)[0].tolist() == list(expected)


def scalar_philox(key, counter):
    """One Philox4x32-10 block with Python ints: ten rounds, the key bumped between rounds."""
    c = [(counter >> (32 * i)) & M32 for i in range(4)]
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        pa, pb = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((pb >> 32) ^ c[1] ^ k0) & M32, pb & M32, ((pa >> 32) ^ c[3] ^ k1) & M32, pa & M32]
    return c


def scalar_doubles(seed, seed2, count):
    """TensorFlow's SimplePhilox.RandDouble stream of PhiloxRandom(seed, seed2), one value at a time."""
    seed, seed2 = seed & (2**64 - 1), seed2 & (2**64 - 1)
    key, counter = (seed & M32, seed >> 32), seed2 << 64
    words = []
    while len(words) < 2 * count:
        words += scalar_philox(key, counter)
        counter = (counter + 1) % 2**128
    out = []
    for i in range(count):
        bits = (1023 << 52) | ((words[2 * i] & 0xFFFFF) << 32) | words[2 * i + 1]
        out.append(struct.unpack("<d", struct.pack("<Q", bits))[0] - 1.0)
    return out


@pytest.mark.parametrize("seeds", [(37, 42), (-1, 7), (0, -2**31), (2**31 - 1, 1)])
def test_uniform_doubles_match_a_scalar_transcription(seeds):
    got = uniform_doubles(*seeds, 301)
    assert got.tolist() == scalar_doubles(*seeds, 301)
    assert ((got >= 0) & (got < 1)).all()


def test_philox_counter_carries_across_words():
    low_end = 2**64 - 1
    blocks = philox_blocks((5, 6), low_end, 3)
    assert [b.tolist() for b in blocks] == [scalar_philox((5, 6), low_end + i) for i in range(3)]
    top = 2**128 - 1
    assert philox_blocks((5, 6), top, 2)[1].tolist() == scalar_philox((5, 6), 0)


# -- sampling ---------------------------------------------------------------------------------------
def expected_samples(logits: np.ndarray, count: int, seeds) -> np.ndarray:
    """The documented draw: one stream for all rows in order; per sample u, the first class whose
    running sum of exp(logit - row max) (finite logits only) exceeds u * total."""
    batches, classes = logits.shape
    stream = iter(scalar_doubles(seeds[0], seeds[1], batches * count))
    out = np.zeros((batches, count), np.int32)
    for b in range(batches):
        finite = [float(x) for x in logits[b] if np.isfinite(x)]
        top = max(finite) if finite else float(np.finfo(np.float32).min)
        running, sums = 0.0, []
        for x in logits[b]:
            if np.isfinite(x):
                running += float(np.exp(np.float64(x) - top))
            sums.append(running)
        for s in range(count):
            target = next(stream) * running
            out[b, s] = next((j for j, v in enumerate(sums) if v > target), classes)
    return out


def run_multinomial(code, logits, count, seeds, *, count_input=False, out_dims=None):
    inputs = [(OperandType.tensor(code, logits.shape), logits),
              (OperandType.scalar(OperandCode.INT32), Input(count)) if count_input else int_scalar(count),
              int_vec(seeds)]
    (y,) = run_op(MULTINOMIAL, inputs, [OperandType.tensor(I32, out_dims or (logits.shape[0], count))])
    assert y.dtype == np.int32 and y.shape == (logits.shape[0], count)
    return y


@pytest.mark.parametrize("code", [F32, F16], ids=IDS.get)
@pytest.mark.parametrize("seeds", [(37, 42), (-5, 3)])
def test_random_multinomial_against_the_documented_draw(code, seeds):
    logits = rng.standard_normal((3, 6)).astype(np.float16 if code == F16 else np.float32)
    y = run_multinomial(code, logits, 7, seeds)  # 7 samples: rows start mid-block
    np.testing.assert_array_equal(y, expected_samples(logits.astype(np.float32), 7, seeds))


def test_random_multinomial_is_deterministic_per_seed():
    logits = np.zeros((2, 50), np.float32)
    a = run_multinomial(F32, logits, 40, (1, 2))
    np.testing.assert_array_equal(a, run_multinomial(F32, logits, 40, (1, 2)))
    assert not np.array_equal(a, run_multinomial(F32, logits, 40, (2, 1)))
    assert not np.array_equal(a[0], a[1])  # the rows continue one stream


def test_random_multinomial_frequencies_follow_softmax():
    logits = np.array([[0.0, 1.0, 2.0, -1.0], [3.0, 3.0, 0.0, -2.0]], np.float32)
    y = run_multinomial(F32, logits, 20000, (11, 13))
    for b in range(2):
        p = np.exp(logits[b]) / np.exp(logits[b]).sum()
        freq = np.bincount(y[b], minlength=4) / y.shape[1]
        assert np.max(np.abs(freq - p)) < 0.025


def test_random_multinomial_never_draws_non_finite_logits():
    logits = np.array([[-np.inf, 0.0, np.nan, 0.0, np.inf], [-np.inf] * 5], np.float32)
    y = run_multinomial(F32, logits, 200, (4, 4))
    assert set(y[0].tolist()) == {1, 3}
    assert (y[1] == 5).all()  # no finite logit: the class count, as NNAPI's kernel returns
    np.testing.assert_array_equal(y, expected_samples(logits, 200, (4, 4)))


def test_random_multinomial_zero_seeds_draw_valid_classes():
    logits = np.zeros((1, 3), np.float32)
    y = run_multinomial(F32, logits, 64, (0, 0))
    assert ((y >= 0) & (y < 3)).all()


def test_random_multinomial_sample_count_from_a_model_input():
    logits = rng.standard_normal((2, 5)).astype(np.float32)
    y = run_multinomial(F32, logits, 9, (8, 9), count_input=True, out_dims=(0, 0))
    np.testing.assert_array_equal(y, expected_samples(logits, 9, (8, 9)))


def test_random_multinomial_build_time_shape_inference():
    inputs = [(OperandType.tensor(F16, (3, 0)), Input()), int_scalar(11), int_vec([1, 2])]
    (out,) = inferred_output_types(MULTINOMIAL, inputs, [OperandType.tensor(I32, (0, 0))])
    assert out.dimensions == (3, 11)
    inputs[1] = (OperandType.scalar(OperandCode.INT32), Input())
    (out,) = inferred_output_types(MULTINOMIAL, inputs, [OperandType.tensor(I32, (0, 0))])
    assert out.dimensions == (0, 0)


def test_random_multinomial_rejects_bad_operands():
    logits = (OperandType.tensor(F32, (2, 3)), np.zeros((2, 3), np.float32))
    out = [OperandType.tensor(I32, (2, 4))]
    expect_error(MULTINOMIAL, [logits, int_scalar(4)], out, "inputs")
    expect_error(MULTINOMIAL, [(OperandType.tensor(F32, (6,)), np.zeros(6, np.float32)), int_scalar(4),
                               int_vec([1, 2])], out, "input 0", "rank 1")
    expect_error(MULTINOMIAL, [(OperandType.tensor(I32, (2, 3)), np.zeros((2, 3), np.int32)), int_scalar(4),
                               int_vec([1, 2])], out, "input 0", "TENSOR_INT32 not allowed")
    expect_error(MULTINOMIAL, [logits, int_scalar(0), int_vec([1, 2])], [OperandType.tensor(I32, (2, 1))],
                 "input 1", "at least 1, got 0")
    expect_error(MULTINOMIAL, [logits, (OperandType.scalar(OperandCode.FLOAT32), 4.0), int_vec([1, 2])], out,
                 "input 1", "FLOAT32 not allowed")
    expect_error(MULTINOMIAL, [logits, int_scalar(4), int_vec([1, 2, 3])], out, "input 2", "2 values, got 3")
    expect_error(MULTINOMIAL, [logits, int_scalar(4), int_vec([[1, 2]])], out, "input 2", "1-D")
    expect_error(MULTINOMIAL, [logits, int_scalar(4), int_vec([1, 2])], [OperandType.tensor(F32, (2, 4))],
                 "output 0", "TENSOR_FLOAT32 not allowed")
    expect_error(MULTINOMIAL, [logits, int_scalar(4), int_vec([1, 2])], [OperandType.tensor(I32, (2, 5))],
                 "output 0", "[2, 4]")


def test_random_multinomial_seed_count_checked_at_run_time():
    logits = (OperandType.tensor(F32, (1, 3)), np.zeros((1, 3), np.float32))
    seeds = (OperandType.tensor(I32, (0,)), np.array([1, 2, 3], np.int32))
    expect_error(MULTINOMIAL, [logits, int_scalar(2), seeds], [OperandType.tensor(I32, (1, 2))], "input 2",
                 "2 values, got 3", result=ResultCode.OP_FAILED)
