"""Whole float models against onnxruntime: the project's MobileNet v1/v2 builder, torch.onnx.export of a
torchvision-style MobileNetV2 (opsets 13 and 17), and the layout rules (TRANSPOSE only at the input
boundary; tf2onnx-style NHWC graphs with no TRANSPOSE at all)."""
from __future__ import annotations

import io
import os
import sys
import warnings

import numpy as np
import pytest
from onnx import helper

sys.path.insert(0, os.path.dirname(__file__))
from onnx_import_helpers import (assert_float_close, check_against_ort, const, image_batch, make_model,  # noqa: E402
                                 mobilenet_weights, op_types, tensor)

from mlts.models import import_onnx  # noqa: E402
from mlts.models.mobilenet import build_onnx  # noqa: E402

pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("family,alpha,resolution", [("v1", 0.25, 64), ("v2", 0.35, 64), ("v2", 0.35, 96)])
def test_mobilenet_builder_float(family, alpha, resolution):
    model = build_onnx(family, alpha, resolution, mobilenet_weights(family, alpha, seed=3))
    imported, got, ref = check_against_ort(model, {"input": image_batch(7, resolution)},
                                           softmax_outputs=["probabilities"])
    ops = op_types(imported)
    # Layout: one TRANSPOSE (NCHW input -> NHWC), none anywhere else (the output is 2-D).
    assert ops.count("TRANSPOSE") == 1 and ops[0] == "TRANSPOSE"
    # BN is pre-folded by the builder; every Clip(0, 6) is a fused RELU6; GAP is one pool; no stray ops.
    assert not {"RELU", "RELU6", "MEAN", "MUL"} & set(ops)
    assert ops[-3:] == ["RESHAPE", "FULLY_CONNECTED", "SOFTMAX"]
    assert got["probabilities"].argmax() == ref["probabilities"].argmax()


def test_mobilenet_imported_describe_and_devices():
    model = build_onnx("v1", 0.25, 64, mobilenet_weights("v1", 0.25))
    imported = import_onnx(model.SerializeToString())
    text = imported.describe()
    assert "DEPTHWISE_CONV_2D" in text and "nnapi-reference" in text and "partitionTheWork" in text
    info = imported.describe_dict()
    # Every operation of the float MobileNet runs on both built-in devices; mlts-fast declares the
    # better performance, so it takes the whole model.
    assert all(op["devices"] == ["nnapi-reference", "mlts-fast"] for op in info["operations"])
    assert [step["device"] for step in info["partition"]["steps"]] == ["mlts-fast"]
    dot = imported.graph_dump()
    assert dot.startswith("digraph") and "CONV_2D" in dot
    x = image_batch(1, 64)
    a = imported.run({"input": x})  # Compilation(model): all devices
    b = imported.run({"input": x}, devices=["nnapi-reference"])  # Compilation.for_devices by name
    assert_float_close(a["probabilities"], b["probabilities"], softmax=True)
    from mlts.runtime import get_device

    # One cached compilation per device set (names and Device objects name the same set).
    assert imported.compilation(["nnapi-reference"]) is imported.compilation([get_device("nnapi-reference")])
    assert imported.compilation(None) is not imported.compilation(["nnapi-reference"])
    assert imported.compilation(None).explicit_devices is False


def test_tf2onnx_style_nhwc_graph_has_no_transpose():
    """tf2onnx writes NHWC graphs with Transpose around every Conv: they all cancel."""
    rng = np.random.default_rng(0)
    r = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Transpose", ["x"], ["x_nchw"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["x_nchw", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Transpose", ["r1"], ["r1_nhwc"], perm=[0, 2, 3, 1]),
        helper.make_node("Add", ["r1_nhwc", "bias_nhwc"], ["a1"]),  # an NHWC-side op between the Convs
        helper.make_node("Transpose", ["a1"], ["a1_nchw"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["a1_nchw", "w2", "b2"], ["c2"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
        helper.make_node("Transpose", ["r2"], ["y"], perm=[0, 2, 3, 1]),
        helper.make_node("ReduceMean", ["y"], ["m"], axes=[1, 2], keepdims=0),
    ]
    inits = [const("w1", r(8, 3, 3, 3)), const("b1", r(8)), const("bias_nhwc", r(8)), const("w2", r(8, 1, 3, 3)),
             const("b2", r(8)), const("lo", np.float32(0)), const("hi", np.float32(6))]
    model = make_model(nodes, [tensor("x", [1, 12, 12, 3])], [tensor("y", [1, 12, 12, 8]), tensor("m", [1, 8])], inits)
    imported, _, _ = check_against_ort(model, {"x": r(1, 12, 12, 3)})
    assert op_types(imported) == ["CONV_2D", "ADD", "DEPTHWISE_CONV_2D", "MEAN"]


# -- torch.onnx.export -------------------------------------------------------------------------------------
def _torch_mobilenet_v2(width: float, reshape: bool):
    torch = pytest.importorskip("torch")
    nn = torch.nn

    def divisible(v, d=8):
        n = max(d, int(v + d / 2) // d * d)
        return n + d if n < 0.9 * v else n

    class ConvBNReLU(nn.Sequential):
        def __init__(self, i, o, k=3, s=1, g=1):
            super().__init__(nn.Conv2d(i, o, k, s, (k - 1) // 2, groups=g, bias=False), nn.BatchNorm2d(o),
                             nn.ReLU6(inplace=True))

    class InvertedResidual(nn.Module):
        def __init__(self, i, o, s, t):
            super().__init__()
            h = int(round(i * t))
            self.use_res = s == 1 and i == o
            layers = [] if t == 1 else [ConvBNReLU(i, h, 1)]
            layers += [ConvBNReLU(h, h, s=s, g=h), nn.Conv2d(h, o, 1, bias=False), nn.BatchNorm2d(o)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res else self.conv(x)

    class MobileNetV2(nn.Module):
        """torchvision.models.MobileNetV2's structure (width multiplier, 10 classes)."""

        def __init__(self):
            super().__init__()
            c = divisible(32 * width)
            last = divisible(1280 * max(1.0, width))
            feats = [ConvBNReLU(3, c, s=2)]
            for t, ch, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                                (6, 160, 3, 2), (6, 320, 1, 1)]:
                o = divisible(ch * width)
                for k in range(n):
                    feats.append(InvertedResidual(c, o, s if k == 0 else 1, t))
                    c = o
            feats.append(ConvBNReLU(c, last, 1))
            self.features = nn.Sequential(*feats)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, 10))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
            x = x.reshape(x.shape[0], -1) if reshape else torch.flatten(x, 1)
            return self.classifier(x)

    torch.manual_seed(0)
    net = MobileNetV2()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    return net.eval()


@pytest.fixture
def torch_single_thread():
    """torch on one thread: its thread pool only adds contention on the small CI machines."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(before)


@pytest.mark.parametrize("opset", [9, 11, 13, 17])  # 9 and 11: Clip attribute form, older BatchNormalization
@pytest.mark.parametrize("folded", [True, False], ids=["exporter-folded", "batchnorm-and-shape-ops"])
def test_torch_exported_mobilenet_v2(opset, folded, torch_single_thread):
    torch = torch_single_thread
    net = _torch_mobilenet_v2(0.35, reshape=not folded)
    x = torch.from_numpy(image_batch(11, 64))
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), buf, opset_version=opset, dynamo=False, do_constant_folding=folded,
                          input_names=["input"], output_names=["logits"])
    import onnx
    model = onnx.load_from_string(buf.getvalue())
    exported_ops = {n.op_type for n in model.graph.node}
    if not folded:
        assert "BatchNormalization" in exported_ops  # folded by the importer, not the exporter
    imported, got, _ = check_against_ort(model, {"input": x.numpy()})
    ops = op_types(imported)
    assert ops.count("TRANSPOSE") == 1
    assert not {"MUL", "RELU6"} & set(ops)
    with torch.no_grad():
        expected = net(x).numpy()
    np.testing.assert_allclose(got["logits"], expected, rtol=1e-4, atol=1e-5)
