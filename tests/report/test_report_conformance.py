"""The report's Conformance section from crafted conformance records: a drivers x features matrix with
each test's outcome and check counts, every check listed, failed checks gathered in one table, the
driver's summary verdict, and conformance records kept out of the plain stress table."""
from __future__ import annotations

from htmltree import parse
from mlts.benchmark.records import Results
from mlts.report import render_html


def conformance_record(driver: str, feature: str, checks: list[tuple[str, str, str]], outcome: str | None = None,
                       group: str | None = "conformance") -> dict:
    failed = [c for c in checks if c[1] == "fail"]
    record = {"kind": "stress", "schema_version": 1, "driver": driver, "test": f"conformance_{feature}",
              "outcome": outcome or ("FAILURE" if failed else "SUCCESS"),
              "reason": "; ".join(f"{n}: {d}" for n, _, d in failed), "duration_s": 0.8,
              "details": {"feature": feature.replace("_", " "),
                          "checks": [{"check": n, "verdict": v, "detail": d} for n, v, d in checks]}}
    if group is not None:
        record["group"] = group
    return record


RECORDS = [
    conformance_record("good-driver", "caching", [("caching", "n/a", "needs no cache files")]),
    conformance_record("good-driver", "control_flow", [("IF with a true condition runs the then branch", "pass", ""),
                                                       ("a WHILE counting loop gives the right sum", "pass", "")]),
    conformance_record("bad-driver", "control_flow", [
        ("IF with a true condition runs the then branch", "fail", "output 0 differs: got [18], expected [42]"),
        ("a WHILE counting loop gives the right sum", "pass", "")]),
    # an older record without the "group" field: recognised by its test name
    conformance_record("bad-driver", "caching", [("a corrupt cache is not used as it is", "pass", "")], group=None),
    {"kind": "stress", "schema_version": 1, "driver": "good-driver", "test": "random_graphs", "outcome": "SUCCESS",
     "reason": "", "duration_s": 3.0},
]


def test_conformance_matrix_checks_and_failures():
    doc = parse(render_html(Results(records=RECORDS)))
    section = doc.find("section", id="conformance")
    assert section is not None
    header = [th.text() for th in section.find("table", "conformance").find("thead").find_all("th")]
    assert header == ["Driver", "control flow", "caching"]  # the catalog's order, not the records'

    rows = {tr.attrs["data-driver"]: tr for tr in section.find("table", "conformance").find("tbody").find_all("tr")}
    assert set(rows) == {"good-driver", "bad-driver"}
    bad_cells = rows["bad-driver"].find_all("td")
    assert bad_cells[1].find("span", "verdict").text() == "FAILURE"
    assert "1 ✗" in bad_cells[1].text().replace("\u2009", " ")
    good_cells = rows["good-driver"].find_all("td")
    assert good_cells[2].find("span", "verdict").text() == "SUCCESS" and "1 n/a" in good_cells[2].text()
    items = [li.text() for li in good_cells[1].find("ul", "checks").find_all("li")]
    assert items[0].startswith("pass IF with a true condition")
    failures = section.find("table", "conformance-failures").find("tbody").find_all("tr")
    assert len(failures) == 1 and "got [18], expected [42]" in failures[0].text()


def test_summary_and_stress_table_keep_conformance_apart():
    doc = parse(render_html(Results(records=RECORDS)))
    summary = {tr.attrs["data-driver"]: tr for tr in doc.find("table", "summary").find_all("tr")
               if "data-driver" in tr.attrs}
    assert summary["bad-driver"].find("span", "verdict").text() == "FAIL"
    assert summary["good-driver"].find("span", "verdict").text() == "PASS"
    assert "1 of 2 test(s)" in summary["bad-driver"].text()
    stress_tests = [tr.find_all("td")[1].text() for tr in doc.find("section", id="stress").find("tbody").find_all("tr")]
    assert stress_tests == ["random_graphs"]


def test_no_conformance_section_without_conformance_records():
    html = render_html(Results(records=RECORDS[-1:]))
    assert 'id="conformance"' not in html and 'href="#conformance"' not in html
