"""The page header: title, when and by what the report was made, and how much it covers."""
from __future__ import annotations

from typing import Any

import mlts

from ..report_data import ReportData

DEFAULT_TITLE = "mlts benchmark report"


def variables(data: ReportData) -> dict[str, Any]:
    """Template variables of the header (the section list in the page's nav reads other sections' too)."""
    timestamps = sorted(str(r["timestamp"]) for r in data.benchmark_records + data.stress_records
                        if r.get("timestamp"))
    return {
        "title": data.title or DEFAULT_TITLE,
        "generated_at": data.generated_at,
        "mlts_version": getattr(mlts, "__version__", "?"),
        "reference": data.reference,
        "machines": list(data.machines.values()),
        "multi_machine": data.multi_machine,
        "time_span": (timestamps[0], timestamps[-1]) if timestamps else None,
        "record_count": len(data.results.records),
        "benchmark_count": len(data.benchmark_records),
    }
