"""The client's side of rings: a run writes its command into shared memory, wakes the service's ring
thread through an eventfd and waits on its own eventfd in the calling thread, with no other thread
in between (the channel's reader thread only learns of deaths).

A wait first polls the answer's sequence number for the ring's window (ring.poll_window_ns), then
sleeps on the eventfd in POLL_S periods so that a dead or silent service is noticed as on the channel: the
same DEAD_OBJECT errors (with the service's last output), the call timeout's kill, and
MISSED_DEADLINE_TRANSIENT past the deadline plus a grace period. A run given up at its deadline
leaves the ring busy until the service answers it; runs meanwhile go through the channel.
"""
from __future__ import annotations

import itertools
import os
import select
import threading
import time
import weakref
from typing import Any

from ..enums import ResultCode
from ..errors import MltsError
from ..hal import CallTiming, ExecutionResult
from .client import DEADLINE_GRACE_S, POLL_S, Connection
from .ring import (CLOSED, DEADLINE, HAS_DEADLINE, POLL_NS, REQ_SEQ, RESP_KIND, RESP_SEQ, RETRY, Ring,
                   poll_until, poll_window_ns)

POLL_MS = int(POLL_S * 1000)

_keys = itertools.count(1)


class _Waiter:
    """A ring's run among the connection's pending calls: a death or close sets `error` and wakes the run
    by writing its eventfd (never after the ring is closed)."""

    __slots__ = ("method", "error", "event", "_fd", "_lock", "__weakref__")

    def __init__(self, method: str, fd: int) -> None:
        self.method = method
        self.error: MltsError | None = None
        self.event = self
        self._fd = fd
        self._lock = threading.Lock()

    def set(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.eventfd_write(self._fd, 1)

    def detach(self) -> None:
        with self._lock:
            self._fd = -1


class RingClient:
    """The client's end of one ring; one run at a time (callers hold `lock`)."""

    def __init__(self, conn: Connection, method: str) -> None:
        self.conn = conn
        self.method = method  # "execute" or "burst_execute": as the channel call would be named in errors
        self.poll_ns = poll_window_ns()
        self.ring = Ring.create()
        self.ring.words[POLL_NS] = self.poll_ns
        self.key = -next(_keys)
        self.waiter = _Waiter(method, self.ring.answer_fd)
        self.lock = threading.Lock()
        self.seq = 0
        self.shapes: dict = {}
        self._poller = select.poll()
        self._poller.register(self.ring.answer_fd, select.POLLIN)
        self._finalizer = weakref.finalize(self, _close_ring, self.ring, self.waiter, os.getpid())

    @property
    def ready(self) -> bool:
        """The service has answered every command (none given up at its deadline is still running)."""
        return not self.ring.closed and self.ring.words[RESP_SEQ] == self.seq

    def run(self, deadline: float | None) -> tuple[Any, int, int]:
        """One command (its other words written by the caller): (the result or RETRY, microseconds in the
        driver, microseconds for the round trip). Raises MltsError as a channel call would."""
        conn, ring = self.conn, self.ring
        conn.watch(self.key, self.waiter)
        try:
            w = ring.words
            if deadline is None:
                w[HAS_DEADLINE] = 0
            else:
                w[HAS_DEADLINE] = 1
                ring.floats[DEADLINE] = deadline
            seq = self.seq = self.seq + 1
            start = time.perf_counter_ns()
            w[REQ_SEQ] = seq
            os.eventfd_write(ring.request_fd, 1)
            self._wait(seq, deadline)
            round_trip_us = (time.perf_counter_ns() - start) // 1000
        finally:
            conn.unwatch(self.key)
        if w[RESP_KIND] == RETRY:
            return RETRY, 0, round_trip_us
        result, driver_us = ring.read_result(self.shapes)
        return result, driver_us, round_trip_us

    def _wait(self, seq: int, deadline: float | None) -> None:
        w = self.ring.words
        if self.poll_ns and poll_until(w, RESP_SEQ, seq - 1, self.poll_ns) and w[RESP_SEQ] == seq:
            if self.waiter.error is not None:  # answered, but the service died or was closed meanwhile
                raise self.waiter.error
            return
        poll, fd, waiter = self._poller.poll, self.ring.answer_fd, self.waiter
        conn = self.conn
        timeout = conn.call_timeout
        kill_at = None if timeout is None else time.monotonic() + timeout
        give_up_at = None if deadline is None else deadline + DEADLINE_GRACE_S
        while w[RESP_SEQ] != seq:
            if waiter.error is not None:
                raise waiter.error
            if poll(POLL_MS):
                try:
                    os.eventfd_read(fd)
                except BlockingIOError:
                    pass
                continue
            if w[RESP_SEQ] == seq or conn.check_silence(self.method, kill_at, timeout):
                continue
            if give_up_at is not None and time.monotonic() >= give_up_at:
                raise MltsError(ResultCode.MISSED_DEADLINE_TRANSIENT,
                                f"driver service '{conn.label}' did not answer {self.method} by its deadline")
        if waiter.error is not None:  # answered, but the service died or was closed meanwhile: as the channel
            raise waiter.error

    def close(self) -> None:
        """Tells the service's ring thread to exit, and releases this side (never blocks)."""
        self._finalizer()


def _close_ring(ring: Ring, waiter: _Waiter, owner_pid: int) -> None:
    waiter.detach()
    if os.getpid() == owner_pid and not ring.closed:  # a forked child must not close its parent's ring
        try:
            ring.words[CLOSED] = 1
            os.eventfd_write(ring.request_fd, 1)
        except (OSError, ValueError):
            pass
    ring.close()


def timed(result: Any, start_ns: int, staged_ns: int, back_ns: int, driver_us: int, round_trip_us: int) -> Any:
    """CallTiming on a ring's result, as run_remote puts on a channel call's: the staging copies are the
    runtime's, the round trip less the driver's time is IPC."""
    if isinstance(result, ExecutionResult):
        runtime_us = (staged_ns - start_ns + time.perf_counter_ns() - back_ns) // 1000
        result.call_timing = CallTiming(runtime=runtime_us, ipc=max(0, round_trip_us - driver_us), driver=driver_us)
    return result


def failed(e: MltsError) -> ExecutionResult:
    return ExecutionResult(e.code, [], message=e.message)

