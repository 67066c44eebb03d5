"""The driver service process: `python -m mlts.runtime.service.host FD` serves one driver over socket FD.

The main thread only reads: it maps the pools each call brings and hands the call to a thread of
its own, so slow or concurrent executions never stop it from reading. Each kind of execution reaches
the driver's own method for it, as an in-process driver's would: execute_synchronously, execute
(asynchronous: answered when its callback is notified), a burst's BurstContext, execute_fenced.
Reusable executions and bursts also get a shared-memory ring each, served by a thread of their own
(ring_host). When the channel ends (the client closed it, exited or died) the client's bursts are
closed (for at most a second) and the process exits, whatever its driver is doing: no orphans. SIGINT
is ignored: Ctrl-C is the client's to handle.
"""
from __future__ import annotations

import itertools
import os
import queue
import signal
import socket
import sys
import threading
import time
from typing import Any, Sequence

from .. import qos
from ..enums import Priority, ResultCode
from ..hal.validation import check_priority, validate_cache_handles
from ..errors import MltsError, error_from_exception
from ..hal import AllocatedBuffer, BufferToken, DeviceBuffer, ExecutionResult, IBurst, IDevice, IPreparedModel
from ..drivers.base import reusable_execution
from ..hal.validation import validate_deadline, validate_fence_fds, validate_timeout_after_fence
from .build import build_driver
from .channel import Channel, ChannelClosed
from .pools import PoolCache
from ..hal.sync_fence import close_fds
from .protocol import Call, Description, Reply, attach_pools
from .ring_host import BurstRing, ExecutionRing, Rings, guarded, open_ring, queue_label

#: how long past its deadline an asynchronous execution's callback is waited for (the client waits
#: client.DEADLINE_GRACE_S, longer, so that it gets this answer rather than giving up)
ASYNC_GRACE_S = 0.2
BURST_CLOSE_S = 1.0  # how long the client's bursts get to close when it is gone
#: calls whose non-pool descriptors (Call.fences) go to their handler: sync fences, or a ring's
_TAKES_FDS = ("execute_fenced", "execution_create", "burst_open")


class Server:
    """Serves the calls of one client for one driver (built by the first call, "start")."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.driver: IDevice | None = None
        self.pools = PoolCache()
        self.prepared: dict[int, IPreparedModel] = {}
        self.bursts: dict[int, IBurst] = {}
        self.buffers: dict[int, DeviceBuffer] = {}  # memory domains: tokens bound to this connection
        self.priorities: dict[int, int] = {}  # prepared or burst id -> its model's priority (for the queue)
        self.rings = Rings()  # reusable execution or burst id -> the thread serving its ring
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._workers = _Workers()

    @property
    def name(self) -> str:
        return self.driver.name if self.driver is not None else "driver service"

    def serve(self) -> None:
        """Until the end of the channel."""
        while True:
            try:
                message, fds = self.channel.recv()
            except ChannelClosed:
                self.close_bursts()
                return
            if not isinstance(message, Call):
                for fd in fds:
                    os.close(fd)
                continue
            if message.method == "shutdown":
                close_fds(fds)
                self.close_bursts()
                return
            self._release(message)
            try:  # the sync fences are the call's (closed after it), every other descriptor a pool's
                fences = _fence_fds(message, fds)
            except MltsError as e:
                close_fds(fds)
                self._reply(Reply(message.call_id, error=(int(e.code), f"{self.name}: {e.message}")))
                continue
            try:
                pools = self.pools.resolve(message.pools, fds, keep=message.fences)
            except MltsError as e:
                close_fds(fences)
                self._reply(Reply(message.call_id, error=(int(e.code), f"{self.name}: {e.message}")))
                continue
            except BaseException:
                close_fds(fences)
                raise
            if message.method in ("start", "ping"):
                self._handle(message, pools, fences)
                continue
            try:
                self._workers.submit(self._handle, message, pools, fences)
            except BaseException as e:  # no thread for it: the call fails, its fences are closed all the same
                close_fds(fences)
                self._reply(Reply(message.call_id, error=(int(ResultCode.RESOURCE_EXHAUSTED_TRANSIENT),
                                                          f"{self.name}: {message.method}: {type(e).__name__}: {e}")))

    def _release(self, message: Call) -> None:
        self.pools.forget(message.forget)
        for kind, remote_id in message.release:
            with self._lock:
                table = {"prepared": self.prepared, "burst": self.bursts, "buffer": self.buffers}.get(kind, {})
                obj = table.pop(remote_id, None)
            if kind in ("prepared", "burst"):  # their queue priorities (bursts under negative keys)
                self.priorities.pop(remote_id if kind == "prepared" else -remote_id, None)
            if kind == "burst":
                self.rings.stop(remote_id)
            if isinstance(obj, DeviceBuffer):
                try:
                    obj.free()
                except Exception:  # nor a driver failing to free a buffer
                    pass
            if isinstance(obj, IBurst):
                try:
                    obj.close()
                except Exception:  # a driver failing to release a burst must not stop the service
                    pass

    def _handle(self, message: Call, pools: list, fences: Sequence[int] = ()) -> None:
        """Run one call and answer it; its sync fences (execute_fenced's wait_for) are closed after the call,
        whatever happens, and before the answer (so a client that got its answer sees no descriptor held)."""
        try:
            reply = self._answer(message, pools, list(fences))
        finally:
            close_fds(fences)
        self._reply(reply)

    def _answer(self, message: Call, pools: list, fences: list[int]) -> Reply:
        handler = getattr(self, "call_" + message.method, None)
        start = time.perf_counter_ns()
        try:
            if handler is None:
                raise MltsError(ResultCode.BAD_DATA, f"unknown call {message.method!r}")
            if self.driver is None and message.method != "start":
                raise MltsError(ResultCode.BAD_STATE, f"{message.method} before start")
            if message.method in _TAKES_FDS:
                value = handler(pools, fences, *message.args)
            elif fences:
                raise MltsError(ResultCode.BAD_DATA, f"{self.name}: {message.method} takes no sync fences")
            else:
                value = handler(pools, *message.args)
            reply = Reply(message.call_id, value, driver_us=(time.perf_counter_ns() - start) // 1000)
        except BaseException as e:  # the driver's bug (even sys.exit) is its client's error, not our crash
            error = error_from_exception(e, f"{self.name}: {message.method}")
            reply = Reply(message.call_id, error=(int(error.code), error.message))
        return reply

    def _reply(self, reply: Reply) -> None:
        try:
            payload = Channel.encode(reply)
        except Exception as e:
            payload = Channel.encode(Reply(reply.call_id, error=(int(ResultCode.OP_FAILED), f"{self.name}: its "
                                                                 f"answer cannot be sent: {type(e).__name__}: {e}")))
        try:
            self.channel.send_encoded(payload)
        except ChannelClosed:  # the client is gone; so are we
            self.close_bursts()
            os._exit(0)

    def close_bursts(self, timeout: float = BURST_CLOSE_S) -> None:
        """The client is gone: its bursts are closed, as it would have (a driver may hold resources for
        them), within `timeout` seconds so that a driver's close() cannot keep the process alive."""
        with self._lock:
            bursts = list(self.bursts.values())
            self.bursts.clear()
        if not bursts:
            return

        def close_all() -> None:
            for burst in bursts:
                try:
                    burst.close()
                except Exception:  # a driver failing to release a burst must not stop the exit
                    pass

        closer = threading.Thread(target=close_all, name="mlts-service-burst-close", daemon=True)
        closer.start()
        closer.join(timeout)

    def _register(self, table: dict, obj: Any) -> int:
        with self._lock:
            remote_id = next(self._ids)
            table[remote_id] = obj
            return remote_id

    def _lookup(self, table: dict, remote_id: int, what: str) -> Any:
        with self._lock:
            obj = table.get(remote_id)
        if obj is None:
            raise MltsError(ResultCode.BAD_DATA, f"{self.name}: no {what} {remote_id} in the service")
        return obj

    # -- calls ----------------------------------------------------------------------------------
    def call_start(self, pools: list, factory_ref: str, args: tuple, kwargs: dict, name: str | None) -> Description:
        if self.driver is not None:
            raise MltsError(ResultCode.BAD_STATE, f"{self.name}: already started")
        driver = build_driver(factory_ref, args, kwargs, name)
        description = Description(str(driver.name), str(driver.version), int(driver.feature_level),
                                  int(driver.device_type), driver.get_capabilities(),
                                  tuple(driver.get_supported_extensions()),
                                  tuple(int(n) for n in driver.get_number_of_cache_files_needed()), os.getpid())
        self.driver = driver
        return description

    def call_ping(self, pools: list) -> dict[str, object]:
        """Liveness, and what the service holds (leak checks)."""
        with self._lock:
            stats = {"prepared": len(self.prepared), "bursts": len(self.bursts), "pools": len(self.pools),
                     "buffers": len(self.buffers), "rings": len(self.rings)}
        if self.driver is not None:  # this client's priority queue in front of the driver (mlts.runtime.qos)
            queue = qos.queue_for(self.driver).stats()
            stats["qos_yields"] = queue["yields"]
            stats["qos_finished"] = queue["finished"]  # labels "<device> #<id> <PRIORITY>", oldest first
        return stats

    def call_get_supported_operations(self, pools: list, model) -> list[bool]:
        return [bool(flag) for flag in self.driver.get_supported_operations(attach_pools(model, pools))]

    def call_prepare_model(self, pools: list, model, preference, priority, deadline, cache) -> int:
        if cache is not None:
            validate_cache_handles(cache, f"{self.name}: prepare_model")
        priority = check_priority(priority, f"{self.name}: prepare_model")
        prepared = self.driver.prepare_model(attach_pools(model, pools), preference, priority, deadline, cache)
        remote_id = self._prepared_id(prepared, "prepare_model")
        self.priorities[remote_id] = priority
        return remote_id

    def call_prepare_model_from_cache(self, pools: list, deadline, cache) -> int:
        """Cache files cross as paths (client and service share the file system), checked here."""
        validate_cache_handles(cache, f"{self.name}: prepare_model_from_cache")
        return self._prepared_id(self.driver.prepare_model_from_cache(deadline, cache), "prepare_model_from_cache")

    def _prepared_id(self, prepared: Any, call: str) -> int:
        if not isinstance(prepared, IPreparedModel):
            raise MltsError(ResultCode.OP_FAILED, f"{self.name}: {call} returned no prepared model")
        return self._register(self.prepared, prepared)

    def call_execute(self, pools: list, prepared_id: int, request, measure: bool, deadline, loop_timeout_ns: int):
        prepared = self._lookup(self.prepared, prepared_id, "prepared model")
        self._check_tokens(pools)
        return self._queued(prepared_id, prepared.execute_synchronously, attach_pools(request, pools), measure,
                            deadline, loop_timeout_ns)

    def call_execute_async(self, pools: list, prepared_id: int, request, measure: bool, deadline,
                           loop_timeout_ns: int, wait_s: float | None = None) -> ExecutionResult:
        """The driver's own asynchronous execute(), answered once its callback is notified (the outputs are
        then written, if the driver keeps the contract). A callback not notified by the deadline, or within
        `wait_s` (the client's call timeout less a margin), is answered as a failed execution, never left
        for the client to kill the service over."""
        prepared = self._lookup(self.prepared, prepared_id, "prepared model")
        call = f"{self.name}: execute_async"
        validate_deadline(deadline, call)  # waited by here
        if wait_s is not None and (isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or wait_s < 0):
            raise MltsError(ResultCode.BAD_DATA, f"{call}: wait limit must be None or seconds >= 0, got {wait_s!r}")
        self._check_tokens(pools)

        def run(request, measure, deadline, loop_timeout_ns) -> ExecutionResult:
            return await_callback(self.name, prepared, request, measure, deadline, loop_timeout_ns, wait_s)

        return self._queued(prepared_id, run, attach_pools(request, pools), measure, deadline, loop_timeout_ns)

    def call_execute_fenced(self, pools: list, fences: list[int], prepared_id: int, request, measure: bool, deadline,
                            loop_timeout_ns: int, timeout_after_fence_ns) -> ExecutionResult:
        """The driver gets the received fence descriptors and waits for them itself (they are closed after the
        call by _handle). The runtime sends only signalled fences (it waits before its own queue), so the
        turn taken here in this client's queue is never held waiting for one."""
        prepared = self._lookup(self.prepared, prepared_id, "prepared model")
        call = f"{self.name}: execute_fenced"
        wait_for = validate_fence_fds(fences, call)  # before the driver sees them
        timeout_after_fence_ns = validate_timeout_after_fence(timeout_after_fence_ns, call)
        self._check_tokens(pools)

        def run(request, measure, deadline, loop_timeout_ns) -> ExecutionResult:
            return prepared.execute_fenced(request, wait_for, measure, deadline, loop_timeout_ns,
                                           timeout_after_fence_ns)

        return self._queued(prepared_id, run, attach_pools(request, pools), measure, deadline, loop_timeout_ns)

    def call_burst_open(self, pools: list, fds: list[int], prepared_id: int) -> int:
        """The driver's burst, and the thread serving its ring when the call brought one."""
        prepared = self._lookup(self.prepared, prepared_id, "prepared model")
        ring = open_ring(fds, f"{self.name}: burst_open") if fds else None
        try:
            burst = prepared.configure_execution_burst()
        except BaseException:
            if ring is not None:
                ring.close()
            raise
        burst_id = self._register(self.bursts, burst)
        priority = self.priorities[-burst_id] = self.priorities.get(prepared_id, Priority.MEDIUM)  # negative keys
        if ring is not None:
            self.rings.serve(burst_id, BurstRing(burst, self.pools, self._check_tokens, ring, self.name,
                                                 qos.queue_for(self.driver), priority,
                                                 queue_label(self.name, -burst_id, priority)))
        return burst_id

    def call_burst_execute(self, pools: list, burst_id: int, request, measure: bool, deadline, loop_timeout_ns: int,
                           slot: int | None = None):
        """`slot`: the client keeps this request in its ring's slot, for later runs by slot number."""
        burst = self._lookup(self.bursts, burst_id, "burst")
        self._check_tokens(pools)
        request = attach_pools(request, pools)
        if slot is not None:
            self.rings.keep(burst_id, slot, request)
        return self._queued(-burst_id, burst.execute, request, measure, deadline, loop_timeout_ns)

    def call_execution_create(self, pools: list, fds: list[int], prepared_id: int, request, measure: bool,
                              loop_timeout_ns: int) -> int:
        """A reusable execution: the driver's own (createReusableExecution) or DefaultExecution, served by
        a thread of its own on the ring whose memory and eventfds came with the call."""
        prepared = self._lookup(self.prepared, prepared_id, "prepared model")
        self._check_tokens(pools)
        request = attach_pools(request, pools)
        execution = reusable_execution(prepared, request, measure, loop_timeout_ns)
        try:
            ring = open_ring(fds, f"{self.name}: execution_create")
        except BaseException:
            execution.close()
            raise
        execution_id = next(self._ids)
        priority = self.priorities.get(prepared_id, Priority.MEDIUM)
        self.rings.serve(execution_id, ExecutionRing(execution, ring, self.name, qos.queue_for(self.driver),
                                                     priority, queue_label(self.name, prepared_id, priority)))
        return execution_id

    def _queued(self, key: int, run, request, measure: bool, deadline, loop_timeout_ns: int) -> ExecutionResult:
        """An execution through this client's priority queue: the priority came with prepare_model, and the
        queue's checkpoint reaches in-process kernel drivers between operations."""
        priority = self.priorities.get(key, Priority.MEDIUM)
        try:
            return qos.run_admitted(qos.queue_for(self.driver), priority, deadline,
                                    queue_label(self.name, key, priority),
                                    guarded, self.name, run, request, measure, deadline, loop_timeout_ns)
        except MltsError as e:  # refused by the queue: busy, or the deadline passed while waiting
            return ExecutionResult(e.code, [], message=f"{self.name}: {e.message}")


    # -- memory domains -------------------------------------------------------------------------------
    def call_allocate(self, pools: list, desc, prepared_ids, input_roles, output_roles) -> int:
        """Allocate a buffer on models this connection prepared; its token is usable by this connection only."""
        if not isinstance(prepared_ids, (list, tuple)) or any(
                isinstance(i, bool) or not isinstance(i, int) for i in prepared_ids):
            raise MltsError(ResultCode.BAD_DATA, f"{self.name}: allocate: prepared models must be given by id")
        models = [self._lookup(self.prepared, i, "prepared model") for i in prepared_ids]
        allocated = self.driver.allocate(desc, models, input_roles, output_roles)
        if not isinstance(allocated, AllocatedBuffer) or not isinstance(allocated.buffer, DeviceBuffer) \
                or isinstance(allocated.token, bool) or not isinstance(allocated.token, int) or allocated.token <= 0:
            raise MltsError(ResultCode.OP_FAILED, f"{self.name}: allocate returned no buffer and valid token")
        with self._lock:
            self.buffers[allocated.token] = allocated.buffer
        return allocated.token

    def _buffer(self, token: Any, pools: list, call: str) -> DeviceBuffer:
        if len(pools) != 1:
            raise MltsError(ResultCode.BAD_DATA, f"{self.name}: {call} takes exactly one memory")
        return self._lookup(self.buffers, token, "buffer with the token")

    def call_buffer_copy_to(self, pools: list, token: int) -> None:
        self._buffer(token, pools, "copy_to").copy_to(pools[0])

    def call_buffer_copy_from(self, pools: list, token: int, dimensions) -> None:
        self._buffer(token, pools, "copy_from").copy_from(pools[0], dimensions)

    def _check_tokens(self, pools: list) -> None:
        """A request may name only buffers allocated through this connection (another client's are refused
        here, before the driver sees them)."""
        with self._lock:
            foreign = [p for p, pool in enumerate(pools)
                       if isinstance(pool, BufferToken) and pool.token not in self.buffers]
        if foreign:
            raise MltsError(ResultCode.BAD_DATA, f"{self.name}: request pools {foreign} name buffers not allocated "
                                                 f"by this client")


class _Workers:
    """Threads for calls: an idle one is reused, a new one is added when all are busy, so that a
    hung driver call never holds up the others (and no thread is started per call)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, fn, *args: Any) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        if spawn:
            threading.Thread(target=self._work, name="mlts-service-worker", daemon=True).start()
        self._jobs.put((fn, args))

    def _work(self) -> None:
        while True:
            fn, args = self._jobs.get()
            fn(*args)
            with self._lock:
                self._idle += 1


def _fence_fds(message: Call, fds: list[int]) -> list[int]:
    """The received descriptors that `message.fences` names as sync fences (distinct, in range), in order."""
    indexes = message.fences
    if not isinstance(indexes, tuple) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(fds)
                                             for i in indexes) or len(set(indexes)) != len(indexes):
        raise MltsError(ResultCode.BAD_DATA, f"{message.method}: sync fence indexes {indexes!r} do not name "
                                             f"the {len(fds)} descriptors that came with the call")
    return [fds[i] for i in indexes]



def await_callback(name: str, prepared: IPreparedModel, request, measure: bool, deadline: float | None,
                   loop_timeout_ns: int, wait_s: float | None) -> ExecutionResult:
    """Call the driver's execute() and wait for its callback: until the deadline (plus ASYNC_GRACE_S)
    and at most `wait_s`; None for both waits as long as the driver takes, as a synchronous call would."""
    callback = prepared.execute(request, measure, deadline, loop_timeout_ns)
    wait = getattr(callback, "wait", None)
    if not callable(wait):
        what = type(callback).__name__
        return ExecutionResult(ResultCode.OP_FAILED, [], message=f"{name}: execute() returned {what}, not an "
                                                                 f"execution callback")
    limits = [w for w in (None if deadline is None else max(0.0, deadline - time.monotonic()) + ASYNC_GRACE_S,
                          wait_s) if w is not None]
    result = wait(min(limits) if limits else None)
    if result is None:
        if deadline is not None and time.monotonic() >= deadline:
            return ExecutionResult(ResultCode.MISSED_DEADLINE_TRANSIENT, [],
                                   message=f"{name}: execute(): its callback was not notified by the deadline")
        within = "" if wait_s is None else f" within {wait_s:g} s"
        return ExecutionResult(ResultCode.OP_FAILED, [], message=f"{name}: execute(): its callback was not "
                                                                 f"notified{within}")
    if not isinstance(result, ExecutionResult):
        return ExecutionResult(ResultCode.OP_FAILED, [], message=f"{name}: execute(): its callback was notified "
                                                                 f"with {type(result).__name__}, not a result")
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m mlts.runtime.service.host FD  (started by mlts.runtime.service.ServiceDriver)",
              file=sys.stderr)
        return 2
    fd = int(argv[0])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.set_inheritable(fd, False)  # a driver's own child processes must not keep our channel open
    Server(Channel(socket.socket(fileno=fd))).serve()
    os._exit(0)  # executions still running in other threads end with us


if __name__ == "__main__":
    sys.exit(main())
