"""Quality of service: the per-client priority queue in front of each driver, and deadline prediction.

Every driver call of an execution passes its device's DeviceQueue (one per driver per client
process; a driver service keeps one per client too, since each client has its own service):

- Admission: an execution runs when no execution of strictly higher priority is running or
  waiting on that device, no earlier waiting one of its own priority is ahead of it, and the
  device's concurrency limit (`max_concurrent`, default none) leaves room. Equal priorities are
  served first come, first served; a full queue (`max_queued` waiting) answers
  RESOURCE_EXHAUSTED_TRANSIENT, a deadline passing while waiting MISSED_DEADLINE_TRANSIENT.
- Checkpoints: between partitions (the runtime releases and re-admits per driver call) and, for
  in-process kernel drivers, between operations (`current_checkpoint()` is what the kernels call).
  A lower-priority run at a checkpoint yields while a higher-priority one runs or waits, keeping
  its place among equals, then resumes where it stopped (runs are deterministic, so resuming and
  restarting give the same results).

Drivers predict with RunTimeEstimate/DriverLoad: refuse before starting when a deadline cannot be
met (MISSED_DEADLINE_PERSISTENT when even an idle driver would miss it, TRANSIENT when only the
work in flight would make it miss) and abort at a checkpoint when the rest of the run will miss it.
"""
from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterator

from .enums import ResultCode
from .errors import ExecutionAborted, MltsError, bad_data
from .hal import ExecutionResult

DEFAULT_MAX_QUEUED = 1024  # executions held off at once before a device reports itself busy
ESTIMATE_WINDOW = 8  # recent runs the running average is taken over


@dataclass(eq=False, slots=True)
class Ticket:
    """One execution's place in a device queue."""

    priority: int
    seq: int
    what: str
    state: str = "new"  # new -> waiting -> running (-> waiting -> running)* -> done
    yields: int = 0

    def order(self) -> tuple[int, int]:
        return (-self.priority, self.seq)


@dataclass
class QueueStats:
    running: int = 0
    waiting: int = 0
    admitted: int = 0
    yields: int = 0
    refused_busy: int = 0
    missed_while_waiting: int = 0
    completed_order: list = field(default_factory=list)  # `what` of the last finished tickets


class DeviceQueue:
    """The priority queue of one client in front of one driver (see the module doc)."""

    def __init__(self, name: str, *, max_concurrent: int | None = None,
                 max_queued: int = DEFAULT_MAX_QUEUED) -> None:
        self.name = name
        self.max_concurrent = max_concurrent
        self.max_queued = max_queued
        self._lock = threading.Lock()  # entered directly where no one waits: a plain lock costs no Python call
        self._cond = threading.Condition(self._lock)
        self._seq = itertools.count()
        self._running: list[Ticket] = []
        self._waiting: list[Ticket] = []
        self._stats = QueueStats()
        self._finished: deque[str] = deque(maxlen=64)

    # -- admission ------------------------------------------------------------------------------
    def _may_run(self, t: Ticket) -> bool:
        if self.max_concurrent is not None and len(self._running) >= self.max_concurrent:
            return False
        for r in self._running:  # loops, not any()/all(): this is on every execution's path
            if r.priority > t.priority:
                return False
        for w in self._waiting:
            if w is not t and w.order() <= t.order():
                return False
        return True

    def _should_yield(self, t: Ticket) -> bool:
        return any(o.priority > t.priority for o in self._waiting) or any(
            o.priority > t.priority for o in self._running)

    def admit(self, priority: int, deadline: float | None, what: str = "") -> Ticket:
        """Block until the execution may run on this device; raises MltsError when it may not."""
        lock = self._lock
        lock.acquire()  # not `with`: its __enter__/__exit__ cost more than the rest of an idle admission
        try:
            if not self._running and not self._waiting and self.max_concurrent is None:  # an idle device
                t = Ticket(int(priority), next(self._seq), what, "running")
                self._running.append(t)
                self._stats.admitted += 1
                return t
            t = Ticket(int(priority), next(self._seq), what)
            if not self._waiting and self._may_run(t):
                self._start(t)
                return t
            if len(self._waiting) >= self.max_queued:
                self._stats.refused_busy += 1
                raise MltsError(ResultCode.RESOURCE_EXHAUSTED_TRANSIENT,
                                f"{self.name}: busy, {len(self._waiting)} executions already queued "
                                f"(limit {self.max_queued}); retry later")
            self._wait_turn(t, deadline)
            return t
        finally:
            lock.release()

    def _start(self, t: Ticket) -> None:
        t.state = "running"
        self._running.append(t)
        self._stats.admitted += 1

    def _wait_turn(self, t: Ticket, deadline: float | None) -> None:
        """With the lock held: queue `t` and wait until it may run (or its deadline passes)."""
        t.state = "waiting"
        self._waiting.append(t)
        self._cond.notify_all()
        try:
            while not self._may_run(t):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self._stats.missed_while_waiting += 1
                    raise MltsError(ResultCode.MISSED_DEADLINE_TRANSIENT,
                                    f"{self.name}: the deadline passed while higher-priority or earlier "
                                    f"work held the device")
                self._cond.wait(left)
        finally:
            self._waiting.remove(t)
            self._cond.notify_all()
        self._start(t)

    def checkpoint(self, t: Ticket, deadline: float | None) -> None:
        """Where a running execution may be stopped: yields to higher-priority work, then resumes."""
        if not self._waiting and len(self._running) < 2:
            return  # nothing else wants the device (a racy read at worst defers a yield by one operation)
        with self._lock:
            if t.state != "running" or not self._should_yield(t):
                return
            t.yields += 1
            self._stats.yields += 1
            self._running.remove(t)
            started = time.monotonic()
            try:
                self._wait_turn(t, deadline)
            except MltsError:
                t.state = "done"
                raise
            finally:
                _local.yielded_s = yielded_seconds() + time.monotonic() - started

    def release(self, t: Ticket) -> None:
        lock = self._lock
        lock.acquire()
        try:
            try:
                self._running.remove(t)
            except ValueError:  # not running: yielded and refused at a checkpoint
                pass
            t.state = "done"
            self._finished.append(t.what)
            if self._waiting:  # only tickets in _wait_turn wait on the condition
                self._cond.notify_all()
        finally:
            lock.release()

    def stats(self) -> dict[str, Any]:
        """What the queue holds and has done (for tests, reports and conformance checks)."""
        with self._cond:
            s = self._stats
            return {"running": len(self._running), "waiting": len(self._waiting), "admitted": s.admitted,
                    "yields": s.yields, "refused_busy": s.refused_busy,
                    "missed_while_waiting": s.missed_while_waiting, "finished": list(self._finished),
                    "max_concurrent": self.max_concurrent, "max_queued": self.max_queued}


# -- one queue per driver in this process -------------------------------------------------------------
_queues: "weakref.WeakKeyDictionary[Any, DeviceQueue]" = weakref.WeakKeyDictionary()
_queues_lock = threading.Lock()


def _driver_of(device_or_driver: Any) -> Any:
    return getattr(device_or_driver, "driver", device_or_driver)


def queue_for(device_or_driver: Any) -> DeviceQueue:
    """The queue in front of a device's driver (created on first use)."""
    driver = _driver_of(device_or_driver)
    return _per_driver(_queues, driver, lambda: DeviceQueue(str(getattr(driver, "name", "device"))))


def configure(device_or_driver: Any, *, max_concurrent: int | None = None,
              max_queued: int = DEFAULT_MAX_QUEUED) -> dict[str, Any]:
    """Set a device's concurrency limit (None: no limit) and queue length; returns the old settings."""
    if max_concurrent is not None and (isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int)
                                       or max_concurrent < 1):
        raise bad_data(f"qos.configure: max_concurrent must be a positive int or None, got {max_concurrent!r}")
    if isinstance(max_queued, bool) or not isinstance(max_queued, int) or max_queued < 0:
        raise bad_data(f"qos.configure: max_queued must be a non-negative int, got {max_queued!r}")
    q = queue_for(device_or_driver)
    with q._cond:
        old = {"max_concurrent": q.max_concurrent, "max_queued": q.max_queued}
        q.max_concurrent, q.max_queued = max_concurrent, max_queued
        q._cond.notify_all()
    return old



# -- checkpoints for in-process drivers ------------------------------------------------------------------
class _ThreadState(threading.local):
    """Per thread: the checkpoint stack and the time yielded at checkpoints. Class-level defaults: a
    missing attribute would cost an exception on every read, and these are read on every run."""

    stack: list | None = None
    yielded_s: float = 0.0


_local = _ThreadState()


def yielded_seconds() -> float:
    """Time this thread has spent yielded to other work at queue checkpoints (ever; take differences)."""
    return _local.yielded_s


def current_checkpoint() -> Callable[[], None] | None:
    """The checkpoint an in-process driver's kernels should call between operations, if any."""
    stack = _local.stack
    if not stack:
        return None
    if len(stack) == 1:
        return stack[0]
    hooks = tuple(stack)

    def checkpoint() -> None:
        for hook in hooks:
            hook()

    return checkpoint


@contextmanager
def checkpoint_scope(hook: Callable[[], None]) -> Iterator[None]:
    """Make `hook` part of current_checkpoint() in this thread for the duration."""
    stack = _push_checkpoint(hook)
    try:
        yield
    finally:
        stack.pop()


def _push_checkpoint(hook: Callable[[], None]) -> list:
    """Push `hook` on this thread's checkpoint stack; the stack, to pop it from."""
    stack = _local.stack
    if stack is None:
        stack = _local.stack = []
    stack.append(hook)
    return stack


def run_admitted(queue: DeviceQueue, priority: int, deadline: float | None, what: str,
                 call: Callable[..., Any], *args: Any) -> Any:
    """`call(*args)` as an admitted ticket of `queue` (blocking until the queue admits it; MltsError when it
    refuses), with the queue's checkpoint current in this thread for in-process drivers' kernels."""
    ticket = queue.admit(priority, deadline, what)
    stack = _local.stack
    if stack is None:
        stack = _local.stack = []
    stack.append(partial(queue.checkpoint, ticket, deadline))
    try:
        return call(*args)
    finally:
        try:
            stack.pop()
        finally:
            queue.release(ticket)


# -- prediction ---------------------------------------------------------------------------------------
class RunTimeEstimate:
    """Running average of the last ESTIMATE_WINDOW run times (seconds); None until one is known."""

    def __init__(self, window: int = ESTIMATE_WINDOW) -> None:
        self._samples: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()
        self._value: float | None = None  # the average, recomputed on add: read on every run

    def add(self, seconds: float) -> None:
        seconds = float(seconds)
        lock = self._lock
        lock.acquire()
        try:
            samples = self._samples
            samples.append(seconds if seconds > 0.0 else 0.0)
            self._value = sum(samples) / len(samples)
        finally:
            lock.release()

    @property
    def value(self) -> float | None:
        return self._value


class DriverLoad:
    """The runs in flight on one driver, with their estimates: what makes a driver busy. predicted_run, the
    one place runs enter and leave, does so without a lock (one dict store and one pop, each atomic);
    pending() sums a copy."""

    def __init__(self) -> None:
        self._runs: dict[int, float] = {}
        self._ids = itertools.count()

    def pending(self) -> float:
        return sum(self._runs.copy().values())


def refusal(estimate: float | None, busy: float, deadline: float | None, what: str) -> MltsError | None:
    """Why a run of `estimate` seconds cannot meet `deadline` with `busy` seconds of work in flight."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        return MltsError(ResultCode.MISSED_DEADLINE_PERSISTENT, f"{what}: the deadline had passed before it started")
    if estimate is None:
        return None
    if estimate > left:
        return MltsError(ResultCode.MISSED_DEADLINE_PERSISTENT,
                         f"{what}: predicted {estimate * 1e3:.1f} ms even on an idle device, "
                         f"{left * 1e3:.1f} ms left before the deadline")
    if estimate + busy > left:
        return MltsError(ResultCode.MISSED_DEADLINE_TRANSIENT,
                         f"{what}: busy; predicted {estimate * 1e3:.1f} ms after {busy * 1e3:.1f} ms of work "
                         f"in flight, {left * 1e3:.1f} ms left before the deadline")
    return None


class ProgressCheckpoint:
    """The checkpoint a kernel driver gives its executor: counts operations, aborts a run whose
    remaining predicted time will miss the deadline, and lets the runtime's queue pre-empt it.
    Time spent yielded to other work (`yielded_s`) is kept apart, so that estimates measure the run."""

    def __init__(self, operations: int, estimate: float | None, deadline: float | None,
                 outer: Callable[[], None] | None, what: str) -> None:
        self.operations = max(1, operations)
        self.estimate = estimate
        self.deadline = deadline
        self.outer = outer
        self.what = what
        self.done = 0
        self._yielded_at_start = yielded_seconds()

    @property
    def yielded_s(self) -> float:
        return yielded_seconds() - self._yielded_at_start

    def __call__(self) -> None:
        if self.outer is not None:
            self.outer()
        if self.deadline is not None:
            now = time.monotonic()
            left_ops = max(0, self.operations - self.done)
            rest = 0.0 if self.estimate is None else self.estimate * left_ops / self.operations
            if now + rest > self.deadline:
                raise ExecutionAborted(ResultCode.MISSED_DEADLINE_TRANSIENT,
                                       f"{self.what}: aborted before operation {self.done}: "
                                       + ("the deadline passed" if now > self.deadline else
                                          f"the remaining {left_ops} operations are predicted to take "
                                          f"{rest * 1e3:.1f} ms, past the deadline"))
        self.done += 1


# -- what kernel drivers call -----------------------------------------------------------------------
_loads: "weakref.WeakKeyDictionary[Any, DriverLoad]" = weakref.WeakKeyDictionary()
_prepare_estimates: "weakref.WeakKeyDictionary[Any, RunTimeEstimate]" = weakref.WeakKeyDictionary()


_unhashable: dict[tuple[int, int], Any] = {}  # (table, driver) ids, for drivers that cannot be weak keys


def _per_driver(table: "weakref.WeakKeyDictionary", driver: Any, make: Callable[[], Any]) -> Any:
    """The driver's entry of `table`, made on first use; kept as long as the driver lives."""
    with _queues_lock:
        try:
            value = table.get(driver)
            if value is None:
                value = table[driver] = make()
        except TypeError:  # unhashable or not weakly referenceable: kept by identity, for good
            value = _unhashable.get((id(table), id(driver)))
            if value is None:
                value = _unhashable[(id(table), id(driver))] = (driver, make())
            value = value[1]
        return value


def load_of(driver: Any) -> DriverLoad:
    return _per_driver(_loads, driver, DriverLoad)


def model_bytes(model: Any) -> int:
    """Bytes of constants a prepared model holds: its copied values plus its memory pools."""
    return len(model.operand_values) + sum(int(getattr(p, "size", 0) or 0) for p in model.pools)


def check_preparation(driver: Any, model: Any, deadline: float | None) -> float:
    """Before preparing: refuse a model that can never fit (RESOURCE_EXHAUSTED_PERSISTENT, against the
    driver's `max_model_bytes`, if it has one) or a deadline the driver predicts it will miss (from its
    recent preparation time per operation). Returns the start time for record_preparation."""
    name = getattr(driver, "name", "driver")
    limit = getattr(driver, "max_model_bytes", None)
    if limit is not None and model_bytes(model) > limit:
        raise MltsError(ResultCode.RESOURCE_EXHAUSTED_PERSISTENT,
                        f"{name}: the model's {model_bytes(model)} bytes of constants can never fit in its "
                        f"{limit} bytes of memory")
    per_op = _per_driver(_prepare_estimates, driver, RunTimeEstimate).value
    estimate = None if per_op is None else per_op * max(1, len(model.main.operations))
    why = refusal(estimate, 0.0, deadline, f"{name}: preparation")
    if why is not None:
        raise why
    return time.monotonic()


def record_preparation(driver: Any, model: Any, started: float) -> None:
    seconds = time.monotonic() - started
    _per_driver(_prepare_estimates, driver, RunTimeEstimate).add(seconds / max(1, len(model.main.operations)))


def predicted_run(estimate: RunTimeEstimate, load: DriverLoad, operations: int, deadline: float | None, what: str,
                  run: Callable[..., Any], *args: Any) -> Any:
    """`run(*args, checkpoint)`, one execution under the driver's predictor (`load`: the driver's,
    load_of(driver)): refused before starting when it will miss its deadline, run with a ProgressCheckpoint
    otherwise (without a deadline, with the queue's checkpoint, if any); a successful run's own time
    (without time yielded to other work) goes into the estimate."""
    expected = estimate._value
    if deadline is not None:
        why = refusal(expected, load.pending(), deadline, what)
        if why is not None:
            return ExecutionResult(why.code, [], message=why.message)
        checkpoint = ProgressCheckpoint(operations, expected, deadline, current_checkpoint(), what)
    else:  # nothing to predict or abort: the queue's checkpoint alone (current_checkpoint's common case inline)
        stack = _local.stack
        checkpoint = stack[0] if stack and len(stack) == 1 else current_checkpoint()
    local = _local
    yielded_at_start = local.yielded_s
    runs = load._runs
    key = next(load._ids)
    runs[key] = expected or 0.0
    started = time.monotonic()
    try:
        result = run(*args, checkpoint)
    finally:
        runs.pop(key, None)
    if getattr(result, "status", None) == ResultCode.NO_ERROR:
        estimate.add(time.monotonic() - started - (local.yielded_s - yielded_at_start))
    return result
