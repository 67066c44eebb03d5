"""The report's measurement conditions (records' `conditions`), latency repetitions and Paired A/B section,
from hand-written records: values shown per case, a busy machine flagged, old records "not recorded",
and malformed fields rendered as "–" with a note, never a traceback."""
from __future__ import annotations

import copy
import math

import pytest

from htmltree import parse
from mlts.benchmark.conditions import BUSY_SHARE
from mlts.benchmark.records import Results
from mlts.report import render_html
from mlts.report.conditions_view import case_conditions, paired_row, repetitions_of
from sample_runs import REF, benchmark_records, environment, write_run

MODEL = "mobilenet_v1_1.0_224"
PAIRED = {"baseline_driver": REF, "candidate_driver": "mlts-fast", "pairs": 40, "order": "ABBA", "ratio": 1.302,
          "ratio_low": 1.271, "ratio_high": 1.335, "confidence": 0.95, "p_value": 3e-7, "test": "sign",
          "min_detectable_pct": 3.9, "verdict": "FAIL", "reason": "latency +30.2%: the interval lies above +10%",
          "threshold_pct": 10.0}


def conditions(share=0.12, blas=1, **more) -> dict:
    c = {"threads": {"blas": blas, "openmp": 1, "numba": None}, "requested_threads": 1,
         "load_before": [0.5, 0.4, 0.3], "load_after": [1.2, 0.6, 0.35], "cpu_freq_mhz": 2450.3,
         "other_cpu_share": share, "window_s": 3.21}
    c.update(more)
    return c


def records(**by_driver) -> list[dict]:
    """REF and mlts-fast on MODEL; by_driver["mlts_fast"] etc. are fields set on that driver's record."""
    recs = [r for r in benchmark_records(drivers={REF, "mlts-fast"}) if r["model"] == MODEL]
    for r in recs:
        r.update(by_driver.get(r["driver"].replace("-", "_"), {}))
    return recs


def render(recs: list[dict]):
    html = render_html(Results(records=recs))
    return html, parse(html)


def conditions_row(doc, driver):
    rows = [tr for tr in doc.find("table", "conditions").find_all("tr") if tr.attrs.get("data-driver") == driver]
    assert len(rows) == 1
    return rows[0]


def summary_text(doc) -> str:
    card = doc.find("section", id="environment").find("div", "conditions-summary")
    assert card is not None
    return card.text()


# --- conditions --------------------------------------------------------------------------------

def test_conditions_of_a_case_are_shown(tmp_path):
    run = write_run(tmp_path / "run", records(nnapi_reference={"conditions": conditions(0.02)},
                                              mlts_fast={"conditions": conditions(0.12)}), environment())
    doc = parse(render_html([run]))
    assert doc.find("a", href="#conditions") is not None
    row = conditions_row(doc, "mlts-fast")
    text = row.text()
    for expected in ("blas 1", "openmp 1", "numba –", "0.50", "1.20", "2450", "12%", "3.21"):
        assert expected in text, expected
    assert "1/5/15 min: 0.50, 0.40, 0.30" in row.find("td", "load").attrs["title"]
    assert "busy" not in row.classes and "busy machine" not in text
    summary = summary_text(doc)
    assert "2 of 2 cases" in summary and "blas 1 · openmp 1 in every case" in summary
    assert "2% – 12%" in summary and "0.50 – 1.20" in summary and "2450 MHz" in summary
    assert "Busy machine" not in summary and "differ" not in summary


def test_a_busy_machine_is_flagged():
    _, doc = render(records(nnapi_reference={"conditions": conditions(BUSY_SHARE)},  # at the bound: not busy
                            mlts_fast={"conditions": conditions(0.73)}))
    busy = conditions_row(doc, "mlts-fast")
    assert "busy" in busy.classes
    share = busy.find("td", "share")
    assert "worse" in share.classes and "73%" in share.text() and "busy machine" in share.text()
    assert "busy" not in conditions_row(doc, REF).classes
    results_row = [tr for tr in doc.find("table", "family").find_all("tr") if tr.attrs.get("data-driver") == "mlts-fast"][0]
    tag = results_row.find("a", "busy")
    assert tag is not None and tag.attrs["href"] == "#conditions" and "73%" in tag.attrs["title"]
    summary = doc.find("section", id="environment").find("div", "conditions-summary")
    warned = [dd.text() for dd in summary.find_all("dd", "worse")]
    assert len(warned) == 1 and "1 case ran while other processes took more than 50%" in warned[0]
    assert f"{MODEL} · mlts-fast (73%)" in warned[0]


def test_differing_thread_pools_are_summarised():
    _, doc = render(records(nnapi_reference={"conditions": conditions(blas=1)},
                            mlts_fast={"conditions": conditions(blas=2, requested_threads=2,
                                                                threads={"blas": 2, "openmp": 1, "numba": 2})}))
    summary = doc.find("section", id="environment").find("div", "conditions-summary")
    warned = " | ".join(dd.text() for dd in summary.find_all("dd", "worse"))
    assert "differ between cases: blas 1 (1 case), 2 (1 case)" in warned
    assert "openmp" not in warned and "numba" not in warned  # same where known on both, unknown on one
    assert "Requested threads" in summary.text() and "1, 2" in warned


def test_records_without_conditions_say_not_recorded():
    html, doc = render(records())
    section = doc.find("section", id="conditions")
    assert section is not None and section.find("table", "conditions") is None
    assert "not recorded" in section.text().lower()
    assert "not recorded" in summary_text(doc)
    # one case with conditions, one without: a row each
    _, doc = render(records(mlts_fast={"conditions": conditions()}))
    assert conditions_row(doc, REF).find("td", "not-recorded").text() == "not recorded"
    assert "1 of 2 cases (1 not recorded)" in summary_text(doc)


@pytest.mark.parametrize("bad", ["busy", [], 5, {"threads": [1], "other_cpu_share": math.nan, "load_before": "x",
                                                 "load_after": [math.inf, None], "cpu_freq_mhz": -1,
                                                 "window_s": "3", "requested_threads": 1.5},
                                 {"threads": {"blas": "one", "openmp": True}, "other_cpu_share": 7}],
                         ids=["str", "list", "int", "fields", "ranges"])
def test_malformed_conditions_render(bad):
    html, doc = render(records(mlts_fast={"conditions": copy.deepcopy(bad)}))
    row = conditions_row(doc, "mlts-fast")
    assert "nan" not in row.text().lower().split() and "busy" not in row.classes
    if not isinstance(bad, dict):
        assert "not recorded" in row.text()


def test_case_conditions_by_hand():
    c = case_conditions(conditions(0.6, threads={"blas": 1, "custom": 3}, requested_threads=None))
    assert c.busy and c.share_text == "60%" and c.threads == "blas 1 · custom 3" and c.requested == "default"
    assert not case_conditions(None).recorded and case_conditions(None).note == "not recorded"
    assert case_conditions({"other_cpu_share": True}).share is None


# --- repetitions -------------------------------------------------------------------------------

def test_repetitions_are_shown_beside_the_sample_count():
    recs = records()
    recs[1]["latency"]["repetition_counts"] = [20, 20, 20]
    _, doc = render(recs)
    captions = [f.text() for f in doc.find("section", id="latency").find_all("figcaption")]
    assert any(c.startswith("mlts-fast") and "60 runs in 3 repetitions" in c for c in captions), captions
    assert not any(c.startswith(REF) and "repetition" in c for c in captions)
    span = doc.find("span", "repetitions")
    assert span.attrs["title"] == "samples per repetition: 20, 20, 20"


@pytest.mark.parametrize("bad", [[], "3", [1.5, 2], [True], [-1], [math.nan], None, {"n": 3}])
def test_malformed_repetition_counts_are_left_out(bad):
    assert repetitions_of(bad) is None
    recs = records()
    recs[1]["latency"]["repetition_counts"] = bad
    _, doc = render(recs)
    assert doc.find("span", "repetitions") is None


# --- paired A/B --------------------------------------------------------------------------------

def test_paired_section_shows_the_decision():
    _, doc = render(records(mlts_fast={"paired": copy.deepcopy(PAIRED)}))
    section = doc.find("section", id="paired")
    assert section is not None and doc.find("a", href="#paired") is not None
    rows = section.find("table", "paired").find("tbody").find_all("tr")
    assert len(rows) == 1
    text = rows[0].text()
    for expected in (MODEL, f"{REF} → mlts-fast", "sync", "40", "1.302 [1.271, 1.335]", "<0.0001",
                     "could detect >= 3.9%", "the interval lies above +10%", "ABBA", "sign test", "95% interval",
                     "threshold 10%"):
        assert expected in text, expected
    verdict = rows[0].find("span", "verdict")
    assert verdict.text() == "FAIL" and "v-FAIL" in verdict.classes
    assert rows[0].find("div", "paired-note") is None


@pytest.mark.parametrize("verdict", ["PASS", "WARN"])
def test_paired_verdicts_are_coloured_like_compare(verdict):
    p = dict(PAIRED, verdict=verdict, reason=None, p_value=0.031)
    _, doc = render(records(mlts_fast={"paired": p}))
    row = doc.find("table", "paired").find("tbody").find("tr")
    assert f"v-{verdict}" in row.find("span", "verdict").classes and "0.031" in row.find("td", "p-value").text()


def test_no_paired_section_without_paired_records():
    html, doc = render(records(mlts_fast={"conditions": conditions()}))
    assert doc.find("section", id="paired") is None and 'href="#paired"' not in html and "Paired A/B" not in html


BAD = [math.nan, math.inf, -1, 1e308, "1.3", True, None, [], {}, "<b>x</b>"]


@pytest.mark.parametrize("paired", [
    [], "yes", 3, {},
    dict(PAIRED, ratio=math.nan, ratio_low=math.inf, p_value=-1, pairs=2.5, verdict="MAYBE", reason=5,
         min_detectable_pct="x", baseline_driver=3, confidence=7, threshold_pct=math.nan),
    {k: "<b>x</b>" for k in PAIRED},
    {k: None for k in PAIRED},
], ids=["list", "str", "int", "empty", "mixed", "markup", "nulls"])
def test_malformed_paired_renders(paired):
    html, doc = render(records(mlts_fast={"paired": copy.deepcopy(paired)}))
    section = doc.find("section", id="paired")
    assert section is not None and "<b>x" not in html
    row = section.find("table", "paired").find("tbody").find("tr")
    assert "nan" not in row.text().lower().replace("nnapi", "").split()
    if paired != {k: None for k in PAIRED}:
        assert row.find("div", "paired-note") is not None
    assert row.find("td", "ratio").text() in ("–",)


@pytest.mark.parametrize("bad", BAD, ids=lambda v: repr(v)[:12])
def test_every_paired_field_malformed_in_turn(bad):
    for key in PAIRED:
        row = paired_row({"model": MODEL, "driver": "mlts-fast", "paired": dict(PAIRED, **{key: bad})}, "mlts-fast")
        assert "nan" not in row.ratio and "inf" not in row.ratio
    recs = records(mlts_fast={"paired": {k: copy.deepcopy(bad) for k in PAIRED}})
    parse(render_html(Results(records=recs)))
