"""Each fault-injecting driver gets its expected outcome from the suite, through the watchdog:
crash -> FAILURE with DEAD_OBJECT (a service) or CRASH (in the test process); hang -> HANG within
deadline + 2 s; wrong results -> FAILURE in the random-graph and accuracy checks; leak -> FAILURE in
the resource check; slow -> FAILURE in performance degradation. A HANG or CRASH never stops the
suite, and nothing is left running."""
from __future__ import annotations

import pytest

from mlts.benchmark.records import read_results
from mlts.runtime.drivers.faulty import parse_spec
from mlts.stress.catalog import by_name
from mlts.stress.drivers import Target
from mlts.stress.suite import SuiteConfig, run_suite

pytestmark = pytest.mark.slow


def fault(spec: str, hosting: str = "service") -> Target:
    return Target(parse_spec(spec).name, spec, hosting)


def suite(tmp_path, targets, tests, **kwargs) -> dict[tuple[str, str], dict]:
    tests_by_name = by_name()
    config = SuiteConfig(run_dir=tmp_path, targets=targets, tests=[tests_by_name[t] for t in tests], quick=True,
                         heartbeat_s=kwargs.pop("heartbeat_s", 20.0), **kwargs)
    records = run_suite(config, progress=lambda line: None)
    assert len(records) == len(targets) * len(tests)
    written = [r for r in read_results(tmp_path).records if r["kind"] == "stress"]
    assert len(written) == len(records)  # every outcome reached results.jsonl
    return {(r["driver"], r["test"]): r for r in written}


def test_hang_and_crash_never_stop_the_suite(tmp_path, no_strays):
    hang, crash = fault("faulty:hang@execute"), fault("faulty:crash@execute", "in-process")
    reference = Target("nnapi-reference")
    out = suite(tmp_path, [hang, crash, reference], ["interleaved_models"], heartbeat_s=3.0)
    h = out[(hang.name, "interleaved_models")]
    assert h["outcome"] == "HANG" and "no heartbeat for 3 s" in h["reason"]
    assert h["liveness"]["outcome"] == "HANG"  # the driver still hangs: it did not survive
    assert h["killed_processes"] >= 1  # its driver service, killed with the test process
    c = out[(crash.name, "interleaved_models")]
    assert c["outcome"] == "CRASH" and "SIGABRT" in c["reason"]
    assert "injected crash" in c["log_tail"]
    assert out[(reference.name, "interleaved_models")]["outcome"] == "SUCCESS"


def test_hang_is_reported_within_the_deadline(tmp_path, no_strays):
    out = suite(tmp_path, [fault("faulty:hang@prepare")], ["model_loading"], deadline_s=6.0, heartbeat_s=60.0,
                liveness=False)
    r = out[("faulty-hang-prepare", "model_loading")]
    assert r["outcome"] == "HANG" and "deadline of 6 s" in r["reason"]
    assert r["duration_s"] <= 6.0 + 2.0


def test_crashing_service_is_a_failure_with_dead_object(tmp_path, no_strays):
    out = suite(tmp_path, [fault("faulty:crash@execute")], ["parallel_inference"])
    r = out[("faulty-crash-execute", "parallel_inference")]
    assert r["outcome"] == "FAILURE" and "DEAD_OBJECT" in r["reason"]


def test_wrong_results_fail_random_graphs_and_accuracy_checks(tmp_path, no_strays):
    small, large = fault("faulty:wrong-small@execute"), fault("faulty:wrong-large@execute")
    out = suite(tmp_path, [small, large], ["interleaved_models", "random_graphs"])
    for target in (small, large):
        r = out[(target.name, "random_graphs")]
        assert r["outcome"] == "FAILURE" and "--replay" in r["reason"]
        assert (tmp_path / "failing_graphs").is_dir()
    # Accuracy against the reference over whole models: large errors always, small ones on the
    # quantized model (4 steps > the whole-model tolerance of 3).
    assert out[(large.name, "interleaved_models")]["outcome"] == "FAILURE"
    assert "wrong results" in out[(large.name, "interleaved_models")]["reason"]
    assert "convnet_u8" in out[(small.name, "interleaved_models")]["reason"]


def test_leak_fails_the_resource_check(tmp_path, no_strays):
    out = suite(tmp_path, [fault("faulty:leak@execute")], ["sustained_inference"])
    r = out[("faulty-leak-execute", "sustained_inference")]
    assert r["outcome"] == "FAILURE" and "RSS grows" in r["reason"] and "faulty-leak-execute leaks" in r["reason"]


def test_slow_fails_performance_degradation(tmp_path, no_strays):
    out = suite(tmp_path, [fault("faulty:slow@execute?factor=6")], ["performance_degradation"],
                overrides={"performance_degradation": {"attempts": 1, "min_samples": 3}})
    r = out[("faulty-slow-execute-factor6", "performance_degradation")]
    assert r["outcome"] == "FAILURE" and "slower than nnapi-reference" in r["reason"]
