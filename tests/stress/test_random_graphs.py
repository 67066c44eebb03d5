"""The random-graph generator makes valid graphs (each compiles and runs on nnapi-reference), only from
the operations a driver takes; a wrong driver is caught and its graph replays through the CLI."""
from __future__ import annotations

import collections
import json

import pytest

from mlts.cli import main
from mlts.runtime import Compilation, Execution, get_device
from mlts.stress.context import StressFailure, StressSkipped
from mlts.stress.graph_spec import build_model, load_spec
from mlts.stress.graphgen.generator import GraphGenerator, single_op_spec
from mlts.stress.random_graphs import random_graphs, run_graph, supported_pairs

from stress_context import make_context


def run_on_reference(spec):
    model, inputs = build_model(spec)
    c = Compilation.for_devices(model, [get_device("nnapi-reference")])
    c.finish()
    e = Execution(c)
    for i, x in enumerate(inputs):
        e.set_input(i, x)
    e.compute()
    return model


def test_every_generated_graph_compiles_and_runs_on_the_reference():
    gen = GraphGenerator()
    ops = collections.Counter()
    sizes = collections.Counter()
    for seed in range(120):
        spec = gen.generate(seed)
        model = run_on_reference(spec)
        assert model.operation_count == len(spec["operations"]) >= 1
        ops.update(op["op"] for op in spec["operations"])
        sizes[spec["size"]] += 1
    assert set(sizes) == {"single", "small", "large"}
    # the generator reaches the MobileNet operations and most of the rest
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "AVERAGE_POOL_2D", "SOFTMAX", "ADD"} <= set(ops)
    assert len(ops) >= 28


def test_graphs_are_deterministic_and_json_round_trip(tmp_path):
    a, b = GraphGenerator().generate(7, "large"), GraphGenerator().generate(7, "large")
    assert a == b
    path = tmp_path / "g.json"
    path.write_text(json.dumps(a))
    assert load_spec(path) == a
    omitted = [o for seed in range(60) for o in GraphGenerator().generate(seed)["operands"] if o["value"] == "omitted"]
    assert omitted  # omitted optional operands occur


def test_generation_is_limited_to_the_allowed_operations():
    allowed = {("CONV_2D", "TENSOR_FLOAT32"), ("ADD", "TENSOR_FLOAT32"), ("RELU", "TENSOR_FLOAT32")}
    gen = GraphGenerator(allowed)
    for seed in range(40):
        spec = gen.generate(seed)
        assert {op["op"] for op in spec["operations"]} <= {"CONV_2D", "ADD", "RELU", "RESHAPE"}
        run_on_reference(spec)
    assert single_op_spec("LOGICAL_NOT", "TENSOR_BOOL8", 0) is not None
    assert single_op_spec("CONV_2D", "TENSOR_BOOL8", 0) is None


def test_supported_pairs_follow_the_driver(tmp_path):
    ctx = make_context("sample-minimal", spec="sample", out_dir=tmp_path)
    try:
        assert supported_pairs(ctx) == {("ADD", "TENSOR_FLOAT32"), ("CONCATENATION", "TENSOR_FLOAT32"),
                                        ("CONV_2D", "TENSOR_FLOAT32")}
        details = random_graphs(ctx)
        assert details["graphs"] > 0
    finally:
        ctx.close()


def test_a_healthy_driver_matches_the_reference(tmp_path):
    ctx = make_context("sample-all", spec="sample", out_dir=tmp_path, duration=0.0, params={"max_graphs": 40})
    try:
        gen = GraphGenerator(supported_pairs(ctx))
        for seed in range(40):
            why, ran = run_graph(ctx, gen.generate(seed))
            assert why is None
    finally:
        ctx.close()


@pytest.mark.parametrize("fault", ["wrong-small", "wrong-large"])
def test_a_wrong_driver_is_caught_and_its_graph_replays(tmp_path, fault, no_strays, capsys):
    name = f"faulty-{fault}-execute"
    ctx = make_context(name, spec=f"faulty:{fault}@execute", out_dir=tmp_path, duration=5.0)
    try:
        with pytest.raises(StressFailure) as info:
            random_graphs(ctx)
    finally:
        ctx.close()
    path = info.value.details["graph"]
    assert f"mlts stress --replay {path}" in info.value.reason
    spec = load_spec(path)
    assert spec["driver"] == name and spec["reason"]
    # The CLI runs it again in a watched process on the same (fault) driver: reproduced, exit status 1.
    assert main(["stress", "--replay", path, "--in-process"]) == 1
    assert "reproduced" in capsys.readouterr().out
    # On a healthy driver the same graph passes.
    assert main(["stress", "--replay", path, "--include-reference", "--drivers", "nnapi-reference"]) == 0


def test_no_graph_on_the_driver_is_skipped_never_success(tmp_path, monkeypatch):
    """A driver that takes none of the generator's operations, or runs none of the graphs whole, was not
    tested: SKIPPED with the reason, not SUCCESS with a note."""
    from mlts.stress import random_graphs as module

    ctx = make_context("sample-all", spec="sample", out_dir=tmp_path, duration=0.0)
    try:
        monkeypatch.setattr(module, "supported_pairs", lambda ctx: set())
        with pytest.raises(StressSkipped, match="sample-all takes none of the generator's operations"):
            random_graphs(ctx)
        monkeypatch.setattr(module, "supported_pairs", lambda ctx: None)
        monkeypatch.setattr(module, "run_graph", lambda ctx, spec: (None, False))  # never supported whole
        with pytest.raises(StressSkipped, match=r"none of 200 random graphs ran on sample-all") as info:
            random_graphs(ctx)
        assert info.value.details == {"graphs": 0, "skipped": 200}
    finally:
        ctx.close()
