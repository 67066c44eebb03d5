"""The report in a real browser: headless Chromium parses index.html, and the DOM it builds still has
every section, the reference-first tables and the inline SVG charts; the screenshot and the printout
are real pages.

Skipped when no Chromium is installed, unless MLTS_REQUIRE_BROWSER=1 (CI sets it after installing
Debian's `chromium`), which turns a missing browser into a failure.
"""
import os

import pytest

from browser import dump_dom, find_chromium, run_chromium, screenshot
from htmltree import parse
from mlts.report import render_report
from sample_runs import REF

SECTIONS = ("environment", "summary", "results", "latency", "partition", "timing", "errors", "stress", "baseline")


@pytest.fixture(scope="module")
def chromium():
    binary = find_chromium()
    if binary is None:
        if os.environ.get("MLTS_REQUIRE_BROWSER") == "1":
            pytest.fail("MLTS_REQUIRE_BROWSER=1 but no Chromium found (install Debian's chromium or set MLTS_CHROMIUM)")
        pytest.skip("no Chromium installed (set MLTS_REQUIRE_BROWSER=1 to make this a failure)")
    return binary


@pytest.fixture(scope="module")
def page(runs, tmp_path_factory):
    return render_report([runs["run"]], tmp_path_factory.mktemp("page") / "index.html", baseline=[runs["baseline"]])


@pytest.fixture(scope="module")
def dom(chromium, page):
    return dump_dom(chromium, page)


def test_chromium_dom_has_every_section_and_the_charts(dom):
    doc = parse(dom)
    for section in SECTIONS:
        assert doc.find("section", id=section) is not None, section
    charts = doc.find_all("svg")
    assert len(charts) >= 20
    hist = doc.find("svg", "hist")
    assert hist is not None and hist.find_all("rect", "bar"), "a histogram with its bars"
    assert doc.find("svg", "pct") is not None and doc.find("svg", "part") is not None
    assert doc.find("script") is None  # the error message with <script> stayed text
    assert "<script>alert(" in doc.find("section", id="errors").text()


def test_chromium_kept_the_tables_as_written(dom, page):
    """A browser moves misplaced table content (foster parenting); the rows must be where we put them."""
    ours, theirs = parse(page.read_text(encoding="utf-8")), parse(dom)

    def rows(doc):
        return [(g.attrs.get("data-model"), [tr.attrs.get("data-driver") for tr in g.find_all("tr")])
                for g in doc.find_all("tbody", "model-group") if g.attrs.get("data-model")]

    assert rows(theirs) == rows(ours) and rows(ours)
    assert all(drivers[0] == REF for _, drivers in rows(theirs))


def test_screenshot_is_a_real_page(chromium, page, tmp_path):
    from PIL import Image

    png = screenshot(chromium, page, tmp_path / "shot.png", width=1280, height=1600)
    assert png.stat().st_size > 20_000
    with Image.open(png) as im:
        assert im.size == (1280, 1600)
        rgb = im.convert("RGB")
        assert rgb.getpixel((5, 5)) == (0x20, 0x21, 0x24)  # the dark header band
        colours = rgb.resize((320, 400)).getcolors(maxcolors=1 << 16)
        assert colours is not None and len(colours) > 100  # text, tables and badges, not a blank page


def test_report_prints_to_pdf(chromium, page, tmp_path):
    pdf = tmp_path / "report.pdf"
    proc = run_chromium(chromium, page, f"--print-to-pdf={pdf}", "--no-pdf-header-footer")
    assert proc.returncode == 0 and pdf.is_file(), proc.stderr[-2000:]
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF") and len(data) > 20_000
