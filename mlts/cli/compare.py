"""`mlts compare BASELINE CURRENT`: the argument handling and output of the baseline comparison
(mlts.benchmark.compare decides).

Exit status: 0 PASS or WARN, 1 FAIL (or WARN with --fail-on-warn), 2 bad input (an unreadable or
malformed results file, a bad threshold), with a one-line error naming the file or threshold.
"""
from __future__ import annotations

import argparse
import sys

from mlts.benchmark.compare import Thresholds, compare
from mlts.benchmark.records import read_results
from mlts.fileio import atomic_write
from mlts.runtime import MltsError, ResultCode

from .options import run_alone, split_paths

NAME = "compare"
HELP = "compare a run with a baseline; exits 1 on a regression"
EXIT_BAD_INPUT = 2


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `compare` subcommand to the `mlts` parser's subparsers (sets func=run)."""
    d = Thresholds()
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Compare benchmark results with a baseline, case by case (model x driver x mode): "
                    "latency and accuracy deltas, a PASS/WARN/FAIL verdict per case and overall. "
                    "Where both records keep their latency samples, latency is decided on them: a "
                    "Mann-Whitney U test and a bootstrap interval of the ratio of medians; a slowdown FAILs "
                    "only when it is significant and the whole interval is above --latency-slowdown. Older "
                    "records are judged on their medians, and a change within the runs' own spread is never "
                    "a regression. Exit status: 0 PASS or WARN, 1 FAIL, 2 unreadable input.")
    p.add_argument("baseline", help="baseline run directory or results.jsonl (comma-separate to merge several; "
                        "a path that exists is never split)")
    p.add_argument("current", help="current run directory or results.jsonl (comma-separate to merge several; "
                        "a path that exists is never split)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON instead of markdown")
    p.add_argument("--markdown", metavar="FILE", help="also write the markdown summary to FILE (for a CI comment)")
    p.add_argument("--latency-slowdown", type=float, default=d.latency_slowdown_pct, metavar="PCT",
                   help="with samples: a significant slowdown FAILs when the interval of the median ratio lies "
                        f"above +PCT percent (default {d.latency_slowdown_pct:g})")
    p.add_argument("--alpha", type=float, default=d.alpha, metavar="P",
                   help=f"with samples: significance level of the Mann-Whitney U test (default {d.alpha:g})")
    p.add_argument("--confidence", type=float, default=d.confidence, metavar="C",
                   help=f"with samples: confidence of the bootstrap interval (default {d.confidence:g})")
    p.add_argument("--run-noise", type=float, default=d.run_noise_pct, metavar="PCT",
                   help="with samples: run-to-run noise assumed on each side's level, a standard deviation per run "
                        "in percent; the spread measured between repetitions (--repeat) or merged runs replaces "
                        f"it when larger, and N runs divide it by sqrt(N) (default {d.run_noise_pct:g}, measured "
                        "by benchmarks/ci_gate.py; 0 trusts one run's samples alone)")
    p.add_argument("--latency-warn", type=float, default=d.latency_warn_pct, metavar="PCT",
                   help="median latency growth that WARNs, in percent; with samples, a significant slowdown "
                        f"WARNs when its interval reaches above it (default {d.latency_warn_pct:g})")
    p.add_argument("--latency-fail", type=float, default=d.latency_fail_pct, metavar="PCT",
                   help="without samples: median latency growth that FAILs, in percent "
                        f"(default {d.latency_fail_pct:g})")
    p.add_argument("--accuracy-warn", type=float, default=d.accuracy_warn_points, metavar="POINTS",
                   help=f"accuracy/agreement drop that WARNs, in percentage points (default {d.accuracy_warn_points:g})")
    p.add_argument("--accuracy-fail", type=float, default=d.accuracy_fail_points, metavar="POINTS",
                   help=f"accuracy/agreement drop that FAILs, in percentage points (default {d.accuracy_fail_points:g})")
    p.add_argument("--noise-k", type=float, default=d.noise_k, metavar="K",
                   help="without samples: a latency growth must exceed K x the larger run spread, "
                        f"max(p90 - p50, std/sqrt(n)), to count (default {d.noise_k:g})")
    p.add_argument("--fail-on-warn", action="store_true", help="exit 1 on WARN too")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run the comparison and print it; returns the exit status (see the module docstring)."""
    try:
        thresholds = Thresholds(latency_warn_pct=args.latency_warn, latency_fail_pct=args.latency_fail,
                                accuracy_warn_points=args.accuracy_warn, accuracy_fail_points=args.accuracy_fail,
                                noise_k=args.noise_k, latency_slowdown_pct=args.latency_slowdown,
                                alpha=args.alpha, confidence=args.confidence, run_noise_pct=args.run_noise)
        baseline = read_results(split_paths(args.baseline))
        current = read_results(split_paths(args.current))
        for side, results in ((args.baseline, baseline), (args.current, current)):
            if not results.benchmark_records():
                raise MltsError(ResultCode.BAD_DATA, f"{side}: no benchmark records")
        def origin(record: dict) -> str | None:
            source = baseline.source_of(record) or current.source_of(record)
            return str(source.path) if source else None

        result = compare(baseline.records, current.records, thresholds, origin=origin)
    except MltsError as e:
        print(f"mlts compare: error: {e.message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    result.notes[:0] = baseline.problems + current.problems
    for problem in baseline.problems + current.problems:
        print(f"mlts compare: warning: {problem}", file=sys.stderr)
    markdown = result.to_markdown()
    if args.markdown:
        try:
            atomic_write(args.markdown, markdown)
        except OSError as e:
            print(f"mlts compare: error: cannot write {args.markdown}: {e.strerror or e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    sys.stdout.write(result.to_json() + "\n" if args.json else markdown)
    return result.exit_code(fail_on_warn=args.fail_on_warn)


def main(argv: list[str] | None = None) -> int:
    """Standalone entry: `python -m mlts.cli.compare BASELINE CURRENT ...` is `mlts compare ...`."""
    return run_alone(NAME, add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
