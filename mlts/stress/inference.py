"""Parallel inference and interleaved compiled models: many executions at once, and several
compiled models alive and used in turn, must all give the reference's results."""
from __future__ import annotations

import threading
import time
from typing import Any

from ..runtime import MltsError
from .context import StressContext, describe_error
from .models import check_outputs


def _models(ctx: StressContext) -> list:
    return ctx.usable_models(list(ctx.param("models", [])))


def parallel_inference(ctx: StressContext) -> dict[str, Any]:
    """Every model on `threads` threads for the duration, each result checked against the reference."""
    models = _models(ctx)
    threads = int(ctx.param("threads", 4))
    compilations = {m.name: ctx.compile(m.model) for m in models}
    expected = {m.name: ctx.reference_outputs(m) for m in models}
    end = ctx.deadline()
    errors: list[str] = []
    counts = [0] * threads

    def worker(k: int) -> None:
        i = k
        while time.monotonic() < end and not errors:
            m = models[i % len(models)]
            i += 1
            try:
                outputs = ctx.run(compilations[m.name], m.inputs)
            except MltsError as e:
                errors.append(f"thread {k}: {m.name}: {describe_error(e)}")
                return
            why = check_outputs(outputs, expected[m.name], m.output_codes)
            if why is not None:
                errors.append(f"thread {k}: wrong results for {m.name}: {why}")
                return
            counts[k] += 1

    pool = [threading.Thread(target=worker, args=(k,), name=f"stress-inference-{k}", daemon=True)
            for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()  # a hung driver keeps this waiting without heartbeats: the watchdog's HANG
    if errors:
        ctx.fail(errors[0], executions=sum(counts))
    ctx.log(f"{sum(counts)} executions of {len(models)} model(s) on {threads} threads")
    return {"executions": sum(counts), "threads": threads, "models": [m.name for m in models]}


def interleaved_models(ctx: StressContext) -> dict[str, Any]:
    """Prepare m1 and m2, run m1, m2, m1, m2, free both; again until the duration is over."""
    models = _models(ctx)
    m1, m2 = models[0], models[1 % len(models)]
    end = ctx.deadline()
    cycles = 0
    while cycles == 0 or time.monotonic() < end:
        c1 = ctx.compile(m1.model)
        c2 = ctx.compile(m2.model)
        for m, c in ((m1, c1), (m2, c2), (m1, c1), (m2, c2)):
            ctx.check(m, ctx.run(c, m.inputs), f"(cycle {cycles})")
        del c1, c2
        cycles += 1
    ctx.log(f"{cycles} cycles of {m1.name} / {m2.name}")
    return {"cycles": cycles, "models": [m1.name, m2.name]}
