"""Fenced execution: Events backed by sync fences (exported and imported as file descriptors),
chains of executions waiting on each other's fences, failed dependencies, timeouts, timingLaunched /
timingFenced, and no descriptor leaks; on nnapi-reference and on sample-all hosted as a service.
At the HAL (as Android's VTS does): PreparedModel.execute_fenced must not read the inputs before its
fences signal, in this process and across a service's socket; the seeded fault `ignores-fences@fenced`."""
from __future__ import annotations

import fcntl
import gc
import os
import select
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from fake_drivers import (ADD, MUL, FailingExecutionDriver, FakeDriver, FakePreparedModel, chain_expected, chain_model,
                          rand)
from mlts.runtime import (Compilation, DurationCode, Event, Execution, Memory, MltsError, ResultCode, get_device)
from mlts.runtime.drivers.faulty import create as faulty_driver
from mlts.runtime.enums import NO_TIMING, Preference, Priority
from mlts.runtime.hal import DataLocation, Request, RequestArgument, Timing
from mlts.runtime.service import ServiceDriver
from mlts.runtime.hal.sync_fence import HAS_EVENTFD, SIGNALLED_ERROR, wait_all

HOLD_S = 0.1  # how long a test holds a dependency before signalling it


@pytest.fixture(scope="module")
def sample_service():
    driver = ServiceDriver("mlts.runtime.drivers.sample:sample_drivers", name="sample-all")
    yield driver
    driver.close()


@pytest.fixture(params=["nnapi-reference", "sample-all-service"])
def device(request, register):
    if request.param == "nnapi-reference":
        return get_device("nnapi-reference")
    (d,) = register(request.getfixturevalue("sample_service"))
    return d


def compiled(ops, device) -> Compilation:
    c = Compilation.for_devices(chain_model(ops), [device])
    c.finish()
    return c


def execution(comp, x, y, out) -> Execution:
    ex = Execution(comp)
    ex.set_input(0, x)
    ex.set_input(1, y)
    ex.set_output(0, out)
    return ex


class OutsideFence:
    """A fence signalled by the test (as another library would): an eventfd, or a pipe elsewhere."""

    def __init__(self) -> None:
        if HAS_EVENTFD:
            self.read_fd = self.write_fd = os.eventfd(0, os.EFD_CLOEXEC)
        else:
            self.read_fd, self.write_fd = os.pipe()

    def signal(self, value: int = 1) -> None:
        if HAS_EVENTFD:
            os.eventfd_write(self.write_fd, value)
        else:
            os.write(self.write_fd, b"\x01")

    def close(self) -> None:
        os.close(self.read_fd)
        if self.write_fd != self.read_fd:
            os.close(self.write_fd)


@pytest.fixture
def outside():
    fence = OutsideFence()
    yield fence
    fence.close()


def readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


# -- chains ---------------------------------------------------------------------------------------------
def test_a_chain_of_fenced_executions(device):
    x, y = rand(seed=1), rand(seed=2)
    s1, s2, s3 = (np.full((3, 4), np.nan, np.float32) for _ in range(3))
    ev1 = execution(compiled([ADD], device), x, y, s1).start_compute_with_dependencies([])
    ev2 = execution(compiled([MUL], device), s1, y, s2).start_compute_with_dependencies([ev1])
    ev3 = execution(compiled([ADD], device), s2, y, s3).start_compute_with_dependencies([ev2, ev1])
    ev3.wait(30)
    assert ev1.is_signalled and ev2.is_signalled
    np.testing.assert_allclose(s3, (x + y) * y + y, rtol=1e-6)


def test_a_dependent_execution_waits_for_a_fence_signalled_from_another_thread(device, outside):
    dep = Event.from_sync_fence_fd(outside.read_fd)
    x, y = rand(seed=3), rand(seed=4)
    out = np.full((3, 4), np.nan, np.float32)
    event = execution(compiled([ADD], device), x, y, out).start_compute_with_dependencies([dep])
    time.sleep(HOLD_S)
    assert not event.is_signalled and np.isnan(out).all()  # held by the unsignalled fence
    threading.Thread(target=outside.signal).start()
    event.wait(30)
    np.testing.assert_allclose(out, x + y, rtol=1e-6)
    dep.free()


# -- export / import -----------------------------------------------------------------------------------------
def test_exported_fd_becomes_readable_when_the_execution_completes(device, outside):
    gate = Event.from_sync_fence_fd(outside.read_fd)
    x, y = rand(seed=5), rand(seed=6)
    out = np.empty((3, 4), np.float32)
    event = execution(compiled([ADD], device), x, y, out).start_compute_with_dependencies([gate])
    fd = event.get_sync_fence_fd()
    try:
        assert fd not in (outside.read_fd, event._fence.fileno())  # a new descriptor, the caller's
        assert not readable(fd, 0.05)
        outside.signal()
        assert readable(fd, 30)
        event.wait(30)
        imported = Event.from_sync_fence_fd(fd)  # round trip: the same fence, another Event
        imported.wait(5)
        assert imported.is_signalled
        imported.free()
    finally:
        os.close(fd)
    np.testing.assert_allclose(out, x + y, rtol=1e-6)


CHILD = textwrap.dedent("""
    import os, select, sys, time
    wait_fd, signal_fd, eventfd = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
    time.sleep({hold})
    if eventfd:
        os.eventfd_write(signal_fd, 1)
    else:
        os.write(signal_fd, b"\\x01")
    ready = select.select([wait_fd], [], [], 30)[0]
    print("signalled" if ready else "timeout", flush=True)
""").format(hold=HOLD_S)


def test_fences_cross_to_another_process(device, outside):
    """The child signals our dependency's fence, then waits on the execution's exported fence."""
    dep = Event.from_sync_fence_fd(outside.read_fd)
    x, y = rand(seed=7), rand(seed=8)
    out = np.full((3, 4), np.nan, np.float32)
    event = execution(compiled([MUL], device), x, y, out).start_compute_with_dependencies([dep])
    exported = event.get_sync_fence_fd()
    try:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(exported), str(outside.write_fd),
                                  "1" if HAS_EVENTFD else "0"],
                                 pass_fds=(exported, outside.write_fd), stdout=subprocess.PIPE, text=True)
        stdout, _ = child.communicate(timeout=60)
    finally:
        os.close(exported)
    assert child.returncode == 0 and stdout.strip() == "signalled"
    event.wait(5)
    np.testing.assert_allclose(out, x * y, rtol=1e-6)


def test_invalid_fences_are_rejected():
    for bad in (-1, 1.5, "3", None, True):
        with pytest.raises(MltsError) as e:
            Event.from_sync_fence_fd(bad)
        assert e.value.code == ResultCode.BAD_DATA
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(MltsError) as e:
        Event.from_sync_fence_fd(r)  # closed
    assert e.value.code == ResultCode.BAD_DATA and "not an open file descriptor" in e.value.message
    freed = Event()
    freed.free()
    with pytest.raises(MltsError) as e:
        freed.get_sync_fence_fd()
    assert e.value.code == ResultCode.BAD_STATE
    comp = compiled([ADD], get_device("nnapi-reference"))
    ex = execution(comp, rand(), rand(), np.empty((3, 4), np.float32))
    with pytest.raises(MltsError) as e:
        ex.start_compute_with_dependencies([freed])
    assert e.value.code == ResultCode.BAD_DATA


# -- failures ------------------------------------------------------------------------------------------------
def test_a_failed_dependency_fails_the_chain_after_it(register, device):
    (bad,) = register(FailingExecutionDriver("fenced-bad", mode="status"))
    failing = execution(compiled([ADD], bad), rand(), rand(), np.empty((3, 4), np.float32))
    ev1 = failing.start_compute_with_dependencies([])
    out2, out3 = np.full((3, 4), np.nan, np.float32), np.full((3, 4), np.nan, np.float32)
    ev2 = execution(compiled([ADD], device), rand(), rand(), out2).start_compute_with_dependencies([ev1])
    ev3 = execution(compiled([ADD], device), rand(), rand(), out3).start_compute_with_dependencies([ev2])
    with pytest.raises(MltsError) as e1:
        ev1.wait(30)
    assert e1.value.code == ResultCode.OP_FAILED
    for ev in (ev2, ev3):
        with pytest.raises(MltsError) as e:
            ev.wait(30)
        assert e.value.code == ResultCode.OP_FAILED and "dependency 0 failed" in e.value.message
    assert np.isnan(out2).all() and np.isnan(out3).all()  # the dependents never ran
    fd = ev1.get_sync_fence_fd()  # a failed event's fence is signalled, and carries the failure
    try:
        assert readable(fd, 0)
        if HAS_EVENTFD:
            with pytest.raises(MltsError) as e:
                Event.from_sync_fence_fd(fd).wait(1)
            assert e.value.code == ResultCode.OP_FAILED
    finally:
        os.close(fd)


@pytest.mark.skipif(not HAS_EVENTFD, reason="a pipe fence carries no failure status")
def test_an_outside_fence_signalled_with_an_error_fails_the_dependent(device, outside):
    dep = Event.from_sync_fence_fd(outside.read_fd)
    out = np.full((3, 4), np.nan, np.float32)
    event = execution(compiled([ADD], device), rand(), rand(), out).start_compute_with_dependencies([dep])
    outside.signal(SIGNALLED_ERROR)
    with pytest.raises(MltsError) as e:
        event.wait(30)
    assert e.value.code == ResultCode.OP_FAILED and np.isnan(out).all()


# -- timeouts --------------------------------------------------------------------------------------------------
def test_the_fence_timeout_counts_from_the_dependencies_signalled(device, outside):
    dep = Event.from_sync_fence_fd(outside.read_fd)
    x, y = rand(seed=9), rand(seed=10)
    out = np.full((3, 4), np.nan, np.float32)
    # 1 s after the fences: met, however long the dependency is held before that.
    event = execution(compiled([ADD], device), x, y, out).start_compute_with_dependencies(
        [dep], timeout_ns=10**9)
    time.sleep(HOLD_S * 2)
    outside.signal()
    event.wait(30)
    np.testing.assert_allclose(out, x + y, rtol=1e-6)


def test_the_execution_timeout_counts_from_the_call(device, outside):
    dep = Event.from_sync_fence_fd(outside.read_fd)
    out = np.full((3, 4), np.nan, np.float32)
    ex = execution(compiled([ADD], device), rand(), rand(), out)
    ex.set_timeout(int(HOLD_S / 2 * 1e9))  # passes while the dependency is held
    event = ex.start_compute_with_dependencies([dep])
    time.sleep(HOLD_S)
    outside.signal()
    with pytest.raises(MltsError) as e:
        event.wait(30)
    assert e.value.code in (ResultCode.MISSED_DEADLINE_PERSISTENT, ResultCode.MISSED_DEADLINE_TRANSIENT)
    assert np.isnan(out).all()


def test_event_wait_timeout_on_an_unsignalled_fence(outside):
    with pytest.raises(MltsError) as e:
        Event.from_sync_fence_fd(outside.read_fd).wait(0.01)
    assert e.value.code == ResultCode.MISSED_DEADLINE_TRANSIENT


# -- timing ------------------------------------------------------------------------------------------------------
def test_timing_launched_and_fenced_are_sane_and_ordered(device, outside):
    dep = Event.from_sync_fence_fd(outside.read_fd)
    ex = execution(compiled([ADD] * 3, device), rand(), rand(), np.empty((3, 4), np.float32))
    ex.set_measure_timing(True)
    launched = time.perf_counter_ns()
    event = ex.start_compute_with_dependencies([dep])
    time.sleep(HOLD_S)
    outside.signal()
    event.wait(30)
    wall = time.perf_counter_ns() - launched
    d = {code: ex.get_duration(code) for code in DurationCode}
    assert NO_TIMING not in d.values(), d
    # timingLaunched: from the launch to the signal, so it includes the time the fence was held.
    assert HOLD_S * 1e9 <= d[DurationCode.IN_DRIVER] <= wall
    # timingFenced: from the dependencies signalled to the signal, so it excludes it.
    assert d[DurationCode.FENCED_IN_DRIVER] < d[DurationCode.IN_DRIVER] - HOLD_S * 1e9 * 0.9
    assert d[DurationCode.FENCED_ON_HARDWARE] <= d[DurationCode.FENCED_IN_DRIVER]
    assert d[DurationCode.ON_HARDWARE] == d[DurationCode.FENCED_ON_HARDWARE]


def test_no_timing_unless_measured():
    ex = execution(compiled([ADD], get_device("nnapi-reference")), rand(), rand(), np.empty((3, 4), np.float32))
    ex.start_compute_with_dependencies([]).wait(30)
    assert all(ex.get_duration(code) == NO_TIMING for code in DurationCode)


# -- descriptors ----------------------------------------------------------------------------------------------
def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_no_descriptor_leaks_over_many_executions():
    comp = compiled([ADD], get_device("nnapi-reference"))
    x, y = rand(seed=11), rand(seed=12)

    def round_trip():
        out = np.empty((3, 4), np.float32)
        ev1 = execution(comp, x, y, out).start_compute()
        ev2 = execution(comp, out, y, np.empty((3, 4), np.float32)).start_compute_with_dependencies([ev1])
        fd = ev2.get_sync_fence_fd()
        imported = Event.from_sync_fence_fd(fd)
        os.close(fd)
        imported.wait(30)
        ev2.wait(30)

    round_trip()  # anything opened once for good (lazy initialisation) is opened now
    gc.collect()
    before = open_fds()
    for _ in range(200):
        round_trip()
    gc.collect()
    assert open_fds() == before


# -- the HAL: PreparedModel.execute_fenced ---------------------------------------------------------------------
HAL_ROW = 48  # one (3, 4) float32 tensor
HAL_WAIT_S = 0.2  # how long an execution waiting on an unsignalled fence must still be running


def hal_prepared(driver, ops=(ADD,)):
    """`ops` chained over x, y prepared directly on `driver` (no runtime in between)."""
    return driver.prepare_model(chain_model(list(ops)).hal_model(), Preference.FAST_SINGLE_ANSWER, Priority.MEDIUM,
                                None, None)


def hal_request(pool: Memory) -> Request:
    """x at 0, y at 48, the output at 96 of one shared memory (it crosses to a service as a descriptor)."""
    def loc(k: int) -> DataLocation:
        return DataLocation(0, HAL_ROW * k, HAL_ROW)

    return Request((RequestArgument(False, loc(0)), RequestArgument(False, loc(1))), (RequestArgument(False, loc(2)),),
                   (pool,))


def tensor_at(pool: Memory, k: int) -> np.ndarray:
    return pool.array(HAL_ROW * k, np.float32, (3, 4))


def fenced_probe(prepared, measure: bool = True):
    """VTS-style: execute_fenced on an unsignalled fence in a thread; after HAL_WAIT_S, write NEW inputs,
    then signal. Returns (still running before the signal, result, output, old x, new x, y)."""
    pool = Memory.create_shared(3 * HAL_ROW)
    old_x, new_x, y = rand(seed=21), rand(seed=22), rand(seed=23)
    tensor_at(pool, 0)[:] = old_x
    tensor_at(pool, 1)[:] = y
    tensor_at(pool, 2)[:] = np.nan
    fence = OutsideFence()
    box: list = []
    try:
        thread = threading.Thread(target=lambda: box.append(prepared.execute_fenced(
            hal_request(pool), [fence.read_fd], measure, None, 10**9, None)))
        thread.start()
        thread.join(HAL_WAIT_S)
        waited = thread.is_alive()
        tensor_at(pool, 0)[:] = new_x  # whoever signals the fence wrote the inputs first
        fence.signal()
        thread.join(30)
        assert not thread.is_alive() and len(box) == 1
    finally:
        fence.close()
    return waited, box[0], tensor_at(pool, 2).copy(), old_x, new_x, y


def test_hal_execute_fenced_reads_the_inputs_only_after_its_fences(device):
    waited, result, out, old_x, new_x, y = fenced_probe(hal_prepared(device.driver))
    assert waited, "execute_fenced returned before its fence was signalled"
    assert result.status == ResultCode.NO_ERROR, result.message
    np.testing.assert_allclose(out, new_x + y, rtol=1e-6)  # the inputs written before the signal
    launched, fenced = result.timing, result.fenced_timing
    assert isinstance(fenced, Timing) and NO_TIMING not in (launched.time_in_driver, fenced.time_in_driver)
    assert launched.time_in_driver >= fenced.time_in_driver
    if fenced.time_on_device != NO_TIMING:
        assert fenced.time_in_driver >= fenced.time_on_device
    # timingLaunched includes the wait for the fence; timingFenced does not
    assert launched.time_in_driver - fenced.time_in_driver >= HAL_WAIT_S / 2 * 1e6


def test_hal_execute_fenced_reports_no_timing_unless_measured(device):
    waited, result, out, _, new_x, y = fenced_probe(hal_prepared(device.driver), measure=False)
    assert waited and result.status == ResultCode.NO_ERROR
    np.testing.assert_allclose(out, new_x + y, rtol=1e-6)
    assert result.timing == Timing() and result.fenced_timing in (None, Timing())


def test_hal_execute_fenced_with_signalled_fences_and_none(device):
    prepared = hal_prepared(device.driver, [ADD, MUL])
    pool = Memory.create_shared(3 * HAL_ROW)
    x, y = rand(seed=24), rand(seed=25)
    tensor_at(pool, 0)[:] = x
    tensor_at(pool, 1)[:] = y
    fences = [OutsideFence(), OutsideFence()]
    try:
        for f in fences:
            f.signal()
        for wait_for in ([f.read_fd for f in fences], [], ()):
            tensor_at(pool, 2)[:] = np.nan
            result = prepared.execute_fenced(hal_request(pool), wait_for, True, time.monotonic() + 30, 10**9, 10**10)
            assert result.status == ResultCode.NO_ERROR, result.message
            np.testing.assert_allclose(tensor_at(pool, 2), (x + y) * y, rtol=1e-6)
    finally:
        for f in fences:
            f.close()


def test_hal_deadline_passing_while_waiting_is_missed_deadline_transient(device):
    prepared = hal_prepared(device.driver)
    pool = Memory.create_shared(3 * HAL_ROW)
    tensor_at(pool, 0)[:] = rand(seed=26)
    tensor_at(pool, 1)[:] = rand(seed=27)
    tensor_at(pool, 2)[:] = np.nan
    fence = OutsideFence()
    try:
        started = time.monotonic()
        result = prepared.execute_fenced(hal_request(pool), [fence.read_fd], True, started + 0.1, 10**9, None)
        assert result.status == ResultCode.MISSED_DEADLINE_TRANSIENT, result.message
        assert 0.1 <= time.monotonic() - started < 5
        assert np.isnan(tensor_at(pool, 2)).all()  # never ran
    finally:
        fence.close()


def test_hal_invalid_wait_for_entries_are_bad_data(device):
    prepared = hal_prepared(device.driver)
    pool = Memory.create_shared(3 * HAL_ROW)
    closed = closed_fd()
    fence = OutsideFence()
    fence.signal()
    try:
        for bad in (-1, closed, "3", None, 1.5, True):
            for wait_for in ([bad], [fence.read_fd, bad]):
                result = prepared.execute_fenced(hal_request(pool), wait_for, False, None, 10**9, None)
                assert result.status == ResultCode.BAD_DATA, (bad, result)
                assert f"wait_for[{len(wait_for) - 1}]" in result.message and "execute_fenced" in result.message
        for not_a_sequence in ("3", 3, None):
            result = prepared.execute_fenced(hal_request(pool), not_a_sequence, False, None, 10**9, None)
            assert result.status == ResultCode.BAD_DATA and "wait_for" in result.message
        result = prepared.execute_fenced(hal_request(pool), [], False, None, 10**9, -5)
        assert result.status == ResultCode.BAD_DATA and "timeout_after_fence_ns" in result.message
    finally:
        fence.close()


def closed_fd() -> int:
    """A descriptor number that is not open and stays so: high above the open ones (the lowest free number
    is what the next open gets)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD, max(fd + 1, min(soft, 4096) - 8))
    finally:
        os.close(fd)
    os.close(high)
    return high


def service_fds(driver) -> int | None:
    pid = getattr(driver, "pid", None)
    return None if pid is None else len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_hal_execute_fenced_leaks_no_descriptor_in_the_client_or_the_service(device):
    prepared = hal_prepared(device.driver)
    pool = Memory.create_shared(3 * HAL_ROW)
    tensor_at(pool, 0)[:] = rand(seed=28)
    tensor_at(pool, 1)[:] = rand(seed=29)
    r = closed_fd()
    signalled, unsignalled = OutsideFence(), OutsideFence()
    signalled.signal()
    try:
        def calls(n: int) -> None:
            for k in range(n):
                ok = prepared.execute_fenced(hal_request(pool), [signalled.read_fd] * 3, k % 2 == 0, None, 10**9, None)
                assert ok.status == ResultCode.NO_ERROR, ok.message
                if k % 10 == 0:
                    bad = prepared.execute_fenced(hal_request(pool), [signalled.read_fd, r], False, None, 10**9, None)
                    assert bad.status == ResultCode.BAD_DATA
                    missed = prepared.execute_fenced(hal_request(pool), [signalled.read_fd, unsignalled.read_fd],
                                                     False, time.monotonic() + 0.01, 10**9, None)
                    assert missed.status == ResultCode.MISSED_DEADLINE_TRANSIENT

        calls(2)  # anything opened once for good is opened now
        gc.collect()
        before, service_before = open_fds(), service_fds(device.driver)
        calls(60)
        gc.collect()
        assert open_fds() == before
        if service_before is not None:
            device.driver.wait_for_ready()  # a round trip: every earlier call has finished in the service
            assert service_fds(device.driver) == service_before
    finally:
        signalled.close()
        unsignalled.close()


# -- the seeded fault: ignores-fences@fenced -----------------------------------------------------------------------
IGNORES_FENCES = "faulty:ignores-fences@fenced"


@pytest.mark.parametrize("hosting", ["in-process", "service"])
def test_seeded_fault_ignores_fences_is_caught(hosting):
    driver = faulty_driver(IGNORES_FENCES) if hosting == "in-process" else \
        ServiceDriver("mlts.runtime.drivers.faulty:create", (IGNORES_FENCES,))
    try:
        assert driver.name == "faulty-ignores-fences-fenced"
        waited, result, out, old_x, new_x, y = fenced_probe(hal_prepared(driver))
        assert result.status == ResultCode.NO_ERROR  # "healthy" otherwise: the check must look at the data
        assert not waited  # it did not wait for its fence...
        np.testing.assert_allclose(out, old_x + y, rtol=1e-6)  # ...and read the inputs before they were written
        assert not np.allclose(out, new_x + y)
        bad = hal_prepared(driver).execute_fenced(hal_request(Memory.create_shared(3 * HAL_ROW)), [-1], False, None,
                                                  10**9, None)
        assert bad.status == ResultCode.BAD_DATA  # it still checks its fences
    finally:
        if hosting == "service":
            driver.close()


# -- the runtime goes through execute_fenced ---------------------------------------------------------------------
class FencedSpyPrepared(FakePreparedModel):
    """Records each execute_fenced call: its fences (signalled already?) and timeout after them."""

    def execute_fenced(self, request, wait_for, measure, deadline, loop_timeout_ns, timeout_after_fence_ns):
        d = self.driver
        with d.lock:
            d.fenced_calls.append({"fences": len(wait_for), "signalled": wait_all(list(wait_for), 0),
                                   "timeout_after_fence_ns": timeout_after_fence_ns, "deadline": deadline})
        result = super().execute_fenced(request, wait_for, measure, deadline, loop_timeout_ns, timeout_after_fence_ns)
        if d.report_fenced is not None and result.status == ResultCode.NO_ERROR:
            result.fenced_timing = d.report_fenced
        return result


class FencedSpyDriver(FakeDriver):
    def __init__(self, name: str, report_fenced=None, **kw) -> None:
        super().__init__(name, **kw)
        self.fenced_calls: list[dict] = []
        self.report_fenced = report_fenced  # a timingFenced to report instead of the measured one

    def prepare_model(self, model, preference, priority, deadline, cache):
        return FencedSpyPrepared(self, super().prepare_model(model, preference, priority, deadline, cache))


def test_start_compute_with_dependencies_reaches_the_drivers_execute_fenced(register):
    spy = FencedSpyDriver("fenced-spy")
    (dev,) = register(spy)
    comp = compiled([ADD, MUL], dev)
    x, y = rand(seed=31), rand(seed=32)
    s1, s2 = np.full((3, 4), np.nan, np.float32), np.full((3, 4), np.nan, np.float32)
    ev1 = execution(comp, x, y, s1).start_compute_with_dependencies([])
    ev2 = execution(comp, s1, y, s2).start_compute_with_dependencies([ev1], timeout_ns=5 * 10**9)
    ev2.wait(30)
    np.testing.assert_allclose(s2, chain_expected([ADD, MUL], chain_expected([ADD, MUL], x, y), y), rtol=1e-6)
    assert [(c["fences"], c["signalled"]) for c in spy.fenced_calls] == [(0, True), (1, True)]
    assert [c["timeout_after_fence_ns"] for c in spy.fenced_calls] == [None, 5 * 10**9]
    assert spy.fenced_calls[1]["deadline"] is not None  # the timeout also bounds the queue wait in the runtime
    execution(comp, x, y, s1).compute()  # other paths are unchanged
    assert len(spy.fenced_calls) == 2 and len(spy.executed_steps) == 3


def test_the_drivers_timing_fenced_is_preferred_and_a_malformed_one_ignored(register, outside):
    cases = ((Timing(7, 11), (7_000, 11_000)), (Timing("x", -1), None), (None, None))
    for k, (reported, expect) in enumerate(cases):
        spy = FencedSpyDriver(f"fenced-spy-{k}", report_fenced=reported)
        (dev,) = register(spy)
        dep = Event.from_sync_fence_fd(outside.read_fd)
        ex = execution(compiled([ADD], dev), rand(), rand(), np.empty((3, 4), np.float32))
        ex.set_measure_timing(True)
        event = ex.start_compute_with_dependencies([dep])
        time.sleep(HOLD_S)
        outside.signal()
        event.wait(30)
        d = {code: ex.get_duration(code) for code in DurationCode}
        assert NO_TIMING not in d.values(), d
        if expect is not None:  # the driver's own timingFenced
            assert (d[DurationCode.FENCED_ON_HARDWARE], d[DurationCode.FENCED_IN_DRIVER]) == expect
        else:  # the runtime's: from the dependencies signalled to the end
            assert d[DurationCode.FENCED_IN_DRIVER] < d[DurationCode.IN_DRIVER] - HOLD_S * 1e9 * 0.9
            assert d[DurationCode.FENCED_ON_HARDWARE] <= d[DurationCode.FENCED_IN_DRIVER]
        assert d[DurationCode.IN_DRIVER] >= HOLD_S * 1e9
        assert d[DurationCode.IN_DRIVER] >= d[DurationCode.FENCED_IN_DRIVER]
        dep.free()
        if HAS_EVENTFD:
            os.eventfd_read(outside.read_fd)  # unsignalled again for the next round
        else:
            os.read(outside.read_fd, 16)


def test_partitioned_plans_and_cpu_fallback_keep_their_paths(register):
    spy = FencedSpyDriver("fenced-spy-add", exec_time=0.5, power_usage=0.5, operations={ADD})
    failing = FailingExecutionDriver("fenced-failing", mode="status")
    dev, _ = register(spy, failing)
    x, y = rand(seed=33), rand(seed=34)
    partitioned = Compilation.for_devices(chain_model([ADD, MUL]), [dev, get_device("nnapi-reference")])
    partitioned.finish()
    assert len(partitioned.plan.steps) == 2
    out = np.full((3, 4), np.nan, np.float32)
    execution(partitioned, x, y, out).start_compute_with_dependencies([]).wait(30)
    np.testing.assert_allclose(out, chain_expected([ADD, MUL], x, y), rtol=1e-6)
    assert spy.fenced_calls == [] and len(spy.executed_steps) == 1  # ran, but not fenced: a partition
    # A single-step plan on a driver whose fenced execution fails: the whole model falls back to the CPU.
    c = Compilation(chain_model([ADD]))
    c.finish()
    assert [s.device.name for s in c.plan.steps] == ["fenced-failing"]
    out = np.full((3, 4), np.nan, np.float32)
    execution(c, x, y, out).start_compute_with_dependencies([]).wait(30)
    np.testing.assert_allclose(out, x + y, rtol=1e-6)
    assert failing.failures == 1


# -- the service host: fences closed on every path ---------------------------------------------------------------
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_the_service_host_closes_received_fences_on_every_path():
    """The host in this process (its descriptors are ours to count): calls failing before dispatch, in the
    handler, or carrying fences they do not take all close the fences they received."""
    from mlts.runtime.service.channel import Channel, socket_pair
    from mlts.runtime.service.host import Server
    from mlts.runtime.service.protocol import Call, PoolRef

    ours, theirs = socket_pair()
    server = Server(Channel(theirs))
    serving = threading.Thread(target=server.serve, daemon=True)
    serving.start()
    client = Channel(ours)
    fence = OutsideFence()
    fence.signal()
    args = (1, None, False, None, 10**9, None)

    def answer(call: Call, nfds: int = 1):
        client.send(call, [fence.read_fd] * nfds)
        reply, fds = client.recv()
        assert not fds and reply.call_id == call.call_id
        return reply

    try:
        gc.collect()
        before = open_fds()
        cases = [
            (Call(1, "execute_fenced", args, fences=(0,)), ResultCode.BAD_STATE),  # before start: in the handler
            (Call(2, "start", ("mlts.runtime.drivers.reference:ReferenceDriver", (), {}, None), fences=(0,)),
             ResultCode.BAD_DATA),  # start takes no fences
            (Call(3, "start", ("mlts.runtime.drivers.reference:ReferenceDriver", (), {}, None)), None),
            (Call(4, "execute_fenced", args, fences=(0,)), ResultCode.BAD_DATA),  # no such prepared model
            (Call(5, "execute_fenced", args, fences=(3,)), ResultCode.BAD_DATA),  # index out of range: before dispatch
            (Call(6, "execute_fenced", args, fences=(0, 0)), ResultCode.BAD_DATA),
            (Call(7, "execute_fenced", args, pools=(PoolRef(9, 16, 0, 1, fd_index=0),), fences=(0,)),
             ResultCode.BAD_DATA),  # a pool naming the fence's descriptor
            (Call(8, "ping", fences=(0, 1)), ResultCode.BAD_DATA),  # a call that takes none
        ]
        for call, code in cases:
            reply = answer(call, nfds=max(len(call.fences), 1 if call.fences else 0))
            if code is None:
                assert reply.error is None, reply.error
            else:
                assert reply.error is not None and reply.error[0] == int(code), (call.method, reply.error)
        gc.collect()
        assert open_fds() == before
    finally:
        client.send(Call(99, "shutdown"))
        serving.join(10)
        client.close()
        server.channel.close()
        fence.close()
