"""Issue 12, the report's stress section and per-layer timing: SKIPPED outcomes (their own colour and
count, never a pass), coverage and CPU fallbacks per test and per benchmark case, and the Driver and
Device timing rows filled from `driver_time` as the benchmark runner writes it."""
from __future__ import annotations

import re

from htmltree import parse
from mlts.benchmark.case_info import driver_times
from mlts.benchmark.record_schema import BenchmarkRecord
from mlts.benchmark.records import Results, read_results
from mlts.report import render_html
from mlts.runtime import DurationCode
from sample_runs import REF, benchmark_records, write_run

REASON = "drv: execution failed (OP_FAILED: kernel <fault>); step 0 ran on the CPU"


def stress(driver: str, test: str, outcome: str, **fields) -> dict:
    """A stress record with the fields mlts.stress.suite.run_test writes, plus the new ones in `fields`."""
    return {"kind": "stress", "schema_version": 1, "driver": driver, "test": test, "group": "stress",
            "outcome": outcome, "duration_s": 1.5, "reason": "" if outcome == "SUCCESS" else f"{test}: {outcome}",
            "log_tail": "", "description": test, "test_duration_s": 1.0, "deadline_s": 30.0, "heartbeat_s": 1.0,
            "quick": True, "duration_scale": 1.0, "hosting": "in-process", "exit_status": 0,
            "killed_processes": [], "liveness": None, "details": {}, "log": f"logs/{driver}.{test}.log", **fields}


RECORDS = (
    [stress("all-skip", f"t{k}", "SKIPPED", reason="supports none of the test's operations") for k in range(3)]
    + [stress("some-skip", f"s{k}", "SUCCESS") for k in range(5)]
    + [stress("some-skip", f"k{k}", "SKIPPED") for k in range(3)]
    + [stress("fails", "a", "FAILURE"), stress("fails", "b", "SKIPPED")]
    + [stress("covered", "random_graphs", "SUCCESS",
              coverage={"ops_on_driver": 6, "ops_total": 9, "models": ["g17", "g18"], "partitioned": True},
              fallbacks={"count": 2, "reasons": [REASON, "drv: preparation failed (OP_FAILED: x)"]}),
       stress("covered", "operand_fuzz", "SUCCESS", coverage=None, fallbacks=None)]
)


def summary_rows(doc) -> dict:
    return {tr.attrs["data-driver"]: tr for tr in doc.find("table", "summary").find_all("tr")
            if "data-driver" in tr.attrs}


def text(node) -> str:
    return re.sub(r"\s+", " ", node.text()).strip()


def test_skipped_is_never_a_pass():
    doc = parse(render_html(Results(records=RECORDS)))
    rows = summary_rows(doc)
    # every test skipped: not tested, not PASS
    all_skip = rows["all-skip"]
    assert all_skip.find("span", "verdict").text() == "NOT TESTED"
    assert "v-NOT-TESTED" in all_skip.find("span", "verdict").classes
    stress_cell = all_skip.find("td", "stress-cell")
    assert text(stress_cell) == "SKIPPED · 3 SKIPPED"
    # some skipped, the rest succeeded: PASS, and the skips beside it
    some = rows["some-skip"]
    assert text(some.find("td", "stress-cell")) == "PASS · 5 SUCCESS · 3 SKIPPED"
    assert text(some.find("td", "verdict-cell")) == "PASS · 3 SKIPPED"
    # a failure stays a failure, a skip does not hide it
    assert rows["fails"].find("span", "verdict").text() == "FAIL"
    assert text(rows["fails"].find("td", "stress-cell")) == "FAIL · 1 SKIPPED · 1 FAILURE"


def test_skipped_has_its_own_colour_and_place():
    html = render_html(Results(records=RECORDS))
    doc = parse(html)
    css = doc.find("style").text()
    skip_rule = re.search(r"([^{}]*\.o-SKIPPED[^{}]*)\{([^}]*)\}", css)
    success_rule = re.search(r"([^{}]*\.o-SUCCESS[^{}]*)\{([^}]*)\}", css)
    assert skip_rule and success_rule and skip_rule.group(2) != success_rule.group(2)
    assert ".o-SKIPPED" not in success_rule.group(1) and ".o-SKIPPED" not in re.search(
        r"([^{}]*\.o-FAILURE[^{}]*)\{", css).group(1)
    table = doc.find("section", id="stress").find("table", "stress")
    outcomes = [(tr.attrs["data-driver"], tr.find("span", "verdict").text()) for tr in table.find("tbody").find_all("tr")]
    assert [o for d, o in outcomes if d == "some-skip"] == ["SKIPPED"] * 3 + ["SUCCESS"] * 5  # worst first
    assert [o for d, o in outcomes if d == "fails"] == ["FAILURE", "SKIPPED"]
    assert all("o-SKIPPED" in s.classes for s in table.find_all("span", "verdict") if s.text() == "SKIPPED")


def test_coverage_and_fallbacks_per_test():
    doc = parse(render_html(Results(records=RECORDS)))
    table = doc.find("section", id="stress").find("table", "stress")
    head = [th.text() for th in table.find("thead").find_all("th")]
    assert "Ops on driver" in head and "CPU fallbacks" in head
    rows = {tr.find_all("td")[1].text(): tr for tr in table.find("tbody").find_all("tr")
            if tr.attrs["data-driver"] == "covered"}
    cov = rows["random_graphs"].find("td", "coverage")
    assert cov.text() == "6/9 ops, partitioned" and cov.attrs["title"] == "models: g17, g18"
    fb = rows["random_graphs"].find("td", "fallbacks")
    assert text(fb).startswith("2 CPU fallbacks " + REASON)
    assert rows["operand_fuzz"].find("td", "coverage").text() == "–"
    assert rows["operand_fuzz"].find("td", "fallbacks").text() == "–"
    verdict = summary_rows(doc)["covered"].find("td", "verdict-cell")
    assert text(verdict) == "PASS · 2 CPU fallbacks"


def test_old_stress_records_show_no_new_columns():
    doc = parse(render_html(Results(records=[stress("d", "t", "SUCCESS")])))
    head = [th.text() for th in doc.find("section", id="stress").find("thead").find_all("th")]
    assert head == ["Driver", "Test", "Outcome", "Duration s", "Reason", "Log tail"]


def test_benchmark_fallbacks_in_results_and_errors(tmp_path):
    rec = BenchmarkRecord.from_dict(benchmark_records(drivers={"mlts-fast"})[0])
    rec.extra["fallbacks"] = {"count": 3, "reasons": [REASON]}
    run = write_run(tmp_path / "run", [rec, benchmark_records(drivers={REF})[0]])
    html = render_html(run)
    assert "<fault>" not in html
    doc = parse(html)
    tag = doc.find("a", "fallback")
    assert tag.text() == "3 CPU fallbacks" and tag.attrs["href"] == "#fallbacks" and tag.attrs["title"] == REASON
    table = doc.find("section", id="errors").find("table", "fallbacks")
    cells = [td.text() for td in table.find("tbody").find("tr").find_all("td")]
    assert cells == [rec.model, "mlts-fast", "3", REASON]
    summary = summary_rows(doc)["mlts-fast"]
    assert text(summary.find("td", "verdict-cell")) == "PASS · 3 CPU fallbacks"


# --- per-layer timing from driver_time ------------------------------------------------------------

class FakeExecution:
    """What driver_times asks of an Execution: its two durations (ns) and the wall-time breakdown (µs)."""

    def __init__(self, on_device_ms: float, in_driver_ms: float, breakdown_us: dict):
        self._d = {DurationCode.ON_HARDWARE: int(on_device_ms * 1e6), DurationCode.IN_DRIVER: int(in_driver_ms * 1e6)}
        self._b = breakdown_us

    def get_duration(self, code):
        return self._d[code]

    def get_timing_breakdown(self):
        return dict(self._b)


def timing_record(tmp_path) -> dict:
    dt = driver_times([FakeExecution(2.0, 3.0, {"total": 10000, "runtime": 1000, "ipc": 0, "driver": 5000}),
                       FakeExecution(4.0, 5.0, {"total": 12000, "runtime": 3000, "ipc": 0, "driver": 5000})])
    rec = {"kind": "benchmark", "schema_version": 1, "model": "m", "driver": "drv", "status": "ok",
           "latency": {"count": 2, "min_ms": 10.0, "mean_ms": 11.0, "std_ms": 1.0, "p50_ms": 11.0, "p90_ms": 11.8,
                       "max_ms": 12.0},
           "driver_time": dt}
    run = write_run(tmp_path / "run", [rec])
    return read_results(run)


def timing_card(doc, title):
    cards = {c.find("h4").text(): c for c in doc.find("section", id="timing").find_all("div", "timing-case")}
    card = cards[title]
    heads = [th.text() for th in card.find("thead").find_all("th")]
    rows = {tr.find("th").text(): [td.text() for td in tr.find_all("td")] for tr in card.find("tbody").find_all("tr")}
    return heads, rows


def test_driver_and_device_rows_come_from_driver_time(tmp_path):
    results = timing_record(tmp_path)
    dt = results.records[0]["driver_time"]
    assert dt["in_driver"]["mean_ms"] == 4.0 and dt["on_device"]["mean_ms"] == 3.0  # the runner's own shape
    heads, rows = timing_card(parse(render_html(results)), "m · drv")
    # Columns with a value in no case (preparation, compilation, I/O, results) are not drawn.
    assert heads == ["", "Compute", "Exec. total"]
    assert rows == {"Application": ["–", "11.0"],       # latency.mean_ms
                    "Runtime": ["–", "2.00"],           # breakdown_mean_us.runtime: (1000 + 3000) / 2 µs
                    "IPC": ["–", "0"],                  # measured: no IPC for an in-process driver
                    "Driver": ["–", "4.00"],            # in_driver mean: (3 + 5) / 2 ms
                    "Device": ["3.00", "–"]}            # on_device mean: (2 + 4) / 2 ms


def test_rows_without_data_in_any_case_are_not_drawn(tmp_path):
    rec = {"kind": "benchmark", "schema_version": 1, "model": "m", "driver": "drv", "status": "ok",
           "latency": {"count": 2, "min_ms": 1.0, "mean_ms": 1.5, "std_ms": 0.5, "p50_ms": 1.5, "p90_ms": 1.9,
                       "max_ms": 2.0}}
    heads, rows = timing_card(parse(render_html(Results(records=[rec]))), "m · drv")
    assert heads == ["", "Exec. total"] and rows == {"Application": ["1.50"]}
