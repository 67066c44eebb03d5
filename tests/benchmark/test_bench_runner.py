"""The benchmark runner and `mlts benchmark`, on the smallest zoo model with stable random weights."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mlts.benchmark import runner as R
from mlts.benchmark.record_schema import BenchmarkRecord
from mlts.benchmark.records import read_results, to_csv
from mlts.benchmark.reference_cache import REFERENCE_DIR
from mlts.benchmark.run_config import (DEFAULT_MODELS, QUICK_MODELS, BenchmarkConfig, parse_modes, parse_preference,
                                       select_drivers, select_models)
from mlts.benchmark.stats import RunLengthRules
from mlts.runtime import Capabilities, MltsError, ResultCode, devices, register_driver, unregister_driver
from mlts.runtime.drivers import KernelDriver, faulty
from mlts.runtime.drivers.sample import sample_drivers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from model_weights import stable_weights  # noqa: E402

TINY = "mobilenet_v1_0.25_128"
REF = "nnapi-reference"
#: Two timed runs per case (max_s only guards against a stuck case), so every test takes seconds.
TINY_RULES = RunLengthRules(warmup_runs=1, warmup_min_s=0.0, min_runs=2, min_s=0.0, max_s=5.0, name="test")


@pytest.fixture(scope="module")
def tiny_zoo(tmp_path_factory):
    """Weights for the smallest model only (others stay unavailable), a private model cache."""
    from mlts.datasets.preprocess import to_float_input
    from mlts.datasets.shapes import ShapesDataset
    from mlts.models import zoo_registry as zoo_module

    tmp = tmp_path_factory.mktemp("zoo")
    entry = zoo_module.get_entry(TINY)
    x = to_float_input(np.stack([ShapesDataset("calibration", 128)[i][0] for i in range(16)]))
    weights = stable_weights(entry.family, entry.alpha, x)
    wdir = tmp / "weights"
    wdir.mkdir()
    np.savez_compressed(wdir / f"{TINY}.npz", **{k: v.astype(np.float16) for k, v in weights.items()})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(zoo_module, "WEIGHTS_DIR", wdir)
        mp.setattr(zoo_module, "CALIBRATION_IMAGES", 24)
        mp.setenv("MLTS_CACHE", str(tmp / "cache"))
        yield entry


@pytest.fixture
def register():
    """register(*drivers): devices for this test only (also cleans up what a CLI run registered)."""
    before = [d.name for d in devices()]

    def _register(*drivers):
        return [register_driver(d) for d in drivers]

    yield _register
    for d in devices():
        if d.name not in before:
            unregister_driver(d.name)
            close = getattr(d.driver, "close", None)
            if getattr(d.driver, "hosting", None) == "service" and close is not None:
                close()
    assert [d.name for d in devices()] == before


def _sample(name: str):
    return next(d for d in sample_drivers() if d.name == name)


def _config(drivers, models=(TINY,), **kw) -> BenchmarkConfig:
    kw.setdefault("images", 4)
    kw.setdefault("rules", TINY_RULES)
    return BenchmarkConfig(models=list(models), drivers=list(drivers), preset="test", **kw)


def _records(run_dir) -> dict[tuple[str, str, str], dict]:
    return {(r["model"], r["driver"], r["mode"]): r for r in read_results(run_dir).benchmark_records()}


def test_run_writes_valid_records_with_reference_accuracy_and_partitioning(tiny_zoo, register, tmp_path):
    register(_sample("sample-minimal"))
    summary = R.run_benchmark_config(_config([REF, "sample-minimal"]), tmp_path / "run", stream=None)
    assert summary.cases == 2 and summary.records_written == 3
    assert summary.counts == {"ok": 2, "unsupported": 1, "error": 0}
    recs = _records(tmp_path / "run")
    for r in recs.values():
        BenchmarkRecord.from_dict(r)  # validates against the schema
        assert r["run_id"] and r["timestamp"] and r["config"]["preset"] == "test"
        assert r["seeds"]["images"] == [0, 4] and r["seeds"]["timing_input_sha256"]
        assert r["model_info"]["resolution"] == 128 and r["model_info"]["operations"] > 0

    ref = recs[(TINY, REF, "sync")]
    assert ref["status"] == "ok" and ref["devices"] == [REF]
    lat = ref["latency"]
    assert lat["count"] >= 2 and 0 < lat["min_ms"] <= lat["p50_ms"] <= lat["p99_ms"] <= lat["max_ms"]
    assert sum(lat["histogram"]["counts"]) == lat["count"] and lat["throughput_per_s"] > 0
    assert ref["first_inference_ms"] > 0 and ref["compilation_ms"]["without_cache"] > 0
    assert ref["run_length"]["timed_runs"] == lat["count"] and ref["run_length"]["rules"]["name"] == "test"
    assert ref["driver_time"]["in_driver"]["count"] == lat["count"]  # timing measured, single device
    assert ref["partition"]["operations_per_device"] == {REF: ref["model_info"]["operations"]}
    assert ref["peak_rss_bytes"] > 0
    acc = ref["accuracy"]
    assert acc["max_abs_error"] == 0 and acc["mse"] == 0 and acc["cts_pass"] is True
    assert acc["top1_agreement"] == 1.0 and acc["top5_agreement"] == 1.0
    assert acc["label_samples"] == 4 and acc["top1_accuracy"] is not None
    assert (tmp_path / "run" / REFERENCE_DIR / f"{TINY}.npz").is_file()  # cached for resume

    alone = recs[(TINY, "sample-minimal", "sync")]
    assert alone["status"] == "unsupported" and alone["latency"] is None
    assert {"DEPTHWISE_CONV_2D", "SOFTMAX", "FULLY_CONNECTED"} <= set(alone["unsupported_ops"])
    assert "CONV_2D" not in alone["unsupported_ops"]
    assert "partitioned" in alone["message"]
    assert alone["support"]["supported_operations"] + len(alone["support"]["unsupported_operations"]) \
        == alone["support"]["total_operations"]

    part = recs[(TINY, f"sample-minimal+{REF}", "sync")]
    assert part["status"] == "ok" and part["devices"] == ["sample-minimal", REF]
    per_device = part["partition"]["operations_per_device"]
    assert set(per_device) == {"sample-minimal", REF}
    assert sum(per_device.values()) == part["partition"]["total_operations"]
    assert any(op.endswith(":CONV_2D@sample-minimal") for op in part["partition"]["operations"])
    assert any(op.endswith(":SOFTMAX@" + REF) for op in part["partition"]["operations"])
    assert part["driver_time"] is None or part["driver_time"]["in_driver"] is None  # multi-device: no timing
    assert part["accuracy"]["cts_pass"] is True and part["accuracy"]["top1_agreement"] == 1.0
    assert part["partitioned"]["driver"] == "sample-minimal"

    run = json.loads((tmp_path / "run" / R.RUN_FILE).read_text())
    assert run["config"]["drivers"] == [REF, "sample-minimal"] and run["finished"]


def test_errors_are_recorded_and_the_run_goes_on(tiny_zoo, register, tmp_path):
    register(faulty.create("fail@prepare"), faulty.create("unsupported@execute"),
             faulty.create("wrong-large@execute"), _sample("sample-all"))
    drivers = [REF, "faulty-fail-prepare", "faulty-unsupported-execute", "faulty-wrong-large-execute", "sample-all"]
    summary = R.run_benchmark_config(_config(drivers), tmp_path / "run", stream=None)
    assert summary.records_written == 5
    recs = _records(tmp_path / "run")
    fail = recs[(TINY, "faulty-fail-prepare", "sync")]
    assert fail["status"] == "error" and fail["message"].startswith("compiling: OP_FAILED")
    assert "injected preparation failure" in fail["message"]
    run_fail = recs[(TINY, "faulty-unsupported-execute", "sync")]
    assert run_fail["status"] == "error" and run_fail["message"].startswith("running (sync)")
    assert run_fail["compilation_ms"]["without_cache"] > 0  # what came before the failure is kept
    wrong = recs[(TINY, "faulty-wrong-large-execute", "sync")]
    assert wrong["status"] == "ok" and wrong["accuracy"]["cts_pass"] is False
    assert wrong["accuracy"]["max_abs_error"] > 0 and wrong["accuracy"]["top1_agreement"] < 1.0
    assert recs[(TINY, "sample-all", "sync")]["status"] == "ok"  # after the failures


class _NoCacheDriver(KernelDriver):
    """Every operation, but no compilation caching (a driver that needs no cache files)."""

    def get_number_of_cache_files_needed(self):
        return (0, 0)


def test_compilation_with_and_without_the_cache_as_mlts_reports_it(tiny_zoo, register, tmp_path):
    from mlts.models.mobilenet import weight_shapes

    register(_sample("sample-all"), _NoCacheDriver("bench-no-cache", Capabilities.uniform(2.0, 2.0)))
    R.run_benchmark_config(_config([REF, "sample-all", "bench-no-cache"], images=0), tmp_path / "run", stream=None)
    recs = _records(tmp_path / "run")
    parameters = sum(int(np.prod(s)) for s in weight_shapes(tiny_zoo.family, tiny_zoo.alpha).values())
    for driver in (REF, "sample-all"):
        r = recs[(TINY, driver, "sync")]
        BenchmarkRecord.from_dict(r)
        ms = r["compilation_ms"]
        assert r["status"] == "ok" and ms["without_cache"] > 0 and ms["save_to_cache"] > 0 and ms["with_cache"] > 0
        cache = r["compilation_cache"]
        assert cache["status"] == "prepared-from-cache" and cache["prepared_from_cache"] is True
        assert cache["saved"] == "saved"
        assert cache["size_bytes"] >= 4 * parameters  # every float32 weight is in the data cache
    none = recs[(TINY, "bench-no-cache", "sync")]
    assert none["status"] == "ok" and none["compilation_ms"]["without_cache"] > 0
    assert none["compilation_ms"]["save_to_cache"] is None and none["compilation_ms"]["with_cache"] is None
    assert none["compilation_cache"] is None
    R.run_benchmark_config(_config([REF], images=0, compile_with_cache=False), tmp_path / "off", stream=None)
    off = _records(tmp_path / "off")[(TINY, REF, "sync")]
    assert off["compilation_ms"]["with_cache"] is None and off["compilation_cache"] is None


class _SlowFirstDriver(_NoCacheDriver):
    """Pays FIRST_S once, in its first preparation (a JIT compiler warming up); later preparations are quick."""

    FIRST_S = 0.6

    def __init__(self, name):
        super().__init__(name, Capabilities.uniform(2.0, 2.0))
        self.prepare_calls = 0

    def prepare_model(self, model, *args):
        self.prepare_calls += 1
        if self.prepare_calls == 1:
            time.sleep(self.FIRST_S)
        return super().prepare_model(model, *args)


def test_the_first_compilation_is_timed_apart_from_the_compile_time(tiny_zoo, register, tmp_path):
    slow = _SlowFirstDriver("bench-slow-first")
    register(slow)
    first_ms = 1000 * _SlowFirstDriver.FIRST_S
    R.run_benchmark_config(_config([slow.name, REF], modes=["sync", "async"], images=1), tmp_path / "run",
                           stream=None)
    recs = _records(tmp_path / "run")
    for r in recs.values():
        BenchmarkRecord.from_dict(r)
        assert r["status"] == "ok" and 0 < r["compilation_ms"]["without_cache"] < first_ms
    first = recs[(TINY, slow.name, "sync")]["compilation_ms"]
    assert first["first_use"] >= first_ms  # the one-time cost is there, and only there
    assert recs[(TINY, slow.name, "async")]["compilation_ms"]["first_use"] is None  # compiled once
    assert slow.prepare_calls == 3  # first use, sync, async: no driver caching, nothing else compiles on it
    # nnapi-reference's outputs for accuracy (during the first case) were its first compilation of the model
    assert recs[(TINY, REF, "sync")]["compilation_ms"]["first_use"] is None
    header = to_csv(recs.values(), tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert "compilation_ms.first_use" in header


def test_a_hanging_driver_service_misses_its_deadline_and_the_run_goes_on(tiny_zoo, register, tmp_path):
    from mlts.runtime.app.manager import register_drivers

    register_drivers(["faulty:hang@execute?seconds=60"], hosting="service")
    drivers = ["faulty-hang-execute-seconds60", REF]
    R.run_benchmark_config(_config(drivers, images=1, timeout_s=1.0), tmp_path / "run", stream=None)
    recs = _records(tmp_path / "run")
    hang = recs[(TINY, "faulty-hang-execute-seconds60", "sync")]
    assert hang["status"] == "error" and "MISSED_DEADLINE" in hang["message"]
    assert hang["config"]["timeout_s"] == 1.0
    assert recs[(TINY, REF, "sync")]["status"] == "ok"


def test_burst_and_async_modes(tiny_zoo, tmp_path):
    R.run_benchmark_config(_config([REF], modes=["burst", "async"], images=2), tmp_path / "run", stream=None)
    recs = _records(tmp_path / "run")
    assert set(recs) == {(TINY, REF, "burst"), (TINY, REF, "async")}
    for r in recs.values():
        assert r["status"] == "ok" and r["latency"]["count"] >= 2
        assert r["accuracy"]["max_abs_error"] == 0 and "outputs" not in r["accuracy"]  # computed, not shared


def test_resume_skips_finished_cases(tiny_zoo, register, tmp_path):
    register(_sample("sample-minimal"), _sample("sample-all"))
    run_dir = tmp_path / "run"
    R.run_benchmark_config(_config([REF, "sample-minimal"], images=2), run_dir, stream=None)
    lines = (run_dir / "results.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) == 3
    # As if killed while writing the partitioned record: the last line is cut in half.
    (run_dir / "results.jsonl").write_text("".join(lines[:2]) + lines[2][:40])
    summary = R.run_benchmark_config(_config([REF, "sample-minimal", "sample-all"], images=2), run_dir,
                                     stream=None)
    assert summary.resumed_records == 2
    recs = read_results(run_dir).benchmark_records()
    assert [r["driver"] for r in recs] == [REF, "sample-minimal", f"sample-minimal+{REF}", "sample-all"]
    # Nothing left to do: a third run writes nothing.
    summary = R.run_benchmark_config(_config([REF, "sample-minimal", "sample-all"], images=2), run_dir,
                                     stream=None)
    assert summary.records_written == 0 and len(read_results(run_dir).benchmark_records()) == 4


def test_models_without_weights_are_skipped_with_a_note(tiny_zoo, tmp_path):
    stream = _Lines()
    summary = R.run_benchmark_config(_config([REF], models=[TINY, "mobilenet_v2_1.0_224"], images=1),
                                     tmp_path / "run", stream=stream)
    assert "mobilenet_v2_1.0_224" in summary.skipped_models and "weights" in summary.skipped_models[
        "mobilenet_v2_1.0_224"]
    assert summary.cases == 1 and summary.records_written == 1
    text = stream.text()
    assert "skipping mobilenet_v2_1.0_224" in text and "[1/1]" in text and "ETA" in text


class _Lines:
    def __init__(self):
        self.parts = []

    def write(self, s):
        self.parts.append(s)

    def flush(self):
        pass

    def text(self):
        return "".join(self.parts)


def test_selection_by_names_and_regexes(register):
    assert select_models(None) == list(DEFAULT_MODELS)
    assert select_models(None, quick=True) == list(QUICK_MODELS)
    assert select_models([r"mobilenet_v1_0\.25_128(_quant)?"]) == [TINY, TINY + "_quant"]
    assert select_models("mobilenet_v2_0.35_128,mobilenet_v1_0.25_128") == [TINY, "mobilenet_v2_0.35_128"]
    with pytest.raises(MltsError) as info:
        select_models(["resnet.*"])
    assert info.value.code == ResultCode.BAD_DATA and "no model matches" in info.value.message
    register(*sample_drivers())
    assert select_drivers(["sample-float-.*"]) == [REF, "sample-float-fast", "sample-float-slow"]
    assert select_drivers(["sample-float-.*"], reference=False) == ["sample-float-fast", "sample-float-slow"]
    assert select_drivers(None)[0] == REF
    with pytest.raises(MltsError):
        select_drivers(["no-such-driver"])
    with pytest.raises(MltsError):
        select_drivers([REF], reference=False)
    with pytest.raises(MltsError):
        parse_modes("sync,fenced")
    assert parse_preference("low-power").name == "LOW_POWER"
    with pytest.raises(MltsError):
        _config([REF], images=2000)
    with pytest.raises(MltsError):
        _config([REF], timeout_s=0)


# --- the command line ---------------------------------------------------------------------------

def _main(argv):
    from mlts.cli import main

    return main(argv)


def test_cli_runs_writes_the_run_directory_and_resumes(tiny_zoo, register, tmp_path, capsys):
    run_dir = tmp_path / "run"
    rc = _main(["benchmark", "--quick", "--models", TINY, "--drivers", "sample-minimal", "--driver", "sample",
                "--in-process", "--images", "2", "--out", str(run_dir), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    summary = json.loads(out)
    assert summary["cases"] == 2 and summary["counts"] == {"ok": 2, "unsupported": 1, "error": 0}
    for name in ("results.jsonl", "results.csv", "environment.json", "run.json"):
        assert (run_dir / name).is_file(), name
    assert "[1/2]" in err and "[2/2]" in err
    run = json.loads((run_dir / "run.json").read_text())
    assert run["config"]["preset"] == "quick" and run["driver_specs"] == ["sample"]
    assert run["config"]["rules"]["name"] == "quick"
    csv = (run_dir / "results.csv").read_text().splitlines()
    assert len(csv) == 4 and csv[0].startswith("run_id,")

    # Resuming a finished run (the sample drivers come back from run.json) runs nothing.
    for d in devices():
        if d.name.startswith("sample-"):
            unregister_driver(d.name)
    rc = _main(["benchmark", "--resume", str(run_dir), "--no-report"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "already done" in err and out.startswith("results: ")
    assert len(read_results(run_dir).benchmark_records()) == 3


def test_cli_errors_and_help(tiny_zoo, tmp_path, capsys):
    assert _main(["benchmark", "--models", "resnet50", "--out", str(tmp_path / "a")]) == 1
    assert "no model matches 'resnet50'" in capsys.readouterr().err
    assert _main(["benchmark", "--resume", str(tmp_path / "nowhere")]) == 1
    assert "nothing to resume" in capsys.readouterr().err
    assert _main(["benchmark", "--resume", str(tmp_path), "--quick"]) == 1
    assert "leave out --quick" in capsys.readouterr().err
    # Only unavailable models: nothing could run, which is a failure, said plainly.
    rc = _main(["benchmark", "--models", "mobilenet_v2_1.0_224", "--drivers", REF, "--no-report",
                "--out", str(tmp_path / "b")])
    assert rc == 1 and "lacks its trained weights" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _main(["benchmark", "--help"])
    help_text = capsys.readouterr().out
    assert "quick: warm-up" in help_text and "default: warm-up" in help_text and "--no-reference" in help_text


def test_cli_baseline_comparison(tiny_zoo, tmp_path, capsys):
    base = tmp_path / "base"
    assert _main(["benchmark", "--quick", "--models", TINY, "--drivers", REF, "--images", "1",
                  "--no-report", "--out", str(base)]) == 0
    capsys.readouterr()
    rc = _main(["benchmark", "--quick", "--models", TINY, "--drivers", REF, "--images", "1", "--no-report",
                "--out", str(tmp_path / "cur"), "--baseline", str(base), "--json"])
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["comparison"]["verdict"] in ("PASS", "WARN", "FAIL")
    assert rc == (1 if summary["comparison"]["verdict"] == "FAIL" else 0)
    assert "mlts compare" in err
