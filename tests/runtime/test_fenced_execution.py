"""Fenced execution: Events backed by sync fences (exported and imported as file descriptors),
chains of executions waiting on each other's fences, failed dependencies, timeouts, timingLaunched /
timingFenced, and no descriptor leaks; on nnapi-reference and on sample-all hosted as a service."""
from __future__ import annotations

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

from fake_drivers import ADD, MUL, FailingExecutionDriver, chain_expected, chain_model, rand
from mlts.runtime import (Compilation, DurationCode, Event, Execution, MltsError, ResultCode, get_device)
from mlts.runtime.enums import NO_TIMING
from mlts.runtime.service import ServiceDriver
from mlts.runtime.sync_fence import HAS_EVENTFD, SIGNALLED_ERROR

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


def test_a_dependent_execution_waits_for_a_fence_signalled_from_another_thread(device):
    outside = OutsideFence()
    try:
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
    finally:
        outside.close()


# -- export / import -----------------------------------------------------------------------------------------
def test_exported_fd_becomes_readable_when_the_execution_completes(device):
    outside = OutsideFence()
    try:
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
    finally:
        outside.close()


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


def test_fences_cross_to_another_process(device):
    """The child signals our dependency's fence, then waits on the execution's exported fence."""
    outside = OutsideFence()
    try:
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
    finally:
        outside.close()


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
def test_an_outside_fence_signalled_with_an_error_fails_the_dependent(device):
    outside = OutsideFence()
    try:
        dep = Event.from_sync_fence_fd(outside.read_fd)
        out = np.full((3, 4), np.nan, np.float32)
        event = execution(compiled([ADD], device), rand(), rand(), out).start_compute_with_dependencies([dep])
        outside.signal(SIGNALLED_ERROR)
        with pytest.raises(MltsError) as e:
            event.wait(30)
        assert e.value.code == ResultCode.OP_FAILED and np.isnan(out).all()
    finally:
        outside.close()


# -- timeouts --------------------------------------------------------------------------------------------------
def test_the_fence_timeout_counts_from_the_dependencies_signalled(device):
    outside = OutsideFence()
    try:
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
    finally:
        outside.close()


def test_the_execution_timeout_counts_from_the_call(device):
    outside = OutsideFence()
    try:
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
    finally:
        outside.close()


def test_event_wait_timeout_on_an_unsignalled_fence():
    outside = OutsideFence()
    try:
        with pytest.raises(MltsError) as e:
            Event.from_sync_fence_fd(outside.read_fd).wait(0.01)
        assert e.value.code == ResultCode.MISSED_DEADLINE_TRANSIENT
    finally:
        outside.close()


# -- timing ------------------------------------------------------------------------------------------------------
def test_timing_launched_and_fenced_are_sane_and_ordered(device):
    outside = OutsideFence()
    try:
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
    finally:
        outside.close()


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
