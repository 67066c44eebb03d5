"""Summaries of nnapi-cts records (results.jsonl lines, kind "nnapi-cts"), for the CLI, the HTML report's
section, the JUnit XML and tools/cts_table.py: statuses per driver and path, the operations x operand
types matrix per driver, and the failing cases with the command that replays each."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Iterable, Sequence

RECORD_KIND = "nnapi-cts"
STATUSES = ("pass", "fail", "n/a", "error")
PATH_ORDER = ("sync", "async", "burst", "fenced", "cached")
#: Operand-type columns in this order; any other type follows, alphabetically.
TYPE_ORDER = ("FLOAT32", "FLOAT32 relaxed", "FLOAT16", "QUANT8_ASYMM", "QUANT8_ASYMM_SIGNED", "QUANT8_SYMM",
              "QUANT16_ASYMM", "QUANT16_SYMM", "INT32", "BOOL8")


def cts_records(records: Iterable[dict]) -> list[dict]:
    """The nnapi-cts records among any records (a run directory may hold other kinds)."""
    return [r for r in records if r.get("kind") == RECORD_KIND or r.get("suite") == RECORD_KIND]


def _empty() -> dict[str, int]:
    return {s: 0 for s in STATUSES}


def _ordered(values: Iterable[str], order: Sequence[str]) -> list[str]:
    rank = {v: k for k, v in enumerate(order)}
    return sorted(set(values), key=lambda v: (rank.get(v, len(rank)), v))


def devices_of(records: Sequence[dict]) -> list[str]:
    """The drivers in the order they first appear."""
    return list(dict.fromkeys(str(r.get("device")) for r in records))


def path_counts(records: Sequence[dict]) -> dict[str, dict[str, dict[str, int]]]:
    """{driver: {path: {status: count}}}, paths in PATH_ORDER."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in records:
        per = out.setdefault(str(r.get("device")), {})
        counts = per.setdefault(str(r.get("path", "sync")), _empty())
        counts[r.get("status", "error") if r.get("status") in STATUSES else "error"] += 1
    return {d: {p: per[p] for p in _ordered(per, PATH_ORDER)} for d, per in out.items()}


@dataclass
class Cell:
    """One (operation, operand type) of one driver: `cases` (case, variant) pairs, and how many of them
    passed on every path that ran them, failed or errored on some path, or were declined (n/a)."""

    cases: int = 0
    passed: int = 0
    failed: int = 0
    na: int = 0

    @property
    def title(self) -> str:
        parts = [f"{self.passed} of {self.cases} pass on every path"]
        if self.failed:
            parts.append(f"{self.failed} fail or error")
        if self.na:
            parts.append(f"{self.na} n/a")
        return ", ".join(parts)


@dataclass
class TypeMatrix:
    """Operations x operand types of one driver."""

    device: str
    types: list[str]
    rows: list[tuple[str, dict[str, Cell]]] = field(default_factory=list)
    total: Cell = field(default_factory=Cell)


def _case_verdicts(records: Sequence[dict]) -> dict[tuple, tuple[str, str, str]]:
    """{(driver, spec_dir, case, variant): (operation, operand type, verdict)}: the verdict over every
    path: fail when any path failed or errored, n/a when declined, else pass."""
    out: dict[tuple, tuple[str, str, str]] = {}
    for r in records:
        key = (str(r.get("device")), r.get("spec_dir"), r.get("case"), r.get("variant"))
        status = r.get("status")
        verdict = "fail" if status in ("fail", "error") or status not in STATUSES else status
        previous = out.get(key)
        if previous is not None and (previous[2] == "fail" or verdict == "pass"):
            continue
        out[key] = (str(r.get("operation")), str(r.get("operand_type") or "?"), verdict)
    return out


def type_matrices(records: Sequence[dict]) -> list[TypeMatrix]:
    """Per driver, the operations x operand types matrix of (case, variant) pairs."""
    verdicts = _case_verdicts(records)
    matrices = []
    for device in devices_of(records):
        cells: dict[str, dict[str, Cell]] = {}
        total = Cell()
        for (dev, _, _, _), (operation, type_name, verdict) in verdicts.items():
            if dev != device:
                continue
            for cell in (cells.setdefault(operation, {}).setdefault(type_name, Cell()), total):
                cell.cases += 1
                cell.passed += verdict == "pass"
                cell.failed += verdict == "fail"
                cell.na += verdict == "n/a"
        types = _ordered({t for row in cells.values() for t in row}, TYPE_ORDER)
        matrices.append(TypeMatrix(device, types, sorted(cells.items()), total))
    return matrices


def replay_command(record: dict) -> str:
    """The command that runs this record's case again on its driver and path, printing it in detail."""
    case = f"{record.get('spec_dir')}/{record.get('case')}" if record.get("spec_dir") else str(record.get("case"))
    words = ["mlts", "conformance", "--suite", "nnapi-cts", "--case", case, "--paths", str(record.get("path", "sync")),
             "--drivers", str(record.get("device"))]
    return " ".join(shlex.quote(w) for w in words)


def failing(records: Sequence[dict]) -> list[dict]:
    """The fail and error records."""
    return [r for r in records if r.get("status") not in ("pass", "n/a")]


def markdown_table(records: Sequence[dict], devices: Sequence[str] | None = None) -> str:
    """A Markdown table: one row per (operation, operand type), the number of (case, variant) pairs, then per
    driver how many passed on every path (n/a where the driver declined them all); a totals row first."""
    matrices = {m.device: m for m in type_matrices(records)}
    order = [d for d in (devices or list(matrices)) if d in matrices]
    keys: dict[tuple[str, str], int] = {}
    for m in matrices.values():
        for operation, row in m.rows:
            for type_name, cell in row.items():
                keys[(operation, type_name)] = max(keys.get((operation, type_name), 0), cell.cases)
    rank = {t: k for k, t in enumerate(TYPE_ORDER)}
    lines = ["| operation | operand type | cases | " + " | ".join(order) + " |",
             "|---|---|--:|" + "--:|" * len(order)]

    def shown(cell: Cell | None) -> str:
        if cell is None or cell.cases == 0:
            return "–"
        return "n/a" if cell.na == cell.cases else str(cell.passed)

    by_operation = {d: dict(matrices[d].rows) for d in order}
    total_cases = max((matrices[d].total.cases for d in order), default=0)
    lines.append(f"| **all** | | **{total_cases}** | " + " | ".join(f"**{matrices[d].total.passed}**" for d in order)
                 + " |")
    for operation, type_name in sorted(keys, key=lambda k: (k[0], rank.get(k[1], len(rank)), k[1])):
        cells = [shown(by_operation[d].get(operation, {}).get(type_name)) for d in order]
        lines.append(f"| {operation} | {type_name} | {keys[(operation, type_name)]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def markdown_path_table(records: Sequence[dict], devices: Sequence[str] | None = None) -> str:
    """A Markdown table: per driver and path, pass / fail / n/a / error counts."""
    counts = path_counts(records)
    order = [d for d in (devices or list(counts)) if d in counts]
    lines = ["| driver | path | pass | fail | n/a | error |", "|---|---|--:|--:|--:|--:|"]
    for d in order:
        for path, c in counts[d].items():
            lines.append(f"| {d} | {path} | {c['pass']} | {c['fail']} | {c['n/a']} | {c['error']} |")
    return "\n".join(lines) + "\n"
