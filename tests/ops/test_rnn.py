"""RNN, UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN against independent expectations.

- onnx.reference's RNN (forward, bidirectional; Affine(1, 0) is NNAPI's activation NONE) for the
  cell, the time loop, the reverse direction and the final hidden states;
- a float64 numpy transcription of NNAPI's documented step, act(x W^T + aux_x A^T + h R^T + b), for
  every fused activation, unequal forward/backward unit counts and the auxiliary-input linkings;
- a hand-computed step.
Plus validation errors (BAD_DATA naming the input) and build-time shape inference.
"""
from __future__ import annotations

import numpy as np
import pytest

from mlts.runtime import FuseCode, OperandCode, OperandType, OperationCode
from support.onnx_reference import onnx_outputs
from support.op_runner import Input, expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

RNN, UNI, BIDI = (OperationCode.RNN, OperationCode.UNIDIRECTIONAL_SEQUENCE_RNN,
                  OperationCode.BIDIRECTIONAL_SEQUENCE_RNN)
F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
T = OperandType.tensor
INT, BOOL = OperandType.scalar(OperandCode.INT32), OperandType.scalar(OperandCode.BOOL)
DTYPE = {F32: np.float32, F16: np.float16}
ACTIVATION = {
    FuseCode.NONE: lambda v: v,
    FuseCode.RELU: lambda v: np.maximum(v, 0.0),
    FuseCode.RELU1: lambda v: np.minimum(np.maximum(v, -1.0), 1.0),
    FuseCode.RELU6: lambda v: np.minimum(np.maximum(v, 0.0), 6.0),
}


def rand(rng, *shape, scale=1.0, code=F32):
    return (rng.uniform(-scale, scale, shape)).astype(DTYPE[code])


def t(code, a):
    return T(code, np.shape(a))


def step_reference(x, w, r, b, h, fuse, aux_x=None, aux_w=None):
    """NNAPI's documented RNN step in float64."""
    f = (lambda a: np.asarray(a, np.float64))
    acc = f(x) @ f(w).T + f(h) @ f(r).T + f(b)
    if aux_x is not None:
        acc = acc + f(aux_x) @ f(aux_w).T
    return ACTIVATION[fuse](acc)


def sequence_reference(xs, w, r, b, h, fuse, aux_xs=None, aux_w=None, reverse=False):
    """Time-major [T, B, I] inputs -> ([T, B, U] outputs, final hidden state) by repeating the step."""
    outs = [None] * len(xs)
    for k in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
        h = step_reference(xs[k], w, r, b, h, fuse, None if aux_xs is None else aux_xs[k], aux_w)
        outs[k] = h
    return np.stack(outs), h


def onnx_rnn(xs, cells, direction="forward"):
    """ONNX RNN (activation Affine(1, 0) = none) on time-major xs; cells: [(w, r, b, h0)] per direction.
    Returns (Y [T, dirs, B, U], Y_h [dirs, B, U])."""
    f64 = (lambda *a: np.stack([np.asarray(v, np.float64) for v in a]))
    w, r = f64(*(c[0] for c in cells)), f64(*(c[1] for c in cells))
    b = f64(*(np.concatenate([c[2], np.zeros_like(c[2])]) for c in cells))
    h0 = f64(*(c[3] for c in cells))
    dirs = len(cells)
    return onnx_outputs("RNN", np.asarray(xs, np.float64), w, r, b, None, h0, n_outputs=2, opset=14,
                        hidden_size=w.shape[1], direction=direction, activations=["Affine"] * dirs,
                        activation_alpha=[1.0] * dirs, activation_beta=[0.0] * dirs)


# -- RNN ------------------------------------------------------------------------------------------
def rnn_inputs(code, x, w, r, b, h, fuse):
    return [(t(code, x), x), (t(code, w), w), (t(code, r), r), (t(code, b), b), (t(code, h), h), (INT, fuse)]


def run_rnn(code, x, w, r, b, h, fuse, relaxed=False):
    out = T(code, (x.shape[0], w.shape[0]))
    return run_op(RNN, rnn_inputs(code, x, w, r, b, h, fuse), [out, out], relaxed=relaxed)


def test_rnn_hand_computed():
    x, w = np.array([[1, 2]], np.float32), np.array([[1, 1], [2, -1]], np.float32)
    r, b, h = np.array([[0.5, 0], [0, -2]], np.float32), np.array([1, -2], np.float32), np.array([[2, 3]], np.float32)
    # pre-activation: [1 + 2 + 0.5*2 + 1, 2 - 2 - 2*3 - 2] = [5, -8]
    expected = {FuseCode.NONE: [5, -8], FuseCode.RELU: [5, 0], FuseCode.RELU1: [1, -1], FuseCode.RELU6: [5, 0]}
    for fuse, values in expected.items():
        state, output = run_rnn(F32, x, w, r, b, h, fuse)
        np.testing.assert_array_equal(output, [values])
        np.testing.assert_array_equal(state, [values])


@pytest.mark.parametrize("fuse", list(FuseCode))
@pytest.mark.parametrize("code,relaxed", [(F32, False), (F32, True), (F16, False)])
def test_rnn_every_activation_and_type(code, relaxed, fuse):
    rng = np.random.default_rng(10 + fuse)
    x, w, r = rand(rng, 3, 4, scale=3, code=code), rand(rng, 5, 4, code=code), rand(rng, 5, 5, code=code)
    b, h = rand(rng, 5, code=code), rand(rng, 3, 5, scale=2, code=code)
    state, output = run_rnn(code, x, w, r, b, h, fuse, relaxed)
    assert output.dtype == DTYPE[code] and output.shape == (3, 5)
    assert_cts_close(output, step_reference(x, w, r, b, h, fuse), code, relaxed=relaxed)
    np.testing.assert_array_equal(state, output)


def test_rnn_matches_onnx():
    rng = np.random.default_rng(1)
    x, w, r, b, h = rand(rng, 2, 3), rand(rng, 4, 3), rand(rng, 4, 4), rand(rng, 4), rand(rng, 2, 4)
    _, output = run_rnn(F32, x, w, r, b, h, FuseCode.NONE)
    y, _ = onnx_rnn(x[None], [(w, r, b, h)])
    assert_cts_close(output, y[0, 0], F32)


# -- UNIDIRECTIONAL_SEQUENCE_RNN ---------------------------------------------------------------------
def uni_inputs(code, x, w, r, b, h, fuse, time_major):
    return rnn_inputs(code, x, w, r, b, h, fuse) + [(INT, time_major)]


def uni_case(rng, code=F32, batch=2, max_time=5, input_size=3, units=4, time_major=0):
    xs = rand(rng, max_time, batch, input_size, code=code)
    x = xs if time_major else np.ascontiguousarray(xs.transpose(1, 0, 2))
    return (xs, x, rand(rng, units, input_size, code=code), rand(rng, units, units, scale=0.5, code=code),
            rand(rng, units, code=code), rand(rng, batch, units, code=code))


@pytest.mark.parametrize("time_major", [0, 1])
def test_unidirectional_matches_onnx(time_major):
    rng = np.random.default_rng(2)
    xs, x, w, r, b, h = uni_case(rng, time_major=time_major)
    out_dims = (5, 2, 4) if time_major else (2, 5, 4)
    output, state = run_op(UNI, uni_inputs(F32, x, w, r, b, h, FuseCode.NONE, time_major),
                           [T(F32, out_dims), T(F32, (2, 4))])
    y, y_h = onnx_rnn(xs, [(w, r, b, h)])
    expected = y[:, 0] if time_major else y[:, 0].transpose(1, 0, 2)
    assert_cts_close(output, expected, F32)
    assert_cts_close(state, y_h[0], F32)


@pytest.mark.parametrize("fuse", [FuseCode.RELU, FuseCode.RELU1, FuseCode.RELU6])
@pytest.mark.parametrize("code,relaxed", [(F32, False), (F32, True), (F16, False)])
def test_unidirectional_activations_and_types(code, relaxed, fuse):
    rng = np.random.default_rng(3 + fuse)
    xs, x, w, r, b, h = uni_case(rng, code=code)
    (output,) = run_op(UNI, uni_inputs(code, x, w, r, b, h, fuse, 0), [T(code, (2, 5, 4))], relaxed=relaxed)
    expected, _ = sequence_reference(xs, w, r, b, h, fuse)
    assert output.dtype == DTYPE[code]
    assert_cts_close(output, expected.transpose(1, 0, 2), code, relaxed=relaxed)


def test_unidirectional_time_major_from_a_model_input():
    """The layout flag known only at run time: no build-time inference, the run still right."""
    rng = np.random.default_rng(4)
    xs, x, w, r, b, h = uni_case(rng, time_major=1)
    inputs = uni_inputs(F32, x, w, r, b, h, FuseCode.NONE, Input(1))
    assert inferred_output_types(UNI, inputs, [T(F32, (0, 0, 0))])[0].dimensions == (0, 0, 0)
    (output,) = run_op(UNI, inputs, [T(F32, (0, 0, 0))])
    assert_cts_close(output, sequence_reference(xs, w, r, b, h, FuseCode.NONE)[0], F32)


# -- BIDIRECTIONAL_SEQUENCE_RNN ----------------------------------------------------------------------
def bidi_inputs(code, x, fw, bw, aux=(None, None, None), fuse=FuseCode.NONE, time_major=False, merge=False):
    """fw, bw: (w, r, b, h) per cell; aux: (aux input, fw aux weights, bw aux weights), None = omitted."""
    tensors = [x, *fw, *bw, *aux]
    inputs = [(T(code, np.shape(a) if a is not None else (0,)), a) for a in tensors]
    return inputs + [(INT, fuse), (BOOL, time_major), (BOOL, merge)]


def cell(rng, units, input_size, batch, code=F32):
    return (rand(rng, units, input_size, code=code), rand(rng, units, units, scale=0.5, code=code),
            rand(rng, units, code=code), rand(rng, batch, units, code=code))


def layout(a, time_major):
    return a if time_major else np.ascontiguousarray(np.swapaxes(a, 0, 1))


def bidi_output_types(code, max_time, batch, fw_units, bw_units, time_major, merge, states):
    seq = (lambda u: T(code, (max_time, batch, u) if time_major else (batch, max_time, u)))
    outs = [seq(fw_units + bw_units)] if merge else [seq(fw_units), seq(bw_units)]
    return outs + ([T(code, (batch, fw_units)), T(code, (batch, bw_units))] if states else [])


@pytest.mark.parametrize("time_major,merge,states", [(False, False, False), (True, False, True),
                                                     (True, True, False), (False, True, True)])
def test_bidirectional_matches_onnx(time_major, merge, states):
    rng = np.random.default_rng(5)
    xs = rand(rng, 6, 2, 3)
    fw, bw = cell(rng, 4, 3, 2), cell(rng, 4, 3, 2)
    outs = run_op(BIDI, bidi_inputs(F32, layout(xs, time_major), fw, bw, time_major=time_major, merge=merge),
                  bidi_output_types(F32, 6, 2, 4, 4, time_major, merge, states))
    y, y_h = onnx_rnn(xs, [fw, bw], direction="bidirectional")
    fw_y, bw_y = layout(y[:, 0], time_major), layout(y[:, 1], time_major)
    expected = [np.concatenate([fw_y, bw_y], axis=-1)] if merge else [fw_y, bw_y]
    expected += [y_h[0], y_h[1]] if states else []
    assert len(outs) == len(expected)
    for actual, want in zip(outs, expected):
        assert_cts_close(actual, want, F32)


@pytest.mark.parametrize("code,relaxed", [(F32, False), (F32, True), (F16, False)])
def test_bidirectional_unequal_cells_relu(code, relaxed):
    rng = np.random.default_rng(6)
    xs = rand(rng, 4, 3, 2, code=code)
    fw, bw = cell(rng, 3, 2, 3, code), cell(rng, 5, 2, 3, code)
    merged, fw_state, bw_state = run_op(
        BIDI, bidi_inputs(code, layout(xs, False), fw, bw, fuse=FuseCode.RELU, merge=True),
        bidi_output_types(code, 4, 3, 3, 5, False, True, True), relaxed=relaxed)
    fw_y, fw_h = sequence_reference(xs, *fw, FuseCode.RELU)
    bw_y, bw_h = sequence_reference(xs, *bw, FuseCode.RELU, reverse=True)
    assert merged.shape == (3, 4, 8)
    assert_cts_close(merged, layout(np.concatenate([fw_y, bw_y], axis=-1), False), code, relaxed=relaxed)
    assert_cts_close(fw_state, fw_h, code, relaxed=relaxed)
    assert_cts_close(bw_state, bw_h, code, relaxed=relaxed)


def test_bidirectional_cross_linking_adds_aux_input_to_both_cells():
    rng = np.random.default_rng(7)
    xs, aux_xs = rand(rng, 5, 2, 3), rand(rng, 5, 2, 4)
    fw, bw = cell(rng, 3, 3, 2), cell(rng, 2, 3, 2)
    fw_aux_w, bw_aux_w = rand(rng, 3, 4), rand(rng, 2, 4)
    fw_out, bw_out = run_op(BIDI, bidi_inputs(F32, xs, fw, bw, (aux_xs, fw_aux_w, bw_aux_w), FuseCode.RELU6, True),
                            bidi_output_types(F32, 5, 2, 3, 2, True, False, False))
    assert_cts_close(fw_out, sequence_reference(xs, *fw, FuseCode.RELU6, aux_xs, fw_aux_w)[0], F32)
    assert_cts_close(bw_out, sequence_reference(xs, *bw, FuseCode.RELU6, aux_xs, bw_aux_w, reverse=True)[0], F32)


@pytest.mark.parametrize("time_major", [False, True])
def test_bidirectional_parallel_linking_feeds_aux_input_to_the_backward_cell(time_major):
    rng = np.random.default_rng(8)
    xs, aux_xs = rand(rng, 4, 2, 3), rand(rng, 4, 2, 3)
    fw, bw = cell(rng, 3, 3, 2), cell(rng, 3, 3, 2)
    outs = run_op(BIDI, bidi_inputs(F32, layout(xs, time_major), fw, bw, (layout(aux_xs, time_major), None, None),
                                    time_major=time_major),
                  bidi_output_types(F32, 4, 2, 3, 3, time_major, False, True))
    fw_y, fw_h = sequence_reference(xs, *fw, FuseCode.NONE)
    bw_y, bw_h = sequence_reference(aux_xs, *bw, FuseCode.NONE, reverse=True)
    for actual, want in zip(outs, [layout(fw_y, time_major), layout(bw_y, time_major), fw_h, bw_h]):
        assert_cts_close(actual, want, F32)


def test_bidirectional_aux_input_omitted_at_run_time():
    """Auxiliary tensors declared as model inputs but fed as omitted: no linking (as in the CTS models)."""
    rng = np.random.default_rng(9)
    xs = rand(rng, 3, 1, 2)
    fw, bw = cell(rng, 2, 2, 1), cell(rng, 2, 2, 1)
    inputs = bidi_inputs(F32, xs, fw, bw, time_major=True)
    inputs[9:12] = [(T(F32, (0,)), Input(None))] * 3
    fw_out, bw_out = run_op(BIDI, inputs, bidi_output_types(F32, 3, 1, 2, 2, True, False, False))
    assert_cts_close(fw_out, sequence_reference(xs, *fw, FuseCode.NONE)[0], F32)
    assert_cts_close(bw_out, sequence_reference(xs, *bw, FuseCode.NONE, reverse=True)[0], F32)


# -- shape inference ------------------------------------------------------------------------------
def test_inferred_shapes():
    rng = np.random.default_rng(11)
    x, w, r, b, h = rand(rng, 2, 3), rand(rng, 4, 3), rand(rng, 4, 4), rand(rng, 4), rand(rng, 2, 4)
    unknown2 = T(F32, (0, 0))
    assert [o.dimensions for o in inferred_output_types(RNN, rnn_inputs(F32, x, w, r, b, h, 0),
                                                        [unknown2, unknown2])] == [(2, 4), (2, 4)]
    unknown3 = T(F32, (0, 0, 0))
    xs = rand(rng, 5, 2, 3)  # batch-major reading: batch 5, max_time 2
    for time_major, dims in ((0, (5, 2, 4)), (1, (5, 2, 4))):
        h_batch = rand(rng, 2 if time_major else 5, 4)
        got = inferred_output_types(UNI, uni_inputs(F32, xs, w, r, b, h_batch, 0, time_major), [unknown3, unknown2])
        assert [o.dimensions for o in got] == [dims, (h_batch.shape[0], 4)]
    fw, bw = cell(rng, 4, 3, 2), cell(rng, 6, 3, 2)
    x_tm = rand(rng, 7, 2, 3)
    merged = inferred_output_types(BIDI, bidi_inputs(F32, x_tm, fw, bw, time_major=True, merge=True),
                                   [unknown3, unknown2, unknown2])
    assert [o.dimensions for o in merged] == [(7, 2, 10), (2, 4), (2, 6)]
    split = inferred_output_types(BIDI, bidi_inputs(F32, layout(x_tm, False), fw, bw), [unknown3, unknown3])
    assert [o.dimensions for o in split] == [(2, 7, 4), (2, 7, 6)]


def test_unknown_input_dims_leave_outputs_unknown():
    rng = np.random.default_rng(12)
    w, r, b, h = rand(rng, 4, 3), rand(rng, 4, 4), rand(rng, 4), rand(rng, 2, 4)
    inputs = rnn_inputs(F32, np.zeros((2, 3), np.float32), w, r, b, h, 0)
    inputs[0] = (T(F32, (0, 3)), Input())
    assert inferred_output_types(RNN, inputs, [T(F32, (0, 0))] * 2)[1].dimensions == (0, 0)


# -- validation -----------------------------------------------------------------------------------
def base_rnn(code=F32):
    rng = np.random.default_rng(13)
    return [rand(rng, 2, 3, code=code), rand(rng, 4, 3, code=code), rand(rng, 4, 4, code=code),
            rand(rng, 4, code=code), rand(rng, 2, 4, code=code)]


OUT2 = [T(F32, (2, 4)), T(F32, (2, 4))]


def test_rnn_validation_errors():
    x, w, r, b, h = base_rnn()
    inputs = rnn_inputs(F32, x, w, r, b, h, 0)
    mixed = list(inputs)
    mixed[1] = (T(F16, w.shape), w.astype(np.float16))
    expect_error(RNN, mixed, OUT2, "input 1", "TENSOR_FLOAT16 not allowed")
    int_input = list(inputs)
    int_input[0] = (T(OperandCode.TENSOR_INT32, x.shape), x.astype(np.int32))
    expect_error(RNN, int_input, OUT2, "input 0", "TENSOR_INT32 not allowed")
    expect_error(RNN, inputs, OUT2[:1], "expected 2 outputs")
    expect_error(RNN, inputs[:5] + [(INT, 4)], OUT2, "input 5", "invalid fused activation code 4")
    expect_error(RNN, rnn_inputs(F32, x[None], w, r, b, h, 0), OUT2, "input 0", "rank 3")
    expect_error(RNN, rnn_inputs(F32, x, w, r, b, h[:1], 0), OUT2, "input 4", "batch size")
    expect_error(RNN, rnn_inputs(F32, x, w, r, b[:3], h, 0), OUT2, "input 3", "num_units")
    expect_error(RNN, rnn_inputs(F32, x, w, r[:, :3], b, h, 0), OUT2, "input 2", "num_units")
    expect_error(RNN, rnn_inputs(F32, x, w[:, :2], r, b, h, 0), OUT2, "input 1", "input size")
    expect_error(RNN, rnn_inputs(F32, x, w, r, b, h, 0), [T(F16, (2, 4)), T(F32, (2, 4))], "output 0")
    omitted_bias = list(inputs)
    omitted_bias[3] = (T(F32, (4,)), None)
    expect_error(RNN, omitted_bias, OUT2, "input 3", "omitted")


def test_unidirectional_validation_errors():
    x, w, r, b, h = base_rnn()
    xs = x[:, None, :]  # batch 2, max_time 1
    out = [T(F32, (2, 1, 4))]
    expect_error(UNI, uni_inputs(F32, xs, w, r, b, h, 0, 2), out, "input 6", "time major must be 0 or 1")
    as_bool = uni_inputs(F32, xs, w, r, b, h, 0, 0)
    as_bool[6] = (BOOL, False)
    expect_error(UNI, as_bool, out, "input 6", "BOOL not allowed")
    expect_error(UNI, uni_inputs(F32, x, w, r, b, h, 0, 0), out, "input 0", "rank 2")
    expect_error(UNI, uni_inputs(F32, xs, w, r, b, h, 0, 1), [T(F32, (1, 2, 4))], "input 4", "batch size")
    expect_error(UNI, uni_inputs(F32, xs, w, r, b, h, 0, 0), out * 3, "expected 1 or 2 outputs")


def test_bidirectional_validation_errors():
    rng = np.random.default_rng(14)
    xs = rand(rng, 3, 2, 3)
    fw, bw = cell(rng, 4, 3, 2), cell(rng, 4, 3, 2)
    split = bidi_output_types(F32, 3, 2, 4, 4, True, False, False)
    merged = bidi_output_types(F32, 3, 2, 4, 4, True, True, False)
    expect_error(BIDI, bidi_inputs(F32, xs, fw, bw, time_major=True, merge=True), split,
                 "input 14", "merged outputs need 1 or 3 outputs, got 2")
    expect_error(BIDI, bidi_inputs(F32, xs, fw, bw, time_major=True), merged,
                 "input 14", "unmerged outputs need 2 or 4 outputs, got 1")
    aux_w = rand(rng, 4, 3)
    expect_error(BIDI, bidi_inputs(F32, xs, fw, bw, (None, aux_w, aux_w), time_major=True), split,
                 "input 9", "auxiliary weights are given without an auxiliary input")
    expect_error(BIDI, bidi_inputs(F32, xs, fw, bw, (xs, aux_w, None), time_major=True), split,
                 "input 10", "must both be given or both omitted")
    expect_error(BIDI, bidi_inputs(F32, xs, fw, bw, (xs[:, :1], aux_w, aux_w), time_major=True), split,
                 "input 9", "the input's dimension 1")
    expect_error(BIDI, bidi_inputs(F32, xs, fw, bw, (xs, aux_w[:3], aux_w), time_major=True), split,
                 "input 10", "num_units")
    expect_error(BIDI, bidi_inputs(F32, xs, fw, bw, (xs[:, :, :2], None, None), time_major=True), split,
                 "input 9", "input size of the backward weights")
    as_int = bidi_inputs(F32, xs, fw, bw, time_major=True)
    as_int[13] = (INT, 1)
    expect_error(BIDI, as_int, split, "input 13", "INT32 not allowed")
    expect_error(BIDI, bidi_inputs(F32, xs, fw, cell(rng, 4, 3, 1), time_major=True), split, "input 8", "batch size")
    expect_error(BIDI, bidi_inputs(F32, xs, fw, bw, time_major=True), split + split[:1], "got 3")
