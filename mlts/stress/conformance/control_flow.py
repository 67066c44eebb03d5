"""Conformance: control flow on a driver that claims it. IF takes the branch its condition names (both
ways), a WHILE counting loop gives the hand-computed sum, and an endless WHILE ends with
MISSED_DEADLINE_* at the loop timeout (through the public API and straight through the HAL). On a driver
that claims neither IF nor WHILE (control flow is optional) every check is n/a and the test is SKIPPED."""
from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from ...runtime import MltsError
from ..context import StressContext
from .checks import (MISSED, CheckFailed, Checks, HalRequest, NotApplicable, claims_all, compile_on, execute,
                     expect_code, expect_outputs, hal_execute, hal_prepare)
from .models import endless_loop_model, if_model, while_sum_model

LOOP_TIMEOUT_NS = 100_000_000  # 0.1 s for the endless loop
STOP_WITHIN_S = 10.0  # a loop timeout not honoured by then is a hang


def control_flow(ctx: StressContext) -> dict[str, Any]:
    checks = Checks(ctx, "control flow")
    branch, loop, endless = if_model(), while_sum_model(), endless_loop_model()
    claims_if, claims_while = claims_all(ctx, branch), claims_all(ctx, loop)

    def if_takes(condition: bool):
        def check():
            if not claims_if:
                raise NotApplicable(f"{ctx.driver} does not claim IF")
            c = compile_on(ctx, branch)
            inputs = [np.array([condition]), *branch.inputs[1:]]
            expect_outputs(f"IF({condition}, 30 + 12, 30 - 12)", execute(c, inputs), branch.expected(inputs))
            return f"{'then' if condition else 'else'} branch: {branch.expected(inputs)[0][0]}"
        return check

    checks.run("IF with a true condition runs the then branch", if_takes(True))
    checks.run("IF with a false condition runs the else branch", if_takes(False))

    def counting_loop():
        if not claims_while:
            raise NotApplicable(f"{ctx.driver} does not claim WHILE")
        c = compile_on(ctx, loop)
        for n in (10, 0, 100):
            inputs = [np.array([n], np.int32)]
            expect_outputs(f"WHILE sum 1..{n}", execute(c, inputs), loop.expected(inputs))
        return "sums of 1..10, 1..0 and 1..100 right"
    checks.run("a WHILE counting loop gives the right sum", counting_loop)

    def loop_timeout_api():
        if not claims_all(ctx, endless):
            raise NotApplicable(f"{ctx.driver} does not claim the endless loop's operations")
        c = compile_on(ctx, endless)
        start = time.monotonic()
        try:
            execute(c, endless.inputs, loop_timeout_ns=LOOP_TIMEOUT_NS)
        except MltsError as e:
            took = time.monotonic() - start
            name = expect_code("an endless WHILE with a 0.1 s loop timeout", e.code, MISSED, e.message)
            return f"{name} after {took:.2f} s"
        raise CheckFailed("an endless WHILE with a 0.1 s loop timeout returned NO_ERROR")
    checks.run("an endless WHILE stops at the loop timeout", loop_timeout_api)

    def loop_timeout_hal():
        if not claims_all(ctx, endless):
            raise NotApplicable(f"{ctx.driver} does not claim the endless loop's operations")
        prepared = hal_prepare(ctx, endless)
        r = HalRequest(endless)
        answer: list = []
        worker = threading.Thread(target=lambda: answer.append(
            hal_execute(prepared, r.request, loop_timeout_ns=LOOP_TIMEOUT_NS)), daemon=True)
        start = time.monotonic()
        worker.start()
        while worker.is_alive() and time.monotonic() - start < STOP_WITHIN_S:
            worker.join(0.2)
            ctx.beat()
        if not answer:
            raise CheckFailed(f"execute(endless WHILE, loop timeout 0.1 s) still running after {STOP_WITHIN_S:g} s")
        return expect_code("execute(endless WHILE, loop timeout 0.1 s)", answer[0].status, MISSED, answer[0].message)
    checks.run("the driver honours the loop timeout it is given", loop_timeout_hal)
    return checks.finish()


__all__ = ["control_flow"]
