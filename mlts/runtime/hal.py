"""The driver interface (HAL): the only way the runtime talks to any driver, the reference one included.

Shaped after NNAPI's HAL 1.3 / AIDL: a driver reports capabilities and supported operations,
prepares a model into a PreparedModel, and the prepared model executes Requests whose data lives
in memory pools. Everything here is plain data so that it can cross a process boundary.
"""
from __future__ import annotations

import abc
import dataclasses
import numbers
import time
from dataclasses import dataclass, field
from typing import Sequence

from .enums import (DeviceType, FeatureLevel, NO_TIMING, OperandCode, OperandLifetime, OperationCode,
                    Preference, Priority, ResultCode)
from .errors import MltsError
from .memory import Memory
from .operand_type import OperandType


# -- capabilities -------------------------------------------------------------------------------
@dataclass(frozen=True)
class PerformanceInfo:
    """Performance relative to the CPU reference (1.0); lower is better."""

    exec_time: float = 1.0
    power_usage: float = 1.0


@dataclass(frozen=True)
class Capabilities:
    relaxed_float32_to_float16_performance_scalar: PerformanceInfo = PerformanceInfo()
    relaxed_float32_to_float16_performance_tensor: PerformanceInfo = PerformanceInfo()
    operand_performance: dict = field(default_factory=dict)  # OperandCode -> PerformanceInfo
    if_performance: PerformanceInfo = PerformanceInfo()
    while_performance: PerformanceInfo = PerformanceInfo()

    def performance(self, code: OperandCode | None) -> PerformanceInfo:
        """Declared performance for an operand type; unknown types are assumed very slow, as in NNAPI."""
        if code is None:
            return PerformanceInfo()
        return self.operand_performance.get(OperandCode(code), PerformanceInfo(float("inf"), float("inf")))

    @staticmethod
    def uniform(exec_time: float, power_usage: float, *, relaxed: PerformanceInfo | None = None,
                types: Sequence[OperandCode] | None = None) -> "Capabilities":
        perf = PerformanceInfo(exec_time, power_usage)
        codes = list(types) if types is not None else list(dict.fromkeys(OperandCode))
        return Capabilities(relaxed or perf, relaxed or perf, {OperandCode(c): perf for c in codes}, perf, perf)


# -- the model as a driver sees it ----------------------------------------------------------------
@dataclass(frozen=True)
class DataLocation:
    """Where a value lives: pool_index -1 means the model's operand_values blob (CONSTANT_COPY);
    for SUBGRAPH operands `offset` is the subgraph's index in (main, *referenced), so 1 or more."""

    pool_index: int
    offset: int
    length: int


@dataclass(frozen=True)
class HalOperand:
    type: OperandType
    lifetime: OperandLifetime
    location: DataLocation | None = None
    number_of_consumers: int = 0


@dataclass(frozen=True)
class HalOperation:
    type: OperationCode
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class Subgraph:
    operands: tuple[HalOperand, ...]
    operations: tuple[HalOperation, ...]  # in a valid run order
    input_indexes: tuple[int, ...]
    output_indexes: tuple[int, ...]


@dataclass(frozen=True)
class HalModel:
    main: Subgraph
    referenced: tuple[Subgraph, ...] = ()
    operand_values: bytes = b""
    pools: tuple[Memory, ...] = ()
    relax_computation_float32_to_float16: bool = False


# -- requests and results -----------------------------------------------------------------------
@dataclass(frozen=True)
class RequestArgument:
    """One input or output: its region in a request pool; `dimensions` () = as in the model."""

    has_no_value: bool = False
    location: DataLocation | None = None
    dimensions: tuple[int, ...] = ()


@dataclass(frozen=True)
class BufferToken:
    """A request pool naming a driver-allocated buffer (NNAPI's Request.MemoryPool token) instead of
    memory; arguments in it use offset 0 and length 0 (the whole buffer)."""

    token: int


@dataclass(frozen=True)
class Request:
    inputs: tuple[RequestArgument, ...]
    outputs: tuple[RequestArgument, ...]
    pools: tuple[Memory | BufferToken, ...]


@dataclass(frozen=True)
class OutputShape:
    dimensions: tuple[int, ...]
    is_sufficient: bool = True


@dataclass(frozen=True)
class Timing:
    """Microseconds; NO_TIMING (UINT64_MAX) when not measured."""

    time_on_device: int = NO_TIMING
    time_in_driver: int = NO_TIMING


NO_TIMING_INFO = Timing()


@dataclass(frozen=True)
class CallTiming:
    """Where one call to an out-of-process driver spent its time (microseconds): the client-side proxy's
    own work (staging application arrays through shared memory), the channel (round trip minus time in
    the driver), and the driver. In-process drivers leave ExecutionResult.call_timing None."""

    runtime: int = 0
    ipc: int = 0
    driver: int = 0


@dataclass
class ExecutionResult:
    status: ResultCode
    output_shapes: list[OutputShape]
    timing: Timing = NO_TIMING_INFO
    message: str = ""
    call_timing: CallTiming | None = None
    #: execute_fenced only: timingFenced (all waited fences signalled to the end; `timing` is then
    #: timingLaunched, the call to the end). None: not a fenced execution, or not reported.
    fenced_timing: Timing | None = None


@dataclass(frozen=True)
class CacheHandles:
    """Compilation caching: the files a driver may read/write, and the model's 32-byte token."""

    model_cache: tuple[str, ...]
    data_cache: tuple[str, ...]
    token: bytes


# -- memory domains (driver-allocated buffers) ----------------------------------------------------
@dataclass(frozen=True)
class BufferDesc:
    """What the buffer must hold beyond its roles: dimensions, () = as the roles say (0 = unknown)."""

    dimensions: tuple[int, ...] = ()


@dataclass(frozen=True)
class BufferRole:
    """One use of a buffer: input or output `io_index` of `prepared_models[model_index]`."""

    model_index: int
    io_index: int
    frequency: float


class DeviceBuffer(abc.ABC):
    """A driver-allocated opaque buffer (NNAPI's IBuffer); its contents move only through these calls."""

    @abc.abstractmethod
    def copy_to(self, dst: Memory) -> None:
        """Copy the whole (initialized) buffer into `dst`, which must have exactly its byte size."""

    @abc.abstractmethod
    def copy_from(self, src: Memory, dimensions: tuple[int, ...]) -> None:
        """Fill the buffer from all of `src`, with `dimensions` completing unknown ones."""

    def free(self) -> None:
        """Release the buffer and its token (also done when the runtime's memory is freed)."""


@dataclass(frozen=True)
class AllocatedBuffer:
    """Driver.allocate's answer: the buffer object and the token requests name it by (> 0)."""

    buffer: DeviceBuffer
    token: int


def deadline_from_timeout(timeout_ns: int | None) -> float | None:
    """An absolute time.monotonic() deadline from a relative timeout in nanoseconds."""
    return None if timeout_ns is None else time.monotonic() + timeout_ns / 1e9


def is_valid_timing(timing: object) -> bool:
    """A Timing of ints in [0, NO_TIMING]: anything else a driver returns is ignored as NO_TIMING."""
    return isinstance(timing, Timing) and all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) and 0 <= v <= NO_TIMING
        for v in (timing.time_on_device, timing.time_in_driver))


def fenced_timings(run: Timing, launched_ns: int, fenced_ns: int, done_ns: int) -> tuple[Timing, Timing]:
    """(timingLaunched, timingFenced) of a fenced execution from the timing of its run (after the fences)
    and perf_counter_ns stamps of the call, the fences signalled and the end. The on-device time is the
    run's own report (NO_TIMING if none); in-driver times are the measured spans, never below what the
    run reported, so that launched >= fenced >= on-device always holds."""
    if not is_valid_timing(run):
        run = NO_TIMING_INFO
    on_device = run.time_on_device
    floor = max(0 if on_device == NO_TIMING else on_device,
                0 if run.time_in_driver == NO_TIMING else run.time_in_driver)
    fenced = max((done_ns - fenced_ns) // 1000, floor)
    launched = max((done_ns - launched_ns) // 1000, fenced)
    return Timing(on_device, launched), Timing(on_device, fenced)


# -- the interfaces a driver implements ------------------------------------------------------------
class PreparedModel(abc.ABC):
    """A model prepared by one driver; used by many executions, possibly concurrently."""

    @abc.abstractmethod
    def execute_synchronously(self, request: Request, measure: bool, deadline: float | None,
                              loop_timeout_ns: int) -> ExecutionResult:
        """Run one request. Never raises: failures are reported through `status`."""

    def execute(self, request: Request, measure: bool, deadline: float | None,
                loop_timeout_ns: int) -> "ExecutionCallback":
        """Asynchronous execution: returns at once; the callback is notified on completion."""
        callback = ExecutionCallback()
        import threading

        def run() -> None:
            callback.notify(self.execute_synchronously(request, measure, deadline, loop_timeout_ns))

        threading.Thread(target=run, name="mlts-async-execution", daemon=True).start()
        return callback

    def configure_execution_burst(self) -> "BurstContext":
        """A burst reuses per-sequence resources; the default simply forwards to synchronous runs."""
        return BurstContext(self)

    def execute_fenced(self, request: Request, wait_for: Sequence[int], measure: bool, deadline: float | None,
                       loop_timeout_ns: int, timeout_after_fence_ns: int | None) -> ExecutionResult:
        """Fenced execution (NNAPI's IPreparedModel::executeFenced). Never raises.

        `wait_for` are sync fence descriptors (readable = signalled): the request's inputs must not be
        read before all of them are signalled, since whoever signals them may still be writing the inputs.
        `deadline` (absolute, time.monotonic()) bounds the whole call, the wait included;
        `timeout_after_fence_ns` (None: none) bounds the run after the fences signalled; a deadline missed
        while waiting, or the timeout after the fences exceeded, is MISSED_DEADLINE_TRANSIENT. With
        `measure`, `timing` is timingLaunched (call to end) and `fenced_timing` timingFenced (fences
        signalled to end), NO_TIMING otherwise. This default waits here, then runs execute_synchronously;
        a driver whose device can wait on the fences itself overrides it.
        """
        from .hal_validation import validate_fence_fds, validate_timeout_after_fence  # it imports this module
        from .sync_fence import wait_all

        launched = time.perf_counter_ns()
        try:
            fds = validate_fence_fds(wait_for, "execute_fenced")
            after_fence = validate_timeout_after_fence(timeout_after_fence_ns, "execute_fenced")
        except MltsError as e:
            return ExecutionResult(e.code, [], message=e.message)
        try:
            signalled = wait_all(fds, None if deadline is None else max(0.0, deadline - time.monotonic()))
        except (OSError, ValueError) as e:
            return ExecutionResult(ResultCode.BAD_DATA, [], message=f"execute_fenced: waiting on wait_for: {e}")
        if not signalled:
            return ExecutionResult(ResultCode.MISSED_DEADLINE_TRANSIENT, [],
                                   message="execute_fenced: the deadline passed while waiting for the sync fences")
        fenced = time.perf_counter_ns()
        after_deadline = deadline_from_timeout(after_fence)
        by_fence_timeout = after_deadline is not None and (deadline is None or after_deadline < deadline)
        run_deadline = after_deadline if by_fence_timeout else deadline
        try:
            result = self.execute_synchronously(request, measure, run_deadline, loop_timeout_ns)
        except MltsError as e:
            return ExecutionResult(e.code, e.output_shapes or [], message=e.message)
        except Exception as e:  # executions report failures in their result, as the HAL says
            return ExecutionResult(ResultCode.OP_FAILED, [], message=f"execute_fenced: the execution raised "
                                                                     f"{type(e).__name__}: {e}")
        if not isinstance(result, ExecutionResult):
            return ExecutionResult(ResultCode.OP_FAILED, [], message="execute_fenced: the execution returned no result")
        if by_fence_timeout and result.status == ResultCode.MISSED_DEADLINE_PERSISTENT:
            # what was missed is the time allowed after the fences: executeFenced reports it as transient
            result = dataclasses.replace(result, status=ResultCode.MISSED_DEADLINE_TRANSIENT)
        if not measure or result.status != ResultCode.NO_ERROR:
            return dataclasses.replace(result, timing=NO_TIMING_INFO, fenced_timing=NO_TIMING_INFO)
        launched_timing, fenced_timing = fenced_timings(result.timing, launched, fenced, time.perf_counter_ns())
        return dataclasses.replace(result, timing=launched_timing, fenced_timing=fenced_timing)


class ExecutionCallback:
    """The driver's completion notification of an asynchronous execution."""

    def __init__(self) -> None:
        import threading

        self._done = threading.Event()
        self._result: ExecutionResult | None = None

    def notify(self, result: ExecutionResult) -> None:
        self._result = result
        self._done.set()

    def wait(self, timeout: float | None = None) -> ExecutionResult | None:
        self._done.wait(timeout)
        return self._result


class BurstContext:
    """Server side of a burst: serves a sequence of requests for one prepared model."""

    def __init__(self, prepared: PreparedModel) -> None:
        self.prepared = prepared

    def execute(self, request: Request, measure: bool, deadline: float | None,
                loop_timeout_ns: int) -> ExecutionResult:
        return self.prepared.execute_synchronously(request, measure, deadline, loop_timeout_ns)

    def close(self) -> None:
        pass


class Driver(abc.ABC):
    """A device driver. Subclasses set the identity attributes and implement the abstract methods."""

    name: str = "unnamed-driver"
    version: str = "0.0"
    feature_level: int = FeatureLevel.LEVEL_8
    device_type: DeviceType = DeviceType.OTHER
    #: "in-process" or "service" (out-of-process hosting, see the drivers issue)
    hosting: str = "in-process"

    @abc.abstractmethod
    def get_capabilities(self) -> Capabilities:
        ...

    @abc.abstractmethod
    def get_supported_operations(self, model: HalModel) -> list[bool]:
        """One flag per operation of `model.main`, in order. Must validate the model first."""

    @abc.abstractmethod
    def prepare_model(self, model: HalModel, preference: Preference, priority: Priority,
                      deadline: float | None, cache: CacheHandles | None) -> PreparedModel:
        """Compile `model`; raise MltsError on failure (the runtime turns it into a ResultCode)."""

    def get_supported_extensions(self) -> list[str]:
        return []

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        """(model cache files, data cache files); (0, 0) = caching not supported."""
        return (0, 0)

    def prepare_model_from_cache(self, deadline: float | None, cache: CacheHandles) -> PreparedModel:
        from .errors import MltsError

        raise MltsError(ResultCode.OP_FAILED, f"{self.name} does not support compilation caching")

    def allocate(self, desc: BufferDesc, prepared_models: Sequence[PreparedModel],
                 input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]) -> AllocatedBuffer:
        """Memory domains: allocate an opaque buffer for these roles on models this driver prepared.
        Drivers without domains refuse (OP_FAILED), and the runtime falls back to shared memory."""
        from .errors import MltsError

        raise MltsError(ResultCode.OP_FAILED, f"{self.name} does not support memory domains")

    def wait_for_ready(self) -> None:
        """Services override this to block until they answer; in-process drivers are always ready."""
