"""The watchdog on its own: small child programs that succeed, fail, hang, stop beating, crash, report
twice, or leave processes behind; every outcome within its time bound and no process left over."""
from __future__ import annotations

import sys
import textwrap
import time

import pytest

from mlts.stress.watchdog import CRASH, FAILURE, HANG, SUCCESS, run_watched

PRELUDE = """
import json, os, subprocess, sys, time
fd = int(sys.argv[-1])
def send(**m):
    os.write(fd, (json.dumps(m) + "\\n").encode())
"""


def watched(tmp_path, body: str, **kwargs):
    script = tmp_path / "child.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    kwargs.setdefault("deadline_s", 20.0)
    return run_watched({"test": "t"}, command=[sys.executable, str(script)], log_path=tmp_path / "child.log", **kwargs)


def test_success_with_details_and_log_tail(tmp_path, no_strays):
    r = watched(tmp_path, """
        print("hello from the child", file=sys.stderr, flush=True)
        send(type="hb")
        send(type="result", outcome="SUCCESS", reason="", details={"runs": 3})
    """)
    assert r.outcome == SUCCESS and r.details == {"runs": 3}
    assert "hello from the child" in r.log_tail
    assert r.exit_status == "exit status 0"


def test_failure_keeps_its_reason(tmp_path, no_strays):
    r = watched(tmp_path, """
        send(type="result", outcome="FAILURE", reason="wrong results: off by 4 steps")
    """)
    assert r.outcome == FAILURE and r.reason == "wrong results: off by 4 steps"


def test_hang_past_the_deadline_kills_the_whole_tree(tmp_path, no_strays):
    # The child starts a grandchild in its group and one in a session of its own (which a process-group
    # kill would miss); the watchdog must kill all three.
    start = time.monotonic()
    r = watched(tmp_path, """
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
        while True:
            send(type="hb")
            time.sleep(0.2)
    """, deadline_s=3.0, heartbeat_s=30.0)
    elapsed = time.monotonic() - start
    assert r.outcome == HANG and "deadline of 3 s" in r.reason
    assert elapsed <= 3.0 + 2.0
    assert r.killed >= 2  # the two grandchildren (the child itself is not counted)


def test_hang_without_heartbeat(tmp_path, no_strays):
    start = time.monotonic()
    r = watched(tmp_path, """
        send(type="hb")
        time.sleep(300)
    """, deadline_s=60.0, heartbeat_s=1.5)
    assert r.outcome == HANG and "no heartbeat for 1.5 s" in r.reason
    assert time.monotonic() - start <= 1.5 + 2.0 + 1.0  # + the child's start-up before its first beat


@pytest.mark.parametrize("body, status", [
    ("os.abort()", "signal SIGABRT"),
    ("import signal; os.kill(os.getpid(), signal.SIGSEGV)", "signal SIGSEGV"),
    ("sys.exit(3)", "exit status 3"),
    ("pass", "exit status 0"),  # ended without a result: still a crash of the test
])
def test_crash_without_a_result(tmp_path, no_strays, body, status):
    r = watched(tmp_path, body)
    assert r.outcome == CRASH and status in r.reason and r.exit_status == status


def test_first_outcome_wins_over_later_results_and_a_crash(tmp_path, no_strays):
    r = watched(tmp_path, """
        send(type="result", outcome="FAILURE", reason="first")
        send(type="result", outcome="SUCCESS", reason="second")
        os.abort()
    """)
    assert r.outcome == FAILURE and r.reason == "first"
    assert r.exit_status == "signal SIGABRT"


def test_a_result_then_a_hang_is_that_result(tmp_path, no_strays):
    start = time.monotonic()
    r = watched(tmp_path, """
        send(type="result", outcome="SUCCESS", reason="")
        time.sleep(300)
    """, deadline_s=60.0, heartbeat_s=60.0)
    assert r.outcome == SUCCESS
    assert time.monotonic() - start < 15  # killed after the exit grace, not at the deadline


def test_garbage_on_the_pipe_is_ignored(tmp_path, no_strays):
    r = watched(tmp_path, """
        os.write(fd, b"not json\\n[1, 2]\\n{\\"type\\": \\"result\\", \\"outcome\\": \\"BOGUS\\"}\\n")
    """)
    assert r.outcome == FAILURE  # an unknown outcome counts as a failure, never as a success
