"""CTS/VTS acceptance rules of SPEC.md section 3."""
from __future__ import annotations

import numpy as np

from mlts.runtime import OperandCode

FLOAT32_ATOL = 1e-5
FLOAT32_RTOL = 5 * 1.1920928955078125e-7
FLOAT16_TOL = 5 * 0.0009765625
QUANT_TYPES = {OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
               OperandCode.TENSOR_QUANT8_SYMM, OperandCode.TENSOR_QUANT16_ASYMM, OperandCode.TENSOR_QUANT16_SYMM}


def assert_cts_close(actual, expected, code: OperandCode, *, relaxed: bool = False, max_quant_diff: int = 1) -> None:
    """Assert `actual` meets the CTS tolerance for operand type `code` against `expected`."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != expected {expected.shape}"
    if code in QUANT_TYPES:
        diff = np.abs(actual.astype(np.int64) - np.asarray(expected).astype(np.int64))
        assert diff.max(initial=0) <= max_quant_diff, f"quantized values differ by {diff.max()} (> {max_quant_diff})\n{actual}\n{expected}"
        return
    if code in (OperandCode.TENSOR_BOOL8, OperandCode.TENSOR_INT32, OperandCode.BOOL, OperandCode.INT32):
        np.testing.assert_array_equal(actual, expected)
        return
    if code in (OperandCode.TENSOR_FLOAT16, OperandCode.FLOAT16) or relaxed:
        atol = rtol = FLOAT16_TOL
    else:
        atol, rtol = FLOAT32_ATOL, FLOAT32_RTOL
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(e)
    ok = both_nan | (np.abs(e - a) <= atol + rtol * np.abs(e)) | ((a == e) & np.isinf(e))
    assert ok.all(), f"{int((~ok).sum())} values outside CTS tolerance (atol={atol}, rtol={rtol}); max abs diff {np.nanmax(np.abs(e - a))}"
