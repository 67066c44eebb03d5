"""`mlts diff MODEL [--driver D] [--against onnxruntime|nnapi-reference] [--input FILE]`: where a driver (or
mlts itself) departs from a reference, operation by operation.

Each NNAPI operation of the imported model is run alone on the driver, fed the reference's values of its
inputs, and judged by NNAPI's per-operation tolerance (this names the operation at fault); the whole model
is also run once with every operation's result kept (this shows where a drift grows). Against onnxruntime
each NNAPI operation is compared with the ONNX tensor it computes and named by its ONNX node. Exit status
0 every judged operation within tolerance, 1 an operation out of tolerance or failing, 2 bad input (a model,
driver or --input that cannot be used), with a one-line error."""
from __future__ import annotations

import argparse
import json
import sys
import zipfile

import numpy as np

from .options import add_single_driver_options, load_model_arg, single_device

NAME = "diff"
HELP = "compare a driver with nnapi-reference or onnxruntime operation by operation"
AGAINST = ("onnxruntime", "nnapi-reference")
EXIT_BAD_INPUT = 2


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `diff` subcommand (sets func=run)."""
    p = subparsers.add_parser(NAME, help=HELP, description=__doc__)
    p.add_argument("model", help="the path of an .onnx file, or a zoo model's name (see `mlts models`)")
    add_single_driver_options(p, "the device to examine (default nnapi-reference, against onnxruntime)",
                              required=False)
    p.add_argument("--against", choices=AGAINST,
                   help="the reference (default: onnxruntime for nnapi-reference, nnapi-reference for any other "
                        "driver)")
    p.add_argument("--input", metavar="FILE",
                   help="the model's input: .npy (a model with one input) or .npz (arrays named as the inputs); "
                        "default: seeded random values")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input (default 0)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
    return p


def _random_input(dtype, shape, rng: np.random.Generator, name: str) -> np.ndarray:
    from mlts.runtime import MltsError, ResultCode

    dims = tuple(1 if d is None else d for d in (shape or ()))
    if dtype is None or dtype.kind == "f":
        return rng.uniform(-1, 1, dims).astype(dtype or np.float32)
    if dtype in (np.dtype(np.uint8), np.dtype(np.int8)):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, dims).astype(dtype)
    raise MltsError(ResultCode.BAD_DATA, f"input {name!r} is {dtype.name}: give its values with --input")


def model_inputs(imported, path: str | None, seed: int) -> dict[str, np.ndarray]:
    """The inputs by ONNX name: read from --input, or seeded random values of each input's type."""
    from mlts.runtime import MltsError, ResultCode

    if path is None:
        rng = np.random.default_rng(seed)
        return {name: _random_input(*imported.input_type(name), rng, name) for name in imported.input_names}
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.ndarray):
            with loaded:  # an .npz: its members are read (and may be corrupt) here
                loaded = {k: loaded[k] for k in loaded.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise MltsError(ResultCode.BAD_DATA, f"--input {path}: cannot be read as .npy or .npz ({e})") from None
    if isinstance(loaded, np.ndarray):
        if len(imported.input_names) != 1:
            raise MltsError(ResultCode.BAD_DATA, f"--input {path}: one array for a model with inputs "
                                                 f"{imported.input_names}: use an .npz with one array per input")
        return {imported.input_names[0]: loaded}
    return loaded


def diff_model(imported, device, against: str, feeds: dict[str, np.ndarray]) -> dict:
    """The rows (isolated and end to end) and a summary, as JSON-ready values."""
    from mlts.benchmark.op_diff import OperationDiffer, first_out_of_tolerance

    arrays = imported.input_arrays(feeds)
    expected = None
    if against == "onnxruntime":
        from mlts.models.onnx_import.onnx_values import onnxruntime_values

        expected = onnxruntime_values(imported, feeds)
    from mlts.runtime import get_device
    from mlts.runtime.drivers.reference import REFERENCE_DEVICE_NAME

    # A partial driver runs partitioned, as the benchmark runs it: nnapi-reference takes what it lacks.
    devices = [device]
    if device.name != REFERENCE_DEVICE_NAME and not all(imported.model.get_supported_operations_for_devices([device])):
        devices.append(get_device(REFERENCE_DEVICE_NAME))
    differ = OperationDiffer(imported.model, devices, arrays, expected=expected, origins=imported.origin)
    rows = differ.isolated()
    end_to_end_error = differ.end_to_end(rows)
    bad = first_out_of_tolerance(rows)
    return {
        "model": imported.name, "driver": device.name, "against": against,
        "partitioned_with": devices[1].name if len(devices) > 1 else None,
        "operations": [r.to_dict() for r in rows],
        "end_to_end_error": end_to_end_error,
        "out_of_tolerance": sum(r.status == "out of tolerance" for r in rows),
        "errors": sum(r.status == "error" for r in rows),
        "not_judged": sum(r.status in ("not judged", "unsupported") for r in rows),
        "first_out_of_tolerance": None if bad is None else {"index": bad.index, "operation": bad.operation,
                                                            "origin": bad.origin},
    }, rows


def run(args: argparse.Namespace) -> int:
    """Print the table (or JSON); the exit status (see the module docstring)."""
    from mlts.runtime import MltsError, get_device
    from mlts.runtime.drivers.reference import REFERENCE_DEVICE_NAME

    if args.driver is None:
        args.driver = REFERENCE_DEVICE_NAME
    try:
        device = single_device(args) if args.driver != REFERENCE_DEVICE_NAME else get_device(REFERENCE_DEVICE_NAME)
        against = args.against or ("onnxruntime" if device.name == REFERENCE_DEVICE_NAME else REFERENCE_DEVICE_NAME)
        imported = load_model_arg(args.model)
        summary, rows = diff_model(imported, device, against, model_inputs(imported, args.input, args.seed))
    except MltsError as e:
        print(f"mlts {NAME}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        from mlts.benchmark.record_schema import to_jsonable

        json.dump(to_jsonable(summary), sys.stdout, indent=2, allow_nan=False)  # an infinite difference: null
        print()
    else:
        _print_table(summary, rows)
    return 1 if summary["out_of_tolerance"] or summary["errors"] else 0


def _print_table(summary: dict, rows) -> None:
    from mlts.benchmark.op_diff import OperationDiff

    print(f"{summary['model']}: {summary['driver']} against {summary['against']}, operation by operation")
    partner = summary.get("partitioned_with")
    if partner:
        print(f"  {summary['driver']} lacks some operations: it runs partitioned with {partner}, which takes them "
              "(the device column says where each ran)")
    print("  isolated: each operation alone, fed the reference's inputs, judged by NNAPI's per-operation tolerance")
    print("  end to end: one run of the whole model, each operation's result against the reference's")
    width = max([9] + [len(r.operation) for r in rows])
    dev_width = max([6] + [len(", ".join(r.devices)) for r in rows]) if partner else 0
    device_head = f"{'device':<{dev_width}}  " if partner else ""
    print(f"{'op':>4}  {'operation':<{width}}  {device_head}{'isolated':>13}  {'end to end':>13}  {'verdict':<16}  "
          "ONNX node")
    for r in rows:
        iso, e2e = OperationDiff.worst(r.isolated), OperationDiff.worst(r.end_to_end)
        verdict = r.status if r.status != "ok" else "ok"
        note = f"  ({r.message})" if r.message else ""
        device = f"{', '.join(r.devices):<{dev_width}}  " if partner else ""
        print(f"{r.index:>4}  {r.operation:<{width}}  {device}{iso.text() if iso else '–':>13}  "
              f"{e2e.text() if e2e else '–':>13}  {verdict:<16}  {r.origin}{note}")
    if summary["end_to_end_error"]:
        print(f"end to end: not run: {summary['end_to_end_error']}")
    bad = summary["first_out_of_tolerance"]
    if bad:
        print(f"{summary['out_of_tolerance']} operation(s) out of tolerance; the first: {bad['index']} "
              f"{bad['operation']} <- {bad['origin']}")
    elif summary["errors"]:
        print(f"{summary['errors']} operation(s) failed to run")
    else:
        print("every judged operation is within NNAPI's per-operation tolerance"
              + (f" ({summary['not_judged']} not judged)" if summary["not_judged"] else ""))
