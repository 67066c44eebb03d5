"""Reusable executions and bursts of a driver service on shared-memory rings (issue 15).

A ServicePreparedModel's create_reusable_execution binds a request once in the service; each run is one
command on a ring (shared memory plus eventfds), not a channel message. These tests check that what
crosses a ring is what the channel would give: ADD results against hand-computed sums, the same
DEAD_OBJECT and missed-deadline errors, no growth over many runs, and bursts of new and repeated requests.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from fake_drivers import ADD, chain_model, dynamic_chain_model
from mlts.runtime import Memory, MltsError, Preference, Priority, ResultCode
from mlts.runtime.hal import DataLocation, ExecutionResult, Request, RequestArgument
from mlts.runtime.drivers.base import DefaultExecution
from mlts.runtime.service import ServiceDriver
from mlts.runtime.service import ring as ring_module
from mlts.runtime.service.ring import DEFAULT_POLL_US, MAX_POLL_NS, POLL_ENV, POLL_NS, poll_until, poll_window_ns
from mlts.runtime.service.runs import ServiceExecution

import service_test_drivers

KERNELS = "service_test_drivers:kernel_driver"
LOOP_NS = 2_000_000_000
SHAPE = (3, 4)


@pytest.fixture(scope="module")
def hosted():
    driver = ServiceDriver(KERNELS, ("svc-ring",))
    yield driver
    driver.close()


def prepare(driver, model=None):
    model = model or chain_model([ADD], shape=SHAPE)
    return driver.prepare_model(model.hal_model(), Preference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None)


def user_request(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> Request:
    """The request a runtime builds for arrays bound by the application: one pool per array."""
    pools = (Memory.wrap_array(x, writable=False), Memory.wrap_array(y, writable=False),
             Memory.wrap_array(out, writable=True))
    return Request((RequestArgument(False, DataLocation(0, 0, x.nbytes)),
                    RequestArgument(False, DataLocation(1, 0, y.nbytes))),
                   (RequestArgument(False, DataLocation(2, 0, out.nbytes)),), pools)


def shared_request(x: np.ndarray, y: np.ndarray) -> tuple[Request, Memory]:
    """x, y and the output in one shared memory (it crosses as a descriptor)."""
    n = x.nbytes
    memory = Memory.create_shared(3 * n)
    memory.view(0, n)[:] = x.tobytes()
    memory.view(n, n)[:] = y.tobytes()
    return Request((RequestArgument(False, DataLocation(0, 0, n)), RequestArgument(False, DataLocation(0, n, n))),
                   (RequestArgument(False, DataLocation(0, 2 * n, n)),), (memory,)), memory


def values(seed: int) -> np.ndarray:
    """Small integers in float32: their sums are exact, so x + y is the hand-computed ADD."""
    return np.random.default_rng(seed).integers(-1000, 1000, SHAPE).astype(np.float32)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def wait_for(condition, timeout: float = 3.0) -> bool:
    end = time.monotonic() + timeout
    while not condition() and time.monotonic() < end:
        time.sleep(0.02)
    return condition()


# -- results ----------------------------------------------------------------------------------------------
def test_runs_cross_the_ring_and_give_the_hand_computed_sums(hosted):
    prepared = prepare(hosted)
    x, y, out = values(1), values(2), np.zeros(SHAPE, np.float32)
    execution = prepared.create_reusable_execution(user_request(x, y, out), True, LOOP_NS)
    assert isinstance(execution, ServiceExecution)
    before = hosted.channel_stats()
    for k in range(20):
        x[...] = values(10 + k)  # the bound arrays are read afresh on every run
        result = execution.execute_synchronously(None)
        assert result.status == ResultCode.NO_ERROR, result.message
        assert out.tobytes() == (x + y).tobytes()
        assert [s.dimensions for s in result.output_shapes] == [SHAPE] and result.output_shapes[0].is_sufficient
        ct = result.call_timing  # the split Execution.get_timing_breakdown makes
        assert ct.driver > 0 and ct.ipc >= 0 and ct.runtime >= 0
        assert 0 <= result.timing.time_in_driver < 10**7  # measured: the driver's timing crosses in binary
    assert hosted.channel_stats() == before  # not one message through the channel
    execution.close()
    assert execution.execute_synchronously(None).status == ResultCode.BAD_STATE


def test_odd_results_cross_pickled_and_equal_the_in_process_ones(hosted):
    """An output of unknown shape with too small a buffer: OUTPUT_INSUFFICIENT_SIZE with the needed
    dimensions and the driver's message, as the same driver gives it in this process."""
    model = dynamic_chain_model([ADD], shape=SHAPE)
    x, y = values(3), values(4)
    small = np.zeros(2, np.float32)
    local = service_test_drivers.kernel_driver("svc-ring").prepare_model(
        model.hal_model(), Preference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None)
    want = DefaultExecution(local, user_request(x, y, small), False, LOOP_NS).execute_synchronously(None)
    assert want.status == ResultCode.OUTPUT_INSUFFICIENT_SIZE and want.message
    execution = prepare(hosted, model).create_reusable_execution(user_request(x, y, small), False, LOOP_NS)
    got = execution.execute_synchronously(None)
    execution.close()
    assert (got.status, got.output_shapes, got.message) == (want.status, want.output_shapes, want.message)
    assert got.output_shapes[0].dimensions == SHAPE and not got.output_shapes[0].is_sufficient


def test_many_runs_reuse_the_same_memory_and_descriptors(hosted):
    prepared = prepare(hosted)
    x, y, out = values(5), values(6), np.zeros(SHAPE, np.float32)
    execution = prepared.create_reusable_execution(user_request(x, y, out), False, LOOP_NS)
    execution.execute_synchronously(None)
    fds, stats, channel = open_fds(), hosted.service_stats(), hosted.channel_stats()
    ring_map = execution._ring.ring._map
    for _ in range(300):
        assert execution.execute_synchronously(None).status == ResultCode.NO_ERROR
    assert out.tobytes() == (x + y).tobytes()
    assert open_fds() == fds and execution._ring.ring._map is ring_map
    assert hosted.channel_stats()["messages_sent"] == channel["messages_sent"] + 0
    after = hosted.service_stats()
    assert (after["pools"], after["rings"]) == (stats["pools"], stats["rings"])
    ring = execution._ring.ring
    execution.close()  # both ends let go: the service's ring thread exits, our descriptors close
    assert wait_for(lambda: hosted.service_stats()["rings"] == stats["rings"] - 1)
    assert ring.closed and open_fds() <= fds - 3


def test_concurrent_executions_on_one_service(hosted):
    prepared = prepare(hosted)
    errors = []

    def worker(seed: int) -> None:
        try:
            x, y, out = values(seed), values(seed + 1), np.zeros(SHAPE, np.float32)
            execution = prepared.create_reusable_execution(user_request(x, y, out), False, LOOP_NS)
            for k in range(40):
                x[...] = values(seed * 100 + k)
                result = execution.execute_synchronously(None)
                assert result.status == ResultCode.NO_ERROR, result.message
                assert out.tobytes() == (x + y).tobytes()
            execution.close()
        except Exception as e:  # reported below with the thread's seed
            errors.append((seed, e))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors


# -- death and silence ----------------------------------------------------------------------------------
def test_a_service_aborting_mid_run_gives_the_channels_dead_object():
    crashing = ServiceDriver("service_test_drivers:CrashingDriver", ("svc-ring-crash",),
                             {"at": "execute", "delay_s": 0.3}, restart=False)
    try:
        execution = prepare(crashing).create_reusable_execution(
            user_request(values(1), values(2), np.zeros(SHAPE, np.float32)), False, LOOP_NS)
        t0 = time.monotonic()
        result = execution.execute_synchronously(None)
        assert time.monotonic() - t0 < 0.3 + 1.0
        assert result.status == ResultCode.DEAD_OBJECT
        assert result.message.startswith("driver service 'svc-ring-crash' died (signal SIGABRT) during execute")
        later = execution.execute_synchronously(None)  # as a channel call after the death: refused at once
        assert later.status == ResultCode.DEAD_OBJECT
        assert later.message.startswith("driver service 'svc-ring-crash' died (signal SIGABRT) during execute; "
                                        "execute refused")
    finally:
        crashing.close()


def test_a_service_killed_mid_run_and_a_burst_on_it():
    hanging = ServiceDriver("service_test_drivers:HangingDriver", ("svc-ring-kill",), {"sleep_s": 30.0},
                            restart=False)
    try:
        prepared = prepare(hanging)
        execution = prepared.create_reusable_execution(
            user_request(values(1), values(2), np.zeros(SHAPE, np.float32)), False, LOOP_NS)
        threading.Timer(0.3, os.kill, (hanging.pid, signal.SIGKILL)).start()
        t0 = time.monotonic()
        result = execution.execute_synchronously(None)
        assert time.monotonic() - t0 < 0.3 + 1.5
        assert result.status == ResultCode.DEAD_OBJECT
        assert "svc-ring-kill' died (signal SIGKILL) during execute" in result.message
        burst = prepared.configure_execution_burst()
        r = burst.execute(user_request(values(1), values(2), np.zeros(SHAPE, np.float32)), False, None, LOOP_NS)
        assert r.status == ResultCode.DEAD_OBJECT and "refused" in r.message
    finally:
        hanging.close()


def _hanging_execution(name: str, *, call_timeout: float):
    """A service whose driver sleeps 30 s in every run, and a reusable execution of the ADD on it."""
    hanging = ServiceDriver("service_test_drivers:HangingDriver", (name,), {"sleep_s": 30.0},
                            call_timeout=call_timeout, restart=False)
    execution = prepare(hanging).create_reusable_execution(
        user_request(values(1), values(2), np.zeros(SHAPE, np.float32)), False, LOOP_NS)
    return hanging, execution


def test_a_hung_service_misses_the_deadline_and_then_the_call_timeout_kills_it():
    hanging, execution = _hanging_execution("svc-ring-hang", call_timeout=1.5)
    try:
        t0 = time.monotonic()
        result = execution.execute_synchronously(time.monotonic() + 0.2)
        assert time.monotonic() - t0 < 1.2
        assert result.status == ResultCode.MISSED_DEADLINE_TRANSIENT
        assert result.message == "driver service 'svc-ring-hang' did not answer execute by its deadline"
        hanging.wait_for_ready()  # busy, not dead
        # the ring is still busy with the run given up on: this one goes through the channel, whose call
        # timeout (no deadline) kills the service, as for any channel call
        t0 = time.monotonic()
        result = execution.execute_synchronously(None)
        assert result.status == ResultCode.DEAD_OBJECT
        assert "did not answer execute within 1.5 s and was killed" in result.message
        assert time.monotonic() - t0 < 1.5 + 1.0 and not hanging.alive
    finally:
        hanging.close()


def test_the_call_timeout_kills_a_service_hung_on_a_ring_run():
    hanging, execution = _hanging_execution("svc-ring-hang2", call_timeout=0.5)
    try:
        t0 = time.monotonic()
        result = execution.execute_synchronously(None)
        assert result.status == ResultCode.DEAD_OBJECT
        assert "svc-ring-hang2' died (did not answer execute within 0.5 s and was killed) during execute" \
            in result.message
        assert time.monotonic() - t0 < 2.0 and not hanging.alive
    finally:
        hanging.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork of a threaded process, on purpose
def test_a_forked_child_neither_uses_nor_closes_the_parents_ring(hosted):
    x, y, out = values(7), values(8), np.zeros(SHAPE, np.float32)
    execution = prepare(hosted).create_reusable_execution(user_request(x, y, out), False, LOOP_NS)
    pid = os.fork()
    if pid == 0:  # the child: refused, and closing its copy must not stop the parent's ring thread
        result = execution.execute_synchronously(None)
        execution.close()
        os._exit(0 if result.status == ResultCode.DEAD_OBJECT and "forked" in result.message else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    x[...] = values(9)
    assert execution.execute_synchronously(None).status == ResultCode.NO_ERROR
    assert out.tobytes() == (x + y).tobytes()
    execution.close()


def test_creation_failures_are_errors():
    crashing = ServiceDriver("service_test_drivers:CrashingDriver", ("svc-ring-dead",), {"at": "execute"},
                             restart=False)
    prepared = prepare(crashing)
    crashing.close()
    with pytest.raises(MltsError) as e:
        prepared.create_reusable_execution(user_request(values(1), values(2), np.zeros(SHAPE, np.float32)),
                                           False, LOOP_NS)
    assert e.value.code == ResultCode.DEAD_OBJECT


# -- bursts -------------------------------------------------------------------------------------------------
def test_bursts_of_new_and_repeated_requests(hosted):
    prepared = prepare(hosted)
    burst = prepared.configure_execution_burst()
    arrays = [(values(20 + k), values(40 + k), np.zeros(SHAPE, np.float32)) for k in range(6)]
    requests = [user_request(*a) for a in arrays]

    def check(k: int) -> ExecutionResult:
        result = burst.execute(requests[k], False, None, LOOP_NS)
        x, y, out = arrays[k]
        assert result.status == ResultCode.NO_ERROR, result.message
        assert out.tobytes() == (x + y).tobytes(), k
        assert result.call_timing is not None and result.call_timing.driver > 0
        return result

    for k in (0, 0, 1, 0, 1):  # first runs cross the channel or the ring, repeats run by slot
        check(k)
    before = hosted.channel_stats()
    for k in (0, 1, 0, 1, 1, 0):
        arrays[k][0][...] = values(60 + k)  # the arrays are read afresh each time
        check(k)
    assert hosted.channel_stats() == before  # repeated requests: nothing through the channel
    for k in (2, 3, 4, 5, 0, 1, 5, 2):  # more requests than slots: the oldest are replaced
        check(k)
    memory_requests = [shared_request(values(80 + k), values(90 + k)) for k in range(2)]
    for k in (0, 1, 0, 1):  # pools crossing as descriptors, then by slot
        request, memory = memory_requests[k]
        assert burst.execute(request, True, None, LOOP_NS).status == ResultCode.NO_ERROR
        got = np.frombuffer(memory.view(96, 48), np.float32).reshape(SHAPE)
        assert got.tobytes() == (values(80 + k) + values(90 + k)).tobytes()
    stats = hosted.service_stats()
    burst.close()
    assert wait_for(lambda: hosted.service_stats()["rings"] == stats["rings"] - 1)
    assert hosted.service_stats()["bursts"] == stats["bursts"] - 1


def test_a_new_request_each_time_travels_in_the_ring(hosted):
    """The runtime's non-reusable executions pass a new Request per call: once the staging memory is mapped,
    each crosses pickled in the ring, not through the channel."""
    prepared = prepare(hosted)
    burst = prepared.configure_execution_burst()
    x, y, out = values(1), values(2), np.zeros(SHAPE, np.float32)
    for _ in range(8):
        assert burst.execute(user_request(x, y, out), False, None, LOOP_NS).status == ResultCode.NO_ERROR
    before = hosted.channel_stats()
    for k in range(20):
        x[...] = values(100 + k)
        out[...] = 0
        assert burst.execute(user_request(x, y, out), False, None, LOOP_NS).status == ResultCode.NO_ERROR
        assert out.tobytes() == (x + y).tobytes()
    assert hosted.channel_stats()["messages_sent"] == before["messages_sent"]
    burst.close()


def test_concurrent_executions_on_one_burst(hosted):
    prepared = prepare(hosted)
    burst = prepared.configure_execution_burst()
    errors = []

    def worker(seed: int) -> None:
        try:
            x, y, out = values(seed), values(seed + 1), np.zeros(SHAPE, np.float32)
            request = user_request(x, y, out)
            for k in range(30):
                x[...] = values(seed * 100 + k)
                result = burst.execute(request, False, None, LOOP_NS)  # ring or channel, whichever is free
                assert result.status == ResultCode.NO_ERROR, result.message
                assert out.tobytes() == (x + y).tobytes()
        except Exception as e:  # reported below with the thread's seed
            errors.append((seed, e))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    burst.close()


# -- polling before sleeping -----------------------------------------------------------------------------
@pytest.mark.parametrize("window_us", ["0", "5000"])
def test_runs_with_and_without_polling_give_the_hand_computed_sums(hosted, monkeypatch, window_us):
    """0: each side sleeps on its eventfd at once; 5 ms: the host polls for the next command and the
    client for the answer (every run of this loop lands within the window)."""
    monkeypatch.setenv(POLL_ENV, window_us)
    prepared = prepare(hosted)
    x, y, out = values(1), values(2), np.zeros(SHAPE, np.float32)
    execution = prepared.create_reusable_execution(user_request(x, y, out), False, LOOP_NS)
    assert execution._ring.ring.words[POLL_NS] == int(window_us) * 1000  # the window the host polls for
    before = hosted.channel_stats()
    for k in range(30):
        x[...] = values(100 + k)
        assert execution.execute_synchronously(None).status == ResultCode.NO_ERROR
        assert out.tobytes() == (x + y).tobytes()
    assert hosted.channel_stats() == before
    execution.close()


@pytest.mark.parametrize("raw", ["abc", "-1", "1.5", str(MAX_POLL_NS // 1000 + 1)])
def test_a_bad_polling_window_is_a_clear_error_and_leaks_nothing(hosted, monkeypatch, raw):
    prepared = prepare(hosted)
    monkeypatch.setenv(POLL_ENV, raw)
    fds = open_fds()
    with pytest.raises(MltsError) as e:
        prepared.create_reusable_execution(user_request(values(1), values(2), np.zeros(SHAPE, np.float32)),
                                           False, LOOP_NS)
    assert e.value.code == ResultCode.BAD_DATA and POLL_ENV in e.value.message and repr(raw) in e.value.message
    assert open_fds() == fds


def test_the_polling_window_default_and_machines_without_ordered_stores(monkeypatch):
    monkeypatch.delenv(POLL_ENV, raising=False)
    monkeypatch.setattr(ring_module.platform, "machine", lambda: "x86_64")
    assert poll_window_ns() == DEFAULT_POLL_US * 1000
    monkeypatch.setenv(POLL_ENV, "0")
    assert poll_window_ns() == 0
    monkeypatch.setenv(POLL_ENV, "250")
    assert poll_window_ns() == 250_000
    monkeypatch.setattr(ring_module.platform, "machine", lambda: "aarch64")  # weakly ordered: never polls
    assert poll_window_ns() == 0


def test_poll_until_sees_a_change_or_gives_up_after_its_window():
    words = memoryview(bytearray(16)).cast("Q")
    start = time.perf_counter_ns()
    assert poll_until(words, 1, 0, 2_000_000) is False  # nothing changes: False once the window is over
    assert time.perf_counter_ns() - start >= 2_000_000
    words[1] = 7
    assert poll_until(words, 1, 0, 10**12) is True  # already changed: at once
    words[1] = 0
    writer = threading.Timer(0.01, lambda: words.__setitem__(1, 5))
    writer.start()
    start = time.perf_counter_ns()
    assert poll_until(words, 1, 0, 10 * 10**9) is True  # changed by another thread within the window
    assert time.perf_counter_ns() - start < 5 * 10**9
    writer.join()
