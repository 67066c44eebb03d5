"""The reference driver refuses malformed models and requests that reach it directly (ValidateHal)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mlts.runtime import (PROT_READ, FuseCode, Memory, MltsError, Model, OperandCode, OperandType, OperationCode,
                          Preference, Priority, ResultCode)
from mlts.runtime.drivers import ReferenceDriver
from mlts.runtime.enums import OperandLifetime
from mlts.runtime.hal import DataLocation, HalModel, HalOperand, HalOperation, Request, RequestArgument

F32 = OperandType(OperandCode.TENSOR_FLOAT32, (2, 2))


def _add_model() -> HalModel:
    m = Model()
    a, b, act, out = (m.add_operand(F32), m.add_operand(F32), m.add_operand(OperandType(OperandCode.INT32)),
                      m.add_operand(F32))
    m.set_operand_value(b, np.array([[1, 2], [3, 4]], np.float32))
    m.set_operand_value(act, np.int32(FuseCode.NONE))
    m.add_operation(OperationCode.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a], [out])
    m.finish()
    return m.hal_model()


def _replace_operand(model: HalModel, index: int, **changes) -> HalModel:
    operands = list(model.main.operands)
    operands[index] = dataclasses.replace(operands[index], **changes)
    return dataclasses.replace(model, main=dataclasses.replace(model.main, operands=tuple(operands)))


def _prepare(model: HalModel):
    return ReferenceDriver().prepare_model(model, Preference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None)


MALFORMED_MODELS = {
    "constant-location-beyond-values": lambda m: _replace_operand(m, 1, location=DataLocation(-1, 4096, 16)),
    "constant-length-wrong": lambda m: _replace_operand(m, 1, location=DataLocation(-1, 0, 8)),
    "constant-without-location": lambda m: _replace_operand(m, 1, location=None),
    "pool-index-out-of-range": lambda m: _replace_operand(
        m, 1, lifetime=OperandLifetime.CONSTANT_REFERENCE, location=DataLocation(3, 0, 16)),
    "input-type-differs-from-other-input": lambda m: _replace_operand(
        m, 0, type=OperandType(OperandCode.TENSOR_INT32, (2, 2))),
    "quantization-invalid": lambda m: _replace_operand(
        m, 0, type=OperandType(OperandCode.TENSOR_QUANT8_ASYMM, (2, 2), 0.0, 0)),
    "operation-reads-unwritten-operand": lambda m: _replace_operand(m, 0, lifetime=OperandLifetime.TEMPORARY_VARIABLE),
    "operation-operand-out-of-range": lambda m: dataclasses.replace(m, main=dataclasses.replace(
        m.main, operations=(HalOperation(OperationCode.ADD, (0, 1, 9), (3,)),))),
    "output-written-twice": lambda m: dataclasses.replace(m, main=dataclasses.replace(
        m.main, operations=m.main.operations * 2)),
    "no-operations": lambda m: dataclasses.replace(m, main=dataclasses.replace(m.main, operations=())),
    "input-index-not-an-input": lambda m: dataclasses.replace(m, main=dataclasses.replace(m.main, input_indexes=(1,))),
    "subgraph-reference-missing": lambda m: _replace_operand(
        m, 1, type=OperandType(OperandCode.MODEL), lifetime=OperandLifetime.SUBGRAPH, location=DataLocation(-1, 5, 0)),
}


@pytest.mark.parametrize("mutate", MALFORMED_MODELS.values(), ids=MALFORMED_MODELS.keys())
def test_reference_driver_refuses_malformed_model(mutate):
    bad = mutate(_add_model())
    with pytest.raises(MltsError) as info:
        _prepare(bad)
    assert info.value.code == ResultCode.BAD_DATA
    with pytest.raises(MltsError):
        ReferenceDriver().get_supported_operations(bad)


def _request(pool: Memory, in_loc: DataLocation, out_loc: DataLocation, **kw) -> Request:
    return Request((RequestArgument(False, in_loc, kw.get("in_dims", ())),),
                   (RequestArgument(False, out_loc, ()),), (pool,))


def test_well_formed_request_runs_and_reports_shapes():
    prepared = _prepare(_add_model())
    pool = Memory.create_shared(32)
    pool.array(0, np.float32, (2, 2))[:] = [[10, 20], [30, 40]]
    result = prepared.execute_synchronously(_request(pool, DataLocation(0, 0, 16), DataLocation(0, 16, 16)),
                                            True, None, 2_000_000_000)
    assert result.status == ResultCode.NO_ERROR
    np.testing.assert_array_equal(pool.array(16, np.float32, (2, 2)), [[11, 22], [33, 44]])
    assert result.output_shapes[0].dimensions == (2, 2)
    assert result.timing.time_on_device <= result.timing.time_in_driver


BAD_REQUESTS = {
    "input-region-beyond-pool": (DataLocation(0, 24, 16), DataLocation(0, 0, 16)),
    "input-length-wrong": (DataLocation(0, 0, 8), DataLocation(0, 16, 16)),
    "pool-index-missing": (DataLocation(1, 0, 16), DataLocation(0, 16, 16)),
    "negative-offset": (DataLocation(0, -4, 16), DataLocation(0, 16, 16)),
}


@pytest.mark.parametrize("locs", BAD_REQUESTS.values(), ids=BAD_REQUESTS.keys())
def test_reference_driver_refuses_malformed_request(locs):
    prepared = _prepare(_add_model())
    pool = Memory.create_shared(32)
    result = prepared.execute_synchronously(_request(pool, *locs), False, None, 2_000_000_000)
    assert result.status == ResultCode.BAD_DATA
    assert result.message


def test_request_with_wrong_argument_count_is_refused():
    prepared = _prepare(_add_model())
    pool = Memory.create_shared(32)
    request = Request((), (RequestArgument(False, DataLocation(0, 0, 16)),), (pool,))
    assert prepared.execute_synchronously(request, False, None, 0).status == ResultCode.BAD_DATA


def test_request_dimensions_conflicting_with_model_are_refused():
    prepared = _prepare(_add_model())
    pool = Memory.create_shared(32)
    result = prepared.execute_synchronously(
        _request(pool, DataLocation(0, 0, 16), DataLocation(0, 16, 16), in_dims=(4, 1)), False, None, 0)
    assert result.status == ResultCode.BAD_DATA


def test_output_in_read_only_pool_is_refused(tmp_path):
    path = tmp_path / "ro.bin"
    path.write_bytes(bytes(32))
    ro = Memory.from_file(path, protect=PROT_READ)
    prepared = _prepare(_add_model())
    request = Request((RequestArgument(False, DataLocation(0, 0, 16)),),
                      (RequestArgument(False, DataLocation(0, 16, 16)),), (ro,))
    assert prepared.execute_synchronously(request, False, None, 0).status == ResultCode.BAD_DATA


def test_driver_refuses_wrong_consumer_counts_and_unwritten_temporaries():
    model = _add_model()
    with pytest.raises(MltsError) as info:
        _prepare(_replace_operand(model, 0, number_of_consumers=3))
    assert "number of consumers" in info.value.message
    extra = HalOperand(F32, OperandLifetime.TEMPORARY_VARIABLE)
    dangling = dataclasses.replace(model, main=dataclasses.replace(model.main, operands=model.main.operands + (extra,)))
    with pytest.raises(MltsError) as info:
        _prepare(dangling)
    assert "operand 4 is never written" in info.value.message
