"""Helpers shared by the element-wise kernels of activations/softmax/cast/quantize (not an op module)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ._fp_errors import ignoring_fp_errors
from .base import OperationContext


def float_kernel(x: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Evaluate `fn` on a float tensor and round once to the tensor's own type.

    float16 is computed in float32 (as NNAPI's kernels do), float32 in float64: the result is the
    correctly rounded value of the math function in every practical case.
    """
    work = np.float32 if x.dtype == np.float16 else np.float64
    return ignoring_fp_errors(lambda: np.asarray(fn(x.astype(work))).astype(x.dtype))


def check_quant_output(ctx: OperationContext, scale: float, zero_point: int, output: int = 0) -> None:
    """NNAPI-mandated output quantization (LOGISTIC, TANH, SOFTMAX)."""
    t = ctx.output_type(output)
    ctx.check(np.float32(t.scale) == np.float32(scale) and t.zero_point == zero_point,
              f"{t.code.name} output must have scale {scale:g} and zeroPoint {zero_point} "
              f"(got scale {t.scale:g}, zeroPoint {t.zero_point})", output=output)
