"""Executions in a driver service: one call over the channel (run_remote), a reusable execution on its
own ring (ServiceExecution, NNAPI's createReusableExecution), and a burst's runs on its ring
(BurstRuns: requests kept in slots, as NNAPI's bursts keep memories).

Every result carries CallTiming: the staging copies of application arrays are runtime time, the round
trip less the time in the driver is IPC time, so Execution.get_timing_breakdown keeps its split.
"""
from __future__ import annotations

import pickle
import time
import weakref
from typing import Any, Sequence

from ..enums import ResultCode
from ..errors import MltsError, bad_data
from ..hal import ExecutionResult, IExecution, Request
from ..hal.validation import validate_deadline
from .client import Connection
from .pools import StagedPools
from .protocol import strip_request
from .ring import LOAD, LOOP_TIMEOUT, MEASURE, REQ_CAPACITY, REQ_KIND, REQ_LEN, RETRY, RUN, SLOT
from .ring_client import RingClient, failed, timed
from .ring_host import BURST_SLOTS

_LOST = (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.DEAD_OBJECT)  # the service may still write


def run_remote(conn: Connection, method: str, remote_id: int, request: Request, measure: bool,
               deadline: float | None, loop_timeout_ns: int, *extra: Any,
               fences: Sequence[int] = ()) -> ExecutionResult:
    """One execution in the service over the channel; never raises (HAL executions report failures in
    their result). Application arrays are staged through scratch shared memory (runtime time). `extra`
    arguments follow the common ones (execute_fenced's timeout after the fences); `fences` cross as
    descriptors."""
    start = time.perf_counter_ns()
    try:
        validate_deadline(deadline, f"{conn.label}: {method}")  # this side waits by it
        staged = StagedPools(request.pools, conn.scratch)
    except MltsError as e:
        return failed(e)
    staged_ns = time.perf_counter_ns()
    try:
        result, driver_us, round_trip_us = conn.call(method, (remote_id, strip_request(request), measure, deadline,
                                                              loop_timeout_ns, *extra), staged.pools, deadline=deadline,
                                                     fences=fences)
    except MltsError as e:
        staged.release(reusable=e.code not in _LOST)
        return failed(e)
    back = time.perf_counter_ns()
    ok = isinstance(result, ExecutionResult) and result.status == ResultCode.NO_ERROR
    if ok:
        staged.copy_back()
    # a failed asynchronous execution may be one whose callback was given up on: the driver may still write
    staged.release(reusable=ok or method != "execute_async")
    return timed(result, start, staged_ns, back, driver_us, round_trip_us)


def create_execution(prepared: Any, request: Request, measure: bool, loop_timeout_ns: int) -> "ServiceExecution":
    """The service creates the driver's reusable execution over `request` (its pools mapped once there),
    served on a new ring; `prepared` (a ServicePreparedModel) is kept alive by it. Raises MltsError (the
    driver's, DEAD_OBJECT, OP_FAILED)."""
    conn, name, remote_id = prepared.conn, prepared.driver.name, prepared.remote_id
    if not isinstance(request, Request):
        raise bad_data(f"{name}: create_reusable_execution: expected a Request, got {type(request).__name__}")
    if conn.dead:
        raise conn.dead_error("execution_create")
    staged = StagedPools(request.pools, conn.scratch)
    try:
        ring = RingClient(conn, "execute")
    except OSError as e:
        staged.release(reusable=True)
        raise MltsError(ResultCode.OP_FAILED, f"{name}: create_reusable_execution: no ring: {e}") from None
    except MltsError:  # a bad polling window setting
        staged.release(reusable=True)
        raise
    try:
        conn.call("execution_create", (remote_id, strip_request(request), measure, loop_timeout_ns), staged.pools,
                  descriptors=ring.ring.fds)
    except MltsError as e:
        ring.close()
        staged.release(reusable=e.code not in _LOST)
        raise MltsError(e.code, e.message if name in e.message
                        else f"{name}: create_reusable_execution: {e.message}") from None
    return ServiceExecution(prepared, request, measure, loop_timeout_ns, staged, ring)


class ServiceExecution(IExecution):
    """A reusable execution in the service: each run copies the application arrays into the shared memory
    kept for it, and is one command on its ring. A run that finds the ring busy (a run given up at its
    deadline still in the driver) or in use goes through the channel instead."""

    def __init__(self, prepared: Any, request: Request, measure: bool, loop_timeout_ns: int, staged: StagedPools,
                 ring: RingClient) -> None:
        self.prepared = prepared  # the service keeps its model while this execution is in use
        self.conn, self.remote_id = prepared.conn, prepared.remote_id
        self.request, self.measure, self.loop_timeout_ns = request, measure, loop_timeout_ns
        self._staged, self._ring = staged, ring
        self._finalizer = weakref.finalize(self, _release, ring, [staged])

    def execute_synchronously(self, deadline: float | None) -> ExecutionResult:
        ring = self._ring
        if ring is None:
            return ExecutionResult(ResultCode.BAD_STATE, [], message=f"{self.conn.label}: the execution was closed")
        if deadline is not None:
            try:
                validate_deadline(deadline, f"{self.conn.label}: execute")
            except MltsError as e:
                return failed(e)
            deadline = float(deadline)
        if not ring.lock.acquire(False):
            return self._through_channel(deadline)
        try:
            if self.conn.dead or not ring.ready:  # the channel says why, or runs it beside the busy ring
                return self._through_channel(deadline)
            start = time.perf_counter_ns()
            staged = self._staged
            staged.copy_in()
            sent = time.perf_counter_ns()
            try:
                result, driver_us, round_trip_us = ring.run(deadline)
            except MltsError as e:
                return failed(e)
            back = time.perf_counter_ns()
            if type(result) is ExecutionResult and result.status == ResultCode.NO_ERROR:
                staged.copy_back()
            return timed(result, start, sent, back, driver_us, round_trip_us)
        finally:
            ring.lock.release()

    def _through_channel(self, deadline: float | None) -> ExecutionResult:
        return run_remote(self.conn, "execute", self.remote_id, self.request, self.measure, deadline,
                          self.loop_timeout_ns)

    def close(self) -> None:
        """The service's ring thread exits and closes the driver's execution; the staging memory is reused."""
        self._ring = None
        self._finalizer()


def _release(ring: RingClient, staged: list[StagedPools]) -> None:
    """A ring and the staging kept with it (not reused while the service may still write into it)."""
    reusable = ring.ready
    ring.close()
    for s in staged:
        s.release(reusable=reusable)


class _Slot:
    """A request the burst's service side keeps under `index`, with its staging."""

    __slots__ = ("index", "request", "staged")

    def __init__(self, index: int, request: Request, staged: StagedPools) -> None:
        self.index, self.request, self.staged = index, weakref.ref(request), staged


class BurstRuns:
    """A burst's ring: a request seen before (the same object) runs by slot; a new one whose pools the
    service has mapped travels pickled in the ring; one whose pools need descriptors goes through the
    channel once, and is kept in its slot there too."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.ring = RingClient(conn, "burst_execute")
        self._slots: dict[int, _Slot] = {}  # id(request) -> slot, least recently used first
        self._free = list(range(BURST_SLOTS))
        self._finalizer = weakref.finalize(self, _release_burst, self.ring, self._slots)

    def execute(self, burst_id: int, request: Request, measure: bool, deadline: float | None,
                loop_timeout_ns: int) -> ExecutionResult | None:
        """The run's result, or None when the ring cannot take it (in use, busy, the service dead, unusual
        arguments): the caller sends it through the channel."""
        ring = self.ring
        if not ring.lock.acquire(False):
            return None
        try:
            if self.conn.dead or not ring.ready or type(measure) is not bool or type(loop_timeout_ns) is not int \
                    or loop_timeout_ns < 0 or not isinstance(request, Request):
                return None
            if deadline is not None:
                validate_deadline(deadline, f"{self.conn.label}: burst_execute")
                deadline = float(deadline)
            return self._execute(burst_id, request, measure, deadline, loop_timeout_ns)
        except MltsError as e:
            return failed(e)
        finally:
            ring.lock.release()

    def _execute(self, burst_id: int, request: Request, measure: bool, deadline: float | None,
                 loop_timeout_ns: int) -> ExecutionResult:
        start = time.perf_counter_ns()
        w = self.ring.ring.words
        slot = self._slots.pop(id(request), None)
        if slot is not None and slot.request() is request:
            self._slots[id(request)] = slot  # the most recently used now
            slot.staged.copy_in()
            w[REQ_KIND] = RUN
        else:
            if slot is not None:  # another request that had the same id
                self._drop(slot)
            slot = self._new_slot(request)  # stages the arrays
            refs = self.conn.exporter.known_refs(slot.staged.pools)
            data = None if refs is None else pickle.dumps((strip_request(request), tuple(refs)),
                                                          protocol=pickle.HIGHEST_PROTOCOL)
            if data is None or len(data) > REQ_CAPACITY:
                return self._through_channel(burst_id, request, slot, measure, deadline, loop_timeout_ns, start)
            self.ring.ring.request_area[:len(data)] = data
            w[REQ_LEN] = len(data)
            w[REQ_KIND] = LOAD
        w[SLOT] = slot.index
        w[MEASURE] = measure
        w[LOOP_TIMEOUT] = loop_timeout_ns
        sent = time.perf_counter_ns()
        try:
            result, driver_us, round_trip_us = self.ring.run(deadline)
        except MltsError as e:
            return failed(e)  # the slot keeps its staging: the ring is not used again before the service answers
        if result is RETRY:  # a pool's descriptor is still on its way through the channel
            return self._through_channel(burst_id, request, slot, measure, deadline, loop_timeout_ns, start)
        back = time.perf_counter_ns()
        if type(result) is ExecutionResult and result.status == ResultCode.NO_ERROR:
            slot.staged.copy_back()
        return timed(result, start, sent, back, driver_us, round_trip_us)

    def _new_slot(self, request: Request) -> _Slot:
        if not self._free:
            self._drop(self._slots.pop(next(iter(self._slots))))
        staged = StagedPools(request.pools, self.conn.scratch)
        slot = _Slot(self._free.pop(), request, staged)
        self._slots[id(request)] = slot
        return slot

    def _drop(self, slot: _Slot, *, reusable: bool = True) -> None:
        slot.staged.release(reusable=reusable)
        self._free.append(slot.index)

    def _through_channel(self, burst_id: int, request: Request, slot: _Slot, measure: bool, deadline: float | None,
                         loop_timeout_ns: int, start: int) -> ExecutionResult:
        """The request crosses the channel with its pools' descriptors; the service keeps it in `slot`."""
        sent = time.perf_counter_ns()
        try:
            result, driver_us, round_trip_us = self.conn.call(
                "burst_execute", (burst_id, strip_request(request), measure, deadline, loop_timeout_ns, slot.index),
                slot.staged.pools, deadline=deadline)
        except MltsError as e:
            self._slots.pop(id(request), None)
            self._drop(slot, reusable=e.code not in _LOST)
            return failed(e)
        back = time.perf_counter_ns()
        if isinstance(result, ExecutionResult) and result.status == ResultCode.NO_ERROR:
            slot.staged.copy_back()
        return timed(result, start, sent, back, driver_us, round_trip_us)

    def close(self) -> None:
        self._finalizer()


def _release_burst(ring: RingClient, slots: dict[int, _Slot]) -> None:
    _release(ring, [slot.staged for slot in slots.values()])
    slots.clear()

