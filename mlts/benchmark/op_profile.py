"""Per-operation profiles: the record's `op_profile` and `mlts profile`.

A benchmark case's profile comes from a few profiled runs after its timed runs
(Execution.compute_profiled: the devices that implement the HAL's IOperationProfiling report each
operation's time). For a driver without that extension, `mlts profile` times each operation alone
as a single-operation model on the driver (single_op.py). Either way an entry is one operation:
its index in the model, type, device, mean microseconds and share of the profile's total.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from mlts.runtime import Compilation, Execution, MltsError, Model, OperandCode

from .record_schema import BenchmarkRecord

#: Profiled runs per benchmark case: at most this many, and no more once the budget is spent (one at least).
PROFILE_RUNS = 10
PROFILE_BUDGET_S = 2.0


@dataclass
class OpTiming:
    """One operation's time in a profile: mean over `runs` runs (or the median of a single-operation
    model's runs, see single_op.py), in microseconds; `status` other than "ok" means not timed."""

    index: int
    type: str
    device: str
    mean_us: float | None
    runs: int = 0
    source: str = "profiled"  # "profiled" (the driver's per-operation times) or single_op.py's sources
    status: str = "ok"
    message: str = ""
    share: float | None = None

    def to_record(self) -> dict:
        """The record's form: index, type, device, mean_us, share."""
        return {"index": self.index, "type": self.type, "device": self.device,
                "mean_us": None if self.mean_us is None else round(self.mean_us, 3),
                "share": None if self.share is None else round(self.share, 5)}


def with_shares(timings: list[OpTiming]) -> list[OpTiming]:
    """Each timed operation's share of the total of the timed operations."""
    total = sum(t.mean_us for t in timings if t.mean_us is not None)
    for t in timings:
        t.share = (t.mean_us / total if total > 0 else 0.0) if t.mean_us is not None else None
    return timings


def profiled_runs(compilation: Compilation, inputs: Sequence[np.ndarray], *, runs: int = PROFILE_RUNS,
                  budget_s: float = PROFILE_BUDGET_S, tick: Callable[[], None] | None = None) -> list[OpTiming]:
    """Up to `runs` profiled computations on `inputs` (fewer once `budget_s` is spent, one at least); the mean
    time of each operation a device reported, in model order. Empty when no device of the compilation
    implements the extension. Raises MltsError when a computation fails."""
    ex = Execution(compilation)
    for k, x in enumerate(inputs):
        ex.set_input(k, x)
    ex.set_reusable(True)
    samples: dict[int, list[float]] = {}
    seen: dict[int, tuple[str, str]] = {}
    started = time.monotonic()
    done = 0
    while done < runs and (done == 0 or time.monotonic() - started < budget_s):
        for p in ex.compute_profiled():
            samples.setdefault(p.index, []).append(p.time_us)
            seen[p.index] = (p.type.name, p.device)
        done += 1
        if tick is not None:
            tick()
    return with_shares([OpTiming(i, *seen[i], float(np.mean(samples[i])), len(samples[i])) for i in sorted(samples)])


def profile_case(rec: BenchmarkRecord, compilation: Compilation, inputs: Sequence[np.ndarray],
                 tick: Callable[[], None]) -> None:
    """A benchmark case's `op_profile` (after its timed runs, on the timing input), None when no device of
    the case reports operation times. A profiled run that fails leaves the case as it was, with the error
    in `op_profile_error`: the profile is an addition to the case, not part of what it measures."""
    try:
        timings = profiled_runs(compilation, inputs, tick=tick)
    except MltsError as e:
        rec.extra["op_profile_error"] = f"{e.code.name}: {e.message}"
        return
    rec.op_profile = [t.to_record() for t in timings] if timings else None


def time_per_type(entries: Iterable[tuple[str, float | None, float | None]]) -> list[tuple[str, int, float, float]]:
    """(type, count, total us, share) per operation type from (type, mean us, share) entries, the largest
    total first; entries without a time are left out."""
    totals: dict[str, list[float]] = {}
    for kind, us, share in entries:
        if us is None:
            continue
        acc = totals.setdefault(kind, [0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += us
        acc[2] += share or 0.0
    return sorted(((k, int(n), us, s) for k, (n, us, s) in totals.items()), key=lambda r: -r[2])


def random_inputs(model: Model, seed: int = 0) -> list[np.ndarray]:
    """One array per model input, of its type: floats in [-1, 1), integers over the type's range."""
    rng = np.random.default_rng(seed)
    arrays = []
    for i in model.inputs:
        t = model.operand_type(i)
        shape = tuple(d or 1 for d in (t.dimensions or ())) if t.is_tensor else ()
        if np.issubdtype(t.dtype, np.floating):
            arrays.append(rng.uniform(-1, 1, shape).astype(t.dtype))
        elif t.code in (OperandCode.BOOL, OperandCode.TENSOR_BOOL8):
            arrays.append(rng.integers(0, 2, shape).astype(t.dtype))
        else:
            info = np.iinfo(t.dtype)
            arrays.append(rng.integers(max(info.min, -128), min(info.max, 255), shape, endpoint=True).astype(t.dtype))
    return arrays
