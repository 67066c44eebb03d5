"""Crafted but realistic run directories for the report tests and the README screenshot.

Two drivers beside the CPU reference (plus one that only quantized models suit), float and quantized
MobileNet v1/v2, one error (whose message tries to inject markup), unsupported cases, a per-layer
timing breakdown, stress records, a baseline run and a second machine.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from mlts.benchmark.environment import write_environment
from mlts.benchmark.results_writer import ResultsWriter
from mlts.benchmark.stats import latency_stats

REF = "nnapi-reference"
HOSTILE_MESSAGE = ("DEAD_OBJECT: the driver service died while executing step 3 "
                   "<script>alert('x')</script> & \"quotes\"")
PLAIN_MESSAGE = "DEAD_OBJECT: the driver service died while executing step 3 (signal 11)"

MODELS = {  # name: (family, quantization, operations)
    "mobilenet_v1_1.0_224": ("v1", None, 31),
    "mobilenet_v1_0.5_160": ("v1", None, 31),
    "mobilenet_v1_1.0_224_quant": ("v1", "uint8", 33),
    "mobilenet_v2_1.0_224": ("v2", None, 66),
    "mobilenet_v2_1.0_224_quant": ("v2", "uint8", 68),
}
#: model -> driver -> (median ms, top-1 accuracy, top-1 agreement, max abs error, cts pass)
CASES = {
    "mobilenet_v1_1.0_224": {REF: (118.0, 0.712, None, None, None),
                             "mlts-fast": (24.5, 0.712, 1.0, 2.4e-6, True),
                             "sample-float-fast": (114.0, 0.709, 0.994, 3.1e-3, False)},
    "mobilenet_v1_0.5_160": {REF: (21.0, 0.634, None, None, None),
                             "mlts-fast": (5.2, 0.634, 1.0, 1.9e-6, True),
                             "sample-float-fast": (26.4, 0.634, 1.0, 4.0e-6, True)},
    "mobilenet_v1_1.0_224_quant": {REF: (310.0, 0.705, None, None, None),
                                   "mlts-fast": (41.0, 0.705, 1.0, 0.0, True),
                                   "sample-quant": (72.0, 0.701, 0.988, 2.0, True)},
    "mobilenet_v2_1.0_224": {REF: (96.0, 0.728, None, None, None),
                             "mlts-fast": (19.8, 0.728, 1.0, 3.0e-6, True)},
    "mobilenet_v2_1.0_224_quant": {REF: (255.0, 0.716, None, None, None),
                                   "mlts-fast": (36.5, 0.716, 1.0, 1.0, True),
                                   "sample-quant": (66.0, 0.709, 0.991, 3.0, True)},
}


def environment(hostname: str = "bench-01", cpu: str = "AMD EPYC 7B13 (8 cores)") -> dict:
    return {"schema_version": 1, "collected_at": "2025-01-15T09:58:02Z", "hostname": hostname,
            "cpu": {"model": cpu, "architecture": "x86_64", "logical_cores": 16, "usable_cores": 16,
                    "physical_cores": 8, "max_frequency_mhz": 3000.0},
            "memory": {"total_bytes": 64 * 2 ** 30, "available_bytes": 51 * 2 ** 30},
            "os": {"system": "Linux", "release": "6.1.0-18-amd64", "version": "#1 SMP Debian",
                   "platform": "Linux-6.1.0-18-amd64-x86_64-with-glibc2.36"},
            "python": {"version": "3.11.7", "implementation": "CPython", "executable": "/usr/bin/python3"},
            "numpy": {"version": "2.1.3", "blas": {"name": "scipy-openblas", "version": "0.3.27"},
                      "threadpools": [{"internal_api": "openblas", "num_threads": 8}]},
            "packages": {"numpy": "2.1.3", "pandas": "2.2.3", "jinja2": "3.1.6", "onnx": "1.17.0"},
            "mlts": {"version": "0.1.0", "commit": "9d6d150f3c1e2a4b5c6d7e8f9a0b1c2d3e4f5a6b", "dirty": False},
            "env": {"OMP_NUM_THREADS": "8"}}


def _latency(p50: float, rng: random.Random, runs: int = 60) -> dict:
    samples = [p50 * (1 + abs(rng.gauss(0, 0.04)) + (0.25 if rng.random() < 0.05 else 0.0)) for _ in range(runs)]
    shift = p50 - sorted(samples)[runs // 2]
    return latency_stats([(s + shift) / 1000 for s in samples]).to_dict()


def benchmark_records(*, hostile: bool = True, scale: dict[str, float] | None = None, seed: int = 1,
                      drivers: set[str] | None = None, timestamp: str = "2025-01-15T10:05:00Z") -> list[dict]:
    """The benchmark records of one run; `scale` multiplies a driver's latencies (a baseline that differs)."""
    rng = random.Random(seed)
    scale = scale or {}
    out = []
    for model, per_driver in CASES.items():
        family, quant, n_ops = MODELS[model]
        for driver, (p50, top1, agree, err, cts) in per_driver.items():
            if drivers is not None and driver not in drivers:
                continue
            rec = {"kind": "benchmark", "schema_version": 1, "timestamp": timestamp, "model": model, "driver": driver,
                   "mode": "sync",
                   "preference": "FAST_SINGLE_ANSWER", "status": "ok", "message": None, "unsupported_ops": [],
                   "devices": [driver] if driver == REF else [driver, REF],
                   "model_info": {"family": f"mobilenet_{family}", "quantization": quant,
                                  "input_shape": [1, 224, 224, 3], "operations": n_ops},
                   "compilation_ms": {"without_cache": round(p50 * 1.7, 1), "save_to_cache": round(p50 * 1.9, 1),
                                      "with_cache": round(p50 * 0.2, 1)},
                   "compilation_cache": {"size_bytes": 2048, "status": "prepared-from-cache", "saved": "saved",
                                         "prepared_from_cache": True},
                   "first_inference_ms": p50 * 1.4, "latency": _latency(p50 * scale.get(driver, 1.0), rng),
                   "accuracy": {"output_dtype": "uint8" if quant else "float32", "reference_samples": 1500,
                                "max_abs_error": err, "cts_pass": cts, "cts_violations": None if cts is None else (0 if cts else 37),
                                "top1_agreement": agree, "top5_agreement": agree, "label_samples": 1500,
                                "top1_accuracy": top1, "top5_accuracy": min(1.0, top1 + 0.2)},
                   "partition": {"ops_per_device": {driver: n_ops} if driver != "mlts-fast" or not quant
                                 else {driver: n_ops - 2, REF: 2}, "cpu_fallback": False},
                   "peak_rss_bytes": 412_000_000, "run_length": {"preset": "default", "timed_runs": 60},
                   "seeds": {"inputs": 1234}, "config": {"images": 1500, "dataset": "held-out"}}
            if driver == "mlts-fast":
                rec["driver_time"] = {"in_driver_ms": {"mean_ms": p50 * 0.93}, "on_device_ms": {"mean_ms": p50 * 0.88}}
                rec["timing_breakdown"] = {
                    "application": {"preparation": 0.4, "compilation": round(p50 * 1.7, 1), "io": 0.05,
                                    "compute": p50 * 0.97, "results": 0.02, "execution": p50 * 1.01},
                    "runtime": {"preparation": 0.3, "compilation": round(p50 * 1.6, 1), "io": 0.04,
                                "compute": p50 * 0.95, "results": 0.01},
                    "ipc": {"compilation": 0.8, "io": 0.6, "results": 0.3},
                    "driver": {"compilation": round(p50 * 1.5, 1), "compute": p50 * 0.93},
                    "device_ms": p50 * 0.88,
                }
            out.append(rec)
    # sample-float-fast dies on v2; sample-quant cannot run float models.
    msg = HOSTILE_MESSAGE if hostile else PLAIN_MESSAGE
    n = len(out)
    if drivers is None or "sample-float-fast" in drivers:
        out.append({"kind": "benchmark", "schema_version": 1, "model": "mobilenet_v2_1.0_224",
                    "driver": "sample-float-fast", "mode": "sync", "status": "error", "message": msg,
                    "model_info": {"family": "mobilenet_v2", "quantization": None}, "latency": None})
        for model in ("mobilenet_v1_1.0_224_quant", "mobilenet_v2_1.0_224_quant"):
            out.append({"kind": "benchmark", "schema_version": 1, "model": model, "driver": "sample-float-fast",
                        "mode": "sync", "status": "unsupported", "message": "no operation of the model is supported",
                        "unsupported_ops": ["QUANTIZE", "CONV_2D", "DEPTHWISE_CONV_2D", "DEQUANTIZE"],
                        "model_info": {"family": "mobilenet_v1" if "v1" in model else "mobilenet_v2",
                                       "quantization": "uint8"}, "latency": None})
    if drivers is None or "sample-quant" in drivers:
        out.append({"kind": "benchmark", "schema_version": 1, "model": "mobilenet_v1_1.0_224", "driver": "sample-quant",
                    "mode": "sync", "status": "unsupported", "unsupported_ops": ["CONV_2D", "DEPTHWISE_CONV_2D",
                                                                                "AVERAGE_POOL_2D", "SOFTMAX"],
                    "model_info": {"family": "mobilenet_v1", "quantization": None}, "latency": None})
    for r in out[n:]:
        r["timestamp"] = timestamp
    return out


def stress_records() -> list[dict]:
    tail = "\n".join(["[stress] compiling random graph 17 (42 operations)",
                      "[driver] sample-float-fast: preparing 42 steps",
                      "Fatal Python error: Segmentation fault <in native kernel>"])
    rows = [("mlts-fast", "random_graphs", "SUCCESS", 41.2, "", ""),
            ("mlts-fast", "operand_fuzz", "SUCCESS", 12.9, "", ""),
            ("mlts-fast", "large_model_memory", "SUCCESS", 8.1, "", ""),
            ("sample-float-fast", "random_graphs", "CRASH", 3.4, "the test process died (signal 11)", tail),
            ("sample-float-fast", "operand_fuzz", "SUCCESS", 11.0, "", ""),
            ("sample-float-fast", "execution_timeout", "HANG", 30.0, "no progress for 30 s; killed", "waiting on fence"),
            ("sample-quant", "random_graphs", "FAILURE", 2.2, "outputs differ from the reference by 9 steps", ""),
            ("sample-quant", "operand_fuzz", "SUCCESS", 10.4, "", "")]
    return [{"kind": "stress", "schema_version": 1, "run_id": "20250115T100000Z-abc123",
             "timestamp": "2025-01-15T10:31:00Z", "driver": d, "test": t, "outcome": o, "duration_s": s,
             "reason": reason, "log_tail": log} for d, t, o, s, reason, log in rows]


def write_run(run_dir: Path, records: list[dict], env: dict | None = None) -> Path:
    run_dir = Path(run_dir)
    with ResultsWriter(run_dir, run_id=f"run-{run_dir.name}") as w:
        for r in records:
            w.write(r)
    if env is not None:
        write_environment(run_dir, env)
    return run_dir


def write_sample_runs(base: Path, *, hostile: bool = True, stress: bool = True) -> dict[str, Path]:
    """run (this machine, with stress), baseline (same machine, older and faster), other (a second machine)."""
    base = Path(base)
    run = write_run(base / "run", benchmark_records(hostile=hostile) + (stress_records() if stress else []),
                    environment())
    # The baseline: sample-float-fast was faster then (so it regressed), sample-quant slower (it improved).
    baseline = write_run(base / "baseline", benchmark_records(hostile=hostile, seed=2, timestamp="2025-01-08T10:05:00Z",
                                                              scale={"sample-float-fast": 0.7, "sample-quant": 1.1}),
                         environment())
    other = write_run(base / "other", benchmark_records(drivers={REF, "sample-quant"}, seed=3),
                      environment("bench-02", "Intel Xeon Gold 6338"))
    return {"run": run, "baseline": baseline, "other": other}


if __name__ == "__main__":  # python tests/report/sample_runs.py DIR: write the runs for a look by hand
    import sys

    print(json.dumps({k: str(v) for k, v in write_sample_runs(Path(sys.argv[1])).items()}))
