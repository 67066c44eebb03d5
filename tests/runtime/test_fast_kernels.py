"""mlts-fast's compiled 8-bit kernels against the reference's own arithmetic, value for value.

Whole operations are checked against nnapi-reference in test_fast_driver.py; here, the pieces whose
inputs a few operations cannot cover: every row sum the quantized SOFTMAX may have to invert, and
every accumulator the output requantization may meet (both its float64 and its int64 form).
"""
from __future__ import annotations

import numpy as np
from numba import njit

import pytest

from mlts.runtime.drivers.fast.kernels_quant import reciprocal_of_sum, requantize_rows
from mlts.runtime.drivers.fast.steps_conv import Requantizer
from mlts.runtime.ops.quant import multiply_by_quantized_multiplier, quantize_multiplier
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


def _requantization_case(seed: int, real_range: tuple[float, float], channels: int):
    """Per-channel multipliers from random real multipliers, a zero point, an activation range and
    int32 biases; sums v (before the bias) within the kernels' precondition |v + bias| << left < 2**31,
    dense around zero (every rounding tie of the small shifts), and sums at and around every
    threshold where the output steps (the exact ties of both roundings) or meets the clamp."""
    g = np.random.default_rng(seed)
    reals = np.exp(g.uniform(np.log(real_range[0]), np.log(real_range[1]), channels))
    pairs = [quantize_multiplier(float(r)) for r in reals]
    mult = np.array([m for m, _ in pairs], dtype=np.int64)
    shift = np.array([s for _, s in pairs], dtype=np.int64)
    zero_point = int(g.integers(-20, 40))
    lo, hi = int(g.integers(-128, 1)), int(g.integers(100, 256))
    bias = g.integers(-2**12, 2**12, channels)
    limit = (2**31 - 1) >> int(np.maximum(shift, 0).max())
    bound = min(limit - int(np.abs(bias).max()), 2**24 - 1)  # exact in a float32 accumulator too
    dense = np.arange(-(2**15), 2**15)
    # where the output steps: v * m * 2**left around odd multiples of 2**(30 + right)
    right = np.maximum(-shift, 0)
    steps = np.arange(-300, 300)[:, None] * 2 + 1
    ties = (steps << (30 + right)) // (mult << np.maximum(shift, 0))[None, :] - bias[None, :]
    ties = (ties[:, :, None] + np.arange(-2, 3)).reshape(-1, channels)
    random = g.integers(-bound, bound + 1, (20_000, channels))
    sums = np.concatenate([np.repeat(dense[:, None], channels, axis=1), ties, random,
                           np.full((2, channels), [[-bound], [bound]])])
    sums = np.clip(sums, -bound, bound)
    return (mult, shift), zero_point, lo, hi, bias, sums


@pytest.mark.parametrize("seed,real_range,exact", [(1, (1e-4, 0.9), True), (2, (2e-3, 0.02), True),
                                                   (3, (0.3, 30.0), True), (4, (1e-9, 1e-7), False)])
@pytest.mark.parametrize("acc_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("out_dtype,centred", [(np.uint8, False), (np.int8, False), (np.float32, True)])
def test_requantization_matches_the_reference_on_every_kind_of_sum(seed, real_range, exact, acc_dtype, out_dtype,
                                                                   centred):
    """Both forms of the output requantization against the reference's own multiply_by_quantized_multiplier,
    zero point and clamp, bit for bit. Multipliers below and above 1 (left shifts) take the float64
    form; tiny ones (shifts beyond its proof) the int64 form, which must agree all the same."""
    channels = 24
    multipliers, zero_point, lo, hi, bias, sums = _requantization_case(seed, real_range, channels)
    if out_dtype is np.uint8:
        lo, hi, zero_point = max(lo, 0), hi, abs(zero_point)
    else:
        hi = min(hi, 127)
    requantizer = Requantizer(multipliers, channels, zero_point, lo, hi, bias)
    assert requantizer.exact == exact
    expected = multiply_by_quantized_multiplier(sums + bias, *multipliers) + zero_point
    expected = np.clip(expected, lo, hi)
    out_sub = zero_point if centred else 0
    out = np.empty(sums.shape, dtype=out_dtype)
    bias_t = np.tile(bias, -(-128 // channels))
    requantize_rows(sums.astype(acc_dtype), bias_t, requantizer.rq, requantizer.fq, requantizer.exact, zero_point,
                    lo, hi, out, out_sub)
    np.testing.assert_array_equal(out.astype(np.int64) + out_sub, expected)


def test_the_kernel_cache_is_keyed_by_every_kernel_module(tmp_path):
    """numba does not invalidate a cached kernel when a function it inlines from another file changes;
    the cache directory is named after all kernel sources, so a change to any of them gets a new one."""
    import shutil
    from pathlib import Path

    from mlts.runtime.drivers.fast import jit

    package = Path(jit.__file__).parent
    for name in jit.KERNEL_MODULES:
        shutil.copy(package / name, tmp_path / name)
    first = jit.cache_dir_for(tmp_path)
    assert jit.cache_dir_for(tmp_path) == first  # stable while nothing changes
    assert jit.cache_dir_for(package) == jit.CACHE_DIR
    seen = {first}
    for name in jit.KERNEL_MODULES:
        with open(tmp_path / name, "a") as f:
            f.write("\n# changed\n")
        seen.add(jit.cache_dir_for(tmp_path))
    assert len(seen) == 1 + len(jit.KERNEL_MODULES)


def test_compiled_kernels_are_cached_in_the_keyed_directory():
    from pathlib import Path

    from mlts.runtime.drivers.fast import jit, kernels_quant

    kernels_quant.reciprocal_of_sum(np.int32(1 << 20))  # compiled (or loaded) now, if not before
    cached = {p.name for p in Path(jit.CACHE_DIR).rglob("*.nbi")}
    assert any(name.startswith("kernels_quant.reciprocal_of_sum") for name in cached), sorted(cached)[:5]


def test_an_unwritable_package_caches_its_kernels_in_the_users_cache_directory(tmp_path, monkeypatch):
    import shutil
    from pathlib import Path

    from mlts.runtime.drivers.fast import jit

    package = tmp_path / "installed"
    package.mkdir()
    for name in jit.KERNEL_MODULES:
        shutil.copy(Path(jit.__file__).parent / name, package / name)
    writable = jit.cache_dir_for(package)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.setattr(jit.os, "access", lambda path, mode: False)  # as for a non-root user's site-packages
    unwritable = jit.cache_dir_for(package)
    assert Path(writable).parent == package / "__pycache__"
    assert Path(unwritable).parent == tmp_path / "user-cache" / "mlts"
    assert Path(unwritable).name == Path(writable).name  # the same key
