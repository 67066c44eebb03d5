"""The liveness check: after a test crashed, hung or disrupted the driver, a fresh client compiles a
supported model on the same driver and gets the reference's results (the driver survived)."""
from __future__ import annotations

from typing import Any

from .context import StressContext


def liveness(ctx: StressContext) -> dict[str, Any]:
    """The first of the models the driver runs whole must still give the reference's results."""
    names = list(ctx.param("models", []))
    models = ctx.usable_models(names)
    ctx.liveness(models[0])
    return {"model": models[0].name}
