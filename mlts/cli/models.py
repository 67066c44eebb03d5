"""`mlts models [--json]`: the bundled model zoo, with each model's size and whether its trained weights
are there."""
from __future__ import annotations

import argparse
import json
import sys

NAME = "models"
HELP = "list the bundled model zoo"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `models` subcommand (sets func=run)."""
    p = subparsers.add_parser(NAME, help=HELP)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Print one row per zoo model (a table, or JSON)."""
    from mlts.models.zoo_registry import zoo

    entries = zoo()
    rows = [{"name": e.name, "task": e.task, "family": e.family, "width": e.alpha, "resolution": e.resolution,
             "input": list(e.input_shape), "quantization": e.quantization or "float32", "parameters": e.parameters,
             "macs": e.macs, "trained_weights": e.available} for e in entries]
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    print(f"{'name':<40} {'task':<24} {'type':<8} {'params':>9} {'MACs':>8}  weights")
    for e, r in zip(entries, rows):
        print(f"{r['name']:<40} {r['task']:<24} {r['quantization']:<8} {r['parameters'] / 1e6:>8.2f}M "
              f"{r['macs'] / 1e6:>7.1f}M  {'trained' if r['trained_weights'] else f'missing (run {e.architecture.trainer})'}")
    return 0
