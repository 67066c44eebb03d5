"""The child side of the watchdog: `python -m mlts.stress.child JOB_FILE FD` runs one stress test.

A job (JSON) has: test (name), function (`module:function`), target (mlts.stress.drivers.Target:
name, spec, hosting, service_ref), specs (the run's --driver specs), hosting (an override or null),
duration_s (already scaled), params, seed, out_dir (artifacts such as failing graphs), work_dir.

The function gets a StressContext; returning means SUCCESS (its return value, a dict, becomes the
record's details), StressSkipped means SKIPPED (the test could not exercise the driver), StressFailure
or any error means FAILURE with the reason. Anything worse (a signal, os.abort, an exit) is the
watchdog's CRASH. Every result carries the operations that ran on the driver (`details["coverage"]`)
and the driver failures the runtime's CPU fallback hid (`details["fallbacks"]`); under all-devices a
hidden failure turns SUCCESS into FAILURE, naming the driver and why it failed.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from typing import Any

from ..childproc import die_with_parent

BEAT_EVERY_S = 0.2


class Reporter:
    """Writes the JSON lines the watchdog reads; the first result wins there, and here only one is sent."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()
        self.sent_result = False
        self.last_beat = 0.0

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, default=str) + "\n").encode("utf-8")
        with self.lock:
            if self.fd < 0:
                return
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self.fd, view):]
            except OSError:  # the watchdog is gone: nothing to tell anyone
                self.fd = -1

    def beat(self, note: str | None = None) -> None:
        now = time.monotonic()
        if note is None and now - self.last_beat < BEAT_EVERY_S:
            return  # tight loops beat often; the watchdog needs a sign of life, not every one
        self.last_beat = now
        self.send({"type": "hb", "note": note} if note else {"type": "hb"})

    def result(self, outcome: str, reason: str = "", details: dict | None = None) -> None:
        if self.sent_result:
            return
        self.sent_result = True
        self.send({"type": "result", "outcome": outcome, "reason": reason, "details": details or {}})


def _report(reporter: Reporter, ctx: Any, outcome: str, reason: str, details: dict) -> None:
    """Send the result with coverage and hidden fallbacks; a fallback under all-devices is a FAILURE."""
    if ctx is not None:
        fallbacks = ctx.fallbacks()
        coverage = ctx.coverage_summary()
        details = {**details, "coverage": coverage, "fallbacks": fallbacks}
        if (outcome == "SUCCESS" and ctx.job.get("check_coverage") and not ctx.all_devices
                and not (coverage and coverage["ops_on_driver"])):
            outcome, reason = "SKIPPED", f"no operation ran on {ctx.driver}" + (f" ({reason})" if reason else "")
        if fallbacks and ctx.all_devices and outcome in ("SUCCESS", "SKIPPED"):
            drivers = ", ".join(f"{d} {n} time(s)" for d, n in fallbacks["devices"].items())
            outcome, reason = "FAILURE", (f"the CPU fallback hid {fallbacks['count']} driver failure(s) ({drivers}): "
                                          f"{fallbacks['reasons'][0]}" + (f" [{reason}]" if reason else ""))
            print(f"[stress] FAILURE: {reason}", file=sys.stderr, flush=True)
    reporter.result(outcome, reason, details)


def main(argv: list[str]) -> int:
    """Run one job and report; always ends with os._exit so no driver thread can keep it alive."""
    if len(argv) != 2:
        print("usage: python -m mlts.stress.child JOB_FILE FD  (started by mlts.stress.watchdog)", file=sys.stderr)
        return 2
    die_with_parent()  # a killed watchdog (or pytest) leaves no strays
    reporter = Reporter(int(argv[1]))
    reporter.beat("started")
    with open(argv[0], encoding="utf-8") as f:
        job = json.load(f)
    from .context import StressContext, StressFailure, StressSkipped, describe_error

    ctx = None
    try:
        ctx = StressContext(job, reporter)
        ctx.log(f"test {ctx.test} on {ctx.driver} (duration {ctx.duration:.2f} s, "
                f"hosting {job.get('hosting') or 'default'})")
        ctx.open()
        details = ctx.call_test()
        details = details if isinstance(details, dict) else {}
        note = str(details.pop("note", "") or "")
        _report(reporter, ctx, "SUCCESS", note, details)
    except StressSkipped as e:
        print(f"[stress] SKIPPED: {e.reason}", file=sys.stderr, flush=True)
        _report(reporter, ctx, "SKIPPED", e.reason, e.details)
    except StressFailure as e:
        print(f"[stress] FAILURE: {e.reason}", file=sys.stderr, flush=True)
        _report(reporter, ctx, "FAILURE", e.reason, e.details)
    except BaseException as e:  # an API error, a wrong result, a bug: all FAILURE, with the reason
        traceback.print_exc()
        _report(reporter, ctx, "FAILURE", describe_error(e), {})
    finally:
        if ctx is not None:
            ctx.close()
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: a driver's leftover non-daemon threads must not keep the test process alive.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
