"""JUnit XML of nnapi-cts records, for CI systems, shaped as the stress suite's (mlts.stress.junit): one
testsuite per driver and path (`mlts.nnapi_cts.<driver>.<path>`), one testcase per case and variant
(classname the operation); fail becomes <failure>, error <error>, n/a <skipped> (the driver declined an
operation), each with the detail as message and the replay command as text."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterable

from mlts.junit_xml import add_suite, document, new_totals, write_document, xml_text

from .tables import cts_records, replay_command

def junit_xml(records: Iterable[dict], name: str = "mlts nnapi-cts") -> str:
    """The XML text; records of other kinds are ignored."""
    suites: dict[tuple[str, str], list[dict]] = {}
    for r in cts_records(records):
        suites.setdefault((str(r.get("device")), str(r.get("path", "sync"))), []).append(r)
    root = ET.Element("testsuites", name=xml_text(name))
    totals = new_totals()
    for (device, path), recs in suites.items():
        counts = {s: sum(r.get("status") == s for r in recs) for s in ("fail", "error", "n/a")}
        seconds = sum(float(r.get("seconds") or 0.0) for r in recs)
        suite_name = xml_text(f"mlts.nnapi_cts.{device}.{path}")
        suite = ET.SubElement(root, "testsuite", name=suite_name, tests=str(len(recs)), failures=str(counts["fail"]),
                              errors=str(counts["error"]), skipped=str(counts["n/a"]), time=f"{seconds:.3f}")
        for r in recs:
            case = ET.SubElement(suite, "testcase", classname=xml_text(f"{suite_name}.{r.get('operation')}"),
                                 name=xml_text(f"{r.get('spec_dir')}/{r.get('case')} [{r.get('variant')}]"),
                                 time=f"{float(r.get('seconds') or 0.0):.3f}")
            status = r.get("status")
            if status == "n/a":
                ET.SubElement(case, "skipped", message=xml_text(r.get("detail") or "n/a"))
            elif status != "pass":
                tag = "failure" if status == "fail" else "error"
                el = ET.SubElement(case, tag, message=xml_text(r.get("detail") or status), type=xml_text(status))
                el.text = xml_text("replay: " + replay_command(r))
        add_suite(totals, len(recs), counts["fail"], counts["error"], counts["n/a"], seconds)
    return document(root, totals)


def write_junit(records: Iterable[dict], path: str | os.PathLike, name: str = "mlts nnapi-cts") -> Path:
    """Written atomically, so a CI upload never sees half a file."""
    return write_document(junit_xml(records, name), path)
