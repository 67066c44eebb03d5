"""Per-operation profiles (the HAL's IOperationProfiling and Execution.compute_profiled): the times are each
operation's, they add up to the run, they name the model's own operations across a partitioned plan, and a
driver without the extension gives none (while its results stay right)."""
from __future__ import annotations

import statistics

import numpy as np
import pytest

from fake_drivers import ADD, MUL, SUB, FakeDriver, FakePreparedModel, activation, tensor
from mlts.runtime import (Capabilities, Compilation, DurationCode, Execution, Model, OperandCode, OperandType,
                          OperationCode, ResultCode, get_device)
from mlts.runtime.drivers import KernelDriver, KernelPreparedModel
from mlts.runtime.drivers.fast.driver import FAST_DEVICE_NAME, compiler_available
from mlts.runtime.hal import ExecutionResult, IOperationProfiling
from support.profiling_drivers import no_profiling_driver

REF = "nnapi-reference"
F32 = OperandCode.TENSOR_FLOAT32
DEVICES = [REF] + ([FAST_DEVICE_NAME] if compiler_available() else [])


def fc_and_add_model(n: int = 256, batch: int = 128) -> Model:
    """A big FULLY_CONNECTED (batch x n x n multiply-adds) and a tiny ADD of two 1x4 tensors, the ADD added
    first: operation 0 is the ADD, operation 1 the FULLY_CONNECTED."""
    m = Model()
    x = m.add_operand(OperandType(F32, (batch, n)))
    w = m.add_operand(OperandType(F32, (n, n)))
    b = m.add_operand(OperandType(F32, (n,)))
    act = m.add_operand(activation())
    h = m.add_operand(OperandType(F32, (batch, n)))
    y, z, s = (m.add_operand(tensor((1, 4))) for _ in range(3))
    m.set_operand_value(w, np.random.default_rng(0).standard_normal((n, n)).astype(np.float32))
    m.set_operand_value(b, np.zeros(n, np.float32))
    m.set_operand_value(act, np.int32(0))
    m.add_operation(OperationCode.ADD, [y, z, act], [s])
    m.add_operation(OperationCode.FULLY_CONNECTED, [x, w, b, act], [h])
    m.identify_inputs_and_outputs([x, y, z], [h, s])
    m.finish()
    return m


def reusable_execution(compilation: Compilation, *inputs: np.ndarray) -> Execution:
    ex = Execution(compilation)
    for k, a in enumerate(inputs):
        ex.set_input(k, a)
    ex.set_reusable(True)
    return ex


def fc_inputs(n: int = 256, batch: int = 128) -> tuple[np.ndarray, ...]:
    return np.ones((batch, n), np.float32), np.ones((1, 4), np.float32), np.full((1, 4), 2, np.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_profile_shows_the_big_fully_connected_dominating_the_tiny_add(device):
    c = Compilation.for_devices(fc_and_add_model(), [get_device(device)])
    c.finish()
    ex = reusable_execution(c, *fc_inputs())
    runs = [ex.compute_profiled() for _ in range(5)]
    for profile in runs:
        assert [(p.index, p.type, p.device) for p in profile] == [(0, OperationCode.ADD, device),
                                                                   (1, OperationCode.FULLY_CONNECTED, device)]
    add, fc = (statistics.median(profile[k].time_us for profile in runs) for k in (0, 1))
    assert fc > 5 * add, (fc, add)
    np.testing.assert_array_equal(ex.get_output(1), np.full((1, 4), 3, np.float32))  # the results are still right


@pytest.mark.parametrize("device", DEVICES)
def test_operation_times_add_up_to_the_profiled_run(device):
    c = Compilation.for_devices(fc_and_add_model(), [get_device(device)])
    c.finish()
    ex = reusable_execution(c, *fc_inputs())
    ex.set_measure_timing(True)
    for _ in range(3):
        profile = ex.compute_profiled()
        total = sum(p.time_us for p in profile)
        on_device = ex.get_duration(DurationCode.ON_HARDWARE) / 1000  # the driver's run, operations and all
        assert 0.7 * on_device <= total <= on_device + 2, (total, on_device)


CHAIN_INPUTS = (np.full((3, 4), 5, np.float32), np.full((3, 4), 2, np.float32))
CHAIN_OUTPUT = np.full((3, 4), (5 - 2) * 2 + 2, np.float32)


def reversed_chain_model() -> Model:
    """x, y -> ((x - y) * y) + y, its operations added in the reverse of their run order."""
    m = Model()
    x, y = m.add_operand(tensor()), m.add_operand(tensor())
    act = m.add_operand(activation())
    m.set_operand_value(act, np.int32(0))
    t1, t2, out = m.add_operand(tensor()), m.add_operand(tensor()), m.add_operand(tensor())
    m.add_operation(ADD, [t2, y, act], [out])  # model operation 0, runs third
    m.add_operation(MUL, [t1, y, act], [t2])  # model operation 1, runs second
    m.add_operation(SUB, [x, y, act], [t1])  # model operation 2, runs first
    m.identify_inputs_and_outputs([x, y], [out])
    m.finish()
    return m


def test_operation_indexes_map_to_the_model_across_a_partitioned_plan(register):
    """SUB and MUL on the reference, ADD on a driver that takes only ADD: two steps; the operations were
    added in the reverse of their run order, so model indexes and run positions differ."""
    fake, = register(FakeDriver("add-only", exec_time=0.5, operations={ADD}))
    c = Compilation.for_devices(reversed_chain_model(), [fake, get_device(REF)])
    c.finish()
    ex = reusable_execution(c, *CHAIN_INPUTS)
    profile = ex.compute_profiled()
    assert [s.device.name for s in c.plan.steps] == [REF, "add-only"]
    assert [(p.index, p.position, p.type, p.device) for p in profile] == [
        (2, 0, SUB, REF), (1, 1, MUL, REF), (0, 2, ADD, "add-only")]
    assert all(p.time_us >= 0 for p in profile)
    np.testing.assert_array_equal(ex.get_output(0), CHAIN_OUTPUT)


class _FailingProfiledModel(FakePreparedModel):
    def execute_profiled(self, request, deadline, loop_timeout_ns):
        return ExecutionResult(ResultCode.OP_FAILED, [], message="injected failure of a profiled run"), []


class FailingProfiledDriver(FakeDriver):
    """Profiled runs fail (normal ones do not): the runtime's CPU fallback runs its steps instead."""

    def prepare_model(self, model, preference, priority, deadline, cache):
        return _FailingProfiledModel(self, super().prepare_model(model, preference, priority, deadline, cache))


@pytest.mark.parametrize("operations, steps", [({ADD}, [REF, "failing"]), (None, ["failing"])],
                         ids=["the step falls back", "the whole model falls back"])
def test_operations_the_cpu_fallback_ran_are_profiled_on_the_reference(register, operations, steps):
    fake, = register(FailingProfiledDriver("failing", exec_time=0.5, operations=operations))
    c = Compilation(reversed_chain_model())
    c.finish()
    assert [s.device.name for s in c.plan.steps] == steps
    ex = reusable_execution(c, *CHAIN_INPUTS)
    profile = ex.compute_profiled()
    assert [(p.index, p.position, p.type, p.device) for p in profile] == [
        (2, 0, SUB, REF), (1, 1, MUL, REF), (0, 2, ADD, REF)]
    np.testing.assert_array_equal(ex.get_output(0), CHAIN_OUTPUT)


def test_a_driver_without_the_extension_gives_no_entries(register):
    plain, = register(no_profiling_driver())
    c = Compilation.for_devices(fc_and_add_model(n=8, batch=2), [plain])
    c.finish()
    assert not isinstance(c.plan.steps[0].prepared, IOperationProfiling)
    ex = reusable_execution(c, *fc_inputs(n=8, batch=2))
    assert ex.compute_profiled() == []
    np.testing.assert_array_equal(ex.get_output(1), np.full((1, 4), 3, np.float32))



class _OwnExecutionPrepared(KernelPreparedModel):
    """Executes its own way (here: around the shared kernels) without saying how it is to be profiled."""

    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        return super().execute_synchronously(request, measure, deadline, loop_timeout_ns)


class _OwnExecutionDriver(KernelDriver):
    def prepare_model(self, model, preference, priority, deadline, cache):
        prepared = super().prepare_model(model, preference, priority, deadline, cache)
        return _OwnExecutionPrepared(self, prepared.model)


def test_a_kernel_subclass_with_its_own_execution_reports_no_operation_times(register):
    """Timing the shared kernels would describe a run the subclass does not make: no entries, right outputs."""
    own, = register(_OwnExecutionDriver("own-execution", Capabilities.uniform(0.5, 0.5)))
    c = Compilation.for_devices(reversed_chain_model(), [own])
    c.finish()
    ex = reusable_execution(c, *CHAIN_INPUTS)
    assert isinstance(c.plan.steps[0].prepared, IOperationProfiling)
    assert ex.compute_profiled() == []
    np.testing.assert_array_equal(ex.get_output(0), CHAIN_OUTPUT)
