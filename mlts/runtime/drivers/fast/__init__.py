"""mlts-fast: an optimized CPU driver that compiles a model into an execution plan at preparation.

See `driver.py` (the HAL driver), `operation_table.py` (one record per operation it compiles,
registered by the steps modules), `support.py` (what it takes), `plan.py` (compilation and
workspaces), `steps_*.py` (the steps of each operation, and their registrations) and `kernels_*.py`
(the compiled loops).
"""
from .driver import FAST_DEVICE_NAME, FastDriver, FastPreparedModel

__all__ = ["FAST_DEVICE_NAME", "FastDriver", "FastPreparedModel"]
