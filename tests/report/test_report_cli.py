"""`mlts report`: where it writes, merging several inputs, --baseline/--title, exit status 2 on bad input."""
import argparse
import subprocess
import sys

import pytest

from mlts.benchmark.records import RESULTS_FILE
from mlts.cli.report import add_parser as add_report_parser, main, run as run_report
from sample_runs import REF, benchmark_records, write_run


def test_parser_wires_run_report():
    parser = argparse.ArgumentParser(prog="mlts")
    add_report_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", "a", "b", "-o", "x.html", "--baseline", "c", "--title", "T"])
    assert args.func is run_report and args.inputs == ["a", "b"] and args.output == "x.html"
    assert args.baseline == ["c"] and args.title == "T"


def test_single_run_dir_writes_its_index_html(tmp_path, capsys):
    run = write_run(tmp_path / "run", benchmark_records(drivers={REF, "mlts-fast"}))
    assert main([str(run)]) == 0
    assert (run / "index.html").is_file()
    assert capsys.readouterr().out.strip() == f"wrote {run / 'index.html'}"


def test_several_inputs_need_an_output_and_are_merged(runs, tmp_path, capsys):
    assert main([str(runs["run"]), str(runs["other"])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mlts report: error:") and "-o" in err and "\n" not in err
    out = tmp_path / "merged.html"
    assert main([str(runs["run"]), str(runs["other"] / RESULTS_FILE), "-o", str(out),
                 "--baseline", str(runs["baseline"]), "--title", "A <b> title"]) == 0
    html = out.read_text(encoding="utf-8")
    assert "sample-quant @ bench-02" in html and 'id="baseline"' in html and "A &lt;b&gt; title" in html


def test_a_results_file_alone_needs_an_output(runs, capsys):
    assert main([str(runs["run"] / RESULTS_FILE)]) == 2
    assert "-o" in capsys.readouterr().err


@pytest.mark.parametrize("what", ["missing", "corrupt", "baseline_missing", "unwritable"])
def test_bad_input_exits_2_with_one_line_naming_the_file(what, tmp_path, capsys):
    run = write_run(tmp_path / "run", benchmark_records(drivers={REF}))
    args = [str(run), "-o", str(tmp_path / "out.html")]
    culprit = str(run)
    if what == "missing":
        culprit = str(tmp_path / "missing")
        args = [culprit, "-o", str(tmp_path / "out.html")]
    elif what == "corrupt":
        lines = (run / RESULTS_FILE).read_text().splitlines()
        lines.insert(1, "{not json")
        (run / RESULTS_FILE).write_text("\n".join(lines) + "\n")
        culprit = str(run / RESULTS_FILE)
    elif what == "baseline_missing":
        culprit = str(tmp_path / "nobase")
        args += ["--baseline", culprit]
    else:
        blocker = tmp_path / "file"
        blocker.write_text("x")
        culprit = str(blocker)
        args = [str(run), "-o", str(blocker / "out.html")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mlts report: error:") and culprit in err


def test_truncated_input_warns_and_still_renders(tmp_path, capsys):
    run = write_run(tmp_path / "run", benchmark_records(drivers={REF}))
    with open(run / RESULTS_FILE, "a") as f:
        f.write('{"kind": "bench')
    assert main([str(run)]) == 0
    assert "warning:" in capsys.readouterr().err and (run / "index.html").is_file()


def test_module_entry_point(tmp_path):
    run = write_run(tmp_path / "run", benchmark_records(drivers={REF}))
    proc = subprocess.run([sys.executable, "-m", "mlts.cli.report", str(run)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (run / "index.html").is_file()
