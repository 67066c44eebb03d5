"""The client end of one driver-service process: spawning it, calling it, and noticing its death.

A reader thread demultiplexes replies by call id, so many threads may have calls in flight. A dead
child is noticed at once (its end of the socket closes: end of channel) and, as a safety net, by
polling the process while waiting; every pending and later call then fails with DEAD_OBJECT. No
call waits forever on a dead child; a live but silent one is waited for, except past a call's
deadline (plus a grace period) or the connection's optional call timeout (which kills it).
"""
from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from typing import Any, Sequence

from .. import vlog
from ..enums import ResultCode
from ..errors import MltsError
from ..memory import Memory
from ..sync_fence import close_fds
from .channel import Channel, ChannelClosed, socket_pair
from .pools import PoolExporter, ScratchPools
from .protocol import Call, Reply

DEADLINE_GRACE_S = 0.5  # how long past a call's deadline the client still waits for the answer
POLL_S = 0.2  # process polling while waiting (the end of channel is normally seen before)
EXIT_WAIT_S = 1.0  # how long a child that closed its channel gets to finish exiting

_connections: "weakref.WeakSet[Connection]" = weakref.WeakSet()
#: calls whose answer is a new object in the service, which a late answer must release
_CREATES = {"prepare_model": "prepared", "prepare_model_from_cache": "prepared", "burst_open": "burst"}


def child_python_path() -> str:
    """The parent's sys.path, so that the child can import every driver reference the parent can."""
    entries = []
    for p in sys.path:
        p = os.path.abspath(p) if p else os.getcwd()
        if p not in entries:
            entries.append(p)
    return os.pathsep.join(entries)


class _Pending:
    __slots__ = ("method", "event", "reply", "error")

    def __init__(self, method: str) -> None:
        self.method = method
        self.event = threading.Event()
        self.reply: Reply | None = None
        self.error: MltsError | None = None


class Connection:
    """One service process and its channel. `label` names it in every error message."""

    def __init__(self, label: str, *, call_timeout: float | None = None) -> None:
        self.label = label
        self.call_timeout = call_timeout
        self._lock = threading.Lock()
        self._send_order = threading.Lock()  # exporter decisions and sends happen in one order
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        self._death: str | None = None
        self._released: deque[tuple[str, int]] = deque()
        self._abandoned: dict[int, str] = {}  # calls given up at their deadline: id -> method
        self.exporter = PoolExporter()
        self.scratch = ScratchPools(self.exporter)
        parent, child = socket_pair()
        env = dict(os.environ)
        env["PYTHONPATH"] = child_python_path()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mlts.runtime.service.host", str(child.fileno())],
                pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL, stdout=_stderr_fd(),
                close_fds=True)
        except (OSError, ValueError) as e:
            parent.close()
            raise MltsError(ResultCode.UNAVAILABLE_DEVICE, f"cannot start a driver service for {label}: {e}") from None
        finally:
            child.close()
        self.channel = Channel(parent)
        self.pid = self.process.pid
        self._parent_pid = os.getpid()
        self._reader = threading.Thread(target=self._read_loop, name=f"mlts-service-reader-{self.pid}", daemon=True)
        self._reader.start()
        _connections.add(self)
        vlog.log("driver", f"driver service for {label}: started process {self.pid}")

    # -- state ----------------------------------------------------------------------------------
    @property
    def dead(self) -> bool:
        return self._death is not None

    @property
    def death(self) -> str | None:
        """How it died, e.g. "died (signal SIGABRT) during execute"; None while alive."""
        return self._death

    def dead_error(self, method: str) -> MltsError:
        return MltsError(ResultCode.DEAD_OBJECT, f"driver service '{self.label}' {self._death}; {method} refused")

    def release_later(self, kind: str, remote_id: int) -> None:
        """From finalizers: the service drops the object with the next call (never blocks, never sends)."""
        self._released.append((kind, remote_id))

    # -- calls ----------------------------------------------------------------------------------
    def call(self, method: str, args: tuple = (), pools: Sequence[Memory] = (), *, cache_pools: bool = True,
             deadline: float | None = None, timeout: float | None = None,
             fences: Sequence[int] = ()) -> tuple[Any, int, int]:
        """One round trip: (value, microseconds in the driver, microseconds for the whole round trip).

        `fences` are sync fence descriptors for the call (execute_fenced's wait_for): duplicates of them
        cross beside the pools' descriptors, named by Call.fences, and are closed here once sent (the
        caller keeps its own). Raises MltsError: the driver's own error, DEAD_OBJECT, or
        MISSED_DEADLINE_TRANSIENT when the service has not answered by `deadline` (absolute,
        time.monotonic()) plus a grace period.
        """
        fence_fds = _dup_fences(fences, f"driver service '{self.label}': {method}")
        try:
            pending = _Pending(method)
            with self._lock:
                if self._death is not None:
                    raise self.dead_error(method)
                self._next_id += 1
                call_id = self._next_id
                self._pending[call_id] = pending
            start = time.perf_counter_ns()
            with self._send_order:
                refs, fds = self.exporter.refs(pools, cache=cache_pools)
                forget, release = self.exporter.drain_forgotten(), self._drain_released()
                fence_indexes = tuple(range(len(fds), len(fds) + len(fence_fds)))
                try:
                    payload = Channel.encode(Call(call_id, method, args, tuple(refs), forget, release, fence_indexes))
                    self.channel.send_encoded(payload, [*fds, *fence_fds])
                except ChannelClosed:
                    self._died()
                except Exception as e:  # unpicklable arguments, too many pools: this call fails, nothing was sent
                    self.exporter.unsend(refs, forget)
                    self._released.extendleft(reversed(release))
                    with self._lock:
                        self._pending.pop(call_id, None)
                    raise MltsError(ResultCode.OP_FAILED, f"driver service '{self.label}': cannot send {method}: "
                                                          f"{type(e).__name__}: {e}") from None
        finally:
            close_fds(fence_fds)  # the service received its own copies with the message
        reply = self._wait(call_id, pending, deadline, timeout if timeout is not None else self.call_timeout)
        round_trip_us = (time.perf_counter_ns() - start) // 1000
        if reply.error is not None:
            code, text = reply.error
            try:
                code = ResultCode(code)
            except ValueError:
                code = ResultCode.OP_FAILED
            raise MltsError(code, text)
        return reply.value, int(reply.driver_us), round_trip_us

    def _drain_released(self) -> tuple[tuple[str, int], ...]:
        out = []
        while True:
            try:
                out.append(self._released.popleft())
            except IndexError:
                return tuple(out)

    def _wait(self, call_id: int, pending: _Pending, deadline: float | None, timeout: float | None) -> Reply:
        give_up_at = None if deadline is None else deadline + DEADLINE_GRACE_S
        kill_at = None if timeout is None else time.monotonic() + timeout
        while not pending.event.wait(POLL_S):
            if self.process.poll() is not None:
                self._died()
                continue
            now = time.monotonic()
            if kill_at is not None and now >= kill_at:
                self._died(f"did not answer {pending.method} within {timeout:g} s and was killed", kill=True)
                continue
            if give_up_at is not None and now >= give_up_at:
                with self._lock:
                    abandoned = self._pending.pop(call_id, None) is not None
                    if abandoned:
                        self._abandoned[call_id] = pending.method
                if abandoned:
                    raise MltsError(ResultCode.MISSED_DEADLINE_TRANSIENT,
                                    f"driver service '{self.label}' did not answer {pending.method} by its deadline")
        if pending.error is not None:
            raise pending.error
        assert pending.reply is not None
        return pending.reply

    # -- the reader thread and death ------------------------------------------------------------
    def _read_loop(self) -> None:
        try:
            while True:
                message, fds = self.channel.recv()
                for fd in fds:  # replies carry none; never leak what a confused peer sends
                    os.close(fd)
                if not isinstance(message, Reply):
                    raise TypeError(f"expected a Reply, got {type(message).__name__}")
                with self._lock:
                    pending = self._pending.pop(message.call_id, None)
                    late = self._abandoned.pop(message.call_id, None)
                if pending is not None:
                    pending.reply = message
                    pending.event.set()
                elif late in _CREATES and isinstance(message.value, int):
                    self.release_later(_CREATES[late], message.value)  # made after its caller gave up
        except ChannelClosed:
            self._died()
        except Exception as e:  # garbage on the channel: the service is unusable
            self._died(f"broke the protocol: {type(e).__name__}: {e}", kill=True)

    def _died(self, reason: str | None = None, *, kill: bool = False) -> None:
        if self._death is not None:
            return
        if kill:
            self._kill()
        if reason is None:
            reason = self._exit_reason()
        with self._lock:
            if self._death is not None:
                return
            pending = list(self._pending.values())
            self._pending.clear()
            methods = sorted({p.method for p in pending})
            self._death = f"died ({reason}) during {' and '.join(methods)}" if methods else f"died ({reason})"
        vlog.log("driver", f"driver service '{self.label}' (process {self.pid}) {self._death}")
        for p in pending:
            p.error = MltsError(ResultCode.DEAD_OBJECT, f"driver service '{self.label}' died ({reason}) during {p.method}")
            p.event.set()
        self._shutdown()

    def _exit_reason(self) -> str:
        try:
            code = self.process.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self._kill()
            return "closed its channel; killed"
        if code < 0:
            try:
                return f"signal {signal.Signals(-code).name}"
            except ValueError:
                return f"signal {-code}"
        return f"exit code {code}"

    def _kill(self) -> None:
        try:
            self.process.kill()
        except OSError:
            pass

    def _shutdown(self) -> None:
        self.channel.close()
        try:
            self.process.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self._kill()
            try:
                self.process.wait(EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        _connections.discard(self)

    def close(self) -> None:
        """Stop the child: it sees the end of its channel and exits; killed if it does not within a second."""
        with self._lock:
            if self._death is not None:
                return
            self._death = "was closed by its client"
            pending = list(self._pending.values())
            self._pending.clear()
        for p in pending:
            p.error = MltsError(ResultCode.DEAD_OBJECT, f"driver service '{self.label}' was closed during {p.method}")
            p.event.set()
        self._shutdown()


    def _abandon_after_fork(self) -> None:
        """In a forked child: the channel and the service are the parent's, so use neither, stop neither."""
        self._lock = threading.Lock()  # it may have been held by a thread that does not exist here
        self._send_order = threading.Lock()
        self._pending.clear()
        self._death = f"belongs to process {self._parent_pid} (this process was forked from it)"
        try:
            os.close(self.channel.sock.detach())  # no shutdown: that would cut the parent's channel too
        except OSError:
            pass


def _dup_fences(fences: Sequence[int], call: str) -> list[int]:
    """Duplicates of a call's sync fences, to send (closed after sending); BAD_DATA naming a bad one."""
    from ..hal_validation import validate_fence_fds

    if not fences:  # every call but execute_fenced
        return []
    dups: list[int] = []
    try:
        for k, fd in enumerate(validate_fence_fds(fences, call)):
            try:
                dups.append(os.dup(fd))
            except OSError as e:
                raise MltsError(ResultCode.BAD_DATA, f"{call}: wait_for[{k}] = {fd} cannot be duplicated "
                                                     f"({e.strerror})") from None
    except BaseException:
        close_fds(dups)
        raise
    return dups



def _stderr_fd() -> int:
    """The child's stdout goes to our stderr, so that a chatty driver cannot corrupt `--json` output."""
    try:
        os.fstat(2)
        return 2
    except OSError:
        return subprocess.DEVNULL


def _after_fork_in_child() -> None:
    for connection in list(_connections):
        connection._abandon_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_all() -> None:
    """No orphans: every service still running is stopped when the client exits."""
    for connection in list(_connections):
        try:
            connection.close()
        except Exception:
            pass
