"""The parts of a JUnit XML document that every suite writing one shares (the stress suite's and the
nnapi-cts vectors'): text XML can hold, the document's totals and header, and an atomic write."""
from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from .fileio import atomic_write

_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def xml_text(value: object) -> str:
    """XML 1.0 cannot hold most control characters, which crashing drivers do print."""
    return _INVALID_XML.sub("?", str(value if value is not None else ""))


def new_totals() -> dict[str, float]:
    return {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}


def add_suite(totals: dict[str, float], tests: int, failures: int, errors: int, skipped: int, seconds: float) -> None:
    for key, value in (("tests", tests), ("failures", failures), ("errors", errors), ("skipped", skipped),
                       ("time", seconds)):
        totals[key] += value


def document(root: ET.Element, totals: dict[str, float]) -> str:
    """The XML text of `root` (a <testsuites>) carrying `totals`."""
    for k, v in totals.items():
        root.set(k, f"{v:.3f}" if k == "time" else str(v))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_document(text: str, path: str | os.PathLike) -> Path:
    """Written atomically, so a CI upload never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, text)
