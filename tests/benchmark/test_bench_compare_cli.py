"""`mlts compare` argument handling, output and exit codes (0 PASS/WARN, 1 FAIL, 2 bad input)."""
import argparse
import json
import subprocess
import sys

import pytest

from mlts.cli.compare import add_parser as add_compare_parser, main, run as run_compare
from mlts.benchmark.records import RESULTS_FILE
from mlts.benchmark.results_writer import ResultsWriter


def run_dir(path, records):
    with ResultsWriter(path) as w:
        for r in records:
            w.write(r)
    return str(path)


@pytest.fixture
def runs(tmp_path, make_record):
    base = run_dir(tmp_path / "base", [make_record(mode="sync"), make_record(mode="burst")])
    same = run_dir(tmp_path / "same", [make_record(mode="sync"), make_record(mode="burst")])
    slower = run_dir(tmp_path / "slower", [make_record(mode="sync", p50=13.0), make_record(mode="burst")])
    warn = run_dir(tmp_path / "warn", [make_record(mode="sync", p50=11.0), make_record(mode="burst")])
    return {"base": base, "same": same, "slower": slower, "warn": warn}


def test_parser_wires_run_compare():
    parser = argparse.ArgumentParser(prog="mlts")
    add_compare_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["compare", "a", "b"])
    assert args.func is run_compare and args.latency_fail == 15.0 and not args.json


def test_exit_codes(runs, capsys):
    assert main([runs["base"], runs["same"]]) == 0
    assert "### mlts compare: PASS" in capsys.readouterr().out
    assert main([runs["base"], runs["warn"]]) == 0
    assert main([runs["base"], runs["warn"], "--fail-on-warn"]) == 1
    assert main([runs["base"], runs["slower"]]) == 1
    assert "### mlts compare: FAIL" in capsys.readouterr().out
    assert main([runs["base"], runs["slower"], "--latency-fail", "50", "--latency-warn", "40"]) == 0


def test_json_and_markdown_file(runs, tmp_path, capsys):
    md = tmp_path / "summary.md"
    assert main([runs["base"], runs["slower"] + "/" + RESULTS_FILE, "--json", "--markdown", str(md)]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"] == "FAIL" and len(d["rows"]) == 2
    assert md.read_text().startswith("### mlts compare: FAIL")


def test_merging_with_commas(runs, capsys):
    assert main([runs["base"], f"{runs['same']},{runs['slower']}", "--json"]) == 1  # the later run's record wins
    d = json.loads(capsys.readouterr().out)
    assert any("2 records" in n for n in d["notes"])


@pytest.mark.parametrize("which", ["baseline", "current"])
def test_unreadable_input_is_exit_2_with_one_line_naming_the_file(runs, tmp_path, capsys, which):
    missing = str(tmp_path / "no_such_run")
    argv = [missing, runs["same"]] if which == "baseline" else [runs["base"], missing]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mlts compare: error:") and "no_such_run" in err


def test_corrupt_and_empty_inputs_are_exit_2(runs, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json}\n{}\n")
    assert main([runs["base"], str(bad)]) == 2
    assert f"{bad}:1" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main([str(empty), runs["base"]]) == 2
    assert "empty.jsonl: no benchmark records" in capsys.readouterr().err


def test_bad_threshold_is_exit_2(runs, capsys):
    assert main([runs["base"], runs["same"], "--latency-warn", "-3"]) == 2
    assert "latency_warn_pct" in capsys.readouterr().err


def test_truncated_input_is_a_warning_not_an_error(runs, capsys):
    with open(f"{runs['slower']}/{RESULTS_FILE}", "a") as f:
        f.write('{"schema_version": 1, "kind": "bench')
    assert main([runs["base"], runs["slower"]]) == 1
    captured = capsys.readouterr()
    assert "warning" in captured.err and "truncated" in captured.err
    assert "truncated" in captured.out  # and in the summary's notes


def test_as_a_program(runs):
    proc = subprocess.run([sys.executable, "-m", "mlts.cli.compare", runs["base"], runs["slower"]],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "FAIL" in proc.stdout
