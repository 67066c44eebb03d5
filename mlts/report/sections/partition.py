"""The partition section: how each case's operations were split over devices, one colour per device
across the whole report, and whether the CPU fallback ran any of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..formatting import as_dict, number
from ..report_data import ReportData
from ..rows import Row
from ..svg import PALETTE, REFERENCE_COLOUR, fmt_count, partition_svg


def device_colours(rows: list[Row], reference: str) -> dict[str, str]:
    """One colour per device across the report, so a device looks the same in every bar."""
    colours: dict[str, str] = {reference: REFERENCE_COLOUR}
    k = 0
    for r in rows:
        part = as_dict(r.record.get("partition"))
        names = list(as_dict(part.get("ops_per_device"))) + [str(d) for d in r.record.get("devices") or []]
        for name in names:
            if name not in colours:
                colours[name] = PALETTE[k % len(PALETTE)]
                k += 1
    return colours


@dataclass
class PartitionRow:
    row: Row
    chart: Any
    legend: list[tuple[str, str, str]]  # device, colour, operations
    cpu_fallback: bool | None
    devices: list[str]


def partition_rows(rows: list[Row], colours: dict[str, str]) -> list[PartitionRow]:
    """A bar (operations per device) and its legend for each of `rows`."""
    out = []
    for r in rows:
        part = as_dict(r.record.get("partition"))
        ops = {str(k): v for k, v in as_dict(part.get("ops_per_device")).items() if number(v) is not None}
        chart = partition_svg(ops, colours, title=f"{r.model} on {r.lane}") if ops else None
        legend = [(d, colours.get(d, PALETTE[-1]), fmt_count(n)) for d, n in ops.items()]
        fb = part.get("cpu_fallback")
        out.append(PartitionRow(row=r, chart=chart, legend=legend, cpu_fallback=fb if isinstance(fb, bool) else None,
                                devices=[str(d) for d in r.record.get("devices") or []]))
    return out


def variables(data: ReportData) -> dict[str, Any]:
    """Template variables of the partition section, grouped like the results section."""
    colours = device_colours(data.rows, data.reference)
    return {
        "partitions": [(f, [(g, partition_rows(g.rows, colours)) for g in f.models]) for f in data.families],
        "colours": colours,
    }
