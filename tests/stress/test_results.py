"""Stress records: resumable in results.jsonl next to benchmark records, rendered in the HTML report's
stress section, and well-formed JUnit XML."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from mlts.benchmark.records import read_results
from mlts.benchmark.results_writer import ResultsWriter
from mlts.report import render_report
from mlts.stress.junit import junit_xml, write_junit
from mlts.stress.suite import outcome_counts


def stress_record(driver: str, test: str, outcome: str, reason: str = "", tail: str = "") -> dict:
    return {"kind": "stress", "schema_version": 1, "driver": driver, "test": test, "outcome": outcome,
            "duration_s": 1.25, "reason": reason, "log_tail": tail, "details": {"executions": 3}}


RECORDS = [
    stress_record("mlts-fast", "random_graphs", "SUCCESS"),
    stress_record("mlts-fast", "corner_cases", "FAILURE", "huge_dimensions: MemoryError escaped the API",
                  "Traceback ...\nMemoryError"),
    stress_record("faulty-hang-execute", "interleaved_models", "HANG", "no heartbeat for 30 s; killed"),
    stress_record("faulty-crash-execute", "parallel_inference", "CRASH", "the test process died (signal SIGABRT)",
                  "Fatal Python error: Aborted \x07<bell>"),
]


def test_stress_records_resume_by_driver_and_test(tmp_path):
    with ResultsWriter(tmp_path) as w:
        w.write({"kind": "benchmark", "schema_version": 1, "model": "m", "driver": "d", "status": "error",
                 "message": "x"})
        for r in RECORDS:
            w.write(r)
        run_id = w.run_id
    with ResultsWriter(tmp_path) as w:
        assert w.run_id == run_id
        assert w.is_done(("stress", "mlts-fast", "random_graphs"))
        assert w.is_done(stress_record("faulty-hang-execute", "interleaved_models", "SUCCESS"))
        assert not w.is_done(("stress", "mlts-fast", "parallel_inference"))
        assert w.is_done(("m", "d", "sync", "FAST_SINGLE_ANSWER"))  # benchmark keys unchanged
    with ResultsWriter(tmp_path, retry_errors=True) as w:  # a retry reruns what did not succeed
        assert w.is_done(("stress", "mlts-fast", "random_graphs"))
        assert not w.is_done(("stress", "mlts-fast", "corner_cases"))
    stress = [r for r in read_results(tmp_path).records if r["kind"] == "stress"]
    assert [r["outcome"] for r in stress] == ["SUCCESS", "FAILURE", "HANG", "CRASH"]
    assert all(r["run_id"] == run_id and r["timestamp"] for r in stress)
    assert outcome_counts(stress) == {"SUCCESS": 1, "SKIPPED": 0, "FAILURE": 1, "HANG": 1, "CRASH": 1}


def test_records_render_in_the_report(tmp_path):
    with ResultsWriter(tmp_path) as w:
        for r in RECORDS:
            w.write(r)
    html = render_report(tmp_path, tmp_path / "index.html").read_text()
    assert 'id="stress"' in html
    for r in RECORDS:
        assert r["test"] in html and r["driver"] in html
    assert "MemoryError escaped the API" in html and "o-CRASH" in html and "o-HANG" in html


def test_junit_xml_is_well_formed(tmp_path):
    path = write_junit(RECORDS, tmp_path / "sub" / "junit.xml")
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "1", "2")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"mlts.stress.mlts-fast", "mlts.stress.faulty-hang-execute",
                           "mlts.stress.faulty-crash-execute"}
    fast = suites["mlts.stress.mlts-fast"]
    assert (fast.get("tests"), fast.get("failures"), fast.get("errors")) == ("2", "1", "0")
    cases = {c.get("name"): c for c in fast.findall("testcase")}
    assert cases["random_graphs"].find("failure") is None
    failure = cases["corner_cases"].find("failure")
    assert failure.get("message").startswith("huge_dimensions") and "MemoryError" in failure.text
    crash = suites["mlts.stress.faulty-crash-execute"].find("testcase/error")
    assert crash.get("type") == "CRASH" and "\x07" not in crash.text  # control characters made XML-safe
    assert junit_xml([]).startswith("<?xml")
