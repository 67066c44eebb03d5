"""`mlts profile MODEL --driver D`: where a model's computation spends its time on one driver, operation by
operation. Drivers that report per-operation times (the HAL's IOperationProfiling: nnapi-reference, the
sample drivers, mlts-fast) are asked for them; any other driver, or any driver with --single-op, has each
operation timed alone as a single-operation model (mlts.benchmark.model_profile)."""
from __future__ import annotations

import argparse
import json
import os
import sys

NAME = "profile"
HELP = "time each operation of a model on one driver (per-operation profile)"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `profile` subcommand (sets func=run)."""
    p = subparsers.add_parser(NAME, help=HELP, description=__doc__)
    p.add_argument("model", help="a zoo model's name (see `mlts models`) or the path of an .onnx file")
    p.add_argument("--driver", required=True, metavar="D",
                   help="the device to profile (see `mlts devices`), or a driver spec that adds exactly one "
                        "(as `mlts benchmark --driver`)")
    p.add_argument("--load", action="append", default=[], metavar="SPEC",
                   help="add the drivers of a spec first (repeatable), e.g. --load sample --driver sample-quant")
    p.add_argument("--in-process", action="store_true",
                   help="host the drivers of specs in this process instead of driver services")
    p.add_argument("--single-op", action="store_true",
                   help="time each operation alone even when the driver reports per-operation times")
    p.add_argument("--runs", type=int, default=10, metavar="N", help="runs to average per operation (default 10)")
    p.add_argument("--top", type=int, metavar="N", help="list only the N slowest operations")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
    return p


def _load_model(name: str):
    """The imported model of a zoo name or an .onnx path."""
    from mlts.models import import_onnx
    from mlts.models.zoo_registry import load, zoo

    if name in {e.name for e in zoo()} and not os.path.exists(name):
        return load(name).model
    return import_onnx(name).model


def _device(args: argparse.Namespace):
    """--driver's device: a known device's name, else the one device its spec adds."""
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


def run(args: argparse.Namespace) -> int:
    """Print the profile (a table, or JSON)."""
    from mlts.benchmark.model_profile import profile_model
    from mlts.runtime import MltsError, ResultCode, get_device
    from mlts.runtime.drivers.reference import REFERENCE_DEVICE_NAME

    if args.runs < 1 or (args.top is not None and args.top < 1):
        raise MltsError(ResultCode.BAD_DATA, "--runs and --top must be at least 1")
    device = _device(args)
    model = _load_model(args.model)
    profile = profile_model(args.model, model, device, runs=args.runs, single_op=args.single_op,
                            reference=get_device(REFERENCE_DEVICE_NAME))
    if args.json:
        json.dump(profile.to_dict(), sys.stdout, indent=2)
        print()
        return 0
    _print_table(profile, args.top)
    return 0


def _print_table(profile, top: int | None) -> None:
    how = ("per-operation times the driver reported" if profile.method == "driver"
           else "each operation timed alone as a single-operation model")
    print(f"{profile.model} on {profile.driver}: {how}, mean of up to {profile.runs} run(s)")
    if profile.note and profile.method != "driver":
        print(f"({profile.note})")
    ops = profile.operations
    if top is not None:
        ops = sorted((o for o in ops if o.mean_us is not None), key=lambda o: -o.mean_us)[:top]
    width = max([16] + [len(o.device) for o in ops])
    print(f"{'op':>5}  {'type':<24} {'device':<{width}} {'mean us':>11} {'share':>7}  source")
    for o in ops:
        if o.mean_us is None:
            print(f"{o.index:>5}  {o.type:<24} {o.device:<{width}} {'–':>11} {'':>7}  {o.status}: {o.message}")
            continue
        print(f"{o.index:>5}  {o.type:<24} {o.device:<{width}} {o.mean_us:>11.1f} {100 * (o.share or 0):>6.1f}%  "
              f"{o.source}")
    print()
    print(f"{'type':<24} {'count':>5} {'total us':>11} {'share':>7}")
    for kind, n, us, share in profile.by_type():
        print(f"{kind:<24} {n:>5} {us:>11.1f} {100 * share:>6.1f}%")
