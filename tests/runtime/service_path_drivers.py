"""Drivers for the service execution-path tests, built inside service processes from references such as
"service_path_drivers:recording_driver" (tests/runtime is on the child's sys.path through PYTHONPATH).

`recording_driver` appends one line per driver method called (execute_synchronously, execute, burst_open,
burst_execute, burst_close, execute_fenced) to a log file, so that a test can see from outside which of
the driver's own methods a hosted execution reached. `async_mode` gives its asynchronous execute() a bug:
"never" (the callback is never notified), "raise" (execute() raises), "no-callback" (returns None).
"""
from __future__ import annotations

import os
import sys

from mlts.runtime import Capabilities, DeviceType
from mlts.runtime.drivers import KernelDriver, KernelPreparedModel
from mlts.runtime.drivers.base import BurstContext, ExecutionCallback


def _log(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


class RecordingDriver(KernelDriver):
    def __init__(self, name: str, log_path: str, async_mode: str = "ok", chatter_bytes: int = 0) -> None:
        super().__init__(name, Capabilities.uniform(0.5, 0.5), device_type=DeviceType.ACCELERATOR)
        self.log_path, self.async_mode, self.chatter_bytes = log_path, async_mode, chatter_bytes

    def prepare_model(self, model, preference, priority, deadline, cache):
        if self.chatter_bytes:  # far more than a pipe holds: the service must never block on its output
            sys.stderr.write(("x" * 99 + "\n") * (self.chatter_bytes // 100))
            sys.stderr.flush()
        prepared = super().prepare_model(model, preference, priority, deadline, cache)
        return RecordingPrepared(self, prepared.model)


class RecordingPrepared(KernelPreparedModel):
    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        _log(self.driver.log_path, "execute_synchronously")
        return super().execute_synchronously(request, measure, deadline, loop_timeout_ns)

    def execute(self, request, measure, deadline, loop_timeout_ns):
        _log(self.driver.log_path, "execute")
        mode = self.driver.async_mode
        if mode == "never":
            return ExecutionCallback()  # never notified
        if mode == "raise":
            raise RuntimeError("injected failure in execute()")
        if mode == "no-callback":
            return None
        callback = ExecutionCallback()
        callback.notify(KernelPreparedModel.execute_synchronously(self, request, measure, deadline, loop_timeout_ns))
        return callback

    def configure_execution_burst(self):
        _log(self.driver.log_path, "burst_open")
        return RecordingBurst(self)

    def execute_fenced(self, request, wait_for, measure, deadline, loop_timeout_ns, timeout_after_fence_ns):
        _log(self.driver.log_path, "execute_fenced")
        return super().execute_fenced(request, wait_for, measure, deadline, loop_timeout_ns, timeout_after_fence_ns)


class RecordingBurst(BurstContext):
    def execute(self, request, measure, deadline, loop_timeout_ns):
        _log(self.prepared.driver.log_path, "burst_execute")
        return KernelPreparedModel.execute_synchronously(self.prepared, request, measure, deadline, loop_timeout_ns)

    def close(self):
        _log(self.prepared.driver.log_path, "burst_close")


def recording_driver(name: str, log_path: str, async_mode: str = "ok", chatter_bytes: int = 0) -> RecordingDriver:
    return RecordingDriver(name, log_path, async_mode, chatter_bytes)
