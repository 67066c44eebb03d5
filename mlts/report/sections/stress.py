"""The stress section: each crash/hang test's outcome per driver (conformance tests have their own)."""
from __future__ import annotations

from typing import Any

from ..report_data import ReportData
from ..stress_rows import STRESS_OUTCOMES


def variables(data: ReportData) -> dict[str, Any]:
    """Template variables of the stress section; stress_outcomes (the known outcomes, in the order their
    tags are shown) is read by the summary and conformance tables too."""
    stress = [t for t in data.stress_rows if not t.is_conformance]
    return {
        "stress": stress,
        "stress_coverage": any(t.coverage for t in stress),
        "stress_fallbacks": any(t.fallbacks for t in stress),
        "stress_outcomes": STRESS_OUTCOMES,
    }
