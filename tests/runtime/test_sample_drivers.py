"""Partitioning over the AOSP-style sample drivers reproduces NNAPI's choices (per operation: the
lowest declared exec time, or power under LOW_POWER; ties to nnapi-reference) and computes the
same results as the reference."""
from __future__ import annotations

import numpy as np
import pytest

from fake_drivers import ADD, MUL, chain_expected, chain_model, rand, run
from mlts.runtime import Compilation, FuseCode, Model, OperandCode, OperandType, OperationCode, Preference
from mlts.runtime.drivers.sample import sample_drivers


@pytest.fixture
def samples(register):
    register(*sample_drivers())


def plan(model, preference=Preference.FAST_SINGLE_ANSWER):
    comp = Compilation(model)
    comp.set_preference(preference)
    comp.finish()
    names = [d.name for d in comp.devices]
    chosen = [names[int(line.rsplit(": ", 1)[1])] for line in comp.plan_log
              if line.startswith("findBestDeviceForEachOperation(")]
    return comp, chosen


@pytest.mark.parametrize("preference,relaxed,expected", [
    # ADD: sample-minimal declares 0.4 exec / 0.5 power; MUL is float32 but not minimal's.
    (Preference.FAST_SINGLE_ANSWER, False, ["sample-minimal", "sample-float-fast"]),    # MUL: 0.8 < 1.0 < 1.1 < 1.3
    (Preference.SUSTAINED_SPEED, False, ["sample-minimal", "sample-float-fast"]),
    (Preference.LOW_POWER, False, ["sample-minimal", "sample-float-slow"]),             # MUL power: 0.7 < 1.0
    # Relaxed: minimal declares no separate relaxed figures (0.4/0.5 still win ADD); MUL compares the
    # float drivers' relaxed figures (fast 0.7 exec, slow 0.6 power) with the CPU's 1.0.
    (Preference.FAST_SINGLE_ANSWER, True, ["sample-minimal", "sample-float-fast"]),
    (Preference.LOW_POWER, True, ["sample-minimal", "sample-float-slow"]),
])
def test_float_operations_go_to_the_best_declared_device(samples, preference, relaxed, expected):
    model = chain_model([ADD, MUL], relaxed=relaxed)
    comp, chosen = plan(model, preference)
    assert chosen == expected
    x, y = rand(seed=3), rand(seed=4)
    np.testing.assert_allclose(run(comp, x, y), chain_expected([ADD, MUL], x, y), rtol=1e-6)


def _quant_add_model() -> Model:
    t = OperandType(OperandCode.TENSOR_QUANT8_ASYMM, (2, 3), 0.5, 10)
    m = Model()
    a, b, act, out = m.add_operand(t), m.add_operand(t), m.add_operand(OperandType(OperandCode.INT32)), m.add_operand(t)
    m.set_operand_value(act, np.int32(FuseCode.NONE))
    m.add_operation(OperationCode.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    return m


def test_quantized_operations_stay_on_the_cpu_when_sample_quant_is_slow_or_tied(samples):
    # sample-quant: 50 exec (slower than the CPU's 1.0) and 1.0 power (a tie, which goes to the CPU).
    for pref in (Preference.FAST_SINGLE_ANSWER, Preference.LOW_POWER):
        comp, chosen = plan(_quant_add_model(), pref)
        assert chosen == ["nnapi-reference"]
        assert comp.plan_log[-1] == "partitionTheWork: only one best device: nnapi-reference"


def test_sample_quant_runs_quantized_models_when_it_is_the_only_device(samples):
    from mlts.runtime import Execution, get_device

    comp = Compilation.for_devices(_quant_add_model(), [get_device("sample-quant")])
    comp.finish()
    ex = Execution(comp)
    a = np.array([[10, 12, 14], [200, 0, 255]], np.uint8)
    b = np.array([[10, 20, 30], [40, 50, 60]], np.uint8)
    ex.set_input(0, a)
    ex.set_input(1, b)
    ex.compute()
    # real = (q - 10) / 2; sum requantized to the same scale: q = (a - 10) + (b - 10) + 10, clamped
    expected = np.clip(a.astype(int) + b.astype(int) - 10, 0, 255)
    np.testing.assert_array_equal(ex.get_output(0), expected)


def test_sample_drivers_refuse_what_they_do_not_offer(samples):
    from mlts.runtime import MltsError, ResultCode, get_device

    with pytest.raises(MltsError) as info:
        Compilation.for_devices(chain_model([MUL]), [get_device("sample-minimal")]).finish()
    assert info.value.code == ResultCode.BAD_DATA
    with pytest.raises(MltsError):
        Compilation.for_devices(_quant_add_model(), [get_device("sample-float-fast")]).finish()


def test_mlts_import_shows_the_plan_over_the_sample_drivers(tmp_path):
    """`mlts import --driver sample`: TANH goes to sample-float-fast (0.8, the fastest that has it: mlts-fast
    and sample-minimal do not), RELU to mlts-fast (0.3); the plan is printed in NNAPI's words."""
    import json
    import subprocess
    import sys

    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Tanh", ["a"], ["c"]), helper.make_node("Relu", ["c"], ["d"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 5])],
        [helper.make_tensor_value_info("d", TensorProto.FLOAT, [1, 5])])
    path = tmp_path / "tanh_relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    out = subprocess.run([sys.executable, "-m", "mlts.cli", "import", str(path), "--driver", "sample", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    described = json.loads(out.stdout)
    tanh, relu = described["operations"]
    assert "sample-float-fast" in tanh["devices"] and not {"mlts-fast", "sample-minimal"} & set(tanh["devices"])
    assert {"mlts-fast", "sample-all", "sample-float-fast"} <= set(relu["devices"])
    steps = [(s["device"], s["operations"]) for s in described["partition"]["steps"]]
    assert steps == [("sample-float-fast", [0]), ("mlts-fast", [1])]
    assert "findBestDeviceForEachOperation(TANH): " in "\n".join(described["partition"]["log"])
