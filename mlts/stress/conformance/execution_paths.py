"""Conformance: every way to run an execution gives the same right results: synchronous, asynchronous
(an Event), burst, and fenced (waiting on other executions' sync fences), through the public API and
straight through the HAL. An asynchronous execution signals completion only once its outputs are
written (completion.py); every path keeps NNAPI's timing contract (timing.py). The HAL-level fenced
check holds the fence while the test writes new inputs: a driver that reads its inputs before its
wait fences are signalled computes with the old ones."""
from __future__ import annotations

import gc
import os
import threading
import time
from typing import Any

import numpy as np

from ...runtime import Burst, Execution, ResultCode
from ...runtime.hal import ExecutionResult, Timing
from ...runtime.hal.sync_fence import SyncFence
from ..context import StressContext
from .checks import (CheckFailed, Checks, HalRequest, compile_on, driver_model, expect_code, expect_outputs,
                     expect_success, hal_prepare, seconds_from_now)
from .completion import api_async_outputs, hal_async_outputs
from .timing import api_timing, api_timing_checks, describe, fenced_timing_problems, hal_timing_checks

HOLD_S = 0.3  # how long the fenced checks hold the fence before signalling it
WAIT_S = 30.0


def _execution(c, inputs) -> Execution:
    e = Execution(c)
    for k, x in enumerate(inputs):
        e.set_input(k, x)
    return e


def _outputs(e: Execution, c) -> list[np.ndarray]:
    return [e.get_output(k) for k in range(len(c.model.outputs))]


def execution_paths(ctx: StressContext) -> dict[str, Any]:
    checks = Checks(ctx, "execution paths")
    m = driver_model(ctx)
    if m is None:
        return checks.without_model()
    c = compile_on(ctx, m)
    expected = m.expected()

    def sync():
        e = _execution(c, m.inputs)
        e.set_measure_timing(True)
        e.compute()
        expect_outputs("compute()", _outputs(e, c), expected)
        return describe(api_timing(e))  # get_duration's nanoseconds, shown in microseconds
    checks.run("synchronous execution", sync)

    def asynchronous():
        e = _execution(c, m.inputs)
        e.start_compute().wait()
        expect_outputs("start_compute()", _outputs(e, c), expected)
    checks.run("asynchronous execution", asynchronous)
    checks.run("asynchronous execution signals completion after writing its outputs",
               lambda: api_async_outputs(m, c))

    def burst():
        b = Burst(c)
        try:
            for k in range(3):
                e = _execution(c, m.inputs)
                e.burst_compute(b)
                expect_outputs(f"burst execution {k}", _outputs(e, c), expected)
        finally:
            b.close()
        return "3 executions in one burst"
    checks.run("burst execution", burst)

    def fenced_chain():
        first = _execution(c, m.inputs)
        done = first.start_compute_with_dependencies([])
        second = _execution(c, m.inputs)
        second.set_measure_timing(True)
        second.start_compute_with_dependencies([done]).wait()
        expect_outputs("an execution fenced on another", _outputs(second, c), expected)
        return f"launched: {describe(api_timing(second))}; fenced: {describe(api_timing(second, fenced=True))}"
    checks.run("fenced execution through the public API", fenced_chain)
    api_timing_checks(checks, m, c, ctx.device.name)

    prepared = hal_prepare(ctx, m)

    def hal_async():
        r = HalRequest(m)
        result = prepared.execute(r.request, True, None, 2_000_000_000).wait(WAIT_S)
        if not isinstance(result, ExecutionResult):
            raise CheckFailed(f"the asynchronous execution's callback was not notified within {WAIT_S:g} s")
        expect_success("execute() (asynchronous HAL call)", result)
        expect_outputs("execute() (asynchronous HAL call)", r.outputs(), expected)
        return describe(result.timing)
    checks.run("the driver's asynchronous execution", hal_async)
    checks.run("the driver's asynchronous execution signals completion after writing its outputs",
               lambda: hal_async_outputs(m, prepared, 2_000_000_000))

    def hal_burst():
        context = prepared.configure_execution_burst()
        try:
            for k in range(3):
                r = HalRequest(m)
                result = context.execute(r.request, True, None, 2_000_000_000)
                expect_success(f"burst execution {k} (HAL)", result)
                expect_outputs(f"burst execution {k} (HAL)", r.outputs(), expected)
        finally:
            context.close()
        return "3 executions in one burst"
    checks.run("the driver's burst", hal_burst)

    def hal_fenced():
        """Launch with an unsignalled fence, write new inputs, then signal: the results must be the new
        inputs' (a driver that does not wait computes with the old ones, or finishes too early)."""
        old = [np.zeros_like(x) for x in m.inputs]
        r = HalRequest(m, old)
        fence = SyncFence()
        answer: list = []
        worker = threading.Thread(target=lambda: answer.append(prepared.execute_fenced(
            r.request, [fence.fileno()], True, None, 2_000_000_000, None)), daemon=True)
        worker.start()
        worker.join(HOLD_S)
        finished_early = not worker.is_alive()
        r.write_inputs(m.inputs)
        fence.signal()
        worker.join(WAIT_S)
        fence.close()
        if not answer:
            raise CheckFailed(f"execute_fenced did not return within {WAIT_S:g} s of its fence being signalled")
        result = answer[0]
        expect_success("execute_fenced", result)
        if finished_early:
            raise CheckFailed(f"execute_fenced returned before its wait fence was signalled (within {HOLD_S:g} s)")
        expect_outputs("execute_fenced (inputs written before the fence was signalled)", r.outputs(), expected)
        fenced = result.fenced_timing or Timing()
        problems = fenced_timing_problems("execute_fenced with a held fence", result.timing, fenced)
        if problems:  # timingLaunched includes the HOLD_S wait here, timingFenced must not be above it
            raise CheckFailed("; ".join(problems))
        return f"launched: {describe(result.timing)}; fenced: {describe(fenced)}"
    checks.run("the driver waits for its fences before reading inputs", hal_fenced)

    def hal_fence_deadline():
        fence = SyncFence()
        try:
            r = HalRequest(m)
            result = prepared.execute_fenced(r.request, [fence.fileno()], False, seconds_from_now(0.2),
                                             2_000_000_000, None)
        finally:
            fence.close()
        return expect_code("execute_fenced with a fence never signalled and a 0.2 s deadline", result.status,
                           (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_PERSISTENT),
                           result.message)
    checks.run("a fence not signalled by the deadline is a missed deadline", hal_fence_deadline)

    def no_fd_leak():
        before = _open_fds()
        for _ in range(20):
            fence = SyncFence()
            fence.signal()
            r = HalRequest(m)
            expect_success("execute_fenced", prepared.execute_fenced(r.request, [fence.fileno()], False, None,
                                                                     2_000_000_000, None))
            fence.close()
            r.close()
        gc.collect()
        time.sleep(0.05)
        grown = _open_fds() - before
        if grown > 4:
            raise CheckFailed(f"{grown} more open descriptors after 20 fenced executions")
        return f"{grown:+d} descriptors after 20 fenced executions"
    checks.run("fenced executions leak no descriptors", no_fd_leak)
    hal_timing_checks(checks, m, prepared)
    return checks.finish()


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


__all__ = ["execution_paths"]
