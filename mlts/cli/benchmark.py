"""`mlts benchmark`: argument handling, the run directory's files and the closing report (the runs
themselves are mlts.benchmark.runner's).

Exit status: 0 the run finished (whatever its cases' statuses); 1 a usage or input error, an output
file or directory that cannot be written, no case could run (every selected model lacks its trained
weights), or a regression against `--baseline` (a FAIL verdict of `mlts compare`); 130 interrupted by
SIGINT (Ctrl-C), 143 by SIGTERM: the finished cases are kept, run.json is marked interrupted, results.csv
and index.html show what finished, and `--resume DIR` continues.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import textwrap
from pathlib import Path

from mlts.benchmark.progress import RunSummary
from mlts.benchmark.run_config import (DEFAULT_IMAGES, DEFAULT_MODELS, DEFAULT_REPEAT, DEFAULT_TIMEOUT_S, MAX_REPEAT,
                                       PRESET_RULES, QUICK_IMAGES, QUICK_MODELS, BenchmarkConfig, parse_modes,
                                       parse_preference, select_drivers, select_models)
from mlts.benchmark.runner import RUN_FILE, BenchmarkRunner
from mlts.benchmark.records import CSV_FILE, ENVIRONMENT_FILE, RESULTS_FILE, new_run_dir, read_results, to_csv
from mlts.benchmark.threads import DEFAULT_THREADS, ThreadPinning, parse_threads
from mlts.fileio import WriteError, make_dir, write_error
from mlts.runtime import MltsError, ResultCode
from mlts.signals import SIGNAL_EXIT_BASE, interrupt_on_signals

from .options import add_driver_options, register_cli_drivers

NAME = "benchmark"
HELP = "latency and accuracy of the zoo models on every driver; writes the HTML report"
REPORT_FILE = "index.html"
EXIT_OK, EXIT_FAIL, EXIT_INTERRUPTED = 0, 1, 130
#: Options that choose what a run measures; a resumed run takes them from its run.json instead.
SELECTION_OPTIONS = ("quick", "models", "drivers", "modes", "preference", "images", "no_reference", "no_partition",
                     "timeout", "threads", "repeat", "ab")

#: What the presets took on the development machine (2 cores shared with a training job, so a loaded
#: machine; see the README), stated in --help so a user knows what to expect.
MEASURED = ("with nnapi-reference and mlts-fast on 2 shared cores: --quick about 15-30 s with a warm model\n"
            "  cache and compiled kernels (28 s on a fresh clone, compiling mlts-fast's kernels), plus about\n"
            "  40 s when the quantized models must be built first; the default several minutes (6 to 8 before\n"
            "  cases took at least 30 runs; not measured since)")


def _item(text: str) -> str:
    return textwrap.fill(text, width=100, initial_indent="  ", subsequent_indent="    ")


def _epilog() -> str:
    q, d = PRESET_RULES["quick"], PRESET_RULES["default"]
    return "\n".join([
        "run-length rules (warm-up runs are never in the statistics; a timed run in progress is never cut):",
        _item(d.describe()),
        _item(q.describe()),
        _item(f"each case is timed in {DEFAULT_REPEAT} slices (--repeat N), one per pass over every case, the "
              "rules divided among them: seconds of contention on a shared machine touch one slice, not the "
              "whole case; records are written after the last pass (--repeat 1: one piece, written at once)"),
        "models (--models takes names or regular expressions, comma-separated; `mlts models` lists them):",
        _item(f"default: {', '.join(DEFAULT_MODELS)}; accuracy on {DEFAULT_IMAGES} held-out images"),
        _item(f"--quick: {', '.join(QUICK_MODELS)}; accuracy on {QUICK_IMAGES} held-out images"),
        "  models without trained weights are skipped with a note",
        "drivers: every available device (--drivers names or regexes), nnapi-reference first as the",
        "  baseline row (unless --no-reference). A driver that cannot run a whole model is reported",
        "  `unsupported` with the operations it lacks, then run partitioned with nnapi-reference",
        "  taking the rest (unless --no-partition); the record says which operations went where.",
        "accuracy: against nnapi-reference's outputs on the same inputs (MSE, max abs error, CTS verdict,",
        "  top-1/top-5 agreement; computed once per model and kept in the run directory) and against",
        "  the images' labels (top-1/top-5).",
        f"duration, {MEASURED}.",
        f"output: a run directory (default reports/<timestamp>/) with {RESULTS_FILE} (one record per case,",
        f"  appended as each finishes), {CSV_FILE}, {ENVIRONMENT_FILE}, {RUN_FILE} and {REPORT_FILE}.",
        "timeout: no compilation or inference of any stage (supported operations, compiling, warm-up and",
        "  timed runs, nnapi-reference's outputs, accuracy), partitioned cases included, may go --timeout",
        "  seconds without returning; past it the case is an `error` naming the stage, the case's driver",
        "  services are killed (and restarted for the next case) and the run goes on.",
        "threads: the BLAS, OpenMP and numba pools of mlts and of the driver services it starts run",
        f"  {DEFAULT_THREADS} thread each unless --threads N (threadpoolctl, numba.set_num_threads and the",
        "  OPENBLAS/OMP/MKL/NUMBA_NUM_THREADS variables); each record's `conditions` says what the pools",
        "  used, the load around the case, the CPU frequency and the CPU share other processes took.",
        "paired runs (--ab A,B): A and B timed in alternation, A B B A ..., in one process; the candidate's",
        "  record carries the paired ratio, its 95% interval (sign test) and a verdict (FAIL above +10%).",
        "exit status: 0 run finished (whatever its cases' statuses); 1 bad input, an output path that",
        "  cannot be written, no model could run (no trained weights), a FAIL against --baseline or in an",
        "  --ab pair;",
        "  130 interrupted by SIGINT (Ctrl-C), 143 by SIGTERM: what finished is kept and reported",
        "  (--resume DIR continues).",
    ])


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `benchmark` subcommand to the `mlts` parser's subparsers (sets func=run)."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Run every selected model on every selected driver and mode: compilation time, first\n"
                    "inference, per-inference latency statistics, driver-reported timing, peak memory, and\n"
                    "accuracy against nnapi-reference and against labels. Progress (case n of N, ETA) goes\n"
                    "to stderr; the report path (or the --json summary) to stdout.",
        epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", default=None,
                   help="the quick preset: smallest models, quick run-length rules, "
                        f"{QUICK_IMAGES} images (under a minute)")
    p.add_argument("--models", action="append", metavar="NAMES",
                   help="models by name or regular expression, comma-separated (repeatable)")
    p.add_argument("--drivers", action="append", metavar="NAMES",
                   help="drivers (devices) by name or regular expression, comma-separated (repeatable)")
    p.add_argument("--no-reference", action="store_true", default=None,
                   help="leave out the nnapi-reference row (its outputs still score the others' accuracy)")
    p.add_argument("--no-partition", action="store_true", default=None,
                   help="do not run unsupported models partitioned with nnapi-reference")
    p.add_argument("--modes", metavar="MODES",
                   help="execution modes, comma-separated from sync, burst, async (default: sync)")
    p.add_argument("--preference", metavar="PREF",
                   help="compilation preference: fast-single-answer (default), low-power, sustained-speed")
    p.add_argument("--images", type=int, metavar="N",
                   help=f"held-out images for accuracy, 0 to 1500 (default {DEFAULT_IMAGES}, "
                        f"--quick {QUICK_IMAGES})")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="longest wait, in seconds, for any one compilation or inference of a case (every stage, "
                        "partitioned cases included); a driver that exceeds it makes the case an error naming "
                        f"the stage and the run goes on (default {DEFAULT_TIMEOUT_S:g}; 0: none)")
    p.add_argument("--threads", metavar="N",
                   help=f"threads per BLAS, OpenMP and numba pool, in mlts and in the driver services it starts "
                        f"(default {DEFAULT_THREADS}: drivers compared one thread each, repeatable on a busy machine)")
    p.add_argument("--repeat", type=int, metavar="N",
                   help="time each case in N slices, one per pass over every case (the run-length rules divided "
                        "among them), so that a few seconds of contention on a shared machine touch one slice of a "
                        "case rather than all of it; the record keeps each slice's count "
                        f"(latency.repetition_counts) and `mlts compare` measures their spread (default "
                        f"{DEFAULT_REPEAT}; 1: one piece; at most {MAX_REPEAT})")
    p.add_argument("--ab", metavar="BASELINE,CANDIDATE",
                   help="paired A/B run: time two drivers (or CANDIDATE against nnapi-reference) in alternation, "
                        "A B B A ..., in this process, so that machine load touches both alike; the candidate's "
                        "records carry the paired ratio with its interval and verdict, a FAIL makes the exit "
                        "status 1. Two builds of one driver: load both with --driver under different names")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="DIR", help="run directory (default: reports/<timestamp>)")
    where.add_argument("--resume", metavar="DIR",
                       help="continue an interrupted run in DIR with its own configuration, skipping "
                            "finished cases")
    p.add_argument("--retry-errors", action="store_true",
                   help="with --resume: run the cases that ended in an error again")
    p.add_argument("--trust-run-dir", action="store_true",
                   help="with --resume: load the driver specs recorded in DIR/run.json even when they are not "
                        "given again with --driver (their code is imported and run)")
    p.add_argument("--baseline", metavar="RUN",
                   help="an earlier run directory or results.jsonl (comma-separate to merge several) to "
                        "compare with, in the report and on stderr; a regression (FAIL) makes the exit status 1")
    p.add_argument("--no-report", action="store_true", help="do not render index.html")
    p.add_argument("--json", action="store_true", help="print a JSON summary of the run instead of the report path")
    add_driver_options(p)
    p.set_defaults(func=run)
    return p


def _err(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, message)


def _resume_config(args: argparse.Namespace) -> tuple[Path, dict]:
    run_dir = Path(args.resume)
    given = [f"--{name.replace('_', '-')}" for name in SELECTION_OPTIONS if getattr(args, name, None)]
    if given:
        raise _err(f"--resume continues with the run's own configuration; leave out {', '.join(given)}")
    run_file = run_dir / RUN_FILE
    if not run_file.is_file():
        raise _err(f"{run_dir}: not a benchmark run directory (no {RUN_FILE}); nothing to resume")
    try:
        doc = json.loads(run_file.read_text(encoding="utf-8"))
        return run_dir, doc
    except (OSError, ValueError) as e:
        raise _err(f"{run_file}: unreadable ({e})") from None


def _new_config(args: argparse.Namespace, threads: int) -> BenchmarkConfig:
    quick = bool(args.quick)
    ab = None
    if args.ab is not None:
        clash = [f"--{o}" for o in ("drivers", "no_reference", "repeat") if getattr(args, o, None)]
        if clash:
            raise _err(f"--ab names the run's two drivers and pairs their runs; leave out "
                       f"{', '.join(c.replace('_', '-') for c in clash)}")
        from mlts.benchmark.paired import parse_ab

        ab = parse_ab(args.ab, _device_names())
    if args.images is not None and not 0 <= args.images <= 1500:
        raise _err(f"--images must be from 0 to 1500 (the held-out set), got {args.images}")
    return BenchmarkConfig(
        models=select_models(args.models, quick=quick),
        drivers=list(ab) if ab else select_drivers(args.drivers, reference=not args.no_reference),
        modes=parse_modes(args.modes),
        preference=parse_preference(args.preference).name,
        rules=PRESET_RULES["quick" if quick else "default"],
        images=args.images if args.images is not None else (QUICK_IMAGES if quick else DEFAULT_IMAGES),
        partition=not args.no_partition,
        reference_row=not args.no_reference and not ab,
        preset="quick" if quick else "default",
        timeout_s=DEFAULT_TIMEOUT_S if args.timeout is None else (args.timeout or None),
        threads=threads,
        repeat=(1 if ab else DEFAULT_REPEAT) if args.repeat is None else args.repeat,
        ab=ab,
    )


def _paths(arg: str) -> list[str]:
    """Comma-separated run directories (merged), as `mlts compare` takes them."""
    return [part for part in arg.split(",") if part] or [arg]


def _render(run_dir: Path, baseline: str | None, log) -> Path | None:
    """index.html through mlts.report when it is installed; a failure to render never loses the results,
    but one to write it (a full or read-only disk) is the run's error (WriteError)."""
    try:
        from mlts.report.render import render_report
    except ImportError:
        log("the HTML report is not available yet (mlts.report.render); results are in "
            f"{run_dir / RESULTS_FILE} and {run_dir / CSV_FILE}")
        return None
    out = run_dir / REPORT_FILE
    try:
        render_report([run_dir], out, baseline=_paths(baseline) if baseline else None)
    except WriteError:
        raise
    except Exception as e:  # the report is a view of the results: they are safe whatever happens here
        log(f"rendering {out} failed: {type(e).__name__}: {e}")
        return None
    return out


def _compare(baseline: str, run_dir: Path, log) -> tuple[int, dict | None]:
    from mlts.benchmark.compare import compare

    try:
        base = read_results(_paths(baseline))
        result = compare(base.records, read_results(run_dir).records)
    except MltsError as e:
        log(f"comparison with {baseline} failed: {e.message}")
        return EXIT_FAIL, None
    print(result.to_markdown(), file=sys.stderr)
    return result.exit_code(), {"verdict": result.verdict, "counts": result.counts()}


def _paired_status(records: list[dict], ab: list[str]) -> int:
    """Print the paired A/B table; 1 when a pair FAILed or was not compared."""
    from mlts.benchmark.paired import paired_exit_code, paired_results

    table, paired = paired_results(records, ab)
    print(f"\n### mlts benchmark --ab\n\n{table}", file=sys.stderr)
    return paired_exit_code(paired)


def _resume_specs(args: argparse.Namespace, run_file: Path, recorded: list[str]) -> list[str]:
    """The --driver specs of a resumed run: those given now, plus the recorded ones that may be loaded
    (mlts.runtime.app.plugins.recorded_specs: a run directory is data and runs no code by being resumed)."""
    from mlts.runtime.app.plugins import recorded_specs

    given = list(args.driver or [])
    return given + recorded_specs(recorded, given, trusted=args.trust_run_dir, source=f"--resume: {run_file}",
                                  trust_flag="--trust-run-dir")


def _exit_status(summary: RunSummary) -> int:
    if not summary.interrupted:
        return EXIT_OK
    try:
        return SIGNAL_EXIT_BASE + int(signal.Signals[summary.interrupted_by or "SIGINT"])
    except KeyError:
        return EXIT_INTERRUPTED


def run(args: argparse.Namespace) -> int:
    """`mlts benchmark`: select, run, write results.csv / environment.json / index.html, say where.
    SIGTERM is handled as Ctrl-C is (mlts.signals): the finished cases are reported."""
    with interrupt_on_signals():
        return _run_benchmark(args)


def _run_benchmark(args: argparse.Namespace) -> int:
    """Pin the thread pools first: driver services start when their drivers are registered, and
    inherit the pinned environment only if it is set by then."""
    if args.retry_errors and not args.resume:
        raise _err("--retry-errors only applies with --resume DIR")
    if args.trust_run_dir and not args.resume:
        raise _err("--trust-run-dir only applies with --resume DIR")
    resumed = _resume_config(args) if args.resume else None
    if resumed is not None:
        recorded = (resumed[1].get("config") or {}).get("threads", DEFAULT_THREADS)
        threads = parse_threads(recorded, f"{resumed[0] / RUN_FILE}: config.threads")
    else:
        threads = DEFAULT_THREADS if args.threads is None else parse_threads(args.threads)
    with ThreadPinning(threads):
        return _run_pinned(args, resumed, threads)


def _run_pinned(args: argparse.Namespace, resumed: tuple[Path, dict] | None, threads: int) -> int:
    from mlts.benchmark.environment import write_environment
    from mlts.runtime.app.plugins import driver_specs, normal_spec

    def log(line: str) -> None:
        print(f"mlts benchmark: {line}", file=sys.stderr, flush=True)

    if resumed is not None:
        run_dir, doc = resumed
        args.driver = _resume_specs(args, run_dir / RUN_FILE, list(doc.get("driver_specs") or []))
        register_cli_drivers(args)
        config = BenchmarkConfig.from_dict(doc["config"])
        missing = [d for d in config.drivers if d not in _device_names()]
        if missing:
            raise _err(f"--resume: driver(s) {', '.join(missing)} of the run are not available now "
                       "(give their --driver specs again)")
        log(f"resuming {run_dir} ({config.preset} preset)")
    else:
        register_cli_drivers(args)
        config = _new_config(args, threads)
        if args.out:
            run_dir = Path(args.out)
            if (run_dir / RESULTS_FILE).exists():
                raise _err(f"{run_dir} already holds a run; use --resume {run_dir} to continue it, "
                           "or another --out")
            make_dir(run_dir)
        else:
            run_dir = new_run_dir("reports")
    specs = [normal_spec(s) for s in driver_specs(args.driver)]
    if not (run_dir / ENVIRONMENT_FILE).exists():
        try:
            write_environment(run_dir, requested_threads=threads)
        except OSError as e:
            raise write_error(e.filename or run_dir / ENVIRONMENT_FILE, e) from None
    runner = BenchmarkRunner
    if config.ab:
        from mlts.benchmark.paired import PairedRunner as runner
    summary = runner(config, run_dir, stream=sys.stderr, retry_errors=args.retry_errors, driver_specs=specs).run()
    records = read_results(run_dir)
    for problem in records.problems:
        log(problem)
    try:
        to_csv(records.records, run_dir / CSV_FILE)
    except OSError as e:
        raise write_error(run_dir / CSV_FILE, e) from None
    report = None if args.no_report else _render(run_dir, args.baseline, log)
    status = _exit_status(summary)
    if not summary.cases and summary.skipped_models and not summary.interrupted:
        log("no case could run: every selected model lacks its trained weights")
        status = EXIT_FAIL
    if config.ab:
        status = status or _paired_status(records.benchmark_records(), config.ab)
    comparison = None
    if args.baseline and not summary.interrupted:
        code, comparison = _compare(args.baseline, run_dir, log)
        status = status or code
    c = summary.counts
    log(f"done in {summary.elapsed_s:.0f} s: {c.get('ok', 0)} ok, {c.get('unsupported', 0)} unsupported, "
        f"{c.get('error', 0)} error record(s)" + (f"; skipped {len(summary.skipped_models)} model(s) without "
                                                  "trained weights" if summary.skipped_models else ""))
    if summary.interrupted:
        log(f"interrupted by {summary.interrupted_by}: exit status {status}; --resume {run_dir} continues")
    if args.json:
        out = summary.to_dict()
        out.update({"report": str(report) if report else None, "results": str(run_dir / RESULTS_FILE),
                    "csv": str(run_dir / CSV_FILE), "comparison": comparison, "exit_status": status})
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        print(f"report: {report}" if report else f"results: {run_dir / RESULTS_FILE}")
    return status


def _device_names() -> list[str]:
    from mlts.runtime import devices

    return [d.name for d in devices()]
