"""A driver without the HAL's per-operation profiling extension, for the profiling tests: the CPU kernels
behind a prepared model that implements execute_synchronously only. Also a driver spec:
`support.profiling_drivers:no_profiling_driver` (in-process)."""
from __future__ import annotations

from mlts.runtime import get_device
from mlts.runtime.drivers import KernelDriver
from mlts.runtime.drivers.base import PreparedModel


class PlainPreparedModel(PreparedModel):
    def __init__(self, inner) -> None:
        self.inner = inner

    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        return self.inner.execute_synchronously(request, measure, deadline, loop_timeout_ns)


class NoProfilingDriver(KernelDriver):
    def prepare_model(self, model, preference, priority, deadline, cache):
        return PlainPreparedModel(super().prepare_model(model, preference, priority, deadline, cache))


def no_profiling_driver(name: str = "no-profiling") -> NoProfilingDriver:
    """A driver like nnapi-reference (its capabilities), without the extension."""
    return NoProfilingDriver(name, get_device("nnapi-reference").capabilities)
