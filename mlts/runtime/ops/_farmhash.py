"""FarmHash Fingerprint64 (Geoff Pike's farmhash, its "na" 64-bit variant), vectorized with numpy.

LSH_PROJECTION hashes every (seed, input row) key with farmhash's Fingerprint64, a portable hash whose
value is fixed forever, so NNAPI's projections depend on its exact bits. This is a transcription of
the published algorithm (not of its code): keys of up to 16, 17..32, 33..64 bytes have closed forms;
longer keys go through a 64-byte block loop over a 56-byte state. Every key of one call has the same
length, so one numpy expression hashes them all at once (uint64 arithmetic wraps, as in C).
"""
from __future__ import annotations

import numpy as np

_MASK64 = (1 << 64) - 1
# Three primes between 2**63 and 2**64 that farmhash mixes with.
K0 = np.uint64(0xC3A5C85C97CB3127)
K1 = np.uint64(0xB492B66FBE98F273)
K2 = np.uint64(0x9AE16A3B2F90404F)
_SEED = 81  # the long-key loop's fixed seed


def _u64(value: int) -> np.uint64:
    return np.uint64(value & _MASK64)


def _rotr(v: np.ndarray, shift: int) -> np.ndarray:
    """Rotate right by `shift` bits (0 < shift < 64)."""
    return (v >> np.uint64(shift)) | (v << np.uint64(64 - shift))


def _shift_mix(v: np.ndarray) -> np.ndarray:
    return v ^ (v >> np.uint64(47))


def _mix16(u: np.ndarray, v: np.ndarray, mul: np.uint64) -> np.ndarray:
    """farmhash's Murmur-style combination of two 64-bit words under a multiplier."""
    a = _shift_mix((u ^ v) * mul)
    b = _shift_mix((v ^ a) * mul)
    return b * mul


def _words64(keys: np.ndarray, offset: int) -> np.ndarray:
    """The little-endian uint64 at byte `offset` of every key."""
    return np.ascontiguousarray(keys[:, offset:offset + 8]).view("<u8").reshape(-1).astype(np.uint64)


def _words32(keys: np.ndarray, offset: int) -> np.ndarray:
    return np.ascontiguousarray(keys[:, offset:offset + 4]).view("<u4").reshape(-1).astype(np.uint64)


def _up_to_16(keys: np.ndarray, n: int) -> np.ndarray:
    if n >= 8:
        mul = _u64(int(K2) + 2 * n)
        a = _words64(keys, 0) + K2
        b = _words64(keys, n - 8)
        c = _rotr(b, 37) * mul + a
        d = (_rotr(a, 25) + b) * mul
        return _mix16(c, d, mul)
    if n >= 4:
        mul = _u64(int(K2) + 2 * n)
        first = _words32(keys, 0)
        return _mix16(np.uint64(n) + (first << np.uint64(3)), _words32(keys, n - 4), mul)
    if n > 0:
        first = keys[:, 0].astype(np.uint64)
        middle = keys[:, n >> 1].astype(np.uint64)
        last = keys[:, n - 1].astype(np.uint64)
        y = first + (middle << np.uint64(8))
        z = np.uint64(n) + (last << np.uint64(2))
        return _shift_mix(y * K2 ^ z * K0) * K2
    return np.full(keys.shape[0], K2, dtype=np.uint64)


def _17_to_32(keys: np.ndarray, n: int) -> np.ndarray:
    mul = _u64(int(K2) + 2 * n)
    a = _words64(keys, 0) * K1
    b = _words64(keys, 8)
    c = _words64(keys, n - 8) * mul
    d = _words64(keys, n - 16) * K2
    return _mix16(_rotr(a + b, 43) + _rotr(c, 30) + d, a + _rotr(b + K2, 18) + c, mul)


def _33_to_64(keys: np.ndarray, n: int) -> np.ndarray:
    mul = _u64(int(K2) + 2 * n)
    a = _words64(keys, 0) * K2
    b = _words64(keys, 8)
    c = _words64(keys, n - 8) * mul
    d = _words64(keys, n - 16) * K2
    y = _rotr(a + b, 43) + _rotr(c, 30) + d
    z = _mix16(y, a + _rotr(b + K2, 18) + c, mul)
    e = _words64(keys, 16) * mul
    f = _words64(keys, 24)
    g = (y + _words64(keys, n - 32)) * mul
    h = (z + _words64(keys, n - 24)) * mul
    return _mix16(_rotr(e + f, 43) + _rotr(g, 30) + h, e + _rotr(f + a, 18) + g, mul)


def _weak_32(keys: np.ndarray, offset: int, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """farmhash's quick 16-byte digest of the 32 bytes at `offset` with two seeds."""
    w, x, y, z = (_words64(keys, offset + 8 * i) for i in range(4))
    a = a + w
    b = _rotr(b + a + z, 21)
    c = a
    a = a + x + y
    b = b + _rotr(a, 44)
    return a + z, b + c


def _longer(keys: np.ndarray, n: int) -> np.ndarray:
    """Keys over 64 bytes: 64-byte blocks, then the last 64 bytes (overlapping the last block) once more."""
    count = keys.shape[0]
    zeros = np.zeros(count, dtype=np.uint64)
    x = np.full(count, _SEED, dtype=np.uint64)
    y = np.full(count, _u64(_SEED * int(K1) + 113), dtype=np.uint64)
    z = _shift_mix(y * K2 + np.uint64(113)) * K2
    v0, v1, w0, w1 = zeros, zeros, zeros, zeros
    x = x * K2 + _words64(keys, 0)
    blocks_end = ((n - 1) // 64) * 64  # leaves 1..64 bytes for the tail
    for s in range(0, blocks_end, 64):
        x = _rotr(x + y + v0 + _words64(keys, s + 8), 37) * K1
        y = _rotr(y + v1 + _words64(keys, s + 48), 42) * K1
        x = x ^ w1
        y = y + v0 + _words64(keys, s + 40)
        z = _rotr(z + w0, 33) * K1
        v0, v1 = _weak_32(keys, s, v1 * K1, x + w0)
        w0, w1 = _weak_32(keys, s + 32, z + w1, y + _words64(keys, s + 16))
        x, z = z, x
    mul = K1 + ((z & np.uint64(0xFF)) << np.uint64(1))
    s = n - 64
    w0 = w0 + np.uint64((n - 1) & 63)
    v0 = v0 + w0
    w0 = w0 + v0
    x = _rotr(x + y + v0 + _words64(keys, s + 8), 37) * mul
    y = _rotr(y + v1 + _words64(keys, s + 48), 42) * mul
    x = x ^ (w1 * np.uint64(9))
    y = y + v0 * np.uint64(9) + _words64(keys, s + 40)
    z = _rotr(z + w0, 33) * mul
    v0, v1 = _weak_32(keys, s, v1 * mul, x + w0)
    w0, w1 = _weak_32(keys, s + 32, z + w1, y + _words64(keys, s + 16))
    x, z = z, x
    return _mix16(_mix16(v0, w0, mul) + _shift_mix(y) * K0 + z, _mix16(v1, w1, mul) + x, mul)


def fingerprint64(keys: np.ndarray) -> np.ndarray:
    """Fingerprint64 of each row of `keys` (a 2-D uint8 array, one key per row), as uint64."""
    keys = np.ascontiguousarray(keys, dtype=np.uint8)
    if keys.ndim != 2:
        raise ValueError(f"keys must be a 2-D byte array, got rank {keys.ndim}")
    n = keys.shape[1]
    with np.errstate(over="ignore"):
        if n <= 16:
            return _up_to_16(keys, n)
        if n <= 32:
            return _17_to_32(keys, n)
        if n <= 64:
            return _33_to_64(keys, n)
        return _longer(keys, n)


def fingerprint64_of_bytes(data: bytes) -> int:
    """Fingerprint64 of one byte string, as a Python int in [0, 2**64)."""
    keys = np.frombuffer(data, dtype=np.uint8).reshape(1, len(data))
    return int(fingerprint64(keys)[0])
