"""The README's example driver, copied into a fresh directory and named by path, is a device and runs a
zoo model correctly (its operations on it, the rest on the CPU, as the partitioner decides)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from mlts.datasets.preprocess import to_float_input
from mlts.datasets.shapes import ShapesDataset
from mlts.models import zoo_registry as zoo_module
from mlts.models.zoo_registry import get_entry, load
from mlts.runtime import get_device, register_driver, unregister_driver
from mlts.runtime.app.plugins import load_drivers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
from model_weights import stable_weights  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "example_driver.py")
MODEL = "mobilenet_v1_0.25_128"


@pytest.fixture
def copied(tmp_path):
    """The example in a directory of its own, away from the repository."""
    where = tmp_path / "vendor"
    where.mkdir()
    return str(shutil.copy(EXAMPLE, where / "example_driver.py"))


@pytest.fixture
def small_zoo(tmp_path, monkeypatch):
    """The smallest zoo model with stable random weights (the trained ones are not committed yet)."""
    entry = get_entry(MODEL)
    x = to_float_input(np.stack([ShapesDataset("calibration", 128)[i][0] for i in range(16)]))
    weights = stable_weights(entry.family, entry.alpha, x)
    wdir = tmp_path / "weights"
    wdir.mkdir()
    np.savez_compressed(wdir / f"{MODEL}.npz", **{k: v.astype(np.float16) for k, v in weights.items()})
    monkeypatch.setattr(zoo_module, "WEIGHTS_DIR", wdir)
    monkeypatch.setenv("MLTS_CACHE", str(tmp_path / "cache"))
    return entry


def test_example_driver_is_listed_by_mlts_devices(copied, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MLTS_DRIVERS"}
    proc = subprocess.run([sys.executable, "-m", "mlts.cli", "devices", "--driver", copied, "--json"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    row = rows["example-driver"]
    expected_hosting = "service" if importlib.util.find_spec("mlts.runtime.service") else "in-process"
    assert row["hosting"] == expected_hosting and row["source"] == copied
    assert row["type"] == "ACCELERATOR" and row["version"] == "1.0"
    assert row["performance"]["TENSOR_FLOAT32"] == {"exec_time": 0.5, "power_usage": 0.5}
    assert "TENSOR_QUANT8_ASYMM" not in row["performance"]


def test_example_driver_runs_a_zoo_model_like_the_reference(copied, small_zoo):
    (driver,) = load_drivers(copied)  # default hosting: a service for a third-party driver
    device = register_driver(driver)
    try:
        imported = load(MODEL)
        reference = get_device("nnapi-reference")
        both = [device, reference]
        plan = imported.compilation(both).plan
        step_devices = [s.device.name for s in plan.steps]
        assert step_devices == ["nnapi-reference", "example-driver"]  # conv body on the CPU, head on it
        assert [op.type.name for op in plan.steps[1].model.main.operations] == [
            "RESHAPE", "FULLY_CONNECTED", "SOFTMAX"]
        images = np.stack([ShapesDataset("heldout", 128)[i][0] for i in range(3)])
        for image in images:
            x = to_float_input(image)
            expected = imported.run({"input": x}, devices=[reference])["probabilities"]
            actual = imported.run({"input": x}, devices=both)["probabilities"]
            np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
            assert actual.argmax() == expected.argmax()
    finally:
        unregister_driver(driver.name)
        close = getattr(driver, "close", None)
        if close:
            close()
