"""The errors section: cases that failed, driver failures the CPU fallback hid, and unsupported cases."""
from __future__ import annotations

from typing import Any

from ..report_data import ReportData


def variables(data: ReportData) -> dict[str, Any]:
    """Template variables of the errors section (rows in record order)."""
    return {
        "errors": [r for r in data.rows if r.status == "error"],
        "fallback_rows": [r for r in data.rows if r.fallbacks],
        "unsupported": [r for r in data.rows if r.status == "unsupported"],
    }
