"""A thin driver over the shared CPU kernels (AOSP's sample driver pattern).

Subclasses differ only in identity, declared performance and which operations/types they accept,
which is what gives the partitioner real choices. The reference driver is one of them.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable

import numpy as np

from .. import vlog
from ..cpu_executor import ExecutionAborted, PreparedGraph
from ..enums import DeviceType, NO_TIMING, OperandCode, OperationCode, Preference, Priority, ResultCode
from ..errors import MltsError
from ..hal import (CacheHandles, Capabilities, Driver, ExecutionResult, HalModel, OutputShape, PreparedModel,
                   Request, Timing)
from ..hal_validation import validate_hal_model, validate_request
from ..ops import get_operation


class KernelDriver(Driver):
    """A driver that runs the registry's kernels on the CPU, possibly for a subset of operations."""

    def __init__(self, name: str, capabilities: Capabilities, *, version: str = "1.0",
                 device_type: DeviceType = DeviceType.CPU,
                 operations: Iterable[OperationCode] | None = None,
                 operand_types: Iterable[OperandCode] | None = None,
                 accepts: Callable[[OperationCode, OperandCode | None], bool] | None = None) -> None:
        self.name = name
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
        sg = model.main
        result = []
        for op in sg.operations:
            primary = sg.operands[op.inputs[0]].type.code if op.inputs else None
            result.append(self.supports(op.type, primary))
        return result

    def prepare_model(self, model: HalModel, preference: Preference, priority: Priority,
                      deadline: float | None, cache: CacheHandles | None) -> PreparedModel:
        validate_hal_model(model)
        if deadline is not None and time.monotonic() > deadline:
            raise MltsError(ResultCode.MISSED_DEADLINE_PERSISTENT, f"{self.name}: preparation deadline already passed")
        supported = self.get_supported_operations(model)
        if not all(supported):
            bad = [f"{j} ({op.type.name})" for j, (op, ok) in enumerate(zip(model.main.operations, supported)) if not ok]
            raise MltsError(ResultCode.BAD_DATA, f"{self.name} does not support operations {', '.join(bad)}")
        vlog.log("driver", f"{self.name}: preparing {len(model.main.operations)} operations")
        return KernelPreparedModel(self, model)


class KernelPreparedModel(PreparedModel):
    def __init__(self, driver: KernelDriver, model: HalModel) -> None:
        self.driver = driver
        self.model = model
        self.graph = PreparedGraph(model)

    def execute_synchronously(self, request: Request, measure: bool, deadline: float | None,
                              loop_timeout_ns: int) -> ExecutionResult:
        return run_request(self.graph, request, measure, deadline, loop_timeout_ns, self.driver.name)


def run_request(graph: PreparedGraph, request: Request, measure: bool, deadline: float | None,
                loop_timeout_ns: int, driver_name: str, checkpoint=None) -> ExecutionResult:
    """Serve one request on a prepared graph: read inputs from pools, run, write outputs to pools."""
    t_driver = time.perf_counter_ns()
    try:
        in_types = validate_request(request, graph.model)
        if deadline is not None and time.monotonic() > deadline:
            return ExecutionResult(ResultCode.MISSED_DEADLINE_TRANSIENT, [], message="deadline already passed")
        inputs = []
        for arg, t in zip(request.inputs, in_types):
            if t is None:
                inputs.append(None)
                continue
            pool = request.pools[arg.location.pool_index]
            inputs.append(pool.array(arg.location.offset, t.dtype, t.dimensions if t.is_tensor else ()))
        t_device = time.perf_counter_ns()
        outputs = graph.run(inputs, deadline=deadline, loop_timeout_ns=loop_timeout_ns, checkpoint=checkpoint)
        t_device = time.perf_counter_ns() - t_device
        shapes = [OutputShape(tuple(o.shape), o.nbytes <= arg.location.length)
                  for o, arg in zip(outputs, request.outputs)]
        if not all(s.is_sufficient for s in shapes):
            small = [k for k, s in enumerate(shapes) if not s.is_sufficient]
            return ExecutionResult(ResultCode.OUTPUT_INSUFFICIENT_SIZE, shapes,
                                   message=f"output buffers {small} are too small")
        for o, arg in zip(outputs, request.outputs):
            pool = request.pools[arg.location.pool_index]
            dest = pool.array(arg.location.offset, o.dtype, o.shape)
            np.copyto(dest, o, casting="no")
        return ExecutionResult(ResultCode.NO_ERROR, shapes, measured_timing(measure, t_driver, t_device))
    except Exception as e:  # a driver must never let an exception escape to its client
        return failed_execution(driver_name, e)


def measured_timing(measure: bool, t_driver_start_ns: int, t_device_ns: int) -> Timing:
    """NNAPI timing in microseconds from perf_counter_ns stamps; in-driver time never below on-device time."""
    if not measure:
        return Timing()
    total = time.perf_counter_ns() - t_driver_start_ns
    return Timing(time_on_device=t_device_ns // 1000, time_in_driver=max(total, t_device_ns) // 1000)


def failed_execution(driver_name: str, exc: Exception) -> ExecutionResult:
    """The status a failed execution reports: an MltsError's own code, OUT_OF_MEMORY, else OP_FAILED."""
    if isinstance(exc, MltsError):
        vlog.log("driver", f"{driver_name}: execution failed: {exc}")
        return ExecutionResult(exc.code, exc.output_shapes or [], message=exc.message)
    if isinstance(exc, MemoryError):
        return ExecutionResult(ResultCode.OUT_OF_MEMORY, [], message="out of memory")
    return ExecutionResult(ResultCode.OP_FAILED, [], message=f"{driver_name}: {type(exc).__name__}: {exc}")


__all__ = ["KernelDriver", "KernelPreparedModel", "run_request", "ExecutionAborted", "NO_TIMING"]
