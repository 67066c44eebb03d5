"""Vendor-style partial drivers, each with one realistic bug, written from the README as a driver
vendor would: the usual shape of an NPU driver, accelerating only CONV_2D, DEPTHWISE_CONV_2D, ADD and
AVERAGE_POOL_2D (float32 and 8-bit asymmetric), so the runtime runs every other operation on
nnapi-reference. They are what the suite must catch on a partial driver; `create_correct` is the
same driver without a bug, which must pass everything.

Use one as a vendor would: `mlts stress --driver tests/partial_drivers.py:create_race --drivers npu-race`.
Bugs, one per factory (the driver name is `npu-<bug>`):

    correct    no bug
    race       every execution stages its outputs through one scratch buffer shared by all executions,
               without a lock: concurrent executions overwrite each other's results
    leak       keeps 1 MiB (written, so resident) per execution
    throttle   each execution is 2% slower than the one before (a device heating up; its runs take at
               least 2 ms)
    hang       the `HANG_AFTER`-th execution and every later one block forever
    timing     reports timing even when the caller did not ask for it
    early      asynchronous `execute()` signals completion before the outputs are written
    crash      the process aborts on the `CRASH_AFTER`-th execution (hidden by CPU fallback under
               all-devices unless the suite records fallbacks)
    pool       AVERAGE_POOL_2D rounds wrongly: every output of a partition holding one is off by
               0.05 (float) or 2 steps (8-bit), for the random-graph shrinker to find
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from mlts.runtime import DeviceType, OperandCode, OperationCode, ResultCode
from mlts.runtime.drivers.kernel_driver import KernelDriver, KernelPreparedModel
from mlts.runtime.hal import Capabilities, ExecutionResult, OutputShape, Timing
from mlts.runtime.drivers.base import ExecutionCallback
from mlts.runtime.hal.validation import validate_preparation_arguments

NPU_OPERATIONS = (OperationCode.CONV_2D, OperationCode.DEPTHWISE_CONV_2D, OperationCode.ADD,
                  OperationCode.AVERAGE_POOL_2D)
NPU_TYPES = (OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_QUANT8_ASYMM)
HANG_AFTER = 3
CRASH_AFTER = 3
LEAK_BYTES = 1 << 20
THROTTLE_PER_RUN = 0.02
DEVICE_MIN_S = 0.002  # a throttling device's run takes at least this long (an NPU's launch latency)


class PartialNpuDriver(KernelDriver):
    """The shared CPU kernels behind an NPU-like operation list; subclasses add one bug each."""

    bug = "correct"

    def __init__(self) -> None:
        super().__init__(f"npu-{self.bug}", Capabilities.uniform(0.1, 0.1, types=NPU_TYPES + (
                             OperandCode.INT32, OperandCode.FLOAT32, OperandCode.TENSOR_INT32)),
                         device_type=DeviceType.ACCELERATOR, operations=NPU_OPERATIONS, operand_types=NPU_TYPES,
                         memory_domains=False)
        self.executions = 0
        self.lock = threading.Lock()

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return (0, 0)  # no compilation caching, as many NPU drivers

    def prepare_model(self, model, preference, priority, deadline, cache):
        validate_preparation_arguments(preference, priority, deadline, cache, f"{self.name}: prepare_model")
        prepared = super().prepare_model(model, preference, priority, deadline, None)  # it caches nothing
        return self.prepared_class(self, prepared.model)

    prepared_class = KernelPreparedModel

    def count(self) -> int:
        with self.lock:
            self.executions += 1
            return self.executions


class _Prepared(KernelPreparedModel):
    def run(self, request, measure, deadline, loop_timeout_ns) -> ExecutionResult:
        return KernelPreparedModel.execute_synchronously(self, request, measure, deadline, loop_timeout_ns)


# -- race -------------------------------------------------------------------------------------------
_SCRATCH = np.zeros(1 << 20, np.uint8)  # one buffer for every execution: the bug


class _RacePrepared(_Prepared):
    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        result = self.run(request, measure, deadline, loop_timeout_ns)
        if result.status != ResultCode.NO_ERROR:
            return result
        for arg in request.outputs:
            pool = request.pools[arg.location.pool_index]
            out = pool.array(arg.location.offset, np.uint8, (arg.location.length,))
            n = min(out.size, _SCRATCH.size)
            _SCRATCH[:n] = 0              # "clear the staging area"
            time.sleep(0.0005)
            _SCRATCH[:n] += out[:n]       # "accumulate the device's result"
            time.sleep(0.0005)
            out[:n] = _SCRATCH[:n]        # "copy back": another execution may have cleared or added meanwhile
        return result


class RaceDriver(PartialNpuDriver):
    bug = "race"
    prepared_class = _RacePrepared


# -- leak -------------------------------------------------------------------------------------------
class _LeakPrepared(_Prepared):
    kept: list = []

    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        block = np.ones(LEAK_BYTES, np.uint8)  # written: resident, not just reserved
        _LeakPrepared.kept.append(block)
        return self.run(request, measure, deadline, loop_timeout_ns)


class LeakDriver(PartialNpuDriver):
    bug = "leak"
    prepared_class = _LeakPrepared


# -- throttle ---------------------------------------------------------------------------------------
class _ThrottlePrepared(_Prepared):
    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        n = self.driver.count()
        start = time.perf_counter()
        result = self.run(request, measure, deadline, loop_timeout_ns)
        own = time.perf_counter() - start
        device = max(own, DEVICE_MIN_S)  # what this device's run costs before it heats up
        time.sleep(min(1.0, device * ((1.0 + THROTTLE_PER_RUN) ** n - 1.0)))
        return result


class ThrottleDriver(PartialNpuDriver):
    bug = "throttle"
    prepared_class = _ThrottlePrepared


# -- hang -------------------------------------------------------------------------------------------
class _HangPrepared(_Prepared):
    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        if self.driver.count() >= HANG_AFTER:
            while True:  # a device that stopped answering, deadlines ignored
                time.sleep(3600)
        return self.run(request, measure, deadline, loop_timeout_ns)


class HangDriver(PartialNpuDriver):
    bug = "hang"
    prepared_class = _HangPrepared


# -- timing -----------------------------------------------------------------------------------------
class _TimingPrepared(_Prepared):
    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        result = self.run(request, True, deadline, loop_timeout_ns)  # measures whatever was asked
        return result


class TimingDriver(PartialNpuDriver):
    bug = "timing"
    prepared_class = _TimingPrepared


# -- early ------------------------------------------------------------------------------------------
class _EarlyPrepared(_Prepared):
    def execute(self, request, measure, deadline, loop_timeout_ns):
        callback = ExecutionCallback()
        main = self.model.main
        shapes = [OutputShape(tuple(main.operands[i].type.dimensions), True) for i in main.output_indexes]
        callback.notify(ExecutionResult(ResultCode.NO_ERROR, shapes, Timing()))  # "done" before any work

        def late() -> None:
            time.sleep(0.05)
            self.run(request, measure, deadline, loop_timeout_ns)

        threading.Thread(target=late, daemon=True).start()
        return callback


class EarlyDriver(PartialNpuDriver):
    bug = "early"
    prepared_class = _EarlyPrepared


# -- crash ------------------------------------------------------------------------------------------
class _CrashPrepared(_Prepared):
    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        if self.driver.count() >= CRASH_AFTER:
            os.abort()
        return self.run(request, measure, deadline, loop_timeout_ns)


class CrashDriver(PartialNpuDriver):
    bug = "crash"
    prepared_class = _CrashPrepared


# -- pool -------------------------------------------------------------------------------------------
class _PoolPrepared(_Prepared):
    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        result = self.run(request, measure, deadline, loop_timeout_ns)
        main = self.model.main
        if result.status != ResultCode.NO_ERROR or all(op.type != OperationCode.AVERAGE_POOL_2D
                                                       for op in main.operations):
            return result
        for index, arg in zip(main.output_indexes, request.outputs):
            t = main.operands[index].type
            out = request.pools[arg.location.pool_index].array(arg.location.offset, t.dtype, t.dimensions)
            if t.code == OperandCode.TENSOR_FLOAT32:
                out += np.float32(0.05)
            else:
                np.copyto(out, np.clip(out.astype(np.int32) + 2, 0, 255).astype(out.dtype))
        return result


class PoolDriver(PartialNpuDriver):
    bug = "pool"
    prepared_class = _PoolPrepared


def create_correct():
    return PartialNpuDriver()


def create_race():
    return RaceDriver()


def create_leak():
    return LeakDriver()


def create_throttle():
    return ThrottleDriver()


def create_hang():
    return HangDriver()


def create_timing():
    return TimingDriver()


def create_early():
    return EarlyDriver()


def create_crash():
    return CrashDriver()


def create_pool():
    return PoolDriver()


BUGS = {"correct": create_correct, "race": create_race, "leak": create_leak, "throttle": create_throttle,
        "hang": create_hang, "timing": create_timing, "early": create_early, "crash": create_crash,
        "pool": create_pool}


def spec(bug: str) -> str:
    """The --driver spec of a bug's driver (this file, by path: as a vendor names theirs)."""
    return f"{os.path.abspath(__file__)}:create_{bug}"
