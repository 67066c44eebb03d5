"""The results record schema, the crash-safe writer (resume after a kill), reading and merging, CSV."""
import json
import os

import numpy as np
import pandas as pd
import pytest

from mlts.benchmark import results_writer as writer_mod
from mlts.benchmark.record_schema import SCHEMA_VERSION, BenchmarkRecord, case_key, validate_record
from mlts.benchmark.records import RESULTS_FILE, flatten_record, new_run_dir, read_results, to_csv
from mlts.benchmark.results_writer import ResultsWriter
from mlts.benchmark.stats import latency_stats
from mlts.runtime import MltsError, Preference, ResultCode


def full_record(**kw):
    r = BenchmarkRecord(model="mobilenet_v2_1.0_224_quant", driver="sample-all", mode="burst",
                        preference="SUSTAINED_SPEED", devices=["sample-all", "nnapi-reference"],
                        model_info={"family": "mobilenet_v2", "quantization": "uint8", "input_shape": [1, 224, 224, 3]},
                        compilation_ms={"without_cache": 120.5, "save_to_cache": 131.0, "with_cache": 12.25},
                        compilation_cache={"status": "prepared-from-cache", "saved": "saved", "size_bytes": 4096,
                                           "prepared_from_cache": True},
                        first_inference_ms=9.5,
                        latency=latency_stats([0.004, 0.005, 0.006]),
                        driver_time={"in_driver_ms": {"p50_ms": 4.0, "mean_ms": 4.1},
                                     "on_device_ms": {"p50_ms": 3.5, "mean_ms": 3.6}},
                        accuracy={"top1_accuracy": 0.71, "cts_pass": True},
                        partition={"ops_per_device": {"sample-all": 60, "nnapi-reference": 2},
                                   "cpu_fallback": False},
                        peak_rss_bytes=123456789, run_length={"preset": "quick", "timed_runs": 3},
                        seeds={"inputs": 1234}, config={"images": 100})
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def test_record_round_trip_through_json():
    r = full_record()
    d = json.loads(json.dumps(r.to_dict()))
    assert d["schema_version"] == SCHEMA_VERSION and d["kind"] == "benchmark"
    assert list(d)[:2] == ["schema_version", "kind"]
    back = BenchmarkRecord.from_dict(d)
    assert back.to_dict() == d
    assert back.key == ("mobilenet_v2_1.0_224_quant", "sample-all", "burst", "SUSTAINED_SPEED") == case_key(d)
    assert d["latency"]["p50_ms"] == pytest.approx(5.0)


def test_unknown_fields_survive_and_values_become_plain_json():
    d = full_record(preference=Preference.LOW_POWER, peak_rss_bytes=np.int64(5),
                    first_inference_ms=float("nan")).to_dict()
    assert d["preference"] == "LOW_POWER" and d["peak_rss_bytes"] == 5 and d["first_inference_ms"] is None
    d["added_in_a_later_minor_version"] = {"x": 1}
    back = BenchmarkRecord.from_dict(d)
    assert back.extra == {"added_in_a_later_minor_version": {"x": 1}}
    assert back.to_dict() == d


@pytest.mark.parametrize("change, field", [
    ({"model": ""}, "model"),
    ({"driver": None}, "driver"),
    ({"mode": "fenced"}, "mode"),
    ({"status": "crashed"}, "status"),
    ({"schema_version": SCHEMA_VERSION + 1}, "newer"),
    ({"schema_version": "1"}, "schema_version"),
    ({"latency": None}, "latency"),
    ({"latency": {"count": 3}}, "latency.min_ms"),
    ({"accuracy": [1, 2]}, "accuracy"),
    ({"compilation_cache": 4096}, "compilation_cache"),
    ({"peak_rss_bytes": "big"}, "peak_rss_bytes"),
    ({"kind": None}, "kind"),
])
def test_validation_names_the_field(change, field):
    d = full_record().to_dict()
    d.update(change)
    with pytest.raises(MltsError) as e:
        validate_record(d)
    assert e.value.code == ResultCode.BAD_DATA and field in e.value.message


def test_error_and_unsupported_records_need_no_latency():
    validate_record(BenchmarkRecord(model="m", driver="d", status="unsupported",
                                    unsupported_ops=["HASHTABLE_LOOKUP"]).to_dict())
    validate_record(BenchmarkRecord(model="m", driver="d", status="error", message="DEAD_OBJECT").to_dict())


def test_other_kinds_pass_through_untouched(tmp_path):
    stress = {"kind": "stress", "test": "random_graph_17", "outcome": "HANG", "whatever": [1, {"a": None}]}
    with ResultsWriter(tmp_path) as w:
        w.write(full_record())
        w.write(dict(stress, run_id="r1", timestamp="2026-01-01T00:00:00Z"))
    res = read_results(tmp_path)
    assert res.records[1] == dict(stress, run_id="r1", timestamp="2026-01-01T00:00:00Z")
    assert len(res.benchmark_records()) == 1


def test_writer_one_write_and_fsync_per_record(tmp_path, monkeypatch):
    calls = []
    real_write, real_fsync = os.write, os.fsync
    monkeypatch.setattr(writer_mod.os, "write", lambda fd, b: calls.append(("write", bytes(b))) or real_write(fd, b))
    monkeypatch.setattr(writer_mod.os, "fsync", lambda fd: calls.append(("fsync",)) or real_fsync(fd))
    with ResultsWriter(tmp_path, run_id="run-1") as w:
        written = w.write(full_record())
        w.write(full_record(mode="sync"))
    assert [c[0] for c in calls] == ["write", "fsync", "write", "fsync"]
    assert calls[0][1].endswith(b"\n") and calls[0][1].count(b"\n") == 1
    assert written["run_id"] == "run-1" and written["timestamp"].endswith("Z")
    lines = (tmp_path / RESULTS_FILE).read_text().splitlines()
    assert [json.loads(x)["mode"] for x in lines] == ["burst", "sync"]


def test_killed_run_keeps_finished_records_and_resume_skips_them(tmp_path):
    a, b, c = full_record(mode="sync"), full_record(mode="burst"), full_record(mode="async")
    with ResultsWriter(tmp_path) as w:
        run_id = w.run_id
        w.write(a)
        w.write(b)
    half = json.dumps(c.to_dict())[:57]
    with open(tmp_path / RESULTS_FILE, "a") as f:  # the kill came in the middle of the third case's line
        f.write(half)

    res = read_results(tmp_path)
    assert [r["mode"] for r in res.records] == ["sync", "burst"]
    assert res.sources[0].truncated and len(res.problems) == 1 and "truncated" in res.problems[0]

    with ResultsWriter(tmp_path) as w:
        assert w.run_id == run_id  # the resumed run is the same run
        assert w.is_done(a) and w.is_done(b.key) and not w.is_done(c)
        assert w.existing == 2 and any("truncated" in n for n in w.notes)
        w.write(c)
    res = read_results(tmp_path)
    assert [r["mode"] for r in res.records] == ["sync", "burst", "async"]
    assert res.problems == [] and all(r["run_id"] == run_id for r in res.records)


def test_resume_retries_errors_only_when_asked(tmp_path):
    with ResultsWriter(tmp_path) as w:
        w.write(BenchmarkRecord(model="m", driver="d", status="error", message="boom"))
    with ResultsWriter(tmp_path) as w:
        assert w.is_done(("m", "d", "sync", "FAST_SINGLE_ANSWER"))
    with ResultsWriter(tmp_path, retry_errors=True) as w:
        assert not w.is_done(("m", "d", "sync", "FAST_SINGLE_ANSWER"))
        w.write(full_record(model="m", driver="d", mode="sync", preference="FAST_SINGLE_ANSWER"))
    latest = read_results(tmp_path).latest_by_key()
    assert latest[("m", "d", "sync", "FAST_SINGLE_ANSWER")]["status"] == "ok"


def test_resume_adds_a_missing_final_newline(tmp_path):
    line = json.dumps(dict(full_record().to_dict(), run_id="r", timestamp="t"))
    (tmp_path / RESULTS_FILE).write_text(line)  # complete record, newline lost (hand-edited)
    assert len(read_results(tmp_path).records) == 1
    with ResultsWriter(tmp_path) as w:
        w.write(full_record(mode="sync"))
    assert len(read_results(tmp_path).records) == 2


def test_second_writer_on_the_same_run_is_refused(tmp_path):
    with ResultsWriter(tmp_path):
        with pytest.raises(MltsError) as e:
            ResultsWriter(tmp_path)
        assert e.value.code == ResultCode.BAD_STATE


def test_corrupt_middle_line_and_bad_paths_are_bad_data(tmp_path):
    good = json.dumps(dict(full_record().to_dict(), run_id="r", timestamp="t"))
    f = tmp_path / RESULTS_FILE
    f.write_text(good + "\n{oops\n" + good + "\n")
    with pytest.raises(MltsError) as e:
        read_results(f)
    assert e.value.code == ResultCode.BAD_DATA and f"{f}:2" in e.value.message
    f.write_text(json.dumps(dict(json.loads(good), mode="fenced")) + "\n")
    with pytest.raises(MltsError) as e:
        read_results(tmp_path)
    assert f"{f}:1" in e.value.message and "mode" in e.value.message
    with pytest.raises(MltsError) as e:
        read_results(tmp_path / "nope.jsonl")
    assert "nope.jsonl" in e.value.message
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    with pytest.raises(MltsError) as e:
        read_results(empty)
    assert "empty_dir" in e.value.message and RESULTS_FILE in e.value.message


def test_merging_runs_from_two_machines(tmp_path):
    dirs = []
    for host, driver in (("alpha", "nnapi-reference"), ("beta", "vendor-npu")):
        d = tmp_path / host
        with ResultsWriter(d) as w:
            w.write(full_record(driver=driver, mode="sync"))
            w.write(full_record(driver=driver, mode="burst"))
        (d / "environment.json").write_text(json.dumps({"hostname": host}))
        dirs.append(d)
    res = read_results([dirs[0], dirs[1] / RESULTS_FILE, dirs[0]])  # the same run twice counts once
    assert len(res.records) == 4 and len(res.sources) == 2
    assert {res.environment_for(r)["hostname"] for r in res.records if r["driver"] == "vendor-npu"} == {"beta"}
    assert res.environment_for(res.records[0]) == {"hostname": "alpha"}
    assert len({r["run_id"] for r in res.records}) == 2
    assert len(res.latest_by_key()) == 4


def test_broken_environment_is_reported_not_fatal(tmp_path):
    with ResultsWriter(tmp_path) as w:
        w.write(full_record())
    (tmp_path / "environment.json").write_text("{half")
    res = read_results(tmp_path)
    assert len(res.records) == 1 and res.environment_for(res.records[0]) is None
    assert "environment" in res.problems[0]


def test_csv_has_flat_columns(tmp_path):
    recs = [full_record().to_dict(), BenchmarkRecord(model="m", driver="d", status="unsupported",
                                                     unsupported_ops=["LSTM", "RNN"]).to_dict(),
            {"kind": "stress", "test": "t1", "outcome": "CRASH"}]
    path = to_csv(recs, tmp_path / "results.csv")
    frame = pd.read_csv(path)
    assert len(frame) == 3
    assert list(frame.columns[:8]) == ["run_id", "timestamp", "kind", "model", "driver", "mode", "preference",
                                       "status"]
    assert frame.loc[0, "latency.p50_ms"] == pytest.approx(5.0)
    cache_columns = ["compilation_ms.without_cache", "compilation_ms.save_to_cache", "compilation_ms.with_cache",
                     "compilation_cache.size_bytes"]
    assert [c for c in frame.columns if c in cache_columns] == cache_columns  # among the leading columns
    assert frame.loc[0, "compilation_cache.size_bytes"] == 4096 and frame.loc[0, "compilation_ms.save_to_cache"] == 131
    assert json.loads(frame.loc[0, "latency.histogram.counts"]) == [1, 2]
    assert json.loads(frame.loc[1, "unsupported_ops"]) == ["LSTM", "RNN"]
    assert frame.loc[2, "outcome"] == "CRASH"
    assert flatten_record({"a": {"b": {"c": 1}}, "e": {}}) == {"a.b.c": 1, "e": None}
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_new_run_dir_is_unique(tmp_path):
    a, b = new_run_dir(tmp_path), new_run_dir(tmp_path)
    assert a != b and a.is_dir() and b.is_dir()
