"""`mlts report RUN_DIR_OR_RESULTS... [-o OUT.html] [--baseline RUN] [--title T]`: re-render the HTML
report (mlts.report.render) from any set of results files, merging runs from several machines or
drivers into one page.

Exit status: 0 written, 2 bad input (an unreadable or malformed results file, no output path where one
is needed, an unwritable output), with a one-line error naming the file.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlts.benchmark.records import read_results
from mlts.report.render import INDEX_FILE, render_report
from mlts.runtime import MltsError, ResultCode

from .options import run_alone, split_paths

NAME = "report"
HELP = "render the HTML report from results files (merging several runs)"
EXIT_BAD_INPUT = 2


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `report` subcommand to the `mlts` parser's subparsers (sets func=run)."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Render the self-contained HTML report (inline CSS and SVG charts, no network) from one "
                    "or more run directories or results.jsonl files. Several inputs are merged: runs from "
                    "several machines or drivers become one comparison, each driver compared with the CPU "
                    "reference measured on its own machine. Exit status: 0 written, 2 unreadable input.")
    p.add_argument("inputs", nargs="+", metavar="RUN_DIR_OR_RESULTS",
                   help="run directory (holding results.jsonl) or results.jsonl file; repeat to merge")
    p.add_argument("-o", "--output", metavar="OUT.html",
                   help=f"where to write the report (default: {INDEX_FILE} in the run directory when exactly "
                        "one run directory is given; required otherwise)")
    p.add_argument("--baseline", action="append", default=None, metavar="RUN",
                   help="baseline run directory or results.jsonl: adds a PASS/WARN/FAIL comparison section "
                        "(repeat or comma-separate to merge several; a path that exists is never split)")
    p.add_argument("--title", help="the report's title (default: mlts benchmark report)")
    p.set_defaults(func=run)
    return p


def _output_path(args: argparse.Namespace) -> Path:
    if args.output:
        return Path(args.output)
    if len(args.inputs) == 1 and Path(args.inputs[0]).is_dir():
        return Path(args.inputs[0]) / INDEX_FILE
    raise MltsError(ResultCode.BAD_DATA, "-o OUT.html is required unless exactly one run directory is given")


def run(args: argparse.Namespace) -> int:
    """Render and write the report; returns the exit status (see the module docstring)."""
    baseline = None
    if args.baseline:
        baseline = [part for arg in args.baseline for part in split_paths(arg)]
    try:
        out = _output_path(args)
        results = read_results(list(args.inputs))
        for problem in results.problems:
            print(f"mlts report: warning: {problem}", file=sys.stderr)
        written = render_report(results, out, baseline=baseline, title=args.title)
    except MltsError as e:
        print(f"mlts report: error: {e.message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {written}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry: `python -m mlts.cli.report RUN_DIR ...` is `mlts report RUN_DIR ...`."""
    return run_alone(NAME, add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
