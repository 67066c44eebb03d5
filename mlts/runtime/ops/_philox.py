"""Philox4x32-10 as TensorFlow's PhiloxRandom / SimplePhilox generate it, vectorized with numpy.

NNAPI's RANDOM_MULTINOMIAL draws with TensorFlow's generator, so a seed must give the same stream here.
Philox (Salmon et al., SC'11, "Parallel random numbers: as easy as 1, 2, 3") encrypts a 128-bit
counter with a 64-bit key in ten rounds; each block is four uint32 words and the counter then steps
by one (carrying through its four words). TensorFlow seeds it from two 64-bit seeds: the first is the
key (low word first), the second the upper half of the counter (words 2 and 3); the lower half starts
at 0. Its SimplePhilox hands the words out one at a time in block order, and a uniform double in
[0, 1) takes two of them: the low 20 bits of the first and all 32 of the second become the 52-bit
mantissa of a double in [1, 2), minus 1.
"""
from __future__ import annotations

import numpy as np

_MASK32 = 0xFFFFFFFF
_MASK64 = (1 << 64) - 1
# The round multipliers and the key schedule's increments (Weyl constants) of the Philox paper.
MULTIPLIER_A = np.uint64(0xD2511F53)
MULTIPLIER_B = np.uint64(0xCD9E8D57)
KEY_STEP_A = 0x9E3779B9
KEY_STEP_B = 0xBB67AE85
ROUNDS = 10


def philox_blocks(key: tuple[int, int], counter: int, count: int) -> np.ndarray:
    """`count` Philox4x32-10 blocks, shape (count, 4) uint32: the encryptions of counters `counter`,
    `counter` + 1, ... (a 128-bit integer whose low 32 bits are word 0) under `key` (two uint32)."""
    counter &= (1 << 128) - 1
    low = np.uint64(counter & _MASK64) + np.arange(count, dtype=np.uint64)
    high = np.full(count, np.uint64(counter >> 64), dtype=np.uint64)
    high = high + (low < np.uint64(counter & _MASK64)).astype(np.uint64)  # the low half wrapped: carry
    mask = np.uint64(_MASK32)
    shift = np.uint64(32)
    words = [low & mask, low >> shift, high & mask, high >> shift]
    k0, k1 = key[0] & _MASK32, key[1] & _MASK32
    for r in range(ROUNDS):
        if r:
            k0, k1 = (k0 + KEY_STEP_A) & _MASK32, (k1 + KEY_STEP_B) & _MASK32
        product_a = MULTIPLIER_A * words[0]  # 32 x 32 bits: exact in uint64
        product_b = MULTIPLIER_B * words[2]
        words = [(product_b >> shift) ^ words[1] ^ np.uint64(k0), product_b & mask,
                 (product_a >> shift) ^ words[3] ^ np.uint64(k1), product_a & mask]
    return np.stack(words, axis=1).astype(np.uint32)


def seeded_state(seed: int, seed2: int) -> tuple[tuple[int, int], int]:
    """(key, counter) of TensorFlow's PhiloxRandom(seed, seed2), the seeds read as 64-bit two's
    complement (an int32 seed is sign-extended first, as C++ converts it)."""
    seed &= _MASK64
    seed2 &= _MASK64
    return (seed & _MASK32, seed >> 32), seed2 << 64


def uniform_doubles(seed: int, seed2: int, count: int) -> np.ndarray:
    """The first `count` SimplePhilox.RandDouble() values of a generator seeded (seed, seed2)."""
    key, counter = seeded_state(seed, seed2)
    blocks = philox_blocks(key, counter, (2 * count + 3) // 4)
    words = blocks.reshape(-1)[:2 * count].astype(np.uint64).reshape(count, 2)
    exponent_of_one = np.uint64(1023 << 52)
    mantissa = ((words[:, 0] & np.uint64(0xFFFFF)) << np.uint64(32)) | words[:, 1]
    return (exponent_of_one | mantissa).view(np.float64) - 1.0
