"""Whole model families against onnxruntime on the same ONNX bytes: torch.onnx.export of torchvision's
architectures (re-written in tests/support/torch_architectures.py, seeded random weights) and the classic
CNNs shipped in the onnx package (light_*.onnx, weights as ConstantOfShape).

Rule, per output: max|mlts - ort| <= 1e-4 * max|ort|; classifiers: the same top-1 (the torch models are
checked to have a clear winner first); segmentation: per-pixel argmax agreement >= 99.9%.

Probe (per-model status, first error, timings): `.venv/bin/python tests/models/test_onnx_import_families.py`
"""
from __future__ import annotations

import glob
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import onnx
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from onnx_import_helpers import image_batch, ort_run  # noqa: E402

from mlts.models import import_onnx  # noqa: E402

pytest.importorskip("onnxruntime")

REL_TOL = 1e-4
LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


@dataclass(frozen=True)
class TorchCase:
    name: str
    resolution: int
    width: float = 1.0
    slow: bool = False


# Resolutions near each family's minimum; widths are torchvision's (1.0) except AlexNet, whose 6x6 adaptive pool
# exports only at 223+ pixels and whose 4096-wide classifier would dominate the time, and ConvNeXt, whose full
# width triples the export time (same layer patterns at 0.5).
TORCH_CASES = [
    TorchCase("mobilenet_v3_small", 64), TorchCase("mobilenet_v3_large", 64), TorchCase("efficientnet_b0", 64),
    TorchCase("shufflenet_v2_x1_0", 64), TorchCase("resnet18", 64), TorchCase("squeezenet1_1", 64),
    TorchCase("googlenet", 64), TorchCase("densenet121", 64, slow=True), TorchCase("regnet_y_400mf", 64),
    TorchCase("convnext_tiny", 64, 0.5, slow=True), TorchCase("mnasnet1_0", 64), TorchCase("alexnet", 223, 0.25),
    TorchCase("inception_v3", 75, slow=True), TorchCase("lraspp_mobilenet_v3_large", 64),
]
LIGHT_MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
                "squeezenet", "zfnet512"]
# Imported and run by the probe only: the operators of alexnet and zfnet512 at 224 px and 20 GFLOPs (about 25 s).
LIGHT_PROBE_ONLY = ["vgg19"]
LIGHT_SLOW = {"densenet121", "inception_v2", "resnet50", "zfnet512", "bvlc_alexnet"}


def compare(got: dict, ref: dict, *, task: str, clear_winner: bool) -> float:
    """The rule of this file (see the module docstring); `clear_winner`: ORT's top-1 must be unambiguous.
    Returns the worst max|mlts - ort| / max|ort| over the outputs."""
    worst = 0.0
    for name, expected in ref.items():
        expected = np.asarray(expected, np.float64)
        actual = np.asarray(got[name], np.float64)
        assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != onnxruntime's {expected.shape}"
        bound = REL_TOL * float(np.max(np.abs(expected)))
        diff = float(np.max(np.abs(actual - expected)))
        assert diff <= bound, f"{name}: max |mlts - ort| = {diff:.3g} > {bound:.3g} (1e-4 * max |ort|)"
        worst = max(worst, diff / bound * REL_TOL if bound else 0.0)
    out = next(iter(ref))
    expected, actual = np.asarray(ref[out], np.float64), np.asarray(got[out], np.float64)
    if task == "segmentation":
        agree = float(np.mean(actual.argmax(1) == expected.argmax(1)))
        assert agree >= 0.999, f"per-pixel argmax agrees on {agree:.4%} (< 99.9%)"
        return worst
    e, a = expected.reshape(-1), actual.reshape(-1)
    top2 = np.sort(e)[-2:]
    clear = top2[1] - top2[0] > 2 * REL_TOL * float(np.max(np.abs(e)))
    assert clear or not clear_winner, f"degenerate reference: onnxruntime's top two are {top2[1]} and {top2[0]}"
    if clear:
        assert a.argmax() == e.argmax(), f"top-1 {a.argmax()} != onnxruntime's {e.argmax()}"
    return worst


def check(model: bytes, feeds: dict, *, task: str = "classification", clear_winner: bool = True) -> dict:
    """Import, run on nnapi-reference, compare with onnxruntime; returns the seconds each step took and the
    worst relative difference."""
    times = {}
    t = time.perf_counter()
    imported = import_onnx(model)
    times["import"] = time.perf_counter() - t
    t = time.perf_counter()
    got = imported.run(feeds, devices=["nnapi-reference"])
    times["run"] = time.perf_counter() - t
    t = time.perf_counter()
    ref = ort_run(model, feeds)
    times["ort"] = time.perf_counter() - t
    times["rel"] = compare(got, ref, task=task, clear_winner=clear_winner)
    return times


# -- torch.onnx.export of torchvision's families ----------------------------------------------------------------
def torch_export(case: TorchCase, opset: int = 17) -> bytes:
    torch = pytest.importorskip("torch")
    from support.torch_architectures import export

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small models: threads only contend on the 2-core CI machines
    try:
        return export(case.name, case.resolution, opset=opset, seed=0, width=case.width)
    finally:
        torch.set_num_threads(threads)


def run_torch_case(case: TorchCase) -> dict:
    t = time.perf_counter()
    model = torch_export(case)
    export_s = time.perf_counter() - t
    from support.torch_architectures import SEGMENTATION

    task = "segmentation" if case.name in SEGMENTATION else "classification"
    times = check(model, {"input": image_batch(5, case.resolution)}, task=task)
    return {"export": export_s, **times}


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=[pytest.mark.slow] if c.slow else [])
                                  for c in TORCH_CASES])
def test_torchvision_family(case):
    run_torch_case(case)


# -- the classic CNNs of the onnx package ------------------------------------------------------------------------
def light_model(name: str) -> tuple[bytes, dict]:
    """The model with its last pooling input exposed as a second output (its constant weights make every
    channel, so every class, equal: that feature map is where the spatial arithmetic shows), and a seeded
    random input of the declared shape."""
    model = onnx.load(os.path.join(LIGHT_DIR, f"light_{name}.onnx"))
    graph = model.graph
    pool = next(n for n in reversed(graph.node) if n.op_type in ("GlobalAveragePool", "AveragePool", "MaxPool"))
    graph.output.append(onnx.helper.make_tensor_value_info(pool.input[0], onnx.TensorProto.FLOAT, None))
    inits = {i.name for i in graph.initializer}
    (data,) = [i for i in graph.input if i.name not in inits]
    shape = [d.dim_value for d in data.type.tensor_type.shape.dim]
    x = np.random.default_rng(3).uniform(-1, 1, shape).astype(np.float32)
    return model.SerializeToString(), {data.name: x}


def run_light_case(name: str) -> dict:
    model, feeds = light_model(name)
    return check(model, feeds, clear_winner=False)


def test_light_models_are_all_there():
    assert sorted(LIGHT_MODELS + LIGHT_PROBE_ONLY) == sorted(os.path.basename(p)[6:-5] for p in glob.glob(f"{LIGHT_DIR}/light_*.onnx"))


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n in LIGHT_SLOW else [])
                                  for n in LIGHT_MODELS])
def test_onnx_package_classic_cnn(name):
    run_light_case(name)


# -- probe ------------------------------------------------------------------------------------------------------
def probe(names: list[str]) -> None:
    """Every model (or those named): status, the first error, and the seconds of each step."""
    rows = [(f"torch:{c.name}", lambda c=c: run_torch_case(c)) for c in TORCH_CASES]
    rows += [(f"light:{n}", lambda n=n: run_light_case(n)) for n in LIGHT_MODELS + LIGHT_PROBE_ONLY]
    for label, run in rows:
        if names and not any(n in label for n in names):
            continue
        t, cpu = time.perf_counter(), time.process_time()
        try:
            times, status = run(), "PASS"
        except Exception as e:  # report and go on: this is the per-model table
            times, status = {}, f"FAIL {type(e).__name__}: {' '.join(str(e).split())[:300]}"
        steps = " ".join(f"{k} {v:.2g}" if k == "rel" else f"{k} {v:.2f}s" for k, v in times.items())
        print(f"{label:34s} {time.perf_counter() - t:6.2f}s (cpu {time.process_time() - cpu:5.2f}s)  {status}  {steps}",
              flush=True)


if __name__ == "__main__":
    probe(sys.argv[1:])
