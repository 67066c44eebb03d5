"""Model loading stress: load + compile + one inference again and again; many compilations of one
model alive at once; model constants memory-mapped from a weights file."""
from __future__ import annotations

import gc
import os
import time
from typing import Any

import psutil

from .context import StressContext
from .graph_spec import build_model
from .models import BUILTIN, StressModel, load_model


def model_loading(ctx: StressContext) -> dict[str, Any]:
    """Each round builds the model afresh (zoo: ONNX import), compiles it and runs it once."""
    names = list(ctx.param("models", []))
    usable = [m.name for m in ctx.usable_models(names)]
    end = ctx.deadline()
    rounds = 0
    while rounds == 0 or time.monotonic() < end:
        m = load_model(usable[rounds % len(usable)])
        ctx.check(m, ctx.run(ctx.compile(m.model), m.inputs), f"(round {rounds})")
        rounds += 1
    ctx.log(f"{rounds} load/compile/run rounds")
    return {"rounds": rounds, "models": usable}


def compile_many(ctx: StressContext) -> dict[str, Any]:
    """`count` compilations of the same model held at once, every one run and checked, then freed."""
    names = list(ctx.param("models", []))
    m = ctx.usable_models(names)[0]
    count = int(ctx.param("count", 32))
    end = ctx.deadline()
    rounds = total = 0
    while rounds == 0 or time.monotonic() < end:
        compilations = []
        for _ in range(count):
            compilations.append(ctx.compile(m.model))
            if time.monotonic() > end + ctx.duration:  # a very slow compiler: stop holding more
                break
        for k, c in enumerate(compilations):
            ctx.check(m, ctx.run(c, m.inputs), f"(compilation {k} of {len(compilations)})")
        total += len(compilations)
        del compilations
        gc.collect()
        rounds += 1
    ctx.log(f"{total} compilations of {m.name} in {rounds} round(s) of up to {count}")
    return {"compilations": total, "rounds": rounds, "model": m.name}


def mmap_constants(ctx: StressContext) -> dict[str, Any]:
    """The suite's own models with every sizeable constant in a memory-mapped weights file
    (CONSTANT_REFERENCE): results as with copied constants, and no file descriptor left behind."""
    candidates = [n for n in ctx.param("models", []) if n in BUILTIN] or ["convnet_f32", "convnet_u8", "conv_add_f32"]
    plain = ctx.usable_models(candidates)
    weights_dir = ctx.work_dir / f"mmap-{os.getpid()}"
    me = psutil.Process()
    fds_before = None
    end = ctx.deadline()
    rounds = 0
    while rounds == 0 or time.monotonic() < end:
        base = plain[rounds % len(plain)]
        model, inputs = build_model(base.spec, memory_dir=weights_dir)
        memory = getattr(model, "_stress_memory", None)
        if memory is not None and memory.path:
            os.unlink(memory.path)  # the mapping stays valid; the disk does not fill up
        mapped = StressModel(base.name, model, inputs, "built-in", base.spec)
        ctx.check(mapped, ctx.run(ctx.compile(model), inputs), "with memory-mapped constants")
        del model, mapped
        if memory is not None:
            memory.close()
        gc.collect()
        rounds += 1
        if rounds == 2:
            fds_before = me.num_fds()
    fds_after = me.num_fds()
    if fds_before is not None and fds_after - fds_before > int(ctx.param("fd_slack", 8)):
        ctx.fail(f"open file descriptors grew from {fds_before} to {fds_after} over {rounds} memory-mapped models")
    ctx.log(f"{rounds} models with memory-mapped constants")
    return {"rounds": rounds}
