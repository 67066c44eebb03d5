"""mlts-fast: the optimized CPU driver (a vendor driver compiled for this machine's CPU).

Preparation compiles the model into a Plan (NHWC buffers laid out once, weights repacked, BLAS
GEMMs and compiled numba loops chosen per layer) and runs it once, so that every kernel is
compiled and every buffer touched before the first real execution. Executions only copy inputs in,
run the bound steps and copy outputs out.
"""
from __future__ import annotations

import copy
import time

import numpy as np

from ... import vlog
from ...enums import DeviceType, FeatureLevel, OperandCode, Preference, Priority, ResultCode
from ...errors import MltsError, error_from_exception
from ...hal import (NO_TIMING_INFO, CacheHandles, Capabilities, ExecutionResult, HalModel, IExecution,
                    IOperationProfiling,
                    OperationTime, OutputShape, PerformanceInfo, Request)
from ..base import Driver, PreparedModel
from ...hal.validation import (RequestValidator, validate_deadline, validate_execution_arguments, validate_hal_model,
                               validate_preparation_arguments)
from ..kernel_driver import failed_execution, measured_timing

FAST_DEVICE_NAME = "mlts-fast"
#: operand types of the operations it takes (their input 0), with the performance it declares for them
FAST_TYPES = (OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
              OperandCode.TENSOR_QUANT8_SYMM, OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL)
EXEC_TIME, POWER_USAGE = 0.3, 0.5


def compiler_available() -> bool:
    """numba is what compiles the kernels; without it the driver takes no operation at all."""
    import importlib.util

    return importlib.util.find_spec("numba") is not None


class FastDriver(Driver):
    """Float32 and 8-bit (per-tensor uint8/int8, per-channel int8 filters) MobileNet-class operations."""

    name = FAST_DEVICE_NAME
    version = "1.0"
    feature_level = FeatureLevel.LEVEL_8
    device_type = DeviceType.ACCELERATOR

    def get_capabilities(self) -> Capabilities:
        perf = PerformanceInfo(EXEC_TIME, POWER_USAGE)
        return Capabilities.uniform(EXEC_TIME, POWER_USAGE, types=FAST_TYPES, relaxed=perf)

    def get_supported_operations(self, model: HalModel) -> list[bool]:
        validate_hal_model(model)
        if not compiler_available():
            return [False] * len(model.main.operations)
        from .support import unsupported_reason

        result = []
        for j, op in enumerate(model.main.operations):
            reason = unsupported_reason(model, j)
            if reason is not None:
                vlog.log("driver", f"{self.name}: operation {j} ({op.type.name}) unsupported: {reason}")
            result.append(reason is None)
        return result

    def prepare_model(self, model: HalModel, preference: Preference, priority: Priority,
                      deadline: float | None, cache: CacheHandles | None) -> PreparedModel:
        validate_preparation_arguments(preference, priority, deadline, cache, f"{self.name}: prepare_model")
        validate_hal_model(model)
        if deadline is not None and time.monotonic() > deadline:
            raise MltsError(ResultCode.MISSED_DEADLINE_PERSISTENT, f"{self.name}: preparation deadline already passed")
        if not compiler_available():
            raise MltsError(ResultCode.OP_FAILED, f"{self.name}: numba is not installed")
        from .plan import Plan

        try:
            plan = Plan(model, self.name)
            warm = plan.acquire()
            warm.run()  # compiles (or loads from numba's cache) every kernel this plan uses
            plan.release(warm)
        except MltsError:
            raise
        except Exception as e:
            raise error_from_exception(e, f"{self.name}: preparation failed") from None
        vlog.log("driver", f"{self.name}: prepared {len(plan.steps)} steps, "
                           f"workspace {plan.workspace_bytes / 2**20:.1f} MiB")
        return FastPreparedModel(self, model, plan)


class FastPreparedModel(PreparedModel, IOperationProfiling):
    def __init__(self, driver: FastDriver, model: HalModel, plan) -> None:
        self.driver = driver
        self.model = model
        self.plan = plan
        self.requests = RequestValidator(model)

    def execute_profiled(self, request: Request, deadline: float | None,
                         loop_timeout_ns: int) -> tuple[ExecutionResult, list[OperationTime]]:
        """IOperationProfiling: the normal run, on a stand-in for the plan whose workspaces time each step
        (fast/profiling.py)."""
        from .profiling import ProfilingPlan

        profiled = copy.copy(self)
        profiled.plan = ProfilingPlan(self.plan)
        result = profiled.execute_synchronously(request, True, deadline, loop_timeout_ns)
        ok = result.status == ResultCode.NO_ERROR
        return result, (profiled.plan.operation_times(self.model) if ok else [])

    def execute_synchronously(self, request: Request, measure: bool, deadline: float | None,
                              loop_timeout_ns: int) -> ExecutionResult:
        t_driver = time.perf_counter_ns()
        try:
            validate_execution_arguments(measure, deadline, loop_timeout_ns, f"{self.driver.name}: execute")
            bound = self._bind(request)
            if type(bound) is ExecutionResult:
                return bound
            return self._run_bound(bound, measure, deadline, t_driver)
        except Exception as e:  # a driver must never let an exception escape to its client
            return failed_execution(self.driver.name, e)

    def create_reusable_execution(self, request: Request, measure: bool, loop_timeout_ns: int) -> IExecution:
        """The request validated and its regions resolved once; each run copies in, runs, copies out. A
        subclass that changes execute_synchronously gets the forwarding default, so its change applies."""
        if type(self).execute_synchronously is not FastPreparedModel.execute_synchronously:
            return super().create_reusable_execution(request, measure, loop_timeout_ns)
        validate_execution_arguments(measure, None, loop_timeout_ns, f"{self.driver.name}: createReusableExecution")
        bound = self._bind(request)
        if type(bound) is ExecutionResult:
            raise MltsError(bound.status, f"{self.driver.name}: createReusableExecution: {bound.message}")
        return FastExecution(self, bound, measure)

    def _bind(self, request: Request) -> tuple[list[OutputShape], tuple] | ExecutionResult:
        """(output shapes, (input views, output views)) of a valid request, remembered while the same
        request comes again; OUTPUT_INSUFFICIENT_SIZE's result when an output region is too small."""
        in_types = self.requests.validate(request)
        plan = self.plan
        memo = self.requests.memo(request)
        shapes = memo.get("shapes")
        if shapes is None:
            shapes = memo["shapes"] = [OutputShape(plan.values[i].shape,
                                                   plan.values[i].type.byte_size() <= arg.location.length)
                                       for i, arg in zip(plan.outputs, request.outputs)]
        for s in shapes:
            if not s.is_sufficient:
                small = [k for k, s in enumerate(shapes) if not s.is_sufficient]
                return ExecutionResult(ResultCode.OUTPUT_INSUFFICIENT_SIZE, shapes,
                                       message=f"output buffers {small} are too small")
        views = memo.get("views")
        if views is None:
            ws = plan.acquire()
            try:
                views = memo["views"] = _region_views(self.driver.name, request, in_types, ws)
            finally:
                plan.release(ws)
        return shapes, views

    def _run_bound(self, bound: tuple, measure: bool, deadline: float | None, t_driver: int) -> ExecutionResult:
        if deadline is not None and time.monotonic() > deadline:
            return ExecutionResult(ResultCode.MISSED_DEADLINE_TRANSIENT, [], message="deadline already passed")
        shapes, (inputs, outputs) = bound
        plan = self.plan
        ws = plan.acquire()
        try:
            for source, dest in zip(inputs, ws.inputs):
                dest[...] = source  # same dtype and shape (the views are the plan's): a plain copy
            if measure:
                t_device = time.perf_counter_ns()
                ws.run(None if deadline is None else _deadline_check(deadline))
                t_device = time.perf_counter_ns() - t_device
            else:
                ws.run(None if deadline is None else _deadline_check(deadline))
            for dest, src in zip(outputs, ws.outputs):
                dest[...] = src
        finally:
            plan.release(ws)
        return ExecutionResult(ResultCode.NO_ERROR, list(shapes),
                               measured_timing(measure, t_driver, t_device) if measure else NO_TIMING_INFO)


class FastExecution(IExecution):
    """mlts-fast's reusable execution (createReusableExecution): a validated request's bound regions."""

    def __init__(self, prepared: FastPreparedModel, bound: tuple, measure: bool) -> None:
        self.prepared = prepared
        self.bound = bound
        self.measure = measure

    def execute_synchronously(self, deadline: float | None) -> ExecutionResult:
        t_driver = time.perf_counter_ns()
        try:
            if deadline is not None:
                validate_deadline(deadline, "execute")
            return self.prepared._run_bound(self.bound, self.measure, deadline, t_driver)
        except Exception as e:  # a driver must never let an exception escape to its client
            return failed_execution(self.prepared.driver.name, e)

    def close(self) -> None:
        self.bound = None


def _region_views(name: str, request: Request, in_types, ws) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Numpy views of the request's input and output regions, shaped as the plan's tensors."""
    inputs = []
    for k, (arg, t, dest) in enumerate(zip(request.inputs, in_types, ws.inputs)):
        if t is None:
            raise MltsError(ResultCode.BAD_DATA, f"{name}: input {k} has no value")
        inputs.append(request.pools[arg.location.pool_index].array(arg.location.offset, dest.dtype, dest.shape))
    outputs = [request.pools[arg.location.pool_index].array(arg.location.offset, src.dtype, src.shape)
               for arg, src in zip(request.outputs, ws.outputs)]
    return inputs, outputs


def _deadline_check(deadline: float):
    def check(step) -> None:
        if time.monotonic() > deadline:
            raise MltsError(ResultCode.MISSED_DEADLINE_TRANSIENT,
                            f"deadline passed before operation {step.op_index} ({step.code.name})")
    return check
