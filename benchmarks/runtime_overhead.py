#!/usr/bin/env python
"""The runtime's own overhead: one ADD of two 1x4 float32 tensors, against onnxruntime in the same process.

    .venv/bin/python benchmarks/runtime_overhead.py [--runs N] [--repeats K] [--json FILE]

A one-operation model costs almost nothing to compute, so its latency is what mlts adds around a driver:
validation, request building, partition steps, the HAL call and (for a driver service) the IPC. Each path
is timed through the public API as a client uses it: a reusable Execution with its input and output
bound once, `compute()` (sync) or `burst_compute()` (burst), `--runs` calls per repetition, median per
call; the K repetitions are interleaved across paths (ABAB...) and the median of their medians is
reported, with onnxruntime's `session.run` on the same ADD as the peer (its run_with_iobinding, buffers
bound once as the reusable execution binds them, is shown in a second row). The table states each path as
microseconds and as a ratio to onnxruntime's session.run measured in the same run, and the calls to
Python functions one compute makes (what the tests guard). BLAS and numba are limited to one thread before numpy loads.
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
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlts.runtime import Burst, Compilation, Execution, Model, get_device  # noqa: E402
from mlts.runtime.app.manager import register_drivers, unregister_driver  # noqa: E402
from mlts.benchmark.overhead import PROBE_SHAPE as SHAPE, add_model, python_calls  # noqa: E402

SERVICE_SPEC = "mlts.runtime.drivers.sample:sample_all"
SERVICE_DEVICE = "sample-all"
#: the issue's goals, microseconds per execution
GOALS = {"mlts-fast sync": 20.0, "nnapi-reference sync": 30.0, "sample-all (service) sync": 80.0,
         "sample-all (service) burst": 50.0}



def mlts_call(model: Model, device: str, burst: bool) -> Callable[[], None]:
    """One compute on `device` alone, input and output bound once (a reusable execution)."""
    compilation = Compilation.for_devices(model, [get_device(device)])
    compilation.finish()
    x = np.arange(4, dtype=np.float32).reshape(SHAPE)
    out = np.empty(SHAPE, np.float32)
    execution = Execution(compilation)
    execution.set_reusable(True)
    execution.set_input(0, x)
    execution.set_input(1, x)
    execution.set_output(0, out)
    if burst:
        handle = Burst(compilation)
        call = lambda: execution.burst_compute(handle)  # noqa: E731
    else:
        call = execution.compute
    call()
    if not np.array_equal(out, x + x):
        raise SystemExit(f"{device}: wrong result {out}")
    return call


def onnxruntime_call(io_binding: bool = False) -> Callable[[], None] | None:
    """onnxruntime's session.run on the same ADD (the peer every ratio is against), or with `io_binding`
    its run_with_iobinding, buffers bound once (a second row, for reference)."""
    try:
        import onnx
        import onnxruntime as ort
    except ImportError:
        return None
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(SHAPE)) for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(SHAPE))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = np.arange(4, dtype=np.float32).reshape(SHAPE)
    feed = {"a": x, "b": x}
    del onnx
    if io_binding:  # inputs and the output bound once, as an mlts reusable execution binds them
        out = np.empty(SHAPE, np.float32)
        binding = session.io_binding()
        binding.bind_cpu_input("a", x)
        binding.bind_cpu_input("b", x)
        binding.bind_output("y", "cpu", 0, np.float32, list(SHAPE), out.ctypes.data)
        return lambda: session.run_with_iobinding(binding)
    return lambda: session.run(None, feed)


def median_us(call: Callable[[], None], runs: int) -> float:
    samples = []
    clock = time.perf_counter_ns
    for _ in range(runs):
        t0 = clock()
        call()
        samples.append(clock() - t0)
    return statistics.median(samples) / 1000.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3000, help="calls per repetition (default 3000)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repetitions (default 3)")
    parser.add_argument("--no-service", action="store_true", help="skip the driver-service paths")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(1)
    except ImportError:
        pass

    model = add_model()
    paths: dict[str, Callable[[], None]] = {}
    peer = onnxruntime_call()
    if peer is not None:
        paths["onnxruntime session.run"] = peer
        paths["onnxruntime io-binding"] = onnxruntime_call(io_binding=True)
    paths["mlts-fast sync"] = mlts_call(model, "mlts-fast", burst=False)
    paths["nnapi-reference sync"] = mlts_call(model, "nnapi-reference", burst=False)
    paths["nnapi-reference burst"] = mlts_call(model, "nnapi-reference", burst=True)
    if not args.no_service:
        register_drivers([SERVICE_SPEC], hosting="service")
        paths["sample-all (service) sync"] = mlts_call(model, SERVICE_DEVICE, burst=False)
        paths["sample-all (service) burst"] = mlts_call(model, SERVICE_DEVICE, burst=True)

    for call in paths.values():  # warm-up
        median_us(call, max(50, args.runs // 20))
    medians: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.repeats):
        for name, call in paths.items():
            medians[name].append(median_us(call, args.runs))
    calls = {name: python_calls(call) for name, call in paths.items() if not name.startswith("onnxruntime")}

    ort_us = statistics.median(medians["onnxruntime session.run"]) if peer is not None else None
    rows = []
    print(f"{'path':30} {'us/call':>9} {'vs ort':>8} {'goal us':>8} {'py calls':>9}   repetitions (us)")
    for name, values in medians.items():
        us = statistics.median(values)
        ratio = us / ort_us if ort_us else None
        goal = GOALS.get(name)
        rows.append({"path": name, "median_us": round(us, 2), "vs_onnxruntime": None if ratio is None else round(ratio, 2),
                     "goal_us": goal, "python_calls": calls.get(name), "repetitions_us": [round(v, 2) for v in values]})
        print(f"{name:30} {us:9.1f} {'' if ratio is None else f'{ratio:7.1f}x':>8} "
              f"{'' if goal is None else f'{goal:g}':>8} {calls.get(name, ''):>9}   "
              + " ".join(f"{v:.1f}" for v in values))
    if not args.no_service:
        unregister_driver(SERVICE_DEVICE)
    if args.json:
        args.json.write_text(json.dumps({"runs": args.runs, "repeats": args.repeats, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
