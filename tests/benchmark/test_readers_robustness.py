"""Issue 12, results readers and `mlts compare`: pathological lines are skipped with a warning, a
latency that is not a measurement never passes, run directories may have commas in their names, and
record text cannot break or inject into the Markdown summary."""
from __future__ import annotations

import html
import json
import math
import re

import pytest

from mlts.benchmark.compare import compare
from mlts.benchmark.compare_markdown import md_escape
from mlts.benchmark.decision import FAIL, PASS, WARN
from mlts.benchmark.records import RESULTS_FILE, read_results
from mlts.benchmark.results_writer import ResultsWriter
from mlts.cli.compare import main
from mlts.cli.options import split_paths

STRESS = {"kind": "stress", "driver": "d", "test": "t", "outcome": "SUCCESS"}


def write_lines(run_dir, lines: list[str]) -> str:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RESULTS_FILE).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(run_dir)


def run_dir(path, records) -> str:
    with ResultsWriter(path) as w:
        for r in records:
            w.write(r)
    return str(path)


# --- pathological lines --------------------------------------------------------------------------

@pytest.mark.parametrize("bad, why", [
    ("[" * 100000, "nested"),                                   # RecursionError in json before the fix
    ("[" * 100000 + "]" * 100000, "nested"),                   # complete, still too deep to walk
    ('{"kind": "x", "deep": ' + "[" * 40 + "]" * 40 + "}", "nested"),  # parses, but deeper than any record
    ('{"kind": "x", "n": ' + "9" * 5000 + "}", "digits"),      # int() of 5000 digits is refused by Python
])
def test_pathological_lines_are_skipped_with_a_warning(tmp_path, bad, why):
    d = write_lines(tmp_path / "run", [json.dumps(STRESS), bad, json.dumps({**STRESS, "test": "u"})])
    results = read_results(d)
    assert [r["test"] for r in results.records] == ["t", "u"]  # the lines around it are kept
    assert len(results.problems) == 1
    assert f"{RESULTS_FILE}:2:" in results.problems[0] and why in results.problems[0]


def test_a_corrupt_line_in_the_middle_is_still_an_error(tmp_path):
    from mlts.runtime import MltsError

    d = write_lines(tmp_path / "run", [json.dumps(STRESS), "{not json", json.dumps(STRESS)])
    with pytest.raises(MltsError) as e:
        read_results(d)
    assert f"{RESULTS_FILE}:2" in e.value.message


def test_compare_cli_survives_a_deeply_nested_line(tmp_path, make_record, capsys):
    base = run_dir(tmp_path / "base", [make_record()])
    cur = write_lines(tmp_path / "cur", [json.dumps(make_record()), "[" * 100000])
    assert main([base, cur]) == 0
    captured = capsys.readouterr()
    assert "warning:" in captured.err and "nested" in captured.err
    assert "### mlts compare: PASS" in captured.out


# --- latencies that are not measurements ---------------------------------------------------------------

def with_p50(record: dict, value) -> dict:
    record = json.loads(json.dumps(record))
    record["latency"]["p50_ms"] = value
    return record


@pytest.mark.parametrize("value, said", [
    (math.nan, "NaN"), (math.inf, "not finite"), (-math.inf, "not finite"), (-3.0, "negative"),
    ("12", "not a number"), (None, "missing"),
])
def test_an_unusable_current_median_fails(make_record, value, said):
    c = compare([make_record(p50=10.0)], [with_p50(make_record(), value)])
    row = c.rows[0]
    assert row.verdict == FAIL and c.exit_code() == 1
    assert any("current median latency" in r and said in r for r in row.reasons), row.reasons
    json.loads(c.to_json())  # still valid JSON (no NaN)


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, None])
def test_an_unusable_baseline_median_is_not_judged_and_never_passes(make_record, value):
    c = compare([with_p50(make_record(), value)], [make_record(p50=10.0)])
    assert c.rows[0].verdict == WARN and any("baseline median latency" in r for r in c.rows[0].reasons)


def test_a_nan_median_read_from_a_file_fails_the_cli(tmp_path, make_record, capsys):
    base = run_dir(tmp_path / "base", [make_record()])
    line = json.dumps(make_record()).replace('"p50_ms": 10.0', '"p50_ms": NaN')  # Python's json reads NaN
    assert "NaN" in line
    cur = write_lines(tmp_path / "cur", [line])
    assert main([base, cur, "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"] == FAIL and "NaN" in d["rows"][0]["reasons"][0]


def test_a_nan_accuracy_fails(make_record):
    c = compare([make_record(top1=0.7)], [make_record(top1=math.nan)])
    assert c.rows[0].verdict == FAIL and any("top1_accuracy" in r and "NaN" in r for r in c.rows[0].reasons)


def test_overflowing_deltas_stay_valid_json(make_record):
    c = compare([make_record(p50=1e-300)], [make_record(p50=1e308)])  # +1e310 %: inf in floats
    assert c.rows[0].verdict == FAIL
    d = json.loads(c.to_json())
    assert d["rows"][0]["delta_pct"] is None and d["rows"][0]["current_p50_ms"] == 1e308


def test_finite_medians_still_pass(make_record):
    assert compare([make_record(p50=10.0)], [make_record(p50=10.0)]).rows[0].verdict == PASS


# --- commas in paths -----------------------------------------------------------------------------

def test_a_run_directory_with_a_comma_in_its_name(tmp_path, make_record, capsys):
    base = run_dir(tmp_path / "base,2025-01-08", [make_record(p50=10.0)])
    cur = run_dir(tmp_path / "nightly, slow", [make_record(p50=13.0)])
    assert split_paths(base) == [base]
    assert main([base, cur, "--json"]) == 1  # +30%: read both, compared
    d = json.loads(capsys.readouterr().out)
    assert d["rows"][0]["baseline_p50_ms"] == 10.0 and d["rows"][0]["current_p50_ms"] == 13.0


def test_comma_lists_still_merge_and_may_hold_comma_paths(tmp_path, make_record):
    a = run_dir(tmp_path / "a,b", [make_record(mode="sync")])
    c = run_dir(tmp_path / "c", [make_record(mode="burst")])
    assert split_paths(f"{a},{c}") == [a, c]
    assert split_paths(f"{c},{a}") == [c, a]
    assert split_paths(f"{c},,{c}") == [c, c]
    missing = str(tmp_path / "nope")
    assert split_paths(f"{missing},{c}") == [missing, c]  # the reader then names the missing one


def test_report_baseline_with_a_comma_in_its_name(tmp_path, make_record, capsys):
    from mlts.cli.report import main as report_main

    base = run_dir(tmp_path / "base,old", [make_record(p50=10.0)])
    cur = run_dir(tmp_path / "cur", [make_record(p50=10.0)])
    out = tmp_path / "r.html"
    assert report_main([cur, "-o", str(out), "--baseline", base]) == 0, capsys.readouterr().err
    assert 'id="baseline"' in out.read_text(encoding="utf-8")


# --- Markdown escaping ---------------------------------------------------------------------------------

HOSTILE = ["evil|driver `code` *bold* _it_ ~~s~~ [l](http://x) $x$ <script>alert(1)</script> &amp;\nnext",
           "# heading", "- item", "1. first", "back\\slash|"]


def cells(line: str) -> list[str]:
    """A GFM table row's cells: split on pipes not escaped by an odd number of backslashes."""
    out, cur, k = [], "", 0
    body = line.strip()[1:-1]
    while k < len(body):
        if body[k] == "\\" and k + 1 < len(body):
            cur += body[k:k + 2]
            k += 2
            continue
        if body[k] == "|":
            out.append(cur.strip())
            cur = ""
        else:
            cur += body[k]
        k += 1
    return out + [cur.strip()]


def unescape(cell: str) -> str:
    """What CommonMark shows for an escaped cell: backslash escapes of ASCII punctuation, then entities."""
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", cell))


@pytest.mark.parametrize("name", HOSTILE)
def test_record_text_is_literal_in_the_markdown(make_record, name):
    base = make_record(driver=name, model=name)
    cur = make_record(driver=name, model=name, p50=20.0, message=name)
    md = compare([base], [cur]).to_markdown()
    assert "<script" not in md
    table = [line for line in md.splitlines() if line.startswith("|")]
    head, rows = cells(table[0]), [cells(line) for line in table[2:]]
    assert len(rows) == 1 and len(rows[0]) == len(head)
    shown = dict(zip(head, rows[0]))
    expected = " ".join(name.split("\n")).strip()
    assert unescape(shown["Driver"]) == expected and unescape(shown["Model"]) == expected
    for text in (shown["Driver"], shown["Model"]):  # nothing left that Markdown would act on
        assert not re.search(r"(?<!\\)[`*_\[\]|~$<>]", text)


def test_md_escape_by_hand():
    assert md_escape("a|b") == "a\\|b"
    assert md_escape("x_y*z`") == "x\\_y\\*z\\`"
    assert md_escape("<b>&") == "&lt;b&gt;&amp;"
    assert md_escape("one\ntwo\r\nthree") == "one two three"
    assert md_escape("# not a heading") == "\\# not a heading"


def test_notes_are_escaped(make_record):
    c = compare([make_record()], [make_record()])
    c.notes.append("path/with|pipe and <tag>\n- injected item")
    md = c.to_markdown()
    assert "- path/with\\|pipe and &lt;tag&gt; - injected item" in md  # one bullet, one line
    assert "\n- injected" not in md
