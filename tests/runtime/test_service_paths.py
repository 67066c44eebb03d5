"""A hosted driver's own execution paths, and what a dead service leaves in its DEAD_OBJECT errors.

NNAPI's runtime calls a driver's asynchronous execute(), its burst and its executeFenced, not only its
synchronous execution; a driver in a service must be called the same way as an in-process one, or its
bugs in those paths go unseen. The recording driver logs (to a file, from the service process) which of
its methods each call reached. Errors of the hosting (a callback never notified, execute() raising)
come back as execution statuses, bounded by the deadline or call timeout, never as a hung service.
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from mlts.runtime import Compilation, Execution, MltsError, Preference, Priority, ResultCode
from mlts.runtime.hal import ExecutionResult
from mlts.runtime.app.plugins import FAULTY_FACTORY
from mlts.runtime.service import ServiceDriver
from mlts.runtime.service.client import TAIL_CHARS, OutputTail, last_lines
from mlts.runtime.hal.sync_fence import SyncFence
from mlts.stress.conformance.checks import HalRequest
from mlts.stress.conformance.completion import poison
from mlts.stress.conformance.models import F32, add_model

import partial_drivers

RECORDING = "service_path_drivers:recording_driver"
LOOP_NS = 2_000_000_000


@pytest.fixture
def recorded(tmp_path):
    """make(name, call_timeout=None, **driver_kwargs) -> a recording driver in a service; calls() -> its log."""
    log = tmp_path / "calls.log"
    made = []

    def make(name: str = "svc-rec", *, call_timeout: float | None = None, **kwargs) -> ServiceDriver:
        driver = ServiceDriver(RECORDING, (name, str(log)), kwargs, call_timeout=call_timeout, restart=False)
        made.append(driver)
        return driver

    def calls() -> list[str]:
        return log.read_text().split() if log.exists() else []

    yield make, calls
    for driver in made:
        driver.close()


def prepare(driver):
    m = add_model(F32)
    return m, driver.prepare_model(m.model.hal_model(), Preference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None)


def expect_right(result: ExecutionResult, r: HalRequest, m) -> None:
    assert result.status == ResultCode.NO_ERROR, result.message
    np.testing.assert_array_equal(r.outputs()[0], m.expected()[0])


# -- each path reaches the driver's own method ------------------------------------------------------
def test_async_execution_reaches_the_drivers_own_execute(recorded):
    make, calls = recorded
    m, prepared = prepare(make())
    r = HalRequest(m)
    expect_right(prepared.execute(r.request, True, None, LOOP_NS).wait(10), r, m)
    assert calls() == ["execute"]  # not execute_synchronously: the driver's asynchronous entry point


def test_public_api_start_compute_reaches_the_drivers_own_execute(recorded, register):
    make, calls = recorded
    (dev,) = register(make("svc-rec-api"))
    m = add_model(F32)
    c = Compilation.for_devices(m.model, [dev])
    c.finish()
    e = Execution(c)
    for k, x in enumerate(m.inputs):
        e.set_input(k, x)
    e.start_compute().wait(10)
    np.testing.assert_array_equal(e.get_output(0), m.expected()[0])
    assert calls() == ["execute"]


def test_bursts_reach_the_drivers_burst_context_and_are_closed(recorded):
    make, calls = recorded
    driver = make()
    m, prepared = prepare(driver)
    burst = prepared.configure_execution_burst()
    for _ in range(3):
        r = HalRequest(m)
        expect_right(burst.execute(r.request, False, None, LOOP_NS), r, m)
    assert calls() == ["burst_open"] + ["burst_execute"] * 3  # one driver burst for the client's burst
    burst.close()
    assert calls()[-1] == "burst_close"  # at once, not at the next call
    other = prepared.configure_execution_burst()
    r = HalRequest(m)
    expect_right(other.execute(r.request, False, None, LOOP_NS), r, m)
    driver.close()  # the client goes away with a burst open: the service closes it before exiting
    deadline = time.monotonic() + 3.0
    while calls().count("burst_close") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert calls() == ["burst_open"] + ["burst_execute"] * 3 + ["burst_close", "burst_open", "burst_execute",
                                                                "burst_close"]


def test_fenced_execution_reaches_the_drivers_execute_fenced(recorded):
    make, calls = recorded
    m, prepared = prepare(make())
    fence = SyncFence()
    fence.signal()
    r = HalRequest(m)
    try:
        expect_right(prepared.execute_fenced(r.request, [fence.fileno()], False, None, LOOP_NS, None), r, m)
    finally:
        fence.close()
    assert calls()[0] == "execute_fenced" and "execute" not in calls()


def test_an_early_completion_signal_crosses_the_service_as_it_is():
    """npu-early's execute() notifies before writing: hosted, its outputs must still be unwritten when the
    callback is (a host that ran execute_synchronously instead would hide the bug)."""
    driver = ServiceDriver(partial_drivers.spec("early"), restart=False)
    try:
        m, prepared = prepare(driver)
        r = HalRequest(m)
        poison(r.output_memories, 0xA5)
        result = prepared.execute(r.request, False, None, LOOP_NS).wait(10)
        seen = r.outputs()[0]
        assert result.status == ResultCode.NO_ERROR
        assert np.all(seen.view(np.uint32) == 0xA5A5A5A5)
        deadline = time.monotonic() + 3.0  # the driver writes them afterwards, into the same shared memory
        while not np.array_equal(r.outputs()[0], m.expected()[0]) and time.monotonic() < deadline:
            time.sleep(0.02)
        np.testing.assert_array_equal(r.outputs()[0], m.expected()[0])
    finally:
        driver.close()


# -- hosting errors are statuses, bounded in time ---------------------------------------------------------
def test_a_callback_never_notified_ends_at_the_deadline(recorded):
    make, calls = recorded
    driver = make("svc-never", async_mode="never")
    m, prepared = prepare(driver)
    r = HalRequest(m)
    t0 = time.monotonic()
    result = prepared.execute(r.request, False, time.monotonic() + 0.3, LOOP_NS).wait(10)
    assert time.monotonic() - t0 < 0.3 + 1.0
    assert result.status == ResultCode.MISSED_DEADLINE_TRANSIENT
    assert "svc-never" in result.message and "not notified by the deadline" in result.message
    assert driver.alive  # answered, not killed
    r = HalRequest(m)
    expect_right(prepared.execute_synchronously(r.request, False, None, LOOP_NS), r, m)


def test_a_callback_never_notified_ends_before_the_call_timeout(recorded):
    make, calls = recorded
    driver = make("svc-never2", call_timeout=1.0, async_mode="never")
    m, prepared = prepare(driver)
    r = HalRequest(m)
    t0 = time.monotonic()
    result = prepared.execute(r.request, False, None, LOOP_NS).wait(10)
    assert time.monotonic() - t0 < 1.0
    assert result.status == ResultCode.OP_FAILED and "not notified within 0.8 s" in result.message
    assert driver.alive and calls() == ["execute"]


@pytest.mark.parametrize("mode, says", [("raise", "RuntimeError: injected failure in execute()"),
                                        ("no-callback", "returned NoneType, not an execution callback")])
def test_a_broken_execute_is_a_failed_execution(recorded, mode, says):
    make, calls = recorded
    driver = make(f"svc-{mode}", async_mode=mode)
    m, prepared = prepare(driver)
    r = HalRequest(m)
    result = prepared.execute(r.request, False, None, LOOP_NS).wait(10)
    assert result.status == ResultCode.OP_FAILED and says in result.message and f"svc-{mode}" in result.message
    assert driver.alive
    r = HalRequest(m)
    expect_right(prepared.execute_synchronously(r.request, False, None, LOOP_NS), r, m)


# -- the service's output, and DEAD_OBJECT ---------------------------------------------------------------
def test_dead_object_says_how_the_service_died_and_what_it_last_wrote(register, monkeypatch, capfd):
    monkeypatch.setenv("PYTHONFAULTHANDLER", "1")  # as in stress test processes: every thread's stack on abort
    driver = ServiceDriver(FAULTY_FACTORY, ("crash@execute",), restart=False)
    try:
        (dev,) = register(driver)
        m = add_model(F32)
        c = Compilation.for_devices(m.model, [dev])
        c.finish()
        errors = []
        for _ in range(2):  # the call it died in, and a later one
            e = Execution(c)
            for k, x in enumerate(m.inputs):
                e.set_input(k, x)
            with pytest.raises(MltsError) as caught:
                e.compute()
            errors.append(caught.value)
    finally:
        driver.close()
    for error in errors:
        assert error.code == ResultCode.DEAD_OBJECT
        assert "died (signal SIGABRT) during execute" in error.message
        # the driver's own last words, then the faulthandler dump shortened to the crashing thread's frames
        note = error.message.split("its last output: ", 1)[1]
        assert note.startswith("faulty-crash-execute: injected crash in execution (os.abort) | "
                               "Fatal Python error: Aborted (crashing thread")
        assert "in _crash" in note and len(note) <= TAIL_CHARS
    assert "refused" in errors[1].message
    assert "injected crash in execution (os.abort)" in capfd.readouterr().err  # still on our stderr too


def test_last_lines_keep_what_the_driver_said_before_a_fatal_error_dump():
    said = [f"driver line {i}" for i in range(20)]
    dump = ["Fatal Python error: Aborted", "Thread 0x1 (most recent call first):", '  File "a.py", line 1 in idle',
            "Current thread 0x2 (most recent call first):", '  File "b.py", line 2 in crash',
            '  File "b.py", line 3 in run', '  File "b.py", line 4 in main', '  File "b.py", line 5 in top',
            "Extension modules: numpy (total: 1)"]
    assert last_lines(said + dump) == said[-9:] + ['Fatal Python error: Aborted (crashing thread, most recent call '
                                                   'first: File "b.py", line 2 in crash; File "b.py", line 3 in run; '
                                                   'File "b.py", line 4 in main)']
    assert last_lines(said) == said[-10:]


def test_output_tail_is_bounded_and_keeps_the_newest(capfd):
    read, write = os.pipe()
    tail = OutputTail(read, "test-output-tail")
    os.write(write, b"".join(b"%04d " % i + b"y" * 495 + b"\n" for i in range(50)) + b"unfinished")
    os.close(write)
    tail.wait(5)
    text = tail.text()
    assert len(text) <= TAIL_CHARS and text.endswith(" | unfinished") and "0049 " in text and "0040 " not in text
    assert "0049 " in capfd.readouterr().err  # forwarded as well


def test_a_chatty_service_never_blocks_on_its_output(recorded):
    make, calls = recorded
    t0 = time.monotonic()
    m, prepared = prepare(make("svc-chatty", chatter_bytes=400_000))  # six times a pipe's buffer
    assert time.monotonic() - t0 < 20
    r = HalRequest(m)
    expect_right(prepared.execute_synchronously(r.request, False, None, LOOP_NS), r, m)
