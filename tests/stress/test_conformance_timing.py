"""The timing and completion checks of conformance_execution_paths, each against a driver that breaks
exactly its rule (NNAPI's: no timing unless measured and successful; in-driver >= on-device;
timingFenced within timingLaunched; microseconds; no timing for several devices; an asynchronous
execution signals completion after writing its outputs), and against a healthy driver, which passes
them all. Drivers here are in-process (the service-hosted runs are in test_conformance.py)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mlts.runtime import (Capabilities, Compilation, DeviceType, Execution, Preference, Priority, ResultCode,
                          register_driver, unregister_driver)
from mlts.runtime.drivers import KernelDriver, KernelPreparedModel
from mlts.runtime.hal import Timing
from mlts.stress.conformance import completion
from mlts.stress.conformance.checks import FAIL, PASS, CheckFailed, Checks
from mlts.stress.conformance.models import F32, add_model
from mlts.stress.conformance.timing import api_timing_checks, hal_timing_checks

import partial_drivers

HAL_CHECKS = {
    "unmeasured": "HAL timing: none when measure=False (sync, async, burst, fenced)",
    "failed": "HAL timing: none for a failed execution (sync, async, burst, fenced)",
    "order": "HAL timing: in-driver time >= on-device time (sync, async, burst, fenced)",
    "units": "HAL timing: microseconds, within the call (sync, async, burst, fenced)",
}
API_CHECKS = {
    "unmeasured": "public API timing: none unless measured (compute, start_compute, burst, fenced)",
    "order": "public API timing: in-driver >= on-device, within the call (compute, start_compute, burst, fenced)",
    "devices": "public API timing: none for a compilation on several devices",
}


class FakeContext:
    """What Checks needs of a StressContext."""

    driver = "bent"

    def beat(self, note=None) -> None:
        pass

    def log(self, message: str) -> None:
        pass

    def fail(self, reason: str, **details) -> None:
        raise AssertionError(reason)


class BentPrepared(KernelPreparedModel):
    """Right results; timing broken as `bug` says."""

    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        result = super().execute_synchronously(request, measure, deadline, loop_timeout_ns)
        bug, t = self.driver.bug, result.timing
        if bug == "nanoseconds" and measure and result.status == ResultCode.NO_ERROR:  # labelled microseconds
            return dataclasses.replace(result, timing=Timing(t.time_on_device * 1000, t.time_in_driver * 1000))
        if bug == "driver-below-device" and measure and result.status == ResultCode.NO_ERROR:
            return dataclasses.replace(result, timing=Timing(t.time_in_driver + 500, t.time_in_driver))
        if bug == "timing-on-failure" and result.status != ResultCode.NO_ERROR:
            return dataclasses.replace(result, timing=Timing(3, 7))
        return result

    def execute_fenced(self, request, wait_for, measure, deadline, loop_timeout_ns, timeout_after_fence_ns):
        result = super().execute_fenced(request, wait_for, measure, deadline, loop_timeout_ns, timeout_after_fence_ns)
        if self.driver.bug == "fenced-beyond-launched" and measure and result.status == ResultCode.NO_ERROR:
            t = result.timing
            return dataclasses.replace(result, fenced_timing=Timing(t.time_on_device, t.time_in_driver + 50))
        return result


class BentDriver(KernelDriver):
    def __init__(self, bug: str) -> None:
        super().__init__(f"bent-{bug}", Capabilities.uniform(0.5, 0.5), device_type=DeviceType.ACCELERATOR)
        self.bug = bug

    def prepare_model(self, model, preference, priority, deadline, cache):
        return BentPrepared(self, super().prepare_model(model, preference, priority, deadline, cache).model)


def hal_verdicts(driver) -> dict[str, tuple[str, str]]:
    m = add_model(F32)
    prepared = driver.prepare_model(m.model.hal_model(), Preference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None)
    checks = Checks(FakeContext(), "execution paths")
    hal_timing_checks(checks, m, prepared)
    return {c.name: (c.verdict, c.detail) for c in checks.done}


@pytest.mark.parametrize("driver, broken, says", [
    (BentDriver("none"), None, ""),
    (partial_drivers.create_timing(), "unmeasured", "timing returned although measure=False: execute_synchronously: "),
    (BentDriver("timing-on-failure"), "failed", "timing returned for a failed execution: execute_synchronously "
                                                "(BAD_DATA): on device 3 us, in driver 7 us"),
    (BentDriver("driver-below-device"), "order", "execute_synchronously: time in driver < time on device"),
    (BentDriver("fenced-beyond-launched"), "order", "execute_fenced: timingFenced in driver"),
    (BentDriver("nanoseconds"), "units", "longer than the whole call"),
], ids=["healthy", "timing-unasked", "timing-on-failure", "driver-below-device", "fenced-beyond-launched",
        "nanoseconds"])
def test_each_hal_timing_rule_fails_only_the_driver_that_breaks_it(driver, broken, says):
    verdicts = hal_verdicts(driver)
    assert set(verdicts) == set(HAL_CHECKS.values())
    failed = {name for name, (verdict, _) in verdicts.items() if verdict == FAIL}
    assert failed == ({HAL_CHECKS[broken]} if broken else set()), verdicts
    if broken:
        assert says in verdicts[HAL_CHECKS[broken]][1]
    assert all(v == PASS for name, (v, _) in verdicts.items() if name not in failed)


@pytest.fixture
def device_of():
    registered = []

    def register(driver):
        device = register_driver(driver)
        registered.append(driver.name)
        return device

    yield register
    for name in registered:
        unregister_driver(name)


def api_verdicts(device) -> dict[str, tuple[str, str]]:
    m = add_model(F32)
    c = Compilation.for_devices(m.model, [device])
    c.finish()
    checks = Checks(FakeContext(), "execution paths")
    api_timing_checks(checks, m, c, device.name)
    return {c.name: (c.verdict, c.detail) for c in checks.done}


def test_public_api_timing_checks_pass_on_a_healthy_driver_and_catch_nanoseconds(device_of):
    healthy = api_verdicts(device_of(BentDriver("none")))
    assert set(healthy) == set(API_CHECKS.values()) and {v for v, _ in healthy.values()} == {PASS}
    assert "BAD_DATA" in healthy[API_CHECKS["devices"]][1]
    bent = api_verdicts(device_of(BentDriver("nanoseconds")))
    assert bent[API_CHECKS["order"]][0] == FAIL and "longer than the whole call" in bent[API_CHECKS["order"]][1]
    bent = api_verdicts(device_of(BentDriver("driver-below-device")))
    assert bent[API_CHECKS["order"]][0] == FAIL and "time in driver < time on device" in bent[API_CHECKS["order"]][1]


def test_public_api_timing_checks_catch_a_runtime_that_breaks_the_rules(device_of, monkeypatch):
    """The runtime enforces these two rules (a driver cannot break them through it): a runtime that
    measured without being asked, or for several devices, fails them."""
    device = device_of(BentDriver("none"))
    monkeypatch.setattr(Execution, "set_measure_timing", lambda self, measure: setattr(self, "_measure", True))
    original = Execution.get_duration
    monkeypatch.setattr(Execution, "get_duration", lambda self, code: original(self, code) if self._measure else 1000)
    verdicts = api_verdicts(device)
    assert verdicts[API_CHECKS["unmeasured"]][0] == FAIL
    assert "timing returned although it was not measured" in verdicts[API_CHECKS["unmeasured"]][1]
    assert verdicts[API_CHECKS["devices"]][0] == FAIL
    assert "set_measure_timing(True) accepted" in verdicts[API_CHECKS["devices"]][1]


def test_early_completion_is_caught_through_the_hal_and_the_public_api(device_of, monkeypatch):
    m = add_model(F32)
    for factory, fails in ((partial_drivers.create_correct, False), (partial_drivers.create_early, True)):
        driver = factory()
        prepared = driver.prepare_model(m.model.hal_model(), Preference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None,
                                        None)
        c = Compilation.for_devices(m.model, [device_of(driver)])
        c.finish()
        for check in (lambda: completion.hal_async_outputs(m, prepared, 2_000_000_000),
                      lambda: completion.api_async_outputs(m, c)):
            if not fails:
                assert "outputs written on all 3 rounds" in check()
                continue
            with pytest.raises(CheckFailed, match="signalled completion before its outputs were written: output 0 "
                                                  "still held the sentinel written before the call in 16 of 16"):
                check()
    # The HAL check runs the request synchronously first, so without the sentinel the early driver's
    # outputs would already be right when its callback comes: the poison is what catches it.
    monkeypatch.setattr(completion, "poison", lambda memories, byte: None)
    completion.hal_async_outputs(m, prepared, 2_000_000_000)


def test_the_sentinel_is_no_expected_value():
    expected = [np.frombuffer(bytes([0xA5, 0xA5, 0xA5, 0xA5, 0x5A, 0x5A, 0x5A, 0x5A]), np.float32)]
    assert completion.sentinel_for(expected) == 0xC3
    assert completion.sentinel_for([np.arange(256, dtype=np.uint8)]) == 0xA5  # every byte: counted where different


def test_completion_check_reports_wrong_outputs_that_are_not_the_sentinel():
    m = add_model(F32)
    right = m.expected()
    wrong = [right[0] + 1]
    with pytest.raises(CheckFailed, match="read as soon as completion was signalled: output 0 differs"):
        completion.expect_written("execute()", wrong, right, 0xA5, 1)
