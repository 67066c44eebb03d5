"""The per-layer timing section: for each case, a layers x phases table like NNAPI's systrace summary,
filled from the record's `timing_breakdown` and, where the runner reported nothing, from fields that
mean the same thing (marked "derived").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..formatting import as_dict, number
from ..report_data import ReportData
from ..rows import Row
from ..svg import fmt_ms

LAYERS = (("application", "Application"), ("runtime", "Runtime"), ("ipc", "IPC"), ("driver", "Driver"),
          ("device", "Device"))
PHASES = (("preparation", "Prep."), ("compilation", "Compile"), ("io", "I/O"), ("compute", "Compute"),
          ("results", "Results"), ("execution", "Exec. total"))
PHASE_TITLES = {"preparation": "preparation (once per case)", "compilation": "compilation (once per case)",
                "io": "inputs and outputs, per inference", "compute": "computation, per inference",
                "results": "results, per inference", "execution": "execution total (I/O + compute + results), "
                                                                  "per inference"}
_LAYER_NAMES = {k for k, _ in LAYERS}
_PHASE_NAMES = {k for k, _ in PHASES}


@dataclass
class TimingCell:
    text: str
    cls: str  # "reported" | "derived" | "nr"
    title: str = ""


def timing_table(record: dict) -> tuple[list[tuple[str, list[TimingCell]]], bool]:
    """Layers x phases of one case, like NNAPI's systrace summary; (rows, anything reported by the runner).

    `timing_breakdown` (all in milliseconds, every key optional):
      {"<layer>": {"<phase>": ms, ...}, ...} with layers application, runtime, ipc, driver, device and
      phases preparation, compilation, io, compute, results, execution (per-inference total);
      "<layer>_ms": ms, the layer's per-inference execution total (a shorthand);
      "<phase>_ms" or "<phase>": ms at the top level, phases measured by the application.
    Cells the runner did not report are filled, marked "derived", from the record's own fields where
    one means the same thing (compilation without cache, mean latency, and `driver_time` as
    runner.driver_times writes it: `in_driver` / `on_device` statistics in ms, `breakdown_mean_us`
    {runtime, ipc, driver} in microseconds; the older `in_driver_ms` / `on_device_ms` names too).
    """
    tb = as_dict(record.get("timing_breakdown"))
    grid: dict[tuple[str, str], TimingCell] = {}
    for layer in _LAYER_NAMES:
        for phase, v in as_dict(tb.get(layer)).items():
            n = number(v)
            if phase in _PHASE_NAMES and n is not None:
                grid[(layer, phase)] = TimingCell(fmt_ms(n), "reported")
        n = number(tb.get(f"{layer}_ms"))
        if n is not None and (layer, "execution") not in grid:
            grid[(layer, "execution")] = TimingCell(fmt_ms(n), "reported")
    for phase in _PHASE_NAMES:
        n = number(tb.get(f"{phase}_ms", tb.get(phase)))
        if n is not None and ("application", phase) not in grid:
            grid[("application", phase)] = TimingCell(fmt_ms(n), "reported")
    reported = bool(grid)
    dt = as_dict(record.get("driver_time"))
    derived = {
        ("application", "compilation"): [(as_dict(record.get("compilation_ms")), "without_cache",
                                          "compilation_ms.without_cache", 1.0)],
        ("application", "execution"): [(as_dict(record.get("latency")), "mean_ms", "latency.mean_ms", 1.0)],
        ("runtime", "execution"): [(as_dict(dt.get("breakdown_mean_us")), "runtime",
                                    "driver_time.breakdown_mean_us.runtime", 1e-3)],
        ("ipc", "execution"): [(as_dict(dt.get("breakdown_mean_us")), "ipc",
                                "driver_time.breakdown_mean_us.ipc", 1e-3)],
        ("driver", "execution"): [(as_dict(dt.get(name)), "mean_ms", f"driver_time.{name}.mean_ms", 1.0)
                                  for name in ("in_driver", "in_driver_ms")] + [
            (as_dict(dt.get("breakdown_mean_us")), "driver", "driver_time.breakdown_mean_us.driver", 1e-3)],
        ("device", "compute"): [(as_dict(dt.get(name)), "mean_ms", f"driver_time.{name}.mean_ms", 1.0)
                                for name in ("on_device", "on_device_ms")],
    }
    for cell, sources in derived.items():
        for d, key, source, scale in sources:
            v = number(d.get(key))
            if cell not in grid and v is not None:
                grid[cell] = TimingCell(fmt_ms(v * scale), "derived", f"from the record's {source}")
    rows = []
    for layer, label in LAYERS:
        rows.append((label, [grid.get((layer, phase), TimingCell("–", "nr", "not reported")) for phase, _ in PHASES]))
    return rows, reported


@dataclass
class TimingCase:
    title: str
    rows: list
    reported: bool
    any_value: bool


def timing_cases(rows: list[Row]) -> tuple[list[TimingCase], list[tuple[str, str]]]:
    """Every case's table, and the phases (columns) shown: a layer or phase with a value in no case
    is left out of every table (an empty row says nothing, and the tables stay alike)."""
    cases = []
    for r in rows:
        if not r.ok:
            continue
        table, reported = timing_table(r.record)
        any_value = any(c.cls != "nr" for _, cells in table for c in cells)
        mode = "" if r.mode == "sync" else f" ({r.mode})"
        cases.append(TimingCase(title=f"{r.model} · {r.lane}{mode}", rows=table, reported=reported,
                                any_value=any_value))
    keep_rows = {label for t in cases for label, cells in t.rows if any(c.cls != "nr" for c in cells)}
    keep_cols = [k for k in range(len(PHASES)) if any(cells[k].cls != "nr" for t in cases for _, cells in t.rows)]
    for t in cases:
        t.rows = [(label, [cells[k] for k in keep_cols]) for label, cells in t.rows if label in keep_rows]
    return cases, [PHASES[k] for k in keep_cols]


def variables(data: ReportData) -> dict[str, Any]:
    """Template variables of the per-layer timing section (cases in record order)."""
    cases, phases = timing_cases(data.rows)
    return {
        "timing_cases": cases,
        "timing_phases": phases,
        "layers": LAYERS,
        "phases": PHASES,
        "phase_titles": PHASE_TITLES,
    }
