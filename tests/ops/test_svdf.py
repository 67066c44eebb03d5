"""SVDF against independent expectations.

- a per-batch, per-filter Python loop transcribing NNAPI's step (the activation enters the last
  memory slot, the time weights read all memory_size slots, each unit sums its `rank` consecutive
  filters, then the memory moves one slot to the front);
- streaming from a zero state as a temporal convolution: after step t, unit u is
  bias + sum over its filters f and k <= min(t, memory_size - 1) of weights_time[f, -1 - k] x a[t - k][f],
  a[s] = weights_feature x input[s];
- the first steps of AOSP's V1_0/svdf.mod.py (TFLite's golden outputs), state fed back run to run.
Plus every fused activation, omitted bias, float16 and relaxed, validation errors and shape inference.
"""
from __future__ import annotations

import numpy as np
import pytest

from mlts.runtime import FuseCode, OperandCode, OperandType, OperationCode
from support.op_runner import Input, expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

OP = OperationCode.SVDF
F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
T = OperandType.tensor
INT = OperandType.scalar(OperandCode.INT32)
DTYPE = {F32: np.float32, F16: np.float16}
ACTIVATION = {
    FuseCode.NONE: lambda v: v,
    FuseCode.RELU: lambda v: max(v, 0.0),
    FuseCode.RELU1: lambda v: min(max(v, -1.0), 1.0),
    FuseCode.RELU6: lambda v: min(max(v, 0.0), 6.0),
}


def svdf_inputs(code, x, wf, wt, bias, state, rank, fuse):
    bias_type = T(code, (wf.shape[0] // rank,) if bias is None else bias.shape)
    return [(T(code, x.shape), x), (T(code, wf.shape), wf), (T(code, wt.shape), wt), (bias_type, bias),
            (T(code, state.shape), state), (INT, rank), (INT, fuse)]


def run_svdf(code, x, wf, wt, bias, state, rank, fuse, relaxed=False):
    filters, memory = wt.shape
    outs = [T(code, (x.shape[0], filters * memory)), T(code, (x.shape[0], filters // rank))]
    return run_op(OP, svdf_inputs(code, x, wf, wt, bias, state, rank, fuse), outs, relaxed=relaxed)


def loop_reference(x, wf, wt, bias, state, rank, fuse):
    """(state out, output) of one step, element by element in Python floats."""
    batch, filters, memory = x.shape[0], wf.shape[0], wt.shape[1]
    units = filters // rank
    new_state = np.zeros((batch, filters * memory))
    output = np.zeros((batch, units))
    for b in range(batch):
        per_filter = []
        for f in range(filters):
            slots = [float(v) for v in state[b, f * memory:(f + 1) * memory]]
            slots[-1] = sum(float(wf[f, i]) * float(x[b, i]) for i in range(x.shape[1]))
            per_filter.append(sum(float(wt[f, m]) * slots[m] for m in range(memory)))
            new_state[b, f * memory:(f + 1) * memory] = slots[1:] + [0.0]
        for u in range(units):
            total = sum(per_filter[u * rank:(u + 1) * rank]) + (0.0 if bias is None else float(bias[u]))
            output[b, u] = ACTIVATION[fuse](total)
    return new_state, output


def rand(rng, *shape, scale=1.0, code=F32):
    return rng.uniform(-scale, scale, shape).astype(DTYPE[code])


def case(rng, batch=2, input_size=3, units=4, rank=2, memory=5, code=F32, with_bias=True):
    filters = units * rank
    return (rand(rng, batch, input_size, scale=2, code=code), rand(rng, filters, input_size, code=code),
            rand(rng, filters, memory, code=code), rand(rng, units, code=code) if with_bias else None,
            rand(rng, batch, filters * memory, code=code))


@pytest.mark.parametrize("fuse", list(FuseCode))
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_one_step_matches_loop(rank, fuse):
    rng = np.random.default_rng(rank * 10 + fuse)
    x, wf, wt, bias, state = case(rng, rank=rank)
    new_state, output = run_svdf(F32, x, wf, wt, bias, state, rank, fuse)
    want_state, want_output = loop_reference(x, wf, wt, bias, state, rank, fuse)
    assert_cts_close(new_state, want_state, F32)
    assert_cts_close(output, want_output, F32)


@pytest.mark.parametrize("code,relaxed", [(F32, True), (F16, False)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_types_and_optional_bias(code, relaxed, with_bias):
    rng = np.random.default_rng(3)
    x, wf, wt, bias, state = case(rng, rank=1, memory=4, code=code, with_bias=with_bias)
    new_state, output = run_svdf(code, x, wf, wt, bias, state, 1, FuseCode.RELU, relaxed)
    assert new_state.dtype == output.dtype == DTYPE[code]
    want_state, want_output = loop_reference(x, wf, wt, bias, state, 1, FuseCode.RELU)
    assert_cts_close(new_state, want_state, code, relaxed=relaxed)
    assert_cts_close(output, want_output, code, relaxed=relaxed)


def test_memory_size_one():
    """A memory of one slot: the output sees the current activation only, the state comes back zero."""
    rng = np.random.default_rng(4)
    x, wf, wt, bias, state = case(rng, rank=1, memory=1)
    new_state, output = run_svdf(F32, x, wf, wt, bias, state, 1, FuseCode.NONE)
    np.testing.assert_array_equal(new_state, np.zeros_like(state))
    expected = (x.astype(np.float64) @ wf.T.astype(np.float64)) * wt[:, 0] + bias
    assert_cts_close(output, expected, F32)


def test_streaming_is_a_temporal_convolution():
    rng = np.random.default_rng(5)
    steps, memory, rank, units = 7, 4, 2, 3
    xs = rand(rng, steps, 2, 3)
    _, wf, wt, bias, _ = case(rng, rank=rank, units=units, memory=memory)
    activations = np.einsum("sbi,fi->sbf", xs.astype(np.float64), wf.astype(np.float64))
    state = np.zeros((2, units * rank * memory), np.float32)
    for s in range(steps):
        state, output = run_svdf(F32, xs[s], wf, wt, bias, state, rank, FuseCode.NONE)
        per_filter = sum(wt[:, memory - 1 - k] * activations[s - k] for k in range(min(s, memory - 1) + 1))
        expected = per_filter.reshape(2, units, rank).sum(axis=-1) + bias
        assert_cts_close(output, expected, F32)


# AOSP V1_0/svdf.mod.py (rank 1, 4 units, memory 10): weights, the first three inputs (both batches
# are equal there, one batch kept) and TFLite's golden outputs for them, state fed back between steps.
AOSP_WEIGHTS_FEATURE = [[-0.31930989, -0.36118156, 0.0079667], [0.37613347, 0.22197971, 0.12416199],
                        [0.27901134, 0.27557442, 0.3905206], [-0.36137494, -0.06634006, -0.10640851]]
AOSP_WEIGHTS_TIME = [
    [-0.31930989, 0.37613347, 0.27901134, -0.36137494, -0.36118156,
     0.22197971, 0.27557442, -0.06634006, 0.0079667, 0.12416199],
    [0.3905206, -0.10640851, -0.0976817, 0.15294972, 0.39635518,
     -0.02702999, 0.39296314, 0.15785322, 0.21931258, 0.31053296],
    [-0.36916667, 0.38031587, -0.21580373, 0.27072677, 0.23622236,
     0.34936687, 0.18174365, 0.35907319, -0.17493086, 0.324846],
    [-0.10781813, 0.27201805, 0.14324132, -0.23681851, -0.27115166,
     -0.01580888, -0.14943552, 0.15465137, 0.09784451, -0.0337657]]
AOSP_INPUTS = [[0.12609188, -0.46347019, -0.89598465], [0.14278367, -1.64410412, -0.75222826],
               [0.49837467, 0.19278903, 0.26584083]]
AOSP_GOLDEN = [[0.014899, -0.0517661, -0.143725, -0.00271883], [0.068281, -0.162217, -0.152268, 0.00323521],
               [-0.0317821, -0.0333089, 0.0609602, 0.0333759]]


def test_aosp_svdf_golden_streaming():
    wf, wt = np.array(AOSP_WEIGHTS_FEATURE, np.float32), np.array(AOSP_WEIGHTS_TIME, np.float32)
    state = np.zeros((1, 40), np.float32)
    for x, golden in zip(AOSP_INPUTS, AOSP_GOLDEN):
        state, output = run_svdf(F32, np.array([x], np.float32), wf, wt, None, state, 1, FuseCode.NONE)
        assert_cts_close(output, [golden], F32)


# -- shape inference ------------------------------------------------------------------------------
def test_inferred_shapes():
    rng = np.random.default_rng(6)
    x, wf, wt, bias, state = case(rng, batch=3, units=2, rank=3, memory=4)
    unknown = T(F32, (0, 0))
    got = inferred_output_types(OP, svdf_inputs(F32, x, wf, wt, bias, state, 3, 0), [unknown, unknown])
    assert [o.dimensions for o in got] == [(3, 24), (3, 2)]
    rank_at_run_time = svdf_inputs(F32, x, wf, wt, bias, state, 3, 0)
    rank_at_run_time[5] = (INT, Input(3))
    assert inferred_output_types(OP, rank_at_run_time, [unknown, unknown])[1].dimensions == (0, 0)
    new_state, output = run_op(OP, rank_at_run_time, [unknown, unknown])
    assert_cts_close(output, loop_reference(x, wf, wt, bias, state, 3, 0)[1], F32)


# -- validation -----------------------------------------------------------------------------------
def test_validation_errors():
    rng = np.random.default_rng(7)
    x, wf, wt, bias, state = case(rng, units=2, rank=2, memory=3)
    outs = [T(F32, (2, 12)), T(F32, (2, 2))]

    def inputs(**changes):
        values = dict(x=x, wf=wf, wt=wt, bias=bias, state=state, rank=2, fuse=0)
        values.update(changes)
        return svdf_inputs(F32, *values.values())

    expect_error(OP, inputs(rank=0), outs, "input 5", "rank must be > 0")
    expect_error(OP, inputs(rank=3), outs, "input 1", "not a multiple of the rank 3")
    expect_error(OP, inputs(fuse=5), outs, "input 6", "invalid fused activation code 5")
    expect_error(OP, inputs(bias=bias[:1]), outs, "input 3", "num_units")
    expect_error(OP, inputs(state=state[:, :9]), outs, "input 4", "memory_size x number of filters")
    expect_error(OP, inputs(state=state[:1]), outs, "input 4", "batch size")
    expect_error(OP, inputs(wt=wt[:3]), outs, "input 2", "number of filters")
    expect_error(OP, inputs(wf=wf[:, :2]), outs, "input 1", "input size")
    expect_error(OP, inputs(x=x[None]), outs, "input 0", "rank 3")
    mixed = inputs()
    mixed[2] = (T(F16, wt.shape), wt.astype(np.float16))
    expect_error(OP, mixed, outs, "input 2", "TENSOR_FLOAT16 not allowed")
    expect_error(OP, inputs(), [T(F32, (2, 12))], "expected 2 outputs")
    expect_error(OP, inputs(), [T(F32, (2, 12)), T(F16, (2, 2))], "output 1")
    omitted_state = inputs()
    omitted_state[4] = (T(F32, state.shape), None)
    expect_error(OP, omitted_state, outs, "input 4", "omitted")
