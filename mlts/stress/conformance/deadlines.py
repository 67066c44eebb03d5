"""Conformance: deadlines on preparation and execution. A deadline already passed is refused with
MISSED_DEADLINE_* (before any work), a generous one is met with right results, and a driver never
answers NO_ERROR well after the deadline it was given (a deadline never forces a result, but a result
that arrives late must be reported as missed)."""
from __future__ import annotations

import time
from typing import Any

from ...runtime import Compilation, MltsError
from ..context import StressContext
from .checks import (MISSED, CheckFailed, Checks, HalRequest, compile_on, driver_model, execute, expect_code,
                     expect_error, expect_outputs, expect_success, hal_execute, hal_prepare, seconds_from_now)

LATE_GRACE_S = 0.1  # a success reported this long after the deadline is a late success
LATE_ATTEMPTS = 3  # a loaded machine may delay a healthy driver once; three late successes are the driver's
SHORT_DEADLINE_S = 0.02
GENEROUS_S = 5.0  # ample for the tiny model; a driver that sleeps until its deadline still ends soon


def deadlines(ctx: StressContext) -> dict[str, Any]:
    checks = Checks(ctx, "deadlines")
    m = driver_model(ctx)
    if m is None:
        return checks.without_model()
    prepared = hal_prepare(ctx, m)

    checks.run("preparation with a deadline already passed is refused",
               lambda: expect_error("prepare_model(deadline 1 s ago)",
                                    lambda: hal_prepare(ctx, m, deadline=seconds_from_now(-1.0)), MISSED))

    def generous_preparation():
        p = hal_prepare(ctx, m, deadline=seconds_from_now(60.0))
        r = HalRequest(m)
        expect_success("execution of a model prepared with a deadline", hal_execute(p, r.request))
        expect_outputs("execution of a model prepared with a deadline", r.outputs(), m.expected())
    checks.run("preparation with a generous deadline succeeds", generous_preparation)

    def passed_execution():
        r = HalRequest(m)
        result = hal_execute(prepared, r.request, deadline=seconds_from_now(-1.0))
        return expect_code("execute(deadline 1 s ago)", result.status, MISSED, result.message)
    checks.run("execution with a deadline already passed is refused", passed_execution)

    def generous_execution():
        r = HalRequest(m)
        result = hal_execute(prepared, r.request, deadline=seconds_from_now(GENEROUS_S))
        expect_success(f"execute(deadline in {GENEROUS_S:g} s)", result)
        expect_outputs(f"execute(deadline in {GENEROUS_S:g} s)", r.outputs(), m.expected())
    checks.run("execution with a generous deadline succeeds", generous_execution)

    def never_late():
        seen = []
        for _ in range(LATE_ATTEMPTS):
            r = HalRequest(m)
            deadline = seconds_from_now(SHORT_DEADLINE_S)
            result = hal_execute(prepared, r.request, deadline=deadline)
            late = time.monotonic() - deadline
            if result.status in MISSED:
                return f"missed and said so ({result.status.name})"
            expect_success(f"execute(deadline in {SHORT_DEADLINE_S * 1000:g} ms)", result)
            if late <= LATE_GRACE_S:
                expect_outputs("a run that met its deadline", r.outputs(), m.expected())
                return f"met ({-late * 1000:.1f} ms to spare)" if late < 0 else "met"
            seen.append(late)
        raise CheckFailed(f"NO_ERROR reported {', '.join(f'{s * 1000:.0f}' for s in seen)} ms after a "
                          f"{SHORT_DEADLINE_S * 1000:g} ms deadline ({LATE_ATTEMPTS} times): a late result must be "
                          "reported as MISSED_DEADLINE_*")
    checks.run("a result after the deadline is reported as missed", never_late)

    def api_timeouts():
        c = Compilation.for_devices(m.model, [ctx.device])
        c.set_timeout(1)  # 1 ns: over before the driver looks
        expect_error("Compilation.set_timeout(1 ns) then finish()", c.finish, MISSED)
        ok = compile_on(ctx, m)
        try:
            execute(ok, m.inputs, timeout_ns=1)
        except MltsError as e:
            return expect_code("Execution.set_timeout(1 ns) then compute()", e.code, MISSED, e.message)
        raise CheckFailed("Execution.set_timeout(1 ns) then compute(): succeeded after its deadline")
    checks.run("timeouts through the public API are missed, not ignored", api_timeouts)
    return checks.finish()


__all__ = ["deadlines"]
