"""Running one computation through a compilation's plan: each step's request built from the bindings and
the intermediate tensors, sent to its driver (synchronously, through a burst, asynchronously or fenced),
outputs checked against NNAPI's rules, and the CPU fallback applied where NNAPI allows it."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import qos, vlog
from ..drivers import base as drivers_base
from ..enums import NO_TIMING, ResultCode
from ..errors import MltsError
from ..hal import (NO_TIMING_INFO, CallTiming, DataLocation, ExecutionResult, IPreparedModel, OutputShape, Request,
                   RequestArgument, is_valid_timing)
from ..hal.memory import Memory
from ..operand_type import OperandType
from . import memory as memory_domains
from .burst import Burst
from .execution_plan import Step, log as plan_log
from .fallbacks import FallbackEvent

if TYPE_CHECKING:
    from .execution import Execution


NO_FALLBACK_CODES = {ResultCode.OUTPUT_INSUFFICIENT_SIZE, ResultCode.MISSED_DEADLINE_TRANSIENT,
                     ResultCode.MISSED_DEADLINE_PERSISTENT}


@dataclass
class Binding:
    """Where one model input/output lives: an application array or a memory region."""

    memory: Memory | None
    offset: int
    length: int
    dimensions: tuple[int, ...]
    array: np.ndarray | None = None
    omitted: bool = False


def domain_input(binding: Binding, call: str) -> Binding:
    """An input bound to memory from a MemoryDesc, with the dimensions its memory now holds (OP_FAILED when
    it holds nothing yet, or other dimensions than the execution's); other bindings as they are."""
    if binding.omitted or binding.memory is None or binding.memory.validator is None:
        return binding
    dims = memory_domains.input_dimensions(binding.memory, binding.dimensions, call)
    return Binding(binding.memory, 0, binding.memory.size, dims)


class StepRunner:
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
        values = self.input_values()
        try:
            for step in self.plan.steps:
                if step is not self.plan.steps[0]:
                    self._partition_checkpoint(step)
                self._run_step(step, values)
        except MltsError as e:
            self._recover(e, values)
        self._set_outputs(values)

    def input_values(self) -> dict[int, Any]:
        """The model inputs' values, by operand index (None where omitted)."""
        ex = self.ex
        values: dict[int, Any] = {}
        for operand_index, binding in zip(self.comp.model.hal_model().main.input_indexes, ex._inputs):
            values[operand_index] = None if binding.omitted else domain_input(binding, "compute")
        return values

    def finish_with(self, result: ExecutionResult, request: Request) -> None:
        """Complete a single-step computation whose driver call already returned `result` (a reusable
        execution's run, app/reusable_lane.py): the same checks, errors and CPU fallback as `run`."""
        step = self.plan.steps[0]
        values = self.input_values()
        try:
            cached = self.ex._requests[(step.index, id(step.prepared))]
            self._accept(step, step.prepared, checked_result(result), cached.out_specs, cached.buffers, values,
                         retry_allowed=False)
        except MltsError as e:
            self._recover(e, values)
        self._set_outputs(values)

    def _recover(self, e: MltsError, values: dict[int, Any]) -> None:
        """After a failed step: the whole model on the CPU where NNAPI allows it, else the error."""
        hal = self.comp.model.hal_model()
        main = hal.main
        on_cpu_already = self.plan.is_simple and self.plan.steps[0].device.name == self.comp.cpu_device.name
        if not self._may_fall_back(e) or on_cpu_already:
            raise self._finish_error(e)
        self._log(f"execution failed ({e.code.name}: {e.message}); whole model falls back to "
                  f"{self.comp.cpu_device.name}")
        self._record_fallback(e, "whole model")
        self.fell_back = True
        for k in [k for k in values if k not in main.input_indexes]:
            del values[k]
        whole = Step(0, self.comp.cpu_device, -1, [], hal, list(main.input_indexes), list(main.output_indexes))
        whole.prepared = self.comp.cpu_prepared("whole", hal)
        try:
            self._run_step(whole, values, allow_partial_fallback=False)
        except MltsError as e2:
            raise self._finish_error(e2)

    def _set_outputs(self, values: dict[int, Any]) -> None:
        ex = self.ex
        main = self.comp.model.hal_model().main
        shapes = []
        for k, operand_index in enumerate(main.output_indexes):
            v = values[operand_index]
            shapes.append(OutputShape(tuple(v.dimensions if isinstance(v, Binding) else v.shape), True))
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

    def _execute_on(self, step: Step, prepared: IPreparedModel, values: dict[int, Any], *, use_burst: bool) -> None:
        """One HAL request for a step: model outputs go straight to the application's bindings."""
        request, out_specs, buffers = self._request(step, prepared, values)
        for attempt in range(3):
            if attempt:
                request = _Request(step, values, out_specs, buffers).request
            if _has_device_memory(request):
                driver_pools = memory_domains.DriverPools(prepared)  # device memories: tokens or staged copies
                try:
                    result = self._send(step, prepared, driver_pools.convert(request), use_burst)
                    if result.status == ResultCode.NO_ERROR:
                        driver_pools.write_back(result.output_shapes)
                finally:
                    driver_pools.close()
            else:
                result = self._send(step, prepared, request, use_burst)
            if result.status == ResultCode.OUTPUT_INSUFFICIENT_SIZE and result.output_shapes and attempt < 2 \
                    and self._insufficient(step, result, out_specs, buffers, retry_allowed=True):
                buffers = self._allocate_outputs(out_specs, result.output_shapes)
                continue
            break
        self._accept(step, prepared, result, out_specs, buffers, values, retry_allowed=False)

    def _insufficient(self, step: Step, result: ExecutionResult, out_specs: list, buffers: list, *,
                      retry_allowed: bool) -> bool:
        """OUTPUT_INSUFFICIENT_SIZE reported: True when runtime-owned buffers should grow to the reported
        shapes and the step run again; raises when an application buffer is what is too small (it is the
        user's to grow) or no retry is allowed."""
        if len(result.output_shapes) != len(out_specs):
            raise MltsError(ResultCode.OP_FAILED, f"{step.device.name} reported {len(result.output_shapes)} "
                                                  f"output shapes for {len(out_specs)} outputs")
        if not retry_allowed or any(isinstance(b, Binding) and not s.is_sufficient
                                    for b, s in zip(buffers, result.output_shapes)):
            raise MltsError(ResultCode.OUTPUT_INSUFFICIENT_SIZE, result.message or "output buffer too small",
                            output_shapes=self._model_output_shapes(step, result.output_shapes))
        return True

    def _accept(self, step: Step, prepared: IPreparedModel, result: ExecutionResult, out_specs: list, buffers: list,
                values: dict[int, Any], *, retry_allowed: bool) -> None:
        """A step's driver result checked against NNAPI's rules; its outputs become `values`."""
        if result.status == ResultCode.OUTPUT_INSUFFICIENT_SIZE and result.output_shapes:
            self._insufficient(step, result, out_specs, buffers, retry_allowed=retry_allowed)
        if result.status != ResultCode.NO_ERROR:
            raise MltsError(result.status, f"{step.device.name}: {result.message or result.status.name}",
                            output_shapes=self._model_output_shapes(step, result.output_shapes))
        if len(result.output_shapes) != len(out_specs):
            raise MltsError(ResultCode.OP_FAILED, f"{step.device.name} reported {len(result.output_shapes)} "
                                                  f"output shapes for {len(out_specs)} outputs")
        if step.prepared is prepared and self.plan.is_simple and not self.fell_back:
            self.ex._timing = result.timing
            self.ex._driver_fenced_timing = result.fenced_timing
        for (operand_index, t, binding), buf, shape in zip(out_specs, buffers, result.output_shapes):
            dims = _reported_dims(shape, t)
            if isinstance(buf, Binding) and memory_domains.is_device_memory(buf.memory) and dims is not None:
                values[operand_index] = Binding(buf.memory, 0, _byte_count(t, dims), dims)  # stays in the driver
                continue
            capacity = buf.length if isinstance(buf, Binding) else buf.nbytes
            if dims is None or _byte_count(t, dims) > capacity:
                raise MltsError(ResultCode.OP_FAILED, f"{step.device.name} reported success with output shape "
                                                      f"{shape.dimensions!r} for operand {operand_index}, which does "
                                                      f"not match {t.describe()} or its {capacity}-byte buffer")
            if isinstance(buf, Binding):
                if buf.array is not None:
                    values[operand_index] = _view_as(buf.array, t, dims)
                else:
                    values[operand_index] = buf.memory.array(buf.offset, t.dtype, dims) if _fits(buf, t, dims) else None
                    if values[operand_index] is None:
                        raise MltsError(ResultCode.OUTPUT_INSUFFICIENT_SIZE, "output memory too small",
                                        output_shapes=self._model_output_shapes(step, result.output_shapes))
            else:
                values[operand_index] = _view_as(buf, t, dims)

    def _request(self, step: Step, prepared: IPreparedModel, values: dict[int, Any]) -> tuple[Request, list, list]:
        """The step's request, its output specs and buffers. A reusable execution whose step reads and
        writes only the application's own bindings sends the same Request again while they are unchanged
        (the driver then recognises it: hal.validation.RequestValidator)."""
        ex = self.ex
        bindings = tuple(values.get(i) for i in step.inputs)
        key = (step.index, id(prepared))
        cached = ex._requests.get(key)
        if cached is not None and cached.serves(prepared, bindings, ex._outputs):
            return cached.request, cached.out_specs, cached.buffers
        main_outputs = self.comp.model.hal_model().main.output_indexes
        step_main = step.model.main
        out_specs = []
        for k, operand_index in enumerate(step.outputs):
            t = step_main.operands[step_main.output_indexes[k]].type
            binding = ex._outputs[main_outputs.index(operand_index)] if operand_index in main_outputs else None
            out_specs.append((operand_index, t, binding))
        buffers = self._allocate_outputs(out_specs, None)
        request = _Request(step, values, out_specs, buffers).request
        if all(isinstance(b, Binding) for b in bindings + tuple(buffers)):
            outputs = [(main_outputs.index(i), b) for i, _, b in out_specs]
            ex._requests[key] = _SentRequest(prepared, bindings, outputs, out_specs, buffers, request)
        return request, out_specs, buffers

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

    def _send(self, step: Step, prepared: IPreparedModel, request: Request, use_burst: bool) -> ExecutionResult:
        started = time.perf_counter_ns()
        device = step.device if prepared is step.prepared else self.comp.cpu_device  # else: CPU fallback
        try:  # the per-client priority queue in front of the driver (mlts.runtime.qos)
            result = qos.run_admitted(qos.queue_for(device), self.comp.priority, self.deadline,
                                      f"execution {id(self.ex):#x} step {step.index}",
                                      self._call_driver, step, prepared, request, use_burst)
        except MltsError as e:  # refused by the queue (busy, or the deadline passed while waiting)
            result = ExecutionResult(e.code, [], message=e.message)
        self.ex._record_call(step, prepared, result, time.perf_counter_ns() - started)
        return result

    def _call_driver(self, step: Step, prepared: IPreparedModel, request: Request, use_burst: bool) -> ExecutionResult:
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
        return checked_result(result)

    def _call_async(self, prepared: IPreparedModel, request: Request, measure: bool,
                    loop_timeout: int) -> ExecutionResult:
        """NNAPI's IPreparedModel::execute: returns at once, the callback says when the outputs are
        written; a callback not notified by the deadline is a missed deadline. A driver that keeps
        the interface's default execute() (a thread around execute_synchronously) is called synchronously."""
        if type(prepared).execute is drivers_base.PreparedModel.execute:
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


def checked_result(result: Any) -> ExecutionResult:
    """What a driver returned, as a well-formed ExecutionResult (OP_FAILED for anything malformed): the
    client trusts nothing that crosses the driver boundary."""
    if not isinstance(result, ExecutionResult):
        return ExecutionResult(ResultCode.OP_FAILED, [], message="driver returned no result")
    try:
        status = result.status if type(result.status) is ResultCode else ResultCode(result.status)
        shapes = result.output_shapes if type(result.output_shapes) is list else list(result.output_shapes or [])
    except (ValueError, TypeError):
        return ExecutionResult(ResultCode.OP_FAILED, [], message=f"driver returned an invalid result "
                                                                 f"(status {result.status!r})")
    for shape in shapes:
        if not isinstance(shape, OutputShape):
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


_STATUS_NAMES = {code: code.name for code in ResultCode}


def call_record(step_index: int, device_name: str, hosting: str, result: ExecutionResult, elapsed_ns: int) -> dict:
    """Where one driver call's time went (Execution.get_timing_breakdown's `calls`), from a checked result:
    the driver's CallTiming (services report ipc and driver time) bounded by the time measured here."""
    elapsed = elapsed_ns // 1000
    ct = result.call_timing
    if isinstance(ct, CallTiming):
        driver = min(max(0, int(ct.driver)), elapsed)
        ipc = min(max(0, int(ct.ipc)), elapsed - driver)
    else:
        driver, ipc = elapsed, 0
    on_device = result.timing.time_on_device
    return {"step": step_index, "device_name": device_name, "hosting": hosting,
            "status": _STATUS_NAMES[result.status], "ipc": ipc, "driver": driver, "runtime": elapsed - ipc - driver,
            "device": None if on_device == NO_TIMING else int(on_device)}


@dataclass
class _SentRequest:
    """A request a reusable execution sent, with the bindings it was built from."""

    prepared: IPreparedModel
    inputs: tuple[Binding, ...]
    outputs: list[tuple[int, Binding]]  # (model output index, its binding)
    out_specs: list
    buffers: list
    request: Request

    def serves(self, prepared: IPreparedModel, inputs: tuple, bindings: list) -> bool:
        """Still the request for these bindings (the same objects: set_input/set_output make new ones)."""
        if prepared is not self.prepared or len(inputs) != len(self.inputs):
            return False
        for a, b in zip(inputs, self.inputs):
            if a is not b:
                return False
        for k, b in self.outputs:
            if bindings[k] is not b:
                return False
        return True


class _Request:
    """Builds one HAL request: every region in a pool, each pool listed once."""

    def __init__(self, step: Step, values: dict[int, Any], out_specs: list, buffers: list) -> None:
        self.pools: list[Memory] = []
        self._pool_index: dict[int, int] = {}
        inputs = []
        for operand_index in step.inputs:
            v = values.get(operand_index)
            if v is None:
                inputs.append(RequestArgument(has_no_value=True))
            elif isinstance(v, Binding):
                inputs.append(RequestArgument(False, self.location(v.memory, v.offset, v.length), v.dimensions))
            else:
                mem = Memory.wrap_array(v, writable=False)
                inputs.append(RequestArgument(False, self.location(mem, 0, v.nbytes), tuple(v.shape)))
        outputs = []
        for buf in buffers:
            if isinstance(buf, Binding):
                outputs.append(RequestArgument(False, self.location(buf.memory, buf.offset, buf.length),
                                               buf.dimensions))
            else:
                mem = Memory.wrap_array(buf, writable=True)
                outputs.append(RequestArgument(False, self.location(mem, 0, buf.nbytes), ()))
        self.request = Request(tuple(inputs), tuple(outputs), tuple(self.pools))

    def location(self, memory: Memory, offset: int, length: int) -> DataLocation:
        if memory.id not in self._pool_index:
            self._pool_index[memory.id] = len(self.pools)
            self.pools.append(memory)
        return DataLocation(self._pool_index[memory.id], offset, length)


def _reported_dims(shape: OutputShape, t: OperandType) -> tuple[int, ...] | None:
    """A driver-reported output shape, or None when it is not a valid shape for the operand."""
    try:
        reported = tuple(shape.dimensions)
    except TypeError:
        return None
    dims = []
    for d in reported:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            return None
        dims.append(int(d))
    if not t.is_tensor:
        return () if not dims else None
    declared = t.dimensions
    if declared is not None:
        if len(dims) != len(declared):
            return None
        for d, r in zip(declared, dims):
            if d != 0 and d != r:
                return None
    return tuple(dims)


def _has_device_memory(request: Request) -> bool:
    for pool in request.pools:
        if isinstance(pool, memory_domains.DeviceMemory):
            return True
    return False


def _byte_count(t: OperandType, dims: tuple[int, ...]) -> int:
    return math.prod(dims) * t.dtype.itemsize


def _fits(binding: Binding, t: OperandType, dims: tuple[int, ...]) -> bool:
    n = math.prod(dims)
    return n * t.dtype.itemsize <= binding.length


def _view_as(buf: np.ndarray, t: OperandType, dims: tuple[int, ...]) -> np.ndarray:
    n = math.prod(dims)
    flat = buf.reshape(-1)
    if flat.dtype != t.dtype:
        flat = flat.view(np.uint8).view(t.dtype)
    return flat[:n].reshape(dims)
