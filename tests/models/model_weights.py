"""Random MobileNet weights that behave like trained ones (normalised activations, all classes used)."""
from __future__ import annotations

import numpy as np

from mlts.models import mobilenet
from mlts.models.quantizer.conv import conv2d as _conv


def balanced_classifier(features: np.ndarray, classes: int, rng: np.random.Generator, spread: float = 4.0):
    """FC weights and bias reading +-principal components of the features, so all classes occur."""
    mu = features.mean(axis=0)
    _, sv, vt = np.linalg.svd(features - mu, full_matrices=False)
    k = min((classes + 1) // 2, len(sv))
    pcs = vt[:k] / (sv[:k, None] / np.sqrt(len(features)) + 1e-12)  # unit-variance projections
    rows = [pcs[(i // 2) % k] * (1.0 if i % 2 == 0 else -1.0) + rng.standard_normal(pcs.shape[1]) * 1e-3
            for i in range(classes)]
    w = np.stack(rows) * spread
    return w.astype(np.float32), (-(w @ mu)).astype(np.float32)


def stable_weights(family: str, alpha: float, x: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """Random MobileNet weights normalized layer by layer on float inputs x (see the module doc)."""
    rng = np.random.default_rng(seed)
    weights, saved = {}, {}
    for layer in mobilenet.layers(family, alpha):
        if layer.kind == "conv":
            shape = (layer.out_channels, layer.in_channels // layer.groups, layer.kernel, layer.kernel)
            if layer.groups > 1:
                w = rng.dirichlet(np.ones(layer.kernel ** 2), layer.out_channels).reshape(shape)
            else:
                w = rng.standard_normal(shape)
            w = w.astype(np.float32)
            y = _conv(x, w, None, strides=(layer.stride,) * 2, pads=(layer.kernel // 2,) * 4, group=layer.groups)
            mean, std = float(y.mean()), float(y.std()) + 1e-6
            weights[f"{layer.name}.weight"] = (w / std).astype(np.float32)
            weights[f"{layer.name}.bias"] = np.full(layer.out_channels, -mean / std, np.float32)
            x = ((y - mean) / std).astype(np.float32)
            if layer.relu6:
                x = np.clip(x, 0.0, 6.0)
        elif layer.kind == "save":
            saved[layer.name] = x
        elif layer.kind == "add":
            x = x + saved[layer.name]
        elif layer.kind == "pool":
            x = x.mean(axis=(2, 3))
        elif layer.kind == "fc":
            w, b = balanced_classifier(x, layer.out_channels, rng)
            weights[f"{layer.name}.weight"], weights[f"{layer.name}.bias"] = w, b
    return weights
