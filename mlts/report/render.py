"""Render results records into the self-contained HTML report (`index.html` of a run directory).

One file, inline CSS and inline SVG, no scripts and no network references, so it opens offline, can
be attached to a bug or a CI artifact as is, and prints. Autoescaping is on: model names, driver
names and error messages come from records and are never trusted as markup.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence, Union

import jinja2

from mlts.benchmark.compare import compare
from mlts.benchmark.thresholds import Thresholds
from mlts.fileio import atomic_write, make_dir, write_error
from mlts.benchmark.record_schema import utc_now
from mlts.benchmark.records import Results, read_results
from mlts.runtime import MltsError, ResultCode
from mlts.runtime.drivers.reference import REFERENCE_DEVICE_NAME

from .baseline_view import BaselineView, baseline_view
from .context import build_context
from .formatting import fmt_fraction, fmt_pct, fmt_points, fmt_signed_ms
from .svg import fmt_ms

PathsOrResults = Union[Results, str, os.PathLike, Sequence[Union[str, os.PathLike]]]
TEMPLATE = "report.html.j2"
INDEX_FILE = "index.html"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("mlts.report", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(ms=fmt_ms, signed_ms=fmt_signed_ms, pct=fmt_pct, fraction=fmt_fraction, points=fmt_points)
    return env


def _describe(paths: PathsOrResults) -> list[str]:
    if isinstance(paths, Results):
        return [str(s.path) for s in paths.sources]
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def as_results(value: PathsOrResults) -> Results:
    """Results as given, or read (and merged) from run directories / results files."""
    if isinstance(value, Results):
        return value
    if not isinstance(value, (str, os.PathLike)) and not value:
        raise MltsError(ResultCode.BAD_DATA, "no results files or run directories given")
    return read_results(value)


def render_html(results: PathsOrResults, *, baseline: PathsOrResults | None = None, title: str | None = None,
                reference: str = REFERENCE_DEVICE_NAME, thresholds: Thresholds | None = None) -> str:
    """The report's HTML text (`render_report` writes it); raises MltsError(BAD_DATA) on unusable input."""
    current = as_results(results)
    view = None
    if baseline is not None:
        base = as_results(baseline)
        where = ", ".join(_describe(baseline)) or "baseline"
        if not base.benchmark_records():
            raise MltsError(ResultCode.BAD_DATA, f"{where}: the baseline has no benchmark records")
        if current.benchmark_records():
            comparison = compare(base.records, current.records, thresholds)
            comparison.notes[:0] = base.problems
            view = baseline_view(comparison, _describe(baseline))
        else:
            view = BaselineView(verdict="–", counts={}, thresholds="", rows=[],
                                notes=["the current results have no benchmark records to compare"],
                                sources=_describe(baseline))
    context = build_context(current, baseline=view, title=title, reference=reference, generated_at=utc_now())
    return _environment().get_template(TEMPLATE).render(**context)


def render_report(results: PathsOrResults, out_path: str | os.PathLike, *, baseline: PathsOrResults | None = None,
                  title: str | None = None) -> Path:
    """Write the report to `out_path` atomically, so a browser or CI upload never sees half a page.

    `results` and `baseline` are `Results` or run directories / results.jsonl files (several are
    merged: runs from several machines or drivers become one comparison). A path that cannot be written
    raises mlts.fileio.WriteError ("cannot write <path>: <cause>"), leaving no partial file.
    """
    html = render_html(results, baseline=baseline, title=title)
    out = Path(out_path)
    make_dir(out.parent)  # WriteError: "cannot write <dir>: <cause>"
    try:
        return atomic_write(out, html)
    except OSError as e:
        raise write_error(out, e) from None
