"""JUnit XML of stress records, for CI systems: one testsuite per driver, one testcase per test;
FAILURE becomes <failure>, HANG and CRASH <error> (the test could not finish), SKIPPED <skipped>
(the test could not exercise the driver), with the reason as message and the log tail as text."""
from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterable

from ..fileio import atomic_write

_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: object) -> str:
    """XML 1.0 cannot hold most control characters, which crashing drivers do print."""
    return _INVALID_XML.sub("?", str(value if value is not None else ""))


def junit_xml(records: Iterable[dict], name: str = "mlts stress") -> str:
    """The XML text; non-stress records are ignored."""
    suites: dict[str, list[dict]] = {}
    for r in records:
        if r.get("kind") == "stress":
            suites.setdefault(str(r.get("driver")), []).append(r)
    root = ET.Element("testsuites", name=_text(name))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    for driver, recs in suites.items():
        failures = sum(r.get("outcome") == "FAILURE" for r in recs)
        errors = sum(r.get("outcome") in ("HANG", "CRASH") for r in recs)
        skipped = sum(r.get("outcome") == "SKIPPED" for r in recs)
        seconds = sum(float(r.get("duration_s") or 0.0) for r in recs)
        suite = ET.SubElement(root, "testsuite", name=_text(f"mlts.stress.{driver}"), tests=str(len(recs)),
                              failures=str(failures), errors=str(errors), skipped=str(skipped), time=f"{seconds:.3f}")
        for r in recs:
            case = ET.SubElement(suite, "testcase", classname=_text(f"mlts.stress.{driver}"),
                                 name=_text(r.get("test")), time=f"{float(r.get('duration_s') or 0.0):.3f}")
            outcome = str(r.get("outcome"))
            if outcome == "SKIPPED":
                ET.SubElement(case, "skipped", message=_text(r.get("reason") or outcome))
            elif outcome != "SUCCESS":
                tag = "failure" if outcome == "FAILURE" else "error"
                el = ET.SubElement(case, tag, message=_text(r.get("reason") or outcome), type=_text(outcome))
                el.text = _text(r.get("log_tail"))
            elif r.get("reason"):
                ET.SubElement(case, "system-out").text = _text(r.get("reason"))
        totals["tests"] += len(recs)
        totals["failures"] += failures
        totals["errors"] += errors
        totals["skipped"] += skipped
        totals["time"] += seconds
    for k, v in totals.items():
        root.set(k, f"{v:.3f}" if k == "time" else str(v))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(records: Iterable[dict], path: str | os.PathLike, name: str = "mlts stress") -> Path:
    """Written atomically, so a CI upload never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, junit_xml(records, name))


__all__ = ["junit_xml", "write_junit"]
