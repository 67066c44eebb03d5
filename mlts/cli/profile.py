"""`mlts profile MODEL --driver D`: where a model's computation spends its time on one driver, operation by
operation. Drivers that report per-operation times (the HAL's IOperationProfiling: nnapi-reference, the
sample drivers, mlts-fast) are asked for them; any other driver, or any driver with --single-op, has each
operation timed alone as a single-operation model (mlts.benchmark.model_profile)."""
from __future__ import annotations

import argparse
import json
import sys

from .options import add_single_driver_options, load_model_arg, single_device

NAME = "profile"
HELP = "time each operation of a model on one driver (per-operation profile)"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `profile` subcommand (sets func=run)."""
    p = subparsers.add_parser(NAME, help=HELP, description=__doc__)
    p.add_argument("model", help="a zoo model's name (see `mlts models`) or the path of an .onnx file")
    add_single_driver_options(p, "the device to profile", required=True)
    p.add_argument("--single-op", action="store_true",
                   help="time each operation alone even when the driver reports per-operation times")
    p.add_argument("--runs", type=int, default=10, metavar="N", help="runs to average per operation (default 10)")
    p.add_argument("--top", type=int, metavar="N", help="list only the N slowest operations")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Print the profile (a table, or JSON)."""
    from mlts.benchmark.model_profile import profile_model
    from mlts.runtime import MltsError, ResultCode, get_device
    from mlts.runtime.drivers.reference import REFERENCE_DEVICE_NAME

    if args.runs < 1 or (args.top is not None and args.top < 1):
        raise MltsError(ResultCode.BAD_DATA, "--runs and --top must be at least 1")
    device = single_device(args)
    model = load_model_arg(args.model).model
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
