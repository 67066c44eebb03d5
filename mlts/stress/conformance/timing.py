"""Conformance: NNAPI's timing contract on every execution path (synchronous, asynchronous, burst,
fenced), straight through the HAL as VTS checks a driver, and through the public API.

The rules (NNAPI's IPreparedModel and ANeuralNetworksExecution_getDuration): unless timing was asked
for (measure) and the execution succeeded, every duration is UINT64_MAX ("no timing"); time in the
driver is never below time on the device (and a fenced execution's timingFenced lies within its
timingLaunched); durations are microseconds (get_duration: nanoseconds), so none can be longer than
the call that reported it took; and only a compilation for exactly one device measures at all.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...runtime import Burst, Compilation, DurationCode, Execution, MltsError, ResultCode, devices
from ...runtime.drivers import REFERENCE_DEVICE_NAME
from ...runtime.enums import NO_TIMING
from ...runtime.hal import DataLocation, ExecutionResult, IPreparedModel, RequestArgument, Timing, is_valid_timing
from ...runtime.hal.sync_fence import SyncFence
from .checks import LOOP_TIMEOUT_NS, CheckFailed, Checks, HalRequest, expect_code, expect_success
from .models import ConformanceModel

WAIT_S = 30.0  # longest wait for an asynchronous execution's callback or event
SLACK_US = 1000  # clock granularity allowed between a driver's durations and the call around them
HAL_PATHS = ("execute_synchronously", "execute (asynchronous)", "burst", "execute_fenced")
API_PATHS = ("compute", "start_compute", "burst_compute", "start_compute_with_dependencies")


@dataclass
class HalRun:
    """One HAL execution as seen from outside: its status, timings (microseconds) and wall time."""

    path: str
    status: ResultCode
    message: str
    timing: Timing
    fenced: Timing | None  # execute_fenced's timingFenced
    wall_us: int


def us(value: int) -> str:
    """A microsecond duration as reported, "-" for UINT64_MAX (no timing)."""
    return "-" if value == NO_TIMING else f"{value} us"


def describe(t: Timing) -> str:
    return f"on device {us(t.time_on_device)}, in driver {us(t.time_in_driver)}"


def api_timing(e: Execution, fenced: bool = False) -> Timing:
    """get_duration's nanoseconds as a Timing of microseconds (UINT64_MAX stays UINT64_MAX)."""
    codes = (DurationCode.FENCED_ON_HARDWARE, DurationCode.FENCED_IN_DRIVER) if fenced else \
        (DurationCode.ON_HARDWARE, DurationCode.IN_DRIVER)
    return Timing(*(NO_TIMING if (ns := e.get_duration(code)) == NO_TIMING else ns // 1000 for code in codes))


def _timing(path: str, what: str, t: object) -> Timing:
    if not is_valid_timing(t):
        raise CheckFailed(f"{path}: {what} {t!r} is not a Timing of microseconds in [0, UINT64_MAX]")
    return t  # type: ignore[return-value]


def hal_run(prepared: IPreparedModel, path: str, request, measure: bool) -> HalRun:
    """Run `request` once on one HAL path (a burst of its own; a fenced run on a signalled fence)."""
    start = time.perf_counter_ns()
    if path == "execute_synchronously":
        result = prepared.execute_synchronously(request, measure, None, LOOP_TIMEOUT_NS)
    elif path == "execute (asynchronous)":
        result = prepared.execute(request, measure, None, LOOP_TIMEOUT_NS).wait(WAIT_S)
        if result is None:
            raise CheckFailed(f"{path}: the callback was not notified within {WAIT_S:g} s")
    elif path == "burst":
        context = prepared.configure_execution_burst()
        try:
            result = context.execute(request, measure, None, LOOP_TIMEOUT_NS)
        finally:
            context.close()
    else:
        fence = SyncFence()
        fence.signal()
        try:
            result = prepared.execute_fenced(request, [fence.fileno()], measure, None, LOOP_TIMEOUT_NS, None)
        finally:
            fence.close()
    wall_us = (time.perf_counter_ns() - start) // 1000
    if not isinstance(result, ExecutionResult):
        raise CheckFailed(f"{path} returned {type(result).__name__}, not an ExecutionResult")
    fenced = None if result.fenced_timing is None else _timing(path, "timingFenced", result.fenced_timing)
    return HalRun(path, ResultCode(result.status), result.message, _timing(path, "timing", result.timing), fenced,
                  wall_us)


def short_input_request(r: HalRequest):
    """r's request with input 0 one element short: refused (BAD_DATA), so it must report no timing."""
    arg = r.request.inputs[0]
    itemsize = int(np.asarray(r.m.inputs[0]).itemsize)
    short = RequestArgument(False, DataLocation(arg.location.pool_index, arg.location.offset,
                                                arg.location.length - itemsize))
    return dataclasses.replace(r.request, inputs=(short, *r.request.inputs[1:]))


def _no_timing(timings: list[tuple[str, Timing | None]]) -> list[str]:
    """Those of `timings` that report anything but UINT64_MAX."""
    return [f"{what}: {describe(t)}" for what, t in timings if t is not None and t != Timing()]


def _driver_below_device(what: str, t: Timing) -> list[str]:
    device, driver = t.time_on_device, t.time_in_driver
    if NO_TIMING not in (device, driver) and driver < device:
        return [f"{what}: time in driver < time on device ({describe(t)})"]
    return []


def _fenced_beyond_launched(what: str, launched: Timing, fenced: Timing | None) -> list[str]:
    if fenced is not None and NO_TIMING not in (fenced.time_in_driver, launched.time_in_driver) \
            and fenced.time_in_driver > launched.time_in_driver:
        return [f"{what}: timingFenced in driver {us(fenced.time_in_driver)} > timingLaunched in driver "
                f"{us(launched.time_in_driver)}"]
    return []


def fenced_timing_problems(what: str, launched: Timing, fenced: Timing) -> list[str]:
    """A fenced execution's timings against the order rules: in-driver >= on-device in each, and
    timingFenced (from the fences signalled) within timingLaunched (from the call)."""
    return (_driver_below_device(f"{what} timingLaunched", launched) + _driver_below_device(
        f"{what} timingFenced", fenced) + _fenced_beyond_launched(what, launched, fenced))


def _longer_than_call(what: str, t: Timing | None, wall_us: int) -> list[str]:
    """A duration longer than the call that reported it is not in microseconds (nanoseconds, most likely)."""
    if t is None:
        return []
    return [f"{what}: {name} {value} us, longer than the whole call ({wall_us} us): durations are microseconds"
            for name, value in (("on device", t.time_on_device), ("in driver", t.time_in_driver))
            if value != NO_TIMING and value > wall_us + SLACK_US]


def hal_timing_checks(checks: Checks, m: ConformanceModel, prepared: IPreparedModel) -> None:
    """The timing contract straight through the HAL, as VTS checks it, on every execution path. Results
    are the other checks' business: a run here only has to succeed."""
    measured: list[HalRun] = []

    def runs(measure: bool) -> list[HalRun]:
        """A successful run per path (the measured ones made once, for two checks)."""
        if measure and measured:
            return measured
        out = []
        for path in HAL_PATHS:
            r = HalRequest(m)
            try:
                run = hal_run(prepared, path, r.request, measure)
                expect_success(path, _as_result(run))
            finally:
                r.close()
            out.append(run)
        if measure:
            measured[:] = out
        return out

    def not_measured():
        done = runs(False)
        found = _no_timing([(run.path, run.timing) for run in done] +
                           [(f"{run.path} timingFenced", run.fenced) for run in done])
        if found:
            raise CheckFailed("timing returned although measure=False: " + "; ".join(found))
        return f"UINT64_MAX (no timing) on all {len(HAL_PATHS)} paths"
    checks.run("HAL timing: none when measure=False (sync, async, burst, fenced)", not_measured)

    def failed():
        found, codes, accepted = [], [], []
        for path in HAL_PATHS:
            r = HalRequest(m)
            try:
                run = hal_run(prepared, path, short_input_request(r), True)
            finally:
                r.close()
            if run.status == ResultCode.NO_ERROR:  # refusing it is conformance_validation's to check
                accepted.append(path)
                continue
            codes.append(f"{path}: {run.status.name}")
            found += _no_timing([(f"{path} ({run.status.name})", run.timing),
                                 (f"{path} timingFenced ({run.status.name})", run.fenced)])
        if found:
            raise CheckFailed("timing returned for a failed execution: " + "; ".join(found))
        if not codes:
            raise CheckFailed("a request with input 0 one element short succeeded on every path: nothing failed")
        return "no timing (" + ", ".join(codes) + ")" + \
            (f"; not checked: {', '.join(accepted)} accepted the request" if accepted else "")
    checks.run("HAL timing: none for a failed execution (sync, async, burst, fenced)", failed)

    def consistent():
        found = []
        for run in runs(True):
            found += _driver_below_device(run.path, run.timing)
            if run.fenced is not None:
                found += _driver_below_device(f"{run.path} timingFenced", run.fenced)
            found += _fenced_beyond_launched(run.path, run.timing, run.fenced)
        if found:
            raise CheckFailed("; ".join(found))
        return "; ".join(f"{run.path} {describe(run.timing)}" for run in runs(True))
    checks.run("HAL timing: in-driver time >= on-device time (sync, async, burst, fenced)", consistent)

    def within_call():
        found = []
        for run in runs(True):
            found += _longer_than_call(run.path, run.timing, run.wall_us)
            found += _longer_than_call(f"{run.path} timingFenced", run.fenced, run.wall_us)
        if found:
            raise CheckFailed("; ".join(found))
        return "every duration within its call's wall time"
    checks.run("HAL timing: microseconds, within the call (sync, async, burst, fenced)", within_call)


def _as_result(run: HalRun) -> ExecutionResult:
    return ExecutionResult(run.status, [], run.timing, run.message)


def api_run(c: Compilation, m: ConformanceModel, path: str, measure: bool) -> tuple[Execution, int]:
    """One public-API execution of m on `path`; (the execution, its wall time in microseconds)."""
    def execution() -> Execution:
        e = Execution(c)
        for k, x in enumerate(m.inputs):
            e.set_input(k, x)
        return e

    e = execution()
    if measure:
        e.set_measure_timing(True)
    start = time.perf_counter_ns()
    if path == "compute":
        e.compute()
    elif path == "start_compute":
        e.start_compute().wait(WAIT_S)
    elif path == "burst_compute":
        burst = Burst(c)
        try:
            e.burst_compute(burst)
        finally:
            burst.close()
    else:
        first = execution()
        done = first.start_compute_with_dependencies([])
        e.start_compute_with_dependencies([done]).wait(WAIT_S)
    wall_us = (time.perf_counter_ns() - start) // 1000
    return e, wall_us


def api_timing_checks(checks: Checks, m: ConformanceModel, c: Compilation, device_name: str) -> None:
    """The same contract through the public API (get_duration, nanoseconds), and no timing for a
    compilation on several devices."""
    def not_measured():
        found = []
        for path in API_PATHS:
            e, _ = api_run(c, m, path, False)
            found += [f"{path}: get_duration({code.name}) = {e.get_duration(code)} ns" for code in DurationCode
                      if e.get_duration(code) != NO_TIMING]
        if found:
            raise CheckFailed("timing returned although it was not measured: " + "; ".join(found))
        return f"UINT64_MAX (no timing) for every duration code on all {len(API_PATHS)} paths"
    checks.run("public API timing: none unless measured (compute, start_compute, burst, fenced)", not_measured)

    def consistent():
        found, seen = [], []
        for path in API_PATHS:
            e, wall_us = api_run(c, m, path, True)
            launched, fenced = api_timing(e), api_timing(e, fenced=True)
            found += _driver_below_device(path, launched) + _driver_below_device(f"{path} (fenced)", fenced)
            found += _fenced_beyond_launched(path, launched, fenced)
            found += _longer_than_call(path, launched, wall_us) + _longer_than_call(f"{path} (fenced)", fenced,
                                                                                    wall_us)
            seen.append(f"{path} {describe(launched)}")
        if found:
            raise CheckFailed("; ".join(found))
        return "; ".join(seen)
    checks.run("public API timing: in-driver >= on-device, within the call (compute, start_compute, burst, fenced)",
               consistent)

    def several_devices():
        return multi_device_timing(m, device_name)
    checks.run("public API timing: none for a compilation on several devices", several_devices)


def multi_device_timing(m: ConformanceModel, device_name: str) -> str:
    """set_measure_timing is BAD_DATA and every duration UINT64_MAX unless the compilation was created for
    exactly one device: Compilation(model) (the runtime's choice) and for_devices([driver, another])."""
    by_name = {d.name: d for d in devices()}
    others = [by_name[n] for n in (REFERENCE_DEVICE_NAME, *by_name) if n in by_name and n != device_name]
    made: list[tuple[str, Callable[[], Compilation]]] = [("Compilation(model)", lambda: Compilation(m.model))]
    if others and device_name in by_name:
        pair = [by_name[device_name], others[0]]
        made.append((f"for_devices([{device_name}, {others[0].name}])", lambda: Compilation.for_devices(m.model, pair)))
    seen = []
    for what, make in made:
        c = make()
        c.finish()
        e = Execution(c)
        for k, x in enumerate(m.inputs):
            e.set_input(k, x)
        try:
            e.set_measure_timing(True)
        except MltsError as err:
            expect_code(f"{what}: set_measure_timing(True)", err.code, (ResultCode.BAD_DATA,), err.message)
        else:
            raise CheckFailed(f"{what}: set_measure_timing(True) accepted, though timing is only for a compilation "
                              f"for exactly one device")
        e.compute()
        reported = [f"get_duration({code.name}) = {e.get_duration(code)} ns" for code in DurationCode
                    if e.get_duration(code) != NO_TIMING]
        if reported:
            raise CheckFailed(f"{what}: timing returned for a compilation on several devices: {', '.join(reported)}")
        seen.append(what)
    return f"set_measure_timing refused (BAD_DATA) and no timing: {'; '.join(seen)}"


__all__ = ["API_PATHS", "HAL_PATHS", "api_run", "api_timing", "api_timing_checks", "describe", "fenced_timing_problems",
           "hal_run", "hal_timing_checks", "multi_device_timing", "short_input_request", "us"]
