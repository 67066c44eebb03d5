"""The main table, results by model family: each case's latency and accuracy beside the CPU reference's,
coloured better/worse/same. The latency charts section reads the same families (their charts are drawn
with the rows, see mlts.report.rows and mlts.report.families).
"""
from __future__ import annotations

from typing import Any

from ..formatting import SAME_ACCURACY_POINTS, SAME_LATENCY_PCT
from ..report_data import ReportData


def variables(data: ReportData) -> dict[str, Any]:
    """Template variables of the results and latency charts sections; show_mode/show_pref are read by
    every table of cases (a column is shown only when the cases differ in it)."""
    return {
        "families": data.families,
        "rows": data.rows,
        "show_mode": len({r.mode for r in data.rows}) > 1,
        "show_pref": len({r.preference for r in data.rows}) > 1,
        "same_latency_pct": SAME_LATENCY_PCT,
        "same_accuracy_points": SAME_ACCURACY_POINTS,
    }
