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

    rows = [{"name": e.name, "family": e.family, "width": e.alpha, "resolution": e.resolution,
             "quantization": e.quantization or "float32", "parameters": e.parameters, "macs": e.macs,
             "trained_weights": e.available} for e in zoo()]
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    print(f"{'name':<34} {'type':<8} {'params':>9} {'MACs':>8}  weights")
    for r in rows:
        print(f"{r['name']:<34} {r['quantization']:<8} {r['parameters'] / 1e6:>8.2f}M {r['macs'] / 1e6:>7.1f}M  "
              f"{'trained' if r['trained_weights'] else 'missing (run tools/train_zoo.py)'}")
    return 0
