"""SIGTERM and SIGINT stop `mlts benchmark` as Ctrl-C does: the finished cases are written and reported,
run.json says the run was interrupted, and the exit status is 128 + the signal (issue 12)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlts.benchmark.records import read_results
from mlts.signals import Interrupted, exit_status, interrupt_on_signals

MLTS = str(Path(sys.executable).with_name("mlts"))
MODELS = "mobilenet_v1_0.25_128,mobilenet_v2_0.35_128"


def test_sigterm_raises_keyboard_interrupt_in_the_block_and_the_old_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt) as info:
        with interrupt_on_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts the sleep
    assert isinstance(info.value, Interrupted) and info.value.signum == signal.SIGTERM
    assert exit_status(info.value) == 143 and exit_status(KeyboardInterrupt()) == 130
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_ignored_signal_stays_ignored():
    old = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with interrupt_on_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # nothing raised: SIG_IGN was kept
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, old)


def _interrupted_run(tmp_path: Path, sig: int) -> tuple[subprocess.CompletedProcess, Path, str]:
    """A quick benchmark of two models on nnapi-reference, sent `sig` once its first case is written (each
    case in one piece, so that the first is written while the second runs)."""
    out = tmp_path / "run"
    cmd = [MLTS, "benchmark", "--quick", "--repeat", "1", "--models", MODELS, "--drivers", "nnapi-reference",
           "--out", str(out)]
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "w") as err:
        # A shell that ran these tests in the background ignores SIGINT in its children, and Python keeps an
        # ignored SIGINT ignored: give the run the default disposition a terminal's Ctrl-C meets.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=tmp_path,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 240
        while "[1/2]" not in err_path.read_text():
            assert proc.poll() is None, err_path.read_text()
            assert time.monotonic() < deadline, "the first case never finished"
            time.sleep(0.05)
        proc.send_signal(sig)
        stdout, _ = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, err_path.read_text()), out, stdout


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_mid_run_keeps_and_reports_the_finished_cases(tmp_path, sig, status):
    proc, out, stdout = _interrupted_run(tmp_path, sig)
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr
    name = signal.Signals(sig).name
    assert f"interrupted ({name})" in proc.stderr
    records = read_results(out).benchmark_records()
    assert len(records) == 1 and records[0]["model"] == "mobilenet_v1_0.25_128" and records[0]["status"] == "ok"
    run = json.loads((out / "run.json").read_text())
    assert run["interrupted"] is True and run["interrupted_by"] == name and run["finished"] is None
    assert (out / "results.csv").read_text().count("\n") == 2  # header + the finished case
    html = (out / "index.html").read_text()
    assert "mobilenet_v1_0.25_128" in html and "mobilenet_v2_0.35_128" not in html
    assert stdout.strip() == f"report: {out / 'index.html'}"
    assert not list(out.glob(".*.tmp"))
