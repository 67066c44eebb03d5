"""Held-out top-1 of every zoo model, float and quantized, as a markdown table for the README.

    python tools/zoo_accuracy.py [--images 1500] [--models NAME ...] [--json out.json]
    python tools/zoo_accuracy.py --agreement 200     # nnapi-reference vs onnxruntime instead

Runs the zoo's ONNX files (built from the shipped weights, quantized by the project's quantizer)
through onnxruntime on the held-out split at each model's own resolution; the test suite checks
separately that the runtime's nnapi-reference agrees with onnxruntime on these files. Quantized
models run unoptimized: onnxruntime's fused uint8 kernels can overflow on AVX2 CPUs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlts.datasets.preprocess import INPUT_ZERO_POINT, to_float_input, to_quant_input  # noqa: E402
from mlts.datasets.shapes import ShapesDataset  # noqa: E402
from mlts.models.architectures import IMAGE_CLASSIFICATION  # noqa: E402
from mlts.models.zoo_registry import onnx_path, zoo  # noqa: E402


def top1(name: str, quantization: str | None, resolution: int, count: int) -> float:
    peer = session(name, quantization)
    correct = 0
    for images, labels in ShapesDataset("heldout", resolution, count).batches(50):
        x = model_input(images, quantization)
        for k in range(len(x)):  # the zoo models take batch 1
            (probs,) = peer.run(None, {"input": x[k:k + 1]})
            correct += int(np.argmax(probs) == labels[k])
    return correct / count


def session(name: str, quantization: str | None):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    if quantization:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(onnx_path(name)), opts, providers=["CPUExecutionProvider"])


def model_input(images: np.ndarray, quantization: str | None) -> np.ndarray:
    if quantization:
        return to_quant_input(images, zero_point=INPUT_ZERO_POINT[quantization],
                              dtype=np.uint8 if quantization == "uint8" else np.int8)
    return to_float_input(images)


def agreement(entry, count: int) -> dict:
    """nnapi-reference vs onnxruntime on the first `count` held-out images: the largest output difference
    (absolute for float softmax outputs, quantization steps for quantized ones) and top-1 agreement."""
    from mlts.models import load
    from mlts.runtime import get_device

    imported, peer = load(entry.name), session(entry.name, entry.quantization)
    reference = [get_device("nnapi-reference")]
    differences, agree = [], 0
    for images, _ in ShapesDataset("heldout", entry.resolution, count).batches(50):
        x = model_input(images, entry.quantization)
        for k in range(len(x)):
            ours = imported.run({"input": x[k:k + 1]}, devices=reference)["probabilities"]
            (theirs,) = peer.run(None, {"input": x[k:k + 1]})
            differences.append(float(np.abs(ours.astype(np.float64) - theirs.astype(np.float64)).max()))
            agree += int(np.argmax(ours) == np.argmax(theirs))
    return {"images": count, "max_difference": max(differences), "top1_agreement": agree / count,
            "within_3_steps": float(np.mean(np.array(differences) <= 3))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=1500)
    parser.add_argument("--models", nargs="*", help="base names (default: every model with weights)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--agreement", type=int, metavar="N",
                        help="instead: nnapi-reference vs onnxruntime on N held-out images, every zoo model")
    args = parser.parse_args()
    if args.agreement:
        figures = {}
        print("| model | images | max difference | top-1 agreement | within 3 steps |\n|---|---|---|---|---|")
        for entry in zoo():
            chosen = not args.models or entry.base_name in args.models
            if entry.task == IMAGE_CLASSIFICATION and entry.available and chosen:
                figures[entry.name] = a = agreement(entry, args.agreement)
                unit = " steps" if entry.quantization else ""
                within = f"{100 * a['within_3_steps']:.0f}%" if entry.quantization else "-"
                print(f"| `{entry.name}` | {a['images']} | {a['max_difference']:.3g}{unit} | "
                      f"{100 * a['top1_agreement']:.1f}% | {within} |", flush=True)
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
        return 0
    rows, figures = [], {}
    for entry in zoo():
        if entry.quantization is not None or not entry.available or entry.task != IMAGE_CLASSIFICATION:
            continue
        if args.models and entry.base_name not in args.models:
            continue
        accs = {q: top1(entry.name + suffix, q, entry.resolution, args.images)
                for q, suffix in ((None, ""), ("uint8", "_quant"), ("int8", "_quant_int8"))}
        figures[entry.base_name] = {"float": accs[None], "uint8": accs["uint8"], "int8": accs["int8"],
                                    "macs": entry.macs, "parameters": entry.parameters,
                                    "weights_bytes": entry.weights_path.stat().st_size}
        rows.append(f"| `{entry.base_name}` | {entry.parameters / 1e6:.2f} M | "
                    f"{entry.weights_path.stat().st_size / 1e6:.2f} MB | {entry.macs / 1e6:.0f} M | "
                    f"{100 * accs[None]:.1f}% | {100 * accs['uint8']:.1f}% | {100 * accs['int8']:.1f}% |")
        print(rows[-1], flush=True)
    finish(["model", "parameters", "weights (fp16 npz)", "MACs", "float top-1", "uint8 top-1", "int8 top-1"], rows,
           figures, args.json)
    return 0


def finish(header: list[str], rows: list[str], figures: dict, json_path: Path | None) -> None:
    """The whole markdown table (its rows were printed as they came), and the figures as JSON if asked."""
    print("\n| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    print("\n".join(rows))
    if json_path:
        json_path.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
