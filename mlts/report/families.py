"""Benchmark rows grouped the way the report reads them: by model family (MobileNet v1, v2, ...; float or
quantized), then by model, reference first; the results, latency and partition sections all follow
this grouping, so a model sits in the same place in each.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .formatting import as_dict
from .rows import Row, mode_order
from .svg import percentile_svg

OTHER_MODELS = "Other models"
#: zoo families (architectures.py) by their report title
FAMILY_TITLES = {"lstm": "LSTM sequence classifier", "ssdlite": "SSD-lite detector"}
#: the quality column's header and hover text for each task (architectures.py); classification otherwise
QUALITY_HEADERS = {"detection": ("mAP@0.5 %", "mean average precision at IoU 0.5 against the boxes of the data set",
                                 "images whose detections agree with the reference's (matched at IoU 0.5)")}
CLASSIFICATION_HEADERS = ("Top-1 %", "top-1 accuracy against the labels", "samples whose top-1 class agrees with "
                          "the reference's")
_MOBILENET = re.compile(r"mobilenet[_-]?(v\d)", re.IGNORECASE)


def family_of(record: dict) -> tuple[str, bool]:
    """(family, quantized) of a record's model: model_info when the runner filled it, else the zoo's naming."""
    info = as_dict(record.get("model_info"))
    name = str(record.get("model", ""))
    fam = str(info.get("family") or "")
    # the zoo's other families first: "ssdlite_mobilenet_v2_..." is a detector, not a MobileNet v2 classifier
    known = FAMILY_TITLES.get(fam) or next((title for key, title in FAMILY_TITLES.items() if name.startswith(key)),
                                           None)
    m = None if known else (_MOBILENET.search(fam) or _MOBILENET.search(name))
    family = known or (f"MobileNet {m.group(1).lower()}" if m else (fam or OTHER_MODELS))
    if "quantization" in info:
        q = info.get("quantization")
        quantized = bool(q) and str(q).lower() not in ("none", "float32", "float", "float16")
    else:
        quantized = "_quant" in name
    return family, quantized


@dataclass
class ModelGroup:
    model: str
    rows: list[Row]
    percentile_chart: Any = None
    modes: list[str] = field(default_factory=list)


@dataclass
class Family:
    name: str
    quantized: bool
    anchor: str
    models: list[ModelGroup]

    @property
    def title(self) -> str:
        return f"{self.name} · {'quantized' if self.quantized else 'float'}"

    @property
    def headers(self) -> tuple[str, str, str]:
        """(quality column header, its hover text, the agreement column's hover text), by the family's task."""
        tasks = {as_dict(r.record.get("model_info")).get("task") for g in self.models for r in g.rows}
        task = next(iter(tasks)) if len(tasks) == 1 else None
        return QUALITY_HEADERS.get(task, CLASSIFICATION_HEADERS)


def group_families(rows: list[Row], machine_order: list[tuple]) -> list[Family]:
    """The rows by family and model, each model's rows ordered and given its percentile chart."""
    families: dict[tuple[str, bool], Family] = {}
    groups: dict[str, ModelGroup] = {}
    for row in rows:
        fam_name, quant = family_of(row.record)
        fam = families.get((fam_name, quant))
        if fam is None:
            slug = f"{fam_name}-{'quant' if quant else 'float'}".lower()
            anchor = "family-" + re.sub(r"[^a-z0-9]+", "-", slug).strip("-")
            fam = families[(fam_name, quant)] = Family(name=fam_name, quantized=quant, anchor=anchor, models=[])
        group = groups.get(row.model)
        if group is None:
            group = groups[row.model] = ModelGroup(model=row.model, rows=[])
            fam.models.append(group)
        group.rows.append(row)
    for group in groups.values():
        # Reference first, then each driver: per mode/preference, per machine, drivers in run order.
        order = {id(r): i for i, r in enumerate(group.rows)}
        group.rows.sort(key=lambda r: (mode_order(r.mode), r.preference, machine_order.index(r.machine.key),
                                       not r.is_reference, order[id(r)]))
        group.modes = sorted({r.mode for r in group.rows}, key=mode_order)
        chart_rows = [(r.lane + ("" if len(group.modes) == 1 else f" ({r.mode})"), r.latency, r.is_reference)
                      for r in group.rows if r.ok]
        group.percentile_chart = percentile_svg(chart_rows, title=f"{group.model}: latency percentiles")
    return sorted(families.values(), key=lambda f: (f.name == OTHER_MODELS, f.name, f.quantized))
