"""The nnapi-cts suite's execution paths (sync, async, burst, fenced, cached), which cases each runs, a driver
broken on one path failing that path only, and what the results become: the per-path and operations x
operand types summaries, the JUnit XML and the HTML report's section."""
from __future__ import annotations

import importlib.util
import json
import random
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from mlts.benchmark.records import Results
from mlts.conformance.nnapi_cts import paths, store, suite, tables
from mlts.conformance.nnapi_cts.junit import junit_xml
from mlts.report import render_html
from mlts.runtime import Capabilities, devices, register_driver, unregister_driver
from mlts.runtime.drivers.base import BurstContext, ExecutionCallback
from mlts.runtime.drivers.faulty import perturb
from mlts.runtime.drivers.kernel_driver import KernelDriver, KernelPreparedModel
from mlts.runtime.ops import implemented_operations


def _htmltree():
    """tests/report's small HTML tree (a helper module of that directory, loaded by path)."""
    path = Path(__file__).resolve().parents[1] / "report" / "htmltree.py"
    spec = importlib.util.spec_from_file_location("cts_htmltree", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference():
    return next(d for d in devices() if d.name == "nnapi-reference")


@pytest.fixture(scope="module")
def cases():
    return store.load_cases(("V1_0", "V1_2", "V1_3"))


def named(cases, name, spec_dir):
    return next(c for c in cases if c.name == name and c.spec_dir == spec_dir)


# -- every path on nnapi-reference ----------------------------------------------------------------------
def test_sample_passes_on_every_path(cases):
    implemented = {c.name for c in implemented_operations()}
    eligible = [c for c in cases if set(c.operation_names) <= implemented and c.spec_dir != "V1_0"]
    sample = random.Random(16).sample(eligible, 25) + [named(cases, "add", "V1_0")]
    results = suite.run_suite(sample, [reference()], paths=paths.PATHS)
    by_path = {p: [r for r in results if r.path == p] for p in paths.PATHS}
    assert all(by_path[p] for p in paths.PATHS)
    bad = [(r.case, r.variant, r.path, r.detail) for r in results if r.status != "pass"]
    assert not bad
    assert len(by_path["sync"]) == len(by_path["async"]) == len(by_path["burst"])
    assert all(r.variant == suite.STATIC for r in by_path["fenced"])
    assert {r.cache for r in by_path["cached"]} == {"prepared-from-cache"}  # the second compilation used the cache
    assert {r.cache for r in by_path["sync"]} == {""}
    assert all(r.operand_type for r in results)


def test_which_paths_run_which_cases(cases):
    add = named(cases, "add", "V1_0")
    assert [p for p in paths.PATHS if suite.path_applies(add, suite.STATIC, p)] == list(paths.PATHS)
    assert not suite.path_applies(add, suite.DYNAMIC, paths.FENCED)  # needs fully specified outputs
    invalid = next(c for c in cases if c.expect_failure)
    assert [p for p in paths.PATHS if suite.path_applies(invalid, suite.STATIC, p)] == ["sync", "async", "burst"]
    empty = next(c for c in cases if not c.expect_failure and suite._empty_output(c))
    assert not suite.path_applies(empty, suite.STATIC, paths.FENCED)
    assert suite.count_runs([add], True, paths.PATHS) == 9 and suite.count_runs([add], False, ["sync"]) == 1
    assert paths.parse_paths(["cached", "sync"]) == ["sync", "cached"] and paths.parse_paths(None) == list(paths.PATHS)
    with pytest.raises(ValueError, match="unknown execution path"):
        paths.parse_paths(["sideways"])


def test_expected_failure_fails_on_every_path_that_runs_it(cases):
    invalid = [c for c in cases if c.expect_failure and c.spec == "strided_slice_invalid"]
    results = suite.run_suite(invalid, [reference()], paths=paths.PATHS)
    assert {r.path for r in results} == {"sync", "async", "burst"}
    assert all(r.status == "pass" and r.detail.startswith("failed as expected") for r in results)


def test_primary_type(cases):
    assert suite.primary_type(named(cases, "add", "V1_0")) == "FLOAT32"
    relaxed = next(c for c in cases if c.relaxed and suite.primary_type(replace(c, relaxed=False)) == "FLOAT32")
    assert suite.primary_type(relaxed) == "FLOAT32 relaxed"
    lookup = next(c for c in cases if c.tested == ["EMBEDDING_LOOKUP"])
    assert suite.primary_type(lookup) != "INT32"  # the values' type, not the lookups'


# -- a driver broken on one path --------------------------------------------------------------------
def _spoil(prepared: KernelPreparedModel, request, result):
    """Every output moved far outside any tolerance (the faulty drivers' wrong-large perturbation)."""
    for k, (arg, shape) in enumerate(zip(request.outputs, result.output_shapes)):
        t = prepared.model.main.operands[prepared.model.main.output_indexes[k]].type
        view = request.pools[arg.location.pool_index].array(arg.location.offset, t.dtype, tuple(shape.dimensions))
        view[...] = perturb(view, t.code, large=True, seed=0, index=k)
    return result


class OnePathBroken(KernelDriver):
    """Right on every path but `broken`, where each output is wrong."""

    def __init__(self, broken: str) -> None:
        super().__init__(f"broken-{broken}", Capabilities.uniform(1.0, 1.0))
        self.broken = broken

    def prepare_model(self, model, preference, priority, deadline, cache):
        prepared = super().prepare_model(model, preference, priority, deadline, cache)
        return BrokenPrepared(self, prepared.model, self.broken if self.broken != paths.CACHED else "")

    def prepare_model_from_cache(self, deadline, cache):
        prepared = super().prepare_model_from_cache(deadline, cache)
        return BrokenPrepared(self, prepared.model, "sync" if self.broken == paths.CACHED else "")


class BrokenPrepared(KernelPreparedModel):
    def __init__(self, driver, model, broken: str) -> None:
        super().__init__(driver, model)
        self.broken = broken

    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        result = super().execute_synchronously(request, measure, deadline, loop_timeout_ns)
        return _spoil(self, request, result) if self.broken == "sync" else result

    def execute(self, request, measure, deadline, loop_timeout_ns):
        callback = ExecutionCallback()
        result = super().execute_synchronously(request, measure, deadline, loop_timeout_ns)
        callback.notify(_spoil(self, request, result) if self.broken == "async" else result)
        return callback

    def configure_execution_burst(self):
        prepared = self

        class Burst(BurstContext):
            def execute(self, request, measure, deadline, loop_timeout_ns):
                result = super().execute(request, measure, deadline, loop_timeout_ns)
                return _spoil(prepared, request, result) if prepared.broken == "burst" else result

        return Burst(self)

    def execute_fenced(self, request, wait_for, measure, deadline, loop_timeout_ns, timeout_after_fence_ns):
        result = super().execute_fenced(request, wait_for, measure, deadline, loop_timeout_ns, timeout_after_fence_ns)
        return _spoil(self, request, result) if self.broken == "fenced" else result


@pytest.mark.parametrize("broken", ["async", "burst", "fenced", "cached"])
def test_a_driver_broken_on_one_path_fails_that_path_only(cases, broken):
    device = register_driver(OnePathBroken(broken))
    try:
        results = suite.run_suite([named(cases, "add", "V1_0")], [device], paths=paths.PATHS)
    finally:
        unregister_driver(device.name)
    statuses = {(r.path, r.variant): r.status for r in results}
    assert {k for k, s in statuses.items() if s != "pass"} == {k for k in statuses if k[0] == broken}
    failed = next(r for r in results if r.path == broken)
    assert failed.status == "fail" and "outside tolerance" in failed.detail and failed.worst["difference"] > 0.01


# -- summaries, JUnit, report ---------------------------------------------------------------------------
def record(device, case, path, status, operation="ADD", operand_type="FLOAT32", variant="static", detail=""):
    return {"kind": "nnapi-cts", "suite": "nnapi-cts", "case": case, "variant": variant, "device": device,
            "operation": operation, "spec": case, "version": "V1_2", "status": status, "detail": detail,
            "worst": {}, "seconds": 0.002, "path": path, "operand_type": operand_type, "cache": "", "spec_dir": "V1_2"}


RECORDS = [
    *(record("good-npu", "add_1", p, "pass") for p in ("sync", "async", "burst")),
    *(record("good-npu", "add_q", p, "pass", operand_type="QUANT8_ASYMM") for p in ("sync", "burst")),
    record("good-npu", "mul_1", "sync", "n/a", operation="MUL", detail="declined: MUL"),
    record("bad-npu", "add_1", "sync", "pass"),
    record("bad-npu", "add_1", "burst", "fail", detail="output 0 (TENSOR_FLOAT32): 2 of 4 values outside tolerance"),
    record("bad-npu", "add_q", "sync", "error", operand_type="QUANT8_ASYMM", detail="OP_FAILED: driver raised"),
    {"kind": "stress", "schema_version": 1, "driver": "good-npu", "test": "random_graphs", "outcome": "SUCCESS",
     "reason": "", "duration_s": 1.0},
]


def test_tables_count_a_case_passing_only_on_every_path():
    counts = tables.path_counts(tables.cts_records(RECORDS))
    assert counts["bad-npu"] == {"sync": {"pass": 1, "fail": 0, "n/a": 0, "error": 1},
                                 "burst": {"pass": 0, "fail": 1, "n/a": 0, "error": 0}}
    matrices = {m.device: m for m in tables.type_matrices(tables.cts_records(RECORDS))}
    good, bad = matrices["good-npu"], matrices["bad-npu"]
    assert good.types == ["FLOAT32", "QUANT8_ASYMM"] and [op for op, _ in good.rows] == ["ADD", "MUL"]
    assert (good.total.cases, good.total.passed, good.total.na) == (3, 2, 1)
    add = dict(bad.rows)["ADD"]
    assert (add["FLOAT32"].passed, add["FLOAT32"].failed) == (0, 1)  # passed on sync, failed on burst
    table = tables.markdown_table(tables.cts_records(RECORDS), ["good-npu", "bad-npu"])
    lines = table.splitlines()
    assert lines[0] == "| operation | operand type | cases | good-npu | bad-npu |"
    assert lines[2] == "| **all** | | **3** | **2** | **0** |"
    assert "| ADD | QUANT8_ASYMM | 1 | 1 | 0 |" in lines and "| MUL | FLOAT32 | 1 | n/a | – |" in lines
    assert tables.replay_command(RECORDS[-3]) == ("mlts conformance --suite nnapi-cts --case V1_2/add_1 --paths burst "
                                                  "--drivers bad-npu")


def test_junit_has_a_suite_per_driver_and_path():
    root = ET.fromstring(junit_xml(RECORDS))
    assert root.get("tests") == "9" and root.get("failures") == "1" and root.get("errors") == "1"
    assert root.get("skipped") == "1"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {f"mlts.nnapi_cts.good-npu.{p}" for p in ("sync", "async", "burst")} | \
        {"mlts.nnapi_cts.bad-npu.sync", "mlts.nnapi_cts.bad-npu.burst"}
    failure = suites["mlts.nnapi_cts.bad-npu.burst"].find("testcase/failure")
    assert "outside tolerance" in failure.get("message") and "--paths burst" in failure.text
    assert suites["mlts.nnapi_cts.bad-npu.sync"].find("testcase/error").get("type") == "error"
    skipped = suites["mlts.nnapi_cts.good-npu.sync"].findall("testcase/skipped")
    assert [s.get("message") for s in skipped] == ["declined: MUL"]


def test_report_section():
    doc = _htmltree().parse(render_html(Results(records=RECORDS)))
    section = doc.find("section", id="nnapi-cts")
    assert section is not None and doc.find("a", href="#nnapi-cts") is not None
    path_rows = [(tr.attrs["data-driver"], tr.attrs["data-path"], [td.text() for td in tr.find_all("td")][2:])
                 for tr in section.find("table", "cts-paths").find("tbody").find_all("tr")]
    assert ("bad-npu", "burst", ["0", "1", "0", "0"]) in path_rows and len(path_rows) == 5
    matrices = {t.attrs["data-driver"]: t for t in section.find_all("table", "cts-types")}
    header = [th.text() for th in matrices["good-npu"].find("thead").find_all("th")]
    assert header == ["Operation", "FLOAT32", "QUANT8_ASYMM"]
    add = matrices["bad-npu"].find("tr", **{"data-operation": "ADD"}).find_all("td")
    assert add[1].text().replace("\u2009", " ") == "0/1 · 1 ✗" and "some-fail" in add[1].classes
    failures = section.find("table", "cts-failures").find("tbody").find_all("tr")
    assert len(failures) == 2
    assert "mlts conformance --suite nnapi-cts --case V1_2/add_1 --paths burst --drivers bad-npu" in failures[0].text()
    assert 'id="nnapi-cts"' not in render_html(Results(records=RECORDS[-1:]))


def test_cli_paths_junit_and_report(capsys, tmp_path):
    from mlts.cli import main

    status = main(["conformance", "--suite", "nnapi-cts", "--case", "V1_0/add", "--paths", "burst,cached",
                   "--drivers", "nnapi-reference", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0 and "pass  nnapi-reference add [static] ADD on burst" in out
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sorted((x["path"], x["variant"]) for x in lines) == [
        ("burst", "dynamic_output_shape"), ("burst", "static"), ("cached", "dynamic_output_shape"), ("cached", "static")]
    assert all(x["kind"] == "nnapi-cts" and x["status"] == "pass" for x in lines)
    assert ET.parse(tmp_path / "junit-nnapi-cts.xml").getroot().get("tests") == "4"
    assert 'id="nnapi-cts"' in (tmp_path / "index.html").read_text()
    assert main(["conformance", "--suite", "nnapi-cts", "--case", "add", "--paths", "sideways"]) == 1
    assert "--paths: unknown execution path(s) sideways" in capsys.readouterr().err
