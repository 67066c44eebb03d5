"""Long-running sustained inference with resource checks: the resident memory and the open file
descriptors of the test process and everything it started (driver services) must stop growing once
warmed up, and the driver must not slow down as it runs. Hard bounds are checked every few
executions, so a fast leak fails long before it hurts the machine; trends (mlts.stress.trends) are
fitted at the end, so a slow steady leak or throttling fails too, with its rate.
"""
from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ..process_tree import ProcessTree
from ..runtime import Compilation, Execution, Preference
from .context import StressContext
from .drivers import REFERENCE
from .trends import theil_sen

MIB = 1 << 20


def _execute(c, inputs) -> tuple[Execution, float]:
    e = Execution(c)  # a new execution each time: what a long-running app does
    for i, x in enumerate(inputs):
        e.set_input(i, x)
    start = time.perf_counter()
    e.compute()
    return e, time.perf_counter() - start


def sustained_inference(ctx: StressContext) -> dict[str, Any]:
    """Executions until the duration is over (at least `min_executions` after warm-up), each paired
    with one on nnapi-reference in random order. FAILURE as soon as RSS or descriptors outgrow their
    hard bounds; at the end, FAILURE on a steady trend: RSS growing `leak_kib_per_execution` or more
    per execution (the 95% interval's lower bound), descriptors growing at all, or the driver's latency
    (over the reference's, which cancels the machine's own drift) drifting `max_latency_drift` or more
    over the test with the 95% interval's lower bound above half of that."""
    # One model by default, as a long-running app runs one: models differ in how a drift shows
    models = ctx.usable_models(list(ctx.param("models", [])))[:int(ctx.param("max_models", 1))]
    warmup = int(ctx.param("warmup_executions", 20))
    min_executions = int(ctx.param("min_executions", 60))
    check_every = int(ctx.param("check_every", 4))
    rss_bound = float(ctx.param("rss_growth_mb", 64)) * MIB
    fd_bound = int(ctx.param("fd_growth", 16))
    leak_per_run = float(ctx.param("leak_kib_per_execution", 64)) * 1024
    max_drift = float(ctx.param("max_latency_drift", 0.2))
    compilations, references = [], []
    for m in models:
        devices = ctx.devices_for(m.model)
        c = Compilation(m.model) if devices is None else Compilation.for_devices(m.model, devices)
        c.set_preference(Preference.SUSTAINED_SPEED)
        c.finish()
        ctx._count_coverage(m.model, c)
        compilations.append(c)
        references.append(ctx.timing_reference(m.model))
    paired = ctx.driver != REFERENCE
    tree = ProcessTree()  # this process and the driver services it started
    end = ctx.deadline()
    hard_end = end + 3.0 * ctx.duration + 30.0  # a very slow driver still ends
    n = 0
    base_rss = base_fds = 0
    runs: list[int] = []
    kinds: list[int] = []  # which model each latency belongs to
    ratios: list[float] = []
    samples: list[tuple[int, int, int]] = []  # (execution, rss, fds)
    while (n < warmup + min_executions or time.monotonic() < end) and time.monotonic() < hard_end:
        k = n % len(models)
        m, c, ref = models[k], compilations[k], references[k]
        reference_first = paired and ctx.random.random() < 0.5
        r_s = _execute(ref, m.inputs)[1] if reference_first else None
        e, d_s = _execute(c, m.inputs)
        if paired and r_s is None:
            r_s = _execute(ref, m.inputs)[1]
        if n % 16 == 0:
            ctx.check(m, [e.get_output(i) for i in range(len(m.model.outputs))], f"(execution {n})")
        del e
        ctx.beat()
        n += 1
        if n > warmup:
            runs.append(n)
            kinds.append(k)
            ratios.append(math.log(d_s / r_s) if paired and r_s and d_s > 0 else math.log(max(d_s, 1e-9)))
        if n == warmup:
            base_rss, base_fds = tree.usage()
            samples.append((n, base_rss, base_fds))
        elif n > warmup and n % check_every == 0:
            rss, fds = tree.usage()
            samples.append((n, rss, fds))
            if rss - base_rss > rss_bound:
                trend = theil_sen([s[0] for s in samples], [s[1] for s in samples])
                rate = f"RSS grows {_size(trend.slope)} per execution" if trend else "RSS grew"
                ctx.fail(f"{rate} over {n - warmup} executions: +{(rss - base_rss) / MIB:.1f} MiB after warm-up, "
                         f"past the {rss_bound / MIB:.0f} MiB bound: {ctx.driver} leaks",
                         executions=n, rss_growth_mb=(rss - base_rss) / MIB)
            if fds - base_fds > fd_bound:
                ctx.fail(f"open file descriptors grew from {base_fds} to {fds} over {n - warmup} executions "
                         f"(allowed +{fd_bound})", executions=n)
    ratio_array, kind_array = np.asarray(ratios), np.asarray(kinds, np.int64)
    centred = ratio_array.copy()  # models differ in speed: each model's own median is its zero
    for k in set(kinds):
        centred[kind_array == k] -= float(np.median(ratio_array[kind_array == k]))
    details = _trends(ctx, n - warmup, samples, runs, list(centred), paired, leak_per_run, max_drift)
    ctx.log(f"{n} executions; " + "; ".join(f"{k} {v}" for k, v in details.items() if k.endswith("_trend")))
    return {"executions": n, **details}


def _trends(ctx: StressContext, executions: int, samples: list[tuple[int, int, int]], runs: list[int],
            log_ratios: list[float], paired: bool, leak_per_run: float, max_drift: float) -> dict[str, Any]:
    """Fit the three trends; FAILURE on a leak, descriptor growth or throttling, naming the rate."""
    details: dict[str, Any] = {}
    if samples:
        details.update(rss_start_mb=samples[0][1] / MIB, rss_peak_mb=max(s[1] for s in samples) / MIB,
                       fds_start=samples[0][2], fds_peak=max(s[2] for s in samples))
    rss = theil_sen([s[0] for s in samples], [s[1] for s in samples])
    fds = theil_sen([s[0] for s in samples], [s[2] for s in samples])
    latency = theil_sen(runs, log_ratios)
    against = " relative to nnapi-reference" if paired else ""
    if rss is not None:
        details["rss_trend"] = f"{rss.slope / 1024:+.1f} KiB/execution (95% interval {rss.low / 1024:+.1f} .. " \
                               f"{rss.high / 1024:+.1f})"
        if rss.low >= leak_per_run:
            ctx.fail(f"RSS grows {_size(rss.slope)} per execution over {executions} executions (at least "
                     f"{_size(rss.low)} with 95% confidence; allowed < {_size(leak_per_run)}): {ctx.driver} leaks",
                     **details)
    if fds is not None:
        details["fd_trend"] = f"{fds.slope:+.3f} descriptors/execution"
        first, last = samples[0][2], samples[-1][2]
        if fds.low > 0 and last - first >= 2:
            ctx.fail(f"open file descriptors grow {fds.slope:.2f} per execution over {executions} executions "
                     f"({first} -> {last}): {ctx.driver} leaks descriptors", **details)
    if latency is not None:
        drift, low = math.expm1(latency.growth), math.expm1(latency.low * latency.span)
        details["latency_trend"] = f"{drift:+.0%} over the test{against} (95% interval from {low:+.0%})"
        if drift >= max_drift and low >= max_drift / 2:  # a large drift, and surely a real one
            ctx.fail(f"latency drifts {drift:+.0%} over {executions} executions{against} (at least {low:+.0%} "
                     f"with 95% confidence; allowed < {max_drift:.0%}, or a 95% interval reaching below "
                     f"{max_drift / 2:+.0%}): {ctx.driver} slows down as it runs (throttling?)", **details)
    return details


def _size(n_bytes: float) -> str:
    return f"{n_bytes / MIB:.2f} MiB" if abs(n_bytes) >= MIB / 2 else f"{n_bytes / 1024:.0f} KiB"
