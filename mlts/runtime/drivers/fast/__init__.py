"""mlts-fast: an optimized CPU driver that compiles a model into an execution plan at preparation.

See `driver.py` (the HAL driver), `support.py` (what it takes), `plan.py` (compilation and
workspaces), `steps_*.py` (one step per operation) and `kernels_*.py` (the compiled loops).
"""
from .driver import FAST_DEVICE_NAME, FastDriver, FastPreparedModel

__all__ = ["FAST_DEVICE_NAME", "FastDriver", "FastPreparedModel"]
