"""Every stress test function, run in this process on nnapi-reference with tiny durations (the
watchdog's part is tested elsewhere): each succeeds on a healthy driver and reports what it did; the
models come from the zoo when it has weights."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

from mlts.stress.catalog import TESTS
from mlts.stress.context import StressSkipped
from mlts.stress.models import BUILTIN, builtin_model, check_outputs, model_names, zoo_names
from mlts.stress.suite import FALLBACK_MODELS

from stress_context import make_context

REF = "nnapi-reference"


def run_test_function(test, tmp_path, driver=REF, spec=None, **params):
    p = test.parameters(quick=True)
    p.pop("address_space_gb", None)  # never cap the address space of the pytest process
    p.setdefault("models", list(FALLBACK_MODELS))
    p.update(params)
    ctx = make_context(driver, spec=spec, out_dir=tmp_path, duration=min(test.duration(True, 1.0), 0.4), params=p)
    module, _, name = test.function.partition(":")
    try:
        return getattr(importlib.import_module(module), name)(ctx)
    finally:
        ctx.close()


@pytest.mark.parametrize("test", [t for t in TESTS if t.name not in ("multi_process", "client_termination")],
                         ids=lambda t: t.name)
def test_each_test_succeeds_on_the_reference(test, tmp_path, no_strays):
    details = run_test_function(test, tmp_path, models=["convnet_f32", "conv_add_f32"]
                                if test.name != "performance_degradation" else ["convnet_f32"], min_samples=2)
    assert isinstance(details, dict) and "skipped" not in str(details.get("note", ""))


@pytest.mark.parametrize("name", ["client_termination", "multi_process"])
def test_termination_tests_succeed_and_leave_nothing(name, tmp_path, no_strays):
    test = {t.name: t for t in TESTS}[name]
    details = run_test_function(test, tmp_path, models=["convnet_f32"], kills=1, processes=2, max_delay_s=0.3)
    assert details.get("kills", details.get("killed")) == 1


def test_a_driver_that_takes_none_of_the_models_is_skipped_naming_why(tmp_path):
    test = {t.name: t for t in TESTS}["interleaved_models"]
    with pytest.raises(StressSkipped) as e:
        run_test_function(test, tmp_path, driver="sample-quant", spec="sample", models=["convnet_f32"])
    assert e.value.reason == "sample-quant cannot run any of the test's models: convnet_f32 (none of its operations)"


def test_builtin_models_agree_across_drivers():
    for name in BUILTIN:
        m = builtin_model(name)
        assert m.source == "built-in" and m.inputs and m.spec["name"].startswith(name.split("_large")[0][:7])
    a = builtin_model("convnet_u8")
    assert a.output_codes[0].name == "TENSOR_QUANT8_ASYMM"
    x = np.zeros((1, 10), np.uint8)
    assert check_outputs([x], [x + 3], a.output_codes) is None
    assert "4 steps" in check_outputs([x], [x + 4], a.output_codes)


def test_without_zoo_weights_the_suite_uses_its_own_models(monkeypatch, tmp_path):
    from mlts.models import zoo_registry as zoo_module

    monkeypatch.setattr(zoo_module, "WEIGHTS_DIR", tmp_path)
    names, note = model_names()
    assert names == FALLBACK_MODELS and "own small models" in note


def test_zoo_models_are_used_when_they_have_weights(tmp_path, monkeypatch):
    """As tests/models/test_zoo.py::small_zoo: stable random weights for the smallest MobileNet."""
    from mlts.datasets.preprocess import to_float_input
    from mlts.datasets.shapes import ShapesDataset
    from mlts.models import zoo_registry as zoo_module
    from models.model_weights import stable_weights

    entry = zoo_module.get_entry("mobilenet_v1_0.25_128")
    x = to_float_input(np.stack([ShapesDataset("calibration", 128)[i][0] for i in range(8)]))
    weights = stable_weights(entry.family, entry.alpha, x)
    wdir = tmp_path / "weights"
    wdir.mkdir()
    np.savez_compressed(wdir / "mobilenet_v1_0.25_128.npz", **{k: v.astype(np.float16) for k, v in weights.items()})
    monkeypatch.setattr(zoo_module, "WEIGHTS_DIR", wdir)
    monkeypatch.setenv("MLTS_CACHE", str(tmp_path / "cache"))
    assert zoo_names() == ["mobilenet_v1_0.25_128"]  # the quantized ones are not built yet: left out
    names, note = model_names()
    assert names == ["mobilenet_v1_0.25_128"] and not note
    test = {t.name: t for t in TESTS}["parallel_inference"]
    details = run_test_function(test, tmp_path, models=names, threads=2)
    assert details["models"] == ["mobilenet_v1_0.25_128"] and details["executions"] > 0


def test_the_first_zoo_models_are_one_of_each_task():
    """Tests that take a few models get an image classifier, the sequence model and the detector (each task's
    smallest), not the two LSTM variants that are the smallest models overall."""
    from mlts.models.zoo_registry import get_entry

    names = zoo_names()
    assert names[:3] == ["mobilenet_v1_0.25_128", "lstm_commands", "ssdlite_mobilenet_v2_0.5_160"]
    assert [get_entry(n).task for n in names[:3]] == ["image-classification", "sequence-classification", "detection"]
    rest = [get_entry(n).macs for n in names[3:]]
    assert rest == sorted(rest)
