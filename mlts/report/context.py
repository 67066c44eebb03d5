"""What the HTML report shows, computed from results records: kept apart from the template so the
numbers (differences from the reference, their colours, verdicts) are testable without parsing HTML.

Records may come from several runs and machines. A machine is identified by its environment.json
(hostname and CPU), or by its run directory when a run left none; each driver's differences are taken
against the CPU reference measured on the same machine, so merged runs compare like with like.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from mlts.benchmark.compare import Comparison, Thresholds, spread_ms
from mlts.benchmark.records import BENCHMARK, MODES, Results
from mlts.runtime.drivers.reference import REFERENCE_DEVICE_NAME

from . import conditions_view, svg

STRESS = "stress"
#: SKIPPED: the test could not exercise the driver (never a success: see DriverSummary).
STRESS_OUTCOMES = ("SUCCESS", "SKIPPED", "FAILURE", "HANG", "CRASH")
SKIPPED = "SKIPPED"
NOT_TESTED = "NOT TESTED"
CONFORMANCE = "conformance"
CHECK_VERDICTS = ("pass", "fail", "n/a")
#: A latency difference within this many percent of the reference's (or within the runs' own
#: noise, compare.py's rule) is shown as "same" (grey), not better or worse.
SAME_LATENCY_PCT = 5.0
#: An accuracy difference within this many percentage points is "same" (compare.py's WARN threshold).
SAME_ACCURACY_POINTS = 0.5

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


def number(v: Any) -> float | None:
    """A finite JSON number, else None: records from other versions or hands may hold anything."""
    return svg.finite_number(v)


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _no_negative_zero(v: float, digits: int) -> float:
    """-0.04 shown with one decimal is "0.0", not "-0.0" (a sign that says nothing)."""
    return 0.0 if round(v, digits) == 0 else v


def _one_decimal(v: Any, signed: bool) -> str:
    """v with one decimal ("+" when signed); "–" for no finite number, 3 significant digits when absurdly large."""
    n = number(v)
    if n is None:
        return "–"
    if abs(n) >= 1e6:
        return f"{n:+.3g}" if signed else f"{n:.3g}"
    n = _no_negative_zero(n, 1)
    return "0.0" if n == 0 else (f"{n:+.1f}" if signed else f"{n:.1f}")


def fmt_pct(v: float | None, signed: bool = True) -> str:
    text = _one_decimal(v, signed)
    return text if text == "–" else text + "%"


def fmt_fraction(v: float | None) -> str:
    """A 0..1 fraction as a percentage."""
    n = number(v)
    return _one_decimal(None if n is None else 100 * n, False)


def fmt_points(v: float | None) -> str:
    return _one_decimal(v, True)


def fmt_signed_ms(v: float | None) -> str:
    if v is None:
        return "–"
    return ("+" if v > 0 else "−" if v < 0 else "±") + svg.fmt_ms(abs(v))


def latency_class(delta_ms: float | None, delta_pct: float | None, noise_ms: float = 0.0) -> str:
    """better / worse / same for a latency difference (lower is better); "" when there is none."""
    if delta_ms is None or delta_pct is None:
        return ""
    if abs(delta_pct) <= SAME_LATENCY_PCT or abs(delta_ms) <= noise_ms:
        return "same"
    return "better" if delta_ms < 0 else "worse"


def accuracy_class(delta_points: float | None) -> str:
    """better / worse / same for an accuracy difference in percentage points (higher is better)."""
    if delta_points is None:
        return ""
    if abs(delta_points) <= SAME_ACCURACY_POINTS + 1e-9:
        return "same"
    return "better" if delta_points > 0 else "worse"


# --- machines and families -------------------------------------------------------------------

@dataclass
class Machine:
    key: tuple
    label: str
    environment: dict | None
    run_dirs: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)


def _machine_key(results: Results, record: dict) -> tuple:
    src = results.source_of(record)
    env = src.environment if src else None
    if env:
        return ("env", str(env.get("hostname") or "?"), str(_dict(env.get("cpu")).get("model") or "?"))
    if src:
        return ("run", str(src.run_dir))
    return ("none",)


def _machines(results: Results, records: list[dict]) -> dict[tuple, Machine]:
    machines: dict[tuple, Machine] = {}
    for r in records:
        key = _machine_key(results, r)
        m = machines.get(key)
        if m is None:
            src = results.source_of(r)
            env = src.environment if src else None
            if key[0] == "env":
                label = key[1]
            elif key[0] == "run":
                label = src.run_dir.name or str(src.run_dir)
            else:
                label = "unknown machine"
            m = machines[key] = Machine(key=key, label=label, environment=env)
        src = results.source_of(r)
        if src and str(src.run_dir) not in m.run_dirs:
            m.run_dirs.append(str(src.run_dir))
        rid = r.get("run_id")
        if isinstance(rid, str) and rid and rid not in m.run_ids:
            m.run_ids.append(rid)
    # Two machines with one hostname (different CPUs): tell them apart in their labels.
    seen: dict[str, int] = {}
    for m in machines.values():
        seen[m.label] = seen.get(m.label, 0) + 1
    counter: dict[str, int] = {}
    for m in machines.values():
        if seen[m.label] > 1:
            counter[m.label] = counter.get(m.label, 0) + 1
            m.label = f"{m.label} #{counter[m.label]}"
    return machines


_MOBILENET = re.compile(r"mobilenet[_-]?(v\d)", re.IGNORECASE)


def family_of(record: dict) -> tuple[str, bool]:
    """(family, quantized) of a record's model: model_info when the runner filled it, else the zoo's naming."""
    info = _dict(record.get("model_info"))
    name = str(record.get("model", ""))
    fam = str(info.get("family") or "")
    m = _MOBILENET.search(fam) or _MOBILENET.search(name)
    family = f"MobileNet {m.group(1).lower()}" if m else (fam or "Other models")
    if "quantization" in info:
        q = info.get("quantization")
        quantized = bool(q) and str(q).lower() not in ("none", "float32", "float", "float16")
    else:
        quantized = "_quant" in name
    return family, quantized


# --- benchmark rows --------------------------------------------------------------------------

@dataclass
class Row:
    """One model x driver x mode (x preference) case on one machine, with its difference from the reference."""

    record: dict
    machine: Machine
    lane: str
    is_reference: bool
    model: str
    driver: str
    mode: str
    preference: str
    status: str
    message: str
    unsupported_ops: list[str]
    latency: dict
    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None
    count: int | None
    compile_ms: float | None
    top1: float | None
    agreement: float | None
    max_abs_error: float | None
    cts_pass: bool | None
    cts_violations: int | None
    ref_note: str = ""
    has_reference: bool = False
    delta_ms: float | None = None
    delta_pct: float | None = None
    latency_cls: str = ""
    top1_delta: float | None = None
    top1_cls: str = ""
    agreement_cls: str = ""
    histogram: Any = None
    cache_ms: float | None = None  # compilation prepared from the driver's cache (MLTS's "with cache")
    cache_note: str = ""  # saving time, cache size and status, for the cell's title
    fallbacks: Any = None  # Fallbacks: driver failures the CPU fallback hid (the record's extra.fallbacks)
    conditions: Any = None  # conditions_view.CaseConditions: what the case was measured under
    repetitions: Any = None  # conditions_view.Repetitions of latency.repetition_counts, or None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def speedup(self) -> float | None:
        """Reference median / this median: how many times faster than the CPU reference."""
        if self.delta_ms is None or self.p50 is None or self.p50 <= 0:
            return None
        ref = self.p50 - self.delta_ms
        ratio = ref / self.p50 if ref > 0 else None
        return ratio if ratio is not None and 0 < ratio < math.inf else None  # a log is taken of it

    @property
    def cts_text(self) -> str:
        if self.cts_pass is None:
            return "–"
        if self.cts_pass:
            return "pass"
        return f"FAIL ({self.cts_violations})" if self.cts_violations is not None else "FAIL"

    @property
    def cts_cls(self) -> str:
        return "" if self.cts_pass is None else ("better" if self.cts_pass else "worse")


def _row(record: dict, machine: Machine, lane: str, reference: str) -> Row:
    lat = _dict(record.get("latency"))
    acc = _dict(record.get("accuracy"))
    comp = _dict(record.get("compilation_ms"))
    count = number(lat.get("count"))
    viol = number(acc.get("cts_violations"))
    cts = acc.get("cts_pass")
    row = Row(record=record, machine=machine, lane=lane, is_reference=record.get("driver") == reference,
              model=str(record.get("model")), driver=str(record.get("driver")),
              mode=str(record.get("mode", "sync")), preference=str(record.get("preference", "FAST_SINGLE_ANSWER")),
              status=str(record.get("status", "ok")), message=str(record.get("message") or ""),
              unsupported_ops=[str(o) for o in record.get("unsupported_ops") or []],
              latency=lat, p50=number(lat.get("p50_ms")), p90=number(lat.get("p90_ms")),
              p99=number(lat.get("p99_ms")), mean=number(lat.get("mean_ms")),
              count=int(count) if count is not None and 0 <= count < 1e15 else None,
              compile_ms=number(comp.get("without_cache")),
              top1=number(acc.get("top1_accuracy")), agreement=number(acc.get("top1_agreement")),
              max_abs_error=number(acc.get("max_abs_error")), cts_pass=cts if isinstance(cts, bool) else None,
              cts_violations=int(viol) if viol is not None and 0 <= viol < 1e15 else None)
    cache = _dict(record.get("compilation_cache"))
    # Written by BenchmarkRecord.to_dict at the top level; a record dict may also still nest it in "extra".
    row.fallbacks = fallbacks_of(record.get("fallbacks")) or fallbacks_of(_dict(record.get("extra")).get("fallbacks"))
    row.conditions = conditions_view.case_conditions(record.get("conditions"))
    row.repetitions = conditions_view.repetitions_of(lat.get("repetition_counts"))
    row.cache_ms = number(comp.get("with_cache"))
    if row.cache_ms is not None:
        save, size = number(comp.get("save_to_cache")), number(cache.get("size_bytes"))
        row.cache_note = "; ".join(part for part in (
            f"saving to an empty cache: {save:.1f} ms" if save is not None else "",
            f"cache size {size / 1024:.1f} KiB" if size is not None else "",
            f"status: {cache.get('status')}" if cache.get("status") else "") if part)
    if row.ok:
        row.histogram = svg.histogram_svg(lat.get("histogram"), p50=row.p50, title=f"{row.model} on {lane}")
    return row


def _apply_reference(row: Row, ref: Row | None, note: str) -> None:
    if row.is_reference or ref is None:
        return
    row.has_reference = True
    row.ref_note = note
    if not (row.ok and ref.ok):
        return
    if row.p50 is not None and ref.p50 is not None:
        row.delta_ms = row.p50 - ref.p50
        if ref.p50 > 0:
            row.delta_pct = 100.0 * row.delta_ms / ref.p50
        noise = Thresholds().noise_k * max(spread_ms(row.latency), spread_ms(ref.latency))
        row.latency_cls = latency_class(row.delta_ms, row.delta_pct, noise)
    if row.top1 is not None and ref.top1 is not None:
        row.top1_delta = 100.0 * (row.top1 - ref.top1)
        row.top1_cls = accuracy_class(row.top1_delta)
    if row.agreement is not None:
        row.agreement_cls = accuracy_class(100.0 * (row.agreement - 1.0))


@dataclass
class ModelGroup:
    model: str
    rows: list[Row]
    percentile_chart: Any = None
    modes: list[str] = field(default_factory=list)


@dataclass
class Family:
    name: str
    quantized: bool
    anchor: str
    models: list[ModelGroup]

    @property
    def title(self) -> str:
        return f"{self.name} · {'quantized' if self.quantized else 'float'}"


def _mode_order(mode: str) -> int:
    return MODES.index(mode) if mode in MODES else len(MODES)


def _build_families(results: Results, machines: dict[tuple, Machine], multi: bool,
                    reference: str) -> tuple[list[Family], list[Row]]:
    latest: dict[tuple, dict] = {}
    for r in results.benchmark_records():
        key = (_machine_key(results, r), str(r.get("model")), str(r.get("driver")), str(r.get("mode", "sync")),
               str(r.get("preference", "FAST_SINGLE_ANSWER")))
        latest.pop(key, None)  # a retried case's later record supersedes, and takes its place in the order
        latest[key] = r
    rows: dict[tuple, Row] = {}
    for key, r in latest.items():
        m = machines[key[0]]
        lane = f"{key[2]} @ {m.label}" if multi else key[2]
        rows[key] = _row(r, m, lane, reference)

    def find_ref(mkey, model, mode, pref) -> tuple[Row | None, str]:
        exact = rows.get((mkey, model, reference, mode, pref))
        if exact:
            return exact, ""
        same_machine = sorted((k for k in rows if k[0] == mkey and k[1] == model and k[2] == reference),
                              key=lambda k: (k[4] != pref, _mode_order(k[3])))
        if same_machine:
            k = same_machine[0]
            return rows[k], f"vs reference {k[3]}" + (f" {k[4]}" if k[4] != pref else "")
        elsewhere = [k for k in rows if k[1] == model and k[2] == reference and k[3] == mode and k[4] == pref]
        if elsewhere:
            k = elsewhere[0]
            return rows[k], f"vs reference on {machines[k[0]].label}"
        return None, "no reference"

    for key, row in rows.items():
        if not row.is_reference:
            ref, note = find_ref(key[0], key[1], key[3], key[4])
            _apply_reference(row, ref, note)

    families: dict[tuple[str, bool], Family] = {}
    groups: dict[str, ModelGroup] = {}
    machine_order = list(machines)
    for key, row in rows.items():
        fam_name, quant = family_of(row.record)
        fam = families.get((fam_name, quant))
        if fam is None:
            anchor = "family-" + re.sub(r"[^a-z0-9]+", "-", f"{fam_name}-{'quant' if quant else 'float'}".lower()).strip("-")
            fam = families[(fam_name, quant)] = Family(name=fam_name, quantized=quant, anchor=anchor, models=[])
        group = groups.get(row.model)
        if group is None:
            group = groups[row.model] = ModelGroup(model=row.model, rows=[])
            fam.models.append(group)
        group.rows.append(row)
    for group in groups.values():
        # Reference first, then each driver: per mode/preference, per machine, drivers in run order.
        order = {id(r): i for i, r in enumerate(group.rows)}
        group.rows.sort(key=lambda r: (_mode_order(r.mode), r.preference, machine_order.index(r.machine.key),
                                       not r.is_reference, order[id(r)]))
        group.modes = sorted({r.mode for r in group.rows}, key=_mode_order)
        chart_rows = [(r.lane + ("" if len(group.modes) == 1 else f" ({r.mode})"), r.latency, r.is_reference)
                      for r in group.rows if r.ok]
        group.percentile_chart = svg.percentile_svg(chart_rows, title=f"{group.model}: latency percentiles")
    fam_list = sorted(families.values(), key=lambda f: (f.name == "Other models", f.name, f.quantized))
    return fam_list, list(rows.values())


# --- per-layer timing ------------------------------------------------------------------------

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
    tb = _dict(record.get("timing_breakdown"))
    grid: dict[tuple[str, str], TimingCell] = {}
    for layer in _LAYER_NAMES:
        for phase, v in _dict(tb.get(layer)).items():
            n = number(v)
            if phase in _PHASE_NAMES and n is not None:
                grid[(layer, phase)] = TimingCell(svg.fmt_ms(n), "reported")
        n = number(tb.get(f"{layer}_ms"))
        if n is not None and (layer, "execution") not in grid:
            grid[(layer, "execution")] = TimingCell(svg.fmt_ms(n), "reported")
    for phase in _PHASE_NAMES:
        n = number(tb.get(f"{phase}_ms", tb.get(phase)))
        if n is not None and ("application", phase) not in grid:
            grid[("application", phase)] = TimingCell(svg.fmt_ms(n), "reported")
    reported = bool(grid)
    dt = _dict(record.get("driver_time"))
    derived = {
        ("application", "compilation"): [(_dict(record.get("compilation_ms")), "without_cache",
                                          "compilation_ms.without_cache", 1.0)],
        ("application", "execution"): [(_dict(record.get("latency")), "mean_ms", "latency.mean_ms", 1.0)],
        ("runtime", "execution"): [(_dict(dt.get("breakdown_mean_us")), "runtime",
                                    "driver_time.breakdown_mean_us.runtime", 1e-3)],
        ("ipc", "execution"): [(_dict(dt.get("breakdown_mean_us")), "ipc", "driver_time.breakdown_mean_us.ipc", 1e-3)],
        ("driver", "execution"): [(_dict(dt.get(name)), "mean_ms", f"driver_time.{name}.mean_ms", 1.0)
                                  for name in ("in_driver", "in_driver_ms")] + [
            (_dict(dt.get("breakdown_mean_us")), "driver", "driver_time.breakdown_mean_us.driver", 1e-3)],
        ("device", "compute"): [(_dict(dt.get(name)), "mean_ms", f"driver_time.{name}.mean_ms", 1.0)
                                for name in ("on_device", "on_device_ms")],
    }
    for cell, sources in derived.items():
        for d, key, source, scale in sources:
            v = number(d.get(key))
            if cell not in grid and v is not None:
                grid[cell] = TimingCell(svg.fmt_ms(v * scale), "derived", f"from the record's {source}")
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


def _timing_cases(rows: list[Row]) -> tuple[list[TimingCase], list[tuple[str, str]]]:
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


# --- partition -------------------------------------------------------------------------------

def device_colours(rows: list[Row], reference: str) -> dict[str, str]:
    """One colour per device across the report, so a device looks the same in every bar."""
    colours: dict[str, str] = {reference: svg.REFERENCE_COLOUR}
    k = 0
    for r in rows:
        part = _dict(r.record.get("partition"))
        names = list(_dict(part.get("ops_per_device"))) + [str(d) for d in r.record.get("devices") or []]
        for name in names:
            if name not in colours:
                colours[name] = svg.PALETTE[k % len(svg.PALETTE)]
                k += 1
    return colours


@dataclass
class PartitionRow:
    row: Row
    chart: Any
    legend: list[tuple[str, str, str]]  # device, colour, operations
    cpu_fallback: bool | None
    devices: list[str]


def _partition_rows(rows: list[Row], colours: dict[str, str]) -> list[PartitionRow]:
    out = []
    for r in rows:
        part = _dict(r.record.get("partition"))
        ops = {str(k): v for k, v in _dict(part.get("ops_per_device")).items() if number(v) is not None}
        chart = svg.partition_svg(ops, colours, title=f"{r.model} on {r.lane}") if ops else None
        legend = [(d, colours.get(d, svg.PALETTE[-1]), svg.fmt_count(n)) for d, n in ops.items()]
        fb = part.get("cpu_fallback")
        out.append(PartitionRow(row=r, chart=chart, legend=legend, cpu_fallback=fb if isinstance(fb, bool) else None,
                                devices=[str(d) for d in r.record.get("devices") or []]))
    return out


# --- stress ----------------------------------------------------------------------------------

@dataclass
class StressRow:
    machine: str
    driver: str
    lane: str
    test: str
    outcome: str
    duration: str
    reason: str
    log_tail: str
    timestamp: str
    group: str = "stress"
    checks: list = field(default_factory=list)  # conformance tests: {"check", "verdict", "detail"} in order
    coverage: str = ""  # "6/9 ops, partitioned": how much of the test ran on the driver under test
    coverage_title: str = ""
    fallbacks: "Fallbacks | None" = None

    @property
    def is_conformance(self) -> bool:
        return self.group == CONFORMANCE


@dataclass
class Fallbacks:
    """Driver failures that the runtime's CPU fallback hid (a record's `fallbacks`: count, reasons)."""

    count: int
    reasons: list[str]

    @property
    def text(self) -> str:
        return f"{self.count} CPU fallback{'' if self.count == 1 else 's'}"

    @property
    def first(self) -> str:
        """The first reason, cut to a table cell's worth (the record keeps it whole)."""
        first = self.reasons[0] if self.reasons else ""
        return first if len(first) <= 300 else first[:300] + " ..."


def fallbacks_of(value: Any) -> Fallbacks | None:
    """None when there were none (or the field is absent or unusable)."""
    d = _dict(value)
    reasons = [str(x) for x in d.get("reasons")] if isinstance(d.get("reasons"), list) else []
    n = number(d.get("count"))
    count = int(n) if n is not None and 0 <= n < 1e15 else len(reasons)
    return Fallbacks(count, reasons) if count or reasons else None


def coverage_of(value: Any) -> tuple[str, str]:
    """("6/9 ops, partitioned", "models: a, b") of a stress record's `coverage`; ("", "") without one."""
    c = _dict(value)
    on, total = number(c.get("ops_on_driver")), number(c.get("ops_total"))
    if on is None and total is None:
        return "", ""
    text = f"{svg.fmt_count(on)}/{svg.fmt_count(total)} ops" if total is not None else f"{svg.fmt_count(on)} ops"
    if c.get("partitioned") is True:
        text += ", partitioned"
    models = [str(m) for m in c.get("models")] if isinstance(c.get("models"), list) else []
    if not models:
        return text, ""
    return text, "models: " + ", ".join(models[:20]) + (f" … ({len(models)})" if len(models) > 20 else "")


def _check(c: dict) -> dict:
    """A conformance check with the three keys the template reads, as text."""
    return {"check": str(c.get("check") or "?"), "verdict": str(c.get("verdict") or "?"),
            "detail": "" if c.get("detail") is None else str(c.get("detail"))}


def _stress(results: Results, machines: dict[tuple, Machine], multi: bool) -> list[StressRow]:
    latest: dict[tuple, dict] = {}
    for r in results.records:
        if r.get("kind") != STRESS:
            continue
        key = (_machine_key(results, r), str(r.get("driver") or "?"), str(r.get("test") or "?"))
        latest.pop(key, None)
        latest[key] = r
    out = []
    for (mkey, driver, test), r in latest.items():
        m = machines[mkey]
        outcome = str(r.get("outcome") or "UNKNOWN").upper()
        d = number(r.get("duration_s"))
        tail = r.get("log_tail")
        if isinstance(tail, list):
            tail = "\n".join(map(str, tail))
        group = str(r.get("group") or (CONFORMANCE if test.startswith(CONFORMANCE + "_") else "stress"))
        checks = _dict(r.get("details")).get("checks")
        checks = [_check(c) for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []
        coverage, coverage_title = coverage_of(r.get("coverage"))
        out.append(StressRow(machine=m.label, driver=driver, lane=f"{driver} @ {m.label}" if multi else driver,
                             test=test, outcome=outcome,
                             duration="–" if d is None else f"{d:.2f}" if abs(d) < 1e6 else f"{d:.3g}",
                             reason=str(r.get("reason") or ""), log_tail=str(tail or ""),
                             timestamp=str(r.get("timestamp") or ""), group=group, checks=checks,
                             coverage=coverage, coverage_title=coverage_title,
                             fallbacks=fallbacks_of(r.get("fallbacks"))))
    severity = {"CRASH": 0, "HANG": 1, "FAILURE": 2, SKIPPED: 3, "SUCCESS": 4}
    out.sort(key=lambda s: (s.lane, severity.get(s.outcome, -1), s.test))
    return out


@dataclass
class ConformanceCell:
    row: StressRow
    counts: dict  # verdict -> number of checks

    @property
    def title(self) -> str:
        return ", ".join(f"{n} {v}" for v, n in self.counts.items() if n) or "no checks recorded"


@dataclass
class ConformanceView:
    features: list  # (test name, column title)
    lanes: list  # (lane, {test name: ConformanceCell})
    failed_checks: list  # (lane, test, check dict)


def _conformance_title(test: str) -> str:
    return test.removeprefix(CONFORMANCE + "_").replace("_", " ")


def _conformance(rows: list[StressRow]) -> ConformanceView | None:
    """The conformance records as a drivers x features matrix, with every failed check listed."""
    if not rows:
        return None
    from mlts.stress.catalog import CONFORMANCE_TESTS

    order = {t.name: k for k, t in enumerate(CONFORMANCE_TESTS)}  # the catalog's order, unknown tests last
    features = sorted(dict.fromkeys(r.test for r in rows), key=lambda t: (order.get(t, len(order)), t))
    lanes: dict[str, dict[str, ConformanceCell]] = {}
    failed = []
    for r in rows:
        counts = {v: sum(1 for c in r.checks if c.get("verdict") == v) for v in CHECK_VERDICTS}
        lanes.setdefault(r.lane, {})[r.test] = ConformanceCell(r, counts)
        failed += [(r.lane, r.test, c) for c in r.checks if c.get("verdict") == "fail"]
    return ConformanceView([(t, _conformance_title(t)) for t in features], list(lanes.items()), failed)


# --- summary per driver ----------------------------------------------------------------------

@dataclass
class DriverSummary:
    lane: str
    driver: str
    machine: str
    is_reference: bool
    ok: int = 0
    unsupported: int = 0
    errors: int = 0
    cts_checked: int = 0
    cts_failed: int = 0
    ratios: list[float] = field(default_factory=list)
    stress: dict[str, int] = field(default_factory=dict)
    conformance: dict[str, int] = field(default_factory=dict)  # outcome -> conformance tests
    fallbacks: int = 0  # driver failures hidden by the CPU fallback, over benchmark cases and tests
    fallback_reasons: list[str] = field(default_factory=list)

    @property
    def cases(self) -> int:
        return self.ok + self.unsupported + self.errors

    @property
    def accuracy_verdict(self) -> str:
        if self.cts_checked == 0:
            return "reference" if self.is_reference else "–"
        return "FAIL" if self.cts_failed else "PASS"

    @property
    def stress_total(self) -> int:
        return sum(self.stress.values())

    @property
    def stress_verdict(self) -> str:
        return _tests_verdict(self.stress)

    @property
    def conformance_total(self) -> int:
        return sum(self.conformance.values())

    @property
    def conformance_verdict(self) -> str:
        return _tests_verdict(self.conformance)

    @property
    def skipped(self) -> int:
        """Stress and conformance tests that could not exercise the driver."""
        return self.stress.get(SKIPPED, 0) + self.conformance.get(SKIPPED, 0)

    @property
    def speedup(self) -> float | None:
        """Geometric mean over the cases of reference median / driver median."""
        if not self.ratios:
            return None
        return math.exp(sum(math.log(x) for x in self.ratios) / len(self.ratios))

    @property
    def speedup_cls(self) -> str:
        s = self.speedup
        if s is None:
            return ""
        if abs(s - 1.0) <= SAME_LATENCY_PCT / 100:
            return "same"
        return "better" if s > 1 else "worse"

    @property
    def verdict(self) -> str:
        """FAIL on any CTS failure, benchmark error, or stress or conformance test that neither
        succeeded nor was skipped; NOT TESTED when nothing ran on the driver but tests were skipped
        (a skipped test is never a pass; the template shows the skipped count beside a PASS)."""
        if self.cts_failed or self.errors or "FAIL" in (self.stress_verdict, self.conformance_verdict):
            return "FAIL"
        if self.ok or self.stress.get("SUCCESS") or self.conformance.get("SUCCESS"):
            return "PASS"
        return NOT_TESTED if self.skipped else "–"


def _tests_verdict(outcomes: dict[str, int]) -> str:
    """FAIL when any test neither succeeded nor was skipped; SKIPPED when every test was skipped."""
    if not sum(outcomes.values()):
        return "–"
    if any(n and o not in ("SUCCESS", SKIPPED) for o, n in outcomes.items()):
        return "FAIL"
    return "PASS" if outcomes.get("SUCCESS") else SKIPPED


def _summaries(rows: list[Row], stress: list[StressRow], reference: str) -> list[DriverSummary]:
    out: dict[str, DriverSummary] = {}

    def get(lane: str, driver: str, machine: str) -> DriverSummary:
        if lane not in out:
            out[lane] = DriverSummary(lane=lane, driver=driver, machine=machine, is_reference=driver == reference)
        return out[lane]

    for r in rows:
        s = get(r.lane, r.driver, r.machine.label)
        if r.ok:
            s.ok += 1
        elif r.status == "unsupported":
            s.unsupported += 1
        else:
            s.errors += 1
        if r.cts_pass is not None and not r.is_reference:
            s.cts_checked += 1
            s.cts_failed += 0 if r.cts_pass else 1
        if r.speedup is not None:
            s.ratios.append(r.speedup)
        if r.fallbacks:
            s.fallbacks += r.fallbacks.count
            s.fallback_reasons += r.fallbacks.reasons[:1]
    for t in stress:
        s = get(t.lane, t.driver, t.machine)
        counter = s.conformance if t.is_conformance else s.stress
        counter[t.outcome] = counter.get(t.outcome, 0) + 1
        if t.fallbacks:
            s.fallbacks += t.fallbacks.count
            s.fallback_reasons += t.fallbacks.reasons[:1]
    return sorted(out.values(), key=lambda s: (not s.is_reference, s.machine, s.driver))


# --- header: environment and configuration ---------------------------------------------------

def _gb(v) -> str:
    n = number(v)
    return "–" if n is None else f"{n / 2 ** 30:.1f} GiB"


def environment_items(env: dict | None) -> list[tuple[str, str]]:
    """The environment as label/value lines, most telling first; absent facts are left out."""
    if not env:
        return [("Environment", "not recorded (no environment.json in the run directory)")]
    items: list[tuple[str, str]] = []
    cpu, mem, os_, py = (_dict(env.get(k)) for k in ("cpu", "memory", "os", "python"))
    if env.get("hostname"):
        items.append(("Host", str(env["hostname"])))
    if cpu:
        cores = ", ".join(f"{cpu[k]} {label}" for k, label in (("logical_cores", "logical"),
                                                               ("physical_cores", "physical"),
                                                               ("usable_cores", "usable"))
                          if cpu.get(k) is not None)
        freq = number(cpu.get("max_frequency_mhz"))
        text = " · ".join(x for x in (str(cpu.get("model") or ""), str(cpu.get("architecture") or ""),
                                       cores and f"cores: {cores}", freq and f"{freq:.0f} MHz") if x)
        items.append(("CPU", text))
    if mem:
        items.append(("Memory", f"{_gb(mem.get('total_bytes'))} total, {_gb(mem.get('available_bytes'))} available"))
    if os_:
        items.append(("OS", str(os_.get("platform") or f"{os_.get('system', '')} {os_.get('release', '')}".strip())))
    if py:
        items.append(("Python", f"{py.get('version', '?')} ({py.get('implementation', '?')})"))
    np_ = _dict(env.get("numpy"))
    if np_:
        blas = _dict(np_.get("blas"))
        text = str(np_.get("version") or "?")
        if blas:
            text += f" · BLAS {blas.get('name', '?')} {blas.get('version', '')}".rstrip()
        pools = np_.get("threadpools")
        if isinstance(pools, list) and pools:
            text += " · threads: " + ", ".join(f"{_dict(p).get('internal_api', '?')}={_dict(p).get('num_threads', '?')}"
                                               for p in pools)
        items.append(("numpy", text))
    pk = _dict(env.get("packages"))
    if pk:
        items.append(("Packages", ", ".join(f"{k} {v}" for k, v in pk.items() if v)))
    ml = _dict(env.get("mlts"))
    if ml:
        commit = ml.get("commit")
        text = str(ml.get("version") or "?")
        if commit:
            text += f" · commit {str(commit)[:12]}" + (" (uncommitted changes)" if ml.get("dirty") else "")
        items.append(("mlts", text))
    ev = _dict(env.get("env"))
    if ev:
        items.append(("Environment variables", " ".join(f"{k}={v}" for k, v in ev.items())))
    if env.get("collected_at"):
        items.append(("Collected", str(env["collected_at"])))
    return items


def _value_text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(",", ": "))


def configuration_items(records: list[dict]) -> list[tuple[str, str]]:
    """Run configuration seen across the benchmark records: each setting with its distinct values."""
    seen: dict[str, list[str]] = {}

    def add(name: str, v: Any) -> None:
        if v is None:
            return
        text = _value_text(v)
        values = seen.setdefault(name, [])
        if text not in values:
            values.append(text)

    for r in records:
        add("Mode", r.get("mode", "sync"))
        add("Preference", r.get("preference", "FAST_SINGLE_ANSWER"))
        for k, v in _dict(r.get("config")).items():
            add(str(k), v)
        rl = _dict(r.get("run_length"))
        add("Run length", rl.get("preset") or rl.get("name"))
        for k, v in _dict(r.get("seeds")).items():
            add(f"Seed ({k})", v)
    items = []
    for name, values in seen.items():
        shown = values[:6]
        text = ", ".join(shown) + (f" … ({len(values)} values)" if len(values) > len(shown) else "")
        items.append((name, text))
    return items


# --- baseline --------------------------------------------------------------------------------

@dataclass
class BaselineView:
    verdict: str
    counts: dict[str, int]
    thresholds: str
    rows: list[dict]
    notes: list[str]
    sources: list[str]


def baseline_view(comparison: Comparison, sources: list[str]) -> BaselineView:
    rows = []
    for r in comparison.rows:
        top1 = r.accuracy.get("top1_accuracy") or r.accuracy.get("top1_agreement") or {}
        delta_points = top1.get("delta_points") if isinstance(top1, dict) else None
        rows.append({
            "verdict": r.verdict, "model": r.model, "driver": r.driver, "mode": r.mode, "preference": r.preference,
            "baseline_ms": svg.fmt_ms(r.baseline_p50_ms), "current_ms": svg.fmt_ms(r.current_p50_ms),
            "delta_ms": fmt_signed_ms(r.delta_ms), "delta_pct": fmt_pct(r.delta_pct),
            "latency_cls": latency_class(r.delta_ms, r.delta_pct, r.noise_ms or 0.0),
            "top1_base": fmt_fraction(number(top1.get("baseline")) if isinstance(top1, dict) else None),
            "top1_cur": fmt_fraction(number(top1.get("current")) if isinstance(top1, dict) else None),
            "top1_delta": fmt_points(delta_points), "top1_cls": accuracy_class(delta_points),
            "status": (f"{r.baseline_status} → {r.current_status}" if r.baseline_status != r.current_status
                       else (r.current_status or "")),
            "reasons": "; ".join(r.reasons),
        })
    return BaselineView(verdict=comparison.verdict, counts=comparison.counts(),
                        thresholds=comparison.thresholds.describe(), rows=rows, notes=list(comparison.notes),
                        sources=sources)


# --- everything ------------------------------------------------------------------------------

def build_context(results: Results, *, baseline: BaselineView | None = None, title: str | None = None,
                  reference: str = REFERENCE_DEVICE_NAME, generated_at: str = "") -> dict:
    """The template's variables for `results` (and an already computed baseline comparison)."""
    import mlts

    bench = results.benchmark_records()
    kinds = {str(r.get("kind")) for r in results.records}
    stress_records = [r for r in results.records if r.get("kind") == STRESS]
    machines = _machines(results, bench + stress_records)
    multi = len(machines) > 1
    families, rows = _build_families(results, machines, multi, reference)
    all_stress = _stress(results, machines, multi)
    stress = [t for t in all_stress if not t.is_conformance]
    colours = device_colours(rows, reference)
    errors = [r for r in rows if r.status == "error"]
    fallback_rows = [r for r in rows if r.fallbacks]
    unsupported = [r for r in rows if r.status == "unsupported"]
    timestamps = sorted(str(r["timestamp"]) for r in bench + stress_records if r.get("timestamp"))
    show_mode = len({r.mode for r in rows}) > 1
    show_pref = len({r.preference for r in rows}) > 1
    other_kinds = sorted(kinds - {BENCHMARK, STRESS})
    timing_cases, timing_phases = _timing_cases(rows)
    return {
        "title": title or "mlts benchmark report",
        "generated_at": generated_at,
        "mlts_version": getattr(mlts, "__version__", "?"),
        "reference": reference,
        "machines": list(machines.values()),
        "multi_machine": multi,
        "environments": [(m, environment_items(m.environment)) for m in machines.values()],
        "configuration": configuration_items(bench),
        "sources": results.sources,
        "problems": list(results.problems),
        "time_span": (timestamps[0], timestamps[-1]) if timestamps else None,
        "record_count": len(results.records),
        "benchmark_count": len(bench),
        "other_kinds": other_kinds,
        "families": families,
        "rows": rows,
        "show_mode": show_mode,
        "show_pref": show_pref,
        "summaries": _summaries(rows, all_stress, reference),
        "timing_cases": timing_cases,
        "timing_phases": timing_phases,
        "partitions": [(f, [(g, _partition_rows(g.rows, colours)) for g in f.models]) for f in families],
        "colours": colours,
        "errors": errors,
        "fallback_rows": fallback_rows,
        "stress_coverage": any(t.coverage for t in stress),
        "stress_fallbacks": any(t.fallbacks for t in stress),
        "unsupported": unsupported,
        "stress": stress,
        "conformance": _conformance([t for t in all_stress if t.is_conformance]),
        "any_conformance": any(t.is_conformance for t in all_stress),
        "stress_outcomes": STRESS_OUTCOMES,
        "baseline": baseline,
        "same_latency_pct": SAME_LATENCY_PCT,
        "same_accuracy_points": SAME_ACCURACY_POINTS,
        "layers": LAYERS,
        "phases": PHASES,
        "phase_titles": PHASE_TITLES,
        **conditions_view.section_context([r for f in families for g in f.models for r in g.rows]),
    }
