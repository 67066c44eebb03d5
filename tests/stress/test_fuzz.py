"""`mlts fuzz`: a short run finds nothing but MltsError; a planted bug is found, shrunk, saved as a
reproducer, and the reproducer reproduces it."""
from __future__ import annotations

import json

import pytest

from mlts.cli import main
from mlts.runtime import MltsError
from mlts.stress import fuzz as fuzz_module
from mlts.stress.fuzz import Violation, fuzz, reproduce


def test_a_short_fuzz_run_finds_only_mlts_errors(tmp_path):
    report = fuzz(3.0, out_dir=tmp_path, seed=1234)
    assert report.crashes == [], [p.with_suffix(".txt").read_text() for p in report.crashes]
    assert report.examples.get("model", 0) > 10 and report.examples.get("onnx", 0) > 10
    assert not list(tmp_path.iterdir())


def test_a_planted_bug_is_saved_as_a_reproducer(tmp_path, monkeypatch):
    real = fuzz_module.exercise_model

    def buggy(spec):
        if any(op["op"] == "MUL" for op in spec["operations"]):
            raise Violation("ZeroDivisionError: planted")
        return real(spec)

    monkeypatch.setitem(fuzz_module.EXERCISE, "model", buggy)
    report = fuzz(6.0, out_dir=tmp_path, targets=["model"], seed=5)
    assert report.crashes, "the planted bug was not found"
    path = report.crashes[0]
    assert "planted" in path.with_suffix(".txt").read_text()
    spec = json.loads(path.read_text())
    assert any(op["op"] == "MUL" for op in spec["operations"])
    assert len(spec["operations"]) <= 3  # shrunk towards a small example
    monkeypatch.setattr(fuzz_module, "exercise_model", buggy)
    with pytest.raises(Violation):
        reproduce(path)


def test_fuzz_cli(tmp_path, capsys):
    assert main(["fuzz", "--seconds", "1", "--targets", "onnx", "--out", str(tmp_path), "--seed", "3"]) == 0
    assert "onnx examples" in capsys.readouterr().out
    with pytest.raises(MltsError):
        fuzz(1.0, out_dir=tmp_path, targets=["nope"])
