"""Model building rules that are not errors: order freedom, shape inference, immutability after finish."""
from __future__ import annotations

import numpy as np
import pytest

from mlts.runtime import (Compilation, Execution, FuseCode, MltsError, Model, OperandCode, OperandType,
                          OperationCode, ResultCode, SymmPerChannelQuantParams)
from mlts.runtime.enums import OperandLifetime

F32 = OperandCode.TENSOR_FLOAT32
ACT = OperandType(OperandCode.INT32)


def _run(model: Model, *inputs: np.ndarray) -> list[np.ndarray]:
    c = Compilation(model)
    c.finish()
    e = Execution(c)
    for i, x in enumerate(inputs):
        e.set_input(i, x)
    e.compute()
    return [e.get_output(i) for i in range(len(model.outputs))]


def test_operations_may_be_added_in_any_order():
    # out = (x + y) * x, with the MUL added before the ADD that feeds it.
    t = OperandType(F32, (2, 3))
    m = Model()
    x, y, act, s, out = (m.add_operand(t), m.add_operand(t), m.add_operand(ACT), m.add_operand(t), m.add_operand(t))
    m.set_operand_value(act, np.int32(FuseCode.NONE))
    m.add_operation(OperationCode.MUL, [s, x, act], [out])
    m.add_operation(OperationCode.ADD, [x, y, act], [s])
    m.identify_inputs_and_outputs([x, y], [out])
    m.finish()
    assert [op.type for op in m.hal_model().main.operations] == [OperationCode.ADD, OperationCode.MUL]
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 2, np.float32)
    np.testing.assert_array_equal(_run(m, a, b)[0], (a + b) * a)


def test_static_shape_inference_fills_unknown_dimensions_and_catches_conflicts():
    m = Model()
    a = m.add_operand(OperandType(F32, (4, 1)))
    b = m.add_operand(OperandType(F32, (1, 3)))
    act = m.add_operand(ACT)
    out = m.add_operand(OperandType(F32, (0, 0)))
    m.set_operand_value(act, np.int32(0))
    m.add_operation(OperationCode.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    assert m.inferred_operand_type(out).dimensions == (4, 3)

    bad = Model()
    a = bad.add_operand(OperandType(F32, (4, 1)))
    b = bad.add_operand(OperandType(F32, (1, 3)))
    act = bad.add_operand(ACT)
    out = bad.add_operand(OperandType(F32, (4, 2)))
    bad.set_operand_value(act, np.int32(0))
    bad.add_operation(OperationCode.ADD, [a, b, act], [out])
    bad.identify_inputs_and_outputs([a, b], [out])
    with pytest.raises(MltsError) as info:
        bad.finish()
    assert info.value.code == ResultCode.BAD_DATA
    assert "operation 0 (ADD)" in info.value.message and "[4, 3]" in info.value.message


def test_an_invalid_model_stays_invalid():
    m = Model()
    a = m.add_operand(OperandType(F32, (2,)))
    m.identify_inputs_and_outputs([a], [])
    with pytest.raises(MltsError):
        m.finish()
    with pytest.raises(MltsError) as info:
        m.add_operand(OperandType(F32, (2,)))
    assert info.value.code == ResultCode.BAD_STATE


def test_per_channel_parameters_can_be_set_after_adding_the_operand():
    m = Model()
    w = m.add_operand(OperandType(OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, (3, 1, 1, 2)))
    m.set_operand_symm_per_channel_quant_params(w, SymmPerChannelQuantParams((0.5, 0.25, 0.125), 0))
    assert m.operand_type(w).channel_quant.scales == (0.5, 0.25, 0.125)
    with pytest.raises(MltsError) as info:
        m.set_operand_symm_per_channel_quant_params(w, SymmPerChannelQuantParams((0.5, 0.25), 0))
    assert "2 channel scales" in info.value.message


def test_small_constants_are_copied_and_large_ones_pooled_at_finish():
    t_small = OperandType(F32, (2, 2))
    t_large = OperandType(F32, (64,))
    m = Model()
    x = m.add_operand(t_large)
    big = m.add_operand(t_large)
    small = m.add_operand(t_small)
    act = m.add_operand(ACT)
    out = m.add_operand(t_large)
    big_value = np.ones(64, np.float32)
    m.set_operand_value(big, big_value)
    m.set_operand_value(small, np.zeros((2, 2), np.float32))
    m.set_operand_value(act, np.int32(0))
    big_value[:] = 3  # referenced, not copied: the change before finish() is what the model holds
    m.add_operation(OperationCode.ADD, [x, big, act], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    operands = m.hal_model().main.operands
    assert operands[small].lifetime == OperandLifetime.CONSTANT_COPY
    assert operands[big].lifetime == OperandLifetime.CONSTANT_REFERENCE
    big_value[:] = 100  # after finish the model no longer depends on the application's buffer
    np.testing.assert_array_equal(_run(m, np.ones(64, np.float32))[0], np.full(64, 4, np.float32))


@pytest.mark.parametrize("dims", [(65535,) * 4, (2 ** 31,) * 3])
def test_a_tensor_whose_size_overflows_int64_is_rejected_at_add_operand(dims):
    # 65535**4 elements wrap around in int64 arithmetic; the size check must use exact integers.
    with pytest.raises(MltsError) as info:
        Model().add_operand(OperandType(OperandCode.TENSOR_FLOAT32, dims))
    assert info.value.code == ResultCode.BAD_DATA and "too large" in info.value.message
