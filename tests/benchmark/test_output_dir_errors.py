"""An output directory that cannot be written (a regular file in the way, read-only, a full disk) is one
line, `mlts <command>: error: cannot write <path>: <cause>`, exit status 1: never a traceback, never a
partial record line in results.jsonl, never a partial index.html or run.json (issue 12).

We run as root, for whom permissions never fail, and CI may not mount file systems, so the failures are
real where they can be (a path through a regular file) and otherwise injected into the command's own
process: os.write / os.fsync / os.mkdir / os.open raise the OSError the kernel would (ENOSPC, EROFS).
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mlts.benchmark.records import RESULTS_FILE, new_run_dir, read_results
from mlts.benchmark.results_writer import ResultsWriter
from mlts.fileio import WriteError, atomic_write, make_dir
from mlts.report.render import render_report

MLTS = str(Path(sys.executable).with_name("mlts"))
TINY = "mobilenet_v1_0.25_128"


def _record(i: int) -> dict:
    return {"schema_version": 1, "kind": "benchmark", "model": f"m{i}", "driver": "d", "status": "error",
            "message": "x" * 200}


# --- the writing side, in-process ------------------------------------------------------------------

def test_a_record_write_that_fails_half_way_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    writer = ResultsWriter(tmp_path)
    writer.write(_record(1))
    writer.write(_record(2))
    before = (tmp_path / RESULTS_FILE).read_bytes()
    real_write = os.write
    calls = []

    def half_then_full(fd, data):  # a short write, then the disk is full
        if fd != writer._fd:
            return real_write(fd, data)
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(WriteError) as info:
        writer.write(_record(3))
    assert str(info.value.message) == f"cannot write {tmp_path / RESULTS_FILE}: No space left on device"
    assert len(calls) == 2  # half of the line did reach the file before it was cut off again
    assert (tmp_path / RESULTS_FILE).read_bytes() == before
    monkeypatch.setattr(os, "write", real_write)
    writer.write(_record(3))  # space again: the writer goes on, one whole line
    writer.close()
    assert [r["model"] for r in read_results(tmp_path).records] == ["m1", "m2", "m3"]


def test_a_failed_fsync_also_takes_the_record_back(tmp_path, monkeypatch):
    writer = ResultsWriter(tmp_path)
    writer.write(_record(1))
    before = (tmp_path / RESULTS_FILE).read_bytes()
    real_fsync = os.fsync

    def failing(fd):
        if fd == writer._fd:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(WriteError, match="Input/output error"):
        writer.write(_record(2))
    writer.close()
    assert (tmp_path / RESULTS_FILE).read_bytes() == before


def test_run_directories_under_a_regular_file(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    with pytest.raises(WriteError) as info:
        new_run_dir(blocker / "reports")
    assert info.value.message.startswith(f"cannot write {blocker / 'reports'}/")
    assert info.value.message.endswith(f": {blocker} is not a directory")
    with pytest.raises(WriteError, match=f"cannot write {blocker}: {blocker} is not a directory"):
        make_dir(blocker)
    with pytest.raises(WriteError, match="is not a directory"):
        ResultsWriter(blocker / "run")
    assert blocker.read_text() == "not a directory"


def test_atomic_writes_that_fail_leave_nothing_and_name_the_target(tmp_path, monkeypatch):
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as info:
        atomic_write(tmp_path / "run.json", "{}\n")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "run.json")
    (tmp_path / "results.jsonl").write_text(json.dumps(_record(1)) + "\n")
    with pytest.raises(WriteError) as info:
        render_report(tmp_path, tmp_path / "index.html")
    assert info.value.message == f"cannot write {tmp_path / 'index.html'}: No space left on device"
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl"]  # no temporary file left


# --- through the command line ----------------------------------------------------------------------

def _mlts(args: list[str], cwd: Path, inject: str = "") -> subprocess.CompletedProcess:
    """`mlts ARGS` in a fresh process, `inject` (Python) run first in it to make some writes fail."""
    code = textwrap.dedent(inject) + "\nimport sys\nfrom mlts.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def _one_error_line(proc: subprocess.CompletedProcess, command: str) -> str:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith(f"mlts {command}: error: ")]
    assert len(errors) == 1, proc.stderr
    assert proc.stderr.rstrip("\n").endswith(errors[0])  # the last thing said
    return errors[0]


COMMANDS = {
    "benchmark": ["benchmark", "--quick", "--models", TINY, "--drivers", "nnapi-reference"],
    "stress": ["stress", "--tests", "corner_cases", "--drivers", "mlts-fast"],
    "conformance": ["conformance", "--drivers", "mlts-fast"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_out_under_a_regular_file(tmp_path, command):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    out = blocker / "run"
    line = _one_error_line(_mlts([*COMMANDS[command], "--out", str(out)], tmp_path), command)
    assert line.startswith(f"mlts {command}: error: cannot write {out}: "), line
    assert line.endswith(("Not a directory", f"{blocker} is not a directory")), line


READ_ONLY_CWD = """
import errno, os
_ro = os.path.realpath(os.getcwd())
def _guard(real):
    def call(path, *args, **kwargs):
        p = os.path.realpath(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else None
        if p is not None and (p == _ro or p.startswith(_ro + os.sep)):
            if real is os.mkdir or (len(args) > 0 and args[0] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))
        return real(path, *args, **kwargs)
    return call
os.mkdir, os.open = _guard(os.mkdir), _guard(os.open)
"""


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_default_reports_dir_in_a_read_only_directory(tmp_path, command):
    line = _one_error_line(_mlts(COMMANDS[command], tmp_path, READ_ONLY_CWD), command)
    assert line.startswith(f"mlts {command}: error: cannot write reports/"), line
    assert line.endswith(": Read-only file system"), line
    assert list(tmp_path.iterdir()) == []


DISK_FULL_AT_SECOND_RECORD = """
import errno, os
_real, _seen = os.write, []
def write(fd, data):
    try:
        name = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        name = ""
    if name.endswith("results.jsonl"):
        _seen.append(fd)
        if len(_seen) == 2:   # the second record: half of it fits
            return _real(fd, bytes(data[:len(data) // 2]))
        if len(_seen) > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return _real(fd, data)
os.write = write
"""

DISK_FULL_AT_REPORT = """
import errno, os
_real = os.fsync
def fsync(fd):
    if "index.html" in os.readlink(f"/proc/self/fd/{fd}"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return _real(fd)
os.fsync = fsync
"""


def test_benchmark_on_a_disk_that_fills_up_mid_record(tmp_path):
    out = tmp_path / "run"
    args = ["benchmark", "--quick", "--models", TINY, "--drivers", "nnapi-reference,mlts-fast", "--images", "2",
            "--out", str(out)]
    line = _one_error_line(_mlts(args, tmp_path, DISK_FULL_AT_SECOND_RECORD), "benchmark")
    assert line == f"mlts benchmark: error: cannot write {out / RESULTS_FILE}: No space left on device"
    data = (out / RESULTS_FILE).read_bytes()
    assert data.endswith(b"\n") and data.count(b"\n") == 1  # the first record whole, nothing of the second
    assert read_results(out).records[0]["driver"] == "nnapi-reference"
    assert json.loads((out / "run.json").read_text())["finished"] is None
    assert not (out / "index.html").exists() and not list(out.glob(".*.tmp"))


def test_benchmark_whose_report_does_not_fit(tmp_path):
    out = tmp_path / "run"
    args = ["benchmark", "--quick", "--models", TINY, "--drivers", "nnapi-reference", "--images", "2",
            "--out", str(out)]
    line = _one_error_line(_mlts(args, tmp_path, DISK_FULL_AT_REPORT), "benchmark")
    assert line == f"mlts benchmark: error: cannot write {out / 'index.html'}: No space left on device"
    assert not (out / "index.html").exists() and not list(out.glob(".*.tmp"))
    assert len(read_results(out).records) == 1  # the results are safe
    assert json.loads((out / "run.json").read_text())["finished"]
