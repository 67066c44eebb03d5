"""Test-only drivers (built on KernelDriver) and small model builders for the runtime tests.

Every fake driver records what the runtime asked of it (preparations, executed steps, request
parameters) so that tests can check *where* work ran, not only that the result is right. The
failure-injecting drivers cover each way a driver can let its client down: refusing or raising in
preparation, failing or raising at execution (always, or only on steps holding some operations),
returning garbage, and answering get_supported_operations wrongly.

Register them for one test with the `register` fixture of tests/runtime/conftest.py.
"""
from __future__ import annotations

import threading
import time
from typing import Iterable, Sequence

import numpy as np

from mlts.runtime import (Capabilities, DeviceType, FuseCode, Model, MltsError, OperandCode, OperandType,
                          OperationCode, PerformanceInfo, ResultCode)
from mlts.runtime.drivers import KernelDriver, KernelPreparedModel
from mlts.runtime.drivers.kernel_driver import run_request
from mlts.runtime.hal import ExecutionResult, HalModel, OutputShape, Request
from mlts.runtime.drivers.base import BurstContext

ADD, SUB, MUL, DIV = OperationCode.ADD, OperationCode.SUB, OperationCode.MUL, OperationCode.DIV
F32 = OperandCode.TENSOR_FLOAT32


def caps(exec_time: float = 1.0, power_usage: float = 1.0, *, relaxed: tuple[float, float] | None = None,
         types: Sequence[OperandCode] | None = None) -> Capabilities:
    """Uniform declared performance (relative to the CPU reference's 1.0; lower is better)."""
    rel = PerformanceInfo(*relaxed) if relaxed is not None else None
    return Capabilities.uniform(exec_time, power_usage, relaxed=rel, types=types)


# -- recording driver ------------------------------------------------------------------------------
class FakeDriver(KernelDriver):
    """A KernelDriver (device type ACCELERATOR unless told) that records everything it was asked.

    `operations` restricts the supported operations (e.g. {ADD}); `exec_time`/`power_usage` are the
    declared performance for every operand type; `relaxed` is (exec, power) for relaxed float32.
    """

    def __init__(self, name: str, exec_time: float = 1.0, power_usage: float = 1.0, *,
                 relaxed: tuple[float, float] | None = None, operations: Iterable[OperationCode] | None = None,
                 operand_types: Iterable[OperandCode] | None = None,
                 device_type: DeviceType = DeviceType.ACCELERATOR, capabilities: Capabilities | None = None,
                 delay_s: float = 0.0) -> None:
        super().__init__(name, capabilities or caps(exec_time, power_usage, relaxed=relaxed),
                         device_type=device_type, operations=operations, operand_types=operand_types)
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.prepare_calls = 0
        self.prepared_steps: list[tuple[str, ...]] = []  # op names of each successful preparation
        self.executed_steps: list[tuple[str, ...]] = []  # op names of each request served (any outcome)
        self.requests: list[dict] = []  # measure / deadline / loop_timeout_ns / time of each request
        self.failures = 0  # injected failures actually delivered
        self.bursts_configured = 0

    @staticmethod
    def op_names(model: HalModel) -> tuple[str, ...]:
        return tuple(op.type.name for op in model.main.operations)

    def prepare_model(self, model, preference, priority, deadline, cache):
        with self.lock:
            self.prepare_calls += 1
        self.before_prepare(model)
        prepared = super().prepare_model(model, preference, priority, deadline, cache)
        with self.lock:
            self.prepared_steps.append(self.op_names(model))
        return FakePreparedModel(self, prepared)

    def before_prepare(self, model: HalModel) -> None:
        """Hook for preparation failures."""

    def serve(self, prepared: "FakePreparedModel", request: Request, measure: bool, deadline: float | None,
              loop_timeout_ns: int):
        """Hook for execution failures; the default runs the request on the kernels."""
        if self.delay_s:
            time.sleep(self.delay_s)
        return run_request(prepared.graph, request, measure, deadline, loop_timeout_ns, self.name)

    def before_burst(self, prepared: "FakePreparedModel") -> None:
        """Hook for burst-configuration failures."""

    def make_burst_context(self, prepared: "FakePreparedModel") -> BurstContext:
        return BurstContext(prepared)

    def executed_ops(self) -> set[str]:
        with self.lock:
            return {name for step in self.executed_steps for name in step}


class FakePreparedModel(KernelPreparedModel):
    def __init__(self, driver: FakeDriver, inner: KernelPreparedModel) -> None:
        self.driver = driver
        self.model = inner.model
        self.graph = inner.graph

    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        d = self.driver
        with d.lock:
            d.executed_steps.append(d.op_names(self.model))
            d.requests.append({"measure": measure, "deadline": deadline, "loop_timeout_ns": loop_timeout_ns,
                               "received_at": time.monotonic(),
                               "no_value": tuple(a.has_no_value for a in request.inputs)})
        return d.serve(self, request, measure, deadline, loop_timeout_ns)

    def execute_profiled(self, request, deadline, loop_timeout_ns):
        """Profiled as the shared kernels it serves with (its execute_synchronously records the call)."""
        return super().execute_profiled(request, deadline, loop_timeout_ns)

    def configure_execution_burst(self):
        self.driver.before_burst(self)
        with self.driver.lock:
            self.driver.bursts_configured += 1
        return self.driver.make_burst_context(self)


# -- failure-injecting drivers ---------------------------------------------------------------------
class FailingPrepareDriver(FakeDriver):
    """Supports everything it is given, fast, but preparation fails.

    mode: "mltserror" (raises MltsError(code)), "exception" (raises RuntimeError),
    "none" (returns None instead of a prepared model).
    """

    def __init__(self, name: str, mode: str = "mltserror", code: ResultCode = ResultCode.OP_FAILED,
                 exec_time: float = 0.1, **kw) -> None:
        super().__init__(name, exec_time, exec_time, **kw)
        self.mode, self.code = mode, code

    def prepare_model(self, model, preference, priority, deadline, cache):
        with self.lock:
            self.prepare_calls += 1
            self.failures += 1
        if self.mode == "mltserror":
            raise MltsError(self.code, f"{self.name}: injected preparation failure")
        if self.mode == "exception":
            raise RuntimeError(f"{self.name}: injected crash in prepare_model")
        if self.mode == "none":
            return None
        raise AssertionError(self.mode)


class FailingExecutionDriver(FakeDriver):
    """Prepares fine; fails requests for steps holding any operation in `fail_on` (None = every step).

    mode: "status" (OP_FAILED result), "mltserror" (raises MltsError), "exception" (raises
    ZeroDivisionError), "none" (returns None), "bad_status" (a status that is no ResultCode),
    "short_shapes" (NO_ERROR but no output shapes), "bad_shapes" / "garbage_shapes" (NO_ERROR with
    output shapes that do not fit / are not shapes), "burst" (configure_execution_burst raises),
    "burst_close" (executes fine, but its BurstContext.close raises).
    """

    def __init__(self, name: str, mode: str = "status", fail_on: Iterable[OperationCode] | None = None,
                 exec_time: float = 0.1, **kw) -> None:
        super().__init__(name, exec_time, exec_time, **kw)
        self.mode = mode
        self.fail_on = None if fail_on is None else {OperationCode(c).name for c in fail_on}

    def should_fail(self, prepared: FakePreparedModel) -> bool:
        return self.fail_on is None or bool(self.fail_on & set(self.op_names(prepared.model)))

    def serve(self, prepared, request, measure, deadline, loop_timeout_ns):
        if not self.should_fail(prepared) or self.mode in ("burst", "burst_close"):
            return super().serve(prepared, request, measure, deadline, loop_timeout_ns)
        with self.lock:
            self.failures += 1
        if self.mode == "status":
            return ExecutionResult(ResultCode.OP_FAILED, [], message=f"{self.name}: injected execution failure")
        if self.mode == "mltserror":
            raise MltsError(ResultCode.OP_FAILED, f"{self.name}: injected MltsError at execution")
        if self.mode == "exception":
            raise ZeroDivisionError(f"{self.name}: injected crash at execution")
        if self.mode == "none":
            return None
        if self.mode == "bad_status":
            return ExecutionResult(12345, [], message="not a result code")  # type: ignore[arg-type]
        if self.mode == "short_shapes":
            return ExecutionResult(ResultCode.NO_ERROR, [])
        if self.mode == "bad_shapes":  # claims success with shapes that cannot be the outputs'
            return ExecutionResult(ResultCode.NO_ERROR, [OutputShape((1000, 1000)) for _ in request.outputs])
        if self.mode == "garbage_shapes":
            return ExecutionResult(ResultCode.NO_ERROR, [OutputShape(("x", None)) for _ in request.outputs])
        raise AssertionError(self.mode)

    def before_burst(self, prepared: FakePreparedModel) -> None:
        if self.mode == "burst" and self.should_fail(prepared):
            with self.lock:
                self.failures += 1
            raise OSError(f"{self.name}: injected failure in configure_execution_burst")

    def make_burst_context(self, prepared: FakePreparedModel) -> BurstContext:
        if self.mode == "burst_close":
            return _ClosingFailsBurstContext(prepared)
        return super().make_burst_context(prepared)


class _ClosingFailsBurstContext(BurstContext):
    def close(self) -> None:
        raise RuntimeError("injected failure in BurstContext.close")


class BrokenSupportDriver(FakeDriver):
    """A fast driver whose get_supported_operations is broken.

    mode: "short" / "long" (wrong-length lists), "mltserror", "exception", "none" (returns None).
    It would run everything correctly if it were ever chosen, so choosing it is the only way a test
    can notice (see `executed_steps`).
    """

    def __init__(self, name: str, mode: str = "short", exec_time: float = 0.1, **kw) -> None:
        super().__init__(name, exec_time, exec_time, **kw)
        self.mode = mode
        self.support_queries = 0

    def get_supported_operations(self, model):
        with self.lock:
            self.support_queries += 1
        n = len(model.main.operations)
        if self.mode == "short":
            return [True] * (n - 1)
        if self.mode == "long":
            return [True] * (n + 1)
        if self.mode == "mltserror":
            raise MltsError(ResultCode.OP_FAILED, f"{self.name}: injected failure in get_supported_operations")
        if self.mode == "exception":
            raise KeyError(f"{self.name}: injected crash in get_supported_operations")
        if self.mode == "none":
            return None
        raise AssertionError(self.mode)


class BrokenCapabilitiesDriver(FakeDriver):
    """Claims to support everything but get_capabilities raises an arbitrary exception."""

    def get_capabilities(self):
        raise ValueError(f"{self.name}: injected crash in get_capabilities")


# -- models ----------------------------------------------------------------------------------------
def tensor(shape=(3, 4)) -> OperandType:
    return OperandType(F32, None if shape is None else tuple(shape))


def activation() -> OperandType:
    return OperandType(OperandCode.INT32)


NUMPY_OP = {ADD: np.add, SUB: np.subtract, MUL: np.multiply, DIV: np.divide}


def chain_model(ops: Sequence[OperationCode], shape=(3, 4), *, relaxed: bool = False) -> Model:
    """x, y -> ((x op0 y) op1 y) op2 y ...: inputs 0 (x) and 1 (y), one output; every tensor `shape`."""
    m = Model()
    x = m.add_operand(tensor(shape))
    y = m.add_operand(tensor(shape))
    act = m.add_operand(activation())
    m.set_operand_value(act, np.int32(FuseCode.NONE))
    cur = x
    for op in ops:
        out = m.add_operand(tensor(shape))
        m.add_operation(op, [cur, y, act], [out])
        cur = out
    m.identify_inputs_and_outputs([x, y], [cur])
    if relaxed:
        m.relax_computation_float32_to_float16(True)
    m.finish()
    return m


def chain_expected(ops: Sequence[OperationCode], x: np.ndarray, y: np.ndarray) -> np.ndarray:
    cur = x.astype(np.float32)
    for op in ops:
        cur = NUMPY_OP[op](cur, y).astype(np.float32)
    return cur


def dynamic_chain_model(ops: Sequence[OperationCode], shape=(3, 4), out_dims=(0, 0),
                        temp_dims=None) -> Model:
    """As chain_model, but intermediates get `temp_dims` (default: `shape`) and the output `out_dims`
    ((0, 0) = unknown dimensions, None = unknown rank)."""
    m = Model()
    x = m.add_operand(tensor(shape))
    y = m.add_operand(tensor(shape))
    act = m.add_operand(activation())
    m.set_operand_value(act, np.int32(FuseCode.NONE))
    cur = x
    for k, op in enumerate(ops):
        last = k == len(ops) - 1
        dims = out_dims if last else (shape if temp_dims is None else temp_dims)
        out = m.add_operand(OperandType(F32, dims))
        m.add_operation(op, [cur, y, act], [out])
        cur = out
    m.identify_inputs_and_outputs([x, y], [cur])
    m.finish()
    return m


def run(compilation, *inputs: np.ndarray, out_shape=None) -> np.ndarray:
    """One synchronous execution with array inputs; returns the (first) output."""
    from mlts.runtime import Execution

    ex = Execution(compilation)
    for k, a in enumerate(inputs):
        ex.set_input(k, a)
    out = np.full(out_shape if out_shape is not None else inputs[0].shape, np.nan, np.float32)
    ex.set_output(0, out)
    ex.compute()
    return out


def rand(shape=(3, 4), seed: int | None = None, low: float = 0.5, high: float = 2.0) -> np.ndarray:
    """Random float32 values away from 0 (safe divisors)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(low, high, size=shape).astype(np.float32)


__all__ = [
    "ADD", "SUB", "MUL", "DIV", "F32", "caps", "FakeDriver", "FakePreparedModel", "FailingPrepareDriver",
    "FailingExecutionDriver", "BrokenSupportDriver", "BrokenCapabilitiesDriver", "tensor", "activation",
    "NUMPY_OP", "chain_model", "chain_expected", "dynamic_chain_model", "run", "rand", "OutputShape",
]
