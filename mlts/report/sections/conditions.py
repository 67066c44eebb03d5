"""The conditions and paired A/B sections: what each case was measured under (thread pools, load,
CPU frequency, other processes' CPU share) and the paired A/B decisions. The record readers are in
mlts.report.conditions_view; this gathers them for the page.
"""
from __future__ import annotations

from typing import Any

from mlts.benchmark.conditions import BUSY_SHARE

from ..conditions_view import conditions_summary, paired_rows
from ..report_data import ReportData


def variables(data: ReportData) -> dict[str, Any]:
    """Template variables of the conditions and paired A/B sections, for the rows in the report's order."""
    rows = data.family_rows
    return {"conditions_rows": [r for r in rows if getattr(r, "conditions", None) is not None],
            "conditions_summary": conditions_summary(rows),
            "any_conditions": any(r.conditions is not None and not r.conditions.absent for r in rows),
            "paired": paired_rows(rows),
            "busy_share_pct": f"{BUSY_SHARE:.0%}"}
