"""A test driver that is really N times slower: nnapi-reference's kernels, then a wait of (N - 1) times
what they took, so every execution costs N times its own work whatever the machine is doing.

The wait spins on the clock rather than sleeping: on this shared virtual machine a process that sleeps
between executions found its next kernels 1.5-2x slower at random (measured: x1.30 runs took 1.3 to
2.5 times as long), so a sleeping driver was not the slowdown it claimed to be.

benchmarks/ci_gate.py builds regressions with it: the same device name `slowed-cpu` from three factories,
so `mlts compare` pairs a baseline run of `create` with a current run of `create_1_15` or `create_1_30`:

    mlts benchmark --quick --driver benchmarks/slowed_driver.py:create_1_30 --drivers slowed-cpu

`create_b` and `create_b_1_30` are the same builds named `slowed-cpu-b`, for `mlts benchmark --ab`.
"""
from __future__ import annotations

import time

from mlts.runtime.drivers.kernel_driver import KernelDriver, KernelPreparedModel
from mlts.runtime.hal import BufferToken, Capabilities, IExecution

NAME = "slowed-cpu"


def _slowed(factor: float, run, *args):
    """run(*args), then a spin of (factor - 1) times what it took."""
    start = time.perf_counter()
    result = run(*args)
    own = time.perf_counter() - start
    until = time.perf_counter() + (factor - 1.0) * own
    while time.perf_counter() < until:
        pass
    return result


class SlowedExecution(IExecution):
    """The kernels' reusable execution, slowed as every other run: a reusable Execution of this driver is
    `factor` times nnapi-reference's reusable execution, not its per-call path."""

    def __init__(self, inner: IExecution, factor: float) -> None:
        self.inner = inner
        self.factor = factor

    def execute_synchronously(self, deadline):
        return _slowed(self.factor, self.inner.execute_synchronously, deadline)

    def close(self) -> None:
        self.inner.close()


class SlowedPreparedModel(KernelPreparedModel):
    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        return _slowed(self.driver.factor, super().execute_synchronously, request, measure, deadline, loop_timeout_ns)

    def create_reusable_execution(self, request, measure, loop_timeout_ns):
        if any(isinstance(pool, BufferToken) for pool in request.pools):
            return super().create_reusable_execution(request, measure, loop_timeout_ns)
        return SlowedExecution(self.kernel_execution(request, measure, loop_timeout_ns), self.driver.factor)


class SlowedDriver(KernelDriver):
    """Every operation nnapi-reference has, `factor` times slower; no compilation cache (so a run does
    not time cache preparation it would not need)."""

    def __init__(self, factor: float, name: str = NAME) -> None:
        super().__init__(name, Capabilities.uniform(factor, factor), version=f"x{factor:g}")
        self.factor = float(factor)

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return (0, 0)

    def prepare_model(self, model, preference, priority, deadline, cache):
        prepared = super().prepare_model(model, preference, priority, deadline, None)
        return SlowedPreparedModel(self, prepared.model)


def create() -> SlowedDriver:
    """The baseline build: nnapi-reference's speed."""
    return SlowedDriver(1.0)


def create_1_15() -> SlowedDriver:
    return SlowedDriver(1.15)


def create_1_30() -> SlowedDriver:
    return SlowedDriver(1.30)


# Second builds under another name, for paired runs against `create`: `--ab slowed-cpu,slowed-cpu-b`.
def create_b() -> SlowedDriver:
    return SlowedDriver(1.0, f"{NAME}-b")


def create_b_1_30() -> SlowedDriver:
    return SlowedDriver(1.30, f"{NAME}-b")
