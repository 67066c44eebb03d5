"""`mlts benchmark --resume DIR` never imports driver code that only DIR/run.json names: a run directory is
data (copied, downloaded, attached to a bug). The spec must be given again with --driver, or allowed with
--trust-run-dir (issue 12)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mlts.benchmark import runner as R
from mlts.benchmark.run_config import BenchmarkConfig
from mlts.benchmark.stats import QUICK

MLTS = str(Path(sys.executable).with_name("mlts"))
TINY = "mobilenet_v1_0.25_128"
REF = "nnapi-reference"


@pytest.fixture
def run_dir(tmp_path):
    """A finished run (so resuming runs no case) whose run.json names a driver file that, when imported,
    leaves a marker file behind."""
    marker = tmp_path / "imported.txt"
    driver = tmp_path / "vendor_driver.py"
    driver.write_text(textwrap.dedent(f"""
        from pathlib import Path
        Path({str(marker)!r}).write_text("imported")
        from mlts.runtime import Capabilities
        from mlts.runtime.drivers import KernelDriver

        def create_driver():
            return KernelDriver("vendor-probe", Capabilities.uniform(0.5, 0.5))
    """))
    run = tmp_path / "run"
    run.mkdir()
    config = BenchmarkConfig(models=[TINY], drivers=[REF], rules=QUICK, images=0, preset="quick")
    spec = f"{driver}:create_driver"
    (run / R.RUN_FILE).write_text(json.dumps({"config": config.to_dict(), "driver_specs": [spec, "sample"],
                                              "started": "2026-01-01T00:00:00Z", "finished": None}))
    done = {"schema_version": 1, "kind": "benchmark", "model": TINY, "driver": REF, "mode": "sync",
            "preference": "FAST_SINGLE_ANSWER", "status": "error", "message": "from an earlier run"}
    (run / "results.jsonl").write_text(json.dumps(done) + "\n")
    return run, spec, marker


def _resume(run: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([MLTS, "benchmark", "--resume", str(run), "--no-report", "--in-process", *extra],
                          capture_output=True, text=True, timeout=300, cwd=run.parent)


def test_a_recorded_driver_spec_is_refused_without_being_imported(run_dir):
    run, spec, marker = run_dir
    proc = _resume(run)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mlts benchmark: error: ")
    assert repr(spec) in lines[0] and f"--driver {spec}" in lines[0] and "--trust-run-dir" in lines[0]
    assert "'sample'" not in lines[0]  # mlts's own drivers are not foreign code
    assert not marker.exists()


@pytest.mark.parametrize("how", ["--driver", "--trust-run-dir"])
def test_the_spec_given_again_or_trusted_is_loaded(run_dir, how):
    run, spec, marker = run_dir
    extra = ["--driver", spec] if how == "--driver" else ["--trust-run-dir"]
    proc = _resume(run, *extra)
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "imported"
    assert "already done" in proc.stderr


def test_trust_run_dir_only_with_resume(tmp_path):
    proc = subprocess.run([MLTS, "benchmark", "--trust-run-dir", "--out", str(tmp_path / "x")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1 and "--trust-run-dir only applies with --resume" in proc.stderr
