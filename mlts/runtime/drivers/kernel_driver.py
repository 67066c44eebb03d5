"""A thin driver over the shared CPU kernels (AOSP's sample driver pattern).

Subclasses differ only in identity, declared performance and which operations/types they accept,
which is what gives the partitioner real choices. The reference driver is one of them.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterable

import numpy as np

from .. import qos, vlog
from ..cpu.bound_graph import BoundGraph
from ..cpu.executor import PreparedGraph
from ..cpu.profiling import ProfiledGraph
from ..enums import DeviceType, NO_TIMING, OperandCode, OperationCode, Preference, Priority, ResultCode
from ..errors import ExecutionAborted, MltsError
from ..hal import (NO_TIMING_INFO, AllocatedBuffer, BufferDesc, BufferRole, BufferToken, CacheHandles, Capabilities,
                   ExecutionResult, HalModel, IExecution, IOperationProfiling, OperationTime, OutputShape, Request,
                   Timing, failed_result)
from .base import Driver, PreparedModel
from ..hal.validation import (RequestValidator, validate_deadline, validate_execution_arguments, validate_hal_model,
                              validate_preparation_arguments, validate_request)
from ..ops import get_operation
from ..ops.control_flow import supported_operations
from .cache_files import load_for_driver, save_for_driver
from .device_buffers import BufferTracker, RequestBuffers, allocate_buffer


class KernelDriver(Driver):
    """A driver that runs the registry's kernels on the CPU, possibly for a subset of operations."""

    #: memory for a prepared model's constants; a model that needs more can never fit
    #: (RESOURCE_EXHAUSTED_PERSISTENT). None: no limit.
    max_model_bytes: int | None = None

    def __init__(self, name: str, capabilities: Capabilities, *, version: str = "1.0",
                 device_type: DeviceType = DeviceType.CPU,
                 operations: Iterable[OperationCode] | None = None,
                 operand_types: Iterable[OperandCode] | None = None,
                 accepts: Callable[[OperationCode, OperandCode | None], bool] | None = None,
                 memory_domains: bool = True) -> None:
        self.name = name
        #: memory domains: buffers this driver allocated, by token (None: allocate refuses, see hal.Driver)
        self.buffer_tracker = BufferTracker() if memory_domains else None
        self.version = version
        self.device_type = device_type
        self._capabilities = capabilities
        self._operations = None if operations is None else frozenset(operations)
        self._operand_types = None if operand_types is None else frozenset(operand_types)
        self._accepts = accepts

    def get_capabilities(self) -> Capabilities:
        return self._capabilities

    def supports(self, code: OperationCode, primary: OperandCode | None) -> bool:
        impl = get_operation(code)
        if impl is None:
            return False
        if self._operations is not None and code not in self._operations:
            return False
        if impl.supported_types and primary is not None and primary not in impl.supported_types:
            return False
        if self._operand_types is not None and primary is not None and primary not in self._operand_types:
            return False
        return self._accepts(code, primary) if self._accepts else True

    def get_supported_operations(self, model: HalModel) -> list[bool]:
        validate_hal_model(model)
        return supported_operations(model, self.supports)  # IF/WHILE: only with all they reference

    def prepare_model(self, model: HalModel, preference: Preference, priority: Priority,
                      deadline: float | None, cache: CacheHandles | None) -> PreparedModel:
        validate_preparation_arguments(preference, priority, deadline, cache, f"{self.name}: prepare_model")
        validate_hal_model(model)
        started = qos.check_preparation(self, model, deadline)  # MISSED_DEADLINE_* / RESOURCE_EXHAUSTED_PERSISTENT
        supported = self.get_supported_operations(model)
        if not all(supported):
            bad = [f"{j} ({op.type.name})" for j, (op, ok) in enumerate(zip(model.main.operations, supported)) if not ok]
            raise MltsError(ResultCode.BAD_DATA, f"{self.name} does not support operations {', '.join(bad)}")
        vlog.log("driver", f"{self.name}: preparing {len(model.main.operations)} operations")
        prepared = KernelPreparedModel(self, model)
        qos.record_preparation(self, model, started)
        if cache is not None:
            save_for_driver(self, model, cache)
        return prepared

    def allocate(self, desc: BufferDesc, prepared_models, input_roles: list[BufferRole],
                 output_roles: list[BufferRole]) -> AllocatedBuffer:
        """Memory domains: a buffer kept in this driver for roles on models it prepared (device_buffers.py)."""
        tracker = getattr(self, "buffer_tracker", None)
        if tracker is None:
            return super().allocate(desc, prepared_models, input_roles, output_roles)
        return allocate_buffer(self.name, tracker, desc, prepared_models, input_roles, output_roles,
                               lambda p: p.model if getattr(p, "driver", None) is self else None)

    def request_buffers(self, prepared: PreparedModel) -> RequestBuffers | None:
        """How `prepared` finds the buffers a request names by token (None: requests may name none)."""
        tracker = getattr(self, "buffer_tracker", None)
        return None if tracker is None else RequestBuffers(tracker, prepared)

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        """One model-cache file (the model's structure) and one data-cache file (its constants)."""
        return (1, 1)

    def prepare_model_from_cache(self, deadline: float | None, cache: CacheHandles) -> PreparedModel:
        """The model this driver cached, without re-validating it or re-checking its support: the cache's
        checks (driver, version, token, checksums) prove it is a model this driver already accepted."""
        validate_deadline(deadline, f"{self.name}: prepare_model_from_cache")
        return KernelPreparedModel(self, load_for_driver(self, deadline, cache))


class KernelPreparedModel(PreparedModel, IOperationProfiling):
    def __init__(self, driver: KernelDriver, model: HalModel) -> None:
        self.driver = driver
        self.model = model
        self.graph = PreparedGraph(model)
        self.estimate = qos.RunTimeEstimate()  # recent run times: the deadline predictor
        self.requests = {tokens: RequestValidator(model, accept_tokens=tokens) for tokens in (False, True)}

    def execute_profiled(self, request: Request, deadline: float | None,
                         loop_timeout_ns: int) -> tuple[ExecutionResult, list[OperationTime]]:
        """IOperationProfiling: one run with every operation timed (cpu/profiling.py). It bypasses the
        deadline predictor, whose estimate a slower profiled run would skew; the deadline still holds."""
        try:
            validate_execution_arguments(True, deadline, loop_timeout_ns, f"{self.driver.name}: execute_profiled")
        except MltsError as e:
            return ExecutionResult(e.code, [], message=e.message), []
        cls = type(self)
        if cls.execute_synchronously is not KernelPreparedModel.execute_synchronously \
                and cls.execute_profiled is KernelPreparedModel.execute_profiled:
            # A subclass that changes how it executes is profiled only if it says so (by overriding this
            # method): timing the shared kernels instead could report a run that is not the one it makes.
            return self.execute_synchronously(request, True, deadline, loop_timeout_ns), []
        graph = ProfiledGraph(self.graph)
        result = run_request(graph, request, True, deadline, loop_timeout_ns, self.driver.name,
                             device_buffers=self.driver.request_buffers(self))
        return result, (graph.times if result.status == ResultCode.NO_ERROR else [])

    def execute_synchronously(self, request: Request, measure: bool, deadline: float | None,
                              loop_timeout_ns: int) -> ExecutionResult:
        try:
            validate_execution_arguments(measure, deadline, loop_timeout_ns, f"{self.driver.name}: execute")
        except MltsError as e:
            return ExecutionResult(e.code, [], message=e.message)
        # Refused before starting when the deadline will be missed; checkpoints between operations
        # abort a run that will miss it and let the runtime's queue pre-empt it (mlts.runtime.qos).
        return qos.predicted_run(self.estimate, qos.load_of(self.driver), len(self.model.main.operations),
                                 deadline, self.driver.name, self._run, request, measure, deadline, loop_timeout_ns)

    def create_reusable_execution(self, request: Request, measure: bool, loop_timeout_ns: int) -> IExecution:
        """Validated and resolved once. A request naming driver-allocated buffers (resolved per run), or a
        subclass that changes execute_synchronously, gets the forwarding default, so that its run is the one
        made."""
        if type(self).execute_synchronously is not KernelPreparedModel.execute_synchronously or \
                any(isinstance(pool, BufferToken) for pool in request.pools):
            return super().create_reusable_execution(request, measure, loop_timeout_ns)
        return self.kernel_execution(request, measure, loop_timeout_ns)

    def kernel_execution(self, request: Request, measure: bool, loop_timeout_ns: int) -> KernelExecution:
        """The shared kernels' reusable execution of a request naming no driver-allocated buffer (what
        create_reusable_execution returns; a subclass that wraps the kernels' runs wraps this too)."""
        name = self.driver.name
        validate_execution_arguments(measure, None, loop_timeout_ns, f"{name}: createReusableExecution")
        in_types = validate_request(request, self.model)
        return KernelExecution(self, request, _input_arrays(request, in_types, None), measure, loop_timeout_ns)

    def _run(self, request: Request, measure: bool, deadline: float | None, loop_timeout_ns: int,
             checkpoint) -> ExecutionResult:
        device_buffers = self.driver.request_buffers(self)
        return run_request(self.graph, request, measure, deadline, loop_timeout_ns, self.driver.name, checkpoint,
                           device_buffers=device_buffers, validator=self.requests[device_buffers is not None])


def run_request(graph: PreparedGraph, request: Request, measure: bool, deadline: float | None,
                loop_timeout_ns: int, driver_name: str, checkpoint=None,
                device_buffers: RequestBuffers | None = None,
                validator: RequestValidator | None = None) -> ExecutionResult:
    """Serve one request on a prepared graph: read inputs from pools, run, write outputs to pools.
    With `device_buffers`, pools may also be tokens of buffers the driver allocated (memory domains)."""
    t_driver = time.perf_counter_ns()
    try:
        in_types = (validator.validate(request) if validator is not None
                    else validate_request(request, graph.model, accept_tokens=device_buffers is not None))
        buffers = device_buffers.resolve(request) if device_buffers is not None else None
        if buffers is not None and not buffers.by_pool:
            buffers = None  # the request names no device buffer: plain pools only
        if deadline is not None and time.monotonic() > deadline:  # as AOSP's sample driver: persistent
            return ExecutionResult(ResultCode.MISSED_DEADLINE_PERSISTENT, [], message="deadline already passed")
        memo = validator.memo(request) if validator is not None and buffers is None else {}
        inputs = memo.get("inputs")  # views of the input regions, kept while the same request comes again
        if inputs is None:
            inputs = memo["inputs"] = _input_arrays(request, in_types, buffers)
        t_device = time.perf_counter_ns()
        outputs = graph.run(inputs, deadline=deadline, loop_timeout_ns=loop_timeout_ns, checkpoint=checkpoint)
        t_device = time.perf_counter_ns() - t_device
        return _write_outputs(request, outputs, buffers, measure, t_driver, t_device)
    except Exception as e:  # a driver must never let an exception escape to its client
        return failed_execution(driver_name, e)


def _write_outputs(request: Request, outputs: list[np.ndarray], buffers: RequestBuffers | None, measure: bool,
                   t_driver: int, t_device: int) -> ExecutionResult:
    """A run's outputs written to the request's regions (or device buffers), with NNAPI's shape checks."""
    out_buffers = ([buffers.buffer(arg.location.pool_index) for arg in request.outputs] if buffers is not None
                   else [None] * len(request.outputs))
    shapes = [OutputShape(tuple(o.shape), o.nbytes <= arg.location.length if b is None else b.fits(o.shape))
              for o, arg, b in zip(outputs, request.outputs, out_buffers)]
    if any(b is not None and not s.is_sufficient for b, s in zip(out_buffers, shapes)):
        # as AOSP's sample driver: a device buffer of the wrong dimensions is a failure, not a resize
        return ExecutionResult(ResultCode.OP_FAILED, [], message="an output's computed shape does not fit "
                                                                 "the dimensions of its device buffer")
    for s in shapes:
        if not s.is_sufficient:
            small = [k for k, s in enumerate(shapes) if not s.is_sufficient]
            return ExecutionResult(ResultCode.OUTPUT_INSUFFICIENT_SIZE, shapes,
                                   message=f"output buffers {small} are too small")
    for k, (o, arg) in enumerate(zip(outputs, request.outputs)):
        if out_buffers[k] is not None:
            out_buffers[k].write(o, f"output {k}")
            continue
        pool = request.pools[arg.location.pool_index]
        pool.array(arg.location.offset, o.dtype, o.shape)[...] = o  # the dtype is the operand's: checked by the executor
    return ExecutionResult(ResultCode.NO_ERROR, shapes, measured_timing(measure, t_driver, t_device))


class KernelExecution(IExecution):
    """A kernel driver's reusable execution (createReusableExecution): the request validated and its
    input regions resolved once; each run goes through the driver's deadline predictor and checkpoints
    as execute_synchronously does."""

    def __init__(self, prepared: KernelPreparedModel, request: Request, inputs: list, measure: bool,
                 loop_timeout_ns: int) -> None:
        self.prepared = prepared
        self.request = request
        self.inputs = inputs
        self.measure = measure
        self.loop_timeout_ns = loop_timeout_ns
        self.operations = len(prepared.model.main.operations)
        self.load = qos.load_of(prepared.driver)
        self.graph = BoundGraph(prepared.graph)
        self._running = threading.Lock()
        self.written: list | None = None  # (shape, dtype, view of the output region) of the last good run
        self.shapes: list[OutputShape] = []

    def execute_synchronously(self, deadline: float | None) -> ExecutionResult:
        driver = self.prepared.driver
        if deadline is not None:
            try:
                validate_deadline(deadline, f"{driver.name}: execute")
            except MltsError as e:
                return ExecutionResult(e.code, [], message=e.message)
        return qos.predicted_run(self.prepared.estimate, self.load, self.operations, deadline, driver.name,
                                 self._run, deadline)

    def _run(self, deadline: float | None, checkpoint) -> ExecutionResult:
        measure = self.measure
        t_driver = time.perf_counter_ns() if measure else 0
        try:
            if deadline is not None and time.monotonic() > deadline:
                return ExecutionResult(ResultCode.MISSED_DEADLINE_PERSISTENT, [], message="deadline already passed")
            t_device = time.perf_counter_ns() if measure else 0
            if self._running.acquire(blocking=False):  # the bound graph serves one run at a time
                try:
                    outputs = self.graph.run(self.inputs, deadline=deadline, loop_timeout_ns=self.loop_timeout_ns,
                                             checkpoint=checkpoint)
                finally:
                    self._running.release()
            else:  # a concurrent run of the same execution: the executor's own run
                outputs = self.prepared.graph.run(self.inputs, deadline=deadline,
                                                  loop_timeout_ns=self.loop_timeout_ns, checkpoint=checkpoint)
            if measure:
                t_device = time.perf_counter_ns() - t_device
            written = self.written
            if written is not None and len(outputs) == len(written):
                # outputs of the shapes and dtypes of the last successful run: written to its views (a
                # mismatch further on is written by _write_outputs, which rewrites every output)
                for o, (shape, dtype, dest) in zip(outputs, written):
                    if o.shape != shape or o.dtype != dtype:
                        break
                    dest[...] = o
                else:
                    timing = measured_timing(True, t_driver, t_device) if measure else NO_TIMING_INFO
                    return ExecutionResult(ResultCode.NO_ERROR, list(self.shapes), timing)
            result = _write_outputs(self.request, outputs, None, measure, t_driver, t_device)
            if result.status == ResultCode.NO_ERROR:  # later runs of the same shapes write to the same views
                self.shapes = result.output_shapes
                self.written = [(o.shape, o.dtype, self.request.pools[arg.location.pool_index].array(
                    arg.location.offset, o.dtype, o.shape)) for o, arg in zip(outputs, self.request.outputs)]
            return result
        except Exception as e:  # a driver must never let an exception escape to its client
            return failed_execution(self.prepared.driver.name, e)

    def close(self) -> None:
        self.inputs = []


def _input_arrays(request: Request, in_types: list, buffers) -> list[np.ndarray | None]:
    """The request's inputs as arrays: views of pool regions, or reads of device buffers (memory domains)."""
    inputs = []
    for arg, t in zip(request.inputs, in_types):
        if t is None:
            inputs.append(None)
            continue
        buffer = buffers.buffer(arg.location.pool_index) if buffers is not None else None
        if buffer is not None:
            inputs.append(buffer.read(t, f"input {len(inputs)}"))
            continue
        pool = request.pools[arg.location.pool_index]
        inputs.append(pool.array(arg.location.offset, t.dtype, t.dimensions if t.is_tensor else ()))
    return inputs


def measured_timing(measure: bool, t_driver_start_ns: int, t_device_ns: int) -> Timing:
    """NNAPI timing in microseconds from perf_counter_ns stamps; in-driver time never below on-device time."""
    if not measure:
        return NO_TIMING_INFO
    total = time.perf_counter_ns() - t_driver_start_ns
    return Timing(time_on_device=t_device_ns // 1000, time_in_driver=max(total, t_device_ns) // 1000)


def failed_execution(driver_name: str, exc: Exception) -> ExecutionResult:
    """The status a failed execution reports: an MltsError's own code, OUT_OF_MEMORY, else OP_FAILED."""
    if isinstance(exc, MltsError):
        vlog.log("driver", f"{driver_name}: execution failed: {exc}")
    return failed_result(exc, driver_name)


__all__ = ["KernelDriver", "KernelPreparedModel", "run_request", "ExecutionAborted", "NO_TIMING"]
