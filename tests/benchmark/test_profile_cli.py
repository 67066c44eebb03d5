"""`mlts profile MODEL --driver D`: the driver's own per-operation times where it reports them, and
single-operation models for a driver without the HAL extension (a driver given as a spec)."""
from __future__ import annotations

import json

import pytest

from mlts.cli import main
from mlts.models.zoo_registry import load
from test_bench_runner import REF, TINY, register, tiny_zoo  # noqa: F401 (fixtures)

def test_profile_of_a_driver_without_the_extension_times_every_operation_alone(tiny_zoo, register, capsys):
    spec = "support.profiling_drivers:no_profiling_driver"  # a driver named "no-profiling"
    assert main(["profile", TINY, "--driver", spec, "--in-process", "--runs", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ops = load(TINY).model.operations()
    assert (out["model"], out["driver"], out["method"]) == (TINY, "no-profiling", "single-operation")
    assert [(o["index"], o["type"], o["status"]) for o in out["operations"]] == [
        (j, code.name, "ok") for j, (code, _, _) in enumerate(ops)]
    assert all(o["mean_us"] > 0 and o["runs"] == 2 and o["source"] == "on_device" for o in out["operations"])
    assert sum(t["count"] for t in out["by_type"]) == len(ops)
    assert {t["type"] for t in out["by_type"][:2]} == {"CONV_2D", "DEPTHWISE_CONV_2D"}  # a MobileNet's time


def test_profile_of_the_reference_uses_its_own_times(tiny_zoo, capsys):
    assert main(["profile", TINY, "--driver", REF, "--runs", "2", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert f"{TINY} on {REF}: per-operation times the driver reported" in out
    lines = out.splitlines()
    header = next(k for k, line in enumerate(lines) if line.split()[:2] == ["op", "type"])
    assert all(REF in line and line.rstrip().endswith("profiled") for line in lines[header + 1:header + 4])
    assert lines[header + 4] == ""  # --top 3: three operations, then the per-type table
    assert "CONV_2D" in out and "DEPTHWISE_CONV_2D" in out


@pytest.mark.parametrize("argv, message", [(["--driver", "no-such-device"], "no-such-device"),
                                           (["--driver", REF, "--runs", "0"], "--runs")])
def test_profile_errors_are_one_line(argv, message, capsys):
    assert main(["profile", "mobilenet_v1_0.25_128", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("mlts profile: error:") and message in err
