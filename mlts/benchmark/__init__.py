"""mlts.benchmark (see SPEC.md section 1): latency and accuracy scoring, results files, baseline comparison.

stats        latency statistics, run-length rules (presets quick/default) and the measuring loop
accuracy     errors against the reference, the CTS verdict (SPEC.md section 3), top-1/top-5
record_schema  the results record schema and its validation
results_writer the crash-safe results.jsonl writer
records      reading and merging results files, CSV
run_config   presets, model and driver selection, BenchmarkConfig; runner, model_run, inference: the run
environment  environment.json: machine and software of a run
compare      baseline comparison with PASS/WARN/FAIL verdicts (`mlts compare`: mlts.cli.compare); decision,
             case_comparison, thresholds: the statistics behind a verdict

The `mlts benchmark` command line is mlts.cli.benchmark.
"""
