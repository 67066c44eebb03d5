"""`mlts import MODEL.onnx [--json]`: what the ONNX importer makes of a model: the NNAPI graph, its
operand types, the devices supporting each operation and the partition plan. (`import` is a Python
keyword, hence the module's name.)"""
from __future__ import annotations

import argparse
import json
import sys

from .options import add_driver_options, register_cli_drivers

NAME = "import"
HELP = ("import an ONNX model and print the NNAPI graph, its operand types, the devices supporting each operation "
        "and the partition plan")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `import` subcommand (sets func=run)."""
    p = subparsers.add_parser(NAME, help=HELP)
    p.add_argument("model", help="path of an .onnx file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
    add_driver_options(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Import the model and describe it (text, or JSON)."""
    from mlts.models import import_onnx

    register_cli_drivers(args)  # the plan shows where each operation would run, these drivers included
    imported = import_onnx(args.model)
    if args.json:
        json.dump(imported.describe_dict(), sys.stdout, indent=2)
        print()
    else:
        print(imported.describe())
    return 0
