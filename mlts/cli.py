"""The `mlts` command line: devices, models, benchmark, stress, report, compare, import, graphdump."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from .runtime import MltsError

NOT_YET = {
    "benchmark": "the benchmark and HTML report",
    "stress": "the stress suite",
    "report": "report rendering",
    "compare": "baseline comparison",
}


def _cmd_devices(args: argparse.Namespace) -> int:
    from .runtime import devices

    rows = []
    for d in devices():
        caps = d.capabilities
        rows.append({
            "name": d.name, "type": d.type.name, "version": d.version, "feature_level": d.feature_level,
            "hosting": d.hosting,
            "performance": {code.name: {"exec_time": p.exec_time, "power_usage": p.power_usage}
                            for code, p in sorted(caps.operand_performance.items())},
            "relaxed_float32_to_float16": {
                "exec_time": caps.relaxed_float32_to_float16_performance_tensor.exec_time,
                "power_usage": caps.relaxed_float32_to_float16_performance_tensor.power_usage},
        })
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    print(f"{'name':<24} {'type':<12} {'version':<10} {'feature level':<14} hosting")
    for r in rows:
        print(f"{r['name']:<24} {r['type']:<12} {r['version']:<10} {r['feature_level']:<14} {r['hosting']}")
    return 0


def _cmd_models(args: argparse.Namespace) -> int:
    from .models.zoo import zoo

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


def _cmd_import(args: argparse.Namespace) -> int:
    from .models import import_onnx

    imported = import_onnx(args.model)
    if args.json:
        json.dump(imported.describe_dict(), sys.stdout, indent=2)
        print()
    else:
        print(imported.describe())
    return 0


def _cmd_graphdump(args: argparse.Namespace) -> int:
    from .models import import_onnx

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


def _not_yet(name: str):
    def run(args: argparse.Namespace) -> int:
        print(f"mlts {name}: not yet available ({NOT_YET[name]} is still being built)", file=sys.stderr)
        return 2
    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlts", description="ML Test Suite for neural-network drivers")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("devices", help="list the available devices (drivers)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_devices)
    p = sub.add_parser("models", help="list the bundled model zoo")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_models)
    p = sub.add_parser("import", help="import an ONNX model and print the NNAPI graph, its operand types, "
                                      "the devices supporting each operation and the partition plan")
    p.add_argument("model", help="path of an .onnx file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_import)
    p = sub.add_parser("graphdump", help="import an ONNX model and write its NNAPI graph in Graphviz dot format")
    p.add_argument("model", help="path of an .onnx file")
    p.add_argument("-o", "--output", help="output .dot file (default: standard output)")
    p.set_defaults(func=_cmd_graphdump)
    for name in NOT_YET:
        p = sub.add_parser(name, help=f"{NOT_YET[name]} (not yet available)")
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=_not_yet(name))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except MltsError as e:
        print(f"mlts {args.command}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into `head` and the like
        return 0


if __name__ == "__main__":
    sys.exit(main())
