"""The driver interface (HAL): the only way the runtime talks to any driver, the reference one included.

Shaped after NNAPI's HAL 1.3 / AIDL: a driver reports capabilities and supported operations,
prepares a model into a PreparedModel, and the prepared model executes Requests whose data lives
in memory pools. Everything here is plain data so that it can cross a process boundary.
"""
from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field
from typing import Sequence

from .enums import (DeviceType, FeatureLevel, NO_TIMING, OperandCode, OperandLifetime, OperationCode,
                    Preference, Priority, ResultCode)
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
