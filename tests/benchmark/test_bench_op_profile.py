"""Per-operation profiles in the benchmark: a run's records carry `op_profile` for nnapi-reference and
mlts-fast and the report shows them; the record schema takes them (and records without them); a driver
without the HAL extension is profiled by single-operation models, whose inputs are the whole model's own
intermediate values."""
from __future__ import annotations

import re

import numpy as np
import pytest

from mlts.benchmark import runner as R
from mlts.benchmark.model_profile import profile_model
from mlts.benchmark.op_profile import profiled_runs, profile_case, time_per_type
from mlts.benchmark.record_schema import BenchmarkRecord, validate_record
from mlts.benchmark.records import read_results
from mlts.benchmark.single_op import reference_values, single_operation_model
from mlts.models.zoo_registry import load
from mlts.report import render_html
from mlts.runtime import (Compilation, Execution, FuseCode, MltsError, Model, OperandCode, OperandType, OperationCode,
                          get_device)
from mlts.runtime.drivers import faulty
from mlts.runtime.drivers.fast.driver import FAST_DEVICE_NAME, compiler_available
from support.profiling_drivers import no_profiling_driver
from test_bench_runner import REF, TINY, _config, register, tiny_zoo  # noqa: F401 (fixtures)

F32 = OperandCode.TENSOR_FLOAT32


def fc_relu_add_model() -> Model:
    """x (16x256) -> FULLY_CONNECTED 256x256 -> t; t + y -> out (16x256): the FC is hundreds of times the ADD's
    arithmetic. Operation 0 the FC, 1 the ADD."""
    m = Model()
    x, y = m.add_operand(OperandType(F32, (16, 256))), m.add_operand(OperandType(F32, (16, 256)))
    w, b = m.add_operand(OperandType(F32, (256, 256))), m.add_operand(OperandType(F32, (256,)))
    act = m.add_operand(OperandType.scalar(OperandCode.INT32))
    t, out = m.add_operand(OperandType(F32, (16, 256))), m.add_operand(OperandType(F32, (16, 256)))
    rng = np.random.default_rng(1)
    m.set_operand_value(w, rng.standard_normal((256, 256)).astype(np.float32))
    m.set_operand_value(b, rng.standard_normal(256).astype(np.float32))
    m.set_operand_value(act, np.int32(FuseCode.RELU))
    m.add_operation(OperationCode.FULLY_CONNECTED, [x, w, b, act], [t])
    m.add_operation(OperationCode.ADD, [t, y, act], [out])
    m.identify_inputs_and_outputs([x, y], [out])
    m.finish()
    return m


@pytest.mark.skipif(not compiler_available(), reason="mlts-fast needs numba")
def test_a_run_records_op_profiles_for_the_reference_and_mlts_fast_and_the_report_shows_them(tiny_zoo, tmp_path):
    summary = R.run_benchmark_config(_config([REF, FAST_DEVICE_NAME], images=1), tmp_path / "run", stream=None)
    assert summary.counts == {"ok": 2, "unsupported": 0, "error": 0}
    ops = load(TINY).model.operations()
    records = {r["driver"]: r for r in read_results(tmp_path / "run").benchmark_records()}
    for driver, rec in records.items():
        profile = rec["op_profile"]
        assert [e["index"] for e in profile] == list(range(len(ops))), driver
        assert [e["type"] for e in profile] == [code.name for code, _, _ in ops]
        assert {e["device"] for e in profile} == {driver}
        assert sum(e["share"] for e in profile) == pytest.approx(1.0, abs=1e-3)
        conv = sum(e["mean_us"] for e in profile if e["type"] in ("CONV_2D", "DEPTHWISE_CONV_2D"))
        assert conv > 0.5 * sum(e["mean_us"] for e in profile)  # a MobileNet's time is in its convolutions
        BenchmarkRecord.from_dict(rec)
    section = render_html([tmp_path / "run"]).split('<section id="op-profile">')[1].split("</section>")[0]
    for driver in (REF, FAST_DEVICE_NAME):
        assert f"{TINY} · {driver}" in section
    assert "CONV_2D" in section and "Time per operation type" in section


def test_records_with_without_and_with_malformed_op_profiles(make_record):
    validate_record(make_record())  # records older than op_profile
    good = make_record(op_profile=[{"index": 0, "type": "CONV_2D", "device": REF, "mean_us": 12.5, "share": 1.0}])
    assert BenchmarkRecord.from_dict(good).to_dict()["op_profile"] == good["op_profile"]
    validate_record(make_record(op_profile=None))
    for bad, field in (("x", "op_profile"), ([1], "op_profile[0]"),
                       ([{"index": "0", "type": "ADD", "device": REF, "mean_us": 1.0}], "op_profile[0].index"),
                       ([{"index": 0, "type": "ADD", "device": REF, "mean_us": None}], "op_profile[0].mean_us"),
                       ([{"index": 0, "type": "ADD", "device": REF, "mean_us": 1, "share": True}],
                        "op_profile[0].share")):
        with pytest.raises(MltsError, match=re.escape(f"field '{field}'")):
            validate_record(make_record(op_profile=bad))


def test_a_failing_profiled_run_leaves_the_case_as_it_was(register):
    """A driver whose runs fail gives no profile but an op_profile_error; the case keeps what it measured."""
    dev, = register(faulty.create("unsupported@execute?op=FULLY_CONNECTED"))
    c = Compilation.for_devices(fc_relu_add_model(), [dev])
    c.finish()
    rec = BenchmarkRecord(model="m", driver=dev.name, status="ok", latency={"p50_ms": 1.0})
    profile_case(rec, c, [np.ones((16, 256), np.float32)] * 2, lambda: None)
    assert rec.op_profile is None and "FULLY_CONNECTED" in rec.extra["op_profile_error"]
    assert (rec.status, rec.latency) == ("ok", {"p50_ms": 1.0})


def test_a_driver_without_the_extension_is_profiled_by_single_operation_models(register):
    plain, = register(no_profiling_driver())
    model = fc_relu_add_model()
    c = Compilation.for_devices(model, [plain])
    c.finish()
    inputs = [np.ones((16, 256), np.float32), np.ones((16, 256), np.float32)]
    assert profiled_runs(c, inputs, runs=2) == []  # nothing reported: the benchmark records no op_profile
    profile = profile_model("fc+add", model, plain, runs=5, inputs=inputs)
    assert profile.method == "single-operation" and "no-profiling reports no per-operation times" in profile.note
    fc, add = profile.operations
    assert (fc.index, fc.type, fc.status, add.index, add.type, add.status) == (
        0, "FULLY_CONNECTED", "ok", 1, "ADD", "ok")
    assert fc.source == "on_device" and fc.runs == 5 and fc.mean_us > add.mean_us
    assert fc.share + add.share == pytest.approx(1.0)
    assert [k for k, *_ in profile.by_type()] == ["FULLY_CONNECTED", "ADD"]
    assert profile_model("fc+add", model, get_device(REF), runs=2, inputs=inputs).method == "driver"
    assert profile_model("fc+add", model, get_device(REF), runs=2, inputs=inputs, single_op=True).method == \
        "single-operation"


def test_a_single_operation_model_is_fed_the_whole_model_s_intermediate_values():
    model = fc_relu_add_model()
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((16, 256)).astype(np.float32) for _ in range(2)]
    values = reference_values(model, inputs)
    code, op_inputs, op_outputs = model.operations()[1]  # the ADD: its input 0 is the FC's output
    sub, feeds = single_operation_model(model, 1, values)
    assert code == OperationCode.ADD and sub.operation_count == 1 and len(feeds) == 2
    np.testing.assert_array_equal(feeds[0], values[op_inputs[0]])
    c = Compilation.for_devices(sub, [get_device(REF)])
    c.finish()
    ex = Execution(c)
    for k, x in enumerate(feeds):
        ex.set_input(k, x)
    ex.compute()
    np.testing.assert_array_equal(ex.get_output(0), values[op_outputs[0]])


def test_time_per_operation_type_sums_counts_times_and_shares():
    rows = time_per_type([("CONV_2D", 10.0, 0.4), ("ADD", 1.0, 0.04), ("CONV_2D", 14.0, 0.56), ("RESHAPE", None, None)])
    assert rows == [("CONV_2D", 2, 24.0, pytest.approx(0.96)), ("ADD", 1, 1.0, 0.04)]
