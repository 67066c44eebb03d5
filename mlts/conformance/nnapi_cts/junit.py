"""JUnit XML of nnapi-cts records, for CI systems, shaped as the stress suite's (mlts.stress.junit): one
testsuite per driver and path (`mlts.nnapi_cts.<driver>.<path>`), one testcase per case and variant
(classname the operation); fail becomes <failure>, error <error>, n/a <skipped> (the driver declined an
operation), each with the detail as message and the replay command as text."""
from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterable

from mlts.fileio import atomic_write

from .tables import cts_records, replay_command

_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: object) -> str:
    """XML 1.0 cannot hold most control characters."""
    return _INVALID_XML.sub("?", str(value if value is not None else ""))


def junit_xml(records: Iterable[dict], name: str = "mlts nnapi-cts") -> str:
    """The XML text; records of other kinds are ignored."""
    suites: dict[tuple[str, str], list[dict]] = {}
    for r in cts_records(records):
        suites.setdefault((str(r.get("device")), str(r.get("path", "sync"))), []).append(r)
    root = ET.Element("testsuites", name=_text(name))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    for (device, path), recs in suites.items():
        counts = {s: sum(r.get("status") == s for r in recs) for s in ("fail", "error", "n/a")}
        seconds = sum(float(r.get("seconds") or 0.0) for r in recs)
        suite_name = _text(f"mlts.nnapi_cts.{device}.{path}")
        suite = ET.SubElement(root, "testsuite", name=suite_name, tests=str(len(recs)), failures=str(counts["fail"]),
                              errors=str(counts["error"]), skipped=str(counts["n/a"]), time=f"{seconds:.3f}")
        for r in recs:
            case = ET.SubElement(suite, "testcase", classname=_text(f"{suite_name}.{r.get('operation')}"),
                                 name=_text(f"{r.get('spec_dir')}/{r.get('case')} [{r.get('variant')}]"),
                                 time=f"{float(r.get('seconds') or 0.0):.3f}")
            status = r.get("status")
            if status == "n/a":
                ET.SubElement(case, "skipped", message=_text(r.get("detail") or "n/a"))
            elif status != "pass":
                tag = "failure" if status == "fail" else "error"
                el = ET.SubElement(case, tag, message=_text(r.get("detail") or status), type=_text(status))
                el.text = _text("replay: " + replay_command(r))
        totals["tests"] += len(recs)
        totals["failures"] += counts["fail"]
        totals["errors"] += counts["error"]
        totals["skipped"] += counts["n/a"]
        totals["time"] += seconds
    for k, v in totals.items():
        root.set(k, f"{v:.3f}" if k == "time" else str(v))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(records: Iterable[dict], path: str | os.PathLike, name: str = "mlts nnapi-cts") -> Path:
    """Written atomically, so a CI upload never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, junit_xml(records, name))
