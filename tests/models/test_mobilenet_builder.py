"""The ONNX MobileNet builder agrees with the torch definition the trainer uses (after BN folding)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from mlts.models.mobilenet import ZOO_CONFIGS, build_onnx, layers, macs, weight_shapes

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import train_zoo  # noqa: E402


def _randomized_torch(family: str, alpha: float, seed: int):
    torch.manual_seed(seed)
    net = train_zoo.build_torch(family, alpha)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):  # non-trivial folding
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    return net.eval()


@pytest.mark.parametrize("family,alpha", [("v1", 0.25), ("v2", 0.35)])
def test_folded_onnx_matches_torch(family, alpha):
    net = _randomized_torch(family, alpha, seed=1)
    weights = train_zoo.fold_weights(net)
    model = build_onnx(family, alpha, 64, weights)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 64, 64)).astype(np.float32)
    with torch.no_grad():
        expected = torch.softmax(net(torch.from_numpy(x)), dim=1).numpy()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (actual,) = sess.run(None, {"input": x})
    np.testing.assert_allclose(actual, expected, atol=1e-5)


def test_architectures_have_the_published_shape():
    # MobileNet v1: 13 depthwise-separable blocks after the stem; v2: 17 inverted residual blocks.
    v1 = layers("v1", 1.0)
    assert sum(l.name.endswith("_dw") for l in v1) == 13
    v2 = layers("v2", 1.0)
    assert sum(l.name.endswith("_dw") for l in v2) == 17
    assert sum(l.kind == "add" for l in v2) == 10
    # Published multiply-accumulates (1000-class heads): v1 1.0_224 569M, v2 1.0_224 300M; ours have
    # 10-class heads, which removes about 1.0M (v1) and 1.27M (v2) MACs.
    assert abs(macs("v1", 1.0, 224) - (569e6 - 1.014e6)) / 569e6 < 0.01
    assert abs(macs("v2", 1.0, 224) - (300e6 - 1.27e6)) / 300e6 < 0.02


def test_every_zoo_configuration_builds():
    rng = np.random.default_rng(0)
    for family, alpha, res in ZOO_CONFIGS:
        weights = {k: rng.normal(0, 0.01, s).astype(np.float32) for k, s in weight_shapes(family, alpha).items()}
        model = build_onnx(family, alpha, res, weights)
        assert model.graph.input[0].type.tensor_type.shape.dim[2].dim_value == res
