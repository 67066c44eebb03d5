"""`mlts fuzz`: property-based fuzzing (mlts.stress.fuzz) of model building, validation and ONNX import."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "fuzz"
HELP = "property-based fuzzing of model building, validation and ONNX import"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """The `fuzz` subcommand (sets func=run)."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Random and mutated models and ONNX files must only ever produce MltsError; anything "
                    "else is saved as a reproducer (exit status 1).")
    p.add_argument("--seconds", type=float, default=60.0, metavar="N", help="how long to fuzz (default 60)")
    p.add_argument("--targets", default="all", metavar="NAMES",
                   help="comma-separated: model, onnx (default: all)")
    p.add_argument("--out", metavar="DIR", default="reports/fuzz", help="where reproducers go (default reports/fuzz)")
    p.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Fuzz; 1 when a reproducer was saved."""
    from mlts.stress.fuzz import fuzz

    targets = [t for t in args.targets.split(",") if t.strip()]
    report = fuzz(args.seconds, out_dir=Path(args.out), targets=None if targets == ["all"] else targets,
                  seed=args.seed, log=lambda line: print(f"mlts fuzz: {line}", file=sys.stderr, flush=True))
    print(report.summary())
    return 0 if not report.crashes else 1
