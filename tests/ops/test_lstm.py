"""LSTM against independent expectations.

onnx.reference's LSTM (one step, tanh, optional peepholes) for the plain cell; otherwise the numpy
transcription of NeuralNetworks.h's equations in lstm_reference.py (CIFG, projection with and without
bias, cell and projection clipping, every documented activation, layer normalization); AOSP's
V1_0/lstm.mod.py vector. Then NNAPI's validation (counts, types, required and optional inputs, shapes,
scalar values), at build time for constants and at run time for model inputs, and build-time shape
inference of the four outputs.
"""
from __future__ import annotations

import numpy as np
import pytest

from lstm_reference import (CELL_KEYS, F16, F32, LN_KEYS, SCALAR_OF, T, make_weights, onnx_lstm_inputs,
                            reference_step, scalar_operands, tensor_operands)
from mlts.runtime import OperandCode, OperandType, OperationCode, ResultCode
from support.onnx_reference import onnx_outputs
from support.op_runner import expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

OP = OperationCode.LSTM
RNG = np.random.default_rng(2024)


def lstm_inputs(w, x, h, c, code=F32, *, activation=4, cell_clip=0.0, proj_clip=0.0, layer_norm=False,
                const=False):
    dtype = np.float16 if code == F16 else np.float32
    x, h, c = (np.asarray(a, dtype) for a in (x, h, c))
    ins = [(T(code, x.shape), x), *tensor_operands(w, CELL_KEYS, code, const=const),
           (T(code, h.shape), h), (T(code, c.shape), c), *scalar_operands(code, activation, cell_clip, proj_clip)]
    if layer_norm:
        ins += tensor_operands(w, LN_KEYS, code, const=const)
    return ins


def lstm_outputs(code, batch, n_cell, n_output, cifg=False):
    return [T(code, (batch, n_cell * (3 if cifg else 4))), T(code, (batch, n_output)), T(code, (batch, n_cell)),
            T(code, (batch, n_output))]


def random_state(batch, n_input, n_cell, n_output):
    return (RNG.uniform(-1, 1, (batch, n_input)), RNG.uniform(-0.5, 0.5, (batch, n_output)),
            RNG.uniform(-0.5, 0.5, (batch, n_cell)))


# -- results ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("peephole", [False, True], ids=["plain", "peephole"])
def test_matches_onnx_lstm(code, peephole):
    batch, n_input, n_cell = 3, 5, 4
    w = make_weights(RNG, n_input, n_cell, peephole=peephole)
    x, h, c = random_state(batch, n_input, n_cell, n_cell)
    if code == F16:
        w = {k: v.astype(np.float16).astype(np.float64) for k, v in w.items()}
        x, h, c = (a.astype(np.float16) for a in (x, h, c))
    scratch, h_out, c_out, out = run_op(OP, lstm_inputs(w, x, h, c, code), lstm_outputs(code, batch, n_cell, n_cell))
    W, R, B, P = (a.astype(np.float32) for a in onnx_lstm_inputs(w))
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    _, y_h, y_c = onnx_outputs("LSTM", f32(x)[None], W, R, B, None, f32(h)[None], f32(c)[None], P, n_outputs=3,
                               hidden_size=n_cell)
    assert scratch.shape == (batch, 4 * n_cell) and out.dtype == (np.float16 if code == F16 else np.float32)
    assert_cts_close(h_out, y_h[0], code)
    assert_cts_close(c_out, y_c[0], code)
    assert_cts_close(out, y_h[0], code)


VARIANTS = {  # name: (make_weights options, activation, cell clip, projection clip)
    "cifg": (dict(cifg=True), 4, 0.0, 0.0),
    "cifg_peephole": (dict(cifg=True, peephole=True), 4, 0.0, 0.0),
    "projection": (dict(projection=True), 4, 0.0, 0.0),
    "projection_bias_clipped": (dict(peephole=True, projection=True, projection_bias=True), 4, 0.3, 0.05),
    "cell_clip": (dict(), 4, 0.2, 0.0),
    "proj_clip_without_projection_ignored": (dict(), 4, 0.0, 0.01),
    "relu": (dict(peephole=True), 1, 0.0, 0.0),
    "relu6": (dict(), 3, 0.0, 0.0),
    "sigmoid": (dict(cifg=True), 6, 0.0, 0.0),
    "none": (dict(projection=True), 0, 0.0, 0.0),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variants_against_formula(name):
    options, activation, cell_clip, proj_clip = VARIANTS[name]
    batch, n_input, n_cell = 2, 3, 5
    n_output = 3 if options.get("projection") else n_cell
    w = make_weights(RNG, n_input, n_cell, n_output, **options)
    x, h, c = random_state(batch, n_input, n_cell, n_output)
    x = x * 3  # large enough for the clips and Relu6 to matter
    outs = run_op(OP, lstm_inputs(w, x, h, c, activation=activation, cell_clip=cell_clip, proj_clip=proj_clip),
                  lstm_outputs(F32, batch, n_cell, n_output, options.get("cifg", False)))
    h_ref, c_ref = reference_step(w, x.astype(np.float32), h.astype(np.float32), c.astype(np.float32),
                                  activation=activation, cell_clip=cell_clip, proj_clip=proj_clip)
    assert_cts_close(outs[1], h_ref, F32)
    assert_cts_close(outs[2], c_ref, F32)
    assert_cts_close(outs[3], h_ref, F32)
    if cell_clip:
        assert np.abs(outs[2]).max() <= np.float32(cell_clip)
    if proj_clip and options.get("projection"):
        assert np.abs(outs[1]).max() <= np.float32(proj_clip)


@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("cifg", [False, True], ids=["full", "cifg"])
def test_layer_normalization(code, cifg):
    batch, n_input, n_cell, n_output = 2, 5, 4, 3
    w = make_weights(RNG, n_input, n_cell, n_output, cifg=cifg, peephole=True, projection=True, layer_norm=True)
    x, h, c = random_state(batch, n_input, n_cell, n_output)
    dtype = np.float16 if code == F16 else np.float32
    w = {k: v.astype(dtype).astype(np.float64) for k, v in w.items()}
    x, h, c = (a.astype(dtype) for a in (x, h, c))
    outs = run_op(OP, lstm_inputs(w, x, h, c, code, layer_norm=True), lstm_outputs(code, batch, n_cell, n_output, cifg))
    h_ref, c_ref = reference_step(w, x, h, c)
    assert_cts_close(outs[1], h_ref, code)
    assert_cts_close(outs[2], c_ref, code)


def test_27_inputs_without_layer_norm_weights_equal_23():
    batch, n_input, n_cell = 2, 3, 4
    w = make_weights(RNG, n_input, n_cell, peephole=True)
    x, h, c = random_state(batch, n_input, n_cell, n_cell)
    outs23 = run_op(OP, lstm_inputs(w, x, h, c), lstm_outputs(F32, batch, n_cell, n_cell))
    outs27 = run_op(OP, lstm_inputs(w, x, h, c, layer_norm=True), lstm_outputs(F32, batch, n_cell, n_cell))
    for a, b in zip(outs23[1:], outs27[1:]):
        np.testing.assert_array_equal(a, b)


def test_relaxed_float32():
    batch, n_input, n_cell = 2, 4, 3
    w = make_weights(RNG, n_input, n_cell, peephole=True)
    x, h, c = random_state(batch, n_input, n_cell, n_cell)
    outs = run_op(OP, lstm_inputs(w, x, h, c), lstm_outputs(F32, batch, n_cell, n_cell), relaxed=True)
    h_ref, c_ref = reference_step(w, x, h, c)
    assert_cts_close(outs[1], h_ref, F32, relaxed=True)
    assert_cts_close(outs[2], c_ref, F32, relaxed=True)


def test_aosp_vector_lstm_v1_0():
    # AOSP runtime/test/specs/V1_0/lstm.mod.py: no CIFG, no peephole, no projection, no clipping.
    def m(values):
        return np.array(values).reshape(4, -1)
    w = {"x_i": m([-0.45018822, -0.02338299, -0.0870589, -0.34550029, 0.04266912, -0.15680569, -0.34856534,
                   0.43890524]),
         "x_f": m([0.09701663, 0.20334584, -0.50592935, -0.31343272, -0.40032279, 0.44781327, 0.01387155, -0.35593212]),
         "x_c": m([-0.50013041, 0.1370284, 0.11810488, 0.2013163, -0.20583314, 0.44344562, 0.22077113, -0.29909778]),
         "x_o": m([-0.25065863, -0.28290087, 0.04613829, 0.40525138, 0.44272184, 0.03897077, -0.1556896, 0.19487578]),
         "h_i": m([-0.0063535, -0.2042388, 0.31454784, -0.35746509, 0.28902304, 0.08183324, -0.16555229, 0.02286911,
                   -0.13566875, 0.03034258, 0.48091322, -0.12528998, 0.24077177, -0.51332325, -0.33502164, 0.10629296]),
         "h_f": m([-0.48684245, -0.06655136, 0.42224967, 0.2112639, 0.27654213, 0.20864892, -0.07646349, 0.45877004,
                   0.00141793, -0.14609534, 0.36447752, 0.09196436, 0.28053468, 0.01560611, -0.20127171, -0.01140004]),
         "h_c": m([-0.3407414, 0.24443203, -0.2078532, 0.26320225, 0.05695659, -0.00123841, -0.4744786, -0.35869038,
                   -0.06418842, -0.13502428, -0.501764, 0.22830659, -0.46367589, 0.26016325, -0.03894562, -0.16368064]),
         "h_o": m([0.43385774, -0.17194885, 0.2718237, 0.09215671, 0.24107647, -0.39835793, 0.18212086, 0.01301402,
                   0.48572797, -0.50656658, 0.20047462, -0.20607421, -0.51818722, -0.15390486, 0.0468148, 0.39922136]),
         "b_i": np.zeros(4), "b_f": np.ones(4), "b_c": np.zeros(4), "b_o": np.zeros(4)}
    outs = run_op(OP, lstm_inputs(w, [[2.0, 3.0]], np.zeros((1, 4)), np.zeros((1, 4))), lstm_outputs(F32, 1, 4, 4))
    assert_cts_close(outs[3], [[-0.02973187, 0.1229473, 0.20885126, -0.15358765]], F32)
    assert_cts_close(outs[1], outs[3], F32)


# -- validation ------------------------------------------------------------------------------------------
def _case(n_output=4, **options):
    """A valid case (weights, x, h, c, outputs); constant weights (Const) make it checkable at build time."""
    batch, n_input, n_cell = 2, 3, 4
    w = make_weights(RNG, n_input, n_cell, n_output, **options)
    x, h, c = random_state(batch, n_input, n_cell, n_output)
    return w, x, h, c, lstm_outputs(F32, batch, n_cell, n_output, options.get("cifg", False))


def test_input_and_output_counts():
    w, x, h, c, outs = _case()
    ins = lstm_inputs(w, x, h, c, const=True)
    expect_error(OP, ins[:22], outs, "expected 23 or 27 inputs")
    expect_error(OP, ins + ins[:2], outs, "expected 23 or 27 inputs")
    expect_error(OP, ins, outs[:3], "expected 4 outputs")


def test_types():
    w, x, h, c, outs = _case()
    ins = lstm_inputs(w, x, h, c, const=True)
    bad_input = list(ins)
    bad_input[0] = (T(OperandCode.TENSOR_INT32, (2, 3)), np.zeros((2, 3), np.int32))
    expect_error(OP, bad_input, outs, "input 0", "TENSOR_INT32")
    mixed = list(ins)
    mixed[3] = (T(F16, (4, 3)), w["x_c"].astype(np.float16))
    expect_error(OP, mixed, outs, "input 3", "TENSOR_FLOAT16")
    clip16 = list(ins)
    clip16[21] = (OperandType.scalar(SCALAR_OF[F16]), 0.0)
    expect_error(OP, clip16, outs, "input 21", "FLOAT16")
    expect_error(OP, ins, [*outs[:2], T(F16, (2, 4)), outs[3]], "output 2", "TENSOR_FLOAT16")


@pytest.mark.parametrize("remove,add,index,words", [
    (["x_f"], [], 2, "required input is omitted"),
    (["h_i"], [], 5, "CIFG"),
    (["x_i"], [], 1, "CIFG"),
    (["x_i", "h_i"], [], 12, "must be omitted with CIFG"),
    (["b_i"], [], 12, "required without CIFG"),
    (["b_o"], [], 15, "required input is omitted"),
    ([], ["c_f", "c_o"], 9, "peephole"),
    ([], ["c_f"], 11, "peephole"),
    ([], ["proj_b"], 17, "without projection weights"),
])
def test_optional_input_rules(remove, add, index, words):
    w, x, h, c, outs = _case()
    for k in remove:
        del w[k]
    for k in add:
        w[k] = RNG.uniform(-1, 1, 4)
    expect_error(OP, lstm_inputs(w, x, h, c, const=True), outs, f"input {index} ", words)


def test_peephole_input_weights_alone():
    w, x, h, c, outs = _case()
    w["c_i"] = RNG.uniform(-1, 1, 4)
    expect_error(OP, lstm_inputs(w, x, h, c, const=True), outs, "input 10 ", "peephole")


@pytest.mark.parametrize("cifg,drop,index", [(False, "ln_c", 25), (True, "ln_o", 26)])
def test_layer_norm_all_or_none(cifg, drop, index):
    w, x, h, c, outs = _case(cifg=cifg, layer_norm=True)
    del w[drop]
    expect_error(OP, lstm_inputs(w, x, h, c, layer_norm=True, const=True), outs, f"input {index} ",
                 "layer normalization weights")


def test_input_layer_norm_weights_refused_with_cifg():
    w, x, h, c, outs = _case(cifg=True, layer_norm=True)
    w["ln_i"] = RNG.uniform(0.2, 1, 4)
    expect_error(OP, lstm_inputs(w, x, h, c, layer_norm=True, const=True), outs, "input 23 ", "CIFG")


@pytest.mark.parametrize("key,index,shape", [("x_f", 2, (5, 3)), ("h_c", 7, (4, 3)), ("b_f", 13, (5,)),
                                             ("x_o", 4, (4, 2)), ("proj", 16, (4, 5))])
def test_shape_mismatch(key, index, shape):
    w, x, h, c, outs = _case(projection=True)
    w[key] = RNG.uniform(-1, 1, shape)
    expect_error(OP, lstm_inputs(w, x, h, c, const=True), outs, f"input {index} ")


def test_state_shape_mismatch():
    w, x, h, c, outs = _case()
    expect_error(OP, lstm_inputs(w, x, h[:, :3], c), outs, "input 18 ", "output state")
    expect_error(OP, lstm_inputs(w, x, h, c[:1]), outs, "input 19 ", "cell state")
    expect_error(OP, lstm_inputs(w, x[0], h, c), outs, "input 0 ", "rank 2")


@pytest.mark.parametrize("index,value,words", [(20, 2, "activation 2"), (20, 5, "activation 5"),
                                               (21, -1.0, "cell clipping"), (22, -0.5, "projection clipping")])
def test_scalar_values(index, value, words):
    w, x, h, c, outs = _case()
    ins = lstm_inputs(w, x, h, c, const=True)
    ins[index] = (ins[index][0], value)
    expect_error(OP, ins, outs, f"input {index} ", words)


def test_presence_rules_checked_at_run_time_for_model_inputs():
    # Model inputs may still be omitted when the model runs: the CIFG rule is then checked at execution.
    w, x, h, c, outs = _case()
    del w["h_i"]
    expect_error(OP, lstm_inputs(w, x, h, c), outs, "input 5 ", "CIFG", result=ResultCode.OP_FAILED)


# -- shape inference -------------------------------------------------------------------------------------
@pytest.mark.parametrize("cifg", [False, True], ids=["full", "cifg"])
def test_build_time_shape_inference(cifg):
    w, x, h, c, _ = _case(n_output=3, cifg=cifg, projection=True)
    unknown = [T(F32, (0, 0))] * 4
    types = inferred_output_types(OP, lstm_inputs(w, x, h, c, const=True), unknown)
    assert [t.dimensions for t in types] == [(2, 4 * (3 if cifg else 4)), (2, 3), (2, 4), (2, 3)]


def test_shape_inference_waits_for_run_time_presence():
    # The scratch size depends on CIFG, unknown while the input-to-input weights are a model input.
    w, x, h, c, outs = _case()
    types = inferred_output_types(OP, lstm_inputs(w, x, h, c), [T(F32, (0, 0))] * 4)
    assert all(t.dimensions == (0, 0) for t in types)
    results = run_op(OP, lstm_inputs(w, x, h, c), [T(F32, (0, 0))] * 4)
    assert [r.shape for r in results] == [(2, 16), (2, 4), (2, 4), (2, 4)]
