"""The zoo registry: names, building float/quantized ONNX from a weights file, caching, loading."""
from __future__ import annotations

import numpy as np
import pytest

from mlts.datasets.preprocess import to_float_input, to_quant_input
from mlts.datasets.shapes import ShapesDataset
from mlts.models import mobilenet, zoo_registry as zoo_module
from mlts.models.zoo_registry import get_entry, load, onnx_path, zoo
from mlts.runtime import MltsError, ResultCode
from model_weights import stable_weights

ort = pytest.importorskip("onnxruntime")


def test_zoo_lists_every_mlts_size_in_three_variants():
    names = {e.name for e in zoo()}
    for base in ("mobilenet_v1_1.0_224", "mobilenet_v1_0.75_192", "mobilenet_v1_0.5_160", "mobilenet_v1_0.25_128",
                 "mobilenet_v2_1.0_224", "mobilenet_v2_0.75_192", "mobilenet_v2_0.5_160", "mobilenet_v2_0.35_128"):
        assert {base, base + "_quant", base + "_quant_int8"} <= names
    # and the MLTS-style workloads beyond the MobileNets: the LSTM (float, int8: QUANTIZED_LSTM is signed) and SSD-lite
    assert {"lstm_commands", "lstm_commands_quant_int8", "ssdlite_mobilenet_v2_0.5_160",
            "ssdlite_mobilenet_v2_0.5_160_quant", "ssdlite_mobilenet_v2_0.5_160_quant_int8"} <= names
    assert len(names) == 24 + 5
    with pytest.raises(MltsError) as info:
        get_entry("resnet50")
    assert info.value.code == ResultCode.BAD_DATA


@pytest.fixture
def small_zoo(tmp_path, monkeypatch):
    """The smallest zoo model with stable random weights in a temporary weights dir and cache."""
    entry = get_entry("mobilenet_v1_0.25_128")
    x = to_float_input(np.stack([ShapesDataset("calibration", 128)[i][0] for i in range(16)]))
    weights = stable_weights(entry.family, entry.alpha, x)
    wdir = tmp_path / "weights"
    wdir.mkdir()
    np.savez_compressed(wdir / "mobilenet_v1_0.25_128.npz", **{k: v.astype(np.float16) for k, v in weights.items()})
    monkeypatch.setattr(zoo_module, "WEIGHTS_DIR", wdir)
    monkeypatch.setattr(zoo_module, "CALIBRATION_IMAGES", 24)
    monkeypatch.setenv("MLTS_CACHE", str(tmp_path / "cache"))
    return entry


def test_float_model_is_built_once_and_matches_onnxruntime(small_zoo):
    path = onnx_path(small_zoo.name)
    assert path.exists() and onnx_path(small_zoo.name) == path
    mtime = path.stat().st_mtime_ns
    imported = load(small_zoo.name)
    assert path.stat().st_mtime_ns == mtime  # cached, not rebuilt
    images = np.stack([ShapesDataset("heldout", 128)[i][0] for i in range(4)])
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for k in range(4):
        x = to_float_input(images[k])
        (expected,) = sess.run(None, {"input": x})
        actual = imported.run({"input": x})["probabilities"]
        assert np.abs(actual - expected).max() < 1e-4


def test_quantized_model_takes_quantized_images(small_zoo):
    imported = load(small_zoo.name + "_quant")
    assert imported.input_names == ["input"]
    image = ShapesDataset("heldout", 128)[0][0]
    out = imported.run({"input": to_quant_input(image)})["probabilities"]
    assert out.dtype == np.uint8 and out.shape == (1, mobilenet.NUM_CLASSES)
    sess = ort.InferenceSession(str(onnx_path(small_zoo.name + "_quant")), providers=["CPUExecutionProvider"],
                                sess_options=_unoptimized())
    (expected,) = sess.run(None, {"input": to_quant_input(image)})
    assert np.abs(out.astype(int) - expected.astype(int)).max() <= 3


def _unoptimized():
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return opts


def test_missing_weights_give_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(zoo_module, "WEIGHTS_DIR", tmp_path)
    monkeypatch.setenv("MLTS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(MltsError) as info:
        onnx_path("mobilenet_v2_1.0_224")
    assert "train_zoo" in info.value.message
