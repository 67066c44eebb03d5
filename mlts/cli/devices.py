"""`mlts devices [--json]`: every device (driver) with its type, version, feature level, hosting and
declared performance, the --driver drivers included; a broken driver is listed with what went wrong."""
from __future__ import annotations

import argparse
import json
import sys

from mlts.runtime import MltsError

from .options import add_driver_options, register_cli_drivers

NAME = "devices"
HELP = "list the available devices (drivers)"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `devices` subcommand (sets func=run)."""
    p = subparsers.add_parser(NAME, help=HELP)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_driver_options(p)
    p.set_defaults(func=run)
    return p


def _perf(p) -> dict | None:
    """JSON has no infinity: a type the driver does not offer is null."""
    if p.exec_time == float("inf") or p.power_usage == float("inf"):
        return None
    return {"exec_time": p.exec_time, "power_usage": p.power_usage}


def _capabilities_summary(caps) -> str:
    """One line: the declared (exec time/power) per group of operand types, relative to the CPU's 1.0."""
    from mlts.runtime import OperandCode

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
    from mlts.runtime import FeatureLevel

    try:
        return FeatureLevel(value).name.lower().replace("_", " ")
    except ValueError:
        return str(value)


def run(args: argparse.Namespace) -> int:
    """Register the --driver drivers, then print one row per device (a table, or JSON)."""
    from mlts.runtime import devices

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
