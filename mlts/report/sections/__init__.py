"""The report's sections, one module each, registered in SECTIONS in the order the page shows them.

Each section module has `variables(data: ReportData) -> dict`: the template variables its part of
report.html.j2 reads, computed from the records parsed once (mlts.report.report_data). To add a
section: write its module here, add one Section line to SECTIONS, and its markup to the template.
A variable belongs to exactly one section (build_context refuses two sections naming the same one);
a section's markup may still read another's (every table of cases reads results' show_mode).
Section modules never import this package or each other, only the shared readers above them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..report_data import ReportData
from . import (baseline, conditions, conformance, environment, errors, header, nnapi_cts, op_profile, partition,
               results, stress, summary, timing)


@dataclass(frozen=True)
class Section:
    """A report section: `name` is its id in the page (`<section id=...>`, or "header")."""

    name: str
    variables: Callable[[ReportData], dict[str, Any]]


#: In page order. The conditions module serves both the conditions and the paired A/B sections, and
#: results serves the latency charts too (the charts are drawn with the rows it groups).
SECTIONS: tuple[Section, ...] = (
    Section("header", header.variables),
    Section("environment", environment.variables),
    Section("summary", summary.variables),
    Section("results", results.variables),
    Section("conditions", conditions.variables),
    Section("partition", partition.variables),
    Section("timing", timing.variables),
    Section("op-profile", op_profile.variables),
    Section("errors", errors.variables),
    Section("stress", stress.variables),
    Section("conformance", conformance.variables),
    Section("nnapi-cts", nnapi_cts.variables),
    Section("baseline", baseline.variables),
)
