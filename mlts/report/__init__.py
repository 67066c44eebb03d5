"""mlts.report (see SPEC.md section 1): the self-contained HTML report of a run (or of several, merged).

render      render_report(results_or_paths, out_path, baseline=..., title=...) writes index.html
context     what the report shows (differences from the reference, colours, verdicts), testable apart
conditions_view  each case's measurement conditions, latency repetitions and paired A/B decisions
svg         the inline SVG charts (histograms, percentiles, partition bars)
report_cli  `mlts report RUN_DIR_OR_RESULTS... [-o OUT.html] [--baseline RUN] [--title T]`
"""
from .render import render_html, render_report

__all__ = ["render_html", "render_report"]
