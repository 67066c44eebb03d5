"""`mlts profile MODEL --driver D`: a model's per-operation profile on one driver, through the driver's own
per-operation times where it reports them (op_profile.py), else each operation timed alone (single_op.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from mlts.runtime import Compilation, Device, MltsError, Model

from .op_profile import PROFILE_RUNS, OpTiming, profiled_runs, random_inputs, time_per_type, with_shares
from .single_op import time_single_operations


@dataclass
class ModelProfile:
    """`mlts profile`'s answer: how the times were taken, and one entry per operation."""

    model: str
    driver: str
    method: str  # "driver" (the HAL extension) or "single-operation" (single_op.py)
    runs: int
    operations: list[OpTiming] = field(default_factory=list)
    note: str = ""

    def by_type(self) -> list[tuple[str, int, float, float]]:
        """(operation type, count, total us, share) per type, the largest total first."""
        return time_per_type((t.type, t.mean_us, t.share) for t in self.operations)

    def to_dict(self) -> dict:
        return {"model": self.model, "driver": self.driver, "method": self.method, "runs": self.runs,
                "note": self.note,
                "operations": [{**t.to_record(), "runs": t.runs, "source": t.source, "status": t.status,
                                **({"message": t.message} if t.message else {})} for t in self.operations],
                "by_type": [{"type": k, "count": n, "total_us": round(us, 3), "share": round(s, 5)}
                            for k, n, us, s in self.by_type()]}


def profile_model(name: str, model: Model, device: Device, *, runs: int = PROFILE_RUNS, single_op: bool = False,
                  reference: Device | None = None, inputs: Sequence[np.ndarray] | None = None) -> ModelProfile:
    """The profile of `model` on `device`: through the driver's per-operation times when it reports them
    (operations it does not support run on `reference`, if given), else (or with `single_op`) by timing
    each operation alone as a single-operation model (single_op.py)."""
    inputs = list(inputs) if inputs is not None else random_inputs(model)
    note = ""
    if not single_op:
        supported = model.get_supported_operations_for_devices([device])
        devices = [device] if all(supported) or reference is None or reference is device else [device, reference]
        try:
            c = Compilation.for_devices(model, devices)
            c.finish()
            timings = profiled_runs(c, inputs, runs=runs, budget_s=float("inf"))
        except MltsError as e:
            timings, note = [], f"the profiled runs failed ({e}); "
        if any(t.device == device.name for t in timings):
            return ModelProfile(name, device.name, "driver", runs, timings)
        note = note or f"{device.name} reports no per-operation times; "
    timings = time_single_operations(model, device, inputs, runs=runs)
    return ModelProfile(name, device.name, "single-operation", runs, with_shares(timings),
                        note + "each operation timed alone as a single-operation model")
