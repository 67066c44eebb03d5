"""`mlts stress` end to end: the quick set on healthy drivers is all SUCCESS, a failing driver makes
the exit status non-zero, records land in results.jsonl, the report and JUnit XML, and a rerun on the
same directory resumes instead of repeating."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from mlts.cli import main
from mlts.runtime import devices


def stress_records(run_dir):
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()
            if json.loads(line)["kind"] == "stress"]


def test_list_and_bad_arguments(capsys):
    before = [d.name for d in devices()]
    assert main(["stress", "--list", "--quick", "--driver", "sample"]) == 0
    out = capsys.readouterr().out
    assert "sample-all" in out and "all-devices" in out and "nnapi-reference" not in out.split("\n")[0]
    assert "random_graphs" in out and "compile_many" not in out  # not in the quick set
    assert [d.name for d in devices()] == before  # listing registered nothing for good
    assert main(["stress", "--tests", "no_such_test"]) == 1
    assert "unknown no_such_test" in capsys.readouterr().err
    assert main(["stress", "--drivers", "nnapi-reference", "--list"]) == 1  # needs --include-reference
    assert main(["stress", "--duration-scale", "0"]) == 1


@pytest.mark.slow
def test_quick_set_on_healthy_drivers_is_all_success(tmp_path, no_strays):
    run_dir = tmp_path / "run"
    rc = main(["stress", "--quick", "--include-reference", "--driver", "sample", "--drivers",
               "nnapi-reference,sample-all", "--duration-scale", "0.5", "--out", str(run_dir)])
    records = stress_records(run_dir)
    outcomes = {(r["driver"], r["outcome"]) for r in records}
    assert outcomes == {("nnapi-reference", "SUCCESS"), ("sample-all", "SUCCESS")}, \
        [(r["driver"], r["test"], r["reason"]) for r in records if r["outcome"] != "SUCCESS"]
    assert rc == 0 and len(records) == 16
    assert 'id="stress"' in (run_dir / "index.html").read_text()
    root = ET.parse(run_dir / "junit-stress.xml").getroot()
    assert root.get("tests") == "16" and root.get("failures") == "0" and root.get("errors") == "0"


@pytest.mark.slow
def test_a_failing_driver_fails_the_run_and_resumes(tmp_path, no_strays, capsys):
    run_dir = tmp_path / "run"
    args = ["stress", "--quick", "--include-reference", "--driver", "faulty:wrong-large@execute", "--drivers",
            "faulty-wrong-large-execute,nnapi-reference", "--tests", "interleaved_models", "--out", str(run_dir)]
    assert main(args) == 1
    records = {r["driver"]: r for r in stress_records(run_dir)}
    assert records["faulty-wrong-large-execute"]["outcome"] == "FAILURE"
    assert records["nnapi-reference"]["outcome"] == "SUCCESS"
    html = (run_dir / "index.html").read_text()
    assert "faulty-wrong-large-execute" in html and "wrong results" in html
    failure = ET.parse(run_dir / "junit-stress.xml").getroot().find(".//failure")
    assert "wrong results" in failure.get("message")
    capsys.readouterr()
    assert main(args) == 1  # nothing runs again; the recorded failure still fails the run
    assert capsys.readouterr().err.count("done in an earlier run") == 2
    assert len(stress_records(run_dir)) == 2
