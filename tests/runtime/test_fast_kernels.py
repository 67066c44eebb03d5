"""mlts-fast's compiled 8-bit kernels against the reference's own arithmetic, value for value.

Whole operations are checked against nnapi-reference in test_fast_driver.py; here, the pieces whose
inputs a few operations cannot cover: every row sum the quantized SOFTMAX may have to invert.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from mlts.runtime.drivers.fast.kernels_quant import reciprocal_of_sum
from mlts.runtime.ops.softmax import reciprocals_of_sums


@njit
def _reciprocals(sums):
    scales = np.empty_like(sums)
    shifts = np.empty_like(sums)
    for i in range(sums.shape[0]):
        scales[i], shifts[i] = reciprocal_of_sum(sums[i])
    return scales, shifts


def test_softmax_reciprocal_of_every_kind_of_row_sum_matches_the_reference():
    """Sums of one contribution (2**19, exp(0) in Q12.19) and of thousands (they wrap past int32),
    every power of two and its neighbours, the int32 extremes, and random int32 values."""
    powers = np.array([1 << b for b in range(31)], dtype=np.int64)
    edges = np.concatenate([powers - 1, powers, powers + 1, -powers, [0, -1, 2**31 - 1, -(2**31)],
                            np.arange(1, 4096, dtype=np.int64) << 19])
    random = np.random.default_rng(5).integers(-(2**31), 2**31, 200_000, dtype=np.int64)
    sums = np.concatenate([edges, random]).astype(np.int64)
    scales, shifts = _reciprocals(sums)
    expected_scales, expected_shifts = reciprocals_of_sums(sums)
    np.testing.assert_array_equal(scales, expected_scales)
    np.testing.assert_array_equal(shifts, expected_shifts)
