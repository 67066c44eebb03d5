"""The records parsed once into what the report's sections read: machines, benchmark rows (grouped by
model family) and stress rows, with the caller's options. Each section (mlts.report.sections) turns
this into its template variables, so no section re-reads the records or depends on another section.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlts.benchmark.records import Results

from .baseline_view import BaselineView
from .families import Family, group_families
from .machines import Machine, collect_machines
from .rows import Row, benchmark_rows
from .stress_rows import STRESS, StressRow, stress_rows


@dataclass
class ReportData:
    results: Results
    reference: str  # the CPU reference driver's name: differences are taken against it
    title: str | None
    generated_at: str
    baseline: BaselineView | None  # computed by render.py from the baseline's records
    benchmark_records: list[dict]
    stress_records: list[dict]  # stress and conformance records
    machines: dict[tuple, Machine]
    rows: list[Row]  # every benchmark case, in record order
    families: list[Family]  # the same rows by family and model, in the report's order
    stress_rows: list[StressRow]  # stress and conformance tests

    @property
    def multi_machine(self) -> bool:
        return len(self.machines) > 1

    @property
    def family_rows(self) -> list[Row]:
        """The benchmark rows in the report's order (by family, model, then reference first)."""
        return [r for f in self.families for g in f.models for r in g.rows]


def read_report_data(results: Results, *, reference: str, baseline: BaselineView | None = None,
                     title: str | None = None, generated_at: str = "") -> ReportData:
    """Parse `results` into rows and machines once for every section."""
    bench = results.benchmark_records()
    stress_records = [r for r in results.records if r.get("kind") == STRESS]
    machines = collect_machines(results, bench + stress_records)
    multi = len(machines) > 1
    rows = benchmark_rows(results, machines, multi, reference)
    return ReportData(results=results, reference=reference, title=title, generated_at=generated_at,
                      baseline=baseline, benchmark_records=bench, stress_records=stress_records,
                      machines=machines, rows=rows, families=group_families(rows, list(machines)),
                      stress_rows=stress_rows(results, machines, multi))
