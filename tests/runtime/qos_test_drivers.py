"""A kernel driver whose runs can be held at a checkpoint, for deterministic priority and deadline tests,
in this process or in a driver service ("qos_test_drivers:gated_driver").

A run is tagged by the first element of its input 0 (an integer-valued float). Control goes through
files in `gate_dir`, so that a test can drive a driver in another process the same way:
- `<tag>.gate` present when the run starts: at its first checkpoint the run creates `<tag>.entered`
  and waits until `<tag>.go` exists;
- `<tag>.extra` holding seconds: the run spends that much longer before its first operation.
Every checkpoint also spends `op_sleep_s`, so that runs take a known time; `<tag>.done` is created
when a run finishes (whatever its outcome), `<tag>.checkpoints` holds how many checkpoints it reached.
"""
from __future__ import annotations

import os
import time

import numpy as np

from mlts.runtime import Capabilities, DeviceType
from mlts.runtime import qos
from mlts.runtime.drivers import KernelDriver, KernelPreparedModel

GATE_LIMIT_S = 30.0  # a forgotten gate ends a test instead of hanging it


class GatedDriver(KernelDriver):
    def __init__(self, name: str, gate_dir: str, op_sleep_s: float = 0.0, exec_time: float = 0.5,
                 operations=None) -> None:
        super().__init__(name, Capabilities.uniform(exec_time, exec_time), device_type=DeviceType.ACCELERATOR,
                         operations=operations)
        self.gate_dir = gate_dir
        self.op_sleep_s = op_sleep_s

    def prepare_model(self, model, preference, priority, deadline, cache):
        prepared = super().prepare_model(model, preference, priority, deadline, cache)
        return GatedPrepared(self, prepared.model)


class GatedPrepared(KernelPreparedModel):
    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        tag = _tag(request)
        hook = _Hook(self.driver, tag)
        try:
            with qos.checkpoint_scope(hook):
                return super().execute_synchronously(request, measure, deadline, loop_timeout_ns)
        finally:
            hook.write("checkpoints", str(hook.count))
            hook.write("done", "")


class _Hook:
    def __init__(self, driver: GatedDriver, tag: int) -> None:
        self.driver, self.tag, self.count = driver, tag, 0
        self.gated = self.exists("gate")

    def path(self, what: str) -> str:
        return os.path.join(self.driver.gate_dir, f"{self.tag}.{what}")

    def exists(self, what: str) -> bool:
        return os.path.exists(self.path(what))

    def write(self, what: str, text: str) -> None:
        with open(self.path(what) + ".tmp", "w") as f:
            f.write(text)
        os.replace(self.path(what) + ".tmp", self.path(what))

    def __call__(self) -> None:
        if self.count == 0:
            if self.gated:
                self.write("entered", "")
                end = time.monotonic() + GATE_LIMIT_S
                while not self.exists("go") and time.monotonic() < end:
                    time.sleep(0.002)
            if self.exists("extra"):
                with open(self.path("extra")) as f:
                    time.sleep(float(f.read()))
        self.count += 1
        if self.driver.op_sleep_s:
            time.sleep(self.driver.op_sleep_s)


def _tag(request) -> int:
    arg = request.inputs[0]
    pool = request.pools[arg.location.pool_index]
    return int(round(float(pool.array(arg.location.offset, np.dtype(np.float32), (1,))[0])))


def gated_driver(name: str, gate_dir: str, op_sleep_s: float = 0.0) -> GatedDriver:
    return GatedDriver(name, gate_dir, op_sleep_s)
