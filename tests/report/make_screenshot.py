"""Make the README's report screenshot (docs/report-screenshot.png) with headless Chromium.

    .venv/bin/python tests/report/make_screenshot.py [OUT.png] [--from RUN_DIR ...]

Renders a report from the crafted sample runs (or from real run directories given with --from), takes a
full-page screenshot, and stitches the parts worth showing: the header, the per-driver summary, the
first model family's table and its first latency chart. Where those parts lie is measured by a copy
of the page with a small script added (the report itself never has one), dumped by Chromium.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from browser import dump_dom, find_chromium, screenshot  # noqa: E402
from mlts.report import render_report  # noqa: E402
from sample_runs import write_sample_runs  # noqa: E402

WIDTH = 1280
MEASURE = """<script>
(function () {
  function top(el) { return el ? Math.round(el.getBoundingClientRect().top + window.scrollY) : null; }
  function bottom(el) { return el ? Math.round(el.getBoundingClientRect().bottom + window.scrollY) : null; }
  var out = {
    header_bottom: bottom(document.querySelector("header.top")),
    summary_top: top(document.getElementById("summary")),
    summary_bottom: bottom(document.getElementById("summary")),
    results_top: top(document.getElementById("results")),
    first_table_bottom: bottom(document.querySelector("#results .scroll")),
    latency_top: top(document.getElementById("latency")),
    first_chart_bottom: bottom(document.querySelector("#latency figure.model-chart")),
    page_bottom: Math.round(document.documentElement.scrollHeight)
  };
  document.body.setAttribute("data-measure", JSON.stringify(out));
})();
</script>"""


def measure(binary: str, page: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.html"
        probe.write_text(page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
        dom = dump_dom(binary, probe, f"--window-size={WIDTH},1000")  # layout depends on the width
    m = re.search(r'data-measure="([^"]*)"', dom)
    if not m:
        raise RuntimeError("could not measure the page")
    return json.loads(m.group(1).replace("&quot;", '"'))


def make(out: Path, runs: list[Path] | None = None) -> Path:
    from PIL import Image

    binary = find_chromium()
    if binary is None:
        raise SystemExit("no Chromium found (apt-get install chromium, or set MLTS_CHROMIUM)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        baseline = None
        if not runs:
            sample = write_sample_runs(tmp / "runs", hostile=False)
            runs, baseline = [sample["run"]], [sample["baseline"]]
        page = render_report(runs, tmp / "index.html", baseline=baseline, title="mlts benchmark report")
        where = measure(binary, page)
        full = screenshot(binary, page, tmp / "full.png", width=WIDTH, height=where["page_bottom"] + 20)
        with Image.open(full) as im:
            im = im.convert("RGB")
            pad = 12
            parts = [im.crop((0, 0, WIDTH, where["header_bottom"])),
                     im.crop((0, where["summary_top"] - pad, WIDTH, where["summary_bottom"] + pad)),
                     im.crop((0, where["results_top"] - pad, WIDTH, where["first_table_bottom"] + pad)),
                     im.crop((0, where["latency_top"] - pad, WIDTH, where["first_chart_bottom"] + pad))]
        height = sum(p.height for p in parts)
        sheet = Image.new("RGB", (WIDTH, height), "white")
        y = 0
        for p in parts:
            sheet.paste(p, (0, y))
            y += p.height
        scale = 1100 / WIDTH
        sheet = sheet.resize((1100, round(height * scale)), Image.LANCZOS)
        out.parent.mkdir(parents=True, exist_ok=True)
        sheet.quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE).save(out, optimize=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=str(HERE.parents[1] / "docs" / "report-screenshot.png"))
    ap.add_argument("--from", dest="runs", nargs="+", type=Path, help="real run directories to render instead")
    args = ap.parse_args()
    out = make(Path(args.out), args.runs)
    print(f"wrote {out} ({out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
