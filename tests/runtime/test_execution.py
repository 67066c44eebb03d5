"""Executions: bindings (arrays, memory regions), the compute flavours, timing, dynamic shapes,
reuse, loop timeouts, deadlines, constants' copy/reference rules, verbose logging and graph dumps."""
from __future__ import annotations

import logging
import re
import threading
import time

import numpy as np
import pytest

from fake_drivers import (ADD, DIV, MUL, SUB, FailingExecutionDriver, FakeDriver, chain_expected, chain_model,
                          dynamic_chain_model, rand, run)
from mlts.runtime import (PROT_READ, PROT_WRITE, Burst, Compilation, DurationCode, Event, Execution, FuseCode,
                          Memory, MltsError, Model, OperandCode, OperandType, ResultCode, get_device,
                          graph_dump)
from mlts.runtime.enums import DEFAULT_LOOP_TIMEOUT_NS, MAXIMUM_LOOP_TIMEOUT_NS, NO_TIMING

REF = "nnapi-reference"
F32 = OperandCode.TENSOR_FLOAT32
UINT64_MAX = 2**64 - 1


def compiled(model, devices=None) -> Compilation:
    c = Compilation(model) if devices is None else Compilation.for_devices(model, devices)
    c.finish()
    return c


def ref_only(model) -> Compilation:
    return compiled(model, [get_device(REF)])


@pytest.fixture(scope="module")
def add_mul():
    """(x + y) * y on 3x4 float32, compiled for all devices."""
    return compiled(chain_model([ADD, MUL]))


def expected_add_mul(x, y):
    return (x + y) * y


# -- bindings ------------------------------------------------------------------------------------------
def test_arrays_in_and_out(add_mul):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.full((3, 4), 2, np.float32)
    ex = Execution(add_mul)
    ex.set_input(0, x)
    ex.set_input(1, y)
    out = np.empty((3, 4), np.float32)
    ex.set_output(0, out)
    ex.compute()
    assert out[2, 3] == (11 + 2) * 2  # by hand
    np.testing.assert_array_equal(out, (x + 2) * 2)
    np.testing.assert_array_equal(ex.get_output(0), out)


def test_input_from_python_lists_and_wrong_dtypes(add_mul):
    ex = Execution(add_mul)
    ex.set_input(0, [[1.0] * 4] * 3)  # converted to float32
    with pytest.raises(MltsError) as e:
        ex.set_input(1, np.ones((3, 4), np.float64))
    assert e.value.code == ResultCode.BAD_DATA
    with pytest.raises(MltsError) as e:
        ex.set_input(1, np.ones((4, 3), np.float32))
    assert e.value.code == ResultCode.BAD_DATA
    with pytest.raises(MltsError) as e:
        ex.set_output(0, np.empty((3, 4), np.float64))
    assert e.value.code == ResultCode.BAD_DATA
    with pytest.raises(MltsError) as e:
        ex.set_input(2, np.ones((3, 4), np.float32))  # only two inputs
    assert e.value.code == ResultCode.BAD_DATA
    ex.set_input(1, np.full((3, 4), 3, np.float32))
    out = np.empty((3, 4), np.float32)
    ex.set_output(0, out)
    ex.compute()
    np.testing.assert_array_equal(out, np.full((3, 4), 12.0))  # (1 + 3) * 3


def test_missing_input_is_bad_data(add_mul):
    ex = Execution(add_mul)
    ex.set_input(0, rand())
    ex.set_output(0, np.empty((3, 4), np.float32))
    with pytest.raises(MltsError) as e:
        ex.compute()
    assert e.value.code == ResultCode.BAD_DATA


def test_shared_memory_regions_in_and_out(add_mul):
    x, y = rand(seed=1), rand(seed=2)
    mem = Memory.create_shared(256)
    mem.array(8, np.float32, (3, 4))[...] = x      # x at offset 8
    mem.array(64, np.float32, (3, 4))[...] = y     # y at offset 64
    mem.array(128, np.float32, (3, 4))[...] = -1   # output region at 128
    mem.array(176, np.float32, (4,))[...] = 7      # a sentinel right after the output region
    ex = Execution(add_mul)
    ex.set_input_from_memory(0, mem, 8, 48)
    ex.set_input_from_memory(1, mem, 64, 48)
    ex.set_output_from_memory(0, mem, 128, 48)
    ex.compute()
    np.testing.assert_allclose(mem.array(128, np.float32, (3, 4)), expected_add_mul(x, y), rtol=1e-6)
    np.testing.assert_array_equal(mem.array(176, np.float32, (4,)), [7, 7, 7, 7])  # nothing written past it
    np.testing.assert_array_equal(mem.array(8, np.float32, (3, 4)), x)  # inputs untouched
    assert ex.get_output_operand_dimensions(0) == (3, 4)


def test_memory_and_arrays_mixed(add_mul):
    x, y = rand(seed=3), rand(seed=4)
    mem = Memory.create_shared(48)
    mem.array(0, np.float32, (3, 4))[...] = y
    ex = Execution(add_mul)
    ex.set_input(0, x)
    ex.set_input_from_memory(1, mem, 0, 48)
    out = np.empty((3, 4), np.float32)
    ex.set_output(0, out)
    ex.compute()
    np.testing.assert_allclose(out, expected_add_mul(x, y), rtol=1e-6)


def test_file_memory_with_offsets(add_mul, tmp_path):
    x, y = rand(seed=5), rand(seed=6)
    junk = bytes(range(256)) * 20 + b"\x01" * 100  # 5220 bytes: crosses a page boundary
    path = tmp_path / "inputs.bin"
    path.write_bytes(junk + x.tobytes() + y.tobytes())
    # the whole file, regions at offsets
    whole = Memory.from_file(str(path), protect=PROT_READ)
    # only a window of the file, mapped from a non-page-aligned file offset
    window = Memory.from_file(str(path), offset=len(junk), size=96, protect=PROT_READ)
    assert window.size == 96
    out_path = tmp_path / "outputs.bin"
    out_path.write_bytes(b"\xee" * 200)
    out_mem = Memory.from_file(str(out_path), protect=PROT_READ | PROT_WRITE)
    expected = expected_add_mul(x, y)
    for mem, off_x, off_y in ((whole, len(junk), len(junk) + 48), (window, 0, 48)):
        ex = Execution(add_mul)
        ex.set_input_from_memory(0, mem, off_x, 48)
        ex.set_input_from_memory(1, mem, off_y, 48)
        ex.set_output_from_memory(0, out_mem, 20, 48)
        ex.compute()
        data = out_path.read_bytes()  # what the file itself now holds
        assert data[:20] == b"\xee" * 20 and data[68:] == b"\xee" * 132
        np.testing.assert_allclose(np.frombuffer(data[20:68], np.float32).reshape(3, 4), expected, rtol=1e-6)
        out_path.write_bytes(b"\xee" * 200)


def test_memory_regions_are_bounds_checked(add_mul, tmp_path):
    mem = Memory.create_shared(96)
    ex = Execution(add_mul)
    cases = [lambda: ex.set_input_from_memory(0, mem, 60, 48),     # runs past the end
             lambda: ex.set_input_from_memory(0, mem, 0, 44),      # wrong length for 3x4 float32
             lambda: ex.set_input_from_memory(0, mem, -4, 48),
             lambda: ex.set_output_from_memory(0, mem, 50, 48),
             lambda: ex.set_output_from_memory(0, mem, 0, 40),     # too small for a fully specified output
             lambda: ex.set_input_from_memory(0, "not memory", 0, 48)]
    for case in cases:
        with pytest.raises(MltsError) as e:
            case()
        assert e.value.code == ResultCode.BAD_DATA
    path = tmp_path / "ro.bin"
    path.write_bytes(bytes(96))
    ro = Memory.from_file(str(path), protect=PROT_READ)
    with pytest.raises(MltsError) as e:
        ex.set_output_from_memory(0, ro, 0, 48)
    assert e.value.code == ResultCode.BAD_DATA
    freed = Memory.create_shared(48)
    freed.free()
    with pytest.raises(MltsError) as e:
        ex.set_input_from_memory(0, freed, 0, 48)
    assert e.value.code == ResultCode.BAD_DATA


def test_omitted_required_input_is_an_mlts_error(register):
    """ADD/SUB/MUL/DIV have no optional operands: omitting one is refused cleanly, and the omission does
    reach the driver as has_no_value (no fake zero-filled buffer)."""
    rec = FakeDriver("recorder", 0.5, 0.5)
    (d,) = register(rec)
    for comp in (compiled(chain_model([ADD])), compiled(chain_model([ADD]), [d])):
        ex = Execution(comp)
        ex.set_input(0, rand())
        ex.set_input(1, None)
        ex.set_output(0, np.empty((3, 4), np.float32))
        with pytest.raises(MltsError) as e:
            ex.compute()
        assert e.value.code in (ResultCode.BAD_DATA, ResultCode.OP_FAILED)
    assert rec.requests and all(r["no_value"] == (False, True) for r in rec.requests)
    # an omitted (NO_VALUE) fused-activation operand in the model is refused at finish
    m = Model()
    t = OperandType(F32, (2,))
    a, b, act, o = m.add_operand(t), m.add_operand(t), m.add_operand(OperandType(OperandCode.INT32)), m.add_operand(t)
    m.set_operand_value(act, None)
    with pytest.raises(MltsError) as e:
        m.add_operation(ADD, [a, b, act], [o])
        m.identify_inputs_and_outputs([a, b], [o])
        m.finish()
    assert e.value.code == ResultCode.BAD_DATA


# -- compute flavours --------------------------------------------------------------------------------
def test_start_compute_event_waited_from_another_thread(add_mul):
    x, y = rand(seed=7), rand(seed=8)
    ex = Execution(add_mul)
    ex.set_input(0, x)
    ex.set_input(1, y)
    out = np.full((3, 4), np.nan, np.float32)
    ex.set_output(0, out)
    event = ex.start_compute()
    assert isinstance(event, Event)
    seen = {}

    def waiter():
        try:
            event.wait(10)
            seen["ok"] = out.copy()
        except BaseException as e:  # noqa: BLE001 - reported to the main thread
            seen["error"] = e

    t = threading.Thread(target=waiter)
    t.start()
    t.join(10)
    assert "error" not in seen and event.is_signalled
    np.testing.assert_allclose(seen["ok"], expected_add_mul(x, y), rtol=1e-6)
    event.wait()  # a second wait returns at once


def test_start_compute_failure_is_raised_by_wait(register):
    bad = FailingExecutionDriver("bad", mode="status")
    (d,) = register(bad)
    comp = compiled(chain_model([ADD]), [d])
    ex = Execution(comp)
    ex.set_input(0, rand())
    ex.set_input(1, rand())
    ex.set_output(0, np.empty((3, 4), np.float32))
    event = ex.start_compute()
    errors = []
    t = threading.Thread(target=lambda: errors.append(pytest.raises(MltsError, event.wait, 10).value))
    t.start()
    t.join(10)
    assert len(errors) == 1 and errors[0].code == ResultCode.OP_FAILED


def test_event_wait_timeout():
    e = Event()
    with pytest.raises(MltsError) as err:
        e.wait(0.01)
    assert err.value.code == ResultCode.MISSED_DEADLINE_TRANSIENT


def test_burst_several_runs(register):
    rec = FakeDriver("burster", 0.5, 0.5)
    (d,) = register(rec)
    ops = [ADD, MUL, SUB]
    comp = compiled(chain_model(ops), [d])
    burst = Burst(comp)
    for k in range(5):
        x, y = rand(seed=100 + k), rand(seed=200 + k)
        ex = Execution(comp)
        ex.set_input(0, x)
        ex.set_input(1, y)
        out = np.empty((3, 4), np.float32)
        ex.set_output(0, out)
        ex.burst_compute(burst)
        np.testing.assert_allclose(out, chain_expected(ops, x, y), rtol=1e-6)
    assert len(rec.executed_steps) == 5
    assert rec.bursts_configured == 1  # resources configured once for the whole sequence
    burst.close()
    ex = Execution(comp)
    ex.set_input(0, rand())
    ex.set_input(1, rand())
    ex.set_output(0, np.empty((3, 4), np.float32))
    with pytest.raises(MltsError) as e:
        ex.burst_compute(burst)  # closed
    assert e.value.code == ResultCode.BAD_DATA
    other = Burst(compiled(chain_model(ops)))
    with pytest.raises(MltsError) as e:
        ex.burst_compute(other)  # another compilation's burst
    assert e.value.code == ResultCode.BAD_DATA


def test_start_compute_with_dependencies_waits(register):
    slow = FakeDriver("slow", 0.5, 0.5, delay_s=0.2)
    (d,) = register(slow)
    x, y = rand(seed=9), rand(seed=10)
    first = compiled(chain_model([ADD]), [d])                  # s = x + y, slowly
    second = compiled(chain_model([MUL]), [get_device(REF)])   # s * y
    s = np.full((3, 4), np.nan, np.float32)
    ex1 = Execution(first)
    ex1.set_input(0, x)
    ex1.set_input(1, y)
    ex1.set_output(0, s)
    ev1 = ex1.start_compute()
    ex2 = Execution(second)
    ex2.set_input(0, s)  # bound, not copied: read when the execution runs
    ex2.set_input(1, y)
    out = np.full((3, 4), np.nan, np.float32)
    ex2.set_output(0, out)
    ev2 = ex2.start_compute_with_dependencies([ev1])
    if not ev1.is_signalled:
        assert not ev2.is_signalled
    ev2.wait(10)
    assert ev1.is_signalled
    np.testing.assert_allclose(out, (x + y) * y, rtol=1e-6)


def test_start_compute_with_dependencies_failed_dependency(register):
    bad = FailingExecutionDriver("bad", mode="exception")
    (d,) = register(bad)
    ex1 = Execution(compiled(chain_model([ADD]), [d]))
    ex1.set_input(0, rand())
    ex1.set_input(1, rand())
    ex1.set_output(0, np.empty((3, 4), np.float32))
    ev1 = ex1.start_compute()
    rec = FakeDriver("never-reached", 0.5, 0.5)
    (d2,) = register(rec)
    ex2 = Execution(compiled(chain_model([MUL]), [d2]))
    ex2.set_input(0, rand())
    ex2.set_input(1, rand())
    ex2.set_output(0, np.empty((3, 4), np.float32))
    ev2 = ex2.start_compute_with_dependencies([ev1])
    with pytest.raises(MltsError):
        ev2.wait(10)
    assert rec.executed_steps == []  # the dependent execution never ran
    with pytest.raises(MltsError) as e:
        ex2.start_compute_with_dependencies([ev1], timeout_ns=-1)
    assert e.value.code in (ResultCode.BAD_DATA, ResultCode.BAD_STATE)


def test_dependencies_timeout_needs_single_device(add_mul):
    ex = Execution(add_mul)
    ex.set_input(0, rand())
    ex.set_input(1, rand())
    ex.set_output(0, np.empty((3, 4), np.float32))
    with pytest.raises(MltsError) as e:
        ex.start_compute_with_dependencies([], timeout_ns=10**9)
    assert e.value.code == ResultCode.BAD_DATA


# -- timing ----------------------------------------------------------------------------------------------
def timed_execution(comp, x, y, measure=True):
    ex = Execution(comp)
    if measure is not None:
        ex.set_measure_timing(measure)
    ex.set_input(0, x)
    ex.set_input(1, y)
    ex.set_output(0, np.empty(x.shape, np.float32))
    return ex


def test_timing_on_single_device():
    ops = [ADD, MUL] * 10
    comp = ref_only(chain_model(ops, shape=(128, 128)))
    x, y = rand((128, 128), seed=1), rand((128, 128), seed=2)
    ex = timed_execution(comp, x, y)
    t0 = time.perf_counter_ns()
    ex.compute()
    wall = time.perf_counter_ns() - t0
    on_hw = ex.get_duration(DurationCode.ON_HARDWARE)
    in_driver = ex.get_duration(DurationCode.IN_DRIVER)
    assert 0 < on_hw <= in_driver < UINT64_MAX
    assert in_driver <= wall + 1000  # microsecond rounding
    # not launched with dependencies: the fenced durations are the same as the plain ones (NNAPI)
    assert ex.get_duration(DurationCode.FENCED_ON_HARDWARE) == on_hw
    assert ex.get_duration(DurationCode.FENCED_IN_DRIVER) == in_driver


def test_timing_not_measured_is_uint64_max():
    comp = ref_only(chain_model([ADD]))
    for measure in (None, False):
        ex = timed_execution(comp, rand(), rand(), measure)
        ex.compute()
        for code in DurationCode:
            assert ex.get_duration(code) == UINT64_MAX == NO_TIMING


def test_timing_of_fenced_execution():
    comp = ref_only(chain_model([ADD, MUL] * 5, shape=(64, 64)))
    x, y = rand((64, 64), seed=1), rand((64, 64), seed=2)
    ex = timed_execution(comp, x, y)
    ex.start_compute_with_dependencies([]).wait(10)
    on_hw, in_driver = ex.get_duration(DurationCode.ON_HARDWARE), ex.get_duration(DurationCode.IN_DRIVER)
    f_hw, f_driver = ex.get_duration(DurationCode.FENCED_ON_HARDWARE), ex.get_duration(DurationCode.FENCED_IN_DRIVER)
    assert on_hw <= in_driver < UINT64_MAX
    assert f_hw <= f_driver < UINT64_MAX


def test_timing_rules():
    comp = ref_only(chain_model([ADD]))
    ex = timed_execution(comp, rand(), rand())
    with pytest.raises(MltsError) as e:
        ex.get_duration(DurationCode.ON_HARDWARE)  # not computed yet
    assert e.value.code == ResultCode.BAD_STATE
    ex.compute()
    with pytest.raises(MltsError) as e:
        ex.get_duration(99)
    assert e.value.code == ResultCode.BAD_DATA
    all_devices = compiled(chain_model([ADD]))
    with pytest.raises(MltsError) as e:
        Execution(all_devices).set_measure_timing(True)  # only for a single explicit device
    assert e.value.code == ResultCode.BAD_DATA


# -- dynamic output shapes -----------------------------------------------------------------------------
@pytest.mark.parametrize("out_dims", [(0, 0), (3, 0), None], ids=["dims-unknown", "one-dim-unknown", "rank-unknown"])
def test_dynamic_output_shape(out_dims):
    ops = [ADD, MUL]
    comp = compiled(dynamic_chain_model(ops, shape=(3, 4), out_dims=out_dims))
    x, y = rand(seed=1), rand(seed=2)
    ex = Execution(comp)
    ex.set_input(0, x)
    ex.set_input(1, y)
    out = np.full(20, np.nan, np.float32)  # flat and larger than needed
    ex.set_output(0, out)
    ex.compute()
    assert ex.get_output_operand_rank(0) == 2
    assert ex.get_output_operand_dimensions(0) == (3, 4)
    np.testing.assert_allclose(out[:12].reshape(3, 4), chain_expected(ops, x, y), rtol=1e-6)
    assert np.isnan(out[12:]).all()
    np.testing.assert_allclose(ex.get_output(0), chain_expected(ops, x, y), rtol=1e-6)


def test_dynamic_batch_from_unknown_input_dims():
    comp = compiled(dynamic_chain_model([SUB, DIV], shape=(0, 4), out_dims=(0, 4)))
    for batch in (2, 5):
        x, y = rand((batch, 4), seed=batch), rand((batch, 4), seed=batch + 1)
        ex = Execution(comp)
        ex.set_input(0, x)
        ex.set_input(1, y)
        out = np.empty((batch, 4), np.float32)
        ex.set_output(0, out)
        ex.compute()
        assert ex.get_output_operand_dimensions(0) == (batch, 4)
        np.testing.assert_allclose(out, (x - y) / y, rtol=1e-6)


def test_unknown_input_dims_from_memory_with_type():
    comp = compiled(dynamic_chain_model([ADD], shape=(0, 4), out_dims=(0, 4)))
    x, y = rand((2, 4), seed=1), rand((2, 4), seed=2)
    mem = Memory.create_shared(64)
    mem.array(0, np.float32, (2, 4))[...] = x
    mem.array(32, np.float32, (2, 4))[...] = y
    t = OperandType(F32, (2, 4))
    ex = Execution(comp)
    ex.set_input_from_memory(0, mem, 0, 32, t)
    ex.set_input_from_memory(1, mem, 32, 32, t)
    out = np.empty((2, 4), np.float32)
    ex.set_output(0, out)
    ex.compute()
    np.testing.assert_allclose(out, x + y, rtol=1e-6)
    with pytest.raises(MltsError) as e:  # a type may only refine the model's dimensions
        Execution(comp).set_input_from_memory(0, mem, 0, 32, OperandType(F32, (2, 5)))
    assert e.value.code == ResultCode.BAD_DATA


@pytest.mark.parametrize("out_dims", [(0, 0), None], ids=["dims-unknown", "rank-unknown"])
@pytest.mark.parametrize("where", ["array", "memory"])
def test_output_insufficient_size_reports_shapes(out_dims, where):
    comp = compiled(dynamic_chain_model([ADD, MUL], shape=(3, 4), out_dims=out_dims))
    x, y = rand(seed=1), rand(seed=2)
    ex = Execution(comp)
    ex.set_input(0, x)
    ex.set_input(1, y)
    if where == "array":
        ex.set_output(0, np.empty(5, np.float32))
    else:
        ex.set_output_from_memory(0, Memory.create_shared(64), 0, 20)
    with pytest.raises(MltsError) as e:
        ex.compute()
    assert e.value.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE
    assert ex.get_output_operand_rank(0) == 2
    assert ex.get_output_operand_dimensions(0) == (3, 4)
    # the application grows its buffer to the reported size and tries again
    ex2 = Execution(comp)
    ex2.set_input(0, x)
    ex2.set_input(1, y)
    out = np.empty(int(np.prod(ex.get_output_operand_dimensions(0))), np.float32)
    ex2.set_output(0, out)
    ex2.compute()
    np.testing.assert_allclose(out.reshape(3, 4), (x + y) * y, rtol=1e-6)


def test_output_insufficient_size_with_two_outputs():
    """Only the too-small output is insufficient; both shapes are reported."""
    t = OperandType(F32, (2, 3))
    m = Model()
    x, y = m.add_operand(t), m.add_operand(t)
    act = m.add_operand(OperandType(OperandCode.INT32))
    m.set_operand_value(act, np.int32(FuseCode.NONE))
    o1, o2 = m.add_operand(OperandType(F32, (0, 0))), m.add_operand(OperandType(F32, (0, 3)))
    m.add_operation(ADD, [x, y, act], [o1])
    m.add_operation(SUB, [x, y, act], [o2])
    m.identify_inputs_and_outputs([x, y], [o1, o2])
    m.finish()
    comp = compiled(m)
    ex = Execution(comp)
    ex.set_input(0, rand((2, 3)))
    ex.set_input(1, rand((2, 3)))
    ex.set_output(0, np.empty(6, np.float32))
    ex.set_output(1, np.empty(2, np.float32))
    with pytest.raises(MltsError) as e:
        ex.compute()
    assert e.value.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE
    assert ex.get_output_operand_dimensions(0) == (2, 3)
    assert ex.get_output_operand_dimensions(1) == (2, 3)


def test_too_small_buffer_for_fully_specified_output_is_bad_data(add_mul):
    ex = Execution(add_mul)
    with pytest.raises(MltsError) as e:
        ex.set_output(0, np.empty(11, np.float32))
    assert e.value.code == ResultCode.BAD_DATA


def test_output_dimensions_need_a_completed_execution(add_mul):
    ex = Execution(add_mul)
    with pytest.raises(MltsError) as e:
        ex.get_output_operand_dimensions(0)
    assert e.value.code == ResultCode.BAD_STATE


# -- reuse, loop timeout, deadlines -------------------------------------------------------------------
def test_reusable_execution(add_mul):
    x, y = rand(seed=1), rand(seed=2)
    ex = Execution(add_mul)
    ex.set_reusable(True)
    ex.set_input(0, x)
    ex.set_input(1, y)
    out = np.empty((3, 4), np.float32)
    ex.set_output(0, out)
    for k in range(3):
        x[...] = k + 1  # bound arrays are read at each computation
        ex.compute()
        np.testing.assert_allclose(out, (k + 1 + y) * y, rtol=1e-6)
    y2 = rand(seed=3)
    ex.set_input(1, y2)  # rebinding between computations is allowed for a reusable execution
    ex.start_compute().wait(10)
    np.testing.assert_allclose(out, (3 + y2) * y2, rtol=1e-6)


def test_non_reusable_execution_runs_once(add_mul):
    ex = Execution(add_mul)
    ex.set_input(0, rand())
    ex.set_input(1, rand())
    ex.set_output(0, np.empty((3, 4), np.float32))
    ex.compute()
    for again in (ex.compute, ex.start_compute, lambda: ex.set_input(0, rand()), lambda: ex.set_reusable(True)):
        with pytest.raises(MltsError) as e:
            again()
        assert e.value.code == ResultCode.BAD_STATE


def test_running_execution_cannot_start_again(register):
    slow = FakeDriver("slow", 0.5, 0.5, delay_s=0.3)
    (d,) = register(slow)
    comp = compiled(chain_model([ADD]), [d])
    ex = Execution(comp)
    ex.set_reusable(True)
    ex.set_input(0, rand())
    ex.set_input(1, rand())
    ex.set_output(0, np.empty((3, 4), np.float32))
    ev = ex.start_compute()
    with pytest.raises(MltsError) as e:
        ex.compute()
    assert e.value.code == ResultCode.BAD_STATE
    ev.wait(10)
    ex.compute()  # reusable and no longer running
    assert len(slow.executed_steps) == 2


def test_loop_timeout_reaches_the_driver_clamped(register):
    rec = FakeDriver("recorder", 0.5, 0.5)
    (d,) = register(rec)
    comp = compiled(chain_model([ADD]), [d])
    settings = [(None, DEFAULT_LOOP_TIMEOUT_NS), (5_000_000, 5_000_000), (0, 0),
                (20 * 10**9, MAXIMUM_LOOP_TIMEOUT_NS), (10**30, 15_000_000_000)]
    for value, expected in settings:
        ex = Execution(comp)
        if value is not None:
            ex.set_loop_timeout(value)
        ex.set_input(0, rand())
        ex.set_input(1, rand())
        ex.set_output(0, np.empty((3, 4), np.float32))
        ex.compute()
        assert rec.requests[-1]["loop_timeout_ns"] == expected
    for bad in (-1, 1.5, "1", True):
        with pytest.raises(MltsError) as e:
            Execution(comp).set_loop_timeout(bad)
        assert e.value.code == ResultCode.BAD_DATA


def test_execution_timeout_reaches_the_driver_as_a_deadline(register):
    rec = FakeDriver("recorder", 0.5, 0.5)
    (d,) = register(rec)
    comp = compiled(chain_model([ADD]), [d])
    ex = Execution(comp)
    ex.set_timeout(10**9)  # 1 s
    ex.set_input(0, rand())
    ex.set_input(1, rand())
    ex.set_output(0, np.empty((3, 4), np.float32))
    before = time.monotonic()
    ex.compute()
    after = time.monotonic()
    deadline = rec.requests[-1]["deadline"]
    assert before + 1.0 <= deadline + 1e-3 and deadline <= after + 1.0
    ex = Execution(comp)  # no timeout: no deadline
    ex.set_input(0, rand())
    ex.set_input(1, rand())
    ex.set_output(0, np.empty((3, 4), np.float32))
    ex.compute()
    assert rec.requests[-1]["deadline"] is None


def test_execution_timeout_needs_a_single_device(add_mul):
    with pytest.raises(MltsError) as e:
        Execution(add_mul).set_timeout(10**6)
    assert e.value.code == ResultCode.BAD_DATA


def test_tiny_deadline_on_a_long_chain_is_missed():
    n, shape = 200, (256, 256)
    comp = ref_only(chain_model([ADD] * n, shape=shape))
    x, y = rand(shape, seed=1, low=0, high=1), rand(shape, seed=2, low=0, high=1)

    def attempt(timeout_ns):
        ex = Execution(comp)
        if timeout_ns is not None:
            ex.set_timeout(timeout_ns)
        ex.set_input(0, x)
        ex.set_input(1, y)
        out = np.full(shape, np.nan, np.float32)
        ex.set_output(0, out)
        t0 = time.perf_counter()
        try:
            ex.compute()
            return None, time.perf_counter() - t0, out
        except MltsError as e:
            return e, time.perf_counter() - t0, out

    err, full, out = attempt(None)
    assert err is None
    np.testing.assert_allclose(out, x + n * y, rtol=1e-4)
    for timeout_ns in (1, 1_000_000):  # 1 ns: already passed when the driver starts; 1 ms: mid-chain
        err, elapsed, out = attempt(timeout_ns)
        assert err is not None, f"a {timeout_ns} ns deadline was not missed on a {full * 1e3:.1f} ms run"
        assert err.code in (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_PERSISTENT)
        assert elapsed < max(full * 0.6, 0.005)  # aborted, not run to the end
        assert np.isnan(out).all()  # a deadline never forces a result


def test_fenced_execution_timeout_is_missed():
    comp = ref_only(chain_model([ADD] * 50, shape=(128, 128)))
    ex = Execution(comp)
    ex.set_input(0, rand((128, 128)))
    ex.set_input(1, rand((128, 128)))
    ex.set_output(0, np.empty((128, 128), np.float32))
    event = ex.start_compute_with_dependencies([], timeout_ns=1)
    with pytest.raises(MltsError) as e:
        event.wait(10)
    assert e.value.code in (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_PERSISTENT)


# -- constants: copied or referenced ---------------------------------------------------------------------
@pytest.mark.parametrize("n, referenced", [(12, False), (32, False), (33, True), (300, True)])
def test_constants_small_copied_large_referenced_until_finish(n, referenced):
    """Values up to 128 bytes are copied at set_operand_value; larger ones are referenced, so changes
    made before finish() are what the model computes with."""
    t = OperandType(F32, (n,))
    m = Model()
    x = m.add_operand(t)
    c = m.add_operand(t)
    act = m.add_operand(OperandType(OperandCode.INT32))
    out = m.add_operand(t)
    value = np.arange(n, dtype=np.float32)
    m.set_operand_value(c, value)
    m.set_operand_value(act, np.int32(FuseCode.NONE))
    m.add_operation(ADD, [x, c, act], [out])
    m.identify_inputs_and_outputs([x], [out])
    value[:] = 1000  # after set_operand_value, before finish
    m.finish()
    xv = np.ones(n, np.float32)
    result = run(compiled(m), xv)
    if referenced:
        np.testing.assert_array_equal(result, np.full(n, 1001, np.float32))
    else:
        np.testing.assert_array_equal(result, 1 + np.arange(n, dtype=np.float32))


# -- verbose logging -------------------------------------------------------------------------------------
def vlog_records(caplog, monkeypatch, setting, work):
    from mlts.runtime import devices

    devices()  # device discovery (tag "manager") happens once per process: keep it out of the comparison
    monkeypatch.setenv("MLTS_VLOG", setting)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        work()
    return {r.name for r in caplog.records if r.name.startswith("mlts.") and r.name != "mlts.ExecutionPlan"}


def _vlog_work():
    comp = compiled(chain_model([ADD, MUL]))
    run(comp, rand(), rand())


@pytest.mark.parametrize("setting, expected", [
    ("", set()),
    ("all", {"mlts.model", "mlts.compilation", "mlts.driver", "mlts.cpuexe"}),
    ("1", {"mlts.model", "mlts.compilation", "mlts.driver", "mlts.cpuexe"}),
    ("compilation", {"mlts.compilation"}),
    ("model,cpuexe", {"mlts.model", "mlts.cpuexe"}),
    ("model:driver", {"mlts.model", "mlts.driver"}),
    ("Compilation  driver", {"mlts.compilation", "mlts.driver"}),
    ("nonsense", set()),
])
def test_mlts_vlog_tags(caplog, monkeypatch, setting, expected):
    assert vlog_records(caplog, monkeypatch, setting, _vlog_work) == expected


def test_mlts_vlog_execution_tag_logs_fallback(register, caplog, monkeypatch):
    bad = FailingExecutionDriver("bad", mode="status")
    register(bad)
    names = vlog_records(caplog, monkeypatch, "execution", _vlog_work)
    assert names == {"mlts.execution"}
    msgs = [r.getMessage() for r in caplog.records if r.name == "mlts.execution"]
    assert any("whole model falls back to nnapi-reference" in m for m in msgs)


def test_mlts_vlog_cpuexe_names_operations(caplog, monkeypatch):
    def work_on_the_cpu_executor():  # nnapi-reference explicitly: other devices log no cpuexe lines
        run(ref_only(chain_model([ADD, MUL])), rand(), rand())

    vlog_records(caplog, monkeypatch, "cpuexe", work_on_the_cpu_executor)
    msgs = [r.getMessage() for r in caplog.records if r.name == "mlts.cpuexe"]
    assert any("ADD" in m for m in msgs) and any("MUL" in m for m in msgs)


# -- graph dump -------------------------------------------------------------------------------------------
_NODE = re.compile(r'^\s*(\w+)\s*\[(.*)\];$')
_EDGE = re.compile(r'^\s*(\w+)\s*->\s*(\w+)\s*(\[.*\])?;$')


def parse_dot(text: str):
    """A small parser for the dot subset graph_dump writes: returns (name, nodes{id: attrs}, edges[(a, b)])."""
    lines = text.strip().splitlines()
    head = re.match(r'^digraph\s+"((?:[^"\\]|\\.)*)"\s*\{$', lines[0])
    assert head, lines[0]
    assert lines[-1] == "}"
    nodes, edges = {}, []
    for line in lines[1:-1]:
        assert (line.count('"') - line.count('\\"')) % 2 == 0, f"unbalanced quotes: {line}"
        if m := _EDGE.match(line):
            edges.append((m.group(1), m.group(2)))
        elif m := _NODE.match(line):
            if m.group(1) not in ("node", "edge", "graph"):
                attrs = dict(re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|[^,\s]+)', m.group(2)))
                nodes[m.group(1)] = {k: v.strip('"') for k, v in attrs.items()}
        elif re.match(r"^\s*\w+=\w+;$", line):
            continue
        else:
            raise AssertionError(f"unparseable dot line: {line!r}")
    return head.group(1), nodes, edges


def test_graph_dump_is_valid_dot_of_the_model():
    m = chain_model([ADD, MUL, SUB])  # operands: 0 x, 1 y, 2 act, 3 t0, 4 t1, 5 out
    text = graph_dump(m, name='my "model"')
    name, nodes, edges = parse_dot(text)
    assert name == 'my \\"model\\"'
    operand_nodes = {k for k in nodes if k.startswith("d")}
    op_nodes = {k for k in nodes if k.startswith("op")}
    assert operand_nodes == {f"d{i}" for i in range(6)}
    assert op_nodes == {"op0", "op1", "op2"}
    assert [nodes[f"op{j}"]["label"] for j in range(3)] == ["ADD", "MUL", "SUB"]
    assert all(nodes[f"op{j}"]["shape"] == "ellipse" for j in range(3))
    assert all(nodes[d]["shape"] == "box" for d in operand_nodes)
    assert nodes["d2"]["label"].startswith("2: INT32") and "CONSTANT_COPY" in nodes["d2"]["label"]
    assert nodes["d0"]["label"].startswith("0: TENSOR_FLOAT32 [3,4]") and "SUBGRAPH_INPUT" in nodes["d0"]["label"]
    assert "SUBGRAPH_OUTPUT" in nodes["d5"]["label"]
    expected_edges = {("d0", "op0"), ("d1", "op0"), ("d2", "op0"), ("op0", "d3"),
                      ("d3", "op1"), ("d1", "op1"), ("d2", "op1"), ("op1", "d4"),
                      ("d4", "op2"), ("d1", "op2"), ("d2", "op2"), ("op2", "d5")}
    assert set(edges) == expected_edges and len(edges) == len(expected_edges)
    for a, b in edges:
        assert a in nodes and b in nodes


def test_graph_dump_with_devices():
    m = chain_model([ADD, DIV])
    comp = ref_only(m)
    text = graph_dump(m, devices_per_operation=comp.plan.device_of_operation())
    _, nodes, _ = parse_dot(text)
    assert nodes["op0"]["label"] == "ADD\\n@ nnapi-reference"
    assert nodes["op1"]["label"] == "DIV\\n@ nnapi-reference"


def test_internal_failure_still_signals_the_event(add_mul, monkeypatch):
    """Whatever goes wrong inside a run, an async execution's Event is signalled with an MltsError
    (a waiter must never hang) and compute() raises MltsError."""
    import mlts.runtime.app.step_runner as step_runner

    def broken_run(self):
        raise KeyError("simulated runtime bug")

    monkeypatch.setattr(step_runner.StepRunner, "run", broken_run)
    for start in ("compute", "start_compute", "fenced"):
        ex = Execution(add_mul)
        ex.set_input(0, rand())
        ex.set_input(1, rand())
        ex.set_output(0, np.empty((3, 4), np.float32))
        with pytest.raises(MltsError) as e:
            if start == "compute":
                ex.compute()
            elif start == "start_compute":
                ex.start_compute().wait(5)
            else:
                ex.start_compute_with_dependencies([]).wait(5)
        assert e.value.code == ResultCode.OP_FAILED and "KeyError" in e.value.message
