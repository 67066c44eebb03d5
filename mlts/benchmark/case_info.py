"""What a benchmark case's compilation and executions say about where time and operations went: the
driver-reported timing and the partition plan of a record. Kept apart from the runner's loop (which
re-exports `driver_times` and `partition_info`) so that the loop stays readable."""
from __future__ import annotations

from typing import Sequence

from mlts.runtime import Compilation, DurationCode, Execution, MltsError
from mlts.runtime.enums import NO_TIMING

from .stats import latency_stats


def _brief(values_ms: list[float]) -> dict | None:
    if not values_ms:
        return None
    s = latency_stats([v / 1000.0 for v in values_ms], samples=False)
    return {"count": s.count, "min_ms": s.min_ms, "mean_ms": s.mean_ms, "p50_ms": s.p50_ms, "p90_ms": s.p90_ms,
            "max_ms": s.max_ms}


def driver_times(executions: Sequence[Execution]) -> dict | None:
    """Time on the device and in the driver where the driver reports them (single-device compilations),
    and where each run's wall time went (runtime / IPC to a driver service / driver), as means."""
    on_device: list[float] = []
    in_driver: list[float] = []
    parts: dict[str, list[int]] = {"total": [], "runtime": [], "ipc": [], "driver": []}
    for ex in executions:
        try:
            dev = ex.get_duration(DurationCode.ON_HARDWARE)
            drv = ex.get_duration(DurationCode.IN_DRIVER)
        except MltsError:
            dev = drv = NO_TIMING
        if dev != NO_TIMING:
            on_device.append(dev / 1e6)
        if drv != NO_TIMING:
            in_driver.append(drv / 1e6)
        breakdown = getattr(ex, "get_timing_breakdown", None)
        if breakdown is not None:
            try:
                b = breakdown()
                for k in parts:
                    parts[k].append(int(b[k]))
            except (MltsError, KeyError, TypeError, ValueError):
                pass
    result = {
        "runs": len(executions),
        "on_device": _brief(on_device),
        "in_driver": _brief(in_driver),
        "breakdown_mean_us": ({k: sum(v) / len(v) for k, v in parts.items()} if parts["total"] else None),
    }
    if result["on_device"] is None and result["in_driver"] is None and result["breakdown_mean_us"] is None:
        return None
    return result


def partition_info(compilation: Compilation) -> dict:
    """Which operations went to which device: per step and per device, and (when the model is split)
    per operation, with the plan's summary lines in NNAPI's words."""
    hal = compilation.model.hal_model()
    ops = hal.main.operations
    steps, per_device, per_op = [], {}, []
    for s in compilation.plan.steps:
        types: dict[str, int] = {}
        for pos in s.operations:
            name = ops[pos].type.name
            types[name] = types.get(name, 0) + 1
            per_op.append((pos, name, s.device.name))
        steps.append({"step": s.index, "device": s.device.name, "operations": len(s.operations),
                      "operation_types": dict(sorted(types.items()))})
        per_device[s.device.name] = per_device.get(s.device.name, 0) + len(s.operations)
    info: dict = {"steps": steps, "operations_per_device": per_device, "total_operations": len(ops)}
    if len(per_device) > 1:
        info["operations"] = [f"{pos}:{name}@{dev}" for pos, name, dev in sorted(per_op)]
        info["log"] = [line for line in compilation.plan_log if not line.startswith("findBestDevice")]
    return info
