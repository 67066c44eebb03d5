"""mlts.report (see SPEC.md section 1): the self-contained HTML report of a run (or of several, merged).

render         render_report(results_or_paths, out_path, baseline=..., title=...) writes index.html
context        build_context: the template's variables, assembled from the registered sections
sections/      one module per report section (environment, summary, timing, ...), listed in
               sections.SECTIONS in page order: a new section is a module there and one line in SECTIONS
report_data    the records parsed once for every section: machines, benchmark rows, stress rows
machines       which machine each record came from (merged runs compare like with like)
rows           benchmark records as rows, each with its difference from the CPU reference
families       those rows by model family and model, with their latency percentile charts
stress_rows    stress and conformance records as rows
fallbacks      driver failures the CPU fallback hid (benchmark and stress records alike)
conditions_view  each case's measurement conditions, latency repetitions and paired A/B decisions
baseline_view  a baseline comparison as the baseline section shows it
formatting     numbers as text and better/worse/same colours, shared by sections and template filters
svg            the inline SVG charts (histograms, percentiles, partition bars)

`mlts report RUN_DIR_OR_RESULTS... [-o OUT.html] [--baseline RUN] [--title T]` is mlts.cli.report.
"""
from .render import render_html, render_report

__all__ = ["render_html", "render_report"]
