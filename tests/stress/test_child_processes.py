"""Child processes import the mlts their parent runs whatever the current directory holds, die with
their parent, and nothing named inside a data file is imported unless the command line says so."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mlts import childproc

MLTS = [sys.executable, "-m", "mlts.cli"]


def _shadow(tmp_path: Path) -> Path:
    """A directory whose `mlts/` package is not mlts (what `python -m` would import from the cwd)."""
    fake = tmp_path / "cwd" / "mlts"
    (fake / "stress").mkdir(parents=True)
    (fake / "__init__.py").write_text("raise SystemExit('the mlts/ folder of the current directory was imported')\n")
    (fake / "stress" / "__init__.py").write_text("")
    (fake / "stress" / "child.py").write_text("raise SystemExit('shadowed child')\n")
    return fake.parent


def _env() -> dict[str, str]:
    return childproc.child_env()  # this test's own mlts importable, as an installed one would be


def test_module_command_ignores_a_mlts_folder_in_the_current_directory(tmp_path):
    cwd = _shadow(tmp_path)
    probe = "import mlts, sys; print(mlts.__file__)"
    plain = subprocess.run([sys.executable, "-c", probe], cwd=cwd, env=_env(), capture_output=True, text=True)
    assert plain.returncode != 0 and "current directory was imported" in plain.stderr  # the hazard is real
    ours = subprocess.run(childproc.module_command("mlts.childproc"), cwd=cwd, env=_env(), capture_output=True,
                          text=True)
    assert ours.returncode == 0, ours.stderr
    out = subprocess.run(childproc.module_command("json.tool", "--help"), cwd=cwd, env=_env(), capture_output=True,
                         text=True)
    assert out.returncode == 0 and "json.tool" in out.stdout + out.stderr  # arguments reach the module


def test_stress_children_import_the_parents_mlts_from_a_shadowing_directory(tmp_path):
    cwd = _shadow(tmp_path)
    out = tmp_path / "run"
    console = Path(sys.executable).with_name("mlts")  # the installed command, as a user runs it
    assert console.exists()
    proc = subprocess.run([str(console), "stress", "--quick", "--tests", "corner_cases", "--drivers", "mlts-fast",
                                  "--out", str(out), "--no-report", "--no-all-devices"],
                          cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["outcome"] == "SUCCESS" and record["driver"] == "mlts-fast"


def test_a_stress_worker_dies_with_its_parent(tmp_path):
    job = tmp_path / "job.fifo"
    os.mkfifo(job)  # the worker blocks reading its job, after arming PR_SET_PDEATHSIG
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen({childproc.module_command('mlts.stress.worker', str(job))!r}); "
        "print(p.pid, flush=True); time.sleep(120)")], stdout=subprocess.PIPE, text=True, env=_env())
    try:
        worker = psutil.Process(int(parent.stdout.readline()))
        time.sleep(1.0)  # let it import mlts and arm the signal
        assert worker.is_running()
        parent.kill()
        parent.wait()
        worker.wait(timeout=5)  # SIGKILLed with its parent, not 120 s later
    finally:
        parent.kill()
        for p in psutil.process_iter():
            try:
                if str(job) in " ".join(p.cmdline()):
                    p.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass


def test_replay_refuses_driver_code_named_inside_the_graph_file(tmp_path):
    marker = tmp_path / "imported"
    evil = tmp_path / "evil_driver.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('x')\ndef create():\n    raise SystemExit(1)\n")
    graph = {"format": "mlts-graph", "version": 1, "operands": [], "operations": [], "inputs": [], "outputs": [],
             "specs": [f"{evil}:create"], "target": {"name": "evil", "spec": f"{evil}:create", "hosting": "service"}}
    path = tmp_path / "g.graph.json"
    path.write_text(json.dumps(graph))
    proc = subprocess.run(MLTS + ["stress", "--replay", str(path)], capture_output=True, text=True, env=_env(),
                          timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"mlts stress: error: BAD_DATA: --replay: {path} names driver code to import ('{evil}:create'); it is "
        f"loaded only when given again (--driver {evil}:create) or with --trust-run-dir")
    assert not marker.exists() and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_conformance_speaks_with_its_own_prefix(tmp_path):
    proc = subprocess.run(MLTS + ["conformance", "--tests", "conformance_validation", "--drivers", "mlts-fast",
                                  "--out", str(tmp_path / "run"), "--no-report"],
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and all(line.startswith("mlts conformance: ") for line in lines), lines


@pytest.mark.slow
def test_sigterm_writes_the_report_of_what_finished(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(MLTS + ["stress", "--tests", "mmap_constants,sustained_inference", "--drivers", "mlts-fast",
                                    "--no-all-devices", "--out", str(out)],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env())
    try:
        for line in proc.stderr:  # the first test finished: stop the run in the second (30 s long)
            if "sustained_inference ..." in line:
                break
        time.sleep(2.0)
        proc.send_signal(15)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, stderr
    assert "interrupted (SIGTERM): reporting the tests that finished" in stderr and "Traceback" not in stderr
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["test"], r["outcome"]) for r in records] == [("mmap_constants", "SUCCESS")]
    assert (out / "index.html").exists() and 'tests="1"' in (out / "junit-stress.xml").read_text()
    assert stdout.strip() == str(out)


def test_driver_services_import_the_parents_mlts_from_a_shadowing_directory(tmp_path):
    cwd = _shadow(tmp_path)
    console = Path(sys.executable).with_name("mlts")
    proc = subprocess.run([str(console), "devices", "--driver", "faulty:slow@execute", "--json"], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    row = rows["faulty-slow-execute"]  # its capabilities came from a live driver service
    assert row["hosting"] == "service" and "error" not in row and row["capabilities"].startswith("0.5/0.5")
