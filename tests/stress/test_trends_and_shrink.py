"""The statistics behind sustained inference's verdicts (Theil-Sen slopes with Sen's interval) and the
shrinking of failing random graphs, against hand-computed answers."""
from __future__ import annotations

import base64

import numpy as np
import pytest

from mlts.runtime import (Compilation, Execution, FuseCode, MltsError, OperandCode, OperandType, OperationCode,
                          ResultCode, get_device)
from mlts.stress.graph_spec import GraphBuilder, build_model
from mlts.stress.shrink import ancestors, shrink, subgraph
from mlts.stress.trends import theil_sen

F32 = OperandCode.TENSOR_FLOAT32


# -- Theil-Sen ---------------------------------------------------------------------------------------
def test_slope_of_an_exact_line_is_exact_with_a_zero_width_interval():
    t = theil_sen([0, 1, 2, 3, 4], [1, 3, 5, 7, 9])
    assert (t.slope, t.low, t.high, t.points, t.span) == (2.0, 2.0, 2.0, 5, 4.0)
    assert t.growth == 8.0


def test_median_of_pairwise_slopes_by_hand():
    # points (0,0) (1,1) (2,4): pairwise slopes 1, 2, 3 -> median 2
    t = theil_sen([0, 1, 2], [0, 1, 4])
    assert t.slope == 2.0
    # n = 3: C = 1.96 * sqrt(3 * 2 * 11 / 18) = 3.75 -> the interval spans every slope
    assert (t.low, t.high) == (1.0, 3.0)


def test_one_outlier_does_not_move_the_slope():
    x = np.arange(50)
    y = 0.5 * x
    y[25] = 1000.0
    t = theil_sen(x, y)
    assert t.slope == pytest.approx(0.5)
    assert t.low <= 0.5 <= t.high


def test_noise_without_trend_has_an_interval_around_zero_and_a_real_trend_excludes_it():
    rng = np.random.default_rng(0)
    x = np.arange(200)
    flat = theil_sen(x, rng.normal(0, 1, 200))
    assert flat.low < 0 < flat.high
    rising = theil_sen(x, 0.05 * x + rng.normal(0, 1, 200))
    assert rising.low > 0.03 and rising.high < 0.07


def test_too_few_points_give_no_trend_and_long_series_are_thinned():
    assert theil_sen([1, 1, 1], [1, 2, 3]) is None
    assert theil_sen([0, 1], [0, 1]) is None
    t = theil_sen(np.arange(10000), np.arange(10000) * 3.0)
    assert t.points == 1500 and t.slope == pytest.approx(3.0)


# -- shrinking ---------------------------------------------------------------------------------------
def _chain_spec():
    """x -> ADD(x, c1) -> a -> MUL(a, c2) -> b -> SUB(b, x) -> out  (float32 [2, 3])."""
    rng = np.random.default_rng(5)
    b = GraphBuilder()
    t = OperandType.tensor(F32, (2, 3))
    x = b.input(t, rng.uniform(-1, 1, (2, 3)))
    a, m, out = b.temp(t), b.temp(t), b.temp(t)
    b.op(OperationCode.ADD, [x, b.const(t, np.full((2, 3), 0.5)), b.i32(FuseCode.NONE)], [a])
    b.op(OperationCode.MUL, [a, b.const(t, np.full((2, 3), 3.0)), b.i32(FuseCode.NONE)], [m])
    b.op(OperationCode.SUB, [m, x, b.i32(FuseCode.NONE)], [out])
    b.output(out)
    return b.spec(seed=1), rng


def _reference(spec):
    model, inputs = build_model(spec)
    c = Compilation.for_devices(model, [get_device("nnapi-reference")])
    c.finish()
    e = Execution(c)
    for i, v in enumerate(inputs):
        e.set_input(i, v)
    e.compute()
    return [e.get_output(i) for i in range(len(model.outputs))]


def test_ancestors_and_subgraph_keep_what_an_operation_needs():
    spec, _ = _chain_spec()
    assert ancestors(spec, 2) == [0, 1, 2] and ancestors(spec, 1) == [0, 1] and ancestors(spec, 0) == [0]
    x = spec["input_values"][0]
    # MUL alone, fed the reference's value of its input a = x + 0.5
    a_operand = spec["operations"][1]["inputs"][0]
    part = subgraph(spec, [1], spec["operations"][1]["outputs"], {a_operand: np.full((2, 3), 2.0, np.float32)})
    assert [op["op"] for op in part["operations"]] == ["MUL"] and len(part["inputs"]) == 1
    (out,) = _reference(part)
    np.testing.assert_array_equal(out, np.full((2, 3), 6.0, np.float32))  # 2 * 3
    (whole,) = _reference(spec)
    x = np.frombuffer(base64.b64decode(x["b64"]), np.float32).reshape(2, 3)
    np.testing.assert_allclose(whole, (x + 0.5) * 3 - x, rtol=1e-6)


def test_shrink_isolates_the_operation_that_fails_alone():
    spec, _ = _chain_spec()
    seen = []

    def fails(candidate):  # a driver whose MUL is wrong
        seen.append([op["op"] for op in candidate["operations"]])
        return "MUL differs" if any(op["op"] == "MUL" for op in candidate["operations"]) else None

    found = shrink(spec, fails, _reference)
    assert found.isolated and found.operations == [1] and seen[:2] == [["ADD"], ["MUL"]]
    assert found.describe(spec) == ("operation 1 (MUL on TENSOR_FLOAT32 -> TENSOR_FLOAT32) fails alone, fed "
                                    "nnapi-reference's inputs: MUL differs")


def test_shrink_falls_back_to_the_smallest_failing_prefix():
    spec, _ = _chain_spec()

    def fails(candidate):  # fails only when ADD and MUL run together (a combination, not one operation)
        ops = {op["op"] for op in candidate["operations"]}
        return "drift" if {"ADD", "MUL"} <= ops else None

    found = shrink(spec, fails, _reference)
    assert not found.isolated and found.operations == [0, 1]
    assert "smallest failing graph has 2 operation(s) (ADD, MUL): drift" in found.describe(spec)


def test_nothing_smaller_fails_gives_none_and_reference_refusals_are_not_failures():
    spec, _ = _chain_spec()
    assert shrink(spec, lambda c: "x" if len(c["operations"]) == 3 else None, _reference) is None

    def refuses(candidate):
        raise MltsError(ResultCode.BAD_DATA, "refused")

    assert shrink(spec, refuses, _reference) is None
