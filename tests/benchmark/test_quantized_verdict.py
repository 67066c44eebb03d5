"""The quantized benchmark verdict (accuracy.apply_quantized_verdict): every operation within one step of
nnapi-reference given its inputs, and top-1 agreement >= 99%; the whole-model step difference is a figure,
not judged. Unit tests on hand-built results, then the benchmark end to end on the quantized zoo model with
the vendor-style CONV_2D drivers of tests/quantized_rounding_drivers.py (partitioned with nnapi-reference):
one that only rounds differently passes although the whole model drifts by more than a step; one that
ignores the input zero point fails, naming the CONV_2D; the report row says which operation."""
from __future__ import annotations

import copy

import pytest

from mlts.benchmark import runner as R
from mlts.benchmark.accuracy import QUANTIZED_VERDICT_RULE, apply_quantized_verdict
from mlts.report.machines import Machine
from mlts.report.rows import read_row
from mlts.runtime import register_driver, unregister_driver
import quantized_rounding_drivers as Q
import test_bench_runner
from test_bench_runner import REF, TINY, _config, _records

tiny_zoo = test_bench_runner.tiny_zoo  # a fixture shared with the benchmark runner's tests

QUANT = TINY + "_quant"
STEM = "node 'stem/conv' (Conv, opset 13)"


def accumulated(**changes) -> dict:
    """An AccuracyAccumulator.result() of a quantized output: 7 steps at most, 3 elements over 3 steps."""
    result = {"output_dtype": "uint8", "reference_samples": 100, "mse": 0.4, "max_abs_error": 7.0,
              "nonfinite_mismatches": 0, "cts_tolerance": {"kind": "quantized", "atol": 0.0, "rtol": 0.0,
                                                           "max_diff": 3},
              "cts_violations": 3, "cts_pass": False, "top1_agreement": 1.0, "top5_agreement": 1.0,
              "label_samples": 100, "top1_accuracy": 0.7, "top5_accuracy": 0.9, "images": 100}
    result.update(changes)
    return result


def per_operation(bad: dict | None = None, failed: tuple[str, ...] = ()) -> dict:
    return {"operations": 32, "operations_judged": 32 - len(failed),
            "operations_out_of_tolerance": int(bad is not None), "operations_failed": list(failed),
            "pass": bad is None and not failed, "first_out_of_tolerance": bad}


BAD_CONV = {"index": 5, "operation": "CONV_2D", "origin": "node 'block2_pw/conv' (Conv, opset 13)",
            "difference": "12 steps", "max_diff": 12.0}


def test_every_operation_within_one_step_passes_whatever_the_whole_model_drift():
    result = accumulated()
    ops = per_operation()
    apply_quantized_verdict(result, ops)
    assert result["cts_pass"] is True and result["cts_violations"] == 0 and "verdict_reason" not in result
    assert result["whole_model"] == {"max_steps": 7.0, "elements_over_3_steps": 3}  # recorded, not judged
    assert result["per_operation"] is ops
    assert result["cts_tolerance"] == {"kind": "quantized", "atol": 0.0, "rtol": 0.0, "max_diff": 1,
                                       "scope": "per operation"}
    assert result["verdict_rule"] == QUANTIZED_VERDICT_RULE
    assert (result["max_abs_error"], result["top1_agreement"]) == (7.0, 1.0)  # the figures stay


def test_an_operation_out_of_tolerance_fails_naming_it():
    result = accumulated(max_abs_error=0.0, cts_violations=0, cts_pass=True)  # the whole model even agrees
    apply_quantized_verdict(result, per_operation(BAD_CONV))
    assert result["cts_pass"] is False and result["cts_violations"] == 1
    assert result["verdict_reason"] == ("operation 5 CONV_2D (node 'block2_pw/conv' (Conv, opset 13)) is off by "
                                        "12 steps")


def test_operations_that_fail_to_run_fail_the_verdict():
    result = accumulated()
    apply_quantized_verdict(result, per_operation(failed=("3 CONV_2D: OP_FAILED: no kernel", "4 ADD: OP_FAILED")))
    assert result["cts_pass"] is False and result["cts_violations"] == 2
    assert result["verdict_reason"] == "operations failed: 3 CONV_2D: OP_FAILED: no kernel; 4 ADD: OP_FAILED"


@pytest.mark.parametrize("agreement, passes", [(0.98, False), (0.99, True), (None, True)])
def test_top1_agreement_must_be_at_least_99_percent(agreement, passes):
    result = accumulated(top1_agreement=agreement)
    apply_quantized_verdict(result, per_operation())
    assert result["cts_pass"] is passes
    if not passes:
        assert result["verdict_reason"] == "top-1 agreement 98.0% < 99%"


def test_an_operation_out_of_tolerance_is_named_even_when_top1_agreement_also_fails():
    """The operation is the cause; the lost agreement its consequence: the reason names the operation."""
    result = accumulated(top1_agreement=0.25)
    apply_quantized_verdict(result, per_operation(BAD_CONV))
    assert result["cts_pass"] is False
    assert "operation 5 CONV_2D" in result["verdict_reason"] and "block2_pw/conv" in result["verdict_reason"]


def test_the_report_row_names_the_operation():
    machine = Machine(("none",), "this machine", None)
    failing = {"model": QUANT, "driver": "npu", "status": "ok", "accuracy": accumulated()}
    apply_quantized_verdict(failing["accuracy"], per_operation(BAD_CONV))
    row = read_row(failing, machine, "lane", REF)
    assert row.cts_text == "FAIL (op 5 CONV_2D)" and row.cts_reason == failing["accuracy"]["verdict_reason"]
    passing = copy.deepcopy(failing)
    passing["accuracy"] = accumulated()
    apply_quantized_verdict(passing["accuracy"], per_operation())
    assert read_row(passing, machine, "lane", REF).cts_text == "pass"


# -- the benchmark end to end -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def bench(tiny_zoo, tmp_path_factory):
    """One benchmark run of the quantized zoo model on nnapi-reference and the two test drivers (each
    partitioned with nnapi-reference, since they run only CONV_2D): {(model, driver, mode): record}."""
    drivers = [Q.create_single_rounding(), Q.create_ignores_zero_point()]
    for d in drivers:
        register_driver(d)
    try:
        run_dir = tmp_path_factory.mktemp("bench") / "run"
        R.run_benchmark_config(_config([REF] + [d.name for d in drivers], models=(QUANT,)), run_dir, stream=None)
        yield _records(run_dir)
    finally:
        for d in drivers:
            unregister_driver(d.name)


def test_ignoring_the_input_zero_point_fails_naming_the_conv(bench):
    rec = bench[(QUANT, f"npu-ignores-zero-point+{REF}", "sync")]
    assert rec["status"] == "ok" and rec["devices"] == ["npu-ignores-zero-point", REF]
    acc = rec["accuracy"]
    assert acc["cts_pass"] is False
    bad = acc["per_operation"]["first_out_of_tolerance"]
    assert (bad["index"], bad["operation"], bad["origin"]) == (1, "CONV_2D", STEM) and bad["max_diff"] > 1
    assert acc["per_operation"]["operations_judged"] == acc["per_operation"]["operations"] == 32
    assert acc["whole_model"]["max_steps"] == acc["max_abs_error"] > 3
    assert "CONV_2D" in acc["verdict_reason"] and "stem/conv" in acc["verdict_reason"]
    assert bench[(QUANT, "npu-ignores-zero-point", "sync")]["status"] == "unsupported"  # alone: CONV_2D only


def test_rounding_once_passes_although_the_whole_model_drifts_more_than_a_step(bench):
    rec = bench[(QUANT, f"npu-single-rounding+{REF}", "sync")]
    assert rec["status"] == "ok" and rec["devices"] == ["npu-single-rounding", REF]
    assert any(op.endswith(":CONV_2D@npu-single-rounding") for op in rec["partition"]["operations"])
    acc = rec["accuracy"]
    ops = acc["per_operation"]
    assert (ops["pass"], ops["operations_out_of_tolerance"], ops["operations_failed"]) == (True, 0, [])
    assert ops["operations_judged"] == ops["operations"] == 32
    assert acc["top1_agreement"] >= 0.99 and acc["cts_pass"] is True and "verdict_reason" not in acc
    # measured: 5 steps on this model; one step of difference per CONV_2D grows over the network
    assert acc["whole_model"]["max_steps"] == acc["max_abs_error"] > 1


def test_the_reference_record_is_its_own_reference(bench):
    acc = bench[(QUANT, REF, "sync")]["accuracy"]
    assert acc["cts_pass"] is True and acc["max_abs_error"] == 0 and "per_operation" not in acc
