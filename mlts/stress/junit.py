"""JUnit XML of stress records, for CI systems: one testsuite per driver, one testcase per test;
FAILURE becomes <failure>, HANG and CRASH <error> (the test could not finish), SKIPPED <skipped>
(the test could not exercise the driver), with the reason as message and the log tail as text."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterable

from ..junit_xml import add_suite, document, new_totals, write_document, xml_text

def junit_xml(records: Iterable[dict], name: str = "mlts stress") -> str:
    """The XML text; non-stress records are ignored."""
    suites: dict[str, list[dict]] = {}
    for r in records:
        if r.get("kind") == "stress":
            suites.setdefault(str(r.get("driver")), []).append(r)
    root = ET.Element("testsuites", name=xml_text(name))
    totals = new_totals()
    for driver, recs in suites.items():
        failures = sum(r.get("outcome") == "FAILURE" for r in recs)
        errors = sum(r.get("outcome") in ("HANG", "CRASH") for r in recs)
        skipped = sum(r.get("outcome") == "SKIPPED" for r in recs)
        seconds = sum(float(r.get("duration_s") or 0.0) for r in recs)
        suite = ET.SubElement(root, "testsuite", name=xml_text(f"mlts.stress.{driver}"), tests=str(len(recs)),
                              failures=str(failures), errors=str(errors), skipped=str(skipped), time=f"{seconds:.3f}")
        for r in recs:
            case = ET.SubElement(suite, "testcase", classname=xml_text(f"mlts.stress.{driver}"),
                                 name=xml_text(r.get("test")), time=f"{float(r.get('duration_s') or 0.0):.3f}")
            outcome = str(r.get("outcome"))
            if outcome == "SKIPPED":
                ET.SubElement(case, "skipped", message=xml_text(r.get("reason") or outcome))
            elif outcome != "SUCCESS":
                tag = "failure" if outcome == "FAILURE" else "error"
                el = ET.SubElement(case, tag, message=xml_text(r.get("reason") or outcome), type=xml_text(outcome))
                el.text = xml_text(r.get("log_tail"))
            elif r.get("reason"):
                ET.SubElement(case, "system-out").text = xml_text(r.get("reason"))
        add_suite(totals, len(recs), failures, errors, skipped, seconds)
    return document(root, totals)


def write_junit(records: Iterable[dict], path: str | os.PathLike, name: str = "mlts stress") -> Path:
    """Written atomically, so a CI upload never sees half a file."""
    return write_document(junit_xml(records, name), path)


__all__ = ["junit_xml", "write_junit"]
