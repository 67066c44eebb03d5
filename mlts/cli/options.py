"""Options and argument helpers that several `mlts` subcommands share. A leaf of mlts.cli: it imports
no other module of the package, so every subcommand module can use it without an import cycle."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Sequence


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
    from mlts.runtime.app.plugins import driver_specs
    from mlts.runtime.app.manager import register_drivers

    specs = driver_specs(getattr(args, "driver", None) or [])
    return register_drivers(specs, hosting="in-process" if getattr(args, "in_process", False) else None)


def add_single_driver_options(parser: argparse.ArgumentParser, what: str, *, required: bool) -> None:
    """`--driver D` naming one device (or a spec adding exactly one), `--load SPEC`, `--in-process`."""
    parser.add_argument("--driver", required=required, metavar="D",
                        help=f"{what} (see `mlts devices`), or a driver spec that adds exactly one "
                             "(as `mlts benchmark --driver`)")
    parser.add_argument("--load", action="append", default=[], metavar="SPEC",
                        help="add the drivers of a spec first (repeatable), e.g. --load sample --driver sample-quant")
    parser.add_argument("--in-process", action="store_true",
                        help="host the drivers of specs in this process instead of driver services")


def single_device(args: argparse.Namespace) -> Any:
    """--driver's device: a known device's name, else the one device its spec adds (after --load's)."""
    from mlts.runtime import MltsError, ResultCode, devices
    from mlts.runtime.app.manager import register_drivers

    hosting = "in-process" if args.in_process else None
    if args.load:
        register_drivers(args.load, hosting=hosting)
    by_name = {d.name: d for d in devices()}
    if args.driver in by_name:
        return by_name[args.driver]
    try:
        added = register_drivers([args.driver], hosting=hosting)
    except MltsError as e:
        raise MltsError(ResultCode.BAD_DATA, f"--driver {args.driver}: no device has that name (see `mlts devices`), "
                                             f"and as a driver spec: {e.message}") from None
    if len(added) != 1:
        names = ", ".join(d.name for d in added) or "none"
        raise MltsError(ResultCode.BAD_DATA, f"--driver {args.driver} adds {len(added)} devices ({names}): "
                                             f"name one of them with --driver NAME --load {args.driver}")
    return added[0]


def load_model_arg(name: str) -> Any:
    """The ImportedModel of a zoo model's name or an .onnx path."""
    from mlts.models import import_onnx
    from mlts.models.zoo_registry import load, zoo

    if name in {e.name for e in zoo()} and not os.path.exists(name):
        return load(name)
    return import_onnx(name)


def split_paths(arg: str) -> list[str]:
    """The run directories / results files one argument names: itself when it exists (a directory
    name may hold commas), else its comma-separated pieces, each the longest run of pieces that
    exists ("a,b,c" with a directory "a,b" is ["a,b", "c"]); a piece that exists nowhere is kept as
    is, so the reader's error names it."""
    if not arg or os.path.exists(arg):
        return [arg]
    parts, out, i = arg.split(","), [], 0
    while i < len(parts):
        j = next((j for j in range(len(parts), i + 1, -1) if os.path.exists(",".join(parts[i:j]))), i + 1)
        if ",".join(parts[i:j]):
            out.append(",".join(parts[i:j]))
        i = j
    return out or [arg]


def run_alone(name: str, add_parser: Callable[[Any], argparse.ArgumentParser], argv: Sequence[str] | None) -> int:
    """`python -m mlts.cli.<module> ARGS` as `mlts <name> ARGS`: one subcommand's parser on its own, its
    run's exit status (without main()'s handling of errors and interruptions)."""
    parser = argparse.ArgumentParser(prog="mlts")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([name, *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)
