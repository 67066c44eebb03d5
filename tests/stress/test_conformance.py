"""The conformance tests through the suite (each test in a watched process): every check passes (or is
n/a where an optional feature is missing) on healthy drivers -- nnapi-reference in-process, the sample
driver hosted as a service, mlts-fast -- and each feature's seeded fault in the fault-injecting driver
fails exactly that feature's test, with the check that caught it named. The vendor-style partial drivers
(tests/partial_drivers.py), hosted in a service and in-process: npu-timing (timing although not asked)
and npu-early (completion signalled before the outputs are written) fail the execution paths with their
rule named, npu-correct passes."""
from __future__ import annotations

import pytest

import partial_drivers
from mlts.benchmark.records import read_results
from mlts.cli import main
from mlts.runtime.drivers.faulty import parse_spec
from mlts.stress.catalog import CONFORMANCE_TESTS, select_tests
from mlts.stress.drivers import ALL_DEVICES, Target
from mlts.stress.suite import SuiteConfig, run_suite

SAMPLE_ALL = "mlts.runtime.drivers.sample:sample_all"
FEATURES = [t.name for t in CONFORMANCE_TESTS]
#: feature test -> (seeded fault, a check that must catch it)
SEEDED = {
    "conformance_control_flow": ("faulty:wrong-branch@control-flow", "IF with a true condition runs the then branch"),
    "conformance_deadlines": ("faulty:ignores-deadline@execute", "execution with a deadline already passed is refused"),
    "conformance_memory_domains": ("faulty:accepts-foreign-token@memory",
                                   "another model's request naming the token is refused"),
    "conformance_caching": ("faulty:stale-cache@prepare", "another model's cache under this token is not used"),
    "conformance_execution_paths": ("faulty:ignores-fences@fenced",
                                    "the driver waits for its fences before reading inputs"),
}


def run(tmp_path, targets, tests=FEATURES, specs=()) -> dict[tuple[str, str], dict]:
    by_name = {t.name: t for t in CONFORMANCE_TESTS}
    config = SuiteConfig(run_dir=tmp_path, targets=targets, tests=[by_name[t] for t in tests], specs=list(specs))
    records = run_suite(config, progress=lambda line: None)
    written = [r for r in read_results(tmp_path).records if r["kind"] == "stress"]
    assert len(written) == len(records)
    return {(r["driver"], r["test"]): r for r in written}


def verdicts(record: dict) -> dict[str, str]:
    return {c["check"]: c["verdict"] for c in record["details"]["checks"]}


def test_healthy_drivers_pass_every_conformance_test(tmp_path, no_strays):
    targets = [Target("nnapi-reference"), Target("sample-all", SAMPLE_ALL, "service"), Target("mlts-fast"),
               Target(ALL_DEVICES)]
    out = run(tmp_path, targets)
    assert {k[0] for k in out} == {"nnapi-reference", "sample-all", "mlts-fast"}  # none for all-devices
    # mlts-fast has no control flow, memory domains or caching: every check of those is n/a, so nothing of
    # the driver was tested there: SKIPPED (never SUCCESS), naming the feature, with the checks listed
    lacking = {"conformance_control_flow": "control flow", "conformance_caching": "compilation caching",
               "conformance_memory_domains": "memory domains"}
    for (driver, test), r in out.items():
        assert r["group"] == "conformance"
        assert set(verdicts(r).values()) <= {"pass", "n/a"}
        if driver == "mlts-fast" and test in lacking:
            assert r["outcome"] == "SKIPPED", (test, r["outcome"], r["reason"])
            assert r["reason"] == f"mlts-fast does not support {lacking[test]}: nothing to check"
            assert set(verdicts(r).values()) == {"n/a"}
        else:
            assert r["outcome"] == "SUCCESS", (driver, test, r["reason"], r["log_tail"])
    for driver in ("nnapi-reference", "sample-all"):  # kernel drivers offer every optional feature
        for test in FEATURES:
            assert set(verdicts(out[(driver, test)]).values()) == {"pass"}, (driver, test)
    fast = {test: verdicts(out[("mlts-fast", test)]) for test in FEATURES}
    assert fast["conformance_memory_domains"]["a buffer round-trips copy_from / copy_to"] == "n/a"
    assert fast["conformance_validation"].pop("allocate refuses invalid roles") == "n/a"
    assert set(fast["conformance_validation"].values()) == {"pass"}
    assert set(fast["conformance_execution_paths"].values()) == {"pass"}
    assert out[("nnapi-reference", "conformance_validation")]["details"]["counts"]["pass"] >= 14


@pytest.mark.slow
def test_each_seeded_fault_fails_its_feature_and_only_it(tmp_path, no_strays):
    specs = [spec for spec, _ in SEEDED.values()]
    targets = [Target(parse_spec(spec).name, spec, "in-process") for spec in specs]
    out = run(tmp_path, targets, specs=specs)
    for feature, (spec, check) in SEEDED.items():
        name = parse_spec(spec).name
        caught = out[(name, feature)]
        assert caught["outcome"] == "FAILURE", (spec, caught["reason"])
        assert verdicts(caught)[check] == "fail" and check in caught["reason"]
        others = {t: out[(name, t)]["outcome"] for t in FEATURES if t != feature}
        assert set(others.values()) == {"SUCCESS"}, (spec, others)


@pytest.mark.parametrize("hosting", ["service"])
def test_seeded_faults_are_caught_in_a_driver_service(tmp_path, no_strays, hosting):
    """The same faults hosted out of process: the conformance checks see them across the IPC boundary."""
    chosen = ["conformance_memory_domains", "conformance_execution_paths"]
    specs = [SEEDED[t][0] for t in chosen]
    targets = [Target(parse_spec(spec).name, spec, hosting) for spec in specs]
    out = run(tmp_path, targets, tests=chosen, specs=specs)
    for feature in chosen:
        spec, check = SEEDED[feature]
        r = out[(parse_spec(spec).name, feature)]
        assert r["outcome"] == "FAILURE" and verdicts(r)[check] == "fail", (spec, r["reason"], r["log_tail"])


def test_conformance_group_in_the_cli(capsys):
    assert [t.name for t in select_tests(["conformance"], False)] == FEATURES
    assert select_tests(["conformance_caching,random_graphs"], False)[-1].name == "conformance_caching"
    assert all(t.per_driver for t in CONFORMANCE_TESTS)
    assert not any(t.group == "conformance" for t in select_tests(None, False) + select_tests(None, True))
    assert main(["conformance", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in FEATURES) and "random_graphs" not in out
    assert main(["conformance", "--tests", "random_graphs"]) == 1
    assert "stress tests, not conformance tests" in capsys.readouterr().err
    assert main(["stress", "--list", "--tests", "conformance"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in FEATURES)


def test_mlts_conformance_end_to_end(tmp_path, no_strays, capsys):
    """A failing driver fails the run (exit 1); the records, JUnit XML and the report's Conformance section."""
    run_dir = tmp_path / "run"
    rc = main(["conformance", "--include-reference", "--driver", "faulty:wrong-branch@control-flow",
               "--drivers", "nnapi-reference,faulty-wrong-branch-control-flow", "--tests",
               "conformance_control_flow", "--out", str(run_dir)])
    assert rc == 1
    records = {r["driver"]: r for r in read_results(run_dir).records if r["kind"] == "stress"}
    assert records["nnapi-reference"]["outcome"] == "SUCCESS"
    assert records["faulty-wrong-branch-control-flow"]["outcome"] == "FAILURE"
    html = (run_dir / "index.html").read_text()
    assert 'id="conformance"' in html and "IF with a true condition runs the then branch" in html
    assert "conformance_control_flow" in (run_dir / "junit-stress.xml").read_text()


PATHS = "conformance_execution_paths"
EARLY_CHECKS = {"asynchronous execution signals completion after writing its outputs",
                "the driver's asynchronous execution signals completion after writing its outputs"}
#: bug -> (checks that must fail, checks that may fail too, what each failing detail says)
PARTIAL_BUGS = {
    "timing": ({"HAL timing: none when measure=False (sync, async, burst, fenced)"}, set(),
               "timing returned although measure=False"),
    "early": (EARLY_CHECKS, {"the driver's asynchronous execution"},  # its outputs are not there yet either
              "signalled completion before its outputs were written"),
}


def conformance_cli(tmp_path, bug: str, hosting: str, tests: str = PATHS) -> tuple[int, dict]:
    out = tmp_path / f"{bug}-{hosting}"
    rc = main(["conformance", "--driver", partial_drivers.spec(bug), "--drivers", f"npu-{bug}", "--tests", tests,
               "--out", str(out)] + (["--in-process"] if hosting == "in-process" else []))
    return rc, {r["test"]: r for r in read_results(out).records if r["kind"] == "stress"}


@pytest.mark.parametrize("hosting", ["service", "in-process"])
@pytest.mark.parametrize("bug", sorted(PARTIAL_BUGS))
def test_partial_driver_bugs_fail_execution_paths_naming_the_rule(tmp_path, no_strays, bug, hosting):
    """A vendor's partial driver with one bug, hosted either way: `mlts conformance` exits 1, and the
    failing checks are the rule's, each detail naming the cause."""
    must, may, says = PARTIAL_BUGS[bug]
    rc, records = conformance_cli(tmp_path, bug, hosting)
    record = records[PATHS]
    assert rc == 1 and record["outcome"] == "FAILURE", record["reason"]
    failed = {c["check"]: c["detail"] for c in record["details"]["checks"] if c["verdict"] == "fail"}
    assert must <= set(failed) <= must | may, failed
    assert all(says in failed[check] for check in must), failed


def test_the_correct_partial_driver_passes_execution_paths_in_process(tmp_path, no_strays):
    rc, records = conformance_cli(tmp_path, "correct", "in-process")
    assert rc == 0 and set(verdicts(records[PATHS]).values()) == {"pass"}, records[PATHS]["reason"]


def test_the_correct_partial_driver_passes_every_conformance_test_in_a_service(tmp_path, no_strays):
    rc, records = conformance_cli(tmp_path, "correct", "service", "conformance")
    assert rc == 0 and set(records) == set(FEATURES)
    skipped = {test for test, record in records.items() if record["outcome"] == "SKIPPED"}
    # the NPU driver offers none of the optional features: those tests tested nothing of it
    assert skipped == {"conformance_control_flow", "conformance_caching", "conformance_memory_domains"}
    for test, record in records.items():
        assert record["outcome"] == ("SKIPPED" if test in skipped else "SUCCESS"), (test, record["reason"])
        seen = set(verdicts(record).values())
        assert seen == {"n/a"} if test in skipped else "pass" in seen and seen <= {"pass", "n/a"}, test
    assert set(verdicts(records[PATHS]).values()) == {"pass"}  # nothing optional about execution paths


def test_a_dead_service_leaves_its_last_words_in_the_record(tmp_path, no_strays):
    """faulty:crash@execute in its service (the default): the records say how it died and what it wrote."""
    spec = "faulty:crash@execute"
    out = run(tmp_path, [Target(parse_spec(spec).name, spec, "service")], tests=[PATHS], specs=[spec])
    record = out[(parse_spec(spec).name, PATHS)]
    assert record["outcome"] == "FAILURE"
    assert "DEAD_OBJECT" in record["reason"] and "died (signal SIGABRT) during execute" in record["reason"]
    assert "its last output: faulty-crash-execute: injected crash in execution (os.abort)" in record["reason"]
