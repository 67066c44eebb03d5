"""Issue 12, runtime side: a freed Memory still used by a model, constants of the wrong dtype, and
boolean setters given non-booleans. Each is a clear MltsError naming what is at fault."""
from __future__ import annotations

import numpy as np
import pytest

from mlts.runtime import (Compilation, Execution, Memory, MltsError, Model, OperandCode, OperandType, OperationCode,
                          ResultCode, devices)

F32x2 = OperandType(OperandCode.TENSOR_FLOAT32, (2,))
I32 = OperandType(OperandCode.INT32)


def add_model(*, freed_before_finish: bool = False) -> tuple[Model, Memory]:
    """out = in + constant, the constant [1, 2] in a shared Memory (CONSTANT_REFERENCE, operand 1)."""
    m = Model()
    a, b, act, out = m.add_operand(F32x2), m.add_operand(F32x2), m.add_operand(I32), m.add_operand(F32x2)
    mem = Memory.create_shared(8)
    mem.array(0, np.float32, (2,))[:] = [1.0, 2.0]
    m.set_operand_value_from_memory(b, mem, 0, 8)
    m.set_operand_value(act, np.int32(0))
    m.add_operation(OperationCode.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a], [out])
    if freed_before_finish:
        mem.free()
    return m, mem


def reference_compilation(model: Model) -> Compilation:
    c = Compilation.for_devices(model, [d for d in devices() if d.name == "nnapi-reference"])
    c.finish()
    return c


# --- a Memory freed while a model still uses it ---------------------------------------------------

def test_memory_freed_before_finish_is_named_at_finish():
    m, mem = add_model(freed_before_finish=True)
    with pytest.raises(MltsError) as e:
        m.finish()
    assert e.value.code == ResultCode.BAD_DATA
    assert "operand 1" in e.value.message and mem.name in e.value.message and "freed" in e.value.message
    assert "no device supports" not in e.value.message


def test_memory_freed_after_finish_is_named_at_compilation():
    m, mem = add_model()
    m.finish()
    mem.free()
    with pytest.raises(MltsError) as e:
        Compilation(m).finish()
    assert e.value.code == ResultCode.BAD_STATE
    assert "operand 1" in e.value.message and mem.name in e.value.message


def test_memory_kept_valid_runs_and_adds_the_constant():
    m, mem = add_model()
    m.finish()
    ex = Execution(reference_compilation(m))
    ex.set_input(0, np.array([10.0, 20.0], np.float32))
    ex.compute()
    assert ex.get_output(0).tolist() == [11.0, 22.0]
    mem.free()  # after use: allowed


# --- constants: one dtype rule for set_operand_value and set_input -------------------------------------

def constant_model(t: OperandType) -> tuple[Model, int]:
    m = Model()
    return m, m.add_operand(t)


@pytest.mark.parametrize("t, value, given", [
    (F32x2, np.array([1.5, 2.5]), "float64"),                      # the float64 -> float32 cast of the issue
    (OperandType(OperandCode.TENSOR_INT32, (2,)), np.array([1, 2], np.int64), "int64"),
    (OperandType(OperandCode.TENSOR_QUANT8_ASYMM, (2,), 0.5, 0), np.array([1, 2], np.int32), "int32"),
    (OperandType(OperandCode.TENSOR_BOOL8, (2,)), np.array([1, 0], np.uint8), "uint8"),
    (OperandType(OperandCode.FLOAT32), np.float64(0.5), "float64"),
    (I32, np.int64(3), "int64"),
    (I32, np.float32(1.0), "float32"),
])
def test_numpy_values_of_another_dtype_are_refused(t, value, given):
    m, k = constant_model(t)
    with pytest.raises(MltsError) as e:
        m.set_operand_value(k, value)
    assert e.value.code == ResultCode.BAD_DATA
    msg = e.value.message
    assert f"operand {k}" in msg and given in msg and t.code.name in msg and str(t.dtype) in msg


@pytest.mark.parametrize("t, value, why", [
    (I32, 1.5, "float64"),            # a float for an int: would truncate
    (I32, True, "bool"),              # a bool is not an int operand's value
    (I32, 2**31, "out of range"),     # does not fit int32
    (OperandType(OperandCode.BOOL), 1, "int64"),
    (OperandType(OperandCode.FLOAT32), True, "bool"),
    (OperandType(OperandCode.FLOAT32), 1e300, "out of range"),  # float32 overflow: would become inf
    (OperandType(OperandCode.TENSOR_QUANT8_ASYMM, (2,), 0.5, 0), [1, 300], "out of range"),
    (I32, "3", "cannot be converted"),
])
def test_python_values_that_would_change_are_refused(t, value, why):
    m, k = constant_model(t)
    with pytest.raises(MltsError) as e:
        m.set_operand_value(k, value)
    assert e.value.code == ResultCode.BAD_DATA and f"operand {k}" in e.value.message and why in e.value.message


@pytest.mark.parametrize("t, value, stored", [
    (I32, np.int32(7), 7),
    (I32, 7, 7),
    (I32, -(2**31), -(2**31)),
    (OperandType(OperandCode.FLOAT32), 0.5, 0.5),
    (OperandType(OperandCode.FLOAT32), 3, 3.0),
    (OperandType(OperandCode.FLOAT32), np.float32(0.25), 0.25),
    (OperandType(OperandCode.FLOAT16), 1.5, 1.5),
    (OperandType(OperandCode.BOOL), True, True),
    (OperandType(OperandCode.BOOL), np.bool_(False), False),
])
def test_matching_and_exact_python_scalars_are_kept(t, value, stored):
    m, k = constant_model(t)
    m.set_operand_value(k, value)
    rec = m._operands[k]
    assert np.frombuffer(rec.value, dtype=t.dtype)[0] == stored


def test_float_list_for_float_tensor_is_kept_as_float32():
    m, k = constant_model(F32x2)
    m.set_operand_value(k, [0.1, 2])
    assert np.frombuffer(m._operands[k].value, np.float32).tolist() == [np.float32(0.1), 2.0]


def test_set_input_follows_the_same_rule():
    m, _ = add_model()
    m.finish()
    ex = Execution(reference_compilation(m))
    with pytest.raises(MltsError) as e:
        ex.set_input(0, np.ones(2))  # float64
    assert e.value.code == ResultCode.BAD_DATA and "float64" in e.value.message and "float32" in e.value.message
    with pytest.raises(MltsError) as e:
        ex.set_input(0, [True, False])
    assert e.value.code == ResultCode.BAD_DATA and "set_input(0)" in e.value.message
    ex.set_input(0, [1, 2.5])  # plain Python numbers: converted
    ex.compute()
    assert ex.get_output(0).tolist() == [2.0, 4.5]


# --- boolean setters ------------------------------------------------------------------------------

def fresh_execution() -> Execution:
    m, _ = add_model()
    m.finish()
    return Execution(reference_compilation(m))


@pytest.mark.parametrize("setter", ["set_reusable", "set_measure_timing"])
@pytest.mark.parametrize("flag", ["x", "False", 1, 0, None, 1.0, [True]])
def test_boolean_setters_refuse_non_booleans(setter, flag):
    ex = fresh_execution()
    with pytest.raises(MltsError) as e:
        getattr(ex, setter)(flag)
    assert e.value.code == ResultCode.BAD_DATA and setter in e.value.message and repr(flag) in e.value.message


def test_relax_refuses_non_booleans():
    m, _ = add_model()
    with pytest.raises(MltsError) as e:
        m.relax_computation_float32_to_float16("yes")
    assert e.value.code == ResultCode.BAD_DATA


@pytest.mark.parametrize("flag", [True, False, np.bool_(True), np.bool_(False)])
def test_boolean_setters_take_booleans(flag):
    ex = fresh_execution()
    ex.set_reusable(flag)
    ex.set_measure_timing(flag)
    ex.set_input(0, np.zeros(2, np.float32))
    ex.compute()
    # Reusable means a second computation is allowed; not reusable means BAD_STATE (NNAPI).
    if flag:
        ex.compute()
    else:
        with pytest.raises(MltsError) as e:
            ex.compute()
        assert e.value.code == ResultCode.BAD_STATE
