"""NNAPI holds scales and float scalars (beta, ...) as float32: kernels derive their fixed-point
multipliers from those float32 values, not from the Python doubles a model was built with. Every
reference kernel and mlts-fast round such values through this one helper (a private helper module,
not an operation).
"""
from __future__ import annotations

import numpy as np


def as_float32(x: float) -> float:
    """`x` as NNAPI stores it (rounded to float32), back as a Python float."""
    return float(np.float32(x))
