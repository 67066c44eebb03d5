"""Sync fences: a one-shot completion signal that is an OS file descriptor (like Android's sync_file).

An Event of a fenced execution is backed by one, so that it can be exported as a file descriptor
(another library, thread or process waits on it with poll/select) and a descriptor signalled by
someone else can be imported as a dependency. On Linux the fence is an eventfd (one descriptor);
elsewhere a pipe (its read end is the fence). "Signalled" means "readable".

Status: the signaller writes SIGNALLED_OK (1) for success and SIGNALLED_ERROR for failure into an
eventfd. A waiter that needs the status (an imported eventfd) reads the counter and writes it back,
so the fence stays signalled for every other holder. Any other descriptor (a pipe, a socket) only
says "signalled" and is never read, so an imported one always reads as success.
"""
from __future__ import annotations

import os
import select
import threading
import time

SIGNALLED_OK = 1
SIGNALLED_ERROR = 1 << 40  # far above any count of plain "1" signals an outside signaller might add
HAS_EVENTFD = hasattr(os, "eventfd")


class SyncFence:
    """One fence: created unsignalled (or adopted from a descriptor), signalled at most once."""

    def __init__(self, fd: int | None = None, *, _write_fd: int | None = None) -> None:
        self._lock = threading.Lock()
        self._signalled_here = False
        if fd is not None:
            self._fd, self._write_fd, self._owns_write = fd, _write_fd, _write_fd is not None
        elif HAS_EVENTFD:
            self._fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            self._write_fd, self._owns_write = self._fd, False
        else:
            r, w = os.pipe()
            os.set_blocking(r, False)
            self._fd, self._write_fd, self._owns_write = r, w, True
        self.imported = fd is not None
        # Only an eventfd's status can be read and put back; never read another kind of descriptor.
        self._peekable = self.imported and HAS_EVENTFD and _is_eventfd(self._fd)
        self.closed = False

    @classmethod
    def adopt(cls, fd: int) -> "SyncFence":
        """A fence over `fd`, which this object now owns (callers pass a dup of their descriptor)."""
        return cls(fd)

    def fileno(self) -> int:
        return self._fd

    def dup(self) -> int:
        """A new descriptor on the same fence; the caller owns it and must close it."""
        return os.dup(self._fd)

    def signal(self, ok: bool = True) -> None:
        """Signal the fence once (later calls are ignored)."""
        with self._lock:
            if self._signalled_here or self.closed or self._write_fd is None:
                return
            self._signalled_here = True
            if HAS_EVENTFD and self._write_fd == self._fd:
                os.eventfd_write(self._fd, SIGNALLED_OK if ok else SIGNALLED_ERROR)
            else:
                os.write(self._write_fd, b"\x01" if ok else b"\x02")

    def wait(self, timeout: float | None = None) -> bool:
        """Block until signalled (True) or `timeout` seconds pass (False)."""
        if self._signalled_here:
            return True
        return wait_all([self._fd], timeout)

    @property
    def is_signalled(self) -> bool:
        return self._signalled_here or wait_all([self._fd], 0)

    def peek_status(self) -> bool:
        """For a signalled fence: True when it was signalled as a success."""
        if not self._peekable:
            return True
        with self._lock:
            try:
                value = os.eventfd_read(self._fd)
            except (BlockingIOError, OSError):
                return True  # not an eventfd, or another holder is peeking at this moment
            try:
                os.eventfd_write(self._fd, value)
            except OSError:
                pass
            return value < SIGNALLED_ERROR

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            os.close(self._fd)
            if self._owns_write and self._write_fd is not None:
                os.close(self._write_fd)


def close_fds(fds) -> None:
    """Close every descriptor, ignoring those already closed (cleanup paths must not raise)."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _is_eventfd(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]"
    except OSError:
        return False


def wait_all(fds: list[int], timeout: float | None) -> bool:
    """Block until every descriptor in `fds` is readable (True) or `timeout` seconds pass (False)."""
    pending = list(fds)
    end = None if timeout is None else time.monotonic() + timeout
    while pending:
        left = None if end is None else max(0.0, end - time.monotonic())
        poller = select.poll()
        for fd in pending:
            poller.register(fd, select.POLLIN)
        try:
            ready = poller.poll(None if left is None else left * 1000)
        except InterruptedError:
            continue
        bad = {fd for fd, ev in ready if ev & (select.POLLERR | select.POLLNVAL)}
        if bad:
            raise OSError(f"sync fence descriptor(s) {sorted(bad)} are not valid")
        done = {fd for fd, ev in ready if ev & (select.POLLIN | select.POLLHUP)}
        pending = [fd for fd in pending if fd not in done]
        if pending and left is not None and left <= 0:
            return False
    return True
