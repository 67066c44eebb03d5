"""Long-running sustained inference with resource checks: the resident memory and the open file
descriptors of the test process and everything it started (driver services) must stop growing once
warmed up. Checked every few executions, so a leaking driver fails long before it hurts the machine.
"""
from __future__ import annotations

import time
from typing import Any

import psutil

from ..runtime import Execution, Preference
from .context import StressContext

MIB = 1 << 20


def tree_usage() -> tuple[int, int]:
    """(RSS bytes, open fds) summed over this process and its descendants."""
    rss = fds = 0
    me = psutil.Process()
    for p in [me] + me.children(recursive=True):
        try:
            with p.oneshot():
                rss += p.memory_info().rss
                fds += p.num_fds()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return rss, fds


def sustained_inference(ctx: StressContext) -> dict[str, Any]:
    """Executions until the duration is over; FAILURE as soon as RSS or descriptors outgrow their bound."""
    names = list(ctx.param("models", []))
    models = ctx.supported_models(names)
    if not models:
        return {"note": f"skipped: {ctx.driver} runs none of {', '.join(names)} whole"}
    warmup = int(ctx.param("warmup_executions", 20))
    check_every = int(ctx.param("check_every", 4))
    rss_bound = float(ctx.param("rss_growth_mb", 64)) * MIB
    fd_bound = int(ctx.param("fd_growth", 16))
    compilations = []
    for m in models:
        c = None
        if ctx.device is not None:
            from ..runtime import Compilation

            c = Compilation.for_devices(m.model, [ctx.device])
            c.set_preference(Preference.SUSTAINED_SPEED)
            c.finish()
        compilations.append(c or ctx.compile(m.model))
    end = ctx.deadline()
    n = 0
    base_rss = base_fds = peak_rss = peak_fds = 0
    while n < warmup or time.monotonic() < end:
        m, c = models[n % len(models)], compilations[n % len(models)]
        e = Execution(c)  # a new execution each time: what a long-running app does
        for i, x in enumerate(m.inputs):
            e.set_input(i, x)
        e.compute()
        if n % 16 == 0:
            ctx.check(m, [e.get_output(i) for i in range(len(m.model.outputs))], f"(execution {n})")
        del e
        ctx.beat()
        n += 1
        if n == warmup:
            base_rss, base_fds = tree_usage()
            peak_rss, peak_fds = base_rss, base_fds
        elif n > warmup and n % check_every == 0:
            rss, fds = tree_usage()
            peak_rss, peak_fds = max(peak_rss, rss), max(peak_fds, fds)
            if rss - base_rss > rss_bound:
                ctx.fail(f"resident memory grew by {(rss - base_rss) / MIB:.1f} MiB over {n - warmup} executions "
                         f"after warm-up (allowed {rss_bound / MIB:.0f} MiB): a leak in {ctx.driver}?",
                         executions=n, rss_growth_mb=(rss - base_rss) / MIB)
            if fds - base_fds > fd_bound:
                ctx.fail(f"open file descriptors grew from {base_fds} to {fds} over {n - warmup} executions "
                         f"(allowed +{fd_bound})", executions=n)
    ctx.log(f"{n} executions; RSS {base_rss / MIB:.0f} -> peak {peak_rss / MIB:.0f} MiB, fds {base_fds} -> "
            f"peak {peak_fds}")
    return {"executions": n, "rss_start_mb": base_rss / MIB, "rss_peak_mb": peak_rss / MIB,
            "fds_start": base_fds, "fds_peak": peak_fds}
