"""Drivers for the driver-service tests, built inside service processes from references such as
"service_test_drivers:kernel_driver" (tests/runtime is on the child's sys.path through PYTHONPATH).

They crash the way real drivers do: os.abort() in preparation or execution (optionally after a delay,
so that other calls are in flight), a factory that exits, an execution that hangs past its deadline.
"""
from __future__ import annotations

import os
import resource
import time
from typing import Iterable

from mlts.runtime import Capabilities, DeviceType, OperationCode
from mlts.runtime.drivers import KernelDriver, KernelPreparedModel


def kernel_driver(name: str, exec_time: float = 0.5, operations: Iterable[int] | None = None,
                  memory_domains: bool = True) -> KernelDriver:
    """The reference kernels under another name, declared faster than nnapi-reference (so preferred);
    `memory_domains=False`: a driver that cannot allocate device buffers."""
    ops = None if operations is None else [OperationCode(o) for o in operations]
    return KernelDriver(name, Capabilities.uniform(exec_time, exec_time), device_type=DeviceType.ACCELERATOR,
                        operations=ops, memory_domains=memory_domains)


def two_drivers() -> list[KernelDriver]:
    """A factory that makes several drivers: the service hosts the one it is told to."""
    return [kernel_driver("svc-first"), kernel_driver("svc-second")]


def exiting_factory() -> KernelDriver:
    """A driver whose construction kills its process."""
    os._exit(3)


class CrashingDriver(KernelDriver):
    """Kernels that crash the service process with os.abort() at `at` ("prepare" or "execute"),
    after `delay_s`, only for models holding one of `crash_on` operations (None: every model)."""

    def __init__(self, name: str, at: str = "execute", exec_time: float = 0.5, delay_s: float = 0.0,
                 operations: Iterable[int] | None = None, crash_on: Iterable[int] | None = None) -> None:
        ops = None if operations is None else [OperationCode(o) for o in operations]
        super().__init__(name, Capabilities.uniform(exec_time, exec_time), device_type=DeviceType.ACCELERATOR,
                         operations=ops)
        self.at, self.delay_s = at, delay_s
        self.crash_on = None if crash_on is None else {OperationCode(o) for o in crash_on}

    def _crash(self, model) -> None:
        if self.crash_on is None or self.crash_on & {op.type for op in model.main.operations}:
            time.sleep(self.delay_s)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core files from the tests
            os.abort()

    def prepare_model(self, model, preference, priority, deadline, cache):
        if self.at == "prepare":
            self._crash(model)
        prepared = super().prepare_model(model, preference, priority, deadline, cache)
        return _CrashingPrepared(self, prepared) if self.at == "execute" else prepared


class _CrashingPrepared(KernelPreparedModel):
    def __init__(self, driver: CrashingDriver, inner: KernelPreparedModel) -> None:
        self.driver, self.model, self.graph = driver, inner.model, inner.graph

    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        self.driver._crash(self.model)
        return super().execute_synchronously(request, measure, deadline, loop_timeout_ns)


class HangingDriver(KernelDriver):
    """Executions sleep `sleep_s` whatever their deadline (a driver that ignores deadlines)."""

    def __init__(self, name: str, sleep_s: float = 30.0) -> None:
        super().__init__(name, Capabilities.uniform(0.5, 0.5), device_type=DeviceType.ACCELERATOR)
        self.sleep_s = sleep_s

    def prepare_model(self, model, preference, priority, deadline, cache):
        prepared = super().prepare_model(model, preference, priority, deadline, cache)
        sleep_s = self.sleep_s

        class Hanging(KernelPreparedModel):
            def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
                time.sleep(sleep_s)
                return super().execute_synchronously(request, measure, deadline, loop_timeout_ns)

        return Hanging(self, prepared.model)
