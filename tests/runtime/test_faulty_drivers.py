"""Fault-injecting drivers (`faulty:<fault>@<stage>`): every fault is observed, in-process and as a service.

Crashes abort the process that hosts the driver, so in-process crash tests run in a child process;
hangs are observed with a thread that does not finish (then released) or a child that is killed.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import psutil
import pytest

from fake_drivers import ADD, MUL, chain_expected, chain_model, rand, run
from mlts.runtime import (Compilation, DurationCode, Execution, FuseCode, MltsError, Model, OperandCode,
                          OperandType, OperationCode, ResultCode, get_device)
from mlts.runtime.drivers import faulty
from mlts.runtime.drivers.faulty import FaultyDriver, create, fault_specs, parse_spec, perturb

F32_ATOL, F32_RTOL = 1e-5, 5 * 1.1920928955078125e-7
F16_TOL = 5 * 0.0009765625
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def model():
    return chain_model([ADD, MUL])


@pytest.fixture
def xy():
    x, y = rand(seed=1), rand(seed=2)
    return x, y, chain_expected([ADD, MUL], x, y)


def only(register, spec: str):
    """(driver, device) for a fault driver hosted in this process."""
    driver = create(spec)
    (device,) = register(driver)
    return driver, device


def compiled(model, devices=None) -> Compilation:
    c = Compilation(model) if devices is None else Compilation.for_devices(model, devices)
    c.finish()
    return c


# -- specs ---------------------------------------------------------------------------------------------
def test_every_fault_of_the_issue_is_a_spec():
    assert set(fault_specs()) == {
        "crash@prepare", "crash@execute", "hang@prepare", "hang@execute", "fail@prepare", "stale-cache@prepare",
        "wrong-small@execute", "wrong-large@execute", "slow@execute", "leak@execute", "unsupported@execute",
        "dynamic-shape@execute", "ignores-deadline@execute",
        "wrong-branch@control-flow", "accepts-foreign-token@memory", "ignores-fences@fenced"}
    names = [create(s).name for s in fault_specs()]
    assert len(set(names)) == len(names)
    assert create("faulty:crash@execute").name == "faulty-crash-execute"


def test_spec_options_names_and_canonical_form():
    spec = parse_spec("faulty:wrong-small@execute?seed=3")
    assert spec.option("seed") == 3 and spec.name == "faulty-wrong-small-execute-seed3"
    assert str(spec) == "faulty:wrong-small@execute?seed=3"
    assert parse_spec("leak").stage == "execute"  # the only stage of leak may be left out
    assert parse_spec("leak?mb=2").option("mb") == 2.0
    assert parse_spec("slow@execute").option("factor") == 10.0
    assert parse_spec("unsupported@execute?op=conv_2d").option("op") == "CONV_2D"
    assert parse_spec(" Hang@Execute ?seconds=1.5").option("seconds") == 1.5


@pytest.mark.parametrize("bad", ["", "faulty:", "explode@execute", "crash", "crash@compile", "fail@execute",
                                 "leak@execute?mb=-1", "leak@execute?seed=1", "slow@execute?factor=x",
                                 "slow@execute?factor=0.5", "unsupported@execute?op=NOPE",
                                 "dynamic-shape@execute?mode=odd", "leak@execute?mb"])
def test_bad_specs_are_bad_data_listing_the_valid_ones(bad):
    with pytest.raises(MltsError) as info:
        parse_spec(bad)
    assert info.value.code == ResultCode.BAD_DATA
    assert bad.strip() in info.value.message and "faulty:crash@execute" in info.value.message


def test_fault_drivers_attract_work(register, model):
    _, device = only(register, "wrong-small@execute")
    c = compiled(model)
    assert [s.device.name for s in c.plan.steps] == [device.name]


# -- crash -----------------------------------------------------------------------------------------------
CHILD = """
import sys
sys.path.insert(0, {tests!r})
from fake_drivers import ADD, MUL, chain_model, rand, run
from mlts.runtime import Compilation, register_driver
from mlts.runtime.drivers.faulty import create
device = register_driver(create({spec!r}))
c = Compilation.for_devices(chain_model([ADD, MUL]), [device])
c.finish()
print("prepared", flush=True)
run(c, rand(seed=1), rand(seed=2))
print("executed", flush=True)
"""


def child(spec: str) -> subprocess.Popen:
    code = CHILD.format(tests=os.path.dirname(os.path.abspath(__file__)), spec=spec)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("stage", ["prepare", "execute"])
def test_crash_aborts_the_hosting_process(stage):
    proc = child(f"crash@{stage}")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGABRT
    assert ("prepared" in out) == (stage == "execute") and "executed" not in out
    assert f"faulty-crash-{stage}: injected crash" in err


# -- hang ------------------------------------------------------------------------------------------------
def test_hang_at_execute_never_completes_until_released(register, model, xy):
    x, y, expected = xy
    driver, device = only(register, "hang@execute")
    c = compiled(model, [device])
    results = []
    worker = threading.Thread(target=lambda: results.append(run(c, x, y)), daemon=True)
    worker.start()
    worker.join(1.0)
    assert worker.is_alive() and not results and driver.executions == 1
    driver.release()  # only a test can do that; a stress run kills the hosting process
    worker.join(10)
    assert not worker.is_alive()
    np.testing.assert_array_equal(results[0], expected)


def test_hang_at_prepare_never_completes_until_released(register, model):
    driver, device = only(register, "hang@prepare")
    c = Compilation.for_devices(model, [device])
    worker = threading.Thread(target=c.finish, daemon=True)
    worker.start()
    worker.join(1.0)
    assert worker.is_alive() and not c.finished
    driver.release()
    worker.join(10)
    assert c.finished


def test_hang_with_a_time_limit_ends_by_itself(register, model, xy):
    x, y, expected = xy
    _, device = only(register, "hang@execute?seconds=0.3")
    c = compiled(model, [device])
    start = time.monotonic()
    np.testing.assert_array_equal(run(c, x, y), expected)
    assert time.monotonic() - start >= 0.3


def test_forever_hang_in_a_child_is_ended_by_a_kill():
    proc = child("hang@execute")
    try:
        assert proc.stdout.readline().strip() == "prepared"
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(1.5)
    finally:
        proc.kill()
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL and "executed" not in out
    assert "faulty-hang-execute: injected hang in execution (forever)" in err


# -- wrong results ---------------------------------------------------------------------------------------
def test_wrong_small_is_beyond_float32_tolerance_within_float16(register, model, xy):
    x, y, expected = xy
    _, device = only(register, "wrong-small@execute")
    out = run(compiled(model, [device]), x, y)
    err = np.abs(out - expected)
    assert np.all(err > F32_ATOL + F32_RTOL * np.abs(expected))  # every element is off for fp32 CTS
    assert np.all(err <= F16_TOL + F16_TOL * np.abs(expected))  # and fine for relaxed / fp16
    np.testing.assert_allclose(err, faulty.SMALL_REL * np.abs(expected) + faulty.SMALL_ABS, rtol=1e-3)


def test_wrong_results_are_seeded(register, model, xy):
    x, y, expected = xy
    _, d0 = only(register, "wrong-small@execute")
    _, d0b = only(register, "wrong-small@execute?seed=0")
    _, d3 = only(register, "wrong-small@execute?seed=3")
    a, a2 = run(compiled(model, [d0]), x, y), run(compiled(model, [d0]), x, y)
    b, c = run(compiled(model, [d0b]), x, y), run(compiled(model, [d3]), x, y)
    np.testing.assert_array_equal(a, a2)  # deterministic across executions
    np.testing.assert_array_equal(a, b)  # seed 0 is the default
    assert np.any(np.sign(a - expected) != np.sign(c - expected))


def quant_add_model(shape=(4, 8)) -> Model:
    t = OperandType(OperandCode.TENSOR_QUANT8_ASYMM, shape, scale=0.5, zero_point=128)
    m = Model()
    a, b = m.add_operand(t), m.add_operand(t)
    act = m.add_operand(OperandType(OperandCode.INT32))
    m.set_operand_value(act, np.int32(FuseCode.NONE))
    out = m.add_operand(t)
    m.add_operation(OperationCode.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    return m


def test_wrong_small_and_large_on_quantized_outputs(register):
    m = quant_add_model()
    rng = np.random.default_rng(0)
    a = rng.integers(100, 156, size=(4, 8), dtype=np.uint8)
    b = rng.integers(100, 156, size=(4, 8), dtype=np.uint8)

    def out(devs):
        ex = Execution(compiled(m, devs))
        ex.set_input(0, a)
        ex.set_input(1, b)
        o = np.zeros((4, 8), np.uint8)
        ex.set_output(0, o)
        ex.compute()
        return o.astype(int)

    expected = out([get_device("nnapi-reference")])
    _, small = only(register, "wrong-small@execute")
    _, large = only(register, "wrong-large@execute")
    assert np.all(np.abs(out([small]) - expected) == faulty.SMALL_STEPS)  # beyond the whole-model 3
    rolled = np.roll(expected, 1, axis=-1)
    assert np.all(np.abs(out([large]) - rolled) == faulty.LARGE_STEPS)


def test_wrong_large_changes_a_classifiers_top1(register):
    m = Model()
    t = OperandType(OperandCode.TENSOR_FLOAT32, (8, 10))
    x = m.add_operand(t)
    beta = m.add_operand(OperandType(OperandCode.FLOAT32))
    m.set_operand_value(beta, np.float32(1.0))
    y = m.add_operand(t)
    m.add_operation(OperationCode.SOFTMAX, [x, beta], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    logits = np.random.default_rng(5).normal(size=(8, 10)).astype(np.float32)
    logits[np.arange(8), np.arange(8)] += 4.0  # a clear winner per row
    expected = run(compiled(m, [get_device("nnapi-reference")]), logits)
    _, device = only(register, "wrong-large@execute?seed=1")
    out = run(compiled(m, [device]), logits)
    assert np.all(out.argmax(axis=1) != expected.argmax(axis=1))
    assert np.abs(out - expected).max() > 0.5


def test_perturb_semantics():
    x = np.array([[0.0, 1.0, -2.0]], np.float32)
    small = perturb(x, OperandCode.TENSOR_FLOAT32, large=False, seed=0)
    np.testing.assert_allclose(np.abs(small - x), 1e-3 * np.abs(x) + 1e-4, rtol=1e-4)
    b = np.array([True, False, True])
    assert np.array_equal(perturb(b, OperandCode.TENSOR_BOOL8, large=False, seed=0), b)
    assert np.array_equal(perturb(b, OperandCode.TENSOR_BOOL8, large=True, seed=0), ~np.roll(b, 1))
    edge = np.array([0, 255, 3, 252], np.uint8)  # moves stay inside the type: the other way at the edges
    moved = perturb(edge, OperandCode.TENSOR_QUANT8_ASYMM, large=False, seed=0).astype(int)
    assert np.all(np.abs(moved - edge.astype(int)) == 4)


# -- slow, leak ------------------------------------------------------------------------------------------
def best_latencies(compilations, x, y, n=15) -> list[float]:
    """The fastest of n runs of each compilation, interleaved so that both see the same CPU contention
    (the machine may be busy: the minimum is the least disturbed estimate)."""
    best = [float("inf")] * len(compilations)
    for _ in range(n):
        for k, c in enumerate(compilations):
            start = time.perf_counter()
            run(c, x, y)
            best[k] = min(best[k], time.perf_counter() - start)
    return best


def test_slow_is_about_ten_times_the_reference(register):
    ops = [ADD, MUL] * 16  # kernel time dominates the runtime's fixed cost per execution
    m = chain_model(ops, shape=(256, 256))
    x, y = rand((256, 256), seed=1), rand((256, 256), seed=2)
    _, device = only(register, "slow@execute")
    ref_c, slow_c = compiled(m, [get_device("nnapi-reference")]), compiled(m, [device])
    np.testing.assert_array_equal(run(slow_c, x, y), chain_expected(ops, x, y))
    ref, slow = best_latencies([ref_c, slow_c], x, y)
    assert slow / ref >= 5, (slow, ref)


def test_slow_reports_scaled_timing(register, model, xy):
    x, y, _ = xy
    _, device = only(register, "slow@execute?factor=4")
    ex = Execution(compiled(model, [device]))
    ex.set_input(0, x)
    ex.set_input(1, y)
    ex.set_output(0, np.zeros_like(x))
    ex.set_measure_timing(True)
    ex.compute()
    assert 0 < ex.get_duration(DurationCode.ON_HARDWARE) <= ex.get_duration(DurationCode.IN_DRIVER)


def test_leak_grows_resident_memory_per_execution(register, model, xy):
    x, y, expected = xy
    driver, device = only(register, "leak@execute?mb=8")
    c = compiled(model, [device])
    process = psutil.Process()
    run(c, x, y)
    before = process.memory_info().rss
    for _ in range(5):
        np.testing.assert_array_equal(run(c, x, y), expected)  # results stay right
    grown = process.memory_info().rss - before
    assert len(driver.leaked) == 6
    assert grown >= 5 * 8 * (1 << 20) * 0.9, grown / (1 << 20)
    driver.leaked.clear()


# -- fail, unsupported, dynamic shapes -------------------------------------------------------------------
def test_fail_at_prepare_falls_back_or_fails_as_the_spec_says(register, model, xy):
    x, y, expected = xy
    _, device = only(register, "fail@prepare")
    c = compiled(model)  # all devices: the whole model falls back to the CPU
    assert [s.device.name for s in c.plan.steps] == ["nnapi-reference"]
    assert any("preparation on faulty-fail-prepare failed (OP_FAILED" in line for line in c.plan_log)
    np.testing.assert_array_equal(run(c, x, y), expected)
    with pytest.raises(MltsError) as info:  # exactly this device: no fallback
        compiled(model, [device])
    assert info.value.code == ResultCode.OP_FAILED and "faulty-fail-prepare" in info.value.message


def test_unsupported_fails_with_op_failed_then_the_cpu_takes_over(register, model, xy, caplog):
    x, y, expected = xy
    driver, device = only(register, "unsupported@execute?op=MUL")
    with pytest.raises(MltsError) as info:
        run(compiled(model, [device]), x, y)
    assert info.value.code == ResultCode.OP_FAILED
    assert "operation 1 (MUL) failed" in info.value.message and "faulty-unsupported-execute-opMUL" in info.value.message
    caplog.set_level("INFO", logger="mlts.ExecutionPlan")
    c = compiled(model)
    assert [s.device.name for s in c.plan.steps] == [device.name]  # it claimed everything
    np.testing.assert_array_equal(run(c, x, y), expected)
    assert "whole model falls back to nnapi-reference" in caplog.text
    add_only = chain_model([ADD, ADD])
    np.testing.assert_array_equal(run(compiled(add_only, [device]), x, y), chain_expected([ADD, ADD], x, y))


def test_unsupported_claims_an_operation_and_fails_executing_it(register):
    m = Model()
    values = m.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (2, 2)))
    lookups = m.add_operand(OperandType(OperandCode.TENSOR_INT32, (2,)))
    b = m.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (2, 2)))
    m.set_operand_value(lookups, np.array([1, 0], np.int32))
    m.add_operation(OperationCode.EMBEDDING_LOOKUP, [lookups, values], [b])
    m.identify_inputs_and_outputs([values], [b])
    m.finish()
    _, device = only(register, "unsupported@execute?op=EMBEDDING_LOOKUP")
    assert m.get_supported_operations_for_devices([device]) == [True]
    c = compiled(m, [device])  # prepares: it said it could
    with pytest.raises(MltsError) as info:
        run(c, np.ones((2, 2), np.float32))
    assert info.value.code == ResultCode.OP_FAILED and "operation 0 (EMBEDDING_LOOKUP)" in info.value.message


def test_dynamic_shape_error_surfaces_with_the_reported_shapes(register, model, xy):
    x, y, _ = xy
    _, device = only(register, "dynamic-shape@execute")
    for c in (compiled(model, [device]), compiled(model)):  # no CPU fallback for this code (NNAPI)
        ex = Execution(c)
        ex.set_input(0, x)
        ex.set_input(1, y)
        ex.set_output(0, np.zeros_like(x))
        with pytest.raises(MltsError) as info:
            ex.compute()
        assert info.value.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE
        assert ex.get_output_operand_dimensions(0) == (6, 4)


def test_dynamic_shape_wrong_mode_is_rejected_by_the_runtime(register, model, xy):
    x, y, expected = xy
    _, device = only(register, "dynamic-shape@execute?mode=wrong")
    with pytest.raises(MltsError) as info:
        run(compiled(model, [device]), x, y)
    assert info.value.code == ResultCode.OP_FAILED and "output shape (3, 4, 1)" in info.value.message
    np.testing.assert_array_equal(run(compiled(model), x, y), expected)  # falls back


def test_faulty_driver_accepts_a_parsed_spec():
    d = FaultyDriver(parse_spec("leak@execute?mb=1"))
    assert d.name == "faulty-leak-execute-mb1" and d.spec.option("mb") == 1.0


# -- hosted as services (the default) ---------------------------------------------------------------------
@pytest.fixture
def service_driver(register):
    pytest.importorskip("mlts.runtime.service")
    from mlts.runtime.app.plugins import load_drivers

    def load(spec: str):
        (driver,) = load_drivers(spec)
        assert driver.hosting == "service"
        (device,) = register(driver)
        return driver, device

    yield load


def test_crash_at_execute_in_a_service_leaves_the_client_alive(service_driver, model, xy):
    x, y, expected = xy
    _, device = service_driver("faulty:crash@execute")
    with pytest.raises(MltsError) as info:
        run(compiled(model, [device]), x, y)
    assert info.value.code == ResultCode.DEAD_OBJECT
    np.testing.assert_array_equal(run(compiled(model), x, y), expected)  # falls back to the CPU


def test_crash_at_prepare_in_a_service_falls_back(service_driver, model, xy):
    x, y, expected = xy
    _, device = service_driver("faulty:crash@prepare")
    c = compiled(model)
    assert [s.device.name for s in c.plan.steps] == ["nnapi-reference"]
    np.testing.assert_array_equal(run(c, x, y), expected)
    with pytest.raises(MltsError) as info:
        compiled(model, [device])
    assert info.value.code == ResultCode.DEAD_OBJECT


def test_wrong_results_cross_the_service_boundary(service_driver, model, xy):
    x, y, expected = xy
    _, device = service_driver("faulty:wrong-small@execute")
    out = run(compiled(model, [device]), x, y)
    np.testing.assert_allclose(np.abs(out - expected), faulty.SMALL_REL * np.abs(expected) + faulty.SMALL_ABS,
                               rtol=1e-3)


def test_hang_at_execute_in_a_service_misses_the_deadline(service_driver, model, xy):
    x, y, _ = xy
    driver, device = service_driver("faulty:hang@execute")
    ex = Execution(compiled(model, [device]))
    ex.set_input(0, x)
    ex.set_input(1, y)
    ex.set_output(0, np.zeros_like(x))
    ex.set_timeout(300_000_000)  # 0.3 s; the client waits that plus a short grace, never forever
    start = time.monotonic()
    with pytest.raises(MltsError) as info:
        ex.compute()
    assert info.value.code in (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_PERSISTENT)
    assert 0.3 <= time.monotonic() - start < 10
    assert driver.alive  # still hanging in its own process, which the client may kill at will


def test_hang_at_prepare_in_a_service_misses_the_deadline(service_driver, model):
    _, device = service_driver("faulty:hang@prepare")
    c = Compilation.for_devices(model, [device])
    c.set_timeout(300_000_000)
    with pytest.raises(MltsError) as info:
        c.finish()
    assert info.value.code in (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_PERSISTENT)


def test_leak_in_a_service_grows_the_service_process(service_driver, model, xy):
    x, y, expected = xy
    driver, device = service_driver("faulty:leak@execute?mb=8")
    c = compiled(model, [device])
    run(c, x, y)
    service = psutil.Process(driver.pid)
    before = service.memory_info().rss
    for _ in range(4):
        np.testing.assert_array_equal(run(c, x, y), expected)
    assert service.memory_info().rss - before >= 4 * 8 * (1 << 20) * 0.9
