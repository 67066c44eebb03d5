"""The baseline comparison section (PASS/WARN/FAIL against an earlier run), when one was asked for.

The comparison itself needs the baseline's records, so render.py computes it (see
mlts.report.baseline_view) and hands it in through ReportData.
"""
from __future__ import annotations

from typing import Any

from ..report_data import ReportData


def variables(data: ReportData) -> dict[str, Any]:
    """Template variables of the baseline section (None when no baseline was given)."""
    return {"baseline": data.baseline}
