"""Client early termination and multi-process inference with random kills.

Client processes (mlts.stress.worker) load the same driver and compile and run in a loop; some are
SIGKILLed at a random moment. What must hold: the driver services of a killed client go away by
themselves (no orphans holding device resources), the other clients finish with right results, and
the driver in this process keeps serving (checked after every kill and by the final liveness check).
"""
from __future__ import annotations

import time
from typing import Any

from .context import StressContext
from .watchdog import TreeTracker
from .worker import Worker

READY_TIMEOUT_S = 90.0  # a worker loads mlts, its driver and a model: slow on a loaded machine
ORPHAN_WAIT_S = 5.0


def _sleep(ctx: StressContext, seconds: float) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 0.1))
        ctx.beat()


def _kill_and_check_orphans(ctx: StressContext, w: Worker, tracker: TreeTracker) -> None:
    tracker.poll()
    w.kill()
    end = time.monotonic() + ORPHAN_WAIT_S
    while (left := tracker.alive()) and time.monotonic() < end:
        time.sleep(0.1)
        ctx.beat()
    if left:
        pids = ", ".join(f"{p.pid} ({' '.join(p.cmdline()[-2:]) if p.is_running() else '?'})" for p in left)
        tracker.kill_all(timeout=2.0)
        ctx.fail(f"{len(left)} process(es) of a killed client kept running {ORPHAN_WAIT_S:g} s after it died: {pids}")


def _first_model(ctx: StressContext):
    names = list(ctx.param("models", []))
    return ctx.usable_models(names)[0], names


def client_termination(ctx: StressContext) -> dict[str, Any]:
    """`kills` clients, each killed at a random moment of its compile/execute loop."""
    m, names = _first_model(ctx)
    own = ctx.compile(m.model)
    ctx.check(m, ctx.run(own, m.inputs))
    kills = int(ctx.param("kills", 3))
    max_delay = float(ctx.param("max_delay_s", 0.6))
    for k in range(kills):
        w = Worker(ctx, m.name, "client", k)
        try:
            if w.wait_for(("ready", "fail"), READY_TIMEOUT_S, ctx.beat) != "ready":
                ctx.fail(f"client {k} did not get ready: {w.last_line()}")
            tracker = TreeTracker(w.proc.pid)
            _sleep(ctx, ctx.random.uniform(0.0, max_delay))
            _kill_and_check_orphans(ctx, w, tracker)
        finally:
            w.kill()
        ctx.check(m, ctx.run(own, m.inputs), f"after client {k} was killed")
        ctx.log(f"client {k} killed; {ctx.driver} still serves this process")
    ctx.liveness(m)
    return {"kills": kills, "model": m.name}


def multi_process(ctx: StressContext) -> dict[str, Any]:
    """`processes` clients run inference and model loading for the duration; `kills` of them are
    killed at random moments; the others must finish with right results."""
    m, names = _first_model(ctx)
    n = int(ctx.param("processes", 3))
    kills = min(int(ctx.param("kills", 1)), n - 1)
    workers = [Worker(ctx, m.name, "mixed", k) for k in range(n)]
    try:
        for w in workers:
            if w.wait_for(("ready", "fail"), READY_TIMEOUT_S, ctx.beat) != "ready":
                ctx.fail(f"client {w.index} did not get ready: {w.last_line()}")
        victims = ctx.random.sample(workers, kills)
        moments = sorted(ctx.random.uniform(0.0, 0.7 * ctx.duration) for _ in victims)
        start = time.monotonic()
        for w, at in zip(victims, moments):
            _sleep(ctx, max(0.0, start + at - time.monotonic()))
            _kill_and_check_orphans(ctx, w, TreeTracker(w.proc.pid))
            ctx.log(f"client {w.index} killed at {at:.2f} s")
        runs = 0
        for w in workers:
            if w in victims:
                continue
            line = w.wait_for(("ok", "fail"), ctx.duration + READY_TIMEOUT_S, ctx.beat)
            if line is None or not line.startswith("ok"):
                ctx.fail(f"client {w.index} (not killed) did not finish well: {line or w.last_line()}")
            runs += int(line.split()[1])
    finally:
        for w in workers:
            w.kill()
    ctx.liveness(m)
    return {"processes": n, "killed": kills, "survivor_runs": runs, "model": m.name}
