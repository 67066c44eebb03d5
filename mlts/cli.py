"""The `mlts` command line: devices, models, benchmark, stress, conformance, report, compare, import, graphdump."""
from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import warnings
from typing import Sequence

from .fileio import WriteError
from .runtime import MltsError
from .signals import exit_status

def add_driver_options(parser: argparse.ArgumentParser) -> None:
    """`--driver SPEC` (repeatable) and `--in-process`: the drivers a run adds to the built-in devices."""
    parser.add_argument("--driver", action="append", default=[], metavar="SPEC",
                        help="add a driver for this run (repeatable; also $MLTS_DRIVERS, comma-separated): "
                             "faulty:<fault>@<stage> (or faulty:all), sample, package.module:factory, "
                             "or path/to/driver.py[:factory]")
    parser.add_argument("--in-process", action="store_true",
                        help="host the --driver drivers in this process instead of driver services "
                             "(faster to start; a crashing driver then takes mlts down)")


def register_cli_drivers(args: argparse.Namespace) -> list:
    """Register the drivers of --driver and $MLTS_DRIVERS; every subcommand that runs drivers calls this."""
    from .runtime.plugins import driver_specs, register_drivers

    specs = driver_specs(getattr(args, "driver", None) or [])
    return register_drivers(specs, hosting="in-process" if getattr(args, "in_process", False) else None)


def _perf(p) -> dict | None:
    """JSON has no infinity: a type the driver does not offer is null."""
    if p.exec_time == float("inf") or p.power_usage == float("inf"):
        return None
    return {"exec_time": p.exec_time, "power_usage": p.power_usage}


def _capabilities_summary(caps) -> str:
    """One line: the declared (exec time/power) per group of operand types, relative to the CPU's 1.0."""
    from .runtime import OperandCode

    groups: dict[tuple[float, float], list[str]] = {}
    for code in OperandCode:
        p = caps.performance(code)
        if p.exec_time != float("inf"):
            groups.setdefault((p.exec_time, p.power_usage), []).append(code.name)
    if not groups:
        return "no operand types"
    parts = []
    for (t, w), names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        which = "all types" if len(names) == len(OperandCode) else (
            ",".join(n.replace("TENSOR_", "T_") for n in names) if len(names) <= 4 else f"{len(names)} types")
        parts.append(f"{t:g}/{w:g} {which}")
    return "; ".join(parts)


def _device_row(d) -> dict:
    row = {"name": d.name, "type": d.type.name, "version": d.version, "feature_level": d.feature_level,
           "hosting": d.hosting, "source": getattr(d.driver, "mlts_source", None) or "built-in"}
    try:
        caps = d.capabilities
        row.update({
            "capabilities": _capabilities_summary(caps),
            "performance": {code.name: _perf(p) for code, p in sorted(caps.operand_performance.items())},
            "relaxed_float32_to_float16": _perf(caps.relaxed_float32_to_float16_performance_tensor),
            "relaxed_float32_to_float16_scalar": _perf(caps.relaxed_float32_to_float16_performance_scalar),
            "if_performance": _perf(caps.if_performance),
            "while_performance": _perf(caps.while_performance),
        })
        row["cache_files"] = list(d.driver.get_number_of_cache_files_needed())
        row["extensions"] = list(d.driver.get_supported_extensions())
    except MltsError as e:  # a dead or broken driver is listed, with what went wrong
        row.update({"capabilities": f"unavailable ({e})", "error": str(e)})
    except Exception as e:
        row.update({"capabilities": f"unavailable ({type(e).__name__}: {e})", "error": f"{type(e).__name__}: {e}"})
    return row


def _level(value: int) -> str:
    from .runtime import FeatureLevel

    try:
        return FeatureLevel(value).name.lower().replace("_", " ")
    except ValueError:
        return str(value)


def _cmd_devices(args: argparse.Namespace) -> int:
    from .runtime import devices

    register_cli_drivers(args)
    rows = [_device_row(d) for d in devices()]
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    width = max([24] + [len(r["name"]) + 1 for r in rows])
    print(f"{'name':<{width}} {'type':<12} {'version':<10} {'feature level':<14} {'hosting':<11} "
          "capabilities (exec time/power vs CPU)")
    for r in rows:
        print(f"{r['name']:<{width}} {r['type']:<12} {r['version']:<10} {_level(r['feature_level']):<14} "
              f"{r['hosting']:<11} {r['capabilities']}")
    return 0


def _cmd_models(args: argparse.Namespace) -> int:
    from .models.zoo_registry import zoo

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

    register_cli_drivers(args)  # the plan shows where each operation would run, these drivers included
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlts", description="ML Test Suite for neural-network drivers")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("devices", help="list the available devices (drivers)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_driver_options(p)
    p.set_defaults(func=_cmd_devices)
    p = sub.add_parser("models", help="list the bundled model zoo")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_models)
    p = sub.add_parser("import", help="import an ONNX model and print the NNAPI graph, its operand types, "
                                      "the devices supporting each operation and the partition plan")
    p.add_argument("model", help="path of an .onnx file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_import)
    add_driver_options(p)
    p = sub.add_parser("graphdump", help="import an ONNX model and write its NNAPI graph in Graphviz dot format")
    p.add_argument("model", help="path of an .onnx file")
    p.add_argument("-o", "--output", help="output .dot file (default: standard output)")
    p.set_defaults(func=_cmd_graphdump)
    from .benchmark.compare_cli import add_compare_parser

    add_compare_parser(sub)  # sets func=run_compare
    from .report.report_cli import add_report_parser

    add_report_parser(sub)
    from .benchmark.benchmark_cli import add_benchmark_parser

    add_benchmark_parser(sub)  # sets func=run_benchmark
    from .stress.stress_cli import add_conformance_parser, add_fuzz_parser, add_stress_parser

    add_stress_parser(sub)  # sets func=run_stress
    add_conformance_parser(sub)  # sets func=run_conformance
    add_fuzz_parser(sub)  # sets func=run_fuzz
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (a plugin that failed to load, ...) as one plain line on stderr."""
    print(f"mlts: warning: {str(message).removeprefix('mlts: ')}", file=sys.stderr if file is None else file)


#: OSErrors of a path that could not be written (EACCES and EPERM too: mlts turns its own read failures
#: into MltsError, so a permission error that reaches main is, in practice, one on a file it writes).
_WRITE_ERRNOS = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.ENOTDIR, errno.EISDIR,
                           errno.EEXIST, errno.EACCES, errno.EPERM})


def _os_error_line(e: OSError) -> str:
    """An OSError that escaped a command as one line: `cannot write <path>: <cause>` where it names one."""
    cause = e.strerror or str(e)
    if e.filename is None:
        return cause
    path = os.fsdecode(e.filename)
    return f"cannot write {path}: {cause}" if e.errno in _WRITE_ERRNOS else f"{path}: {cause}"


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status 0/1 as each command documents; 130 (SIGINT) or 143 (SIGTERM) when interrupted."""
    args = build_parser().parse_args(argv)
    warnings.showwarning = _show_warning
    try:
        return args.func(args)
    except WriteError as e:  # one line, no result code: `mlts <command>: error: cannot write <path>: <cause>`
        print(f"mlts {args.command}: error: {e.message}", file=sys.stderr)
        return 1
    except MltsError as e:
        print(f"mlts {args.command}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into `head` and the like
        return 0
    except OSError as e:  # the last resort for a path that could not be written: never a traceback
        print(f"mlts {args.command}: error: {_os_error_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM where the command handles it (mlts.signals)
        print(f"mlts {args.command}: interrupted", file=sys.stderr)
        return exit_status(e)


if __name__ == "__main__":
    sys.exit(main())
