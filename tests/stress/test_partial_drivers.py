"""Partial drivers are first-class in stress: vendor-style NPU drivers (tests/partial_drivers.py:
CONV_2D, DEPTHWISE_CONV_2D, ADD and AVERAGE_POOL_2D only), each with one realistic bug, run through
the suite as `mlts stress --driver FILE:create_<bug> --drivers npu-<bug>` runs them (a driver service,
the watchdog, results.jsonl). The correct one succeeds everywhere with work on the driver; each bug
is reported non-SUCCESS with a reason naming it; a test that cannot exercise a driver is SKIPPED."""
from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET

import pytest

from mlts.benchmark.records import read_results
from mlts.stress.catalog import TESTS, by_name
from mlts.stress.drivers import ALL_DEVICES, Target
from mlts.stress.junit import junit_xml
from mlts.stress.suite import SuiteConfig, run_passed, run_suite

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
import partial_drivers  # noqa: E402  (tests/partial_drivers.py)

pytestmark = pytest.mark.slow


def npu(bug: str) -> Target:
    return Target(f"npu-{bug}", partial_drivers.spec(bug), "service")


def suite(tmp_path, targets, tests, **kwargs) -> dict[tuple[str, str], dict]:
    config = SuiteConfig(run_dir=tmp_path, targets=targets, tests=[by_name()[t] for t in tests], quick=True,
                         heartbeat_s=30.0, **kwargs)
    records = run_suite(config, progress=lambda line: None)
    written = [r for r in read_results(tmp_path).records if r["kind"] == "stress"]
    assert len(written) == len(records) == len(targets) * len(tests)
    return {(r["driver"], r["test"]): r for r in written}


def test_a_correct_partial_driver_succeeds_on_every_stress_test_with_work_on_the_driver(tmp_path, no_strays):
    every = [t.name for t in TESTS]
    out = suite(tmp_path, [npu("correct")], every, models=["convnet_f32", "convnet_u8", "conv_add_f32"],
                duration_scale=0.25)
    for name in every:
        r = out[("npu-correct", name)]
        assert r["outcome"] == "SUCCESS", (name, r["reason"], r["log_tail"])
        cov = r["coverage"]
        assert cov and 0 < cov["ops_on_driver"] < cov["ops_total"] or name == "random_graphs", (name, cov)
        assert r["fallbacks"] is None
    # random graphs are built from the driver's own operations: every operation on the driver
    graphs = out[("npu-correct", "random_graphs")]["coverage"]
    assert graphs["ops_on_driver"] == graphs["ops_total"] > 0 and not graphs["partitioned"]
    # the partitioned models: convnet_f32 is 9 operations, 6 of them (conv, depthwise, pool) on the NPU
    loading = out[("npu-correct", "interleaved_models")]["coverage"]
    assert loading["partitioned"] and "convnet_f32" in loading["models"]


@pytest.mark.parametrize("bug, test, expected", [
    ("race", "parallel_inference", "wrong results for"),
    ("leak", "sustained_inference", "RSS grows 1.0"),
    ("throttle", "sustained_inference", "latency drifts +"),
])
def test_each_bug_of_a_partial_driver_is_caught_on_the_driver_alone(tmp_path, no_strays, bug, test, expected):
    longer = {"sustained_inference": {"min_executions": 80}}  # the default set's length: a wide margin
    out = suite(tmp_path, [npu(bug)], [test], models=["convnet_f32", "convnet_u8"], overrides=longer)
    r = out[(f"npu-{bug}", test)]
    assert r["outcome"] == "FAILURE" and expected in r["reason"], r["reason"]
    assert r["coverage"] is None or r["coverage"]["ops_on_driver"] > 0


def test_leak_and_throttle_messages_name_the_rate(tmp_path, no_strays):
    out = suite(tmp_path, [npu("leak"), npu("throttle")], ["sustained_inference"], models=["convnet_f32"],
                overrides={"sustained_inference": {"min_executions": 80}})
    leak = out[("npu-leak", "sustained_inference")]["reason"]
    assert "per execution over" in leak and "npu-leak leaks" in leak
    throttle = out[("npu-throttle", "sustained_inference")]["reason"]
    assert "with 95% confidence; allowed < 20%" in throttle and "npu-throttle slows down" in throttle


def test_a_crash_hidden_by_the_cpu_fallback_fails_all_devices(tmp_path, no_strays):
    # under all-devices npu-crash (declaring 0.1 x the CPU's time) takes the convolutions; it aborts on its
    # 3rd execution and the runtime reruns on nnapi-reference, so the results are right: only the
    # recorded fallback tells
    spec = partial_drivers.spec("crash")
    out = suite(tmp_path, [Target(ALL_DEVICES)], ["interleaved_models"], specs=[spec], models=["convnet_f32"])
    r = out[(ALL_DEVICES, "interleaved_models")]
    assert r["outcome"] == "FAILURE", r
    assert r["reason"].startswith("the CPU fallback hid ") and "npu-crash" in r["reason"] and "DEAD_OBJECT" in r["reason"]
    assert r["fallbacks"]["count"] >= 1 and set(r["fallbacks"]["devices"]) == {"npu-crash"}


def test_a_failing_random_graph_is_shrunk_to_the_operation_at_fault(tmp_path, no_strays):
    out = suite(tmp_path, [npu("pool")], ["random_graphs"])
    r = out[("npu-pool", "random_graphs")]
    assert r["outcome"] == "FAILURE"
    assert "fails alone" in r["reason"] and "AVERAGE_POOL_2D on TENSOR_" in r["reason"], r["reason"]
    shrunk, whole = r["details"]["shrunk_graph"], r["details"]["graph"]
    assert os.path.exists(shrunk) and f"mlts stress --replay {shrunk}" in r["reason"]
    if shrunk != whole:  # a graph of several operations: the one at fault is saved apart
        assert shrunk.endswith(".shrunk.graph.json") and "AVERAGE_POOL_2D" in open(shrunk).read()


def test_tests_that_cannot_exercise_a_driver_are_skipped_and_it_does_not_pass(tmp_path, no_strays):
    # sample-minimal takes ADD, CONCATENATION and CONV_2D on float32: none of convnet_u8's operations
    target = Target("sample-minimal", "sample", "in-process")
    only = {"models": ["convnet_u8"]}
    out = suite(tmp_path, [target], ["interleaved_models", "sustained_inference"], specs=["sample"],
                overrides={"interleaved_models": only, "sustained_inference": only})
    records = list(out.values())
    for r in records:
        assert r["outcome"] == "SKIPPED", r
        assert r["reason"] == ("sample-minimal cannot run any of the test's models: convnet_u8 (none of its "
                               "operations)")
    assert not run_passed(records)  # all skipped: not tested, so not passed
    root = ET.fromstring(junit_xml(records))
    assert root.get("skipped") == "2" and root.get("failures") == "0"
    assert len(root.findall(".//testcase/skipped")) == 2
