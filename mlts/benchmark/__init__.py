"""mlts.benchmark (see SPEC.md section 1): latency and accuracy scoring, results files, baseline comparison.

stats        latency statistics, run-length rules (presets quick/default) and the measuring loop
accuracy     errors against the reference, the CTS verdict (SPEC.md section 3), top-1/top-5
records      the results record schema, the crash-safe results.jsonl writer, reading/merging, CSV
environment  environment.json: machine and software of a run
compare      baseline comparison with PASS/WARN/FAIL verdicts (`mlts compare`: mlts.cli.compare)

The `mlts benchmark` command line is mlts.cli.benchmark.
"""
