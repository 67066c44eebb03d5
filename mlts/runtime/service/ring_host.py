"""The service's side of rings: one thread per ring, blocked on the ring's eventfd, runs the driver and
answers in shared memory, so that a run crosses no socket, no pickling and no other thread.

A reusable execution's ring runs the hosted driver's own IExecution (its createReusableExecution, or
DefaultExecution over execute_synchronously when it has none). A burst's ring runs the driver's
BurstContext on requests kept in slots: loaded once (pickled into the ring, or through the channel
when their pools needed descriptors) and then named by slot. Runs go through this client's priority
queue, as every execution in the service does. The thread exits when the client closes the ring (or
its burst is released); the whole process exits with the channel.
"""
from __future__ import annotations

import os
import pickle
import threading
import time
from typing import Any, Callable, Sequence

from .. import qos
from ..enums import Priority, ResultCode
from ..errors import MltsError
from ..hal import BufferToken, ExecutionResult, IBurst, IExecution, IReusableBurst, failed_result
from .pools import PoolCache
from .protocol import attach_pools
from .ring import (CLOSED, DEADLINE, DRIVER_US, HAS_DEADLINE, LOAD, LOOP_TIMEOUT, MAX_POLL_NS, MEASURE, POLL_NS,
                   REQ_KIND, REQ_LEN, REQ_SEQ, RESP_KIND, RESP_SEQ, RETRY, SLOT, Ring, poll_until)

BURST_SLOTS = 4  # requests a burst keeps (client and service agree on the slot numbers)


def open_ring(fds: Sequence[int], call: str) -> Ring:
    """The service's mapping of a ring from the descriptors a call brought (duplicated: the call's own
    copies are closed after it)."""
    if len(fds) != 3:
        raise MltsError(ResultCode.BAD_DATA, f"{call}: a ring takes 3 descriptors, got {len(fds)}")
    dups: list[int] = []
    try:
        for fd in fds:
            dups.append(os.dup(fd))
        return Ring(*dups)
    except (OSError, ValueError) as e:
        for fd in dups:
            os.close(fd)
        raise MltsError(ResultCode.BAD_DATA, f"{call}: cannot map the ring: {e}") from None


class RingServer:
    """The thread serving one ring; `run(deadline)` answers one command (a result, or RETRY)."""

    def __init__(self, ring: Ring, name: str, queue: qos.DeviceQueue, priority: int, label: str) -> None:
        self.ring = ring
        self.name = name
        self.queue, self.priority, self.label = queue, priority, label
        self.on_exit: Callable[[], None] = lambda: None  # set by Rings.serve
        self._closing = threading.Lock()  # stop() never signals a ring being closed
        self._thread = threading.Thread(target=self._serve, name=f"mlts-service-ring-{label}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """From another thread of the service (its burst was released): the thread exits after any run."""
        ring = self.ring
        with self._closing:
            if not ring.closed:
                ring.words[CLOSED] = 1
                os.eventfd_write(ring.request_fd, 1)

    def _serve(self) -> None:
        ring = self.ring
        w, floats = ring.words, ring.floats
        request_fd, answer_fd = ring.request_fd, ring.answer_fd
        read, write, clock = os.eventfd_read, os.eventfd_write, time.perf_counter_ns
        done = w[RESP_SEQ]
        poll_ns = min(w[POLL_NS], MAX_POLL_NS)  # the client's window, bounded
        idle = False  # the last wake-up brought no command (a stale count after polling): sleep at once
        try:
            while True:
                if idle or not (poll_ns and poll_until(w, REQ_SEQ, done, poll_ns)):
                    try:
                        read(request_fd)
                    except InterruptedError:
                        continue
                    except OSError:
                        return
                if w[CLOSED]:
                    return
                seq = w[REQ_SEQ]
                idle = seq == done
                if idle:
                    continue  # a wake-up with no new command
                deadline = floats[DEADLINE] if w[HAS_DEADLINE] else None
                start = clock()
                try:
                    result = self.run(deadline)
                    if result is RETRY:
                        w[DRIVER_US] = 0
                        w[RESP_KIND] = RETRY
                    else:
                        ring.write_result(result, (clock() - start) // 1000)
                except BaseException as e:  # the driver's bug (even sys.exit) is its client's error
                    ring.write_result(failed_result(e, f"{self.name}: execution"), (clock() - start) // 1000)
                w[RESP_SEQ] = done = seq
                write(answer_fd, 1)
        finally:
            self._finish()

    def run(self, deadline: float | None) -> Any:
        raise NotImplementedError

    def _admitted(self, deadline: float | None, call: Callable[..., Any], *args: Any) -> Any:
        """Through this client's priority queue (refusals are failed executions, as for channel calls)."""
        try:
            return qos.run_admitted(self.queue, self.priority, deadline, self.label, guarded, self.name, call, *args)
        except MltsError as e:
            return ExecutionResult(e.code, [], message=f"{self.name}: {e.message}")

    def _finish(self) -> None:
        try:
            self.on_exit()
        finally:
            with self._closing:
                self.ring.close()


class ExecutionRing(RingServer):
    """A reusable execution: the driver's IExecution, created once over the mapped request."""

    def __init__(self, execution: IExecution, ring: Ring, name: str, queue: qos.DeviceQueue, priority: int,
                 label: str) -> None:
        super().__init__(ring, name, queue, priority, label)
        self.execution = execution

    def run(self, deadline: float | None) -> Any:
        return self._admitted(deadline, self.execution.execute_synchronously, deadline)

    def _finish(self) -> None:
        _close_quietly(self.execution)
        super()._finish()


class BurstRing(RingServer):
    """A burst: its requests by slot, loaded from the ring (pools already mapped) or through the channel."""

    def __init__(self, burst: IBurst, pools: PoolCache, check_tokens: Callable[[list], None], ring: Ring,
                 name: str, queue: qos.DeviceQueue, priority: int, label: str) -> None:
        super().__init__(ring, name, queue, priority, label)
        self.burst = burst
        self.pools = pools
        self.check_tokens = check_tokens
        self.slots: list[Any] = [None] * BURST_SLOTS
        #: a burst with createReusableExecution runs each slot's request as one reusable execution (the
        #: default BurstContext: the driver's own, validated once); per slot: (request, measure, loop timeout, it)
        self.reusable = isinstance(burst, IReusableBurst)
        self.executions: list[Any] = [None] * BURST_SLOTS

    def keep(self, slot: Any, request: Any) -> None:
        """A request that crossed the channel, kept for later runs by slot."""
        if isinstance(slot, int) and not isinstance(slot, bool) and 0 <= slot < BURST_SLOTS:
            self.slots[slot] = request

    def run(self, deadline: float | None) -> Any:
        w = self.ring.words
        slot = w[SLOT]
        if slot >= BURST_SLOTS:
            return ExecutionResult(ResultCode.BAD_DATA, [], message=f"{self.name}: burst slot {slot} out of range")
        if w[REQ_KIND] == LOAD:
            self.slots[slot] = None
            try:
                stripped, refs = pickle.loads(self.ring.request_area[:w[REQ_LEN]])
                pools = self.pools.resolve(refs, ())
            except MltsError:
                return RETRY  # a pool whose descriptor is still on its way through the channel
            if any(isinstance(p, BufferToken) for p in pools):
                try:
                    self.check_tokens(pools)
                except MltsError as e:
                    return ExecutionResult(e.code, [], message=f"{self.name}: burst_execute: {e.message}")
            self.slots[slot] = attach_pools(stripped, pools)
        request = self.slots[slot]
        if request is None:
            return RETRY
        measure, loop_timeout_ns = bool(w[MEASURE]), w[LOOP_TIMEOUT]
        execution = self._execution(slot, request, measure, loop_timeout_ns) if self.reusable else None
        if execution is not None:
            return self._admitted(deadline, execution.execute_synchronously, deadline)
        return self._admitted(deadline, self.burst.execute, request, measure, deadline, loop_timeout_ns)

    def _execution(self, slot: int, request: Any, measure: bool, loop_timeout_ns: int) -> IExecution | None:
        entry = self.executions[slot]
        if entry is not None and entry[0] is request and entry[1] == measure and entry[2] == loop_timeout_ns:
            return entry[3]
        self.executions[slot] = None
        if entry is not None:
            _close_quietly(entry[3])
        try:
            execution = self.burst.create_reusable_execution(request, measure, loop_timeout_ns)
        except Exception:  # refused (an invalid request): the burst's own run reports it
            return None
        self.executions[slot] = (request, measure, loop_timeout_ns, execution)
        return execution

    def _finish(self) -> None:
        for entry in self.executions:
            if entry is not None:
                _close_quietly(entry[3])
        super()._finish()

def guarded(name: str, call: Callable[..., Any], *args: Any) -> Any:
    """`call(*args)`, a driver's run: executions report failures in their result, as the HAL says, even
    when the driver raises."""
    try:
        return call(*args)
    except Exception as e:
        return failed_result(e, f"{name}: execution")


def _close_quietly(execution: IExecution) -> None:
    try:
        execution.close()
    except Exception:  # a driver failing to release an execution must not stop the service
        pass


class Rings:
    """The service's ring threads by id (a reusable execution's or a burst's); a thread leaves when it exits."""

    def __init__(self) -> None:
        self._servers: dict[int, RingServer] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._servers)

    def serve(self, key: int, server: RingServer) -> None:
        server.on_exit = lambda: self._gone(key)
        with self._lock:
            self._servers[key] = server
        try:
            server.start()
        except BaseException:
            self._gone(key)
            server.ring.close()
            raise

    def stop(self, key: int) -> None:
        with self._lock:
            server = self._servers.get(key)
        if server is not None:
            server.stop()

    def keep(self, key: int, slot: Any, request: Any) -> None:
        with self._lock:
            server = self._servers.get(key)
        if isinstance(server, BurstRing):
            server.keep(slot, request)

    def _gone(self, key: int) -> None:
        with self._lock:
            self._servers.pop(key, None)


def queue_label(name: str, key: int, priority: int) -> str:
    """The label of this ring's runs in the service's queue statistics (as channel calls are labelled)."""
    try:
        return f"{name} #{key} {Priority(priority).name}"
    except ValueError:
        return f"{name} #{key} {priority}"
