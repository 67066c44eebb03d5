"""Event (ANeuralNetworksEvent): completion of an asynchronous execution, backed by a sync fence so that it
can be exported as a file descriptor and imported from one; and the fenced dependencies of
start_compute_with_dependencies."""
from __future__ import annotations

import numbers
import os
import weakref
from typing import Sequence

from ..enums import ResultCode
from ..errors import MltsError, bad_data, bad_state
from ..hal.sync_fence import SyncFence, close_fds, wait_all
from ..hal.validation import validate_fence_fd


class Event:
    """Completion of an asynchronous execution; any thread may wait on it. Backed by a sync fence (an
    eventfd or a pipe), so it can be exported as a file descriptor and one can be imported as an Event
    (ANeuralNetworksEvent_getSyncFenceFd / ANeuralNetworksEvent_createFromSyncFenceFd)."""

    def __init__(self, _fence: SyncFence | None = None) -> None:
        self._fence = _fence if _fence is not None else SyncFence()
        self._error: MltsError | None = None
        self._finalizer = weakref.finalize(self, self._fence.close)

    @classmethod
    def from_sync_fence_fd(cls, fd: int) -> "Event":
        """An Event signalled when `fd` becomes readable; `fd` is duplicated, so the caller keeps its own."""
        fd = validate_fence_fd(fd, "Event.from_sync_fence_fd")  # the check every side of the HAL makes
        try:
            own = os.dup(fd)
        except OSError as e:
            raise bad_data(f"Event.from_sync_fence_fd: {fd} is not an open file descriptor ({e.strerror})") from None
        return cls(SyncFence.adopt(own))

    def get_sync_fence_fd(self) -> int:
        """A new descriptor on this event's fence (readable once signalled); the caller must close it."""
        if self._fence.closed:
            raise bad_state("get_sync_fence_fd: the event has been freed")
        try:
            return self._fence.dup()
        except OSError as e:
            raise MltsError(ResultCode.OP_FAILED, f"get_sync_fence_fd: cannot duplicate the fence: {e}") from None

    def _signal(self, error: MltsError | None = None) -> None:
        self._error = error
        self._fence.signal(ok=error is None)

    def _failure(self) -> MltsError | None:
        """After the fence signalled: the execution's error; an imported fence signalled with an error is OP_FAILED."""
        if self._error is not None:
            return self._error
        if self._fence.imported and not self._fence.peek_status():
            return MltsError(ResultCode.OP_FAILED, "the sync fence was signalled with an error")
        return None

    def wait(self, timeout: float | None = None) -> None:
        """Block until done; raises the execution's MltsError if it failed."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                                    or not timeout >= 0):
            raise bad_data(f"Event.wait: timeout must be a non-negative number of seconds or None, got {timeout!r}")
        if self._fence.closed:
            raise bad_state("Event.wait: the event has been freed")
        try:
            signalled = self._fence.wait(timeout)
        except OSError as e:
            raise MltsError(ResultCode.OP_FAILED, f"Event.wait: {e}") from None
        if not signalled:
            raise MltsError(ResultCode.MISSED_DEADLINE_TRANSIENT, "event not signalled within the wait timeout")
        error = self._failure()
        if error is not None:
            raise error

    @property
    def is_signalled(self) -> bool:
        return not self._fence.closed and self._fence.is_signalled

    def free(self) -> None:
        """Release the fence now (ANeuralNetworksEvent_free) rather than at garbage collection."""
        self._finalizer()

    close = free


def dup_fences(deps: Sequence[Event]) -> list[int]:
    """New descriptors on the dependencies' fences, owned by one fenced execution (closed when it ends)."""
    fds: list[int] = []
    try:
        for dep in deps:
            fds.append(dep._fence.dup())
    except OSError as e:
        close_fds(fds)
        raise MltsError(ResultCode.OP_FAILED, f"start_compute_with_dependencies: cannot duplicate dependency "
                                              f"{len(fds)}'s sync fence: {e}") from None
    return fds


def wait_for_dependencies(deps: Sequence[Event], fences: Sequence[int]) -> None:
    """Wait on the dependencies' sync fences (`fences`, this execution's descriptors on them); a
    dependency that failed fails the execution (OP_FAILED)."""
    try:
        wait_all(list(fences), None)
    except (OSError, ValueError) as e:
        raise MltsError(ResultCode.OP_FAILED, f"start_compute_with_dependencies: waiting on the dependencies "
                                              f"failed: {e}") from None
    for k, dep in enumerate(deps):
        failure = dep._failure()
        if failure is not None:
            raise MltsError(ResultCode.OP_FAILED, f"start_compute_with_dependencies: dependency {k} failed "
                                                  f"({failure.code.name}: {failure.message})")
