"""The random-graph stress test: random valid NNAPI graphs (mlts.stress.graphgen) run on a driver and
compared with nnapi-reference (CTS tolerances).

First the driver's support is probed with single-operation graphs, so that the generator only uses
the (operation, operand type) pairs the driver takes. A mismatch or an API error on a graph the driver
claims to support is a FAILURE; the graph is saved as a spec (mlts.stress.graph_spec), shrunk to the
smallest graph that still fails (mlts.stress.shrink), and `mlts stress --replay FILE` runs it again.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..runtime import MltsError
from .context import StressContext, describe_error
from .graph_spec import build_model, describe, load_spec, save_spec
from .graphgen.generator import GraphGenerator, probe_pairs, single_op_spec
from .models import compare
from .shrink import Shrunk, shrink


# -- which (operation, operand code) pairs a driver takes ----------------------------------------
def supported_pairs(ctx: StressContext) -> set[tuple[str, str]] | None:
    """The (operation, input type) pairs the driver takes, learnt from single-operation graphs
    (None: every pair, for ALL_DEVICES where the runtime falls back to the CPU)."""
    if ctx.device is None:
        return None
    out = set()
    for name, code_name in probe_pairs():
        for seed in range(6):
            spec = single_op_spec(name, code_name, seed)
            if spec is None:
                continue
            model, _ = build_model(spec)
            if ctx.supports(model):
                out.add((name, code_name))
                break
        ctx.beat()
    return out


# -- the test --------------------------------------------------------------------------------------
def run_graph(ctx: StressContext, spec: dict[str, Any]) -> tuple[str | None, bool]:
    """(why it failed or None, whether the driver ran it); compares with nnapi-reference."""
    model, inputs = build_model(spec)
    if not ctx.supports(model):
        return None, False
    expected = ctx.run(ctx.compile(model, reference=True), inputs)
    try:
        actual = ctx.run(ctx.compile(model), inputs)
    except MltsError as e:
        return f"{describe_error(e)}", True
    codes = [model.operand_type(i).code for i in model.outputs]
    for k, (a, e, c) in enumerate(zip(actual, expected, codes)):
        why = compare(a, e, c, whole_model=False)
        if why is not None:
            return f"output {k} ({c.name}): {why}", True
    return None, True


def save_failing(ctx: StressContext, spec: dict[str, Any], reason: str, suffix: str = "") -> Path:
    """Save a failing graph with what replaying it needs (driver, its spec, hosting, reason)."""
    spec = dict(spec, driver=ctx.driver, target=ctx.target.to_job(), specs=ctx.specs, hosting=ctx.hosting,
                reason=reason)
    name = f"{ctx.driver}-seed{spec.get('seed', 0)}{suffix}.graph.json".replace("/", "_").replace(":", "_")
    return save_spec(spec, ctx.out_dir / "failing_graphs" / name)


def _shrink(ctx: StressContext, spec: dict[str, Any], why: str) -> Shrunk | None:
    """The smallest graph that still fails on the driver (mlts.stress.shrink), or None."""
    if len(spec["operations"]) == 1:
        return Shrunk(spec, why, [0], False, 0)
    def fails(candidate: dict[str, Any]) -> str | None:
        why, did_run = run_graph(ctx, candidate)
        return why if did_run else None

    def on_reference(candidate: dict[str, Any]) -> list:
        model, inputs = build_model(candidate)
        return ctx.run(ctx.compile(model, reference=True), inputs)

    return shrink(spec, fails, on_reference, budget_s=float(ctx.param("shrink_s", 30.0)), beat=ctx.beat)


def random_graphs(ctx: StressContext) -> dict[str, Any]:
    """Graphs until the duration is over (at least one): FAILURE at the first mismatch or error."""
    allowed = supported_pairs(ctx)
    if allowed is not None and not allowed:
        ctx.skip(f"{ctx.driver} takes none of the generator's operations")
    gen = GraphGenerator(allowed)
    end = ctx.deadline()
    base = int(ctx.param("first_seed", ctx.seed * 100003))
    ran = skipped = 0
    k = 0
    max_graphs = int(ctx.param("max_graphs", 1 << 30))
    while (ran == 0 and k < 200 or time.monotonic() < end) and k < max_graphs:
        seed = base + k
        k += 1
        spec = gen.generate(seed)
        try:
            why, did_run = run_graph(ctx, spec)
        except MltsError as e:  # the reference refused the graph: a generator bug, not the driver's
            ctx.log(f"graph seed {seed} is invalid ({describe_error(e)}); skipped")
            skipped += 1
            continue
        if not did_run:
            skipped += 1
            continue
        ran += 1
        if why is not None:
            path = save_failing(ctx, spec, why)
            found = _shrink(ctx, spec, why)
            if found is None:
                ctx.fail(f"random graph seed {seed} ({describe(spec)}): {why}; reproduce with "
                         f"`mlts stress --replay {path}`", graph=str(path), seed=seed, graphs_run=ran)
            small = path if found.spec is spec else save_failing(ctx, dict(found.spec, seed=seed), found.reason,
                                                                  suffix=".shrunk")
            whole = "" if small == path else f" (whole graph: {path})"
            ctx.fail(f"random graph seed {seed} ({describe(spec)}) fails on {ctx.driver}; shrunk: "
                     f"{found.describe(spec)}; reproduce with `mlts stress --replay {small}`{whole}",
                     graph=str(path), shrunk_graph=str(small), seed=seed, graphs_run=ran,
                     shrunk_operations=found.operations)
    if ran == 0:
        ctx.skip(f"none of {k} random graphs ran on {ctx.driver} ({skipped} not supported as a whole or invalid)",
                 graphs=0, skipped=skipped)
    ctx.log(f"{ran} random graphs matched nnapi-reference ({skipped} skipped: not supported as a whole)")
    return {"graphs": ran, "skipped": skipped, "pairs": None if allowed is None else len(allowed)}


def replay(ctx: StressContext) -> dict[str, Any]:
    """`mlts stress --replay FILE`: the saved graph once more, on the same driver."""
    spec = load_spec(ctx.param("spec_path", ""))
    model, _ = build_model(spec)
    if not ctx.supports(model):
        ctx.fail(f"{ctx.driver} does not support every operation of the graph")
    why, _ = run_graph(ctx, spec)
    if why is not None:
        ctx.fail(f"reproduced: {why}")
    return {"note": "did not reproduce: the driver's results match nnapi-reference"}


__all__ = ["random_graphs", "replay", "run_graph", "save_failing", "supported_pairs"]
