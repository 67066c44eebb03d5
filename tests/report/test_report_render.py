"""The HTML report: sections, reference-first tables, coloured differences, inline charts, escaping,
no network references, merging runs from several machines, baseline and stress sections."""
import json
import re
from importlib import resources
from pathlib import Path

import pytest

from htmltree import parse
from mlts.benchmark.records import RESULTS_FILE, Results, read_results
from mlts.report import render_html, render_report
from mlts.report.families import family_of
from mlts.report.formatting import accuracy_class, latency_class
from mlts.report.sections.timing import timing_table
from mlts.runtime import MltsError, ResultCode
from sample_runs import HOSTILE_MESSAGE, REF, benchmark_records, environment, write_run

FAMILIES = ["MobileNet v1 · float", "MobileNet v1 · quantized", "MobileNet v2 · float", "MobileNet v2 · quantized"]


@pytest.fixture(scope="module")
def html(runs):
    return render_html([runs["run"]], baseline=[runs["baseline"]], title="Nightly <driver> run")


@pytest.fixture(scope="module")
def doc(html):
    return parse(html)


def family_table(doc, title):
    t = doc.find("table", "family", data_family=title)
    assert t is not None, f"no table for {title}"
    return t


def case_row(doc, family, model, driver):
    group = family_table(doc, family).find("tbody", "model-group", data_model=model)
    rows = [tr for tr in group.find_all("tr") if tr.attrs.get("data-driver") == driver]
    assert len(rows) == 1
    return rows[0]


def cell(row, cls):
    found = row.find("td", cls)
    assert found is not None, f"no {cls} cell"
    return found


# --- sections ----------------------------------------------------------------------------------

def test_header_environment_and_configuration(doc, html):
    assert doc.find("title").text() == "Nightly <driver> run"
    assert "Nightly &lt;driver&gt; run" in html
    env = doc.find("section", id="environment")
    text = env.text()
    for expected in ("bench-01", "AMD EPYC 7B13", "64.0 GiB", "3.11.7", "OMP_NUM_THREADS=8", "commit 9d6d150f3c1e",
                     "scipy-openblas", "Run configuration", "images", "1500", "held-out", "default"):
        assert expected in text, expected
    assert str(Path(RESULTS_FILE)) in doc.find("table", "sources").text()


def test_every_section_is_there(doc):
    for section in ("environment", "summary", "results", "latency", "partition", "timing", "errors", "stress",
                    "baseline"):
        assert doc.find("section", id=section) is not None, section
        assert doc.find("a", href=f"#{section}") is not None, section


def test_summary_verdicts_per_driver(doc):
    rows = {tr.attrs["data-driver"]: tr for tr in doc.find("table", "summary").find_all("tr") if "data-driver" in tr.attrs}
    assert list(rows)[0] == REF
    verdict = {d: tr.find("span", "verdict").text() for d, tr in rows.items()}
    assert verdict == {REF: "PASS", "mlts-fast": "PASS", "sample-float-fast": "FAIL", "sample-quant": "FAIL"}
    sff = rows["sample-float-fast"].text()
    assert "1 of 2 case(s) within tolerance" in sff and "1 CRASH" in sff and "1 HANG" in sff
    assert "1 FAILURE" in rows["sample-quant"].text()
    assert "faster" in rows["mlts-fast"].text() and "better" in rows["mlts-fast"].find_all("td")[6].classes


def test_one_table_per_family_with_the_reference_row_first(doc):
    titles = [t.attrs["data-family"] for t in doc.find_all("table", "family")]
    assert titles == FAMILIES
    v1_float = family_table(doc, FAMILIES[0])
    models = [g.attrs["data-model"] for g in v1_float.find_all("tbody", "model-group")]
    assert models == ["mobilenet_v1_1.0_224", "mobilenet_v1_0.5_160"]
    for table in doc.find_all("table", "family"):
        for group in table.find_all("tbody", "model-group"):
            first = group.find_all("tr")[0]
            assert "ref" in first.classes and first.attrs["data-driver"] == REF
            assert all("ref" not in tr.classes for tr in group.find_all("tr")[1:])


def test_differences_are_coloured_better_worse_same(doc):
    fast = case_row(doc, FAMILIES[0], "mobilenet_v1_1.0_224", "mlts-fast")
    assert "better" in cell(fast, "delta-pct").classes and cell(fast, "delta-pct").text().startswith("-79")
    assert cell(fast, "delta-ms").text().startswith("−93")
    near = case_row(doc, FAMILIES[0], "mobilenet_v1_1.0_224", "sample-float-fast")  # 3.4% faster: within 5%
    assert "same" in cell(near, "delta-pct").classes
    slow = case_row(doc, FAMILIES[0], "mobilenet_v1_0.5_160", "sample-float-fast")  # 25.6% slower
    assert "worse" in cell(slow, "delta-pct").classes and "worse" in cell(slow, "delta-ms").classes
    assert "worse" in cell(near, "cts").classes and "FAIL" in cell(near, "cts").text()
    assert "better" in cell(fast, "cts").classes
    q1 = case_row(doc, FAMILIES[1], "mobilenet_v1_1.0_224_quant", "sample-quant")  # -0.4 points: same
    assert "same" in cell(q1, "delta-points").classes and cell(q1, "delta-points").text() == "-0.4"
    q2 = case_row(doc, FAMILIES[3], "mobilenet_v2_1.0_224_quant", "sample-quant")  # -0.7 points: worse
    assert "worse" in cell(q2, "delta-points").classes


def test_compilation_from_the_cache_with_saving_time_and_size(doc):
    row = case_row(doc, "MobileNet v1 · float", "mobilenet_v1_1.0_224", REF)
    cache = cell(row, "cache")
    ms = float(cache.text())
    assert ms > 0 and "cache size 2.0 KiB" in cache.attrs["title"] and "saving to an empty cache" in cache.attrs["title"]


def test_first_use_compilation_is_shown_beneath_the_compile_time_only_where_it_differs_noticeably():
    recs = benchmark_records(drivers={REF, "mlts-fast"}, hostile=False)
    comp = {(r["model"], r["driver"]): r["compilation_ms"] for r in recs}
    comp[("mobilenet_v1_1.0_224", "mlts-fast")].update(without_cache=144.0, first_use=2447.0)  # JIT on first use
    comp[("mobilenet_v1_1.0_224", REF)].update(without_cache=200.0, first_use=240.0)  # +20%: usual spread
    comp[("mobilenet_v1_0.5_160", "mlts-fast")].update(without_cache=4.0, first_use=12.0)  # +8 ms: too little
    comp[("mobilenet_v1_0.5_160", REF)].update(without_cache=40.0, first_use=12.0)  # -28 ms and -70%: shown
    # every other record has no first_use, as records written before it existed
    doc = parse(render_html(Results(records=recs)))

    def compile_cell(model, driver):
        return cell(case_row(doc, FAMILIES[2 if "v2" in model else 0], model, driver), "compile")

    jit = compile_cell("mobilenet_v1_1.0_224", "mlts-fast")
    note = jit.find("span", "first-use")
    assert jit.text().startswith("144") and note.text() == "first use 2447"
    assert "one-time costs" in note.attrs["title"]
    assert compile_cell("mobilenet_v1_0.5_160", REF).find("span", "first-use").text() == "first use 12.0"
    for model, driver in (("mobilenet_v1_1.0_224", REF), ("mobilenet_v1_0.5_160", "mlts-fast"),
                          ("mobilenet_v2_1.0_224", "mlts-fast")):
        plain = compile_cell(model, driver)
        assert plain.find("span", "first-use") is None and "first use" not in plain.text()
    assert compile_cell("mobilenet_v1_0.5_160", "mlts-fast").text() == "4.00"


def test_unsupported_and_error_rows_in_the_tables(doc):
    row = case_row(doc, FAMILIES[1], "mobilenet_v1_1.0_224_quant", "sample-float-fast")
    assert "status-unsupported" in row.classes and "QUANTIZE" in row.text()
    row = case_row(doc, FAMILIES[2], "mobilenet_v2_1.0_224", "sample-float-fast")
    assert "status-error" in row.classes and "DEAD_OBJECT" in row.text()


@pytest.mark.parametrize("delta_ms, delta_pct, noise, expected", [
    (-10.0, -20.0, 0.0, "better"), (10.0, 20.0, 0.0, "worse"), (2.0, 4.9, 0.0, "same"), (-2.0, -5.0, 0.0, "same"),
    (3.0, 30.0, 3.5, "same"),  # beyond 5% but within the runs' own noise
    (None, None, 0.0, ""),
])
def test_latency_class(delta_ms, delta_pct, noise, expected):
    assert latency_class(delta_ms, delta_pct, noise) == expected


@pytest.mark.parametrize("points, expected", [(1.0, "better"), (-0.6, "worse"), (0.5, "same"), (-0.5, "same"),
                                              (None, "")])
def test_accuracy_class(points, expected):
    assert accuracy_class(points) == expected


def test_family_of_uses_model_info_then_the_name():
    assert family_of({"model": "mobilenet_v2_0.35_128_quant_int8"}) == ("MobileNet v2", True)
    assert family_of({"model": "x", "model_info": {"family": "mobilenet_v1", "quantization": None}}) == ("MobileNet v1", False)
    assert family_of({"model": "resnet50"}) == ("Other models", False)


# --- charts, partition, timing ------------------------------------------------------------------

def test_charts_are_inline_svg(doc, html):
    latency = doc.find("section", id="latency")
    assert len(latency.find_all("svg", "hist")) == 14  # every case that ran
    assert len(latency.find_all("svg", "pct")) == 5  # one per model
    hist = latency.find("svg", "hist")
    assert hist.find_all("rect", "bar") and hist.find("line", "median") is not None
    assert "<img" not in html and "<script" not in html and "<link" not in html
    assert "@media print" in html


def test_partition_of_each_model(doc):
    part = doc.find("section", id="partition")
    assert part.find_all("svg", "part")
    text = part.text()
    assert "mlts-fast 31" in text and "nnapi-reference 2" in text
    assert "unsupported: QUANTIZE" in text and "error (see Errors)" in text


def test_per_layer_timing_table(doc):
    cards = {c.find("h4").text(): c for c in doc.find("section", id="timing").find_all("div", "timing-case")}
    fast = cards["mobilenet_v1_1.0_224 · mlts-fast"]
    heads = [th.text() for th in fast.find("thead").find_all("th")]
    assert heads == ["", "Prep.", "Compile", "I/O", "Compute", "Results", "Exec. total"]
    rows = {tr.find("th").text(): tr.find_all("td") for tr in fast.find("tbody").find_all("tr")}
    assert list(rows) == ["Application", "Runtime", "IPC", "Driver", "Device"]
    assert rows["IPC"][2].text() == "0.6" and "reported" in rows["IPC"][2].classes
    assert "nr" in rows["IPC"][0].classes and rows["IPC"][0].text() == "–"
    assert rows["Device"][5].text() == "21.6" and "reported" in rows["Device"][5].classes  # device_ms shorthand
    ref = cards[f"mobilenet_v1_1.0_224 · {REF}"]
    derived = ref.find_all("td", "derived")
    assert derived and "compilation_ms.without_cache" in derived[0].attrs["title"]


def test_timing_table_shapes():
    rows, reported = timing_table({"timing_breakdown": {"application_ms": 5.0, "driver_ms": 3.0, "compute_ms": 2.0,
                                                        "runtime": {"io": 0.25, "bogus": 1}, "ipc": "junk"}})
    grid = {label: [c.text for c in cells] for label, cells in rows}
    assert reported
    assert grid["Application"] == ["–", "–", "–", "2.00", "–", "5.00"]
    assert grid["Runtime"] == ["–", "–", "0.25", "–", "–", "–"]
    assert grid["Driver"][5] == "3.00" and grid["IPC"] == ["–"] * 6
    rows, reported = timing_table({"latency": {"mean_ms": 7.5}})
    assert not reported and rows[0][1][5].cls == "derived" and rows[0][1][5].text == "7.50"


# --- escaping and the network -----------------------------------------------------------------

def test_error_messages_are_escaped(doc, html):
    assert "<script" not in html
    assert "&lt;script&gt;alert(" in html
    errors = doc.find("section", id="errors")
    assert errors.find("td", "message").text() == HOSTILE_MESSAGE


def test_model_and_driver_names_are_escaped(tmp_path):
    rec = benchmark_records(drivers={REF})[0]
    rec["model"] = 'evil"><img src=x onerror=alert(1)>'
    rec["driver"] = "<b>drv</b>"
    html = render_html(write_run(tmp_path / "r", [rec]))
    assert "<img" not in html and "<b>drv" not in html and "&lt;b&gt;drv&lt;/b&gt;" in html


def test_no_network_references(html, doc):
    assert not re.search(r"https?:", html, re.IGNORECASE)
    assert "@import" not in html and "url(" not in html
    for node in doc.iter():
        assert "src" not in node.attrs
        if "href" in node.attrs:
            assert node.attrs["href"].startswith("#"), node.attrs["href"]


# --- optional sections -----------------------------------------------------------------------

def test_stress_section_only_when_stress_records_exist(doc, runs_without_stress):
    stress = doc.find("section", id="stress")
    rows = {(tr.attrs["data-driver"], tr.find_all("td")[1].text()): tr for tr in stress.find("tbody").find_all("tr")}
    crash = rows[("sample-float-fast", "random_graphs")]
    assert "o-CRASH" in crash.find("span", "verdict").classes
    assert "Segmentation fault <in native kernel>" in crash.find("pre").text()
    plain = render_html(runs_without_stress["run"])
    assert 'id="stress"' not in plain and 'href="#stress"' not in plain and "Stress tests" not in plain
    assert 'id="baseline"' not in plain


def test_baseline_comparison(doc):
    base = doc.find("section", id="baseline")
    assert base.find("span", "verdict").text() == "FAIL"
    rows = base.find("tbody").find_all("tr")
    by_case = {(tr.find("td", "model").text(), tr.find("td", "driver").text()): tr for tr in rows}
    regressed = by_case[("mobilenet_v1_1.0_224", "sample-float-fast")]
    assert regressed.find("span", "verdict").text() == "FAIL" and "worse" in regressed.find_all("td")[7].classes
    improved = by_case[("mobilenet_v1_1.0_224_quant", "sample-quant")]
    assert improved.find("span", "verdict").text() == "PASS" and "better" in improved.find_all("td")[7].classes
    assert by_case[("mobilenet_v1_1.0_224", "mlts-fast")].find("span", "verdict").text() == "PASS"


def test_runs_from_two_machines_are_compared_per_machine(runs):
    doc = parse(render_html([runs["run"], runs["other"]]))
    assert len(doc.find_all("div", "environment")) == 2
    group = family_table(doc, FAMILIES[1]).find("tbody", "model-group", data_model="mobilenet_v1_1.0_224_quant")
    lanes = [tr.find("td", "driver").text().replace(" reference", "") for tr in group.find_all("tr")]
    assert lanes == [f"{REF} @ bench-01", "mlts-fast @ bench-01", "sample-quant @ bench-01",
                     "sample-float-fast @ bench-01", f"{REF} @ bench-02", "sample-quant @ bench-02"]
    other = group.find_all("tr")[5]
    assert cell(other, "delta-pct").attrs.get("title") == ""  # against bench-02's own reference


def test_reference_from_another_machine_is_named(tmp_path):
    a = write_run(tmp_path / "a", benchmark_records(drivers={REF}), environment("host-a"))
    b = write_run(tmp_path / "b", benchmark_records(drivers={"mlts-fast"}), environment("host-b"))
    doc = parse(render_html([a, b]))
    row = case_row(doc, FAMILIES[0], "mobilenet_v1_1.0_224", "mlts-fast")
    assert cell(row, "delta-pct").attrs["title"] == "vs reference on host-a"
    assert "better" in cell(row, "delta-pct").classes


def test_records_given_directly_and_no_records_at_all():
    recs = benchmark_records(drivers={REF, "mlts-fast"})
    doc = parse(render_html(Results(records=recs)))
    assert len(doc.find_all("table", "family")) == 4
    assert "not recorded" in doc.find("section", id="environment").text()
    empty = parse(render_html(Results()))
    assert "No benchmark records" in empty.find("section", id="results").text()


# --- writing and bad input ---------------------------------------------------------------------

def test_render_report_writes_atomically(runs, tmp_path):
    out = render_report(read_results(runs["run"]), tmp_path / "sub" / "report.html")
    assert out == tmp_path / "sub" / "report.html" and out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]  # no temporary file left behind
    assert out.stat().st_mode & 0o044  # readable beyond its owner, like any page


def test_unreadable_input_is_bad_data_naming_the_file(tmp_path, runs):
    missing = tmp_path / "nope"
    with pytest.raises(MltsError) as e:
        render_report([missing], tmp_path / "x.html")
    assert e.value.code == ResultCode.BAD_DATA and str(missing) in e.value.message
    stress_only = write_run(tmp_path / "stress_only", [{"kind": "stress", "driver": "d", "test": "t",
                                                        "outcome": "SUCCESS"}])
    with pytest.raises(MltsError) as e:
        render_report([runs["run"]], tmp_path / "y.html", baseline=[stress_only])
    assert str(stress_only) in e.value.message and "no benchmark records" in e.value.message


def test_templates_ship_as_package_data():
    assert resources.files("mlts.report").joinpath("templates", "report.html.j2").is_file()
    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    assert "templates/*.j2" in config["tool"]["setuptools"]["package-data"]["mlts.report"]


def test_truncated_results_are_reported_in_the_page(tmp_path):
    run = write_run(tmp_path / "r", benchmark_records(drivers={REF}))
    with open(run / RESULTS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps({"kind": "benchmark"})[:10])
    html = render_html(run)
    assert "last line is truncated" in parse(html).find("section", id="environment").text()


def test_a_mode_the_reference_did_not_run_is_compared_with_its_sync_run():
    recs = benchmark_records(drivers={REF, "mlts-fast"})
    for r in recs:
        if r["driver"] == "mlts-fast":
            r["mode"] = "burst"
    doc = parse(render_html(Results(records=recs)))
    row = case_row(doc, FAMILIES[0], "mobilenet_v1_1.0_224", "mlts-fast")
    assert cell(row, "delta-pct").attrs["title"] == "vs reference sync"
    assert [th.text() for th in family_table(doc, FAMILIES[0]).find_all("th")][2] == "Mode"


def test_stress_records_alone():
    from sample_runs import stress_records

    doc = parse(render_html(Results(records=stress_records())))
    summary = {tr.attrs["data-driver"]: tr.find("span", "verdict").text()
               for tr in doc.find("table", "summary").find_all("tr") if "data-driver" in tr.attrs}
    assert summary == {"mlts-fast": "PASS", "sample-float-fast": "FAIL", "sample-quant": "FAIL"}
    assert doc.find("section", id="stress") is not None
    assert "No benchmark records" in doc.find("section", id="results").text()


def test_a_detector_has_its_own_family_with_map_as_its_quality(tmp_path):
    """The SSD-lite detector (its name holds "mobilenet_v2") is its own family, not MobileNet v2's, and its table
    shows mAP@0.5 where classifiers show top-1, and detection agreement as its agreement."""
    records = []
    for driver, map50, agreement in ((REF, 0.946, None), ("mlts-fast", 0.931, 0.97)):
        rec = json.loads(json.dumps(benchmark_records(drivers={driver})[0]))
        rec.update(model="ssdlite_mobilenet_v2_0.5_160", model_info={"task": "detection", "family": "ssdlite",
                                                                      "quantization": "float32"})
        rec["accuracy"] = {"metric": "detection", "map50": map50, "detection_agreement": agreement,
                           "top1_accuracy": None, "top1_agreement": None, "cts_pass": True, "cts_violations": 0}
        records.append(rec)
    doc = parse(render_html([write_run(tmp_path / "run", records, environment())]))
    title = "SSD-lite detector · float"
    header = [th.text() for th in family_table(doc, title).find_all("th")]
    assert "mAP@0.5 %" in header and "Top-1 %" not in header
    row = case_row(doc, title, "ssdlite_mobilenet_v2_0.5_160", "mlts-fast")
    assert "93.1" in row.text() and "97.0" in row.text()
    assert doc.find("table", "family", data_family="MobileNet v2 · float") is None
