"""UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM against independent expectations.

onnx.reference's LSTM (forward and bidirectional; tanh, optional peepholes, final states) for the plain
cells; otherwise lstm_reference.py's numpy transcription of NeuralNetworks.h's cell unrolled over time
(CIFG, projection, clipping, layer normalization, auxiliary input in cross and parallel linking, forward
and backward cells of different sizes); AOSP's V1_2/unidirectional_sequence_lstm_1step.mod.py vector.
Time-major and batch-major layouts, merged outputs, the optional state outputs of 1.3, NNAPI's
validation and build-time shape inference.
"""
from __future__ import annotations

import numpy as np
import pytest

from lstm_reference import (AUX_KEYS, BOOL, CELL_KEYS, F16, F32, INT32, LN_KEYS, T, make_weights, onnx_lstm_inputs,
                            reference_sequence, scalar_operands, tensor_operands)
from mlts.runtime import OperationCode, ResultCode
from support.onnx_reference import onnx_outputs
from support.op_runner import Const, Input, expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

UNI = OperationCode.UNIDIRECTIONAL_SEQUENCE_LSTM
BI = OperationCode.BIDIRECTIONAL_SEQUENCE_LSTM
RNG = np.random.default_rng(77)


def _cast(code, *arrays):
    dtype = np.float16 if code == F16 else np.float32
    return [None if a is None else np.asarray(a, dtype) for a in arrays]


def _layout(seq, time_major):
    """A time-major [time, batch, ...] array in the requested layout."""
    return seq if time_major else np.swapaxes(seq, 0, 1)


def uni_inputs(w, x, h, c, code=F32, *, time_major=True, activation=4, cell_clip=0.0, proj_clip=0.0, const=False):
    x, h, c = _cast(code, x, h, c)
    return [(T(code, x.shape), x), *tensor_operands(w, CELL_KEYS, code, const=const), (T(code, h.shape), h),
            (T(code, c.shape), c), *scalar_operands(code, activation, cell_clip, proj_clip), (BOOL, time_major),
            *tensor_operands(w, LN_KEYS, code, const=const)]


def uni_outputs(code, out_shape, batch=None, n_cell=None, n_output=None):
    outs = [T(code, out_shape)]
    if batch is not None:
        outs += [T(code, (batch, n_output)), T(code, (batch, n_cell))]
    return outs


def bi_inputs(fw, bw, x, states, code=F32, *, aux=None, time_major=True, merge=False, activation=4, cell_clip=0.0,
              proj_clip=0.0, const=False):
    x, aux, *states = _cast(code, x, aux, *states)
    return [(T(code, x.shape), x), *tensor_operands(fw, CELL_KEYS, code, const=const),
            *tensor_operands(bw, CELL_KEYS, code, const=const), *((T(code, s.shape), s) for s in states),
            (T(code, [0] if aux is None else aux.shape), Const(aux) if const and aux is not None else aux),
            *tensor_operands(fw, AUX_KEYS, code, const=const),
            *tensor_operands(bw, AUX_KEYS, code, const=const), *scalar_operands(code, activation, cell_clip, proj_clip),
            (BOOL, merge), (BOOL, time_major), *tensor_operands(fw, LN_KEYS, code, const=const),
            *tensor_operands(bw, LN_KEYS, code, const=const)]


def sequence(time, batch, size, scale=1.0):
    return RNG.uniform(-scale, scale, (time, batch, size))


def states(batch, *sizes):
    return [RNG.uniform(-0.5, 0.5, (batch, s)) for s in sizes]


def rounded(code, w):
    """Weights as the operation sees them (rounded to float16 for float16 operands)."""
    dtype = np.float16 if code == F16 else np.float32
    return {k: v.astype(dtype).astype(np.float64) for k, v in w.items()}


# -- UNIDIRECTIONAL_SEQUENCE_LSTM ------------------------------------------------------------------------
@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
@pytest.mark.parametrize("peephole", [False, True], ids=["plain", "peephole"])
def test_unidirectional_matches_onnx(code, time_major, peephole):
    time, batch, n_input, n_cell = 4, 2, 3, 5
    w = rounded(code, make_weights(RNG, n_input, n_cell, peephole=peephole))
    xs, (h, c) = sequence(time, batch, n_input), states(batch, n_cell, n_cell)
    xs, h, c = _cast(code, xs, h, c)
    out, h_out, c_out = run_op(UNI, uni_inputs(w, _layout(xs, time_major), h, c, code, time_major=time_major),
                               uni_outputs(code, _layout(xs, time_major).shape[:2] + (n_cell,), batch, n_cell, n_cell))
    W, R, B, P = (a.astype(np.float32) for a in onnx_lstm_inputs(w))
    y, y_h, y_c = onnx_outputs("LSTM", xs.astype(np.float32), W, R, B, None, h[None].astype(np.float32),
                               c[None].astype(np.float32), P, n_outputs=3, hidden_size=n_cell)
    assert_cts_close(out, _layout(y[:, 0], time_major), code)
    assert_cts_close(h_out, y_h[0], code)
    assert_cts_close(c_out, y_c[0], code)


UNI_VARIANTS = {  # name: (make_weights options, n_output, activation, cell clip, projection clip)
    "cifg_peephole_projection": (dict(cifg=True, peephole=True, projection=True), 3, 4, 0.0, 0.0),
    "projection_bias_clipped": (dict(projection=True, projection_bias=True), 2, 4, 0.4, 0.1),
    "layer_norm": (dict(peephole=True, projection=True, layer_norm=True), 3, 4, 0.0, 0.0),
    "layer_norm_cifg": (dict(cifg=True, peephole=True, layer_norm=True), 4, 4, 0.0, 0.0),
    "relu6": (dict(), 4, 3, 0.0, 0.0),
    "sigmoid_cell_clip": (dict(peephole=True), 4, 6, 0.3, 0.0),
}


@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
@pytest.mark.parametrize("name", list(UNI_VARIANTS))
def test_unidirectional_variants_against_formula(name, time_major):
    options, n_output, activation, cell_clip, proj_clip = UNI_VARIANTS[name]
    time, batch, n_input, n_cell = 3, 2, 5, 4
    w = make_weights(RNG, n_input, n_cell, n_output, **options)
    xs, (h, c) = sequence(time, batch, n_input, 2.0), states(batch, n_output, n_cell)
    xs, h, c = _cast(F32, xs, h, c)
    params = dict(activation=activation, cell_clip=cell_clip, proj_clip=proj_clip)
    outs = run_op(UNI, uni_inputs(w, _layout(xs, time_major), h, c, time_major=time_major, **params),
                  uni_outputs(F32, _layout(xs, time_major).shape[:2] + (n_output,), batch, n_cell, n_output))
    y, h_ref, c_ref = reference_sequence(w, xs, h, c, **params)
    assert_cts_close(outs[0], _layout(y, time_major), F32)
    assert_cts_close(outs[1], h_ref, F32)
    assert_cts_close(outs[2], c_ref, F32)


def test_unidirectional_relaxed_and_single_output():
    time, batch, n_input, n_cell = 3, 2, 3, 4
    w = make_weights(RNG, n_input, n_cell, cifg=True)
    xs, (h, c) = sequence(time, batch, n_input), states(batch, n_cell, n_cell)
    (out,) = run_op(UNI, uni_inputs(w, xs, h, c), uni_outputs(F32, (time, batch, n_cell)), relaxed=True)
    assert_cts_close(out, reference_sequence(w, xs.astype(np.float32), h.astype(np.float32),
                                             c.astype(np.float32))[0], F32, relaxed=True)


def test_unidirectional_aosp_vector_1step():
    # AOSP runtime/test/specs/V1_2/unidirectional_sequence_lstm_1step.mod.py: layer norm, peephole, projection.
    def m(values, rows=4):
        return np.array(values).reshape(rows, -1)
    w = {"x_i": m([0.5, 0.6, 0.7, -0.8, -0.9, 0.1, 0.2, 0.3, -0.4, 0.5, -0.8, 0.7, -0.6, 0.5, -0.4, -0.5, -0.4, -0.3,
                   -0.2, -0.1]),
         "x_f": m([-0.6, -0.1, 0.3, 0.2, 0.9, -0.5, -0.2, -0.4, 0.3, -0.8, -0.4, 0.3, -0.5, -0.4, -0.6, 0.3, -0.4,
                   -0.6, -0.5, -0.5]),
         "x_c": m([-0.4, -0.3, -0.2, -0.1, -0.5, 0.5, -0.2, -0.3, -0.2, -0.6, 0.6, -0.1, -0.4, -0.3, -0.7, 0.7, -0.9,
                   -0.5, 0.8, 0.6]),
         "x_o": m([-0.8, -0.4, -0.2, -0.9, -0.1, -0.7, 0.3, -0.3, -0.8, -0.2, 0.6, -0.2, 0.4, -0.7, -0.3, -0.5, 0.1,
                   0.5, -0.6, -0.4]),
         "b_i": np.array([0.03, 0.15, 0.22, 0.38]), "b_f": np.array([0.1, -0.3, -0.2, 0.1]),
         "b_c": np.array([-0.05, 0.72, 0.25, 0.08]), "b_o": np.array([0.05, -0.01, 0.2, 0.1]),
         "h_i": m([-0.2, -0.3, 0.4, 0.1, -0.5, 0.9, -0.2, -0.3, -0.7, 0.05, -0.2, -0.6]),
         "h_c": m([-0.3, 0.2, 0.1, -0.3, 0.8, -0.08, -0.2, 0.3, 0.8, -0.6, -0.1, 0.2]),
         "h_f": m([-0.5, -0.3, -0.5, -0.2, 0.6, 0.4, 0.9, 0.3, -0.1, 0.2, 0.5, 0.2]),
         "h_o": m([0.3, -0.1, 0.1, -0.2, -0.5, -0.7, -0.2, -0.6, -0.1, -0.4, -0.7, -0.2]),
         "c_i": np.array([0.05, 0.1, 0.25, 0.15]), "c_f": np.array([-0.02, -0.15, -0.25, -0.03]),
         "c_o": np.array([0.1, -0.1, -0.5, 0.05]),
         "proj": m([-0.1, 0.2, 0.01, -0.2, 0.1, 0.5, 0.3, 0.08, 0.07, 0.2, -0.4, 0.2], rows=3),
         "ln_i": np.array([0.1, 0.2, 0.3, 0.5]), "ln_f": np.array([0.2, 0.2, 0.4, 0.3]),
         "ln_c": np.array([0.7, 0.2, 0.3, 0.8]), "ln_o": np.array([0.6, 0.2, 0.2, 0.5])}
    x = np.array([0.7, 0.8, 0.1, 0.2, 0.3, 0.3, 0.2, 0.9, 0.8, 0.1]).reshape(1, 2, 5)
    (out,) = run_op(UNI, uni_inputs(w, x, np.zeros((2, 3)), np.zeros((2, 4))), uni_outputs(F32, (1, 2, 3)))
    golden = [0.024407668039203, 0.128027379512787, -0.001709178090096,
              -0.006924282759428, 0.084874063730240, 0.063444979488850]
    assert_cts_close(out, np.reshape(golden, (1, 2, 3)), F32)


def _uni_case(n_output=4, **options):
    time, batch, n_input, n_cell = 3, 2, 3, 4
    w = make_weights(RNG, n_input, n_cell, n_output, **options)
    return w, sequence(time, batch, n_input), *states(batch, n_output, n_cell)


def test_unidirectional_validation():
    w, xs, h, c = _uni_case()
    ins = uni_inputs(w, xs, h, c, const=True)
    outs = uni_outputs(F32, (3, 2, 4), 2, 4, 4)
    expect_error(UNI, ins[:27], outs, "expected 28 inputs")
    expect_error(UNI, ins, outs[:2], "expected 1 or 3 outputs")
    bad_flag = list(ins)
    bad_flag[23] = (INT32, 1)
    expect_error(UNI, bad_flag, outs, "input 23 ", "INT32")
    expect_error(UNI, uni_inputs(w, xs[0], h, c, const=True), outs, "input 0 ", "rank 3")
    # batch-major reads the batch from dimension 0: the states no longer match
    expect_error(UNI, uni_inputs(w, xs, h, c, time_major=False, const=True), uni_outputs(F32, (3, 2, 4)),
                 "input 18 ", "output state")
    w_ln, xs, h, c = _uni_case(cifg=True, layer_norm=True)
    w_ln["ln_i"] = np.ones(4)
    expect_error(UNI, uni_inputs(w_ln, xs, h, c, const=True), uni_outputs(F32, (3, 2, 4)), "input 24 ", "CIFG")
    ins = uni_inputs(w, xs, h, c, const=True)
    ins[20] = (ins[20][0], 7)
    expect_error(UNI, ins, uni_outputs(F32, (3, 2, 4)), "input 20 ", "activation 7")


@pytest.mark.parametrize("time_major", [True, False])
def test_unidirectional_shape_inference(time_major):
    w, xs, h, c = _uni_case(n_output=3, projection=True)
    x = _layout(xs, time_major)
    types = inferred_output_types(UNI, uni_inputs(w, x, h, c, time_major=time_major),
                                  [T(F32, (0, 0, 0)), T(F32, (0, 0)), T(F32, (0, 0))])
    assert [t.dimensions for t in types] == [x.shape[:2] + (3,), (2, 3), (2, 4)]
    ins = uni_inputs(w, x, h, c, time_major=time_major)
    ins[23] = (ins[23][0], Input(time_major))  # the layout flag unknown until run time: no inference
    types = inferred_output_types(UNI, ins, [T(F32, (0, 0, 0))])
    assert types[0].dimensions == (0, 0, 0)


def test_unidirectional_time_dimension_known_at_run_time():
    w, xs, h, c = _uni_case()
    ins = uni_inputs(w, xs, h, c)
    ins[0] = (T(F32, (0, 2, 3)), ins[0][1])
    outs = [T(F32, (0, 0, 0)), T(F32, (0, 0)), T(F32, (0, 0))]
    assert inferred_output_types(UNI, ins, outs)[0].dimensions == (0, 0, 0)
    out, h_out, c_out = run_op(UNI, ins, outs)
    y, h_ref, c_ref = reference_sequence(w, xs.astype(np.float32), h.astype(np.float32), c.astype(np.float32))
    assert out.shape == (3, 2, 4)
    assert_cts_close(out, y, F32)
    assert_cts_close(c_out, c_ref, F32)


# -- BIDIRECTIONAL_SEQUENCE_LSTM -------------------------------------------------------------------------
def _bi_outputs(code, time_major, time, batch, fw_out, bw_out, merge, with_states, fw_cell=None, bw_cell=None):
    shape = (lambda n: (time, batch, n)) if time_major else (lambda n: (batch, time, n))
    outs = [T(code, shape(fw_out + bw_out))] if merge else [T(code, shape(fw_out)), T(code, shape(bw_out))]
    if with_states:
        outs += [T(code, (batch, n)) for n in (fw_out, fw_cell, bw_out, bw_cell)]
    return outs


@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
@pytest.mark.parametrize("merge", [False, True], ids=["separate", "merged"])
def test_bidirectional_matches_onnx(code, time_major, merge):
    time, batch, n_input, n_cell = 3, 2, 4, 3
    fw = rounded(code, make_weights(RNG, n_input, n_cell, peephole=True))
    bw = rounded(code, make_weights(RNG, n_input, n_cell, peephole=True))
    xs, *st = _cast(code, sequence(time, batch, n_input), *states(batch, n_cell, n_cell, n_cell, n_cell))
    results = run_op(BI, bi_inputs(fw, bw, _layout(xs, time_major), st, code, time_major=time_major, merge=merge),
                     _bi_outputs(code, time_major, time, batch, n_cell, n_cell, merge, True, n_cell, n_cell))
    (Wf, Rf, Bf, Pf), (Wb, Rb, Bb, Pb) = onnx_lstm_inputs(fw), onnx_lstm_inputs(bw)
    f32 = lambda *a: np.concatenate(a).astype(np.float32)  # noqa: E731
    y, y_h, y_c = onnx_outputs("LSTM", xs.astype(np.float32), f32(Wf, Wb), f32(Rf, Rb), f32(Bf, Bb), None,
                               f32(st[0][None], st[2][None]), f32(st[1][None], st[3][None]), f32(Pf, Pb),
                               n_outputs=3, hidden_size=n_cell, direction="bidirectional")
    if merge:
        assert_cts_close(results[0], _layout(np.concatenate([y[:, 0], y[:, 1]], axis=-1), time_major), code)
    else:
        assert_cts_close(results[0], _layout(y[:, 0], time_major), code)
        assert_cts_close(results[1], _layout(y[:, 1], time_major), code)
    fw_h, fw_c, bw_h, bw_c = results[-4:]
    for actual, expected in ((fw_h, y_h[0]), (fw_c, y_c[0]), (bw_h, y_h[1]), (bw_c, y_c[1])):
        assert_cts_close(actual, expected, code)


@pytest.mark.parametrize("linking", ["cross", "parallel"])
@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
def test_bidirectional_auxiliary_input(linking, time_major):
    time, batch, n_input, n_aux, n_cell = 3, 2, 4, 3, 4
    cross = linking == "cross"
    fw = make_weights(RNG, n_input, n_cell, peephole=True, n_aux=n_aux if cross else None)
    bw = make_weights(RNG, n_input if cross else n_aux, n_cell, cifg=True, n_aux=n_aux if cross else None)
    xs, aux = sequence(time, batch, n_input), sequence(time, batch, n_aux)
    xs, aux, *st = _cast(F32, xs, aux, *states(batch, n_cell, n_cell, n_cell, n_cell))
    out_fw, out_bw, *_ = run_op(BI, bi_inputs(fw, bw, _layout(xs, time_major), st, aux=_layout(aux, time_major),
                                              time_major=time_major),
                                _bi_outputs(F32, time_major, time, batch, n_cell, n_cell, False, False))
    y_fw, _, _ = reference_sequence(fw, xs, st[0], st[1], aux=aux if cross else None)
    y_bw, _, _ = reference_sequence(bw, xs if cross else aux, st[2], st[3], reverse=True, aux=aux if cross else None)
    assert_cts_close(out_fw, _layout(y_fw, time_major), F32)
    assert_cts_close(out_bw, _layout(y_bw, time_major), F32)


@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
def test_bidirectional_layer_norm_cells_of_different_sizes(code):
    time, batch, n_input = 4, 3, 5
    fw = rounded(code, make_weights(RNG, n_input, 4, 3, peephole=True, projection=True, projection_bias=True,
                                    layer_norm=True))
    bw = rounded(code, make_weights(RNG, n_input, 6, cifg=True, peephole=True, layer_norm=True))
    xs, *st = _cast(code, sequence(time, batch, n_input), *states(batch, 3, 4, 6, 6))
    params = dict(cell_clip=0.8, proj_clip=0.3)
    results = run_op(BI, bi_inputs(fw, bw, xs, st, code, merge=True, **params),
                     _bi_outputs(code, True, time, batch, 3, 6, True, True, 4, 6))
    y_fw, h_fw, c_fw = reference_sequence(fw, xs, st[0], st[1], **params)
    y_bw, h_bw, c_bw = reference_sequence(bw, xs, st[2], st[3], reverse=True, **params)
    assert_cts_close(results[0], np.concatenate([y_fw, y_bw], axis=-1), code)
    for actual, expected in zip(results[1:], (h_fw, c_fw, h_bw, c_bw)):
        assert_cts_close(actual, expected, code)


def _bi_case(aux=False, **options):
    time, batch, n_input, n_cell = 2, 2, 3, 4
    n_aux = 3 if aux else None
    fw = make_weights(RNG, n_input, n_cell, n_aux=n_aux, **options)
    bw = make_weights(RNG, n_input, n_cell, n_aux=n_aux, **options)
    return (fw, bw, sequence(time, batch, n_input), states(batch, n_cell, n_cell, n_cell, n_cell),
            sequence(time, batch, 3) if aux else None)


def test_bidirectional_validation():
    fw, bw, xs, st, _ = _bi_case()
    ins = bi_inputs(fw, bw, xs, st, const=True)
    outs = _bi_outputs(F32, True, 2, 2, 4, 4, False, False)
    expect_error(BI, ins[:60], outs, "expected 61 inputs")
    expect_error(BI, ins, outs + outs[:1], "expected 1 or 2 or 5 or 6 outputs")
    expect_error(BI, bi_inputs(fw, bw, xs, st, merge=True, const=True), outs, "input 51 ", "merge_outputs")
    expect_error(BI, ins, _bi_outputs(F32, True, 2, 2, 4, 4, True, False), "input 51 ", "merge_outputs")
    bad = dict(bw, x_f=RNG.uniform(-1, 1, (4, 2)))
    expect_error(BI, bi_inputs(fw, bad, xs, st, const=True), outs, "input 19 ", "backward input-to-forget")
    expect_error(BI, bi_inputs(fw, bw, xs, [st[0], st[1], st[2][:, :2], st[3]], const=True), outs, "input 37 ",
                 "backward output state")


def test_bidirectional_auxiliary_rules():
    fw, bw, xs, st, aux = _bi_case(aux=True)
    outs = _bi_outputs(F32, True, 2, 2, 4, 4, False, False)
    expect_error(BI, bi_inputs(fw, bw, xs, st, const=True), outs, "input 39 ", "without the auxiliary input")
    bw_plain = {k: v for k, v in bw.items() if not k.startswith("aux")}
    expect_error(BI, bi_inputs(fw, bw_plain, xs, st, aux=aux, const=True), outs, "input 45 ", "forward and backward")
    expect_error(BI, bi_inputs(fw, bw, xs, st, aux=aux[:, :1], const=True), outs, "input 39 ", "auxiliary input")
    partial = {k: v for k, v in fw.items() if k != "aux_c"}
    expect_error(BI, bi_inputs(partial, bw, xs, st, aux=aux, const=True), outs, "input 42 ", "auxiliary")
    fw_c, bw_c, xs, st, aux = _bi_case(aux=True, cifg=True)
    fw_c["aux_i"] = RNG.uniform(-1, 1, (4, 3))
    expect_error(BI, bi_inputs(fw_c, bw_c, xs, st, aux=aux, const=True), outs, "input 40 ", "CIFG")


@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("merge", [False, True])
def test_bidirectional_shape_inference(time_major, merge):
    fw, bw, xs, st, _ = _bi_case()
    x = _layout(xs, time_major)
    n_out = 1 if merge else 2
    unknown = [T(F32, (0, 0, 0))] * n_out + [T(F32, (0, 0))] * 4
    types = inferred_output_types(BI, bi_inputs(fw, bw, x, st, time_major=time_major, merge=merge), unknown)
    seq = x.shape[:2]
    expected = [seq + (8,)] if merge else [seq + (4,), seq + (4,)]
    assert [t.dimensions for t in types] == expected + [(2, 4)] * 4


def test_bidirectional_types():
    fw, bw, xs, st, _ = _bi_case()
    ins = bi_inputs(fw, bw, xs, st, const=True)
    ins[52] = (INT32, 1)
    expect_error(BI, ins, _bi_outputs(F32, True, 2, 2, 4, 4, False, False), "input 52 ", "INT32")
    ins = bi_inputs(fw, bw, xs, st, F16)
    expect_error(BI, ins, _bi_outputs(F32, True, 2, 2, 4, 4, False, False), "output 0 ", "TENSOR_FLOAT32")


def test_bidirectional_auxiliary_input_omitted_at_run_time():
    # The auxiliary input is a model input the request omits: cross-linking weights without it fail at run time.
    fw, bw, xs, st, aux = _bi_case(aux=True)
    ins = bi_inputs(fw, bw, xs, st, aux=aux, const=True)
    ins[39] = (ins[39][0], Input(None))
    expect_error(BI, ins, _bi_outputs(F32, True, 2, 2, 4, 4, False, False), "input 39 ", "without the auxiliary",
                 result=ResultCode.OP_FAILED)
