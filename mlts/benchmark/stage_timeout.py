"""`mlts benchmark --timeout S`: no stage of a case may wait on a driver for more than S seconds.

NNAPI's own deadline (set_timeout) covers only single-device compilations and executions, and a driver
may ignore it; a partitioned `<driver>+nnapi-reference` case cannot have one at all. So each stage
that calls drivers (asking what they support, compiling, warm-up and timed runs, accuracy, nnapi-
reference's outputs) runs in a worker thread while the main thread waits. The limit is on progress,
not on the stage as a whole: the stage times out when S seconds pass without one compilation or
inference returning (the stage ticks after each), so a long accuracy pass of fast inferences is never
cut. On a timeout every service-hosted device of the case has its driver service killed: its blocked
calls return DEAD_OBJECT and the next model-level call restarts it for the next case. An in-process
driver cannot be stopped: its stuck thread (a daemon) is left behind and the run goes on.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Callable, Sequence

from mlts.runtime import MltsError

from .stats import RunLengthRules

#: Where the stage's calls also carry NNAPI's deadline (single-device compilations and executions), the
#: watchdog acts this long after S, so a driver that honours the deadline (and the service proxy, which
#: gives up 0.5 s after it) fails the usual way first, with MISSED_DEADLINE.
WATCHDOG_GRACE_S = 2.0
#: After killing the case's driver services, how long the stage gets to come back with DEAD_OBJECT.
KILL_WAIT_S = 5.0

Tick = Callable[[], None]


def error_text(e: BaseException) -> str:
    if isinstance(e, MltsError):
        return f"{e.code.name}: {e.message}"
    return f"{type(e).__name__}: {e}"


class CaseError(Exception):
    """A failure of one stage of a case; the record keeps what the earlier stages measured."""

    def __init__(self, stage: str, cause: BaseException | None, message: str | None = None) -> None:
        super().__init__(message if message is not None else f"{stage}: {error_text(cause)}")
        self.stage = stage
        self.cause = cause


class StageTimeout(CaseError):
    """A stage that made no progress for S seconds. `abandoned`: its thread is still stuck in a driver."""

    def __init__(self, stage: str, timeout_s: float, waiting_on: str | None, notes: Sequence[str],
                 abandoned: bool) -> None:
        text = f"timed out after {timeout_s:g} s while {stage}"
        if waiting_on:
            text += f" ({waiting_on} did not return)"
        if notes:
            text += "; " + "; ".join(notes)
        super().__init__(stage, None, text)
        self.timeout_s = timeout_s
        self.abandoned = abandoned


def kill_driver_services(devices: Sequence[Any]) -> list[str]:
    """SIGKILL the live driver service of each service-hosted device; what was done, as notes."""
    notes = []
    for device in devices:
        driver = getattr(device, "driver", None)
        if getattr(driver, "hosting", None) != "service" or not getattr(driver, "alive", False):
            continue  # in-process, or already dead (its pid may be reused: never signal it)
        pid = driver.pid
        try:
            os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
        except OSError:
            continue  # exited meanwhile
        notes.append(f"killed {device.name}'s driver service (process {pid})")
    return notes


class _Progress:
    """What a stage has done so far: the worker ticks after each unit of work (a few hundred ns)."""

    def __init__(self) -> None:
        self.started = self.last = time.monotonic()
        self.units = 0

    def tick(self) -> None:
        self.last = time.monotonic()
        self.units += 1


class Watchdog:
    """Runs the stages of a case under `timeout_s` (None: in the calling thread, unbounded).

    `run(stage, fn, devices)` calls `fn(tick)`; `fn` calls `tick()` after each compilation or inference.
    Failures become CaseError(stage, cause), a stall StageTimeout naming the stage and, through
    `waiting_on(units_done, seconds_since_start_of_last_unit)`, the unit that did not return.
    `nnapi_deadline`: the calls carry NNAPI's deadline too, which is given `grace_s` to act first.
    """

    def __init__(self, timeout_s: float | None, *, grace_s: float | None = None,
                 kill_wait_s: float | None = None) -> None:
        self.timeout_s = timeout_s
        self.grace_s = WATCHDOG_GRACE_S if grace_s is None else grace_s
        self.kill_wait_s = KILL_WAIT_S if kill_wait_s is None else kill_wait_s

    def run(self, stage: str, fn: Callable[[Tick], Any], devices: Sequence[Any] = (), *,
            waiting_on: Callable[[int, float], str] | None = None, nnapi_deadline: bool = False) -> Any:
        progress = _Progress()
        if self.timeout_s is None:
            return _call(stage, fn, progress.tick)
        box: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                box["value"] = fn(progress.tick)
            except BaseException as e:  # handed to the main thread, which decides
                box["error"] = e
            finally:
                done.set()

        threading.Thread(target=work, name=f"mlts-benchmark-stage: {stage}", daemon=True).start()
        limit = self.timeout_s + (self.grace_s if nnapi_deadline else 0.0)
        while not done.is_set():
            remaining = progress.last + limit - time.monotonic()
            if remaining <= 0:
                break
            done.wait(remaining)
        if done.is_set():
            return _result(stage, box)
        what = waiting_on(progress.units, progress.last - progress.started) if waiting_on else None
        notes = kill_driver_services(devices)
        if notes:
            done.wait(self.kill_wait_s)  # the blocked calls return DEAD_OBJECT within about a second
        abandoned = not done.is_set()
        if abandoned:
            notes.append("the stuck call was left behind in its thread (an in-process driver cannot be stopped)")
        raise StageTimeout(stage, self.timeout_s, what, notes, abandoned)


def _call(stage: str, fn: Callable[[Tick], Any], tick: Tick) -> Any:
    try:
        return fn(tick)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:  # the runtime raises MltsError only, but a broken driver must not end the run
        raise CaseError(stage, e) from e


def _result(stage: str, box: dict[str, Any]) -> Any:
    if "error" not in box:
        return box.get("value")
    e = box["error"]
    if isinstance(e, Exception):
        raise CaseError(stage, e) from e
    raise e  # SystemExit and the like, raised in the worker: as if raised here


def inference_waiting_on(total: int | None = None, what: str = "inference") -> Callable[[int, float], str]:
    """`waiting_on` for a stage of `total` inferences (images): "image 3 of 20"."""
    def describe(units: int, _elapsed: float) -> str:
        return f"{what} {units + 1} of {total}" if total else f"{what} {units + 1}"
    return describe


def runs_waiting_on(rules: RunLengthRules) -> Callable[[int, float], str]:
    """`waiting_on` for stats.measure: whether the stuck run was a warm-up run or a timed one, by the
    rules' warm-up condition (at least `warmup_runs` runs and `warmup_min_s` s, or `max_s` s), which
    only becomes true, so checking it when the stuck run started is enough."""
    def describe(units: int, elapsed: float) -> str:
        warmed = (units >= rules.warmup_runs and elapsed >= rules.warmup_min_s) or elapsed >= rules.max_s
        if not warmed:
            return f"warm-up run {units + 1}"
        return f"inference {units + 1}, in the timed runs,"
    return describe
