"""ONNX LSTM and RNN imported into NNAPI's sequence operations (float) and QUANTIZED_LSTM (int8 QDQ).

References: onnxruntime on the same graph (float32 within the CTS tolerance). onnxruntime refuses layout=1
("Batchwise recurrent operations are not supported"), so a layout-1 graph is compared with onnxruntime running
the same graph rewritten to layout 0 between Transposes (and once with onnx.reference on the graph itself).
The quantized LSTM is compared with onnxruntime's run of the same QDQ graph, which computes a float LSTM between
DequantizeLinear and QuantizeLinear: NNAPI's QUANTIZED_LSTM keeps the recurrent hidden state in int8, the cell
state in int16 (2**-11) and the gates in int16 (2**-12), so its outputs drift from that fake-quant reference by a
few steps over a sequence: measured at most 3 steps of h_scale (88% exact, 12% one step) over 40 steps of 64 units
and five seeds; the tests allow 3.
"""
from __future__ import annotations

import importlib
import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from onnx_import_helpers import assert_float_close, const, make_model, op_types, ort_run, tensor  # noqa: E402

from mlts.models import import_onnx  # noqa: E402
from mlts.runtime import MltsError, OperandCode, ResultCode  # noqa: E402

pytest.importorskip("onnxruntime")
# Registers the LSTM and RNN converters (a no-op once converters/__init__ imports the module).
importlib.import_module("mlts.models.onnx_import.converters.recurrent")

RNG = np.random.default_rng(18)
OUTPUTS = {"LSTM": ("Y", "Y_h", "Y_c"), "RNN": ("Y", "Y_h")}


def rnd(*shape, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def recurrent_model(op="LSTM", *, steps=4, batch=2, size=3, hidden=5, direction="forward", layout=0, bias=True,
                    initial=False, peepholes=False, outputs=None, opset=14, x_from_transpose=False, lens=None,
                    **attrs):
    """One LSTM/RNN node on graph input X with random constant weights; (model, feeds)."""
    gates = 4 if op == "LSTM" else 1
    d = 2 if direction == "bidirectional" else 1
    x_shape = [steps, batch, size] if layout == 0 else [batch, steps, size]
    state_shape = [d, batch, hidden] if layout == 0 else [batch, d, hidden]
    inits = [const("W", rnd(d, gates * hidden, size)), const("R", rnd(d, gates * hidden, hidden))]
    inputs, feeds, nodes = [tensor("X", x_shape)], {"X": rnd(*x_shape, scale=1.0)}, []
    x = "X"
    if x_from_transpose:  # torch's batch_first export: the graph input is [B, T, I], transposed to layout 0
        inputs, feeds = [tensor("X", [batch, steps, size])], {"X": rnd(batch, steps, size, scale=1.0)}
        nodes.append(helper.make_node("Transpose", ["X"], ["X_t"], perm=[1, 0, 2]))
        x = "X_t"
    node_inputs = [x, "W", "R", "B" if bias else "", "" if lens is None else "lens"]
    if bias:
        inits.append(const("B", rnd(d, 2 * gates * hidden, scale=0.3)))
    if lens is not None:
        inits.append(const("lens", np.asarray(lens, np.int32)))
    for name in (("h0", "c0") if op == "LSTM" else ("h0",)):
        node_inputs.append(name if initial else "")
        if initial:
            inputs.append(tensor(name, state_shape))
            feeds[name] = rnd(*state_shape)
    if peepholes:
        node_inputs.append("P")
        inits.append(const("P", rnd(d, 3 * hidden)))
    while node_inputs[-1] == "":
        node_inputs.pop()
    outputs = outputs or OUTPUTS[op]
    if opset >= 14:
        attrs["layout"] = layout
    nodes.append(helper.make_node(op, node_inputs, [o if o in outputs else "" for o in OUTPUTS[op]], name="rec",
                                  hidden_size=hidden, direction=direction, **attrs))
    return make_model(nodes, inputs, [tensor(o, None) for o in outputs], inits, opset=opset), feeds


def as_layout0(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same function with the recurrent node at layout 0 between Transposes (what onnxruntime runs)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = []
    for n in m.graph.node:
        layout = next((a for a in n.attribute if a.name == "layout"), None)
        if n.op_type not in ("LSTM", "RNN") or layout is None or layout.i == 0:
            nodes.append(n)
            continue
        layout.i = 0
        for k in (0, 5, 6):
            if k < len(n.input) and n.input[k]:
                nodes.append(helper.make_node("Transpose", [n.input[k]], [n.input[k] + "_l0"], perm=[1, 0, 2]))
                n.input[k] += "_l0"
        nodes.append(n)
        for k, perm in ((0, [2, 0, 1, 3]), (1, [1, 0, 2]), (2, [1, 0, 2])):
            if k < len(n.output) and n.output[k]:
                nodes.append(helper.make_node("Transpose", [n.output[k] + "_l0"], [n.output[k]], perm=perm))
                n.output[k] += "_l0"
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m


def run_both(model, feeds):
    imported = import_onnx(model.SerializeToString())
    got = imported.run(feeds, devices=["nnapi-reference"])
    return imported, got, ort_run(as_layout0(model), feeds)


def check_float(model, feeds):
    imported, got, ref = run_both(model, feeds)
    assert set(got) == set(ref)
    for name in got:
        assert_float_close(got[name], ref[name])
    return imported


def expect_error(model, *words):
    with pytest.raises(MltsError) as info:
        import_onnx(model.SerializeToString())
    assert info.value.code == ResultCode.BAD_DATA
    for w in ("rec",) + words:
        assert w in info.value.message, info.value.message
    return info.value.message


# -- float LSTM ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_directions_and_layouts(direction, layout):
    model, feeds = recurrent_model(direction=direction, layout=layout, initial=True, peepholes=direction != "reverse")
    ops = op_types(check_float(model, feeds))
    bi = direction == "bidirectional"
    assert ops.count("BIDIRECTIONAL_SEQUENCE_LSTM" if bi else "UNIDIRECTIONAL_SEQUENCE_LSTM") == 1
    assert ops.count("REVERSE") == (2 if direction == "reverse" else 0)


@pytest.mark.parametrize("options", [dict(bias=False), dict(initial=True), dict(peepholes=True),
                                     dict(outputs=("Y",)), dict(outputs=("Y_h",)), dict(outputs=("Y_c",)),
                                     dict(opset=7, direction="bidirectional", outputs=("Y_h", "Y_c")),
                                     dict(steps=1, batch=1, layout=1)],
                         ids=["no_bias", "initial_states", "peepholes", "Y", "Y_h", "Y_c", "opset7", "one_step"])
def test_lstm_optional_inputs_and_outputs(options):
    model, feeds = recurrent_model(**options)
    imported = check_float(model, feeds)
    if options.get("outputs") in (("Y_h",), ("Y_c",)):  # only the state outputs: no RESHAPE of Y
        assert op_types(imported) == ["UNIDIRECTIONAL_SEQUENCE_LSTM", "RESHAPE"]


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_input_forget_is_cifg(direction):
    """input_forget=1 (onnxruntime: f = 1 - i) runs as NNAPI's CIFG with the input gate's tensors negated."""
    model, feeds = recurrent_model(direction=direction, peepholes=True, initial=True, input_forget=1)
    check_float(model, feeds)


@pytest.mark.parametrize("act", ["Relu", "Sigmoid"])
def test_lstm_cell_activation(act):
    model, feeds = recurrent_model(direction="bidirectional", activations=["Sigmoid", act, act] * 2)
    check_float(model, feeds)


def test_lstm_batch_first_input_needs_no_transpose():
    """X = Transpose(input, [1, 0, 2]) (torch's batch_first export): the LSTM reads the batch-major input."""
    model, feeds = recurrent_model(x_from_transpose=True, outputs=("Y_h",))
    assert op_types(check_float(model, feeds)) == ["UNIDIRECTIONAL_SEQUENCE_LSTM", "RESHAPE"]


def test_lstm_layout1_against_onnx_reference():
    from onnx.reference import ReferenceEvaluator

    model, feeds = recurrent_model(direction="bidirectional", layout=1, initial=True, peepholes=True)
    got = import_onnx(model.SerializeToString()).run(feeds, devices=["nnapi-reference"])
    for name, ref in zip(OUTPUTS["LSTM"], ReferenceEvaluator(model).run(None, feeds)):
        assert_float_close(got[name], ref)


def test_lstm_float16_against_onnx_reference():
    from onnx.reference import ReferenceEvaluator

    model, feeds = recurrent_model(direction="bidirectional", initial=True, peepholes=True)
    for init in model.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
    for vi in list(model.graph.input) + list(model.graph.output):
        vi.type.tensor_type.elem_type = TensorProto.FLOAT16
    feeds = {k: v.astype(np.float16) for k, v in feeds.items()}
    got = import_onnx(model.SerializeToString()).run(feeds, devices=["nnapi-reference"])
    for name, ref in zip(OUTPUTS["LSTM"], ReferenceEvaluator(model).run(None, feeds)):
        assert got[name].dtype == np.float16
        assert np.abs(got[name].astype(np.float32) - ref.astype(np.float32)).max() <= 5 * 2.0 ** -10


@pytest.mark.parametrize("op", ["LSTM", "RNN"])
def test_dynamic_batch_with_computed_initial_states(op):
    """A symbolic batch dimension: the states come from graph inputs (SPLIT per direction), Y is reshaped with
    one unknown dimension."""
    model, feeds = recurrent_model(op, direction="bidirectional", initial=True, layout=1)
    for vi in model.graph.input:
        vi.type.tensor_type.shape.dim[0].dim_param = "batch"
    check_float(model, feeds)


def test_lstm_constant_sequence_lens():
    model, feeds = recurrent_model(steps=3, batch=2, lens=[3, 3])
    check_float(model, feeds)


# -- float RNN ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("act", ["Tanh", "Relu"])
def test_rnn(act, direction, layout):
    d = 2 if direction == "bidirectional" else 1
    model, feeds = recurrent_model("RNN", direction=direction, layout=layout, initial=direction != "forward",
                                   activations=[act] * d)
    ops = op_types(check_float(model, feeds))
    if act == "Relu":
        assert ops.count("BIDIRECTIONAL_SEQUENCE_RNN" if d == 2 else "UNIDIRECTIONAL_SEQUENCE_RNN") == 1
    else:  # unrolled: NNAPI's RNN activations are the ReLU family only
        assert ops.count("TANH") == 4 * d and "UNIDIRECTIONAL_SEQUENCE_RNN" not in ops


@pytest.mark.parametrize("options", [dict(outputs=("Y",)), dict(outputs=("Y_h",), bias=False),
                                     dict(activations=["Sigmoid"]),
                                     dict(direction="bidirectional", activations=["Relu", "Tanh"], initial=True),
                                     dict(steps=1, direction="bidirectional", opset=7)],
                         ids=["Y", "Y_h_no_bias", "sigmoid", "mixed_activations", "one_step_opset7"])
def test_rnn_variants(options):
    model, feeds = recurrent_model("RNN", **options)
    check_float(model, feeds)


# -- models exported by torch ------------------------------------------------------------------------------
def _torch_export(module, x):
    import io

    import torch

    f = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(module, (torch.from_numpy(x),), f, dynamo=False, opset_version=14,
                          input_names=["x"])
    return onnx.load_from_string(f.getvalue())


@pytest.mark.slow  # importing torch takes seconds (when no other test of the run has)
@pytest.mark.parametrize("kind", ["LSTM", "RNN"])
def test_torch_exported(kind):
    """torch.onnx.export of nn.LSTM(batch_first, bidirectional) and nn.RNN (tanh): Transposes around the node,
    initial states written as Expand of zeros, Y reshaped to [B, T, 2H]."""
    torch = pytest.importorskip("torch")
    import warnings

    torch.manual_seed(0)
    cls = torch.nn.LSTM if kind == "LSTM" else torch.nn.RNN

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = cls(6, 8, batch_first=True, bidirectional=True)

        def forward(self, x):
            y, state = self.rnn(x)
            h = state[0] if kind == "LSTM" else state
            return y, h

    net = Net().eval()
    x = np.random.default_rng(5).standard_normal((2, 7, 6)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _torch_export(net, x)
    assert kind in [n.op_type for n in model.graph.node]
    imported = import_onnx(model.SerializeToString())
    got = imported.run({"x": x}, devices=["nnapi-reference"])
    ref = ort_run(model, {"x": x})
    with torch.no_grad():
        torch_out = [t.numpy() for t in net(torch.from_numpy(x))]
    for name, expected in zip(imported.output_names, torch_out):
        assert_float_close(got[name], ref[name])
        assert np.abs(got[name] - expected).max() <= 1e-5


def test_zoo_speech_lstm_graph():
    """The zoo's LSTM classifier (Transpose + layout 0, and the batch-first layout 1) with random weights."""
    from mlts.models import speech_lstm

    rng = np.random.default_rng(2)
    weights = {k: (rng.standard_normal(s) * 0.2).astype(np.float32) for k, s in speech_lstm.weight_shapes().items()}
    x = {"features": rng.standard_normal((1, speech_lstm.FRAMES, speech_lstm.INPUT_SIZE)).astype(np.float32)}
    for layout in (0, 1):
        model = speech_lstm.build_onnx(weights, layout=layout)
        imported = check_float(model, x)
        assert op_types(imported)[0] == "UNIDIRECTIONAL_SEQUENCE_LSTM"  # no TRANSPOSE of the input


# -- refusals --------------------------------------------------------------------------------------------
def test_refusals():
    cases = [
        (recurrent_model(clip=3.0)[0], "clip"),
        (recurrent_model(activations=["HardSigmoid", "Tanh", "Tanh"])[0], "activations"),
        (recurrent_model(activations=["Sigmoid", "Tanh", "Relu"])[0], "activations"),
        (recurrent_model(direction="bidirectional", activations=["Sigmoid", "Tanh", "Tanh", "Sigmoid", "Relu",
                                                                 "Relu"])[0], "different activations"),
        (recurrent_model("RNN", activations=["Elu"])[0], "activation"),
        (recurrent_model("RNN", clip=1.0)[0], "clip"),
    ]
    for model, word in cases:
        expect_error(model, word)
    dynamic, _ = recurrent_model()
    dynamic.graph.input.append(tensor("W", [1, 20, 3]))
    del dynamic.graph.initializer[0]
    expect_error(dynamic, "W", "constant")
    expect_error(recurrent_model(steps=3, batch=2, lens=[3, 2])[0], "sequence_lens")


def test_gru_is_refused_clearly():
    model, _ = recurrent_model("RNN")
    model.graph.node[0].op_type = "GRU"
    model.graph.initializer[0].CopyFrom(const("W", rnd(1, 15, 3)))
    model.graph.initializer[1].CopyFrom(const("R", rnd(1, 15, 5)))
    model.graph.initializer[2].CopyFrom(const("B", rnd(1, 30)))
    expect_error(model, "unsupported operation GRU")


# -- quantized LSTM ------------------------------------------------------------------------------------------
def _quantize_weights(w, per_gate, hidden, zero_point=0):
    if per_gate:
        scale = np.repeat(np.abs(w[0]).reshape(4, hidden, -1).max(axis=(1, 2)) / 127, hidden).astype(np.float32)
        q = np.clip(np.rint(w / scale[None, :, None]), -127, 127).astype(np.int8)
        return q, scale, np.full(4 * hidden, zero_point, np.int8)
    scale = np.float32(np.abs(w).max() / 127)
    return np.clip(np.rint(w / scale), -127, 127).astype(np.int8), scale, np.int8(zero_point)


def qdq_lstm(*, steps=8, batch=2, size=4, hidden=8, layout=0, per_gate=True, outputs=("Y", "Y_h"), x_q=(0.02, 3),
             h_q=(1 / 128, 0), y_q=None, float_input=False, w_zero_point=0, initial=False, seed=0):
    """The project quantizer's QDQ form of a forward LSTM; (model, feeds)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((1, 4 * hidden, size)) * 0.5).astype(np.float32)
    r = (rng.standard_normal((1, 4 * hidden, hidden)) * 0.3).astype(np.float32)
    b = (rng.standard_normal((1, 8 * hidden)) * 0.2).astype(np.float32)
    w_int, w_s, w_z = _quantize_weights(w, per_gate, hidden, w_zero_point)
    r_int, r_s, r_z = _quantize_weights(r, per_gate, hidden)
    x_shape = [steps, batch, size] if layout == 0 else [batch, steps, size]
    x = rng.uniform(-1, 1, x_shape).astype(np.float32)
    nodes = []
    if float_input:
        nodes.append(helper.make_node("QuantizeLinear", ["X", "xs", "xz"], ["xq"]))
        inputs, feeds = [tensor("X", x_shape)], {"X": x}
    else:
        inputs = [tensor("xq", x_shape, TensorProto.INT8)]
        feeds = {"xq": np.clip(np.rint(x / x_q[0]) + x_q[1], -128, 127).astype(np.int8)}
    nodes += [helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
              helper.make_node("DequantizeLinear", ["Wq", "ws", "wz"], ["Wf"], axis=1),
              helper.make_node("DequantizeLinear", ["Rq", "rs", "rz"], ["Rf"], axis=1),
              helper.make_node("LSTM", ["xf", "Wf", "Rf", "B"] + (["", "h0", "c0"] if initial else []),
                               [o if o in outputs else "" for o in OUTPUTS["LSTM"]],
                               name="rec", hidden_size=hidden, layout=layout)]
    # Y and Y_h: the hidden state's parameters (Y: `y_q` when given); Y_c (when asked for): int8 at 1/16
    params = {"Y": ["ys", "yz"] if y_q else ["hs", "hz"], "Y_h": ["hs", "hz"], "Y_c": ["cs", "cz"]}
    nodes += [helper.make_node("QuantizeLinear", [o] + params[o], [o + "_q"]) for o in outputs]
    inits = [const("xs", np.float32(x_q[0])), const("xz", np.int8(x_q[1])), const("Wq", w_int), const("ws", w_s),
             const("wz", w_z), const("Rq", r_int), const("rs", r_s), const("rz", r_z), const("B", b),
             const("hs", np.float32(h_q[0])), const("hz", np.int8(h_q[1])), const("cs", np.float32(1 / 16)),
             const("cz", np.int8(0))] + ([const("ys", np.float32(y_q[0])), const("yz", np.int8(y_q[1]))] if y_q else [])
    if initial:  # constant initial states (float initializers, as the quantizer leaves them)
        state = [1, batch, hidden] if layout == 0 else [batch, 1, hidden]
        inits += [const("h0", rng.uniform(-0.5, 0.5, state).astype(np.float32)),
                  const("c0", rng.uniform(-1, 1, state).astype(np.float32))]
    outs = [tensor(o + "_q", None, TensorProto.INT8) for o in outputs]
    return make_model(nodes, inputs, outs, inits, opset=14), feeds


@pytest.mark.parametrize("variant", [dict(), dict(layout=1), dict(per_gate=False, h_q=(0.01, -5)),
                                     dict(outputs=("Y_h",), layout=1, x_q=(0.015, -20)),
                                     dict(outputs=("Y",), float_input=True, steps=5),
                                     dict(steps=1, batch=1), dict(y_q=(0.01, 4)), dict(initial=True, layout=1)],
                         ids=["per_gate", "layout1", "per_tensor_zero_point", "Y_h_only", "float_input", "one_step",
                              "Y_requantized", "initial_states"])
def test_qdq_lstm_runs_as_quantized_lstm(variant):
    model, feeds = qdq_lstm(**variant)
    imported, got, ref = run_both(model, feeds)
    ops = op_types(imported)
    steps = variant.get("steps", 8)
    assert ops.count("QUANTIZED_LSTM") == steps
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" not in ops
    # Only a Y with other parameters than Y_h goes through float (DEQUANTIZE + QUANTIZE into Y's parameters).
    assert ops.count("DEQUANTIZE") == (1 if variant.get("y_q") else 0)
    hal = imported.model.hal_model().main
    q = [op for op in hal.operations if op.type.name == "QUANTIZED_LSTM"][0]
    assert hal.operands[q.inputs[0]].type.code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
    assert hal.operands[q.inputs[2]].type.code == OperandCode.TENSOR_QUANT8_SYMM
    for name in got:
        assert got[name].dtype == np.int8
        assert np.abs(got[name].astype(int) - ref[name].astype(int)).max() <= 3


def test_qdq_lstm_long_sequence_within_three_steps():
    """The measurement behind the tolerance, reduced: 24 steps of 32 units."""
    model, feeds = qdq_lstm(steps=24, batch=1, size=16, hidden=32, x_q=(0.02, 0), seed=3)
    _, got, ref = run_both(model, feeds)
    diff = np.abs(got["Y_q"].astype(int) - ref["Y_q"].astype(int))
    assert diff.max() <= 3 and np.mean(diff == 0) > 0.75


@pytest.mark.parametrize("case", ["reverse", "Y_c"])
def test_qdq_lstm_outside_the_form_runs_in_float(case):
    """Reverse, or a used Y_c (NNAPI cannot reshape or convert QUANTIZED_LSTM's int16 cell state into ONNX's
    Y_c), keep the LSTM in float between DEQUANTIZE and QUANTIZE."""
    model, feeds = qdq_lstm(steps=4, outputs=("Y", "Y_c") if case == "Y_c" else ("Y", "Y_h"))
    if case == "reverse":
        next(n for n in model.graph.node if n.op_type == "LSTM").attribute.append(
            helper.make_attribute("direction", "reverse"))
    imported, got, ref = run_both(model, feeds)
    assert "QUANTIZED_LSTM" not in op_types(imported) and "UNIDIRECTIONAL_SEQUENCE_LSTM" in op_types(imported)
    for name in got:
        assert np.abs(got[name].astype(int) - ref[name].astype(int)).max() <= 1


def test_qdq_lstm_refusals():
    model, _ = qdq_lstm(w_zero_point=1)
    expect_error(model, "zero point")
    model, _ = qdq_lstm()
    scales = next(i for i in model.graph.initializer if i.name == "ws")
    values = numpy_helper.to_array(scales).copy()
    values[0] *= 1.5  # one row of the input gate with its own scale
    scales.CopyFrom(numpy_helper.from_array(values, "ws"))
    expect_error(model, "different scales within gate")
    model, _ = qdq_lstm(h_q=(1 / 128, -128))
    expect_error(model, "zero point -128")
    model, _ = qdq_lstm()
    next(n for n in model.graph.node if n.op_type == "LSTM").attribute.append(helper.make_attribute("clip", 2.0))
    expect_error(model, "clip")


# -- the quantizer's full form: unread outputs, the cell scale recorded on Y_c ---------------------------------
def with_unread_y_c(model, scale=None):
    """Name Y_c on the LSTM; with `scale`, an int16 QuantizeLinear nothing reads records the cell scale on it
    (what the project's quantizer writes; int16 QuantizeLinear needs opset 21)."""
    lstm = next(n for n in model.graph.node if n.op_type == "LSTM")
    lstm.output[:] = list(lstm.output) + [""] * (3 - len(lstm.output))
    lstm.output[2] = "Y_c"
    if scale is not None:
        model.graph.node.append(helper.make_node("QuantizeLinear", ["Y_c", "c16s", "c16z"], ["Y_c_q16"]))
        model.graph.initializer.extend([const("c16s", np.float32(scale)), const("c16z", np.int16(0))])
        model.opset_import[0].version = 21
    return model


def test_qdq_lstm_with_unread_named_outputs():
    model, _ = qdq_lstm(outputs=("Y_h",))
    model = with_unread_y_c(model)
    next(n for n in model.graph.node if n.op_type == "LSTM").output[0] = "Y_unread"
    assert "QUANTIZED_LSTM" in op_types(import_onnx(model.SerializeToString()))


def test_qdq_lstm_cell_scale_recorded_on_y_c():
    model, feeds = qdq_lstm(outputs=("Y_h",), steps=6)
    model = with_unread_y_c(model, scale=2.0 ** -13)
    imported, got, ref = run_both(model, feeds)
    hal = imported.model.hal_model().main
    cell = [op for op in hal.operations if op.type.name == "QUANTIZED_LSTM"][0].inputs[19]
    assert hal.operands[cell].type.scale == 2.0 ** -13
    assert np.abs(got["Y_h_q"].astype(int) - ref["Y_h_q"].astype(int)).max() <= 3


@pytest.mark.parametrize("scale", [0.001, 2.0 ** -8])
def test_qdq_lstm_cell_scale_must_be_a_cell_shift(scale):
    model, _ = qdq_lstm(outputs=("Y_h",))
    expect_error(with_unread_y_c(model, scale=scale), "power of two")
