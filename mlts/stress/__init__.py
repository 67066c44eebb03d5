"""mlts.stress: crash, hang, leak and corner-case tests of drivers, each in a watched process.

`mlts stress` runs the catalog (`catalog`) on every target (`drivers`: each available driver, and
all-devices for runtime partitioning) through the suite (`suite`): every test is a job run by a
child process (`child`, `context`) under the watchdog (`watchdog`: deadline, heartbeat, process-tree
kill; SUCCESS / FAILURE / HANG / CRASH). The tests: `inference`, `load_tests`, `termination` (with
client processes from `worker`), `performance`, `resources`, `random_graphs` (+ `graphgen`, the
generator, and `graph_spec`, the replayable JSON graphs), `corner_cases`, `liveness`; their models come from `models`. Results are
"stress" records in results.jsonl, the HTML report, and `junit` XML. `fuzz` is `mlts fuzz`.
Their command lines are mlts.cli.stress, mlts.cli.conformance and mlts.cli.fuzz.
"""
