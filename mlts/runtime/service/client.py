"""The client end of one driver-service process: spawning it, calling it, and noticing its death.

A reader thread demultiplexes replies by call id, so many threads may have calls in flight (runs on
a shared-memory ring wait on their own eventfd instead, registered here only to learn of death). A dead
child is noticed at once (its end of the socket closes: end of channel) and, as a safety net, by
polling the process while waiting; every pending and later call then fails with DEAD_OBJECT. No
call waits forever on a dead child; a live but silent one is waited for, except past a call's
deadline (plus a grace period) or the connection's optional call timeout (which kills it).

The service's stdout and stderr come through a pipe that a thread drains at once (so the service never
blocks on them) into this process's stderr, keeping the last lines: a DEAD_OBJECT error says how the
service died and what it last wrote (a driver's abort message, a traceback).
"""
from __future__ import annotations

import atexit
import os
import signal
import subprocess
import threading
import time
import weakref
from collections import deque
from typing import Any, Sequence

from ... import childproc
from .. import vlog
from ..enums import ResultCode
from ..errors import MltsError
from ..hal.memory import Memory
from ..hal.sync_fence import close_fds
from ..hal.validation import validate_fence_fds
from .channel import Channel, ChannelClosed, socket_pair
from .pools import PoolExporter, ScratchPools
from .protocol import Call, Reply

DEADLINE_GRACE_S = 0.5  # how long past a call's deadline the client still waits for the answer
POLL_S = 0.2  # process polling while waiting (the end of channel is normally seen before)
EXIT_WAIT_S = 1.0  # how long a child that closed its channel gets to finish exiting
TAIL_LINES = 10  # the service's last output lines in DEAD_OBJECT messages ...
TAIL_CHARS = 2000  # ... and at most this many characters of them
TAIL_KEEP = 200  # lines kept to find them in (a fatal-error dump of every thread is shortened)
TAIL_WAIT_S = 0.5  # how long a dead service's last output is waited for (its children may hold the pipe)
CLOSED = "was closed by its client"

_connections: "weakref.WeakSet[Connection]" = weakref.WeakSet()
#: calls whose answer is a new object in the service, which a late answer must release
_CREATES = {"prepare_model": "prepared", "prepare_model_from_cache": "prepared", "burst_open": "burst"}


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
        env = childproc.child_env()  # the same mlts as this process, whatever the current directory holds
        output, output_w = os.pipe()
        try:
            self.process = subprocess.Popen(
                childproc.module_command("mlts.runtime.service.host", str(child.fileno())),
                pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL, stdout=output_w, stderr=output_w,
                close_fds=True)
        except (OSError, ValueError) as e:
            parent.close()
            os.close(output)
            raise MltsError(ResultCode.UNAVAILABLE_DEVICE, f"cannot start a driver service for {label}: {e}") from None
        finally:
            child.close()
            os.close(output_w)
        self.channel = Channel(parent)
        self.pid = self.process.pid
        self.output = OutputTail(output, f"mlts-service-output-{self.pid}")
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
        return MltsError(ResultCode.DEAD_OBJECT, f"driver service '{self.label}' {self._death}; {method} refused"
                                                 f"{self._tail_note()}")

    def _tail_note(self) -> str:
        """What the service last wrote, for errors about its death (none when its client closed it)."""
        text = "" if self._death == CLOSED else self.output.text()
        return f"; its last output: {text}" if text else ""

    def release_later(self, kind: str, remote_id: int) -> None:
        """From finalizers: the service drops the object with the next call (never blocks, never sends)."""
        self._released.append((kind, remote_id))

    # -- calls ----------------------------------------------------------------------------------
    def call(self, method: str, args: tuple = (), pools: Sequence[Memory] = (), *, cache_pools: bool = True,
             deadline: float | None = None, timeout: float | None = None,
             fences: Sequence[int] = (), descriptors: Sequence[int] = ()) -> tuple[Any, int, int]:
        """One round trip: (value, microseconds in the driver, microseconds for the whole round trip).

        `fences` are sync fence descriptors for the call (execute_fenced's wait_for): duplicates of them
        cross beside the pools' descriptors, named by Call.fences, and are closed here once sent (the
        caller keeps its own). `descriptors` (a ring's memory and eventfds) cross after them, as they are
        (the caller keeps and closes them). Raises MltsError: the driver's own error, DEAD_OBJECT, or
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
                fence_indexes = tuple(range(len(fds), len(fds) + len(fence_fds) + len(descriptors)))
                try:
                    payload = Channel.encode(Call(call_id, method, args, tuple(refs), forget, release, fence_indexes))
                    self.channel.send_encoded(payload, [*fds, *fence_fds, *descriptors])
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
            if self.check_silence(pending.method, kill_at, timeout):
                continue
            if give_up_at is not None and time.monotonic() >= give_up_at:
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

    def check_silence(self, method: str, kill_at: float | None, timeout: float | None) -> bool:
        """While a call waits in silence: True when the service is found dead, or silent past the call
        timeout (then killed); its pending calls have their DEAD_OBJECT error then."""
        if self.process.poll() is not None:
            self._died()
            return True
        if kill_at is not None and time.monotonic() >= kill_at:
            self._died(f"did not answer {method} within {timeout:g} s and was killed", kill=True)
            return True
        return False

    # -- runs on rings (ring_client) -------------------------------------------------------------
    def watch(self, key: int, waiter: Any) -> None:
        """A ring run joins the pending calls under `key` (< 0), so that a death or close gives it its error
        (`waiter.error`) and wakes it (`waiter.event.set()`), as it does a channel call; raises the
        DEAD_OBJECT error of a dead service (`waiter.method` refused)."""
        with self._lock:
            if self._death is not None:
                raise self.dead_error(waiter.method)
            self._pending[key] = waiter

    def unwatch(self, key: int) -> None:
        self._pending.pop(key, None)

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
        if reason is None:
            reason = "killed" if kill else self._exit_reason()
        with self._lock:  # claimed before a kill, so that the reader seeing the channel end cannot claim it
            if self._death is not None:
                return
            pending = list(self._pending.values())
            self._pending.clear()
            methods = sorted({p.method for p in pending})
            self._death = f"died ({reason}) during {' and '.join(methods)}" if methods else f"died ({reason})"
        if kill:
            self._kill()
        self.output.wait(TAIL_WAIT_S)  # what it wrote before dying may still be in the pipe
        note = self._tail_note()
        vlog.log("driver", f"driver service '{self.label}' (process {self.pid}) {self._death}{note}")
        for p in pending:
            p.error = MltsError(ResultCode.DEAD_OBJECT, f"driver service '{self.label}' died ({reason}) during "
                                                        f"{p.method}{note}")
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
        self.output.wait(TAIL_WAIT_S)  # its last output reaches our stderr before we may exit
        _connections.discard(self)

    def close(self) -> None:
        """Stop the child: it sees the end of its channel and exits; killed if it does not within a second."""
        with self._lock:
            if self._death is not None:
                return
            self._death = CLOSED
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
        self.output.abandon()


def _dup_fences(fences: Sequence[int], call: str) -> list[int]:
    """Duplicates of a call's sync fences, to send (closed after sending); BAD_DATA naming a bad one."""
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



class OutputTail:
    """Drains a service's output pipe in a thread: every byte goes on to this process's stderr (never
    stdout, so that a chatty driver cannot corrupt `--json` output), and the last lines are kept."""

    def __init__(self, fd: int, name: str) -> None:
        self._fd = fd
        self._lines: deque[str] = deque(maxlen=TAIL_KEEP)
        self._partial = b""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, name=name, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        try:
            while True:
                try:
                    chunk = os.read(self._fd, 65536)
                except InterruptedError:
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                _forward(chunk)
                self._keep(chunk)
        finally:
            self._keep(b"\n")  # an unfinished last line counts
            try:
                os.close(self._fd)
            except OSError:
                pass

    def _keep(self, chunk: bytes) -> None:
        with self._lock:
            *done, self._partial = (self._partial + chunk).split(b"\n")
            self._partial = self._partial[-TAIL_CHARS:]
            for line in done:
                text = line.decode("utf-8", "replace").rstrip()
                if text:
                    self._lines.append(text[-TAIL_CHARS:])

    def abandon(self) -> None:
        """In a forked child: the pipe is the parent's to read (its drain thread is not here)."""
        try:
            os.close(self._fd)
        except OSError:
            pass

    def wait(self, timeout: float) -> None:
        """Until the pipe's end (the service and its children exited), at most `timeout` seconds."""
        self._thread.join(timeout)

    def text(self) -> str:
        """The last lines, oldest first, joined by " | ", cut to the last TAIL_CHARS characters."""
        with self._lock:
            text = " | ".join(last_lines(list(self._lines)))
        return text if len(text) <= TAIL_CHARS else "..." + text[-(TAIL_CHARS - 3):]


def last_lines(lines: list[str], count: int = TAIL_LINES) -> list[str]:
    """The last `count` lines, where a Python fatal-error dump (faulthandler: every thread's stack) counts
    as one line saying where the crashing thread was, so that what the driver said before stays in view."""
    start = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("Fatal Python error:")), None)
    if start is None:
        return lines[-count:]
    frames: list[str] = []
    current = False
    for line in lines[start + 1:]:
        if line.startswith("Current thread"):
            current = True
        elif current and line.lstrip().startswith("File ") and len(frames) < 3:
            frames.append(line.strip())
        elif current:
            break
    crash = lines[start] + (f" (crashing thread, most recent call first: {'; '.join(frames)})" if frames else "")
    return lines[:start][-(count - 1):] + [crash] if count > 1 else [crash]


def _forward(chunk: bytes) -> None:
    """A service's output onto our stderr, as it would have written it there itself (none if closed)."""
    view = memoryview(chunk)
    try:
        while view:
            view = view[os.write(2, view):]
    except OSError:
        pass


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
