"""The NNAPI conformance vectors section (`mlts conformance --suite nnapi-cts` records): per driver, the
statuses of each execution path and the operations x operand types matrix, then the failing cases, each
with the command that replays it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlts.conformance.nnapi_cts.tables import (STATUSES, TypeMatrix, cts_records, failing, path_counts, replay_command,
                                               type_matrices)

from ..report_data import ReportData

#: Failing cases listed in the page (a broken driver can fail thousands; the JUnit XML has them all).
MAX_FAILURES_SHOWN = 200


@dataclass
class CtsFailure:
    record: dict
    replay: str


@dataclass
class CtsView:
    statuses: tuple[str, ...]
    paths: list[tuple[str, dict[str, dict[str, int]]]]  # (driver, {path: {status: count}})
    matrices: list[TypeMatrix]
    failures: list[CtsFailure]
    failure_count: int

    @property
    def drivers(self) -> list[str]:
        return [m.device for m in self.matrices]


def nnapi_cts_view(records: list[dict]) -> CtsView | None:
    """The section's content, None without nnapi-cts records."""
    records = cts_records(records)
    if not records:
        return None
    bad = failing(records)
    return CtsView(STATUSES, list(path_counts(records).items()), type_matrices(records),
                   [CtsFailure(r, replay_command(r)) for r in bad[:MAX_FAILURES_SHOWN]], len(bad))


def variables(data: ReportData) -> dict[str, Any]:
    """Template variables of the nnapi-cts section (None when no nnapi-cts record was read)."""
    return {"nnapi_cts": nnapi_cts_view(data.results.records)}
