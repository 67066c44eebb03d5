"""Execution (ANeuralNetworksExecution): running a compilation on one set of inputs.

The runtime turns the application's arrays or memory regions into HAL requests (data stays in
pools; application arrays are wrapped, not copied, for in-process drivers), runs the plan's steps
carrying intermediate tensors between devices (step_runner.py), and applies NNAPI's CPU fallback rules.
Burst and Event are in burst.py and event.py.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

from ..enums import DEFAULT_LOOP_TIMEOUT_NS, MAXIMUM_LOOP_TIMEOUT_NS, NO_TIMING, DurationCode, ResultCode
from ..errors import MltsError, bad_data, bad_state
from ..hal import NO_TIMING_INFO, ExecutionResult, IPreparedModel, OutputShape, Timing, deadline_from_timeout
from ..hal.memory import Memory
from ..hal.sync_fence import close_fds
from ..hal.validation import effective_type
from ..operand_type import OperandType, as_operand_array
from . import memory as memory_domains
from .burst import Burst
from .compilation import Compilation
from .event import Event, dup_fences, wait_for_dependencies
from .execution_plan import Step
from .op_profiling import OperationProfile, ProfiledStepRunner
from .reusable_lane import ReusableLane, lane_for
from .step_runner import Binding, StepRunner, call_record, domain_input


#: successful computes with unchanged settings after which a reusable execution binds its request
LANE_AFTER_COMPUTES = 2


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
        self._inputs: list[Binding | None] = [None] * len(self._in_types)
        self._outputs: list[Binding | None] = [None] * len(self._out_types)
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
        #: per driver call, (step, device name, hosting, checked result, elapsed ns): where its time went, made
        #: into step_runner.call_record's dicts only when get_timing_breakdown asks
        self._calls: list[tuple] = []
        self._requests: dict = {}  # (step, prepared model) -> the request last sent (step_runner._SentRequest)
        self._lane: ReusableLane | None = None  # reusable_lane.py: later computes of unchanged settings
        self._unchanged_computes = 0  # successful computes since the last setting changed
        self._wall_ns = 0

    # -- settings -------------------------------------------------------------------------------
    def free(self) -> None:
        """ANeuralNetworksExecution_free: releases what the execution holds in drivers (its reusable
        execution: for a driver service, a ring and a service thread) now rather than when it is
        collected; the execution cannot be used again. Never raises."""
        if self._lane is not None:
            self._lane.close()
            self._lane = None
        self._requests = {}
        self._state = "freed"

    def _check_preparation(self, call: str) -> None:
        if self._state == "freed":
            raise bad_state(f"{call}: the execution has been freed")
        if self._state == "computing":
            raise bad_state(f"{call}: the execution is running")
        if self._state == "completed" and not self._reusable:
            raise bad_state(f"{call}: the execution has completed and is not reusable")

    def _change(self, call: str) -> None:
        """A setting is about to change: allowed only between computations, and the reusable lane (built
        for the settings of the last compute) no longer applies."""
        self._check_preparation(call)
        self._unchanged_computes = 0
        if self._lane is not None:
            self._lane.close()
            self._lane = None

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
        self._change("set_input")
        i = self._index(index, len(self._in_types), "set_input")
        declared = self._in_types[i]
        if array is None:
            self._inputs[i] = Binding(None, 0, 0, (), omitted=True)
            return
        arr = _as_array(array, declared, f"set_input({i})")
        t = self._effective(declared, operand_type, arr.shape if declared.is_tensor else None, f"set_input({i})")
        if t.is_tensor and not t.is_fully_specified:
            raise bad_data(f"set_input({i}): dimensions {t.dimensions} must be fully specified")
        if arr.nbytes != t.byte_size():
            raise bad_data(f"set_input({i}): {arr.nbytes} bytes given, {t.describe()} needs {t.byte_size()}")
        arr = np.ascontiguousarray(arr)
        self._inputs[i] = Binding(Memory.wrap_array(arr, writable=False), 0, arr.nbytes, t.dimensions or (), arr)

    def set_input_from_memory(self, index: int, memory: Memory, offset: int, length: int,
                              operand_type: OperandType | None = None) -> None:
        self._change("set_input_from_memory")
        i = self._index(index, len(self._in_types), "set_input_from_memory")
        if not isinstance(memory, Memory):
            raise bad_data(f"set_input_from_memory({i}): expected a Memory")
        if memory.validator is not None:  # created from a MemoryDesc: its roles only, whole
            self._inputs[i] = Binding(memory, *memory_domains.bind(
                memory, self.compilation, "input", i, self._in_types[i], operand_type, offset, length,
                f"set_input_from_memory({i})"))
            return
        memory.check_region(offset, length, f"set_input_from_memory({i})")
        t = self._effective(self._in_types[i], operand_type, None, f"set_input_from_memory({i})")
        if t.is_fully_specified or t.is_scalar:
            if length != t.byte_size():
                raise bad_data(f"set_input_from_memory({i}): length {length} != {t.byte_size()} bytes of {t.describe()}")
        self._inputs[i] = Binding(memory, int(offset), int(length), t.dimensions or ())

    def set_output(self, index: int, array: np.ndarray, operand_type: OperandType | None = None) -> None:
        """Bind model output `index` to a writable, C-contiguous array of the operand's dtype."""
        self._change("set_output")
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
        self._outputs[i] = Binding(Memory.wrap_array(array, writable=True), 0, array.nbytes,
                                    t.dimensions or (), array)

    def set_output_from_memory(self, index: int, memory: Memory, offset: int, length: int,
                               operand_type: OperandType | None = None) -> None:
        self._change("set_output_from_memory")
        i = self._index(index, len(self._out_types), "set_output_from_memory")
        if not isinstance(memory, Memory):
            raise bad_data(f"set_output_from_memory({i}): expected a Memory")
        if memory.validator is not None:  # created from a MemoryDesc: its roles only, whole
            self._outputs[i] = Binding(memory, *memory_domains.bind(
                memory, self.compilation, "output", i, self._out_types[i], operand_type, offset, length,
                f"set_output_from_memory({i})"))
            return
        memory.check_region(offset, length, f"set_output_from_memory({i})", for_write=True)
        t = self._effective(self._out_types[i], operand_type, None, f"set_output_from_memory({i})")
        if t.is_fully_specified and length < t.byte_size():
            raise bad_data(f"set_output_from_memory({i}): length {length} < {t.byte_size()} bytes of {t.describe()}")
        self._outputs[i] = Binding(memory, int(offset), int(length), t.dimensions or ())

    def set_measure_timing(self, measure: bool) -> None:
        self._change("set_measure_timing")
        _check_bool(measure, "set_measure_timing")
        if not self.compilation.is_single_explicit_device:
            raise bad_data("set_measure_timing: only for a compilation created for exactly one device")
        self._measure = bool(measure)

    def set_timeout(self, duration_ns: int) -> None:
        self._change("set_timeout")
        if isinstance(duration_ns, bool) or not isinstance(duration_ns, int) or duration_ns < 0:
            raise bad_data(f"set_timeout: duration must be a non-negative int of nanoseconds, got {duration_ns!r}")
        if not self.compilation.is_single_explicit_device:
            raise bad_data("set_timeout: only for a compilation created for exactly one device")
        self._timeout_ns = duration_ns or None

    def set_loop_timeout(self, duration_ns: int) -> None:
        """Limit for each WHILE loop; values above the 15 s maximum are clamped to it (as NNAPI)."""
        self._change("set_loop_timeout")
        if isinstance(duration_ns, bool) or not isinstance(duration_ns, int) or duration_ns < 0:
            raise bad_data(f"set_loop_timeout: duration must be a non-negative int of nanoseconds, got {duration_ns!r}")
        self._loop_timeout_ns = min(duration_ns, MAXIMUM_LOOP_TIMEOUT_NS)

    def set_reusable(self, reusable: bool) -> None:
        self._change("set_reusable")
        _check_bool(reusable, "set_reusable")
        self._reusable = bool(reusable)

    # -- computing ------------------------------------------------------------------------------
    def compute(self) -> None:
        """Run synchronously; raises MltsError on failure. A reusable execution whose settings have not
        changed since its last successful compute runs through its reusable lane (reusable_lane.py)."""
        lane = self._lane
        if lane is not None and lane.burst is None and lane.compute(self):
            return
        self._begin("compute")
        self._run(None)
        self._rebind(None)

    def _rebind(self, burst: Burst | None) -> None:
        """After a successful compute of a reusable execution: the lane for the next ones, once the same
        settings have served two computes (an execution rebound for every compute, as when an accuracy
        pass feeds image after image, never pays for creating a driver's reusable execution)."""
        if not self._reusable:
            return
        self._unchanged_computes += 1
        if self._lane is not None:
            self._lane.close()
            self._lane = None
        if self._unchanged_computes >= LANE_AFTER_COMPUTES:
            self._lane = lane_for(self, burst)

    def compute_profiled(self) -> list[OperationProfile]:
        """Extension: compute(), timing each operation on devices whose prepared models implement the HAL's
        IOperationProfiling (nnapi-reference, the sample drivers, mlts-fast); one entry per operation they
        ran, in run order, and none for operations on other devices. Slower than compute(): it shows where
        the time goes, not the latency (op_profiling.py)."""
        self._begin("compute_profiled")
        profile: list[OperationProfile] = []
        self._run(None, runner=lambda *args: ProfiledStepRunner(profile, *args))
        return sorted(profile, key=lambda p: p.position)

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
            lane = self._lane
            if lane is not None and lane.burst is burst and lane.compute(self):
                return
            self._begin("burst_compute")
            self._run(burst)
            self._rebind(burst)
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
        fences = dup_fences(deps)  # this execution's own descriptors: a dependency freed meanwhile cannot matter
        try:
            self._begin("start_compute_with_dependencies")
        except BaseException:
            close_fds(fences)
            raise
        call_deadline = deadline_from_timeout(self._timeout_ns)  # set_timeout counts from the call (as NNAPI)
        event = Event()

        def work() -> None:
            try:
                wait_for_dependencies(deps, fences)  # before any queue admission: see the docstring
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
                domain_input(b, f"{call}: input {k}")  # memory from a MemoryDesc: written, dims agree
            self._state = "computing"
            self._output_shapes = None
            self._timing = Timing()
            self._fenced_timing = None
            self._driver_fenced_timing = None
            self._calls = []
            self._wall_ns = 0

    def _run(self, burst: Burst | None, deadline_override: float | None = None,
             fenced: tuple[list[int], int | None] | None = None, asynchronous: bool = False,
             runner: Callable[..., StepRunner] = StepRunner) -> None:
        started = time.perf_counter_ns()
        try:
            deadline = deadline_override if deadline_override is not None else deadline_from_timeout(self._timeout_ns)
            runner(self, burst, deadline, fenced, asynchronous).run()
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
        calls = [call_record(*c) for c in self._calls]
        total = self._wall_ns // 1000
        ipc = sum(c["ipc"] for c in calls)
        driver = sum(c["driver"] for c in calls)
        device_times = [c["device"] for c in calls if c["device"] is not None]
        return {"total": total, "runtime": max(0, total - ipc - driver), "ipc": ipc, "driver": driver,
                "device": sum(device_times) if device_times else None, "calls": calls}

    def _record_call(self, step: Step, prepared: IPreparedModel, result: ExecutionResult, elapsed_ns: int) -> None:
        device = step.device if prepared is step.prepared else self.compilation.cpu_device  # else: CPU fallback
        self._calls.append((step.index, device.name, device.hosting, result, elapsed_ns))


def _as_array(value: Any, t: OperandType, what: str) -> np.ndarray:
    """The input's array, by the rule Model.set_operand_value applies to constants (operand_type.py)."""
    return as_operand_array(value, t, what)


def _check_bool(value: Any, call: str) -> None:
    """A flag must be a bool: bool('no') is True, so anything else is refused rather than coerced."""
    if not isinstance(value, (bool, np.bool_)):
        raise bad_data(f"{call}: expected a bool (True or False), got {value!r}")


