"""Reusable executions (NNAPI AIDL's createReusableExecution / IExecution): after its first successful
compute, a reusable Execution runs later synchronous computes through one HAL IExecution created for its
bindings; the results, errors, CPU fallback, timing and state rules must be those of the per-call path,
and changing any setting must rebind. The CPU executor's bound graph reuses each operation's prepare only
while nothing it read can change."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from fake_drivers import ADD, FakeDriver, FakePreparedModel, chain_model, dynamic_chain_model
from mlts.runtime import (Compilation, DurationCode, Execution, FuseCode, Model, MltsError, OperandCode,
                          OperandType, OperationCode, ResultCode, get_device)
from mlts.runtime.app.execution import LANE_AFTER_COMPUTES
from mlts.runtime.cpu.bound_graph import BoundGraph
from mlts.runtime.cpu.executor import PreparedGraph
from mlts.runtime.hal import ExecutionResult, IExecution, OutputShape

NO_TIMING = 2**64 - 1


class _CountingExecution(IExecution):
    def __init__(self, inner: IExecution, driver: "CountingDriver") -> None:
        self.inner = inner
        self.driver = driver

    def execute_synchronously(self, deadline):
        self.driver.runs += 1
        if self.driver.fail_with is not None:
            return self.driver.fail_with
        return self.inner.execute_synchronously(deadline)

    def close(self) -> None:
        self.driver.closed += 1
        self.inner.close()


class _CountingPrepared(FakePreparedModel):
    def create_reusable_execution(self, request, measure, loop_timeout_ns):
        self.driver.created.append((measure, loop_timeout_ns))
        return _CountingExecution(super().create_reusable_execution(request, measure, loop_timeout_ns), self.driver)


class CountingDriver(FakeDriver):
    """Counts reusable executions created, run through and closed; `fail_with` answers their runs."""

    def __init__(self, name: str = "counting", **kw) -> None:
        super().__init__(name, 0.1, 0.1, **kw)
        self.created: list[tuple[bool, int]] = []
        self.runs = 0
        self.closed = 0
        self.fail_with: ExecutionResult | None = None

    def prepare_model(self, model, preference, priority, deadline, cache):
        prepared = super().prepare_model(model, preference, priority, deadline, cache)
        return _CountingPrepared(self, prepared)


def _execution(compilation: Compilation, x, y, out) -> Execution:
    ex = Execution(compilation)
    ex.set_reusable(True)
    ex.set_input(0, x)
    ex.set_input(1, y)
    ex.set_output(0, out)
    return ex


def _bind(run) -> None:
    """The computes after which a reusable execution's next ones go through its IExecution."""
    for _ in range(LANE_AFTER_COMPUTES):
        run()


def _compiled(model, devices=None) -> Compilation:
    c = Compilation(model) if devices is None else Compilation.for_devices(model, devices)
    c.finish()
    return c


def _counting(register, x=None, y=None, *, explicit: bool = True):
    """A CountingDriver registered for this test, and a reusable execution of x + y on it, bound to a
    zeroed output: (driver, compilation, execution, out). `explicit`: the driver alone (no CPU
    fallback); otherwise the partitioner's choice."""
    driver = CountingDriver()
    (device,) = register(driver)
    x = np.ones((3, 4), np.float32) if x is None else x
    y = np.ones((3, 4), np.float32) if y is None else y
    out = np.zeros((3, 4), np.float32)
    comp = _compiled(chain_model([ADD]), [device] if explicit else None)
    return driver, comp, _execution(comp, x, y, out), out


def test_later_computes_run_through_one_reusable_execution(register):
    driver = CountingDriver()
    (device,) = register(driver)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.full((3, 4), 0.5, np.float32)
    out = np.empty((3, 4), np.float32)
    ex = _execution(_compiled(chain_model([ADD]), [device]), x, y, out)
    for k in range(5):
        x[0, 0] = k  # changed in place: bound, read afresh on every run
        ex.compute()
        expected = np.arange(12, dtype=np.float32).reshape(3, 4) + 0.5
        expected[0, 0] = k + 0.5
        np.testing.assert_array_equal(out, expected)
        assert ex.get_output_operand_dimensions(0) == (3, 4)
    assert driver.created == [(False, ex._loop_timeout_ns)]  # once, after two computes of the same bindings
    assert driver.runs == 3
    assert len(driver.executed_steps) == 5  # every compute reached the driver
    ex.set_input(1, np.ones((3, 4), np.float32))  # a new binding: a new reusable execution
    assert driver.closed == 1
    ex.compute()
    assert len(driver.created) == 1  # one compute of the new bindings: not bound yet
    ex.compute()
    ex.compute()
    assert len(driver.created) == 2
    np.testing.assert_array_equal(out[1], np.arange(4, 8, dtype=np.float32) + 1)


def test_a_run_that_fails_through_the_lane_fails_as_a_per_call_run_does(register):
    driver, comp, ex, out = _counting(register)  # one explicit device: no CPU fallback
    _bind(ex.compute)
    ex.compute()
    assert driver.runs == 1
    driver.fail_with = ExecutionResult(ResultCode.OP_FAILED, [], message="injected failure")
    with pytest.raises(MltsError) as caught:
        ex.compute()
    assert caught.value.code == ResultCode.OP_FAILED
    assert "injected failure" in caught.value.message and driver.name in caught.value.message
    with pytest.raises(MltsError):
        ex.get_output_operand_dimensions(0)  # a failed compute has no output shapes
    assert ex.get_timing_breakdown()["calls"][0]["status"] == "OP_FAILED"
    driver.fail_with = ExecutionResult(ResultCode.NO_ERROR, [OutputShape((1000, 1000))])  # success, wrong shape
    with pytest.raises(MltsError) as caught:
        ex.compute()
    assert caught.value.code == ResultCode.OP_FAILED and "(1000, 1000)" in caught.value.message
    driver.fail_with = "not a result"  # type: ignore[assignment]
    with pytest.raises(MltsError) as caught:
        ex.compute()
    assert caught.value.code == ResultCode.OP_FAILED and "no result" in caught.value.message
    driver.fail_with = None
    out[:] = 0
    ex.compute()  # the execution is usable again, still through its reusable execution
    np.testing.assert_array_equal(out, np.full((3, 4), 2, np.float32))
    assert len(driver.created) == 1


def test_a_run_that_fails_through_the_lane_falls_back_to_the_cpu_where_nnapi_allows(register):
    driver, comp, ex, out = _counting(register, np.full((3, 4), 2, np.float32), np.full((3, 4), 3, np.float32),
                                      explicit=False)  # the partitioner's choice: CPU fallback allowed
    assert comp.plan.steps[0].device.name == driver.name
    ex.compute()
    ex.compute()
    driver.fail_with = ExecutionResult(ResultCode.OP_FAILED, [], message="injected failure")
    out[:] = 0
    ex.compute()
    np.testing.assert_array_equal(out, np.full((3, 4), 5, np.float32))  # computed by nnapi-reference
    assert comp.fallback_count == 1 and comp.fallbacks[0].device == driver.name
    assert [c["device_name"] for c in ex.get_timing_breakdown()["calls"]] == [driver.name, "nnapi-reference"]


def test_changed_settings_rebind_and_timing_is_what_was_asked(register):
    driver, _, ex, out = _counting(register)
    ex.compute()
    ex.compute()
    assert ex.get_duration(DurationCode.IN_DRIVER) == NO_TIMING
    ex.set_measure_timing(True)
    ex.compute()
    ex.compute()
    assert driver.created == [(False, ex._loop_timeout_ns), (True, ex._loop_timeout_ns)]
    assert ex.get_duration(DurationCode.IN_DRIVER) != NO_TIMING
    ex.set_loop_timeout(123_000)
    ex.compute()
    ex.compute()
    assert driver.created[-1] == (True, 123_000)
    breakdown = ex.get_timing_breakdown()
    assert breakdown["total"] >= breakdown["driver"] and len(breakdown["calls"]) == 1
    assert breakdown["calls"][0]["device_name"] == driver.name and breakdown["calls"][0]["status"] == "NO_ERROR"


def test_a_second_compute_while_one_runs_is_refused(register):
    driver, _, ex, out = _counting(register)
    ex.compute()
    ex.compute()
    driver.delay_s = 0.5
    worker = threading.Thread(target=ex.compute)
    worker.start()
    time.sleep(0.1)
    with pytest.raises(MltsError) as caught:
        ex.compute()
    assert caught.value.code == ResultCode.BAD_STATE
    worker.join()
    np.testing.assert_array_equal(out, np.full((3, 4), 2, np.float32))


def test_dynamic_output_shapes_through_the_lane():
    model = dynamic_chain_model([ADD])  # output dimensions unknown until run (mlts-fast declines these)
    comp = Compilation.for_devices(model, [get_device("nnapi-reference")])
    comp.finish()
    x, y = np.full((3, 4), 1.5, np.float32), np.full((3, 4), 2, np.float32)
    out = np.zeros((3, 4), np.float32)
    ex = _execution(comp, x, y, out)
    for _ in range(3):
        out[:] = 0
        ex.compute()
        assert ex.get_output_operand_dimensions(0) == (3, 4)
        np.testing.assert_array_equal(out, np.full((3, 4), 3.5, np.float32))


def _add_with_runtime_activation() -> Model:
    """ADD whose fused activation is a model input: its prepare reads a value that can change per run."""
    t = OperandType(OperandCode.TENSOR_FLOAT32, (1, 4))
    m = Model()
    a, b = m.add_operand(t), m.add_operand(t)
    act = m.add_operand(OperandType(OperandCode.INT32))
    out = m.add_operand(t)
    m.add_operation(OperationCode.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b, act], [out])
    m.finish()
    return m


def test_reference_reuses_prepare_only_when_it_read_constants():
    a = np.array([[-3, -1, 1, 3]], np.float32)
    b = np.array([[1, -1, 1, -1]], np.float32)
    const_model = chain_model([ADD], shape=(1, 4))
    graph = BoundGraph(PreparedGraph(const_model.hal_model()))
    for _ in range(2):
        (result,) = graph.run([a, b], deadline=None, loop_timeout_ns=None, checkpoint=None)
        np.testing.assert_array_equal(result, [[-2, -2, 2, 2]])
    assert isinstance(graph.operations, list) and len(graph.operations) == 1  # bound: prepare read constants

    runtime_model = _add_with_runtime_activation()
    graph = BoundGraph(PreparedGraph(runtime_model.hal_model()))
    (result,) = graph.run([a, b, np.int32(FuseCode.NONE)], deadline=None, loop_timeout_ns=None, checkpoint=None)
    np.testing.assert_array_equal(result, [[-2, -2, 2, 2]])
    assert graph.operations is False  # prepare read the activation, a model input: prepared every run
    (result,) = graph.run([a, b, np.int32(FuseCode.RELU)], deadline=None, loop_timeout_ns=None, checkpoint=None)
    np.testing.assert_array_equal(result, [[0, 0, 2, 2]])
    with pytest.raises(MltsError) as caught:  # and validated every run, as the executor does
        graph.run([a, b, np.int32(77)], deadline=None, loop_timeout_ns=None, checkpoint=None)
    assert caught.value.code == ResultCode.OP_FAILED and "activation" in caught.value.message


def test_a_runtime_activation_changes_results_through_the_lane():
    comp = Compilation.for_devices(_add_with_runtime_activation(), [get_device("nnapi-reference")])
    comp.finish()
    a = np.array([[-3, -1, 1, 3]], np.float32)
    b = np.array([[1, -1, 1, -1]], np.float32)
    act = np.array(FuseCode.NONE, np.int32)
    out = np.zeros((1, 4), np.float32)
    ex = Execution(comp)
    ex.set_reusable(True)
    ex.set_input(0, a)
    ex.set_input(1, b)
    ex.set_input(2, act)
    ex.set_output(0, out)
    _bind(ex.compute)
    ex.compute()
    np.testing.assert_array_equal(out, [[-2, -2, 2, 2]])
    assert ex._lane is not None and ex._lane.hal_execution.graph.operations is False
    act[...] = FuseCode.RELU  # the bound scalar changed in place
    ex.compute()
    np.testing.assert_array_equal(out, [[0, 0, 2, 2]])


def test_burst_computes_run_through_a_reusable_execution_of_the_burst(register):
    from mlts.runtime import Burst
    from mlts.runtime.drivers.base import BurstContext

    class CountingBurst(BurstContext):
        def execute(self, request, measure, deadline, loop_timeout_ns):
            driver.burst_runs += 1
            return super().execute(request, measure, deadline, loop_timeout_ns)

    class BurstDriver(CountingDriver):
        burst_runs = 0

        def make_burst_context(self, prepared):
            return CountingBurst(prepared)

    driver = BurstDriver()
    (device,) = register(driver)
    x, y = np.ones((3, 4), np.float32), np.full((3, 4), 2, np.float32)
    out = np.zeros((3, 4), np.float32)
    comp = _compiled(chain_model([ADD]), [device])
    ex = _execution(comp, x, y, out)
    burst = Burst(comp)
    for k in range(4):
        x[...] = k
        ex.burst_compute(burst)
        np.testing.assert_array_equal(out, np.full((3, 4), k + 2, np.float32))
    assert driver.burst_runs == 4  # every run went through the burst, the later ones by its IExecution
    assert driver.created == []  # the burst changes execute: runs forward to it, not to the prepared model
    ex.compute()  # a synchronous compute rebinds to the prepared model
    ex.compute()
    assert len(driver.created) == 1 and driver.burst_runs == 4
    other = Burst(comp)
    ex.burst_compute(other)  # another burst: rebinds through it
    ex.burst_compute(other)
    assert driver.burst_runs == 6
    burst.close()
    with pytest.raises(MltsError) as caught:
        ex.burst_compute(burst)
    assert caught.value.code == ResultCode.BAD_DATA


def test_a_forwarding_burst_binds_through_the_prepared_models_reusable_execution(register):
    from mlts.runtime import Burst

    driver, comp, ex, out = _counting(register, y=np.full((3, 4), 2, np.float32))
    burst = Burst(comp)
    for _ in range(LANE_AFTER_COMPUTES + 2):
        ex.burst_compute(burst)
    assert len(driver.created) == 1 and driver.runs == 2
    np.testing.assert_array_equal(out, np.full((3, 4), 3, np.float32))


def test_a_freed_execution_releases_its_reusable_execution_and_refuses_use(register):
    driver, _, ex, out = _counting(register)
    _bind(ex.compute)
    assert len(driver.created) == 1 and driver.closed == 0
    ex.free()
    assert driver.closed == 1
    for call in (ex.compute, lambda: ex.set_input(0, np.ones((3, 4), np.float32))):
        with pytest.raises(MltsError) as caught:
            call()
        assert caught.value.code == ResultCode.BAD_STATE and "freed" in caught.value.message
