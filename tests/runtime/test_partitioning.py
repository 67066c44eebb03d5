"""Partitioning (one best device per operation) and both CPU fallback paths, with fake drivers."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from fake_drivers import (ADD, DIV, MUL, SUB, BrokenCapabilitiesDriver, BrokenSupportDriver, FailingExecutionDriver,
                          FailingPrepareDriver, FakeDriver, chain_expected, chain_model, dynamic_chain_model, rand, run)
from mlts.runtime import (Burst, Compilation, DeviceType, Execution, FuseCode, MltsError, Model, OperandCode,
                          OperandType, Preference, ResultCode, devices, get_device)

REF = "nnapi-reference"


def compile_all(model, preference=None) -> Compilation:
    c = Compilation(model)
    if preference is not None:
        c.set_preference(preference)
    c.finish()
    return c


def compile_for(model, devs) -> Compilation:
    c = Compilation.for_devices(model, devs)
    c.finish()
    return c


def index_in(comp: Compilation, name: str) -> int:
    return [d.name for d in comp.devices].index(name)


def best_lines(comp: Compilation) -> list[str]:
    return [l for l in comp.plan_log if l.startswith("findBestDeviceForEachOperation(")]


def step_devices(comp: Compilation) -> list[str]:
    return [s.device.name for s in comp.plan.steps]


def check_chain(comp, ops, seed=0):
    x, y = rand(seed=seed), rand(seed=seed + 1)
    np.testing.assert_allclose(run(comp, x, y), chain_expected(ops, x, y), rtol=1e-6)


# -- choosing devices ------------------------------------------------------------------------------
def test_reference_alone_takes_everything(caplog, register):
    register()  # no driver of its own: sets the built-in mlts-fast aside, leaving the reference alone
    caplog.set_level(logging.INFO, logger="mlts.ExecutionPlan")
    ops = [ADD, MUL]
    comp = compile_all(chain_model(ops))
    ref = index_in(comp, REF)
    assert best_lines(comp) == [f"findBestDeviceForEachOperation(ADD): {ref}",
                                f"findBestDeviceForEachOperation(MUL): {ref}"]
    assert f"partitionTheWork: only one best device: {REF}" in comp.plan_log
    logged = [r.getMessage() for r in caplog.records if r.name == "mlts.ExecutionPlan"]
    assert f"partitionTheWork: only one best device: {REF}" in logged
    assert f"findBestDeviceForEachOperation(MUL): {ref}" in logged
    check_chain(comp, ops)


def test_faster_driver_takes_all_it_supports(register, caplog):
    caplog.set_level(logging.INFO, logger="mlts.ExecutionPlan")
    fast = FakeDriver("fast", exec_time=0.5, power_usage=2.0)
    register(fast)
    ops = [ADD, MUL, SUB]
    comp = compile_all(chain_model(ops))
    k = index_in(comp, "fast")
    assert k != index_in(comp, REF)
    assert best_lines(comp) == [f"findBestDeviceForEachOperation({op.name}): {k}" for op in ops]
    assert comp.plan_log[-1] == "partitionTheWork: only one best device: fast"
    assert "partitionTheWork: only one best device: fast" in caplog.messages
    check_chain(comp, ops)
    assert fast.executed_steps == [("ADD", "MUL", "SUB")]


def test_slower_driver_is_not_chosen(register):
    slow = FakeDriver("slow", exec_time=3.0, power_usage=3.0)
    register(slow)
    comp = compile_all(chain_model([ADD]))
    assert comp.plan_log[-1] == f"partitionTheWork: only one best device: {REF}"
    check_chain(comp, [ADD])
    assert slow.executed_steps == [] and slow.prepare_calls == 0


@pytest.mark.parametrize("preference, winner", [(None, "fast"), (Preference.FAST_SINGLE_ANSWER, "fast"),
                                                (Preference.SUSTAINED_SPEED, "fast"),
                                                (Preference.LOW_POWER, "frugal")])
def test_exec_time_vs_power_usage(register, preference, winner):
    fast = FakeDriver("fast", exec_time=0.5, power_usage=2.0)
    frugal = FakeDriver("frugal", exec_time=2.0, power_usage=0.5)
    register(fast, frugal)
    comp = compile_all(chain_model([ADD, MUL]), preference)
    k = index_in(comp, winner)
    assert best_lines(comp) == [f"findBestDeviceForEachOperation(ADD): {k}",
                                f"findBestDeviceForEachOperation(MUL): {k}"]
    assert comp.plan_log[-1] == f"partitionTheWork: only one best device: {winner}"
    check_chain(comp, [ADD, MUL])
    chosen, other = (fast, frugal) if winner == "fast" else (frugal, fast)
    assert chosen.executed_steps == [("ADD", "MUL")] and other.executed_steps == []


def test_tie_goes_to_the_cpu(register):
    tie = FakeDriver("tie-accelerator", exec_time=1.0, power_usage=1.0)  # same as the reference's 1.0
    register(tie)
    for pref in (Preference.FAST_SINGLE_ANSWER, Preference.LOW_POWER):
        comp = compile_all(chain_model([ADD, SUB]), pref)
        ref = index_in(comp, REF)
        assert best_lines(comp) == [f"findBestDeviceForEachOperation(ADD): {ref}",
                                    f"findBestDeviceForEachOperation(SUB): {ref}"]
        assert comp.plan_log[-1] == f"partitionTheWork: only one best device: {REF}"
    assert tie.prepare_calls == 0


def test_tie_between_non_reference_devices_goes_to_the_first_listed(register):
    """NNAPI breaks ties only in favour of the CPU implementation itself (nnapi-reference): a CPU-typed
    vendor driver gets no preference, so the first of two equal devices in the list wins."""
    accel = FakeDriver("accel", 0.5, 0.5)
    cpu2 = FakeDriver("cpu-two", 0.5, 0.5, device_type=DeviceType.CPU)
    register(accel, cpu2)
    comp = compile_all(chain_model([ADD]))
    assert index_in(comp, "accel") < index_in(comp, "cpu-two")
    assert comp.plan_log[-1] == "partitionTheWork: only one best device: accel"


def test_relaxed_float_performance_is_used_when_relaxed(register):
    # slow for plain float32, fast when the model allows float16 precision
    relaxer = FakeDriver("relaxer", exec_time=2.0, power_usage=2.0, relaxed=(0.25, 0.25))
    register(relaxer)
    plain = compile_all(chain_model([ADD, MUL]))
    assert plain.plan_log[-1] == f"partitionTheWork: only one best device: {REF}"
    relaxed_model = chain_model([ADD, MUL], relaxed=True)
    relaxed = compile_all(relaxed_model)
    k = index_in(relaxed, "relaxer")
    assert best_lines(relaxed) == [f"findBestDeviceForEachOperation(ADD): {k}",
                                   f"findBestDeviceForEachOperation(MUL): {k}"]
    assert relaxed.plan_log[-1] == "partitionTheWork: only one best device: relaxer"
    x, y = rand(seed=3), rand(seed=4)
    tol = 5 * 0.0009765625  # float32 relaxed to float16 (SPEC section 3)
    np.testing.assert_allclose(run(relaxed, x, y), chain_expected([ADD, MUL], x, y), rtol=tol, atol=tol)
    assert relaxer.executed_steps == [("ADD", "MUL")]


def test_undeclared_operand_type_counts_as_very_slow(register):
    """A driver that declares performance only for other types loses even if it is 'fast' there."""
    from fake_drivers import caps

    odd = FakeDriver("int-only-perf", capabilities=caps(0.01, 0.01, types=[OperandCode.TENSOR_INT32]))
    register(odd)
    comp = compile_all(chain_model([ADD]))
    assert comp.plan_log[-1] == f"partitionTheWork: only one best device: {REF}"


# -- compound plans ----------------------------------------------------------------------------------
def test_compound_plan_add_on_a_mul_on_b(register, caplog):
    caplog.set_level(logging.INFO, logger="mlts.ExecutionPlan")
    a = FakeDriver("drv-a", 0.5, 0.5, operations=[ADD])
    b = FakeDriver("drv-b", 0.5, 0.5, operations=[MUL])
    register(a, b)
    ops = [ADD, MUL, ADD, MUL]
    comp = compile_all(chain_model(ops))
    ka, kb = index_in(comp, "drv-a"), index_in(comp, "drv-b")
    assert best_lines(comp) == [f"findBestDeviceForEachOperation(ADD): {ka}",
                                f"findBestDeviceForEachOperation(MUL): {kb}",
                                f"findBestDeviceForEachOperation(ADD): {ka}",
                                f"findBestDeviceForEachOperation(MUL): {kb}"]
    assert not any("only one best device" in l for l in comp.plan_log)
    assert step_devices(comp) == ["drv-a", "drv-b", "drv-a", "drv-b"]
    for seed in range(3):
        x, y = rand(seed=10 + seed), rand(seed=20 + seed)
        np.testing.assert_allclose(run(comp, x, y), chain_expected(ops, x, y), rtol=1e-6)
    assert a.executed_ops() == {"ADD"} and b.executed_ops() == {"MUL"}
    assert len(a.executed_steps) == len(b.executed_steps) == 6  # 2 steps each x 3 runs
    assert sorted(a.prepared_steps) == [("ADD",), ("ADD",)]


def test_compound_plan_with_unsupported_op_on_cpu(register):
    """ADD on A, SUB (supported by nobody else) on the reference, MUL on B."""
    a = FakeDriver("drv-a", 0.5, 0.5, operations=[ADD])
    b = FakeDriver("drv-b", 0.5, 0.5, operations=[MUL])
    register(a, b)
    ops = [ADD, SUB, MUL, DIV]
    comp = compile_all(chain_model(ops))
    ka, kb, kr = index_in(comp, "drv-a"), index_in(comp, "drv-b"), index_in(comp, REF)
    assert best_lines(comp) == [f"findBestDeviceForEachOperation(ADD): {ka}",
                                f"findBestDeviceForEachOperation(SUB): {kr}",
                                f"findBestDeviceForEachOperation(MUL): {kb}",
                                f"findBestDeviceForEachOperation(DIV): {kr}"]
    assert step_devices(comp) == ["drv-a", REF, "drv-b", REF]
    check_chain(comp, ops)


def test_compound_plan_with_diamond_and_two_outputs(register):
    """Two model outputs, one produced mid-plan, and an intermediate consumed by two later steps."""
    a = FakeDriver("drv-a", 0.5, 0.5, operations=[ADD])
    b = FakeDriver("drv-b", 0.5, 0.5, operations=[MUL])
    register(a, b)
    t = OperandType(OperandCode.TENSOR_FLOAT32, (2, 3))
    m = Model()
    x, y = m.add_operand(t), m.add_operand(t)
    act = m.add_operand(OperandType(OperandCode.INT32))
    m.set_operand_value(act, np.int32(FuseCode.NONE))
    s, p, out = m.add_operand(t), m.add_operand(t), m.add_operand(t)
    m.add_operation(ADD, [x, y, act], [s])        # s = x + y          (A)
    m.add_operation(MUL, [s, s, act], [p])        # p = s * s          (B), also a model output
    m.add_operation(ADD, [p, s, act], [out])      # out = s*s + s      (A)
    m.identify_inputs_and_outputs([x, y], [out, p])
    m.finish()
    comp = compile_all(m)
    assert step_devices(comp) == ["drv-a", "drv-b", "drv-a"]
    xv, yv = rand((2, 3), seed=1), rand((2, 3), seed=2)
    ex = Execution(comp)
    ex.set_input(0, xv)
    ex.set_input(1, yv)
    o0, o1 = np.empty((2, 3), np.float32), np.empty((2, 3), np.float32)
    ex.set_output(0, o0)
    ex.set_output(1, o1)
    ex.compute()
    sv = xv + yv
    np.testing.assert_allclose(o1, sv * sv, rtol=1e-6)
    np.testing.assert_allclose(o0, sv * sv + sv, rtol=1e-6)


def test_compound_plan_outputs_in_memory(register):
    """A model output bound to shared memory, produced by one device and read by the next step."""
    a = FakeDriver("drv-a", 0.5, 0.5, operations=[ADD])
    b = FakeDriver("drv-b", 0.5, 0.5, operations=[MUL])
    register(a, b)
    t = OperandType(OperandCode.TENSOR_FLOAT32, (2, 3))
    m = Model()
    x, y = m.add_operand(t), m.add_operand(t)
    act = m.add_operand(OperandType(OperandCode.INT32))
    m.set_operand_value(act, np.int32(FuseCode.NONE))
    s, p = m.add_operand(t), m.add_operand(t)
    m.add_operation(ADD, [x, y, act], [s])   # s: a model output, also MUL's input
    m.add_operation(MUL, [s, y, act], [p])
    m.identify_inputs_and_outputs([x, y], [s, p])
    m.finish()
    comp = compile_all(m)
    assert step_devices(comp) == ["drv-a", "drv-b"]
    from mlts.runtime import Memory
    mem = Memory.create_shared(200)
    xv, yv = rand((2, 3), seed=1), rand((2, 3), seed=2)
    mem.array(0, np.float32, (2, 3))[...] = xv
    mem.array(24, np.float32, (2, 3))[...] = yv
    ex = Execution(comp)
    ex.set_input_from_memory(0, mem, 0, 24)
    ex.set_input_from_memory(1, mem, 24, 24)
    ex.set_output_from_memory(0, mem, 100, 24)
    ex.set_output_from_memory(1, mem, 148, 24)
    ex.compute()
    np.testing.assert_allclose(mem.array(100, np.float32, (2, 3)), xv + yv, rtol=1e-6)
    np.testing.assert_allclose(mem.array(148, np.float32, (2, 3)), (xv + yv) * yv, rtol=1e-6)


def test_compound_plan_output_insufficient_size_is_not_a_driver_failure(register, caplog):
    """A too-small application buffer is the application's problem: no CPU retry, shapes reported."""
    caplog.set_level(logging.INFO, logger="mlts.ExecutionPlan")
    a = FakeDriver("drv-a", 0.5, 0.5, operations=[ADD])
    b = FakeDriver("drv-b", 0.5, 0.5, operations=[MUL])
    register(a, b)
    comp = compile_all(dynamic_chain_model([ADD, MUL], shape=(3, 4), out_dims=(0, 0), temp_dims=(0, 0)))
    assert step_devices(comp) == ["drv-a", "drv-b"]
    ex = Execution(comp)
    ex.set_input(0, rand())
    ex.set_input(1, rand())
    ex.set_output(0, np.empty(4, np.float32))
    with pytest.raises(MltsError) as e:
        ex.compute()
    assert e.value.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE
    assert ex.get_output_operand_dimensions(0) == (3, 4)
    assert not any("retrying" in m or "falls back" in m for m in caplog.messages)
    assert len(b.executed_steps) == 1


def test_compound_plan_with_dynamic_intermediate(register):
    """An intermediate of unknown dimensions crossing devices: the runtime sizes its own buffers."""
    a = FakeDriver("drv-a", 0.5, 0.5, operations=[ADD])
    b = FakeDriver("drv-b", 0.5, 0.5, operations=[MUL])
    register(a, b)
    ops = [ADD, MUL, ADD]
    m = dynamic_chain_model(ops, shape=(4, 5), out_dims=(0, 0), temp_dims=(0, 0))
    comp = compile_all(m)
    assert step_devices(comp) == ["drv-a", "drv-b", "drv-a"]
    x, y = rand((4, 5), seed=5), rand((4, 5), seed=6)
    ex = Execution(comp)
    ex.set_input(0, x)
    ex.set_input(1, y)
    out = np.zeros(20, np.float32)
    ex.set_output(0, out)
    ex.compute()
    assert ex.get_output_operand_dimensions(0) == (4, 5)
    np.testing.assert_allclose(out.reshape(4, 5), chain_expected(ops, x, y), rtol=1e-6)


def test_for_devices_uses_only_the_listed_devices(register):
    a = FakeDriver("drv-a", 2.0, 2.0, operations=[ADD])  # slower than the CPU, but the CPU is not listed
    b = FakeDriver("drv-b", 2.0, 2.0, operations=[MUL])
    da, db = register(a, b)
    comp = compile_for(chain_model([ADD, MUL]), [da, db])
    assert best_lines(comp) == ["findBestDeviceForEachOperation(ADD): 0", "findBestDeviceForEachOperation(MUL): 1"]
    assert step_devices(comp) == ["drv-a", "drv-b"]
    check_chain(comp, [ADD, MUL])
    assert a.executed_ops() == {"ADD"} and b.executed_ops() == {"MUL"}


def test_for_devices_by_name(register):
    a = FakeDriver("drv-a", 2.0, 2.0)
    register(a)
    comp = compile_for(chain_model([ADD, MUL]), ["drv-a"])
    assert comp.plan_log[-1] == "partitionTheWork: only one best device: drv-a"
    check_chain(comp, [ADD, MUL])


def test_for_devices_without_support_is_bad_data(register):
    a = FakeDriver("drv-a", 0.5, 0.5, operations=[ADD])
    (da,) = register(a)
    comp = Compilation.for_devices(chain_model([ADD, MUL]), [da])
    with pytest.raises(MltsError) as e:
        comp.finish()
    assert e.value.code == ResultCode.BAD_DATA
    assert "MUL" in e.value.message
    assert a.prepare_calls == 0
    # with the CPU listed too it works, the CPU taking MUL
    comp = compile_for(chain_model([ADD, MUL]), [da, get_device(REF)])
    assert step_devices(comp) == ["drv-a", REF]
    check_chain(comp, [ADD, MUL])


def test_get_supported_operations_for_devices(register):
    a = FakeDriver("drv-a", operations=[ADD])
    b = FakeDriver("drv-b", operations=[MUL])
    broken = BrokenSupportDriver("broken", mode="exception")
    da, db, dx = register(a, b, broken)
    # operations added out of run order: op 0 is MUL (consumes op 1's output), op 1 is ADD
    t = OperandType(OperandCode.TENSOR_FLOAT32, (2,))
    m = Model()
    x, y, act, s, out = (m.add_operand(t), m.add_operand(t), m.add_operand(OperandType(OperandCode.INT32)),
                         m.add_operand(t), m.add_operand(t))
    m.set_operand_value(act, np.int32(0))
    m.add_operation(MUL, [s, y, act], [out])
    m.add_operation(ADD, [x, y, act], [s])
    m.identify_inputs_and_outputs([x, y], [out])
    m.finish()
    assert m.get_supported_operations_for_devices([da]) == [False, True]
    assert m.get_supported_operations_for_devices([db]) == [True, False]
    assert m.get_supported_operations_for_devices([da, db]) == [True, True]
    assert m.get_supported_operations_for_devices([get_device(REF)]) == [True, True]
    assert m.get_supported_operations_for_devices([dx]) == [False, False]
    assert m.get_supported_operations_for_devices([dx, da]) == [False, True]
    for mode in ("short", "long", "none", "mltserror"):
        drv = BrokenSupportDriver(f"broken-{mode}", mode=mode)
        (d,) = register(drv)
        assert m.get_supported_operations_for_devices([d]) == [False, False], mode
    with pytest.raises(MltsError) as e:
        m.get_supported_operations_for_devices([])
    assert e.value.code == ResultCode.BAD_DATA


# -- preparation failure -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["mltserror", "exception", "none"])
def test_prepare_failure_falls_back_to_whole_model_on_cpu(register, caplog, mode):
    caplog.set_level(logging.INFO, logger="mlts.ExecutionPlan")
    bad = FailingPrepareDriver("bad-prep", mode=mode)
    good = FakeDriver("good", 0.5, 0.5, operations=[MUL])
    register(bad, good)
    ops = [ADD, MUL, SUB]
    comp = compile_all(chain_model(ops))  # no error: the whole model moves to the CPU
    assert bad.prepare_calls == 1
    assert step_devices(comp) == [REF]
    fallback = [l for l in comp.plan_log if "preparation on bad-prep failed" in l]
    assert len(fallback) == 1 and fallback[0].endswith(f"the whole model falls back to {REF}")
    assert fallback[0] in caplog.messages
    check_chain(comp, ops)
    assert good.executed_steps == [] and bad.executed_steps == []


@pytest.mark.parametrize("mode, code", [("mltserror", ResultCode.RESOURCE_EXHAUSTED_PERSISTENT),
                                        ("exception", ResultCode.OP_FAILED), ("none", ResultCode.OP_FAILED)])
def test_prepare_failure_with_for_devices_is_an_error(register, mode, code):
    bad = FailingPrepareDriver("bad-prep", mode=mode, code=ResultCode.RESOURCE_EXHAUSTED_PERSISTENT)
    (d,) = register(bad)
    comp = Compilation.for_devices(chain_model([ADD, MUL]), [d, get_device(REF)])
    with pytest.raises(MltsError) as e:
        comp.finish()
    assert e.value.code == code
    assert not comp.finished
    with pytest.raises(MltsError) as e:
        Execution(comp)
    assert e.value.code == ResultCode.BAD_STATE


# -- execution failure -------------------------------------------------------------------------------
EXEC_MODES = ["status", "mltserror", "exception", "none", "bad_status", "short_shapes", "bad_shapes",
              "garbage_shapes"]


@pytest.mark.parametrize("mode", EXEC_MODES)
def test_execution_failure_of_one_step_is_retried_on_cpu(register, caplog, mode):
    caplog.set_level(logging.INFO, logger="mlts.ExecutionPlan")
    a = FailingExecutionDriver("drv-a", mode=mode, operations=[ADD])
    b = FakeDriver("drv-b", 0.5, 0.5, operations=[MUL])
    register(a, b)
    ops = [ADD, MUL]
    comp = compile_all(chain_model(ops))
    assert step_devices(comp) == ["drv-a", "drv-b"]
    check_chain(comp, ops)
    assert a.failures == 1
    assert b.executed_steps == [("MUL",)]  # step 1 still ran on B: only the failed step moved
    retry = [m for m in caplog.messages if m.startswith("step 0 on drv-a failed")]
    assert len(retry) == 1 and retry[0].endswith(f"retrying the step on {REF}")
    assert not any("whole model falls back" in m for m in caplog.messages)


def test_execution_failure_only_on_some_steps(register, caplog):
    """F runs ADD and MUL, fails only on steps holding MUL; SUB in between runs on the CPU."""
    caplog.set_level(logging.INFO, logger="mlts.ExecutionPlan")
    f = FailingExecutionDriver("flaky", mode="status", fail_on=[MUL], operations=[ADD, MUL])
    register(f)
    ops = [ADD, SUB, MUL]
    comp = compile_all(chain_model(ops))
    assert step_devices(comp) == ["flaky", REF, "flaky"]
    check_chain(comp, ops)
    assert f.executed_steps == [("ADD",), ("MUL",)] and f.failures == 1
    failed = [m for m in caplog.messages if " failed (" in m and m.startswith("step ")]
    assert len(failed) == 1 and failed[0].startswith("step 2 on flaky failed (OP_FAILED")


def test_execution_failure_of_a_single_device_plan_falls_back_to_whole_model(register, caplog):
    caplog.set_level(logging.INFO, logger="mlts.ExecutionPlan")
    f = FailingExecutionDriver("flaky", mode="exception")
    register(f)
    ops = [ADD, MUL, DIV]
    comp = compile_all(chain_model(ops))
    assert step_devices(comp) == ["flaky"]
    check_chain(comp, ops)
    whole = [m for m in caplog.messages if "whole model falls back to" in m]
    assert len(whole) == 1 and whole[0].startswith("execution failed (OP_FAILED")
    assert f.failures == 1


def test_execution_failure_in_a_burst_falls_back(register, caplog):
    caplog.set_level(logging.INFO, logger="mlts.ExecutionPlan")
    a = FailingExecutionDriver("drv-a", mode="burst", operations=[ADD])
    b = FakeDriver("drv-b", 0.5, 0.5, operations=[MUL])
    register(a, b)
    comp = compile_all(chain_model([ADD, MUL]))
    burst = Burst(comp)
    x, y = rand(seed=1), rand(seed=2)
    for _ in range(2):
        ex = Execution(comp)
        ex.set_input(0, x)
        ex.set_input(1, y)
        out = np.empty((3, 4), np.float32)
        ex.set_output(0, out)
        ex.burst_compute(burst)
        np.testing.assert_allclose(out, (x + y) * y, rtol=1e-6)
    burst.close()
    assert a.failures >= 1
    assert any(m.startswith("step 0 on drv-a failed") for m in caplog.messages)


@pytest.mark.parametrize("mode", EXEC_MODES)
def test_execution_failure_with_for_devices_is_surfaced(register, caplog, mode):
    caplog.set_level(logging.INFO, logger="mlts.ExecutionPlan")
    a = FailingExecutionDriver("drv-a", mode=mode, operations=[ADD])
    b = FakeDriver("drv-b", 0.5, 0.5, operations=[MUL])
    da, db = register(a, b)
    comp = compile_for(chain_model([ADD, MUL]), [da, db, get_device(REF)])
    with pytest.raises(MltsError) as e:
        run(comp, rand(), rand())
    assert e.value.code == ResultCode.OP_FAILED
    assert a.failures == 1 and b.executed_steps == []
    assert not any("retrying" in m or "falls back" in m for m in caplog.messages)


def test_missed_deadline_is_not_retried_on_cpu(register, caplog):
    """MISSED_DEADLINE_* is a result, not a driver failure: no fallback even with Compilation(model)."""
    caplog.set_level(logging.INFO, logger="mlts.ExecutionPlan")

    class Late(FakeDriver):
        def serve(self, prepared, request, measure, deadline, loop_timeout_ns):
            from mlts.runtime.hal import ExecutionResult
            return ExecutionResult(ResultCode.MISSED_DEADLINE_PERSISTENT, [], message="too slow")

    late = Late("late", 0.5, 0.5)
    register(late)
    comp = compile_all(chain_model([ADD]))
    with pytest.raises(MltsError) as e:
        run(comp, rand(), rand())
    assert e.value.code == ResultCode.MISSED_DEADLINE_PERSISTENT
    assert not any("falls back" in m or "retrying" in m for m in caplog.messages)


# -- broken supported-operations / capabilities -------------------------------------------------------
@pytest.mark.parametrize("mode", ["short", "long", "mltserror", "exception", "none"])
def test_broken_get_supported_operations_is_treated_as_unsupported(register, mode):
    broken = BrokenSupportDriver("broken", mode=mode)
    (d,) = register(broken)
    comp = compile_all(chain_model([ADD, MUL]))
    assert broken.support_queries >= 1
    assert any(l.startswith("getSupportedOperations(broken) failed") for l in comp.plan_log)
    assert comp.plan_log[-1] == f"partitionTheWork: only one best device: {REF}"
    check_chain(comp, [ADD, MUL])
    assert broken.prepare_calls == 0
    with pytest.raises(MltsError) as e:
        Compilation.for_devices(chain_model([ADD, MUL]), [d]).finish()
    assert e.value.code == ResultCode.BAD_DATA


def test_broken_capabilities_do_not_escape(register):
    broken = BrokenCapabilitiesDriver("no-caps", 0.1, 0.1)
    (d,) = register(broken)
    comp = compile_all(chain_model([ADD, MUL]))
    assert comp.plan_log[-1] == f"partitionTheWork: only one best device: {REF}"
    check_chain(comp, [ADD, MUL])
    with pytest.raises(MltsError):
        Compilation.for_devices(chain_model([ADD, MUL]), [d]).finish()


ALL_BROKEN = ([pytest.param(lambda m=m: FailingPrepareDriver(f"prep-{m}", mode=m), id=f"prepare-{m}")
               for m in ("mltserror", "exception", "none")]
              + [pytest.param(lambda m=m: FailingExecutionDriver(f"exec-{m}", mode=m), id=f"execute-{m}")
                 for m in EXEC_MODES + ["burst", "burst_close"]]
              + [pytest.param(lambda m=m: BrokenSupportDriver(f"supp-{m}", mode=m), id=f"supported-{m}")
                 for m in ("short", "long", "mltserror", "exception", "none")]
              + [pytest.param(lambda: BrokenCapabilitiesDriver("caps", 0.1, 0.1), id="capabilities")])


@pytest.mark.parametrize("make", ALL_BROKEN)
def test_broken_drivers_never_leak_non_mlts_errors(register, make):
    """Whatever a driver does, the client sees a result or an MltsError, for every API path."""
    drv = make()
    (d,) = register(drv)
    ops = [ADD, MUL]
    x, y = rand(seed=7), rand(seed=8)
    expected = chain_expected(ops, x, y)
    # With Compilation(model): the CPU fallback always delivers the right answer.
    comp = compile_all(chain_model(ops))
    np.testing.assert_allclose(run(comp, x, y), expected, rtol=1e-6)
    ex = Execution(comp)
    ex.set_input(0, x)
    ex.set_input(1, y)
    out = np.empty((3, 4), np.float32)
    ex.set_output(0, out)
    ex.start_compute().wait(10)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    burst = Burst(comp)
    ex = Execution(comp)
    ex.set_input(0, x)
    ex.set_input(1, y)
    out = np.empty((3, 4), np.float32)
    ex.set_output(0, out)
    ex.burst_compute(burst)
    burst.close()
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    # With for_devices: success or an MltsError, nothing else.
    try:
        comp = compile_for(chain_model(ops), [d])
        np.testing.assert_allclose(run(comp, x, y), expected, rtol=1e-6)
    except MltsError:
        pass
    assert d in devices()


def test_insufficient_output_in_a_partitioned_model_reports_model_output_shapes(register):
    """The too-small buffer is on the CPU step of an ADD(accel) -> MUL(cpu) plan: the reported shapes
    are per model output, not per step output."""
    register(FakeDriver("add-only", 0.5, 0.5, operations={ADD}))
    model = dynamic_chain_model([ADD, MUL], out_dims=(0, 0))
    comp = compile_all(model)
    assert len(comp.plan.steps) == 2
    ex = Execution(comp)
    ex.set_input(0, rand())
    ex.set_input(1, rand())
    ex.set_output(0, np.empty((1, 2), np.float32))
    with pytest.raises(MltsError) as info:
        ex.compute()
    assert info.value.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE
    assert ex.get_output_operand_dimensions(0) == (3, 4)
    with pytest.raises(MltsError) as info:
        ex.get_output_operand_dimensions(1)
    assert info.value.code == ResultCode.BAD_DATA


def test_driver_returning_malformed_timing_reads_as_unavailable(register):
    from mlts.runtime.enums import NO_TIMING, DurationCode
    from mlts.runtime.hal import ExecutionResult

    class BadTiming(FakeDriver):
        def prepare_model(self, *a, **kw):
            inner = super().prepare_model(*a, **kw)
            original = inner.execute_synchronously

            def execute(*args, **kwargs):
                r = original(*args, **kwargs)
                return ExecutionResult(r.status, r.output_shapes, None, r.message)
            inner.execute_synchronously = execute
            return inner

    (dev,) = register(BadTiming("bad-timing"))
    comp = Compilation.for_devices(chain_model([ADD]), [dev])
    comp.finish()
    ex = Execution(comp)
    ex.set_measure_timing(True)
    x, y = rand(seed=1), rand(seed=2)
    ex.set_input(0, x)
    ex.set_input(1, y)
    ex.compute()
    np.testing.assert_allclose(ex.get_output(0), x + y)
    assert ex.get_duration(DurationCode.ON_HARDWARE) == NO_TIMING


def test_an_operation_no_selected_device_supports_fails_at_once(register):
    """nnapi-reference runs every NNAPI 1.3 operation, so only a device list without it can lack one."""
    from mlts.runtime import OperationCode
    from mlts.runtime.drivers.sample import sample_drivers

    (minimal,) = register(next(d for d in sample_drivers() if d.name == "sample-minimal"))  # ADD, CONCAT, CONV_2D
    m = Model()
    hashes = m.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (4, 2)))
    a = m.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (3, 2)))
    weights, kind = m.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (3,))), m.add_operand(OperandType(OperandCode.INT32))
    b = m.add_operand(OperandType(OperandCode.TENSOR_INT32, (8,)))
    m.set_operand_value(hashes, np.zeros((4, 2), np.float32))
    m.set_operand_value(weights, None)
    m.set_operand_value(kind, np.int32(2))  # DENSE
    m.add_operation(OperationCode.LSH_PROJECTION, [hashes, a, weights, kind], [b])
    m.identify_inputs_and_outputs([a], [b])
    m.finish()
    with pytest.raises(MltsError) as info:
        compile_for(m, [minimal])
    assert info.value.code == ResultCode.BAD_DATA
    assert "no selected device supports operation 0 (LSH_PROJECTION)" in info.value.message
