"""Held-out accuracy of the zoo's sequence and detection models, float and quantized, as a markdown table for the
README (the MobileNets: tools/zoo_accuracy.py).

    python tools/workload_accuracy.py [--samples N] [--models NAME ...] [--json out.json]

Each model runs on nnapi-reference (onnxruntime cannot run the detector's DETECTION_POSTPROCESSING), fed and
scored by the benchmark's own task (mlts/benchmark/tasks.py): top-1 for the LSTM on the commands held-out split,
mAP@0.5 (and @0.5:0.95) for the detector on the shapes-detection held-out split. Default: the whole split.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlts.benchmark.tasks import task_of  # noqa: E402
from mlts.models.architectures import IMAGE_CLASSIFICATION  # noqa: E402
from mlts.models.zoo_registry import load, zoo  # noqa: E402
from mlts.runtime import Compilation, Execution, get_device  # noqa: E402
from zoo_accuracy import finish  # noqa: E402  (tools/ is the script's own folder)

SPLIT_SIZES = {"commands": 1500, "shapes-detection": 500}


def measure(entry, count: int | None) -> dict:
    """The model's figures on the first `count` held-out samples (None: all of them)."""
    task = task_of(entry.task)
    imported = load(entry.name)
    model = imported.model
    n = count or SPLIT_SIZES[entry.architecture.dataset]
    samples, truths = task.heldout(entry.resolution, n)
    inputs = task.model_inputs(imported, samples[:n])
    compilation = Compilation.for_devices(model, [get_device("nnapi-reference")])
    compilation.finish()
    scorer = task.scorer(bool(model.relaxed))
    started = time.perf_counter()
    for x, truth in zip(inputs, truths[:n]):
        ex = Execution(compilation)
        ex.set_input(0, x)
        ex.compute()
        scorer.add([ex.get_output(k) for k in range(len(model.outputs))], None, truth)
    seconds = time.perf_counter() - started
    result = scorer.result()
    operations = Counter(code.name for code, _, _ in model.operations())
    return {"samples": n, "top1": result.get("top1_accuracy"), "map50": result.get("map50"),
            "map50_95": result.get("map50_95"), "operations": dict(operations.most_common()),
            "parameters": entry.parameters, "macs": entry.macs, "weights_bytes": entry.weights_path.stat().st_size,
            "ms_per_sample": 1000 * seconds / n}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, help="held-out samples per model (default: the whole split)")
    parser.add_argument("--models", nargs="*", help="model names (default: every sequence and detection model)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    figures, rows = {}, []
    for entry in zoo():
        if entry.task == IMAGE_CLASSIFICATION or not entry.available or (args.models and entry.name not in args.models):
            continue
        f = figures[entry.name] = measure(entry, args.samples)
        score = (f"top-1 {100 * f['top1']:.1f}%" if f["top1"] is not None
                 else f"mAP@0.5 {f['map50']:.3f} (@0.5:0.95 {f['map50_95']:.3f})")
        ops = ", ".join(f"{name} x{k}" if k > 1 else name for name, k in f["operations"].items())
        rows.append(f"| `{entry.name}` | {entry.quantization or 'float32'} | {f['parameters'] / 1e6:.3f} M | "
                    f"{f['weights_bytes'] / 1e6:.2f} MB | {f['macs'] / 1e6:.1f} M | {score} on {f['samples']} | {ops} |")
        print(rows[-1], flush=True)
    finish(["model", "type", "parameters", "weights (fp16 npz)", "MACs", "held-out (nnapi-reference)",
            "NNAPI operations"], rows, figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
