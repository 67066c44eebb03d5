"""Performance degradation: inference latency alone, then while other threads compile in a loop.

The compiling threads are busy `compile_duty` of the time (default 0.5): on a small machine where
driver and client share the CPU, back-to-back compilation would mostly measure CPU contention.
Two checks, each against `max_slowdown` (MLTS's default: 50%), each confirmed by up to `attempts`
measurements before it fails:
- degradation under compilation load: the driver's latency under load over its latency alone,
  divided by the same ratio for nnapi-reference measured alongside (the interpreter lock and the
  machine's other load slow every driver alike; what is left is the driver's own interference);
- the driver's own speed: its latency alone against the reference's on the same model (a driver
  that is slower than the CPU reference is a regression for every client).
Latencies are medians of interleaved samples (driver and reference in random order, pair after pair),
so drift in the machine's load hits both alike, and the compiling threads pause for random lengths so
that no periodic load can fall on one of the two every time.
"""
from __future__ import annotations

import random
import statistics
import threading
import time
from typing import Any

from ..runtime import Execution, MltsError
from .context import StressContext, describe_error


def _latency(ctx: StressContext, compilation, inputs) -> float:
    e = Execution(compilation)
    for i, x in enumerate(inputs):
        e.set_input(i, x)
    start = time.perf_counter()
    e.compute()
    elapsed = time.perf_counter() - start
    ctx.beat()
    return elapsed


def _measure(ctx: StressContext, drv, ref, inputs, seconds: float, min_samples: int) -> tuple[list[float], list[float]]:
    d: list[float] = []
    r: list[float] = []
    end = time.monotonic() + seconds
    while len(d) < min_samples or time.monotonic() < end:
        if ctx.random.random() < 0.5:  # random order: a periodic load must not always hit the same one
            d.append(_latency(ctx, drv, inputs))
            r.append(_latency(ctx, ref, inputs))
        else:
            r.append(_latency(ctx, ref, inputs))
            d.append(_latency(ctx, drv, inputs))
        if len(d) >= 20 * min_samples:
            break
    return d, r


def _under_compilation(ctx: StressContext, m, drv, ref, threads: int, min_samples: int, duty: float):
    """Latency samples (driver, reference) while `threads` threads compile the model in a loop, each
    busy `duty` of the time (1.0: back to back)."""
    stop = threading.Event()
    jitter = random.Random(ctx.seed)
    compiled = [0]
    errors: list[str] = []

    def compile_loop() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            try:
                ctx.compile(m.model)
            except MltsError as e:
                errors.append(describe_error(e))
                return
            compiled[0] += 1
            busy = time.perf_counter() - start
            stop.wait(max(0.001, busy * (1.0 - duty) / duty * jitter.uniform(0.5, 1.5)))  # no fixed period

    loaders = [threading.Thread(target=compile_loop, daemon=True, name=f"stress-compile-{k}") for k in range(threads)]
    for t in loaders:
        t.start()
    try:
        d1, r1 = _measure(ctx, drv, ref, m.inputs, ctx.duration / 2, min_samples)
    finally:
        stop.set()
        for t in loaders:
            t.join()
    if errors:
        ctx.fail(f"compiling {m.name} in a loop failed: {errors[0]}")
    return d1, r1, compiled[0]


def performance_degradation(ctx: StressContext) -> dict[str, Any]:
    """See the module doc; the first model of `models` the driver runs whole is measured."""
    names = list(ctx.param("models", []))
    m = ctx.usable_models(names)[0]
    max_slowdown = float(ctx.param("max_slowdown", 0.5))
    threads = int(ctx.param("compile_threads", 1))
    min_samples = int(ctx.param("min_samples", 5))
    drv = ctx.compile(m.model)
    ref = ctx.compile(m.model, reference=True)
    ctx.check(m, ctx.run(drv, m.inputs))
    for _ in range(2):  # warm up both
        _latency(ctx, drv, m.inputs)
        _latency(ctx, ref, m.inputs)
    med = statistics.median
    duty = min(1.0, max(0.05, float(ctx.param("compile_duty", 0.5))))
    attempts = int(ctx.param("attempts", 3))  # a failure is confirmed by measuring again: machines are noisy
    for attempt in range(1, attempts + 1):
        d0, r0 = _measure(ctx, drv, ref, m.inputs, ctx.duration / 2, min_samples)
        base, ref_base = med(d0), med(r0)
        own = base / ref_base - 1.0
        if ctx.driver == "nnapi-reference" or own <= max_slowdown:
            break
        ctx.log(f"attempt {attempt}: {ctx.driver} {base * 1e3:.2f} ms vs reference {ref_base * 1e3:.2f} ms")
    else:
        ctx.fail(f"{ctx.driver} is {own:.0%} slower than nnapi-reference on {m.name} "
                 f"({base * 1e3:.2f} ms vs {ref_base * 1e3:.2f} ms; allowed {max_slowdown:.0%})",
                 model=m.name, baseline_ms=base * 1e3, reference_baseline_ms=ref_base * 1e3,
                 slowdown_vs_reference=own, max_slowdown=max_slowdown)
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            d0, r0 = _measure(ctx, drv, ref, m.inputs, ctx.duration / 2, min_samples)
            base, ref_base = med(d0), med(r0)
        d1, r1, compiled = _under_compilation(ctx, m, drv, ref, threads, min_samples, duty)
        loaded, ref_loaded = med(d1), med(r1)
        degradation = (loaded / base) / (ref_loaded / ref_base) - 1.0
        ctx.log(f"{m.name}: {ctx.driver} {base * 1e3:.2f} ms alone, {loaded * 1e3:.2f} ms while compiling "
                f"({compiled} compilations); reference {ref_base * 1e3:.2f} / {ref_loaded * 1e3:.2f} ms")
        if degradation <= max_slowdown:
            break
    details = {"model": m.name, "baseline_ms": base * 1e3, "loaded_ms": loaded * 1e3,
               "reference_baseline_ms": ref_base * 1e3, "reference_loaded_ms": ref_loaded * 1e3,
               "slowdown_vs_reference": base / ref_base - 1.0, "degradation_under_compilation": degradation,
               "compilations": compiled, "samples": [len(d0), len(d1)], "max_slowdown": max_slowdown,
               "attempts": attempt}
    if degradation > max_slowdown:
        ctx.fail(f"latency on {ctx.driver} degraded by {degradation:.0%} while compiling in a loop, beyond what "
                 f"the reference suffered ({base * 1e3:.2f} -> {loaded * 1e3:.2f} ms; allowed {max_slowdown:.0%})",
                 **details)
    return details
