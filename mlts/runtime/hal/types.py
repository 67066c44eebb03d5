"""The HAL's data: capabilities, the model as a driver sees it, requests, results, cache handles and
driver-allocated buffers. Plain data, so that it can cross a process boundary."""
from __future__ import annotations

import abc
import numbers
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..enums import NO_TIMING, OperandCode, OperandLifetime, OperationCode, ResultCode
from ..errors import error_from_exception
from ..operand_type import OperandType
from .memory import Memory

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
class OperationTime:
    """One operation's time in a profiled run (IOperationProfiling): `op_index` is its position in the
    prepared model's main subgraph (run order), `time_us` the wall time its kernels took; an operation
    that ran as no work (a reshape that is a view) counts 0."""

    op_index: int
    code: OperationCode
    time_us: float


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
    if not isinstance(timing, Timing):
        return False
    for v in (timing.time_on_device, timing.time_in_driver):  # a loop, not all(): on every execution's path
        if type(v) is not int and (not isinstance(v, numbers.Integral) or isinstance(v, bool)):
            return False
        if not 0 <= v <= NO_TIMING:
            return False
    return True


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

def constant_array(model: HalModel, operand_type: OperandType, location) -> np.ndarray:
    """A read-only view of a constant operand's value (no copy)."""
    shape = operand_type.dimensions if operand_type.is_tensor else ()
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if location.pool_index < 0:
        arr = np.frombuffer(model.operand_values, dtype=operand_type.dtype, count=count, offset=location.offset)
    else:
        pool = model.pools[location.pool_index]
        arr = np.frombuffer(pool.view(), dtype=operand_type.dtype, count=count, offset=location.offset)
        arr.flags.writeable = False
    return arr.reshape(shape)


def failed_result(exc: BaseException, where: str) -> ExecutionResult:
    """The result an execution that raised reports instead (executions never raise across the HAL)."""
    error = error_from_exception(exc, where)
    return ExecutionResult(error.code, error.output_shapes or [], message=error.message)
