"""What the HTML report shows, computed from results records: kept apart from the template so the
numbers (differences from the reference, their colours, verdicts) are testable without parsing HTML.

The records are parsed once (report_data); each registered section (sections.SECTIONS) then adds
its template variables. Records may come from several runs and machines: each driver's differences
are taken against the CPU reference measured on the same machine, so merged runs compare like with like.
"""
from __future__ import annotations

from typing import Any

from mlts.benchmark.records import Results
from mlts.runtime.drivers.reference import REFERENCE_DEVICE_NAME

from .baseline_view import BaselineView
from .report_data import read_report_data
from .sections import SECTIONS


def build_context(results: Results, *, baseline: BaselineView | None = None, title: str | None = None,
                  reference: str = REFERENCE_DEVICE_NAME, generated_at: str = "") -> dict[str, Any]:
    """The template's variables for `results` (and an already computed baseline comparison)."""
    data = read_report_data(results, reference=reference, baseline=baseline, title=title,
                            generated_at=generated_at)
    context: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for section in SECTIONS:
        for name, value in section.variables(data).items():
            if name in owner:
                raise RuntimeError(f"report sections {owner[name]!r} and {section.name!r} both set {name!r}")
            owner[name] = section.name
            context[name] = value
    return context
