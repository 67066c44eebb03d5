#!/usr/bin/env python
"""mlts-fast against onnxruntime: the same zoo ONNX file, the same input, one thread each, interleaved.

    .venv/bin/python benchmarks/fast_vs_onnxruntime.py [--models NAME ...] [--runs N] [--ort-opt auto|all|none]

For every model: import the zoo ONNX file into the runtime and compile it for mlts-fast alone
(Compilation.for_devices, so nothing silently falls back to the reference), open an onnxruntime
session on the same file (CPUExecutionProvider, 1 intra-op and 1 inter-op thread, sequential), then
time one run of each in turn, `--runs` times, and report the median latencies and their ratio.
mlts-fast is timed through the public API (a reusable Execution: set_input, compute), as a client
would use it. BLAS is limited to one thread through the environment before numpy is imported.

onnxruntime's graph optimizations (`--ort-opt`): "all" is its default (ORT_ENABLE_ALL: QDQ models
run as fused QLinearConv integer kernels); "none" is ORT_DISABLE_ALL (QDQ models run as
DequantizeLinear -> float Conv -> QuantizeLinear). "auto" (the default) uses "all" unless its
outputs disagree with the nnapi-reference results by more than the whole-model quantized tolerance
(3 steps): on x86 CPUs without VNNI, onnxruntime's optimized u8s8 kernels can saturate int16 pair
sums with full-range weights; it then says so and uses "none".

Weights: without trained weights in mlts/models/weights/ (see `mlts models`), the models are built
from stable random weights (tests/models/model_weights.py, seed 0), which is fine for timing; the
table says which.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
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
GOALS = {"mobilenet_v2_1.0_224": 1.5, "mobilenet_v1_1.0_224_quant": 3.0}
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


def bench_model(name: str, runs: int, ort_opt: str) -> dict:
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

    settings = {"auto": ["all", "none"], "all": ["all"], "none": ["none"]}[ort_opt]
    note = ""
    for setting in settings:
        sess = ort_session(path, optimize=setting == "all")
        (ort_out,) = sess.run([out_name], {in_name: x})
        wrong = quantized and max_steps(ort_out, reference) > 3
        if not wrong or setting == settings[-1]:
            break
        note = (f"ORT_ENABLE_ALL output is {max_steps(ort_out, reference):.0f} steps off the reference "
                "(int16 saturation in its u8s8 kernels on this CPU): using ORT_DISABLE_ALL")
    ort_label = "ORT_ENABLE_ALL (default)" if setting == "all" else "ORT_DISABLE_ALL"

    for _ in range(5):  # warm-up, both
        sess.run([out_name], {in_name: x})
        run_fast()
    t_ort, t_fast = [], []
    for _ in range(runs):  # interleaved, so that both see the same machine load
        t = time.perf_counter()
        sess.run([out_name], {in_name: x})
        t_ort.append(time.perf_counter() - t)
        t = time.perf_counter()
        run_fast()
        t_fast.append(time.perf_counter() - t)
    ort_ms, fast_ms = statistics.median(t_ort) * 1e3, statistics.median(t_fast) * 1e3
    # The 10th percentiles: less sensitive than medians to other processes sharing the CPU.
    p10 = float(np.percentile(t_fast, 10) / np.percentile(t_ort, 10))
    return dict(name=name, ort=ort_label, ort_ms=ort_ms, fast_ms=fast_ms, ratio=fast_ms / ort_ms, p10=p10,
                goal=GOALS.get(name), vs_reference=max_steps(fast, reference), vs_ort=max_steps(fast, ort_out),
                quantized=quantized, prepare_s=prepare_s, note=note, partition=steps[-1] if steps else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help="zoo model names (see `mlts models`)")
    parser.add_argument("--runs", type=int, default=50, help="timed runs of each, interleaved (default 50)")
    parser.add_argument("--ort-opt", choices=("auto", "all", "none"), default="auto",
                        help="onnxruntime graph optimizations (default auto: all unless its results are wrong)")
    args = parser.parse_args(argv)
    random = use_random_weights_where_missing(args.models)
    rows = [bench_model(name, args.runs, args.ort_opt) for name in args.models]

    print(f"mlts-fast vs onnxruntime, 1 thread each, {args.runs} interleaved runs: median latencies and their "
          "ratio (the goal), and the ratio of 10th percentiles")
    if random:
        print(f"weights: stable random weights (no trained weights) for {', '.join(random)}")
    header = f"{'model':31} {'onnxruntime setting':25} {'ORT ms':>7} {'fast ms':>7} {'ratio':>6} {'goal':>5} " \
             f"{'p10 ratio':>9}  {'vs reference':>12} {'vs ORT':>8}"
    print(header)
    print("-" * len(header))
    for r in rows:
        goal = f"{r['goal']:.1f}" if r["goal"] else "-"
        unit = " steps" if r["quantized"] else ""
        diff = (lambda v: f"{v:.0f}{unit}" if r["quantized"] else f"{v:.1e}")
        print(f"{r['name']:31} {r['ort']:25} {r['ort_ms']:7.2f} {r['fast_ms']:7.2f} {r['ratio']:6.2f} {goal:>5} "
              f"{r['p10']:9.2f}  {diff(r['vs_reference']):>12} {diff(r['vs_ort']):>8}")
    for r in rows:
        if r["note"]:
            print(f"note ({r['name']}): {r['note']}")
        print(f"{r['name']}: prepared in {r['prepare_s']:.1f} s; {r['partition']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
