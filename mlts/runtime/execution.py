"""Execution (ANeuralNetworksExecution), Burst and Event: running a compilation on one set of inputs.

The runtime turns the application's arrays or memory regions into HAL requests (data stays in
pools; application arrays are wrapped, not copied, for in-process drivers), runs the plan's steps
carrying intermediate tensors between devices, and applies NNAPI's CPU fallback rules.
"""
from __future__ import annotations

import numbers
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from . import vlog
from .compilation import Compilation
from .enums import (DEFAULT_LOOP_TIMEOUT_NS, MAXIMUM_LOOP_TIMEOUT_NS, NO_TIMING, DurationCode,
                    ResultCode)
from .errors import MltsError, bad_data, bad_state
from .execution_plan import Step, log as plan_log
from .fallbacks import FallbackEvent
from .hal import (NO_TIMING_INFO, BurstContext, CallTiming, DataLocation, ExecutionResult, OutputShape, PreparedModel,
                  Request, RequestArgument, Timing, deadline_from_timeout, is_valid_timing)
from .hal_validation import effective_type, validate_fence_fd
from .memory import Memory
from . import memory_domains
from .operand_type import OperandType, as_operand_array
from .sync_fence import SyncFence, close_fds, wait_all
from . import qos

NO_FALLBACK_CODES = {ResultCode.OUTPUT_INSUFFICIENT_SIZE, ResultCode.MISSED_DEADLINE_TRANSIENT,
                     ResultCode.MISSED_DEADLINE_PERSISTENT}


@dataclass
class _Binding:
    """Where one model input/output lives: an application array or a memory region."""

    memory: Memory | None
    offset: int
    length: int
    dimensions: tuple[int, ...]
    array: np.ndarray | None = None
    omitted: bool = False


class Event:
    """Completion of an asynchronous execution; any thread may wait on it. Backed by a sync fence (an
    eventfd or a pipe), so it can be exported as a file descriptor and one can be imported as an Event
    (ANeuralNetworksEvent_getSyncFenceFd / ANeuralNetworksEvent_createFromSyncFenceFd)."""

    def __init__(self, _fence: SyncFence | None = None) -> None:
        self._fence = _fence if _fence is not None else SyncFence()
        self._error: MltsError | None = None
        self._finalizer = weakref.finalize(self, self._fence.close)

    @classmethod
    def from_sync_fence_fd(cls, fd: int) -> "Event":
        """An Event signalled when `fd` becomes readable; `fd` is duplicated, so the caller keeps its own."""
        fd = validate_fence_fd(fd, "Event.from_sync_fence_fd")  # the check every side of the HAL makes
        try:
            own = os.dup(fd)
        except OSError as e:
            raise bad_data(f"Event.from_sync_fence_fd: {fd} is not an open file descriptor ({e.strerror})") from None
        return cls(SyncFence.adopt(own))

    def get_sync_fence_fd(self) -> int:
        """A new descriptor on this event's fence (readable once signalled); the caller must close it."""
        if self._fence.closed:
            raise bad_state("get_sync_fence_fd: the event has been freed")
        try:
            return self._fence.dup()
        except OSError as e:
            raise MltsError(ResultCode.OP_FAILED, f"get_sync_fence_fd: cannot duplicate the fence: {e}") from None

    def _signal(self, error: MltsError | None = None) -> None:
        self._error = error
        self._fence.signal(ok=error is None)

    def _failure(self) -> MltsError | None:
        """After the fence signalled: the execution's error; an imported fence signalled with an error is OP_FAILED."""
        if self._error is not None:
            return self._error
        if self._fence.imported and not self._fence.peek_status():
            return MltsError(ResultCode.OP_FAILED, "the sync fence was signalled with an error")
        return None

    def wait(self, timeout: float | None = None) -> None:
        """Block until done; raises the execution's MltsError if it failed."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                                    or not timeout >= 0):
            raise bad_data(f"Event.wait: timeout must be a non-negative number of seconds or None, got {timeout!r}")
        if self._fence.closed:
            raise bad_state("Event.wait: the event has been freed")
        try:
            signalled = self._fence.wait(timeout)
        except OSError as e:
            raise MltsError(ResultCode.OP_FAILED, f"Event.wait: {e}") from None
        if not signalled:
            raise MltsError(ResultCode.MISSED_DEADLINE_TRANSIENT, "event not signalled within the wait timeout")
        error = self._failure()
        if error is not None:
            raise error

    @property
    def is_signalled(self) -> bool:
        return not self._fence.closed and self._fence.is_signalled

    def free(self) -> None:
        """Release the fence now (ANeuralNetworksEvent_free) rather than at garbage collection."""
        self._finalizer()

    close = free


class Burst:
    """A sequence of executions of one compilation reusing driver-side resources."""

    def __init__(self, compilation: Compilation) -> None:
        if not isinstance(compilation, Compilation):
            raise bad_data(f"Burst: expected a Compilation, got {type(compilation).__name__}")
        compilation.check_finished("Burst")
        self.compilation = compilation
        self._contexts: dict[int, BurstContext] = {}
        self._busy = threading.Lock()
        self.closed = False

    def context(self, step: Step) -> BurstContext:
        # Keyed by the prepared model, not the step index: the whole-model CPU fallback is also step 0.
        key = id(step.prepared)
        if key not in self._contexts:
            self._contexts[key] = step.prepared.configure_execution_burst()
        return self._contexts[key]

    def close(self) -> None:
        for c in self._contexts.values():
            try:
                c.close()
            except Exception:  # a driver failing to release its burst must not take the client down
                pass
        self._contexts.clear()
        self.closed = True

    free = close


class Execution:
    """One application of a compilation to one set of inputs."""

    def __init__(self, compilation: Compilation) -> None:
        if not isinstance(compilation, Compilation):
            raise bad_data(f"Execution: expected a Compilation, got {type(compilation).__name__}")
        compilation.check_finished("Execution")
        self.compilation = compilation
        sg = compilation.model.hal_model().main
        self._in_types = [sg.operands[i].type for i in sg.input_indexes]
        self._out_types = [sg.operands[i].type for i in sg.output_indexes]
        self._inputs: list[_Binding | None] = [None] * len(self._in_types)
        self._outputs: list[_Binding | None] = [None] * len(self._out_types)
        self._measure = False
        self._timeout_ns: int | None = None
        self._loop_timeout_ns = DEFAULT_LOOP_TIMEOUT_NS
        self._reusable = False
        self._state = "preparation"  # preparation -> computing -> completed
        self._lock = threading.Lock()
        self._output_shapes: list[OutputShape] | None = None
        self._timing = Timing()
        self._fenced_timing: Timing | None = None  # set only by a fenced execution
        self._driver_fenced_timing: Timing | None = None  # the driver's timingFenced, when it reported one
        self._results: list[np.ndarray | None] = [None] * len(self._out_types)
        self._calls: list[dict] = []  # per driver call: where its time went (get_timing_breakdown)
        self._wall_ns = 0

    # -- settings -------------------------------------------------------------------------------
    def _check_preparation(self, call: str) -> None:
        if self._state == "computing":
            raise bad_state(f"{call}: the execution is running")
        if self._state == "completed" and not self._reusable:
            raise bad_state(f"{call}: the execution has completed and is not reusable")

    def _index(self, index: Any, count: int, what: str) -> int:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < count:
            raise bad_data(f"{what}: index {index!r} out of range (model has {count})")
        return int(index)

    def _effective(self, declared: OperandType, operand_type: OperandType | None, shape: tuple[int, ...] | None,
                   what: str) -> OperandType:
        if operand_type is not None:
            if not isinstance(operand_type, OperandType) or operand_type.code != declared.code or (
                    operand_type.scale != declared.scale or operand_type.zero_point != declared.zero_point):
                raise bad_data(f"{what}: the given type may only differ from the model's in its dimensions")
            return effective_type(declared, operand_type.dimensions or (), what)
        if shape is not None and declared.is_tensor:
            return effective_type(declared, shape, what)
        return declared

    def set_input(self, index: int, array: Any, operand_type: OperandType | None = None) -> None:
        """Bind model input `index` to an array (its dtype must match the operand); None omits it."""
        self._check_preparation("set_input")
        i = self._index(index, len(self._in_types), "set_input")
        declared = self._in_types[i]
        if array is None:
            self._inputs[i] = _Binding(None, 0, 0, (), omitted=True)
            return
        arr = _as_array(array, declared, f"set_input({i})")
        t = self._effective(declared, operand_type, arr.shape if declared.is_tensor else None, f"set_input({i})")
        if t.is_tensor and not t.is_fully_specified:
            raise bad_data(f"set_input({i}): dimensions {t.dimensions} must be fully specified")
        if arr.nbytes != t.byte_size():
            raise bad_data(f"set_input({i}): {arr.nbytes} bytes given, {t.describe()} needs {t.byte_size()}")
        arr = np.ascontiguousarray(arr)
        self._inputs[i] = _Binding(Memory.wrap_array(arr, writable=False), 0, arr.nbytes, t.dimensions or (), arr)

    def set_input_from_memory(self, index: int, memory: Memory, offset: int, length: int,
                              operand_type: OperandType | None = None) -> None:
        self._check_preparation("set_input_from_memory")
        i = self._index(index, len(self._in_types), "set_input_from_memory")
        if not isinstance(memory, Memory):
            raise bad_data(f"set_input_from_memory({i}): expected a Memory")
        if memory.validator is not None:  # created from a MemoryDesc: its roles only, whole
            self._inputs[i] = _Binding(memory, *memory_domains.bind(
                memory, self.compilation, "input", i, self._in_types[i], operand_type, offset, length,
                f"set_input_from_memory({i})"))
            return
        memory.check_region(offset, length, f"set_input_from_memory({i})")
        t = self._effective(self._in_types[i], operand_type, None, f"set_input_from_memory({i})")
        if t.is_fully_specified or t.is_scalar:
            if length != t.byte_size():
                raise bad_data(f"set_input_from_memory({i}): length {length} != {t.byte_size()} bytes of {t.describe()}")
        self._inputs[i] = _Binding(memory, int(offset), int(length), t.dimensions or ())

    def set_output(self, index: int, array: np.ndarray, operand_type: OperandType | None = None) -> None:
        """Bind model output `index` to a writable, C-contiguous array of the operand's dtype."""
        self._check_preparation("set_output")
        i = self._index(index, len(self._out_types), "set_output")
        declared = self._out_types[i]
        if not isinstance(array, np.ndarray):
            raise bad_data(f"set_output({i}): expected a numpy array")
        if array.dtype != declared.dtype:
            raise bad_data(f"set_output({i}): array dtype {array.dtype} does not match {declared.code.name} "
                           f"({declared.dtype})")
        if not array.flags.c_contiguous or not array.flags.writeable:
            raise bad_data(f"set_output({i}): the array must be C-contiguous and writable")
        t = self._effective(declared, operand_type, None, f"set_output({i})")
        if t.is_fully_specified and array.nbytes < t.byte_size():
            raise bad_data(f"set_output({i}): {array.nbytes} bytes given, {t.describe()} needs {t.byte_size()}")
        self._outputs[i] = _Binding(Memory.wrap_array(array, writable=True), 0, array.nbytes,
                                    t.dimensions or (), array)

    def set_output_from_memory(self, index: int, memory: Memory, offset: int, length: int,
                               operand_type: OperandType | None = None) -> None:
        self._check_preparation("set_output_from_memory")
        i = self._index(index, len(self._out_types), "set_output_from_memory")
        if not isinstance(memory, Memory):
            raise bad_data(f"set_output_from_memory({i}): expected a Memory")
        if memory.validator is not None:  # created from a MemoryDesc: its roles only, whole
            self._outputs[i] = _Binding(memory, *memory_domains.bind(
                memory, self.compilation, "output", i, self._out_types[i], operand_type, offset, length,
                f"set_output_from_memory({i})"))
            return
        memory.check_region(offset, length, f"set_output_from_memory({i})", for_write=True)
        t = self._effective(self._out_types[i], operand_type, None, f"set_output_from_memory({i})")
        if t.is_fully_specified and length < t.byte_size():
            raise bad_data(f"set_output_from_memory({i}): length {length} < {t.byte_size()} bytes of {t.describe()}")
        self._outputs[i] = _Binding(memory, int(offset), int(length), t.dimensions or ())

    def set_measure_timing(self, measure: bool) -> None:
        self._check_preparation("set_measure_timing")
        _check_bool(measure, "set_measure_timing")
        if not self.compilation.is_single_explicit_device:
            raise bad_data("set_measure_timing: only for a compilation created for exactly one device")
        self._measure = bool(measure)

    def set_timeout(self, duration_ns: int) -> None:
        self._check_preparation("set_timeout")
        if isinstance(duration_ns, bool) or not isinstance(duration_ns, int) or duration_ns < 0:
            raise bad_data(f"set_timeout: duration must be a non-negative int of nanoseconds, got {duration_ns!r}")
        if not self.compilation.is_single_explicit_device:
            raise bad_data("set_timeout: only for a compilation created for exactly one device")
        self._timeout_ns = duration_ns or None

    def set_loop_timeout(self, duration_ns: int) -> None:
        """Limit for each WHILE loop; values above the 15 s maximum are clamped to it (as NNAPI)."""
        self._check_preparation("set_loop_timeout")
        if isinstance(duration_ns, bool) or not isinstance(duration_ns, int) or duration_ns < 0:
            raise bad_data(f"set_loop_timeout: duration must be a non-negative int of nanoseconds, got {duration_ns!r}")
        self._loop_timeout_ns = min(duration_ns, MAXIMUM_LOOP_TIMEOUT_NS)

    def set_reusable(self, reusable: bool) -> None:
        self._check_preparation("set_reusable")
        _check_bool(reusable, "set_reusable")
        self._reusable = bool(reusable)

    # -- computing ------------------------------------------------------------------------------
    def compute(self) -> None:
        """Run synchronously; raises MltsError on failure."""
        self._begin("compute")
        self._run(None)

    def start_compute(self) -> Event:
        """Run asynchronously; the returned Event is signalled on completion."""
        self._begin("start_compute")
        event = Event()

        def work() -> None:
            try:
                self._run(None, asynchronous=True)  # the driver's own asynchronous execute(), as NNAPI's startCompute
                event._signal()
            except MltsError as e:
                event._signal(e)

        threading.Thread(target=work, name="mlts-execution", daemon=True).start()
        return event

    def burst_compute(self, burst: Burst) -> None:
        if not isinstance(burst, Burst) or burst.closed:
            raise bad_data("burst_compute: expected an open Burst")
        if burst.compilation is not self.compilation:
            raise bad_data("burst_compute: the burst belongs to another compilation")
        if not burst._busy.acquire(blocking=False):
            raise bad_state("burst_compute: the burst is already running another execution")
        try:
            self._begin("burst_compute")
            self._run(burst)
        finally:
            burst._busy.release()

    def start_compute_with_dependencies(self, dependencies: Sequence[Event], timeout_ns: int = 0) -> Event:
        """Fenced execution: waits for `dependencies`, then runs; returns the completion Event.

        The runtime waits for the dependencies' fences itself, before the run asks its device's priority
        queue (mlts.runtime.qos) for a turn: a run waiting on fences must never hold the device queue, or a
        high-priority run waiting for a lower-priority run's fence would keep that run from being
        admitted, and neither would ever finish. A single-step plan then goes through the driver's
        execute_fenced with the (signalled) fences and `timeout_ns` as its timeout after the fences, so
        that the driver's fenced execution is what runs and is checked; partitioned plans and CPU
        fallback run as start_compute does.
        """
        if isinstance(dependencies, Event) or not hasattr(dependencies, "__iter__"):
            raise bad_data(f"start_compute_with_dependencies: dependencies must be a sequence of Events, "
                           f"got {dependencies!r}")
        deps = list(dependencies)
        if any(not isinstance(e, Event) for e in deps):
            raise bad_data("start_compute_with_dependencies: dependencies must be Events")
        if isinstance(timeout_ns, bool) or not isinstance(timeout_ns, int) or timeout_ns < 0:
            raise bad_data("start_compute_with_dependencies: timeout must be a non-negative int of nanoseconds")
        if timeout_ns and not self.compilation.is_single_explicit_device:
            raise bad_data("start_compute_with_dependencies: a timeout needs a single-device compilation")
        if any(e._fence.closed for e in deps):
            raise bad_data("start_compute_with_dependencies: a dependency Event has been freed")
        launched = time.perf_counter_ns()
        fences = _dup_fences(deps)  # this execution's own descriptors: a dependency freed meanwhile cannot matter
        try:
            self._begin("start_compute_with_dependencies")
        except BaseException:
            close_fds(fences)
            raise
        call_deadline = deadline_from_timeout(self._timeout_ns)  # set_timeout counts from the call (as NNAPI)
        event = Event()

        def work() -> None:
            try:
                _wait_for_dependencies(deps, fences)  # before any queue admission: see the docstring
                fenced = time.perf_counter_ns()
                deadlines = [d for d in (call_deadline, deadline_from_timeout(timeout_ns or None)) if d is not None]
                self._run(None, deadline_override=min(deadlines) if deadlines else None,
                          fenced=(fences, timeout_ns or None))
                self._set_fenced_timing(launched, fenced, time.perf_counter_ns())
                event._signal()
            except MltsError as e:
                with self._lock:
                    self._state = "completed"
                event._signal(e)
            finally:
                close_fds(fences)

        threading.Thread(target=work, name="mlts-fenced-execution", daemon=True).start()
        return event

    def _set_fenced_timing(self, launched_ns: int, fenced_ns: int, done_ns: int) -> None:
        """timingLaunched (call to signal) and timingFenced (dependencies signalled to signal), as NNAPI's
        IFencedExecutionCallback: the on-device time is the driver's; the in-driver times are measured
        here, where the fence is waited on and signalled (only when the driver reports timing). The
        driver's own timingFenced (from execute_fenced), where it reported one, is preferred for the
        fenced durations; timingLaunched stays the runtime's, as only it includes the wait here."""
        device, in_driver = self._timing.time_on_device, self._timing.time_in_driver
        reported = self._driver_fenced_timing or NO_TIMING_INFO
        fenced_device = reported.time_on_device if reported.time_on_device != NO_TIMING else device
        if in_driver == NO_TIMING and reported.time_in_driver == NO_TIMING:
            self._fenced_timing = Timing(fenced_device, NO_TIMING)
            return
        floor = 0 if device == NO_TIMING else device
        fenced_floor = 0 if fenced_device == NO_TIMING else fenced_device
        fenced_in_driver = reported.time_in_driver if reported.time_in_driver != NO_TIMING else \
            (done_ns - fenced_ns) // 1000
        fenced_in_driver = max(fenced_in_driver, fenced_floor)
        launched_in_driver = 0 if in_driver == NO_TIMING else in_driver
        self._timing = Timing(device, max((done_ns - launched_ns) // 1000, launched_in_driver, floor, fenced_in_driver))
        self._fenced_timing = Timing(fenced_device, fenced_in_driver)

    def _begin(self, call: str) -> None:
        with self._lock:
            self._check_preparation(call)
            for k, b in enumerate(self._inputs):
                if b is None:
                    raise bad_data(f"{call}: input {k} is not set")
                _domain_input(b, f"{call}: input {k}")  # memory from a MemoryDesc: written, dims agree
            self._state = "computing"
            self._output_shapes = None
            self._timing = Timing()
            self._fenced_timing = None
            self._driver_fenced_timing = None
            self._calls = []
            self._wall_ns = 0

    def _run(self, burst: Burst | None, deadline_override: float | None = None,
             fenced: tuple[list[int], int | None] | None = None, asynchronous: bool = False) -> None:
        started = time.perf_counter_ns()
        try:
            deadline = deadline_override if deadline_override is not None else deadline_from_timeout(self._timeout_ns)
            _Runner(self, burst, deadline, fenced, asynchronous).run()
        except MltsError:
            raise
        except Exception as e:  # nothing but MltsError escapes, and an async Event must always be signalled
            raise MltsError(ResultCode.OP_FAILED, f"execution failed: {type(e).__name__}: {e}") from e
        finally:
            self._wall_ns = time.perf_counter_ns() - started
            with self._lock:
                self._state = "completed"

    # -- results --------------------------------------------------------------------------------
    def _check_completed(self, call: str) -> None:
        if self._state != "completed" or self._output_shapes is None:
            raise bad_state(f"{call}: the execution has not completed")

    def get_output_operand_rank(self, index: int) -> int:
        self._check_completed("get_output_operand_rank")
        i = self._index(index, len(self._out_types), "get_output_operand_rank")
        return len(self._output_shapes[i].dimensions)

    def get_output_operand_dimensions(self, index: int) -> tuple[int, ...]:
        self._check_completed("get_output_operand_dimensions")
        i = self._index(index, len(self._out_types), "get_output_operand_dimensions")
        return tuple(self._output_shapes[i].dimensions)

    def get_output(self, index: int) -> np.ndarray:
        """The computed output (in the bound array, or one the runtime allocated), in its computed shape."""
        self._check_completed("get_output")
        i = self._index(index, len(self._out_types), "get_output")
        result = self._results[i]
        if result is None:
            raise bad_state(f"get_output({i}): output {i} was bound to memory; read it from there")
        return result

    def get_duration(self, code: DurationCode) -> int:
        """Nanoseconds, or UINT64_MAX when not measured/available."""
        self._check_completed("get_duration")
        try:
            code = DurationCode(code)
        except (ValueError, TypeError):
            raise bad_data(f"get_duration: invalid duration code {code!r}") from None
        if not self._measure:
            return NO_TIMING
        if code in (DurationCode.ON_HARDWARE, DurationCode.IN_DRIVER):
            t = self._timing
        else:
            # Not launched with dependencies: the fenced durations are the plain ones (as NNAPI).
            t = self._fenced_timing if self._fenced_timing is not None else self._timing
        value = t.time_on_device if code in (DurationCode.ON_HARDWARE, DurationCode.FENCED_ON_HARDWARE) else t.time_in_driver
        return NO_TIMING if value == NO_TIMING else value * 1000

    def get_timing_breakdown(self) -> dict:
        """Extension: where the last computation's wall time went, in microseconds (always measured).

        `total` = `runtime` (this runtime: bindings, partitions, copies) + `ipc` (channels to driver
        services) + `driver` (inside drivers); `device` is the drivers' reported on-device time (None
        unless timing was measured and reported). `calls` has the same per driver call, for per-partition
        tables. Failed computations have a breakdown too.
        """
        if self._state != "completed":
            raise bad_state("get_timing_breakdown: the execution has not completed")
        calls = [dict(c) for c in self._calls]
        total = self._wall_ns // 1000
        ipc = sum(c["ipc"] for c in calls)
        driver = sum(c["driver"] for c in calls)
        device_times = [c["device"] for c in calls if c["device"] is not None]
        return {"total": total, "runtime": max(0, total - ipc - driver), "ipc": ipc, "driver": driver,
                "device": sum(device_times) if device_times else None, "calls": calls}

    def _record_call(self, step: Step, prepared: PreparedModel, result: ExecutionResult, elapsed_ns: int) -> None:
        elapsed = elapsed_ns // 1000
        ct = result.call_timing
        if isinstance(ct, CallTiming):
            driver = min(max(0, int(ct.driver)), elapsed)
            ipc = min(max(0, int(ct.ipc)), elapsed - driver)
        else:
            driver, ipc = elapsed, 0
        on_device = result.timing.time_on_device
        device = step.device if prepared is step.prepared else self.compilation.cpu_device  # else: CPU fallback
        self._calls.append({"step": step.index, "device_name": device.name, "hosting": device.hosting,
                            "status": ResultCode(result.status).name, "ipc": ipc, "driver": driver,
                            "runtime": elapsed - ipc - driver,
                            "device": None if on_device == NO_TIMING else int(on_device)})


def _dup_fences(deps: Sequence[Event]) -> list[int]:
    """New descriptors on the dependencies' fences, owned by one fenced execution (closed when it ends)."""
    fds: list[int] = []
    try:
        for dep in deps:
            fds.append(dep._fence.dup())
    except OSError as e:
        close_fds(fds)
        raise MltsError(ResultCode.OP_FAILED, f"start_compute_with_dependencies: cannot duplicate dependency "
                                              f"{len(fds)}'s sync fence: {e}") from None
    return fds



def _wait_for_dependencies(deps: Sequence[Event], fences: Sequence[int]) -> None:
    """Wait on the dependencies' sync fences (`fences`, this execution's descriptors on them); a
    dependency that failed fails the execution (OP_FAILED)."""
    try:
        wait_all(list(fences), None)
    except (OSError, ValueError) as e:
        raise MltsError(ResultCode.OP_FAILED, f"start_compute_with_dependencies: waiting on the dependencies "
                                              f"failed: {e}") from None
    for k, dep in enumerate(deps):
        failure = dep._failure()
        if failure is not None:
            raise MltsError(ResultCode.OP_FAILED, f"start_compute_with_dependencies: dependency {k} failed "
                                                  f"({failure.code.name}: {failure.message})")


def _domain_input(binding: _Binding, call: str) -> _Binding:
    """An input bound to memory from a MemoryDesc, with the dimensions its memory now holds (OP_FAILED when
    it holds nothing yet, or other dimensions than the execution's); other bindings as they are."""
    if binding.omitted or binding.memory is None or binding.memory.validator is None:
        return binding
    dims = memory_domains.input_dimensions(binding.memory, binding.dimensions, call)
    return _Binding(binding.memory, 0, binding.memory.size, dims)


def _as_array(value: Any, t: OperandType, what: str) -> np.ndarray:
    """The input's array, by the rule Model.set_operand_value applies to constants (operand_type.py)."""
    return as_operand_array(value, t, what)


def _check_bool(value: Any, call: str) -> None:
    """A flag must be a bool: bool('no') is True, so anything else is refused rather than coerced."""
    if not isinstance(value, (bool, np.bool_)):
        raise bad_data(f"{call}: expected a bool (True or False), got {value!r}")


class _Runner:
    """Carries one computation through the plan's steps, with intermediate tensors and CPU fallback."""

    def __init__(self, execution: Execution, burst: Burst | None, deadline: float | None,
                 fenced: tuple[list[int], int | None] | None = None, asynchronous: bool = False) -> None:
        self.ex = execution
        self.asynchronous = asynchronous  # driver calls through PreparedModel.execute and its callback
        self.comp = execution.compilation
        self.plan = self.comp.plan
        self.burst = burst
        self.deadline = deadline
        self.fenced = fenced  # (signalled fence descriptors, timeout after them in ns): start_compute_with_dependencies
        self.fell_back = False

    def run(self) -> None:
        ex = self.ex
        hal = self.comp.model.hal_model()
        main = hal.main
        values: dict[int, np.ndarray | None] = {}
        for operand_index, binding, t in zip(main.input_indexes, ex._inputs, ex._in_types):
            values[operand_index] = None if binding.omitted else _domain_input(binding, "compute")
        try:
            for step in self.plan.steps:
                if step is not self.plan.steps[0]:
                    self._partition_checkpoint(step)
                self._run_step(step, values)
        except MltsError as e:
            on_cpu_already = self.plan.is_simple and self.plan.steps[0].device.name == self.comp.cpu_device.name
            if not self._may_fall_back(e) or on_cpu_already:
                raise self._finish_error(e)
            self._log(f"execution failed ({e.code.name}: {e.message}); whole model falls back to "
                      f"{self.comp.cpu_device.name}")
            self._record_fallback(e, "whole model")
            self.fell_back = True
            values = {k: v for k, v in values.items() if k in main.input_indexes}
            whole = Step(0, self.comp.cpu_device, -1, [], hal, list(main.input_indexes), list(main.output_indexes))
            whole.prepared = self.comp.cpu_prepared("whole", hal)
            try:
                self._run_step(whole, values, allow_partial_fallback=False)
            except MltsError as e2:
                raise self._finish_error(e2)
        shapes = []
        for k, operand_index in enumerate(main.output_indexes):
            v = values[operand_index]
            shapes.append(OutputShape(tuple(v.dimensions if isinstance(v, _Binding) else v.shape), True))
            binding = ex._outputs[k]
            ex._results[k] = v if binding is None or binding.array is not None else None
        ex._output_shapes = shapes
        memory_domains.finish_outputs(ex._outputs, shapes, ok=True)  # memories from MemoryDescs: written

    def _partition_checkpoint(self, step: Step) -> None:
        """Between partitions: a run past its deadline stops here (each driver call is also re-admitted by
        its device's priority queue, which is where a lower-priority run yields)."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise MltsError(ResultCode.MISSED_DEADLINE_TRANSIENT,
                            f"the deadline passed before step {step.index} ({step.device.name})")

    def _finish_error(self, e: MltsError) -> MltsError:
        memory_domains.finish_outputs(self.ex._outputs, None, ok=False)  # as NNAPI: uninitialized again
        if e.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE and e.output_shapes is not None:
            self.ex._output_shapes = [OutputShape(tuple(s.dimensions), s.is_sufficient) for s in e.output_shapes]
        return e

    def _may_fall_back(self, e: MltsError) -> bool:
        return self.comp.allows_cpu_fallback and e.code not in NO_FALLBACK_CODES

    def _record_fallback(self, e: MltsError, scope: str, device: str | None = None) -> None:
        if device is None:  # the whole model: blame the device of the step that failed
            device = ",".join(
                dict.fromkeys(s.device.name for s in self.plan.steps if s.device.name != self.comp.cpu_device.name))
        self.comp.record_fallback(FallbackEvent(device or "?", "execution", e.code, e.message, scope))

    def _log(self, line: str) -> None:
        plan_log.info(line)
        vlog.log("execution", line)

    def _run_step(self, step: Step, values: dict[int, Any], allow_partial_fallback: bool = True) -> None:
        try:
            self._execute_on(step, step.prepared, values, use_burst=True)
        except MltsError as e:
            if not allow_partial_fallback or self.plan.is_simple or not self._may_fall_back(e) \
                    or step.device.name == self.comp.cpu_device.name:
                raise
            self._log(f"step {step.index} on {step.device.name} failed ({e.code.name}: {e.message}); "
                      f"retrying the step on {self.comp.cpu_device.name}")
            self._record_fallback(e, f"step {step.index}", step.device.name)
            self.fell_back = True
            self._execute_on(step, self.comp.cpu_prepared(("step", step.index), step.model), values, use_burst=False)

    def _execute_on(self, step: Step, prepared: PreparedModel, values: dict[int, Any], *, use_burst: bool) -> None:
        """One HAL request for a step: model outputs go straight to the application's bindings."""
        ex = self.ex
        main_outputs = self.comp.model.hal_model().main.output_indexes
        step_main = step.model.main
        pools: list[Memory] = []
        pool_index: dict[int, int] = {}

        def location(memory: Memory, offset: int, length: int) -> DataLocation:
            if memory.id not in pool_index:
                pool_index[memory.id] = len(pools)
                pools.append(memory)
            return DataLocation(pool_index[memory.id], offset, length)

        inputs = []
        for operand_index in step.inputs:
            v = values.get(operand_index)
            if v is None:
                inputs.append(RequestArgument(has_no_value=True))
            elif isinstance(v, _Binding):
                inputs.append(RequestArgument(False, location(v.memory, v.offset, v.length), v.dimensions))
            else:
                mem = Memory.wrap_array(v, writable=False)
                inputs.append(RequestArgument(False, location(mem, 0, v.nbytes), tuple(v.shape)))
        out_specs = []
        for k, operand_index in enumerate(step.outputs):
            t = step_main.operands[step_main.output_indexes[k]].type
            binding = ex._outputs[main_outputs.index(operand_index)] if operand_index in main_outputs else None
            out_specs.append((operand_index, t, binding))
        buffers = self._allocate_outputs(out_specs, None)
        for attempt in range(3):
            outputs = []
            for (operand_index, t, binding), buf in zip(out_specs, buffers):
                if isinstance(buf, _Binding):
                    outputs.append(RequestArgument(False, location(buf.memory, buf.offset, buf.length), buf.dimensions))
                else:
                    mem = Memory.wrap_array(buf, writable=True)
                    outputs.append(RequestArgument(False, location(mem, 0, buf.nbytes), ()))
            request = Request(tuple(inputs), tuple(outputs), tuple(pools))
            driver_pools = memory_domains.DriverPools(prepared)  # device memories: tokens or staged copies
            try:
                result = self._send(step, prepared, driver_pools.convert(request), use_burst)
                if result.status == ResultCode.NO_ERROR:
                    driver_pools.write_back(result.output_shapes)
            finally:
                driver_pools.close()
            if result.status == ResultCode.OUTPUT_INSUFFICIENT_SIZE and result.output_shapes:
                # Runtime-owned buffers grow to the reported shapes; application buffers are the user's to grow.
                if len(result.output_shapes) != len(out_specs):
                    raise MltsError(ResultCode.OP_FAILED, f"{step.device.name} reported {len(result.output_shapes)} "
                                                          f"output shapes for {len(out_specs)} outputs")
                if any(isinstance(b, _Binding) and not s.is_sufficient
                       for b, s in zip(buffers, result.output_shapes)) or attempt == 2:
                    raise MltsError(ResultCode.OUTPUT_INSUFFICIENT_SIZE, result.message or "output buffer too small",
                                    output_shapes=self._model_output_shapes(step, result.output_shapes))
                buffers = self._allocate_outputs(out_specs, result.output_shapes)
                continue
            break
        if result.status != ResultCode.NO_ERROR:
            raise MltsError(result.status, f"{step.device.name}: {result.message or result.status.name}",
                            output_shapes=self._model_output_shapes(step, result.output_shapes))
        if len(result.output_shapes) != len(out_specs):
            raise MltsError(ResultCode.OP_FAILED, f"{step.device.name} reported {len(result.output_shapes)} "
                                                  f"output shapes for {len(out_specs)} outputs")
        if step.prepared is prepared and self.plan.is_simple and not self.fell_back:
            ex._timing = result.timing
            ex._driver_fenced_timing = result.fenced_timing
        for (operand_index, t, binding), buf, shape in zip(out_specs, buffers, result.output_shapes):
            dims = _reported_dims(shape, t)
            if isinstance(buf, _Binding) and memory_domains.is_device_memory(buf.memory) and dims is not None:
                values[operand_index] = _Binding(buf.memory, 0, _byte_count(t, dims), dims)  # stays in the driver
                continue
            capacity = buf.length if isinstance(buf, _Binding) else buf.nbytes
            if dims is None or _byte_count(t, dims) > capacity:
                raise MltsError(ResultCode.OP_FAILED, f"{step.device.name} reported success with output shape "
                                                      f"{shape.dimensions!r} for operand {operand_index}, which does "
                                                      f"not match {t.describe()} or its {capacity}-byte buffer")
            if isinstance(buf, _Binding):
                if buf.array is not None:
                    values[operand_index] = _view_as(buf.array, t, dims)
                else:
                    values[operand_index] = buf.memory.array(buf.offset, t.dtype, dims) if _fits(buf, t, dims) else None
                    if values[operand_index] is None:
                        raise MltsError(ResultCode.OUTPUT_INSUFFICIENT_SIZE, "output memory too small",
                                        output_shapes=self._model_output_shapes(step, result.output_shapes))
            else:
                values[operand_index] = _view_as(buf, t, dims)

    def _model_output_shapes(self, step: Step, step_shapes: list[OutputShape]) -> list[OutputShape] | None:
        """A step's reported shapes mapped onto the model's outputs (declared dims where the step has none)."""
        if not step_shapes or len(step_shapes) != len(step.outputs):
            return None
        main = self.comp.model.hal_model().main
        shapes = [OutputShape(tuple(main.operands[i].type.dimensions or ()), True) for i in main.output_indexes]
        for operand_index, shape in zip(step.outputs, step_shapes):
            if operand_index in main.output_indexes:
                shapes[main.output_indexes.index(operand_index)] = shape
        return shapes

    def _allocate_outputs(self, out_specs, reported) -> list[Any]:
        buffers = []
        for k, (operand_index, t, binding) in enumerate(out_specs):
            if binding is not None:
                buffers.append(binding)
                continue
            dims = tuple(reported[k].dimensions) if reported else (t.dimensions or ())
            count = int(np.prod([d if d > 0 else 1 for d in dims], dtype=np.int64)) if dims else 1
            buffers.append(np.empty(max(count, 1), dtype=t.dtype))
        return buffers

    def _send(self, step: Step, prepared: PreparedModel, request: Request, use_burst: bool) -> ExecutionResult:
        started = time.perf_counter_ns()
        device = step.device if prepared is step.prepared else self.comp.cpu_device  # else: CPU fallback
        try:  # the per-client priority queue in front of the driver (mlts.runtime.qos)
            with qos.admitted(qos.queue_for(device), self.comp.priority, self.deadline,
                              f"execution {id(self.ex):#x} step {step.index}"):
                result = self._call_driver(step, prepared, request, use_burst)
        except MltsError as e:  # refused by the queue (busy, or the deadline passed while waiting)
            result = ExecutionResult(e.code, [], message=e.message)
        self.ex._record_call(step, prepared, result, time.perf_counter_ns() - started)
        return result

    def _call_driver(self, step: Step, prepared: PreparedModel, request: Request, use_burst: bool) -> ExecutionResult:
        measure = self.ex._measure
        loop_timeout = self.ex._loop_timeout_ns
        try:
            if use_burst and self.burst is not None:
                result = self.burst.context(step).execute(request, measure, self.deadline, loop_timeout)
            elif self.fenced is not None and self.plan.is_simple and prepared is step.prepared and not self.fell_back:
                fences, timeout_after_fence = self.fenced  # already signalled: waited for before admission
                result = prepared.execute_fenced(request, fences, measure, self.deadline, loop_timeout,
                                                 timeout_after_fence)
            elif self.asynchronous:
                result = self._call_async(prepared, request, measure, loop_timeout)
            else:
                result = prepared.execute_synchronously(request, measure, self.deadline, loop_timeout)
        except MltsError as e:
            return ExecutionResult(e.code, e.output_shapes or [], message=e.message)
        except Exception as e:  # the client survives any driver failure
            return ExecutionResult(ResultCode.OP_FAILED, [], message=f"driver raised {type(e).__name__}: {e}")
        if not isinstance(result, ExecutionResult):
            return ExecutionResult(ResultCode.OP_FAILED, [], message="driver returned no result")
        try:
            status = ResultCode(result.status)
            shapes = list(result.output_shapes or [])
        except (ValueError, TypeError):
            return ExecutionResult(ResultCode.OP_FAILED, [], message=f"driver returned an invalid result "
                                                                     f"(status {result.status!r})")
        if any(not isinstance(s, OutputShape) for s in shapes):
            return ExecutionResult(ResultCode.OP_FAILED, [], message="driver returned invalid output shapes")
        timing = result.timing if is_valid_timing(result.timing) else NO_TIMING_INFO
        fenced_timing = getattr(result, "fenced_timing", None)  # execute_fenced's timingFenced
        if fenced_timing is not None and not is_valid_timing(fenced_timing):
            fenced_timing = None  # malformed: as if not reported
        call_timing = getattr(result, "call_timing", None)
        if status != result.status or shapes is not result.output_shapes or timing is not result.timing \
                or fenced_timing is not getattr(result, "fenced_timing", None):
            result = ExecutionResult(status, shapes, timing, result.message,
                                     call_timing if isinstance(call_timing, CallTiming) else None, fenced_timing)
        return result


    def _call_async(self, prepared: PreparedModel, request: Request, measure: bool,
                    loop_timeout: int) -> ExecutionResult:
        """NNAPI's IPreparedModel::execute: returns at once, the callback says when the outputs are
        written; a callback not notified by the deadline is a missed deadline. A driver that keeps
        the interface's default execute() (a thread around execute_synchronously) is called synchronously."""
        if type(prepared).execute is PreparedModel.execute:
            return prepared.execute_synchronously(request, measure, self.deadline, loop_timeout)
        callback = prepared.execute(request, measure, self.deadline, loop_timeout)
        wait = getattr(callback, "wait", None)
        if not callable(wait):
            return ExecutionResult(ResultCode.OP_FAILED, [], message="execute() returned no callback")
        result = wait(None if self.deadline is None else max(0.0, self.deadline - time.monotonic()) + 1.0)
        if result is None:
            return ExecutionResult(ResultCode.MISSED_DEADLINE_TRANSIENT, [],
                                   message="the asynchronous execution was not done by its deadline")
        return result


def _reported_dims(shape: OutputShape, t: OperandType) -> tuple[int, ...] | None:
    """A driver-reported output shape, or None when it is not a valid shape for the operand."""
    try:
        dims = tuple(shape.dimensions)
        if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in dims):
            return None
    except TypeError:
        return None
    dims = tuple(int(d) for d in dims)
    if not t.is_tensor:
        return dims if not dims else None
    if t.dimensions is not None and (len(dims) != len(t.dimensions) or any(
            d != 0 and d != r for d, r in zip(t.dimensions, dims))):
        return None
    return dims


def _byte_count(t: OperandType, dims: tuple[int, ...]) -> int:
    return (int(np.prod(dims, dtype=np.int64)) if dims else 1) * t.dtype.itemsize


def _fits(binding: _Binding, t: OperandType, dims: tuple[int, ...]) -> bool:
    n = int(np.prod(dims, dtype=np.int64)) if dims else 1
    return n * t.dtype.itemsize <= binding.length


def _view_as(buf: np.ndarray, t: OperandType, dims: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(dims, dtype=np.int64)) if dims else 1
    flat = buf.reshape(-1)
    if flat.dtype != t.dtype:
        flat = flat.view(np.uint8).view(t.dtype)
    return flat[:n].reshape(dims)
