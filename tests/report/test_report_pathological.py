"""Issue 12, the report on records no run would write: huge, infinite, NaN, negative numbers and strings
where numbers belong. The report must render (self-contained, no traceback) and say what it left out."""
from __future__ import annotations

import copy
import json
import math
import random

import pytest

from htmltree import parse
from mlts.benchmark.records import RESULTS_FILE, Results
from mlts.report import render_html
from mlts.cli.report import main as report_main
from mlts.report.svg import histogram_svg, nice_ticks, percentile_svg
from sample_runs import REF, benchmark_records, stress_records, write_run

BAD_VALUES = [math.nan, math.inf, -math.inf, 1e308, -1e308, -5, 1e-320, "12", 10**400, True, None, [], {}]


def replace_numbers(value, pick):
    """`value` with every number (not bools) replaced by pick(): every field a report may format."""
    if isinstance(value, dict):
        return {k: replace_numbers(v, pick) for k, v in value.items()}
    if isinstance(value, list):
        return [replace_numbers(v, pick) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return pick()
    return value


def sample_records() -> list[dict]:
    recs = benchmark_records() + stress_records()
    recs[0]["driver_time"] = {"runs": 3, "on_device": {"count": 3, "mean_ms": 1.0}, "in_driver": {"mean_ms": 2.0},
                              "breakdown_mean_us": {"total": 10, "runtime": 1, "ipc": 2, "driver": 3}}
    recs[-1].update(coverage={"ops_on_driver": 6, "ops_total": 9, "models": ["g"], "partitioned": True},
                    fallbacks={"count": 1, "reasons": ["r"]}, outcome="SKIPPED")
    recs[1]["fallbacks"] = {"count": 2, "reasons": ["x"]}
    return recs


@pytest.mark.parametrize("bad", BAD_VALUES, ids=lambda v: repr(v)[:12])
def test_every_number_replaced_still_renders(bad):
    recs = [replace_numbers(r, lambda: copy.deepcopy(bad)) for r in sample_records()]
    html = render_html(Results(records=recs))
    doc = parse(html)
    assert doc.find("section", id="summary") is not None and "<script" not in html
    assert "nan" not in doc.find("section", id="results").text().lower().split()


@pytest.mark.parametrize("seed", range(6))
def test_numbers_mixed_at_random_still_render(seed):
    rng = random.Random(seed)
    recs = [replace_numbers(r, lambda: copy.deepcopy(rng.choice(BAD_VALUES + [0, 1, 2.5, 100.0])))
            for r in sample_records()]
    # and fields of the wrong shape altogether
    recs[2]["latency"] = "fast"
    recs[3]["accuracy"] = [1, 2]
    recs[-2]["details"] = {"checks": 5}
    recs[-3]["coverage"] = "all"
    recs[-4]["fallbacks"] = {"count": "many", "reasons": "boom"}
    parse(render_html(Results(records=recs)))


def test_huge_latency_is_left_out_of_the_charts_and_said_so():
    """The OverflowError of issue 12: a p99 of 1e308 ms on the percentile chart's axis."""
    recs = benchmark_records(drivers={REF, "mlts-fast"})[:2]
    lat = recs[1]["latency"]
    lat.update(p50_ms=1e308, p90_ms=1e308, p99_ms=1e308, max_ms=1e308)
    lat["histogram"]["edges_ms"][-1] = 1e308
    doc = parse(render_html(Results(records=recs)))
    latency = doc.find("section", id="latency")
    chart = latency.find("svg", "pct")
    assert chart is not None  # the reference is still drawn
    assert "not drawn" in chart.text() and "mlts-fast" in chart.text() and "1e+308" in chart.text()
    assert len(chart.find_all("rect", "box")) == 1
    notes = [p.text() for p in latency.find_all("p", "not-drawn")]
    assert any(n.startswith("histogram not drawn") for n in notes)
    row = [tr for tr in doc.find("table", "family").find_all("tr") if tr.attrs.get("data-driver") == "mlts-fast"][0]
    assert "1e+308" in row.text()  # the table shows the number, briefly


def test_chart_helpers_by_hand():
    # raw step 1e308 / 5 = 2e307, a 2 x power of ten: six ticks (before: OverflowError adding 10**308)
    assert nice_ticks(0.0, 1e308) == pytest.approx([0.0, 2e307, 4e307, 6e307, 8e307, 1e308])
    assert nice_ticks(0.0, 1.7e308)[-1] <= 1.7e308
    assert nice_ticks(0.0, 10.0) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert percentile_svg([("a", {"count": 0}, False)]) is None  # no median at all: nothing to draw or say
    assert "a (median nan)" in percentile_svg([("a", {"p50_ms": math.nan}, False)])
    note = percentile_svg([("a", {"p50_ms": -1.0}, False)])
    assert "latency chart not drawn" in note and "a (p50 -1.00" in note
    assert "not drawn" in histogram_svg({"edges_ms": [0.0, math.inf], "counts": [3]})
    assert "not drawn" in histogram_svg({"edges_ms": [2.0, 1.0], "counts": [3]})


def test_report_cli_on_a_pathological_results_file(tmp_path, capsys):
    run = write_run(tmp_path / "run", benchmark_records(drivers={REF})[:1])
    with open(run / RESULTS_FILE, "a", encoding="utf-8") as f:
        rec = benchmark_records(drivers={REF})[1]
        f.write(json.dumps(rec).replace('"p50_ms": ', '"p50_ms": 1e999, "was": ', 1) + "\n")  # inf after json
        f.write("[" * 100000 + "\n")
        f.write('{"kind": "stress", "driver": "d", "test": "t", "outcome": "SKIPPED", "duration_s": NaN}\n')
    assert report_main([str(run)]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and f"{RESULTS_FILE}:3" in err
    doc = parse((run / "index.html").read_text(encoding="utf-8"))
    assert any(f"{RESULTS_FILE}:3" in li.text() for li in doc.find("ul", "problems").find_all("li"))
    assert doc.find("section", id="stress") is not None
