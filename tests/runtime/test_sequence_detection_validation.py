"""NNAPI's structural validation of the sequence and detection families and RANDOM_MULTINOMIAL (the last
operations to get kernels), checked across every operand of NNAPI's own cases.

The valid structures come from NNAPI's CTS data set (every case of these operations must build); the
invalid ones are those cases with one input or output changed, or counts changed, and must be refused
with BAD_DATA naming the operation and the culprit, at build time (Model) and by a driver's HAL checks
(validate_hal_model). nnapi-reference supports every one of them.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import re

import pytest

from mlts.conformance.nnapi_cts.store import Case, load_cases
from mlts.conformance.nnapi_cts.suite import build_model
from mlts.runtime import MltsError, Model, OperandCode, OperandType, OperationCode, ResultCode, get_device
from mlts.runtime.hal.validation import validate_hal_model
from mlts.runtime.ops import implemented_operations

FAMILIES = ("EMBEDDING_LOOKUP", "HASHTABLE_LOOKUP", "LSH_PROJECTION", "LSTM", "RNN", "SVDF",
             "UNIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_LSTM",
             "BIDIRECTIONAL_SEQUENCE_RNN", "QUANTIZED_16BIT_LSTM", "QUANTIZED_LSTM", "RANDOM_MULTINOMIAL",
             "AXIS_ALIGNED_BBOX_TRANSFORM", "BOX_WITH_NMS_LIMIT", "DETECTION_POSTPROCESSING", "GENERATE_PROPOSALS",
             "HEATMAP_MAX_KEYPOINT", "ROI_ALIGN", "ROI_POOLING")
# The input whose type selects the others' (NNAPI's validateOperation reads it first); 0 elsewhere.
PRIMARY_INPUT = {"EMBEDDING_LOOKUP": 1, "HASHTABLE_LOOKUP": 2}
SCALARS = {"INT32", "FLOAT32", "FLOAT16", "BOOL", "UINT32"}


@functools.lru_cache(maxsize=1)
def signature_cases() -> tuple[Case, ...]:
    return tuple(c for c in load_cases() if set(c.operation_names) & set(FAMILIES))


@functools.lru_cache(maxsize=1)
def representatives() -> dict[tuple[str, str], Case]:
    """Per (operation, type of its first input): the single-operation case with the most inputs and outputs."""
    chosen: dict[tuple[str, str], Case] = {}
    for c in signature_cases():
        if len(c.subgraphs) != 1 or len(c.main.operations) != 1:
            continue
        name, ins, outs = c.main.operations[0]
        key = (name, c.main.operands[ins[0]].type)
        size = (len(ins), len(outs))
        if key not in chosen or size > tuple(map(len, chosen[key].main.operations[0][1:])):
            chosen[key] = c
    return chosen


def _expect_bad_data(build, *where: str) -> str:
    with pytest.raises(MltsError) as info:
        build()
    assert info.value.code == ResultCode.BAD_DATA, info.value
    for w in where:
        assert w in info.value.message, info.value.message
    return info.value.message


def _copied(case: Case) -> Case:
    """A copy of a one-subgraph case whose main subgraph (operand list, operations) can be changed;
    operands are shared: replace one before changing it."""
    main = dataclasses.replace(case.main, operands=list(case.main.operands), operations=list(case.main.operations),
                               inputs=list(case.main.inputs), outputs=list(case.main.outputs))
    return dataclasses.replace(case, subgraphs=[main])


def _retyped(case: Case, operand: int, new_type: str) -> Case:
    """The case with one operand declared with another type (quantization dropped; values converted)."""
    changed = _copied(case)
    o = changed.main.operands[operand] = copy.copy(case.main.operands[operand])
    o.type, o.channel_quant = new_type, None
    o.scale, o.zero_point = (0.0, 0) if new_type in SCALARS or new_type == "TENSOR_BOOL8" else (o.scale, o.zero_point)
    if new_type in SCALARS and o.data is not None:
        o.data = o.data[:1]
    return changed


def _wrong_type(type_name: str) -> str:
    """A type no input or output of these operations accepts where `type_name` is expected: TENSOR_BOOL8
    for a tensor; for a scalar, one of a different kind (NNAPI never lets an INT32 parameter be a float)."""
    return {"INT32": "FLOAT32", "FLOAT32": "INT32", "FLOAT16": "INT32", "BOOL": "INT32"}.get(type_name, "TENSOR_BOOL8")


# -- (a) the CTS data set builds --------------------------------------------------------------------
def test_every_nnapi_operation_has_a_kernel():
    assert [c.name for c in OperationCode if c not in implemented_operations()] == []


def test_every_cts_case_of_these_operations_builds():
    cases = signature_cases()
    tested = {name for c in cases for name in c.operation_names} & set(FAMILIES)
    assert tested == set(FAMILIES)  # the data set has cases of each
    failures = []
    for case in cases:
        try:
            build_model(case)
        except MltsError as e:
            failures.append(f"{case.spec_dir}/{case.name}: {e}")
    assert failures == []
    # CTS marks no case of these operations as expected to fail (its invalid structures are those
    # of operations with kernels), so the invalid structures below are made from valid cases.
    assert not [c.name for c in cases if c.expect_failure]


# -- (b) invalid structures -------------------------------------------------------------------------
def test_each_input_and_output_of_the_wrong_type_is_refused_naming_it():
    checked = 0
    for (name, _), case in representatives().items():
        _, ins, outs = case.main.operations[0]
        for k, index in enumerate(ins):
            bad = _retyped(case, index, _wrong_type(case.main.operands[index].type))
            _expect_bad_data(lambda: build_model(bad), f"({name})", f": input {k} (operand {index})", "not allowed")
            checked += 1
        for k, index in enumerate(outs):
            bad = _retyped(case, index, _wrong_type(case.main.operands[index].type))
            _expect_bad_data(lambda: build_model(bad), f"({name})", f": output {k} (operand {index})", "not allowed")
            checked += 1
    assert checked > 500


def test_mixing_float32_and_float16_is_refused():
    """Every parameter of a float operation has the precision of its primary input; quantized
    operations take FLOAT32 parameters. The one exception: LSH_PROJECTION's input 1 (any type)."""
    swap = {"TENSOR_FLOAT32": "TENSOR_FLOAT16", "TENSOR_FLOAT16": "TENSOR_FLOAT32", "FLOAT32": "FLOAT16",
            "FLOAT16": "FLOAT32"}
    for (name, _), case in representatives().items():
        _, ins, _ = case.main.operations[0]
        for k, index in enumerate(ins):
            t = case.main.operands[index].type
            if t not in swap or k == PRIMARY_INPUT.get(name, 0) or (name == "LSH_PROJECTION" and k == 1):
                continue
            bad = _retyped(case, index, swap[t])
            _expect_bad_data(lambda: build_model(bad), f"({name})", f": input {k} ")


def test_lsh_projection_input_accepts_any_of_its_types():
    case = representatives()[("LSH_PROJECTION", "TENSOR_FLOAT32")]
    index = case.main.operations[0][1][1]
    for t in ("TENSOR_FLOAT32", "TENSOR_FLOAT16", "TENSOR_INT32", "TENSOR_QUANT8_ASYMM"):
        build_model(_retyped(case, index, t) if t != "TENSOR_QUANT8_ASYMM" else _quant(case, index, t))
    _expect_bad_data(lambda: build_model(_quant(case, index, "TENSOR_QUANT8_ASYMM_SIGNED")), ": input 1 ")


def _quant(case: Case, operand: int, new_type: str) -> Case:
    changed = _retyped(case, operand, new_type)
    changed.main.operands[operand].scale = 1.0
    return changed


def test_wrong_input_and_output_counts_are_refused():
    for (name, _), case in representatives().items():
        _, ins, outs = case.main.operations[0]
        fewer = _copied(case)
        fewer.main.operations[0] = (name, ins[:-1], outs)
        _expect_bad_data(lambda: build_model(fewer), f"({name})", f"inputs, got {len(ins) - 1}")
        extra = _copied(case)
        extra.main.operands.append(case.main.operands[outs[0]])
        extra.main.outputs = [*case.main.outputs, len(extra.main.operands) - 1]
        extra.main.operations[0] = (name, ins, [*outs, len(extra.main.operands) - 1])
        _expect_bad_data(lambda: build_model(extra), f"({name})", f"outputs, got {len(outs) + 1}")


def test_counts_of_each_nnapi_version_are_accepted():
    """LSTM: 23 inputs (1.0) or 27 (1.2); the sequence operations' outputs with or without states."""
    counts = {}
    for c in signature_cases():
        for name, ins, outs in c.main.operations:
            counts.setdefault(name, set()).add((len(ins), len(outs)))
    assert {(23, 4), (27, 4)} <= counts["LSTM"]
    assert {(61, 1), (61, 2), (61, 6)} <= counts["BIDIRECTIONAL_SEQUENCE_LSTM"]
    assert {(15, 1), (15, 2), (15, 3), (15, 4)} <= counts["BIDIRECTIONAL_SEQUENCE_RNN"]
    assert {(28, 1), (28, 3)} <= counts["UNIDIRECTIONAL_SEQUENCE_LSTM"]
    assert {(7, 1), (7, 2)} <= counts["UNIDIRECTIONAL_SEQUENCE_RNN"]
    # 5 outputs are the merged form with states (NNAPI 1.3): with merge_outputs false (this case) they are refused
    case = representatives()[("BIDIRECTIONAL_SEQUENCE_LSTM", "TENSOR_FLOAT32")]
    name, ins, outs = case.main.operations[0]
    assert len(outs) == 6
    five = _copied(case)
    five.main.operations[0] = (name, ins, outs[:5])
    five.main.outputs = [o for o in case.main.outputs if o != outs[5]]
    five.main.inputs = [*case.main.inputs, outs[5]]  # the dropped output's operand: an unused model input
    _expect_bad_data(lambda: build_model(five), "(BIDIRECTIONAL_SEQUENCE_LSTM)", "merge_outputs")


def _hand_model(types_in, types_out, omitted=()) -> tuple[Model, list[int], list[int]]:
    m = Model()
    ins = []
    for k, t in enumerate(types_in):
        i = m.add_operand(t)
        if k in omitted:
            m.set_operand_value(i, None)
        ins.append(i)
    outs = [m.add_operand(t) for t in types_out]
    return m, ins, outs


F32T = OperandType(OperandCode.TENSOR_FLOAT32, (2, 2))
I32 = OperandType(OperandCode.INT32)
F32 = OperandType(OperandCode.FLOAT32)


def test_optional_inputs_may_be_omitted_and_required_ones_may_not():
    # SVDF: input, feature weights, time weights, bias (optional), state, rank, activation
    svdf_in = [F32T, F32T, F32T, F32T, F32T, I32, I32]
    m, ins, outs = _hand_model(svdf_in, [F32T, F32T], omitted=(3,))
    m.add_operation(OperationCode.SVDF, ins, outs)
    m, ins, outs = _hand_model(svdf_in, [F32T, F32T], omitted=(2,))
    _expect_bad_data(lambda: m.add_operation(OperationCode.SVDF, ins, outs), "(SVDF): input 2 ",
                     "required input is omitted")
    # LSTM (23 inputs): the CIFG / peephole / projection tensors 1, 5, 9-12, 16, 17 are optional
    # (batch, input size, units, output size all 2: weights [2, 2], peepholes and biases [2]; with CIFG the
    # scratch buffer is [batch, 3 x units])
    vec = OperandType(OperandCode.TENSOR_FLOAT32, (2,))
    lstm_in = [F32T] * 9 + [vec] * 7 + [F32T, vec, F32T, F32T, I32, F32, F32]
    scratch = OperandType(OperandCode.TENSOR_FLOAT32, (2, 6))
    m, ins, outs = _hand_model(lstm_in, [scratch] + [F32T] * 3, omitted=(1, 5, 9, 10, 11, 12, 16, 17))
    m.add_operation(OperationCode.LSTM, ins, outs)
    m, ins, outs = _hand_model(lstm_in, [scratch] + [F32T] * 3, omitted=(13,))
    _expect_bad_data(lambda: m.add_operation(OperationCode.LSTM, ins, outs), "(LSTM): input 13 ")
    # the primary input selects the variant: it may not be omitted
    m, ins, outs = _hand_model([F32T, I32, OperandType(OperandCode.TENSOR_INT32, (2,))],
                               [OperandType(OperandCode.TENSOR_INT32, (2, 2))], omitted=(0,))
    _expect_bad_data(lambda: m.add_operation(OperationCode.RANDOM_MULTINOMIAL, ins, outs),
                     "(RANDOM_MULTINOMIAL): input 0 ")


def test_the_driver_side_hal_checks_refuse_a_malformed_structure_too():
    """validate_hal_model (what a driver runs on what it receives) applies the same signature."""
    for representative in representatives().values():
        validate_hal_model(build_model(representative).hal_model())
    case = representatives()[("ROI_ALIGN", "TENSOR_QUANT8_ASYMM")]
    hal = build_model(case).hal_model()
    op = hal.main.operations[0]
    rois = op.inputs[1]
    operands = list(hal.main.operands)
    operands[rois] = dataclasses.replace(operands[rois], type=OperandType(
        OperandCode.TENSOR_FLOAT32, operands[rois].type.dimensions))
    bad = dataclasses.replace(hal, main=dataclasses.replace(hal.main, operands=tuple(operands)))
    message = _expect_bad_data(lambda: validate_hal_model(bad), "(ROI_ALIGN): input 1 ")
    assert re.search(r"expected TENSOR_QUANT16_ASYMM\)", message)


# -- (c) supported ------------------------------------------------------------------------------------
def test_nnapi_reference_supports_every_one_of_them():
    device = get_device("nnapi-reference")
    supported = set()
    for (name, _), case in representatives().items():
        assert build_model(case).get_supported_operations_for_devices([device]) == [True], name
        supported.add(name)
    assert supported == set(FAMILIES)
