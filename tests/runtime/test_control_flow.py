"""Control flow (IF, WHILE) through the public API: branches and loops with hand-computed results,
shapes that change inside a loop, the loop timeout, signature validation, the partitioning rule
(a device takes IF/WHILE only with everything they reference), and a sample driver hosted as a
service, which receives the referenced subgraphs and their constants across the process boundary.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np
import pytest

from mlts.runtime import (Compilation, Execution, MltsError, Model, OperandCode, OperandType, OperationCode,
                          ResultCode, get_device)
from mlts.runtime.drivers.faulty import create as create_faulty
from mlts.runtime.enums import MAXIMUM_LOOP_TIMEOUT_NS
from mlts.runtime.drivers.sample import sample_drivers
from mlts.runtime.service import ServiceDriver
from mlts.stress.conformance.models import Builder
from service_test_drivers import kernel_driver

IF, WHILE = OperationCode.IF, OperationCode.WHILE
ADD, SUB, MUL = OperationCode.ADD, OperationCode.SUB, OperationCode.MUL
LESS, LESS_EQUAL, GREATER_EQUAL = OperationCode.LESS, OperationCode.LESS_EQUAL, OperationCode.GREATER_EQUAL
I32 = OperandType(OperandCode.TENSOR_INT32, (1,))  # a loop counter
BOOL1 = OperandType(OperandCode.TENSOR_BOOL8, (1,))  # a condition
MODEL = OperandType(OperandCode.MODEL)
INT = OperandType(OperandCode.INT32)
SAMPLE_FACTORY = "mlts.runtime.drivers.sample:sample_drivers"
SERVICE_START_TIMEOUT_S = 300.0  # generous: a busy CI machine can be slow to start a Python child


def f32(*dims: int) -> OperandType:
    return OperandType(OperandCode.TENSOR_FLOAT32, dims)


def i32(*values: int) -> np.ndarray:
    return np.array(values, np.int32)


# -- models ---------------------------------------------------------------------------------------
def binary(code: OperationCode, t: OperandType = f32(3)) -> Model:
    """(a, b) -> code(a, b): an IF branch."""
    b = Builder()
    x, y = b.operand(t), b.operand(t)
    return b.finish([x, y], [b.arith(code, x, y, t)])


def if_model(then: Model, else_: Model, t: OperandType = f32(3), out: OperandType | None = None) -> Model:
    """(cond, x, y) -> IF(cond, then, else, x, y)."""
    b = Builder()
    cond, x, y = b.operand(BOOL1), b.operand(t), b.operand(t)
    return b.finish([cond, x, y], [b.op(IF, [cond, b.ref(then), b.ref(else_), x, y], out or t)])


def sum_condition() -> Model:
    """(sum, i, n) -> i <= n."""
    b = Builder()
    s, i, n = b.operand(I32), b.operand(I32), b.operand(I32)
    return b.finish([s, i, n], [b.op(LESS_EQUAL, [i, n], BOOL1)])


def sum_body(update: Callable[[Builder, int, int], int] | None = None) -> Model:
    """(sum, i, n) -> (sum + i, i + 1); with `update`, sum' = update(builder, sum, i) instead."""
    b = Builder()
    s, i, n = b.operand(I32), b.operand(I32), b.operand(I32)
    s2 = b.arith(ADD, s, i, I32) if update is None else update(b, s, i)
    i2 = b.arith(ADD, i, b.operand(I32, i32(1)), I32)
    return b.finish([s, i, n], [s2, i2])


def sum_loop(body: Model | None = None, square_first: bool = False) -> Model:
    """n -> sum of i for i = 1..n (m=1 input-output `sum`, k=1 state-only `i`, n=1 input-only `n`);
    `square_first`: n*n first (an INT32 MUL outside the loop, for partitioning)."""
    b = Builder()
    n = b.operand(I32)
    limit = b.arith(MUL, n, n, I32) if square_first else n
    s0, i0 = b.operand(I32, i32(0)), b.operand(I32, i32(1))
    out = b.op(WHILE, [b.ref(sum_condition()), b.ref(body or sum_body()), s0, i0, limit], I32)
    return b.finish([n], [out])


def signed_sum_body(threshold: int) -> Model:
    """sum' = IF(i < threshold, sum + i, sum - i): an IF nested in a WHILE body."""
    def update(b: Builder, s: int, i: int) -> int:
        cond = b.op(LESS, [i, b.operand(I32, i32(threshold))], BOOL1)
        return b.op(IF, [cond, b.ref(binary(ADD, I32)), b.ref(binary(SUB, I32)), s, i], I32)
    return sum_body(update)


def counter_condition(t: OperandType, limit: int) -> Model:
    """(x, i) -> i < limit."""
    b = Builder()
    x, i = b.operand(t), b.operand(I32)
    return b.finish([x, i], [b.op(LESS, [i, b.operand(I32, i32(limit))], BOOL1)])


def growing_body() -> Model:
    """(x, i) -> (concat(x, x), i + 1): the loop-carried tensor doubles every iteration."""
    b = Builder()
    x, i = b.operand(f32(0)), b.operand(I32)
    grown = b.op(OperationCode.CONCATENATION, [x, x, b.operand(INT, np.int32(0))], f32(0))
    return b.finish([x, i], [grown, b.arith(ADD, i, b.operand(I32, i32(1)), I32)])


def growing_loop(times: int) -> Model:
    b = Builder()
    x = b.operand(f32(2))
    out = b.op(WHILE, [b.ref(counter_condition(f32(0), times)), b.ref(growing_body()), x, b.operand(I32, i32(0))],
               f32(0))
    return b.finish([x], [out])


def shifted_body(constant: np.ndarray) -> Model:
    """(x, i) -> (x + c, i + 1), with c large enough to live in a shared-memory pool."""
    b = Builder()
    t = f32(len(constant))
    x, i = b.operand(t), b.operand(I32)
    return b.finish([x, i], [b.arith(ADD, x, b.operand(t, constant), t),
                             b.arith(ADD, i, b.operand(I32, i32(1)), I32)])


def squared_then_shifted(constant: np.ndarray, times: int) -> Model:
    """x -> x*x (MUL), then `times` times + c in a WHILE."""
    b = Builder()
    t = f32(len(constant))
    x = b.operand(t)
    sq = b.arith(MUL, x, x, t)
    out = b.op(WHILE, [b.ref(counter_condition(t, times)), b.ref(shifted_body(constant)), sq,
                       b.operand(I32, i32(0))], t)
    return b.finish([x], [out])


def endless_loop() -> Model:
    """i -> WHILE(i >= 0) i = i + 1: never ends within any loop timeout used here."""
    cond = Builder()
    i = cond.operand(I32)
    cond_model = cond.finish([i], [cond.op(GREATER_EQUAL, [i, cond.operand(I32, i32(0))], BOOL1)])
    body = Builder()
    j = body.operand(I32)
    body_model = body.finish([j], [body.arith(ADD, j, body.operand(I32, i32(1)), I32)])
    b = Builder()
    start = b.operand(I32)
    return b.finish([start], [b.op(WHILE, [b.ref(cond_model), b.ref(body_model), start], I32)])


# -- running --------------------------------------------------------------------------------------
def compiled(model: Model, devices=None) -> Compilation:
    c = Compilation(model) if devices is None else Compilation.for_devices(model, devices)
    c.finish()
    return c


def run(comp: Compilation, *inputs: np.ndarray, loop_timeout_ns: int | None = MAXIMUM_LOOP_TIMEOUT_NS) -> Execution:
    """One execution; loops that must finish get the longest loop timeout, so that a loaded machine
    cannot turn a right answer into MISSED_DEADLINE (the timeout tests set their own)."""
    ex = Execution(comp)
    for k, x in enumerate(inputs):
        ex.set_input(k, x)
    if loop_timeout_ns is not None:
        ex.set_loop_timeout(loop_timeout_ns)
    ex.compute()
    return ex


def reference():
    return get_device("nnapi-reference")


@pytest.fixture(scope="module")
def hosted_sample():
    """sample-all (the AOSP-style sample driver taking every operation) in a driver service."""
    driver = ServiceDriver(SAMPLE_FACTORY, name="sample-all", start_timeout=SERVICE_START_TIMEOUT_S)
    yield driver
    driver.close()


@pytest.fixture(params=["nnapi-reference", "sample-all-service"])
def device(request, register):
    """Each behaviour on the CPU reference and on a sample driver hosted as a service."""
    if request.param == "nnapi-reference":
        return reference()
    (dev,) = register(request.getfixturevalue("hosted_sample"))
    assert dev.driver.hosting == "service"
    return dev


X, Y = np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)


# -- behaviour ------------------------------------------------------------------------------------
def test_if_takes_the_branch_its_condition_names(device):
    comp = compiled(if_model(binary(ADD), binary(MUL)), [device])
    assert run(comp, np.array([True]), X, Y).get_output(0).tolist() == [5, 7, 9]  # then: x + y
    assert run(comp, np.array([False]), X, Y).get_output(0).tolist() == [4, 10, 18]  # else: x * y


def test_while_sums_one_to_n_with_int32_counters(device):
    comp = compiled(sum_loop(), [device])
    for n, expected in ((10, 55), (1, 1), (0, 0), (30, 465)):  # n = 0: the body never runs
        ex = run(comp, i32(n))
        assert ex.get_output(0).tolist() == [expected]
        assert ex.get_output_operand_dimensions(0) == (1,)


def test_if_nested_in_a_while_body(device):
    comp = compiled(sum_loop(signed_sum_body(threshold=3)), [device])
    assert run(comp, i32(5)).get_output(0).tolist() == [1 + 2 - 3 - 4 - 5]


def test_loop_carried_tensor_may_grow(device):
    model = growing_loop(times=3)
    assert model.inferred_operand_type(model.outputs[0]).dimensions == (0,)  # 2 before the loop, 16 after
    ex = run(compiled(model, [device]), np.array([1, 2], np.float32))
    assert ex.get_output_operand_dimensions(0) == (16,)
    assert ex.get_output(0).tolist() == [1, 2] * 8
    # too small an output buffer: OUTPUT_INSUFFICIENT_SIZE, and the real shape is reported
    small = Execution(compiled(model, [device]))
    small.set_input(0, np.array([1, 2], np.float32))
    small.set_output(0, np.zeros(4, np.float32))
    with pytest.raises(MltsError) as e:
        small.compute()
    assert e.value.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE


def test_if_outputs_get_dynamic_dimensions_where_branches_differ():
    def pad_to(n: int) -> Model:  # (a, b) -> concat(a, b) or a + b: [4] against [2]
        b = Builder()
        x, y = b.operand(f32(2)), b.operand(f32(2))
        if n == 4:
            out = b.op(OperationCode.CONCATENATION, [x, y, b.operand(INT, np.int32(0))], f32(4))
        else:
            out = b.arith(ADD, x, y, f32(2))
        return b.finish([x, y], [out])

    model = if_model(pad_to(4), pad_to(2), t=f32(2), out=f32(0))
    assert model.inferred_operand_type(model.outputs[0]).dimensions == (0,)
    same = if_model(binary(ADD), binary(MUL), out=f32(0))
    assert same.inferred_operand_type(same.outputs[0]).dimensions == (3,)
    comp = compiled(model, [reference()])
    a, b = np.array([1, 2], np.float32), np.array([3, 4], np.float32)
    assert run(comp, np.array([True]), a, b).get_output(0).tolist() == [1, 2, 3, 4]
    assert run(comp, np.array([False]), a, b).get_output(0).tolist() == [4, 6]


def test_loop_timeout_aborts_an_endless_loop_with_missed_deadline(device):
    comp = compiled(endless_loop(), [device])
    with pytest.raises(MltsError) as e:
        run(comp, i32(0), loop_timeout_ns=30_000_000)
    assert e.value.code == ResultCode.MISSED_DEADLINE_TRANSIENT  # as AOSP's CpuExecutor
    assert "WHILE" in e.value.message and "loop timed out" in e.value.message
    assert "loop timeout 0.03 s" in e.value.message  # the execution's, not the default 2 s


def test_loop_timeout_does_not_fall_back_to_the_cpu(register):
    """A loop timeout is MISSED_DEADLINE: no CPU fallback re-runs the endless loop."""
    (dev,) = register(kernel_driver("cf-fast", 0.5))
    comp = compiled(endless_loop())
    assert [s.device.name for s in comp.plan.steps] == ["cf-fast"]
    with pytest.raises(MltsError) as e:
        run(comp, i32(0), loop_timeout_ns=30_000_000)
    assert e.value.code == ResultCode.MISSED_DEADLINE_TRANSIENT
    assert e.value.message.startswith("cf-fast:"), e.value.message  # a fallback would name nnapi-reference


@pytest.mark.slow
def test_default_loop_timeout_is_two_seconds():
    comp = compiled(endless_loop(), [reference()])
    started = time.monotonic()
    with pytest.raises(MltsError) as e:
        run(comp, i32(0), loop_timeout_ns=None)
    assert e.value.code == ResultCode.MISSED_DEADLINE_TRANSIENT
    assert "loop timeout 2 s" in e.value.message and time.monotonic() - started >= 2.0


def test_execution_deadline_is_honoured_inside_a_loop():
    comp = compiled(endless_loop(), [reference()])
    ex = Execution(comp)
    ex.set_input(0, i32(0))
    ex.set_loop_timeout(MAXIMUM_LOOP_TIMEOUT_NS)
    ex.set_timeout(50_000_000)
    with pytest.raises(MltsError) as e:
        ex.compute()
    assert e.value.code in (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_PERSISTENT)
    assert "loop timed out" not in e.value.message, e.value.message  # the deadline ended it


# -- validation -----------------------------------------------------------------------------------
def bad(call, *words: str, code: ResultCode = ResultCode.BAD_DATA) -> MltsError:
    with pytest.raises(MltsError) as e:
        call()
    assert e.value.code == code, e.value
    for w in words:
        assert w in e.value.message, e.value.message
    return e.value


def test_if_condition_must_be_bool8_of_shape_one():
    for cond_type in (I32, OperandType(OperandCode.TENSOR_BOOL8, (2,)), OperandType(OperandCode.BOOL)):
        b = Builder()
        cond, x, y = b.operand(cond_type), b.operand(f32(3)), b.operand(f32(3))
        then, else_, out = b.ref(binary(ADD)), b.ref(binary(MUL)), b.operand(f32(3))
        bad(lambda: b.m.add_operation(IF, [cond, then, else_, x, y], [out]), "operation 0 (IF)", "condition")


def test_branch_signatures_must_match_the_operation():
    cases = [
        (binary(ADD, I32), binary(ADD), "then model input 0"),  # input type
        (binary(ADD), binary(ADD, f32(4)), "else model input 0"),  # dimensions
        (binary(ADD), if_model(binary(ADD), binary(MUL)), "else model has 3 inputs"),  # input count
    ]
    for then, else_, words in cases:
        b = Builder()
        cond, x, y = b.operand(BOOL1), b.operand(f32(3)), b.operand(f32(3))
        t, e, out = b.ref(then), b.ref(else_), b.operand(f32(3))
        bad(lambda: b.m.add_operation(IF, [cond, t, e, x, y], [out]), "operation 0 (IF)", words)


def test_while_signatures_must_match():
    # the condition must return one TENSOR_BOOL8 [1]
    not_bool = Builder()
    s, i, n = (not_bool.operand(I32) for _ in range(3))
    cond_i32 = not_bool.finish([s, i, n], [not_bool.arith(ADD, i, n, I32)])
    # loop-carried state cannot change type: body output 0 is FLOAT32 where its input 0 is INT32
    retyped = Builder()
    s, i, n = (retyped.operand(I32) for _ in range(3))
    cast = retyped.op(OperationCode.CAST, [s], f32(1))
    body_retyped = retyped.finish([s, i, n], [cast, retyped.arith(ADD, i, n, I32)])
    for cond, body, words in ((cond_i32, sum_body(), "condition model's output must be TENSOR_BOOL8"),
                              (sum_condition(), body_retyped, "body model output 0")):
        b = Builder()
        s0, i0, n0, out = b.operand(I32), b.operand(I32), b.operand(I32), b.operand(I32)
        c, bd = b.ref(cond), b.ref(body)
        bad(lambda: b.m.add_operation(WHILE, [c, bd, s0, i0, n0], [out]), "operation 0 (WHILE)", words)
    # the body must have as many inputs as the WHILE passes
    b = Builder()
    s0, i0, out = b.operand(I32), b.operand(I32), b.operand(I32)
    c, bd = b.ref(sum_condition()), b.ref(sum_body())
    bad(lambda: b.m.add_operation(WHILE, [c, bd, s0, i0], [out]), "operation 0 (WHILE)", "passes it 2")


def test_referenced_models_must_be_finished_and_set():
    unfinished = Model()
    unfinished.add_operand(f32(3))
    b = Builder()
    ref = b.m.add_operand(MODEL)
    # NNAPI: setOperandValueFromModel with an unfinished model is BAD_STATE
    bad(lambda: b.m.set_operand_value_from_model(ref, unfinished), f"operand {ref}", "not finished",
        code=ResultCode.BAD_STATE)
    # a MODEL operand that never gets a model: finish names the IF
    b = Builder()
    cond, x, y = b.operand(BOOL1), b.operand(f32(3)), b.operand(f32(3))
    unset = b.m.add_operand(MODEL)
    out = b.op(IF, [cond, b.ref(binary(ADD)), unset, x, y], f32(3))
    b.m.identify_inputs_and_outputs([cond, x, y], [out])
    bad(b.m.finish, "operation 0 (IF)", "refers to no model")


def test_a_branch_set_after_add_operation_is_checked_at_finish():
    b = Builder()
    cond, x, y = b.operand(BOOL1), b.operand(f32(3)), b.operand(f32(3))
    then, late = b.ref(binary(ADD)), b.m.add_operand(MODEL)
    out = b.op(IF, [cond, then, late, x, y], f32(3))
    b.m.set_operand_value_from_model(late, binary(ADD, I32))
    b.m.identify_inputs_and_outputs([cond, x, y], [out])
    bad(b.m.finish, "operation 0 (IF)", "else model input 0", "TENSOR_INT32")


# -- partitioning ---------------------------------------------------------------------------------
def test_sample_minimal_does_not_take_a_while_sample_all_does(register):
    devs = {d.name: d for d in register(*sample_drivers())}
    model = sum_loop()
    assert model.get_supported_operations_for_devices([devs["sample-minimal"]]) == [False]
    assert model.get_supported_operations_for_devices([devs["sample-all"]]) == [True]
    bad(lambda: compiled(model, [devs["sample-minimal"]]), "WHILE")
    assert run(compiled(model, [devs["sample-all"]]), i32(4)).get_output(0).tolist() == [10]


def test_a_device_takes_control_flow_only_with_every_referenced_operation(register):
    lacks_sub, = register(kernel_driver("cf-no-sub", 0.5, [int(WHILE), int(IF), int(LESS_EQUAL), int(LESS),
                                                           int(ADD)]))
    plain, nested = sum_loop(), sum_loop(signed_sum_body(threshold=3))
    assert plain.get_supported_operations_for_devices([lacks_sub]) == [True]
    # the IF inside the body references a SUB branch: not the whole loop, so not the WHILE
    assert nested.get_supported_operations_for_devices([lacks_sub]) == [False]
    assert [s.device.name for s in compiled(plain).plan.steps] == ["cf-no-sub"]
    comp = compiled(nested)
    assert [s.device.name for s in comp.plan.steps] == ["nnapi-reference"]
    assert run(comp, i32(5)).get_output(0).tolist() == [-9]


def test_a_control_flow_step_carries_its_subgraphs_and_constants_across_the_service(register):
    """x*x on the CPU (the service lacks MUL), then a WHILE on the service whose body adds a constant
    big enough to live in a shared-memory pool; the MUL step carries no subgraphs."""
    service = ServiceDriver("service_test_drivers:kernel_driver", ("svc-cf", 0.5),
                            {"operations": [int(WHILE), int(LESS), int(ADD)]}, start_timeout=SERVICE_START_TIMEOUT_S)
    try:
        register(service)
        c = np.linspace(-1, 1, 64, dtype=np.float32)
        comp = compiled(squared_then_shifted(c, times=3))
        steps = comp.plan.steps
        assert [s.device.name for s in steps] == ["nnapi-reference", "svc-cf"]
        assert len(steps[0].model.referenced) == 0 and len(steps[1].model.referenced) == 2
        x = np.linspace(0, 2, 64, dtype=np.float32)
        np.testing.assert_allclose(run(comp, x).get_output(0), x * x + c + c + c, rtol=1e-6)
    finally:
        service.close()


def test_the_default_devices_leave_control_flow_to_drivers_that_can_run_it():
    """mlts-fast (the default optimized device) never claims IF/WHILE; the ADD before may be its."""
    b = Builder()
    cond, x, y = b.operand(BOOL1), b.operand(f32(3)), b.operand(f32(3))
    s = b.arith(ADD, x, y, f32(3))
    out = b.op(IF, [cond, b.ref(binary(ADD)), b.ref(binary(MUL)), s, y], f32(3))
    comp = compiled(b.finish([cond, x, y], [out]))
    assert comp.plan.device_of_operation()[1] == "nnapi-reference"
    assert run(comp, np.array([False]), X, Y).get_output(0).tolist() == [20, 35, 54]  # (x + y) * y


# -- the seeded fault -----------------------------------------------------------------------------
def test_wrong_branch_fault_is_caught_by_a_hand_computed_if(register):
    (dev,) = register(create_faulty("faulty:wrong-branch@control-flow"))
    model = if_model(binary(ADD), binary(MUL))
    assert model.get_supported_operations_for_devices([dev]) == [True]  # it claims control flow
    comp = compiled(model)
    assert [s.device.name for s in comp.plan.steps] == ["faulty-wrong-branch-control-flow"]
    assert run(comp, np.array([True]), X, Y).get_output(0).tolist() == [4, 10, 18]  # wrong: x * y
    # loops without IF stay right: only the branch choice is broken
    assert run(compiled(sum_loop(), [dev]), i32(10)).get_output(0).tolist() == [55]


# -- the driver boundary --------------------------------------------------------------------------
def test_drivers_refuse_malformed_control_flow_that_crosses_the_hal(hosted_sample):
    """A driver checks referenced subgraphs itself: a branch whose signature no longer matches, or a
    subgraph that references itself, is BAD_DATA, not a crash or an endless run."""
    hal = sum_loop(signed_sum_body(threshold=3)).hal_model()
    body_index = next(k for k, sg in enumerate(hal.referenced, start=1)
                      if any(op.type == IF for op in sg.operations))
    body = hal.referenced[body_index - 1]
    (if_op,) = [op for op in body.operations if op.type == IF]
    then_operand = body.operands[if_op.inputs[1]]
    looped = dataclasses.replace(then_operand, location=dataclasses.replace(then_operand.location, offset=body_index))
    cyclic_body = dataclasses.replace(body, operands=tuple(looped if k == if_op.inputs[1] else o
                                                           for k, o in enumerate(body.operands)))
    cyclic = dataclasses.replace(hal, referenced=tuple(cyclic_body if k == body_index else sg
                                                       for k, sg in enumerate(hal.referenced, start=1)))
    # a then branch of other types: swap in a FLOAT32 subgraph for the INT32 one
    float_branch = binary(ADD).hal_model().main
    then_index = then_operand.location.offset
    mismatched = dataclasses.replace(hal, referenced=tuple(float_branch if k == then_index else sg
                                                           for k, sg in enumerate(hal.referenced, start=1)))
    for driver in (reference().driver, hosted_sample):
        assert driver.get_supported_operations(hal) == [True]
        for model, words in ((cyclic, "references itself"), (mismatched, "then model input 0")):
            with pytest.raises(MltsError) as e:
                driver.get_supported_operations(model)
            assert e.value.code == ResultCode.BAD_DATA and words in e.value.message, e.value.message
