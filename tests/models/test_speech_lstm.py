"""The sequence workload's LSTM: the ONNX graph computes what torch's nn.LSTM + Linear compute (so the gate
reordering from torch's i,f,g,o to ONNX's i,o,f,c is right), both LSTM layouts agree, and the shipped
float16 weights classify the held-out commands in the range the workload is meant to sit in."""
from __future__ import annotations

import numpy as np
import pytest

from mlts.datasets.commands import CLASSES, FRAMES, MEL_BINS, CommandsDataset
from mlts.models import speech_lstm
from mlts.runtime import MltsError, ResultCode

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

HELDOUT_CHECKED = 300
ACCURACY_RANGE = (0.90, 0.995)


def _session(model):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _torch_model(seed: int):
    torch.manual_seed(seed)
    lstm = torch.nn.LSTM(MEL_BINS, speech_lstm.HIDDEN, batch_first=True)
    fc = torch.nn.Linear(speech_lstm.HIDDEN, len(CLASSES))
    with torch.no_grad():  # wider than the default init, so saturation and every gate matter
        for p in list(lstm.parameters()) + list(fc.parameters()):
            p.mul_(3.0)
    return lstm, fc


def _weights_from_torch(lstm, fc) -> dict[str, np.ndarray]:
    def arr(t):
        return t.detach().numpy().astype(np.float32)
    g = speech_lstm.gates_torch_to_onnx
    return {"lstm.W": g(arr(lstm.weight_ih_l0))[None], "lstm.R": g(arr(lstm.weight_hh_l0))[None],
            "lstm.B": np.concatenate([g(arr(lstm.bias_ih_l0)), g(arr(lstm.bias_hh_l0))])[None],
            "classifier.weight": arr(fc.weight), "classifier.bias": arr(fc.bias)}


def test_gate_reordering_maps_torch_blocks_to_onnx_order():
    h = speech_lstm.HIDDEN
    torch_order = np.repeat(np.array([0, 1, 2, 3]), h)  # i, f, g, o
    onnx_order = speech_lstm.gates_torch_to_onnx(torch_order)
    assert onnx_order.reshape(4, h)[:, 0].tolist() == [0, 3, 1, 2]  # i, o, f, c(=g)
    assert np.array_equal(speech_lstm.gates_onnx_to_torch(onnx_order), torch_order)


@pytest.mark.parametrize("seed", [0, 1])
def test_onnx_graph_matches_torch_lstm_and_linear(seed):
    lstm, fc = _torch_model(seed)
    session = _session(speech_lstm.build_onnx(_weights_from_torch(lstm, fc)))
    rng = np.random.default_rng(seed)
    inputs = [rng.normal(0, 1.5, (1, FRAMES, MEL_BINS)).astype(np.float32),
              CommandsDataset("heldout")[seed][0][None]]
    for x in inputs:
        with torch.no_grad():
            _, (h, _) = lstm(torch.from_numpy(x))
            expected = fc(h[-1]).numpy()
        got = session.run(["logits"], {"features": x})[0]
        assert got.shape == (1, len(CLASSES))
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)


def test_batch_first_layout_computes_the_same_as_the_time_major_graph():
    from onnx.reference import ReferenceEvaluator

    weights = _weights_from_torch(*_torch_model(2))
    x = CommandsDataset("calibration")[0][0][None]
    time_major = _session(speech_lstm.build_onnx(weights)).run(["logits"], {"features": x})[0]
    batch_first = speech_lstm.build_onnx(weights, layout=1)
    assert [n.op_type for n in batch_first.graph.node] == ["LSTM", "Reshape", "Gemm"]
    assert {a.name: a.i for a in batch_first.graph.node[0].attribute}["layout"] == 1
    got = ReferenceEvaluator(batch_first).run(["logits"], {"features": x})[0]
    np.testing.assert_allclose(got, time_major, atol=1e-5, rtol=1e-5)


def test_graph_is_the_one_the_workload_describes():
    model = speech_lstm.build_onnx(speech_lstm.load_weights())
    assert [n.op_type for n in model.graph.node] == ["Transpose", "LSTM", "Reshape", "Gemm"]
    lstm = model.graph.node[1]
    attrs = {a.name: a for a in lstm.attribute}
    assert attrs["hidden_size"].i == speech_lstm.HIDDEN and attrs["layout"].i == 0
    assert attrs["direction"].s == b"forward" and "clip" not in attrs and "activations" not in attrs
    assert list(lstm.input) == ["features_time_major", "lstm.W", "lstm.R", "lstm.B"]  # no lens, states, peepholes
    assert model.opset_import[0].version >= 14
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, FRAMES, MEL_BINS] and model.graph.output[0].name == "logits"


def test_weights_file_matches_the_description():
    with np.load(speech_lstm.WEIGHTS_PATH) as data:
        stored = {k: data[k] for k in data.files}
    assert {k: v.shape for k, v in stored.items()} == speech_lstm.weight_shapes()
    assert all(v.dtype == np.float16 for v in stored.values())
    lstm, fc = _torch_model(0)
    assert speech_lstm.parameters() == sum(p.numel() for p in list(lstm.parameters()) + list(fc.parameters()))
    h, i, c = speech_lstm.HIDDEN, MEL_BINS, len(CLASSES)
    assert speech_lstm.macs() == FRAMES * (4 * h * (i + h) + 3 * h) + h * c
    assert speech_lstm.WEIGHTS_PATH.stat().st_size < 200_000


def test_shipped_weights_classify_held_out_commands():
    session = _session(speech_lstm.build_onnx(speech_lstm.load_weights()))
    correct = 0
    for x, labels in CommandsDataset("heldout", count=HELDOUT_CHECKED).batches(50):
        for xi, yi in zip(x, labels):
            correct += int(session.run(["logits"], {"features": xi[None]})[0].argmax() == yi)
    accuracy = correct / HELDOUT_CHECKED
    assert ACCURACY_RANGE[0] <= accuracy <= ACCURACY_RANGE[1], accuracy


def test_bad_weights_are_refused_by_name(tmp_path):
    weights = speech_lstm.load_weights()
    missing = {k: v for k, v in weights.items() if k != "lstm.R"}
    with pytest.raises(MltsError) as info:
        speech_lstm.build_onnx(missing)
    assert info.value.code == ResultCode.BAD_DATA and "'lstm.R'" in str(info.value)
    wrong = dict(weights, **{"lstm.B": np.zeros((1, 4 * speech_lstm.HIDDEN), np.float32)})
    with pytest.raises(MltsError, match="'lstm.B' has shape"):
        speech_lstm.build_onnx(wrong)
    with pytest.raises(MltsError, match="layout"):
        speech_lstm.build_onnx(weights, layout=2)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not an npz")
    with pytest.raises(MltsError, match="bad.npz"):
        speech_lstm.load_weights(bad)
    nonfinite = tmp_path / "nan.npz"
    np.savez(nonfinite, **dict(weights, **{"classifier.bias": np.full(len(CLASSES), np.nan, np.float32)}))
    with pytest.raises(MltsError, match="non-finite"):
        speech_lstm.load_weights(nonfinite)
