"""The watchdog: runs one stress test in a child process and decides its outcome.

The child (`python -m mlts.stress.child JOB FD`) is the leader of a new session and process group,
so that everything it starts (driver services, client processes) can be killed with it. It writes
JSON lines on the pipe FD: heartbeats (progress) and one result. The parent decides:

- SUCCESS / SKIPPED / FAILURE: the first result line the child reports (later lines, or a crash after it,
  change nothing: the first outcome reported wins);
- HANG: no result by the deadline, or no heartbeat for `heartbeat_s`; the whole tree is killed;
- CRASH: the child died (signal, or exit) without reporting a result.

Whatever the outcome, the child's process group and every descendant ever seen are killed before
`run_watched` returns, so a test leaves no stray processes behind.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from .. import childproc

SUCCESS, FAILURE, HANG, CRASH = "SUCCESS", "FAILURE", "HANG", "CRASH"
SKIPPED = "SKIPPED"  # the test could not exercise the driver: never a SUCCESS
OUTCOMES = (SUCCESS, SKIPPED, FAILURE, HANG, CRASH)
POLL_S = 0.05
TREE_POLL_S = 0.25
EXIT_GRACE_S = 5.0  # how long a child that reported its result gets to exit by itself
LOG_TAIL_LINES = 30
LOG_TAIL_CHARS = 4000
CHILD_MODULE = "mlts.stress.child"


@dataclass
class WatchResult:
    """What the watchdog saw: the outcome, why, and the end of the child's log."""

    outcome: str
    reason: str
    duration_s: float
    log_tail: str = ""
    details: dict = field(default_factory=dict)
    exit_status: str = ""
    killed: int = 0  # processes the watchdog had to kill after the outcome was decided


def exit_description(returncode: int | None) -> str:
    """`signal SIGABRT` / `exit status 3`: how a process ended, in words."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


class TreeTracker:
    """Remembers every descendant of a process, so that orphans (re-parented to init when their
    parent dies) can still be found and killed. psutil.Process objects check the creation time, so
    a recycled pid is never mistaken for one of ours."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, psutil.Process] = {}
        self.poll()

    def poll(self) -> None:
        try:
            for p in psutil.Process(self.root).children(recursive=True):
                self.seen.setdefault(p.pid, p)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            pass
        for p in list(self.seen.values()):  # children of known orphans, too
            try:
                for c in p.children(recursive=True):
                    self.seen.setdefault(c.pid, c)
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                pass

    def alive(self) -> list[psutil.Process]:
        return [p for p in self.seen.values() if _still_running(p)]

    def kill_all(self, timeout: float = 5.0) -> int:
        """SIGKILL every remembered descendant still alive; returns how many there were."""
        self.poll()
        procs = self.alive()
        for p in procs:
            try:
                p.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        # Wait until each is dead. A killed orphan stays a zombie until init reaps it, which can take
        # seconds in a container; psutil.wait_procs would wait for that, but a zombie is already dead.
        end = time.monotonic() + timeout
        pending = procs
        while pending and time.monotonic() < end:
            pending = [p for p in pending if _still_running(p)]
            if pending:
                time.sleep(0.01)
        return len(procs)


def _still_running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _child_exit(pid: int) -> int | None:
    """The child's return code (Popen convention) if it has ended, without reaping it: while it is a
    zombie its pid, and so its process-group id, cannot be reused, so killpg stays safe."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return 0
    if info is None or info.si_pid == 0:
        return None
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def log_tail(path: Path, lines: int = LOG_TAIL_LINES, chars: int = LOG_TAIL_CHARS) -> str:
    """The last lines of a log file (what a report shows next to a failed test)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 4 * chars))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    text = "\n".join(data.splitlines()[-lines:])
    return text[-chars:]


def child_env(extra: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """The child's environment: ours, importing the same mlts as this process (mlts.childproc)."""
    env = childproc.child_env(extra, drop)
    env.setdefault("PYTHONFAULTHANDLER", "1")  # a fatal signal leaves a traceback in the log
    return env


def run_watched(job: dict[str, Any], *, deadline_s: float, heartbeat_s: float | None = None,
                log_path: str | os.PathLike | None = None, env: dict[str, str] | None = None,
                command: list[str] | None = None) -> WatchResult:
    """Run `job` (see mlts.stress.child) in a watched child process; never raises for what the child does.

    `command` replaces the child command line (tests use it to run arbitrary programs); the job file
    path and the pipe's fd number are appended to it.
    """
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="mlts-stress-", suffix=".log")
        os.close(fd)
        log_path = name
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    job_path = log_path.with_suffix(".job.json")
    job_path.write_text(json.dumps(job), encoding="utf-8")
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    argv = list(command) if command else childproc.module_command(CHILD_MODULE)
    try:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(argv + [str(job_path), str(write_fd)], stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=log, pass_fds=(write_fd,), start_new_session=True,
                                    env=env if env is not None else child_env(), close_fds=True)
    except OSError as e:
        os.close(read_fd)
        os.close(write_fd)
        return WatchResult(CRASH, f"the test process could not be started: {e}", 0.0, log_tail(log_path))
    os.close(write_fd)
    try:
        return _watch(proc, read_fd, started, deadline_s, heartbeat_s, log_path)
    except BaseException:  # Ctrl-C or a bug here: the tree must not outlive us
        _kill_group(proc.pid)
        TreeTracker(proc.pid).kill_all(timeout=1.0)
        proc.kill()
        proc.wait()
        raise
    finally:
        os.close(read_fd)


def _watch(proc: subprocess.Popen, read_fd: int, started: float, deadline_s: float, heartbeat_s: float | None,
           log_path: Path) -> WatchResult:
    tracker = TreeTracker(proc.pid)
    sel = selectors.DefaultSelector()
    sel.register(read_fd, selectors.EVENT_READ)
    buffer = b""
    first: tuple[str, str, dict] | None = None  # (outcome, reason, details)
    decided_at: float | None = None
    last_beat = started
    last_tree_poll = 0.0
    eof = False
    returncode: int | None = None

    def take(line: bytes) -> None:
        nonlocal first, decided_at, last_beat
        try:
            msg = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            return
        if not isinstance(msg, dict):
            return
        last_beat = time.monotonic()
        if msg.get("type") == "result" and first is None:
            outcome = msg.get("outcome") if msg.get("outcome") in (SUCCESS, SKIPPED, FAILURE) else FAILURE
            details = msg.get("details") if isinstance(msg.get("details"), dict) else {}
            first = (outcome, str(msg.get("reason") or ""), details)
            decided_at = last_beat

    while True:
        now = time.monotonic()
        if first is None:
            if now - started >= deadline_s:
                first = (HANG, f"no result within the deadline of {deadline_s:g} s; the process tree was killed", {})
                break
            if heartbeat_s is not None and now - last_beat >= heartbeat_s:
                first = (HANG, f"no heartbeat for {heartbeat_s:g} s; the process tree was killed", {})
                break
        elif decided_at is not None and now - decided_at >= EXIT_GRACE_S:
            break  # it reported, then did not exit: its result stands, the tree is killed below
        if not eof:
            for _ in sel.select(POLL_S):
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    eof = True
                    sel.unregister(read_fd)
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    take(line)
        else:
            time.sleep(POLL_S)
        if now - last_tree_poll >= TREE_POLL_S:
            tracker.poll()
            last_tree_poll = now
        returncode = _child_exit(proc.pid)
        if returncode is not None:
            # Drain what it wrote before it ended (a result just before a crash still wins).
            while not eof and sel.select(0):
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    eof = True
                    break
                buffer += chunk
            for line in buffer.split(b"\n"):
                take(line)
            buffer = b""
            break
    tracker.poll()
    killed = len(tracker.alive())
    _kill_group(proc.pid)  # safe: the child is not reaped yet, so its pgid cannot have been reused
    tracker.kill_all()  # and those that left the group (a new session, a double fork)
    if returncode is None:
        proc.kill()
    proc.wait()
    duration = time.monotonic() - started
    if first is None:
        first = (CRASH, f"the test process died ({exit_description(proc.returncode)}) without reporting a result", {})
    outcome, reason, details = first
    return WatchResult(outcome, reason, duration, log_tail(log_path), details, exit_description(proc.returncode),
                       killed)


__all__ = ["CRASH", "FAILURE", "HANG", "OUTCOMES", "SKIPPED", "SUCCESS", "TreeTracker", "WatchResult", "child_env",
           "exit_description", "log_tail", "run_watched"]
