#!/usr/bin/env python3
"""Print the README's nnapi-cts tables from real runs: operation x operand type with the number of cases
(case and variant) and, per driver, how many passed on every execution path; then each driver's statuses
per path. Input: run directories or results.jsonl files of `mlts conformance --suite nnapi-cts`.

    python tools/cts_table.py RUN_DIR [RUN_DIR ...] [--drivers nnapi-reference,sample-all,...]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlts.benchmark.records import read_results  # noqa: E402
from mlts.conformance.nnapi_cts.tables import cts_records, markdown_path_table, markdown_table  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories or results.jsonl files")
    parser.add_argument("--drivers", help="column order (comma-separated; default: as they appear)")
    args = parser.parse_args(argv)
    records = cts_records(read_results(args.runs).records)
    if not records:
        print("no nnapi-cts records", file=sys.stderr)
        return 1
    order = [d.strip() for d in args.drivers.split(",") if d.strip()] if args.drivers else None
    print(markdown_path_table(records, order))
    print(markdown_table(records, order), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
