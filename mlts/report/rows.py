"""Benchmark records as report rows: one per model x driver x mode x preference on a machine, each with
its difference from the CPU reference measured on the same machine (or, failing that, elsewhere).

Every section that shows benchmark cases (results, latency, partition, timing, errors, conditions)
reads these rows, so a record is parsed once and a retried case shows only its latest record.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mlts.benchmark.thresholds import Thresholds, spread_ms
from mlts.benchmark.record_schema import MODES
from mlts.benchmark.records import Results

from .conditions_view import case_conditions, repetitions_of
from .fallbacks import fallbacks_of
from .formatting import accuracy_class, as_dict, latency_class, number
from .machines import Machine, machine_key
from .svg import histogram_svg

#: (machine key, model, driver, mode, preference): one case.
RowKey = tuple

#: A case's first compilation in its run (`compilation_ms.first_use`) is shown beside its compile time when
#: the two differ by at least this many ms and this share of the compile time: one-time costs (a driver
#: JIT-compiling its kernels), not the usual difference between two compilations.
FIRST_USE_MIN_MS = 10.0
FIRST_USE_MIN_SHARE = 0.5


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
    top1: float | None  # quality_of: top-1 accuracy, or mAP@0.5 for a detector
    agreement: float | None  # agreement_of
    max_abs_error: float | None
    cts_pass: bool | None
    cts_violations: int | None
    cts_reason: str = ""  # why a quantized model failed: the first operation out of tolerance, or top-1
    first_bad_operation: str = ""  # "op N TYPE" of that operation
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
    first_use_ms: float | None = None  # the run's first compilation of the model for these devices, where noticeable
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
        if self.first_bad_operation:
            return f"FAIL (op {self.first_bad_operation})"
        return f"FAIL ({self.cts_violations})" if self.cts_violations is not None else "FAIL"

    @property
    def cts_cls(self) -> str:
        return "" if self.cts_pass is None else ("better" if self.cts_pass else "worse")


def noticeable_first_use(first_use_ms: float | None, compile_ms: float | None) -> float | None:
    """`first_use_ms` where it differs noticeably from the (later) compile time, else None."""
    if first_use_ms is None or compile_ms is None:
        return None
    diff = abs(first_use_ms - compile_ms)
    return first_use_ms if diff >= FIRST_USE_MIN_MS and diff >= FIRST_USE_MIN_SHARE * compile_ms else None


def mode_order(mode: str) -> int:
    """The position of an execution mode in the runner's order (unknown modes last)."""
    return MODES.index(mode) if mode in MODES else len(MODES)


def quality_of(accuracy: dict) -> float | None:
    """The model's score against its data set's truth: top-1 accuracy (classifiers) or mAP@0.5 (detectors)."""
    top1 = number(accuracy.get("top1_accuracy"))
    return top1 if top1 is not None else number(accuracy.get("map50"))


def agreement_of(accuracy: dict) -> float | None:
    """How often the driver agrees with the reference: top-1 class, or detections matched (detectors)."""
    top1 = number(accuracy.get("top1_agreement"))
    return top1 if top1 is not None else number(accuracy.get("detection_agreement"))


def read_row(record: dict, machine: Machine, lane: str, reference: str) -> Row:
    """A benchmark record as a row, without its difference from the reference (see benchmark_rows)."""
    lat = as_dict(record.get("latency"))
    acc = as_dict(record.get("accuracy"))
    comp = as_dict(record.get("compilation_ms"))
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
              top1=quality_of(acc), agreement=agreement_of(acc),
              max_abs_error=number(acc.get("max_abs_error")), cts_pass=cts if isinstance(cts, bool) else None,
              cts_violations=int(viol) if viol is not None and 0 <= viol < 1e15 else None)
    bad = as_dict(as_dict(acc.get("per_operation")).get("first_out_of_tolerance"))
    if bad.get("operation"):
        row.first_bad_operation = f"{bad.get('index')} {bad.get('operation')}"
    row.cts_reason = str(acc.get("verdict_reason") or "")
    cache = as_dict(record.get("compilation_cache"))
    # Written by BenchmarkRecord.to_dict at the top level; a record dict may also still nest it in "extra".
    row.fallbacks = fallbacks_of(record.get("fallbacks")) or fallbacks_of(as_dict(record.get("extra")).get("fallbacks"))
    row.conditions = case_conditions(record.get("conditions"))
    row.repetitions = repetitions_of(lat.get("repetition_counts"))
    row.first_use_ms = noticeable_first_use(number(comp.get("first_use")), row.compile_ms)
    row.cache_ms = number(comp.get("with_cache"))
    if row.cache_ms is not None:
        save, size = number(comp.get("save_to_cache")), number(cache.get("size_bytes"))
        row.cache_note = "; ".join(part for part in (
            f"saving to an empty cache: {save:.1f} ms" if save is not None else "",
            f"cache size {size / 1024:.1f} KiB" if size is not None else "",
            f"status: {cache.get('status')}" if cache.get("status") else "") if part)
    if row.ok:
        row.histogram = histogram_svg(lat.get("histogram"), p50=row.p50, title=f"{row.model} on {lane}")
    return row


def apply_reference(row: Row, ref: Row | None, note: str) -> None:
    """Fill `row`'s differences from the reference row `ref` (note: how the reference was chosen)."""
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


def _find_reference(rows: dict[RowKey, Row], machines: dict[tuple, Machine], key: RowKey,
                    reference: str) -> tuple[Row | None, str]:
    """The reference row for case `key`: same machine and mode, else same machine, else elsewhere."""
    mkey, model, _, mode, pref = key
    exact = rows.get((mkey, model, reference, mode, pref))
    if exact:
        return exact, ""
    same_machine = sorted((k for k in rows if k[0] == mkey and k[1] == model and k[2] == reference),
                          key=lambda k: (k[4] != pref, mode_order(k[3])))
    if same_machine:
        k = same_machine[0]
        return rows[k], f"vs reference {k[3]}" + (f" {k[4]}" if k[4] != pref else "")
    elsewhere = [k for k in rows if k[1] == model and k[2] == reference and k[3] == mode and k[4] == pref]
    if elsewhere:
        k = elsewhere[0]
        return rows[k], f"vs reference on {machines[k[0]].label}"
    return None, "no reference"


def benchmark_rows(results: Results, machines: dict[tuple, Machine], multi: bool, reference: str) -> list[Row]:
    """A row per case (its latest record), in record order, each compared with its reference."""
    latest: dict[RowKey, dict] = {}
    for r in results.benchmark_records():
        key = (machine_key(results, r), str(r.get("model")), str(r.get("driver")), str(r.get("mode", "sync")),
               str(r.get("preference", "FAST_SINGLE_ANSWER")))
        latest.pop(key, None)  # a retried case's later record supersedes, and takes its place in the order
        latest[key] = r
    rows: dict[RowKey, Row] = {}
    for key, r in latest.items():
        m = machines[key[0]]
        lane = f"{key[2]} @ {m.label}" if multi else key[2]
        rows[key] = read_row(r, m, lane, reference)
    for key, row in rows.items():
        if not row.is_reference:
            ref, note = _find_reference(rows, machines, key, reference)
            apply_reference(row, ref, note)
    return list(rows.values())
