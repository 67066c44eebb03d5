"""`mlts graphdump MODEL.onnx [-o OUT.dot]`: an imported model's NNAPI graph in Graphviz dot format."""
from __future__ import annotations

import argparse
import sys

NAME = "graphdump"
HELP = "import an ONNX model and write its NNAPI graph in Graphviz dot format"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `graphdump` subcommand (sets func=run)."""
    p = subparsers.add_parser(NAME, help=HELP)
    p.add_argument("model", help="path of an .onnx file")
    p.add_argument("-o", "--output", help="output .dot file (default: standard output)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Write the dot text to --output (or stdout); 1 when the file cannot be written."""
    from mlts.models import import_onnx

    imported = import_onnx(args.model)
    dot = imported.graph_dump()
    if args.output in (None, "-"):
        sys.stdout.write(dot)
        return 0
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(dot)
    except OSError as e:
        print(f"mlts graphdump: error: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"wrote {args.output} ({imported.model.operation_count} operations)")
    return 0
