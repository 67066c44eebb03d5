"""The nnapi-cts conformance suite: our spec DSL (variations expanded as NNAPI's generator documents in its
README), the committed data set, and the runner's verdicts (pass, fail with the difference, n/a)."""
from __future__ import annotations

import json
import random
from dataclasses import replace

import numpy as np
import pytest

from mlts.conformance.nnapi_cts import spec_dsl, store, suite
from mlts.runtime import OperationCode, devices
from mlts.runtime.ops import implemented_operations

ADD_SPEC = """
i1 = Input("op1", "TENSOR_FLOAT32", "{2}")
i2 = Input("op2", "TENSOR_FLOAT32", "{2}")
act = Int32Scalar("act", 0)
o = Output("op3", "TENSOR_FLOAT32", "{2}")
Model().Operation("ADD", i1, i2, act).To(o)
Example({i1: [1.0, 2.0], i2: [3.0, 4.0], o: [4.0, 6.0]})
"""


def run(source: str, name: str = "spec", version: str | None = "V1_2") -> list[spec_dsl.SpecCase]:
    return spec_dsl.run_spec_source(source, name, version)


def by_name(cases):
    return {c.name: c for c in cases}


def values(case, operand_name):
    return next(o for o in case.model.operands if o.name == operand_name).value


def reference():
    return next(d for d in devices() if d.name == "nnapi-reference")


# -- the DSL ------------------------------------------------------------------------------------------
def test_single_operation_gets_the_lifetime_variations():
    # Two inputs, no constant tensor: all_tensors_as_inputs is skipped, all_inputs_as_internal applies.
    cases = by_name(run(ADD_SPEC, "add"))
    assert set(cases) == {"add", "add_all_inputs_as_internal"}
    internal = cases["add_all_inputs_as_internal"].model
    assert [op.optype for op in internal.operations] == ["ADD", "ADD", "ADD"]
    assert [i.name for i in internal.GetInputs()] == ["op1_new", "op2_new"]
    assert values(cases["add_all_inputs_as_internal"], "op1_new") == [1.0, 2.0]


def test_data_type_relaxed_and_quant8_variations_convert_values():
    src = ADD_SPEC.replace('Example({i1: [1.0, 2.0], i2: [3.0, 4.0], o: [4.0, 6.0]})', '''
quant8 = DataTypeConverter().Identify({i1: ("TENSOR_QUANT8_ASYMM", 0.5, 10), i2: ("TENSOR_QUANT8_ASYMM", 0.5, 10),
                                        o: ("TENSOR_QUANT8_ASYMM", 1.0, 0)})
Example({i1: [1.0, 2.0], i2: [3.0, 4.0], o: [4.0, 6.0]}).AddVariations("relaxed", "float16", quant8)
''')
    cases = by_name(run(src, "add"))
    assert {"add", "add_relaxed", "add_float16", "add_quant8"} <= set(cases)
    assert cases["add_relaxed"].model.isRelaxed and cases["add_relaxed"].version is None
    assert next(o for o in cases["add_float16"].model.operands if o.name == "op1").type.type == "TENSOR_FLOAT16"
    q = cases["add_quant8"]
    assert values(q, "op1") == [12, 14]  # 1.0 / 0.5 + 10, 2.0 / 0.5 + 10
    assert values(q, "op3") == [4, 6]
    assert not cases["add"].model.isRelaxed and cases["add"].version == "V1_2"


def test_quantize_rounds_half_to_even_and_clamps():
    kind = spec_dsl.OperandKind("TENSOR_QUANT8_ASYMM", [4], 1.0, 0)
    assert spec_dsl.quantize(np.array([0.5, 1.5, -3.0, 300.0], np.float32), kind).tolist() == [0, 2, 0, 255]


def test_nchw_and_constant_tensors_as_inputs():
    src = '''
i = Input("in", ("TENSOR_FLOAT32", [1, 2, 2, 1]))
f = Parameter("filter", ("TENSOR_FLOAT32", [1, 1, 1, 1]), [2.0])
b = Parameter("bias", ("TENSOR_FLOAT32", [1]), [0.0])
layout = BoolScalar("layout", False)
o = Output("out", ("TENSOR_FLOAT32", [1, 2, 2, 1]))
Model().Operation("CONV_2D", i, f, b, 0, 0, 0, 0, 1, 1, 0, layout).To(o)
Example({i: [1.0, 2.0, 3.0, 4.0], o: [2.0, 4.0, 6.0, 8.0]}).AddNchw(i, o, layout)
'''
    cases = by_name(run(src, "conv"))
    assert {"conv_nhwc", "conv_nchw", "conv_nhwc_all_tensors_as_inputs", "conv_nchw_all_inputs_as_internal",
            "conv_nchw_all_tensors_as_inputs_all_inputs_as_internal"} <= set(cases)
    nchw = cases["conv_nchw"].model
    assert next(o for o in nchw.operands if o.name == "in").type.dimensions == [1, 1, 2, 2]
    assert values(cases["conv_nchw"], "layout") == [True]
    as_inputs = cases["conv_nhwc_all_tensors_as_inputs"].model
    assert [i.name for i in as_inputs.GetInputs()] == ["in", "filter", "bias"]  # declared order kept


def test_axis_converter_transposes_and_drops():
    src = '''
i = Input("in", ("TENSOR_FLOAT32", [2, 3]))
axis = Int32Scalar("axis", -1)
o = Output("out", ("TENSOR_FLOAT32", [2, 3]))
Model().Operation("SOFTMAX", i, 1.0, axis).To(o)
Example({i: [1., 2., 3., 4., 5., 6.], o: [1., 2., 3., 4., 5., 6.]}).AddAllDimsAndAxis(i, o, axis)
'''
    cases = by_name(run(src, "sm"))
    assert {"sm_dim2_axis0", "sm_dim2_axis0_neg", "sm_dim2_axis1", "sm_dim2_axis1_neg", "sm_dim1_axis0"} <= set(cases)
    moved = cases["sm_dim2_axis0"]
    assert next(o for o in moved.model.operands if o.name == "in").type.dimensions == [3, 2]
    assert values(moved, "in") == [1., 4., 2., 5., 3., 6.]
    assert values(moved, "axis") == [0] and values(cases["sm_dim2_axis0_neg"], "axis") == [-2]
    dropped = cases["sm_dim1_axis0"]
    assert values(dropped, "in") == [1., 2., 3.]  # in[0, :]


def test_activations_ignored_outputs_and_expected_failures():
    src = '''
i = Input("in", ("TENSOR_FLOAT32", [3]))
act = Int32Scalar("act", 0)
o = Output("out", ("TENSOR_FLOAT32", [3]))
skip = IgnoredOutput("skip", ("TENSOR_FLOAT32", [3]))
Model().Operation("SPLIT_LIKE", i, act).To(o, skip)
Example({i: [-2.0, 0.5, 8.0], o: [-2.0, 0.5, 8.0], skip: [9.0, 9.0, 9.0]}).AddAllActivations(o, act)
Example({i: [1.0, 1.0, 1.0], o: [1.0, 1.0, 1.0], skip: [0.0, 0.0, 0.0]}, name="bad").ExpectFailure() \\
    .DisableLifeTimeVariation()
'''
    cases = by_name(run(src, "act"))
    assert values(cases["act_relu1"], "out") == [-1.0, 0.5, 1.0] and values(cases["act_relu1"], "act") == [2]
    assert values(cases["act_relu6"], "out") == [0.0, 0.5, 6.0]
    assert values(cases["act_none"], "skip") == [0, 0, 0]
    assert set(n for n in cases if "bad" in n) == {"act_bad"} and cases["act_bad"].expect_failure


def test_examples_of_one_model_are_merged_and_renamed():
    cases = [c.name for c in run(ADD_SPEC + 'Example({i1: [0.0, 0.0], i2: [1.0, 1.0], o: [1.0, 1.0]})\n', "add")]
    assert cases == ["add", "add_all_inputs_as_internal", "add_2", "add_all_inputs_as_internal_2"]


def converter():
    """tools/convert_nnapi_specs.py (a build-time script, not a package module), loaded by path."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "convert_nnapi_specs.py"
    spec = importlib.util.spec_from_file_location("convert_nnapi_specs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_converted_case_runs_and_passes():
    case = converter().convert_case(run(ADD_SPEC, "add")[1], "add", "V1_2")
    assert case.main.inputs and case.tested == ["ADD"]
    assert suite.run_case(case, reference()).status == "pass"


# -- the committed data set -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cases():
    return store.load_cases()


def test_data_set_counts_and_provenance(cases):
    per_dir = {d: sum(c.spec_dir == d for c in cases) for d in store.SPEC_DIRS}
    assert per_dir == {"V1_0": 378, "V1_1": 575, "V1_2": 5187, "V1_3": 2717, "V1_3_cts_only": 270}
    total = sum(p.stat().st_size for p in store.VECTORS_DIR.glob(f"*{store.SUFFIX}"))
    assert total < 15_000_000
    data = store.read_data_set(store.VECTORS_DIR / f"V1_3_cts_only{store.SUFFIX}")
    assert data.provenance["license"] == "Apache-2.0" and "regenerate" in data.provenance
    assert data.skipped == []
    names = [c.name for c in cases]
    assert len(set(zip(names, (c.spec_dir for c in cases)))) == len(names)
    assert sum(c.expect_failure for c in cases) > 0 and sum(c.relaxed for c in cases) > 0


# -- the runner -----------------------------------------------------------------------------------------
def test_sample_of_implemented_operations_passes(cases):
    implemented = {c.name for c in implemented_operations()}
    eligible = [c for c in cases if set(c.operation_names) <= implemented and c.spec_dir != "V1_0"]
    sample = random.Random(16).sample(eligible, 60)
    results = suite.run_suite(sample, [reference()])
    assert len(results) >= 60
    bad = [(r.case, r.variant, r.detail) for r in results if r.status != "pass"]
    assert not bad


def test_wrong_output_fails_with_the_difference(cases):
    case = next(c for c in cases if c.name == "add" and c.spec_dir == "V1_0")
    outputs, declined = suite.execute(case, reference())
    assert not declined
    suite.compare_outputs(case, outputs)  # the driver's own output passes
    wrong = outputs[0].copy()
    wrong.reshape(-1)[1] += 0.01
    with pytest.raises(suite.CaseFailure) as info:
        suite.compare_outputs(case, [wrong])
    assert info.value.worst["index"] == 1 and info.value.worst["difference"] == pytest.approx(0.01, rel=1e-3)
    assert "outside tolerance" in str(info.value)


def test_quant8_tolerance_is_one_step(cases):
    case = next(c for c in cases if c.name == "conv2d_v1_2_nhwc_quant8")
    outputs, _ = suite.execute(case, reference())
    off_by_one = outputs[0].astype(np.int32) + 1
    in_range = np.clip(off_by_one, 0, 255).astype(np.uint8)
    suite.compare_outputs(case, [in_range])
    with pytest.raises(suite.CaseFailure):
        suite.compare_outputs(case, [np.clip(outputs[0].astype(np.int32) + 2, 0, 255).astype(np.uint8)])


def test_declined_operation_is_na(cases, monkeypatch, tmp_path):
    case = next(c for c in cases if c.name == "add" and c.spec_dir == "V1_0")
    monkeypatch.setattr(suite.Model, "get_supported_operations_for_devices",
                        lambda self, devs: [code != OperationCode.ADD for code, _, _ in self.operations()])
    results_path = tmp_path / "results.jsonl"
    results = suite.run_suite([case], [reference()], results_path=str(results_path))
    assert [r.status for r in results] == ["n/a", "n/a"] and "ADD" in results[0].detail
    lines = [json.loads(line) for line in results_path.read_text().splitlines()]
    assert [x["status"] for x in lines] == ["n/a", "n/a"] and lines[0]["suite"] == "nnapi-cts"


def test_expected_failure_passes_only_when_it_fails(cases):
    invalid = [c for c in cases if c.expect_failure and c.spec == "strided_slice_invalid"]
    assert invalid and all(suite.run_case(c, reference()).status == "pass" for c in invalid)
    case = next(c for c in cases if c.name == "add" and c.spec_dir == "V1_0")
    assert suite.run_case(replace(case, expect_failure=True), reference()).status == "fail"


def test_cli_case_replay(capsys, tmp_path):
    from mlts.cli import main

    status = main(["conformance", "--suite", "nnapi-cts", "--case", "add", "--drivers", "nnapi-reference",
                   "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0 and "pass  nnapi-reference add [static] ADD" in out and "ADD" in out
    assert (tmp_path / "results.jsonl").exists()


def test_cli_a_driver_that_declines_every_case_is_no_pass(capsys, tmp_path):
    """sample-minimal takes ADD, CONCATENATION and CONV_2D only: on TANH's vectors every run is n/a, so nothing
    of it was tested and the run does not pass; nnapi-reference beside it still passes its runs."""
    from mlts.cli import main
    from mlts.runtime import devices, unregister_driver
    from mlts.stress.drivers import close_devices

    before = {d.name for d in devices()}
    try:
        status = main(["conformance", "--suite", "nnapi-cts", "--ops", "TANH", "--driver", "sample",
                       "--drivers", "nnapi-reference,sample-minimal", "--paths", "sync", "--no-report",
                       "--out", str(tmp_path)])
    finally:  # --driver registered the sample drivers in this process (and started their services)
        added = [d for d in devices() if d.name not in before]
        close_devices(added)
        for d in added:
            unregister_driver(d.name)
    assert {d.name for d in devices()} == before
    captured = capsys.readouterr()
    assert status == 1
    assert "nothing of sample-minimal was tested" in captured.err and "nothing of nnapi-reference" not in captured.err
    statuses = {(json.loads(line)["device"], json.loads(line)["status"])
                for line in (tmp_path / "results.jsonl").read_text().splitlines()}
    assert statuses == {("nnapi-reference", "pass"), ("sample-minimal", "n/a")}
    status = main(["conformance", "--suite", "nnapi-cts", "--ops", "TANH", "--drivers", "nnapi-reference",
                   "--paths", "sync", "--no-report", "--out", str(tmp_path / "alone")])
    assert status == 0
