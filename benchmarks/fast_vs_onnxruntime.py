#!/usr/bin/env python
"""mlts-fast against onnxruntime: the same zoo ONNX file, the same input, one thread each, interleaved.

    .venv/bin/python benchmarks/fast_vs_onnxruntime.py [--models NAME ... | --all] [--runs N]
                                                       [--also-disable-all] [--json FILE]

For every model: import the zoo ONNX file into the runtime and compile it for mlts-fast alone
(Compilation.for_devices, so nothing silently falls back to the reference), open an onnxruntime
session on the same file (CPUExecutionProvider, 1 intra-op and 1 inter-op thread, sequential), then
time one run of each in turn, `--runs` times, and report the median latencies and their ratio.
`--all` runs every zoo model (float, uint8 and int8 per-channel variants of each MLTS size: 24).
mlts-fast is timed through the public API (a reusable Execution: set_input, compute), as a client
would use it. BLAS is limited to one thread through the environment before numpy is imported.

The ratio (the goal: <= 1.1 for float models, <= 1.3 for quantized ones) is always against
onnxruntime's default graph optimizations, ORT_ENABLE_ALL (QDQ models run as fused QLinearConv
integer kernels), whether or not its outputs are right. The "ORT agrees" column says whether they
agree with the nnapi-reference results: within the whole-model quantized tolerance (3 steps) for
quantized models, within 1e-4 for float probabilities. On x86 CPUs without VNNI, onnxruntime's
optimized u8s8 kernels can saturate int16 pair sums with full-range weights, and its quantized
outputs are then off. `--also-disable-all` times ORT_DISABLE_ALL as well (QDQ models then run as
DequantizeLinear -> float Conv -> QuantizeLinear), interleaved with the other two, and shows that
ratio in an extra column: in addition, never instead.
`--json FILE` also writes the rows, with the command, onnxruntime version and load averages.

Weights: without trained weights in mlts/models/weights/ (see `mlts models`), the models are built
from stable random weights (tests/models/model_weights.py, seed 0), which is fine for timing; the
table says which.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlts.datasets.preprocess import INPUT_ZERO_POINT, to_float_input, to_quant_input  # noqa: E402
from mlts.datasets.shapes import ShapesDataset  # noqa: E402
from mlts.runtime import Compilation, Execution, get_device  # noqa: E402

from mlts.models import zoo_registry as zoo_module  # noqa: E402

DEFAULT_MODELS = ["mobilenet_v2_1.0_224", "mobilenet_v1_1.0_224_quant"]
GOALS = {"float": 1.1, "quantized": 1.3}  # mlts-fast median / onnxruntime (ORT_ENABLE_ALL) median
QUANT_TOLERANCE_STEPS = 3  # the whole-model quantized tolerance against the reference
FLOAT_TOLERANCE = 1e-4  # on output probabilities
RANDOM_WEIGHTS_DIR = zoo_module.cache_dir().parent / "bench-random-weights"


def use_random_weights_where_missing(names: list[str]) -> list[str]:
    """Point the zoo at stable random weights when a model's trained weights are missing; returns
    the names that use them."""
    entries = [zoo_module.get_entry(n) for n in names]
    missing = [e for e in entries if not e.available]
    if not missing:
        return []
    sys.path.insert(0, str(ROOT / "tests" / "models"))
    from model_weights import stable_weights

    RANDOM_WEIGHTS_DIR.mkdir(parents=True, exist_ok=True)
    for e in entries:
        path = RANDOM_WEIGHTS_DIR / f"{e.base_name}.npz"
        if e.available:  # models with trained weights keep them
            path.write_bytes(e.weights_path.read_bytes())
            continue
        if path.exists():
            continue
        x = to_float_input(np.stack([ShapesDataset("calibration", e.resolution)[i][0] for i in range(16)]))
        weights = stable_weights(e.family, e.alpha, x)
        np.savez_compressed(path, **{k: v.astype(np.float16) for k, v in weights.items()})
    zoo_module.WEIGHTS_DIR = RANDOM_WEIGHTS_DIR
    return [e.name for e in missing]


def model_input(entry) -> np.ndarray:
    image = ShapesDataset("heldout", entry.resolution)[0][0]
    if entry.quantization is None:
        return to_float_input(image)
    dtype = np.uint8 if entry.quantization == "uint8" else np.int8
    return to_quant_input(image, zero_point=INPUT_ZERO_POINT[entry.quantization], dtype=dtype)


def ort_session(path: Path, optimize: bool):
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def max_steps(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))


def bench_model(name: str, runs: int, also_disable_all: bool) -> dict:
    entry = zoo_module.get_entry(name)
    path = zoo_module.onnx_path(name)
    imported = zoo_module.load(name)
    x = model_input(entry)
    in_name, out_name = imported.input_names[0], imported.output_names[0]

    compilation = Compilation.for_devices(imported.model, [get_device("mlts-fast")])
    t = time.perf_counter()
    compilation.finish()
    prepare_s = time.perf_counter() - t
    steps = [line for line in compilation.plan_log if line.startswith("partitionTheWork")]
    main = imported.model.hal_model().main
    out_type = main.operands[main.output_indexes[0]].type
    out = np.empty(out_type.dimensions, dtype=out_type.dtype)
    execution = Execution(compilation)
    execution.set_reusable(True)
    execution.set_input(0, x)
    execution.set_output(0, out)

    def run_fast() -> np.ndarray:
        execution.compute()
        return out

    reference = imported.run({in_name: x}, devices=["nnapi-reference"])[out_name]
    fast = run_fast().copy()
    quantized = entry.quantization is not None
    tolerance = QUANT_TOLERANCE_STEPS if quantized else FLOAT_TOLERANCE

    # Contestants, timed in turn each round: onnxruntime ORT_ENABLE_ALL (the ratio's denominator),
    # mlts-fast, and optionally onnxruntime ORT_DISABLE_ALL.
    sess_all = ort_session(path, optimize=True)
    (ort_out,) = sess_all.run([out_name], {in_name: x})
    ort_vs_reference = max_steps(ort_out, reference)
    contestants = {"ort": lambda: sess_all.run([out_name], {in_name: x}), "fast": run_fast}
    if also_disable_all:
        sess_none = ort_session(path, optimize=False)
        (ort_none_out,) = sess_none.run([out_name], {in_name: x})
        contestants["ort_none"] = lambda: sess_none.run([out_name], {in_name: x})

    for _ in range(5):  # warm-up, all
        for run in contestants.values():
            run()
    times: dict[str, list[float]] = {key: [] for key in contestants}
    for _ in range(runs):  # interleaved, so that all see the same machine load
        for key, run in contestants.items():
            t = time.perf_counter()
            run()
            times[key].append(time.perf_counter() - t)
    ms = {key: statistics.median(ts) * 1e3 for key, ts in times.items()}
    # The 10th percentiles: less sensitive than medians to other processes sharing the CPU.
    p10 = float(np.percentile(times["fast"], 10) / np.percentile(times["ort"], 10))
    goal = GOALS["quantized" if quantized else "float"]
    ratio = ms["fast"] / ms["ort"]
    row = dict(name=name, quantization=entry.quantization or "float", quantized=quantized,
               ort_ms=ms["ort"], fast_ms=ms["fast"], ratio=ratio, goal=goal, met=ratio <= goal, p10=p10,
               ort_agrees=ort_vs_reference <= tolerance, ort_vs_reference=ort_vs_reference,
               vs_reference=max_steps(fast, reference), vs_ort=max_steps(fast, ort_out),
               prepare_s=prepare_s, partition=steps[-1] if steps else "")
    if also_disable_all:
        row.update(ort_none_ms=ms["ort_none"], ratio_none=ms["fast"] / ms["ort_none"],
                   ort_none_vs_reference=max_steps(ort_none_out, reference))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help="zoo model names (see `mlts models`)")
    chosen.add_argument("--all", action="store_true", help="every zoo model (24)")
    parser.add_argument("--runs", type=int, default=50, help="timed runs of each, interleaved (default 50)")
    parser.add_argument("--also-disable-all", action="store_true",
                        help="also time onnxruntime with ORT_DISABLE_ALL and show that ratio in an extra column")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    models = [e.name for e in zoo_module.zoo()] if args.all else args.models
    random = use_random_weights_where_missing(models)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    rows = []
    for name in models:
        rows.append(bench_model(name, args.runs, args.also_disable_all))
        print(f"{name}: {rows[-1]['ratio']:.2f}", file=sys.stderr, flush=True)

    print(f"mlts-fast vs onnxruntime (ORT_ENABLE_ALL), 1 thread each, {args.runs} interleaved runs: median "
          "latencies and their ratio (goal: <= 1.1 float, <= 1.3 quantized), and the ratio of 10th percentiles")
    if random:
        print(f"weights: stable random weights (no trained weights) for {', '.join(random)}")
    extra = f" {'DISABLE_ALL ms':>14} {'ratio':>6}" if args.also_disable_all else ""
    header = f"{'model':32} {'ORT ms':>7} {'fast ms':>7} {'ratio':>6} {'goal':>5} {'met':>4} {'p10 ratio':>9}" \
             f"{extra}  {'ORT agrees':>16} {'fast vs ref':>11} {'vs ORT':>8}"
    print(header)
    print("-" * len(header))
    for r in rows:
        unit = " steps" if r["quantized"] else ""
        diff = (lambda v: f"{v:.0f}{unit}" if r["quantized"] else f"{v:.1e}")
        agrees = "yes" if r["ort_agrees"] else f"no ({diff(r['ort_vs_reference'])})"
        none = f" {r['ort_none_ms']:14.2f} {r['ratio_none']:6.2f}" if args.also_disable_all else ""
        print(f"{r['name']:32} {r['ort_ms']:7.2f} {r['fast_ms']:7.2f} {r['ratio']:6.2f} {r['goal']:5.1f} "
              f"{'yes' if r['met'] else 'NO':>4} {r['p10']:9.2f}{none}  {agrees:>16} "
              f"{diff(r['vs_reference']):>11} {diff(r['vs_ort']):>8}")
    missed = [r["name"] for r in rows if not r["met"]]
    print(f"goal missed by {len(missed)} of {len(rows)}: {', '.join(missed) or '-'}")
    for r in rows:
        print(f"{r['name']}: prepared in {r['prepare_s']:.1f} s; {r['partition']}")
    if args.json:
        import onnxruntime

        load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        args.json.write_text(json.dumps({
            "command": " ".join(["benchmarks/fast_vs_onnxruntime.py", *(argv if argv is not None else sys.argv[1:])]),
            "onnxruntime": onnxruntime.__version__, "ort_optimization": "ORT_ENABLE_ALL", "threads": 1,
            "runs": args.runs, "also_disable_all": args.also_disable_all,
            "load_average_1min": {"before": load_before, "after": load_after},
            "random_weights": random, "goal_missed": missed, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
