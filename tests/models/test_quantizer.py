"""The post-training quantizer (mlts.models.quantizer) and the shared preprocessing.

Test models: small MobileNets (v1 0.25 at 64 px, v2 0.35 at 96 px) from mobilenet.build_onnx and
a tiny hand-made conv net, all with synthetic weights, calibrated on the shapes calibration split
and compared with their float models on held-out images. onnxruntime is a test-only dependency.

Synthetic weights: plain random (He) weights make deep ReLU6 networks chaotic, so tiny input
changes, quantization noise included, flip their outputs (onnxruntime's own quantize_static
agrees with such float models no better than this quantizer does: ~60-90% top-1). Trained
MobileNets are far better behaved. `stable_weights` makes random networks that behave more like
trained ones: depthwise filters are random positive (smoothing) kernels, every layer is
normalized on calibration images like batch norm folded into the weights (one scale per layer), and
the classifier reads the features' principal components, with balanced classes.

onnxruntime runs the quantized models twice: without graph optimizations (ONNX's QDQ semantics:
float ops between QuantizeLinear/DequantizeLinear, what the quantizer's evaluator does too) and with
them (fused integer kernels, as deployed). On x86 CPUs without VNNI its fused int8 x int8 kernels
saturate int16 pair sums (vpmaddubsw), which costs the int8 models 10-20 points of agreement
there; that check is skipped on such CPUs, and `reduce_range=True` (7-bit weights) avoids it.
"""
from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlts.datasets.preprocess import to_float_input, to_quant_input
from mlts.datasets.shapes import ShapesDataset
from mlts.models import mobilenet
from model_weights import balanced_classifier, stable_weights
from mlts.models.quantizer import (
    Evaluator, choose_qparams, collect_ranges, dequantize_array, input_qparams,
    output_qparams, quantization_report, quantize_array, quantize_model, symmetric_scales,
)
from mlts.models.quantizer.calibration import _Histogram, _MinMax

ort = pytest.importorskip("onnxruntime")

CALIBRATION_IMAGES = 64
HELDOUT_IMAGES = 100
MODELS = {"v1": ("v1", 0.25, 64), "v2": ("v2", 0.35, 96), "tiny": (None, None, 32)}
SCHEMES = ("uint8", "int8")


# ---------------------------------------------------------------------------------------------
# Synthetic models and data
# ---------------------------------------------------------------------------------------------

_IMAGES: dict = {}


def images(split: str, size: int, count: int) -> np.ndarray:
    key = (split, size, count)
    if key not in _IMAGES:
        ds = ShapesDataset(split, size)
        _IMAGES[key] = np.stack([ds[i][0] for i in range(count)])
    return _IMAGES[key]


def heldout_labels(count: int) -> np.ndarray:
    ds = ShapesDataset("heldout", 32)
    return np.array([ds.label(i) for i in range(count)])


def tiny_model(x: np.ndarray, seed: int = 0) -> onnx.ModelProto:
    """Conv+Relu -> depthwise Conv+Clip -> Conv -> Add (residual) -> MaxPool -> GAP -> Flatten -> Gemm -> Softmax."""
    rng = np.random.default_rng(seed)
    inits = {
        "c1.w": rng.standard_normal((8, 3, 3, 3)) * 0.3, "c1.b": rng.standard_normal(8) * 0.1,
        "dw.w": rng.dirichlet(np.ones(9), 8).reshape(8, 1, 3, 3) * 2.0, "dw.b": rng.standard_normal(8) * 0.1,
        "pw.w": rng.standard_normal((8, 8, 1, 1)) * 0.4, "pw.b": rng.standard_normal(8) * 0.1,
        "fc.w": np.zeros((10, 8)), "fc.b": np.zeros(10),
        "lo": np.array(0.0), "hi": np.array(6.0),
    }
    inits = {k: np.asarray(v, np.float32) for k, v in inits.items()}
    nodes = [
        helper.make_node("Conv", ["input", "c1.w", "c1.b"], ["c1"], name="c1", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["a"], name="relu"),
        helper.make_node("Conv", ["a", "dw.w", "dw.b"], ["dw"], name="dw", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         group=8),
        helper.make_node("Clip", ["dw", "lo", "hi"], ["b"], name="relu6"),
        helper.make_node("Conv", ["b", "pw.w", "pw.b"], ["c"], name="pw", kernel_shape=[1, 1]),
        helper.make_node("Add", ["a", "c"], ["d"], name="add"),
        helper.make_node("MaxPool", ["d"], ["e"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["e"], ["f"], name="pool"),
        helper.make_node("Flatten", ["f"], ["g"], name="flatten", axis=1),
        helper.make_node("Gemm", ["g", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1),
    ]

    def build():
        graph = helper.make_graph(
            nodes, "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
            [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])],
            [numpy_helper.from_array(v, k) for k, v in inits.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        return model

    features = Evaluator(build()).run(x, outputs=["g"])["g"]
    inits["fc.w"], inits["fc.b"] = balanced_classifier(features, 10, rng)
    model = build()
    onnx.checker.check_model(model)
    return model


_MODELS: dict = {}
_QUANTIZED: dict = {}


def float_model(key: str) -> onnx.ModelProto:
    if key not in _MODELS:
        family, alpha, size = MODELS[key]
        x = to_float_input(images("calibration", size, 32))
        if family is None:
            _MODELS[key] = tiny_model(x)
        else:
            _MODELS[key] = mobilenet.build_onnx(family, alpha, size, stable_weights(family, alpha, x))
    return _MODELS[key]


def quantized(key: str, scheme: str, calibration: str = "minmax") -> onnx.ModelProto:
    if (key, scheme, calibration) not in _QUANTIZED:
        size = MODELS[key][2]
        cal = to_float_input(images("calibration", size, CALIBRATION_IMAGES))
        _QUANTIZED[key, scheme, calibration] = quantize_model(float_model(key), [cal], scheme=scheme,
                                                              calibration=calibration)
    return _QUANTIZED[key, scheme, calibration]


_FLOAT_OUTPUTS: dict = {}


def float_outputs(key: str, count: int) -> np.ndarray:
    """The float model's probabilities on the first `count` held-out images (quantizer's evaluator)."""
    if (key, count) not in _FLOAT_OUTPUTS:
        imgs = images("heldout", MODELS[key][2], count)
        _FLOAT_OUTPUTS[key, count] = Evaluator(float_model(key)).run(to_float_input(imgs))["probabilities"]
    return _FLOAT_OUTPUTS[key, count]


def session(model: onnx.ModelProto, optimize: bool = True):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def run_ort(model: onnx.ModelProto, x: np.ndarray, optimize: bool = True, outputs=None) -> list[np.ndarray]:
    sess = session(model, optimize)
    results = [sess.run(outputs, {"input": x[i:i + 1]}) for i in range(len(x))]
    return [np.concatenate([r[k] for r in results]) for k in range(len(results[0]))]


def with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    extra = onnx.ModelProto()
    extra.CopyFrom(model)
    for name in names:
        extra.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return extra


def consts(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def producer(model: onnx.ModelProto) -> dict:
    return {o: n for n in model.graph.node for o in n.output}


# ---------------------------------------------------------------------------------------------
# Scale / zero-point arithmetic on hand-computed values
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("lo, hi, dtype, scale, zero_point", [
    (-1.0, 3.0, np.uint8, 4 / 255, 64),          # 1 / (4/255) = 63.75 -> 64
    (-1.0, 3.0, np.int8, 4 / 255, -64),          # -128 + 63.75 = -64.25 -> -64
    (0.0, 6.0, np.uint8, 6 / 255, 0),            # ReLU6
    (0.0, 6.0, np.int8, 6 / 255, -128),
    (0.5, 2.0, np.uint8, 2 / 255, 0),            # the range is widened to include 0
    (-2.0, -1.0, np.uint8, 2 / 255, 255),
    (-2.0, -1.0, np.int8, 2 / 255, 127),
    (-0.25, 1.75, np.uint8, 2 / 255, 32),         # 0.25 * 127.5 = 31.875 -> 32
    (0.0, 0.0, np.uint8, 1.0, 0),                # empty range
])
def test_choose_qparams(lo, hi, dtype, scale, zero_point):
    s, z = choose_qparams(lo, hi, dtype)
    assert isinstance(s, np.float32)
    assert s == np.float32(scale)
    assert z == zero_point
    # The range's ends and zero are representable (zero exactly).
    assert dequantize_array(quantize_array(np.float32(0.0), s, z, dtype), s, z) == 0.0


def test_symmetric_scales_per_channel():
    w = np.array([[1.27, -0.5], [0.2, -2.54], [0.0, 0.0]], np.float32)
    scales = symmetric_scales(np.abs(w).max(axis=1))
    np.testing.assert_allclose(scales, [0.01, 0.02, 1.0], rtol=1e-6)
    assert scales.dtype == np.float32
    q = quantize_array(w, scales, np.zeros(3, np.int8), np.int8, axis=0)
    np.testing.assert_array_equal(q, [[127, -50], [10, -127], [0, 0]])


def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 300.0, -300.0], np.float32)
    np.testing.assert_array_equal(quantize_array(x, 1.0, 0, np.int8), [0, 2, 2, 0, -2, 127, -128])
    np.testing.assert_array_equal(quantize_array(x, 1.0, 128, np.uint8), [128, 130, 130, 128, 126, 255, 0])
    q = quantize_array(np.float32(1.0), np.float32(4 / 255), 64, np.uint8)  # [-1, 3] uint8: 1.0 -> 64 + 63.75
    assert q == 128
    np.testing.assert_allclose(dequantize_array(np.array([0, 64, 255], np.uint8), np.float32(4 / 255), 64),
                               [-64 * 4 / 255, 0.0, 191 * 4 / 255], rtol=1e-6)


def test_minmax_and_percentile_ranges():
    rng = np.random.default_rng(0)
    batches = [rng.uniform(-1, 1, 10000).astype(np.float32) * (k + 1) for k in range(4)]  # the range grows
    batches[-1][0] = 1000.0  # one outlier
    mm, hist = _MinMax(), _Histogram(99.9)
    for b in batches:
        mm.add(b)
        hist.add(b)
    assert mm.range() == (float(min(b.min() for b in batches)), 1000.0)
    lo, hi = hist.range()
    values = np.concatenate(batches)
    bin_width = 2 * hist.R / hist.BINS
    assert abs(hi - np.percentile(values, 99.9)) <= 2 * bin_width
    assert abs(lo - np.percentile(values, 0.1)) <= 2 * bin_width
    assert hist.counts.sum() == values.size  # the rebinning keeps every value


def test_collect_ranges_over_batches():
    model = float_model("tiny")
    x = to_float_input(images("calibration", 32, 20))
    ranges, n = collect_ranges(model, [x[:7], x[7:], x[3]], ["a", "logits"], batch_size=4)
    assert n == 21
    ref = Evaluator(model).run(np.concatenate([x, x[3:4]]), outputs=["a", "logits"])
    for name in ("a", "logits"):  # up to float rounding (BLAS sums differ with the batch size)
        np.testing.assert_allclose(ranges[name], (ref[name].min(), ref[name].max()), rtol=1e-5, atol=1e-6)


def test_preprocess():
    imgs = images("calibration", 32, 4)
    f = to_float_input(imgs)
    assert f.shape == (4, 3, 32, 32) and f.dtype == np.float32
    assert f.min() >= -1.0 and f.max() <= 1.0
    np.testing.assert_allclose(f[1, 2, 5, 7], imgs[1, 5, 7, 2] / 127.5 - 1.0, rtol=1e-6)
    for dtype, zp in ((np.uint8, 128), (np.int8, 0)):
        q = to_quant_input(imgs, 1 / 127.5, zp, dtype)
        assert q.shape == f.shape and q.dtype == dtype
        err = np.abs(dequantize_array(q, np.float32(1 / 127.5), zp) - f)
        assert err.max() <= 0.5 / 127.5 + 1e-6  # half a step
    np.testing.assert_array_equal(to_quant_input(imgs, 1 / 127.5, 0, np.int8).astype(np.int16),
                                  to_quant_input(imgs, 1 / 127.5, 128, np.uint8).astype(np.int16) - 128)
    assert to_float_input(imgs[0]).shape == (1, 3, 32, 32)


# ---------------------------------------------------------------------------------------------
# The quantizer's evaluator against onnxruntime
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", list(MODELS))
def test_evaluator_matches_onnxruntime(key):
    model = float_model(key)
    size = MODELS[key][2]
    x = to_float_input(images("heldout", size, 8))
    names = ["logits", "probabilities"]
    ref = dict(zip(names, run_ort(with_outputs(model, ["logits"]), x, outputs=names)))
    ours = Evaluator(model).run(x, outputs=names)
    for name in names:
        diff = np.abs(ours[name] - ref[name]).max()
        assert diff < 1e-4, f"{name}: max abs diff {diff}"


def test_evaluator_generic_convolutions():
    """Grouped, strided, padded, dilated convolutions and pools against onnxruntime."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, 11, 9)).astype(np.float32)
    cases = [
        dict(w=(4, 3, 3, 2), group=2, strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2]),
        dict(w=(12, 1, 3, 3), group=6, strides=[1, 2], pads=[1, 1, 1, 1], dilations=[1, 1]),  # depth multiplier 2
        dict(w=(5, 6, 1, 1), group=1, strides=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1]),
    ]
    for case in cases:
        w = rng.standard_normal(case.pop("w")).astype(np.float32)
        b = rng.standard_normal(w.shape[0]).astype(np.float32)
        nodes = [helper.make_node("Conv", ["input", "w", "b"], ["y"], kernel_shape=list(w.shape[2:]), **case),
                 helper.make_node("AveragePool", ["y"], ["p"], kernel_shape=[2, 2], pads=[1, 1, 0, 0]),
                 helper.make_node("MaxPool", ["y"], ["m"], kernel_shape=[3, 2], strides=[1, 2])]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, x.shape)],
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "ypm"],
                                  [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        ref = session(model).run(None, {"input": x})
        ours = Evaluator(model).run(x)
        for k, name in enumerate("ypm"):
            np.testing.assert_allclose(ours[name], ref[k], atol=1e-4, err_msg=f"{name} {case}")


# ---------------------------------------------------------------------------------------------
# The QDQ graph
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("key", list(MODELS))
def test_qdq_structure(key, scheme):
    q = quantized(key, scheme)
    onnx.checker.check_model(q, full_check=True)
    act = np.uint8 if scheme == "uint8" else np.int8
    elem = TensorProto.UINT8 if scheme == "uint8" else TensorProto.INT8
    assert [o.version for o in q.opset_import if o.domain in ("", "ai.onnx")] == [13]
    c, prod = consts(q), producer(q)

    # Input: same name and shape, quantized with scale 1/127.5, zero point 128 (int8: 0).
    (inp,) = q.graph.input
    assert inp.name == "input" and inp.type.tensor_type.elem_type == elem
    assert [d.dim_value for d in inp.type.tensor_type.shape.dim] == [1, 3, MODELS[key][2], MODELS[key][2]]
    qin = input_qparams(q)
    assert qin.scale == np.float32(1 / 127.5) and qin.scale.dtype == np.float32
    assert qin.zero_point == (128 if scheme == "uint8" else 0) and qin.zero_point.dtype == act

    # Output: ... -> Softmax -> QuantizeLinear -> "probabilities", scale 1/256, zero point 0 (int8: -128).
    (out,) = q.graph.output
    assert out.name == "probabilities" and out.type.tensor_type.elem_type == elem
    qnode = prod["probabilities"]
    assert qnode.op_type == "QuantizeLinear" and prod[qnode.input[0]].op_type == "Softmax"
    qout = output_qparams(q)
    assert qout.scale == np.float32(1 / 256)
    assert qout.zero_point == (0 if scheme == "uint8" else -128) and qout.zero_point.dtype == act

    float_ops = [n for n in q.graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    consumers: dict[str, list] = {}
    for n in q.graph.node:
        for t in n.input:
            consumers.setdefault(t, []).append(n)
    for n in q.graph.node:  # all scales float32, zero points of the right type
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            assert c[n.input[1]].dtype == np.float32
            assert np.all(c[n.input[1]] > 0)
            if n.op_type == "QuantizeLinear":
                assert c[n.input[2]].dtype == act
    convs = 0
    for node in float_ops:
        # Every float activation input comes from a DequantizeLinear.
        for t in node.input[:1] if node.op_type in ("Conv", "Gemm", "Clip", "Relu") else node.input:
            allowed = ("DequantizeLinear", "Conv", "Gemm") if node.op_type in ("Clip", "Relu") else ("DequantizeLinear",)
            assert prod[t].op_type in allowed, f"{node.name}: {t} is not dequantized"
        if node.op_type in ("Conv", "Gemm"):
            x_dq, w_dq, b_dq = (prod[t] for t in node.input)
            in_scale = c[x_dq.input[1]]
            w_q, w_scale, w_zp = (c[t] for t in w_dq.input)
            per_channel = scheme == "int8" and node.op_type == "Conv"
            if scheme == "uint8":
                assert w_q.dtype == np.uint8 and w_scale.shape == () and w_zp.dtype == np.uint8
            elif per_channel:
                assert w_q.dtype == np.int8 and w_scale.shape == (w_q.shape[0],)
                assert w_zp.dtype == np.int8 and not w_zp.any()
                assert {a.name: a.i for a in w_dq.attribute}.get("axis") == 0
                assert w_q.min() >= -127  # symmetric
            else:  # NNAPI FULLY_CONNECTED: per-tensor symmetric int8
                assert w_q.dtype == np.int8 and w_scale.shape == () and w_zp == 0
            b_q, b_scale, b_zp = (c[t] for t in b_dq.input)
            assert b_q.dtype == np.int32 and b_zp.dtype == np.int32 and not b_zp.any()
            np.testing.assert_array_equal(b_scale, (in_scale * w_scale).astype(np.float32))
            if per_channel:
                assert {a.name: a.i for a in b_dq.attribute}.get("axis") == 0
            # Fused activations: DQ -> Conv -> Clip/Relu -> Q, never a Q between Conv and Clip.
            (user,) = consumers[node.output[0]]
            if user.op_type in ("Clip", "Relu"):
                (after,) = consumers[user.output[0]]
                assert after.op_type == "QuantizeLinear"
            else:
                assert user.op_type == "QuantizeLinear"
            convs += node.op_type == "Conv"
        if node.op_type == "Add":
            (after,) = consumers[node.output[0]]
            assert after.op_type == "QuantizeLinear"
        if node.op_type in ("GlobalAveragePool", "MaxPool", "Flatten"):  # NNAPI: same params as the input
            (after,) = consumers[node.output[0]]
            x_dq = prod[node.input[0]]
            assert c[after.input[1]] == c[x_dq.input[1]] and c[after.input[2]] == c[x_dq.input[2]]
    expected = sum(1 for n in float_model(key).graph.node if n.op_type == "Conv")
    assert convs == expected
    adds = sum(n.op_type == "Add" for n in float_model(key).graph.node)
    assert sum(n.op_type == "Add" for n in float_ops) == adds


def test_bias_quantization_hand_computed():
    model = float_model("tiny")
    q = quantized("tiny", "int8")
    c, prod = consts(q), producer(q)
    conv = next(n for n in q.graph.node if n.name == "c1")
    w_dq, b_dq = prod[conv.input[1]], prod[conv.input[2]]
    w = consts(model)["c1.w"]
    b = consts(model)["c1.b"]
    w_scale = (np.abs(w).reshape(8, -1).max(axis=1) / 127).astype(np.float32)
    np.testing.assert_allclose(c[w_dq.input[1]], w_scale, rtol=1e-6)
    bias_scale = np.float32(1 / 127.5) * w_scale  # input scale x weight scale
    np.testing.assert_allclose(c[b_dq.input[1]], bias_scale, rtol=1e-6)
    np.testing.assert_array_equal(c[b_dq.input[0]], np.rint(b / bias_scale).astype(np.int32))
    # uint8: per-tensor asymmetric weights from the weights' range.
    q8 = quantized("tiny", "uint8")
    c8, prod8 = consts(q8), producer(q8)
    w_dq8 = prod8[next(n for n in q8.graph.node if n.name == "c1").input[1]]
    scale, zp = choose_qparams(w.min(), w.max(), np.uint8)
    assert c8[w_dq8.input[1]] == scale and c8[w_dq8.input[2]] == zp


def test_fused_clip_sets_the_output_range():
    q = quantized("v1", "uint8")
    c = consts(q)
    model = float_model("v1")
    x = to_float_input(images("calibration", 64, CALIBRATION_IMAGES))
    stem = Evaluator(model).run(x, outputs=["stem"])["stem"]
    scale, zp = choose_qparams(0.0, stem.max(), np.uint8)
    assert 0 < stem.max() <= 6.0
    assert c["stem_scale"] == scale and c["stem_zero_point"] == zp == 0


def test_explicit_ranges_skip_calibration():
    model = float_model("tiny")
    ranges = {t: (-1.0, 3.0) for t in ("a", "b", "c", "d", "logits")}
    q = quantize_model(model, [], scheme="uint8", ranges=ranges)
    c = consts(q)
    assert c["d_scale"] == np.float32(4 / 255) and c["d_zero_point"] == 64
    assert c["e_scale"] == c["d_scale"]  # MaxPool keeps its input's parameters


# ---------------------------------------------------------------------------------------------
# Accuracy: onnxruntime runs the quantized models and agrees with the float models
# ---------------------------------------------------------------------------------------------

def _x86_without_vnni() -> bool:
    """onnxruntime's fused int8 x int8 kernels saturate on x86 CPUs without VNNI (vpmaddubsw)."""
    import platform
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return True
    return not any(flag in flags for flag in ("avx512_vnni", "avx_vnni", "amx_int8"))


def _agreement(key: str, q: onnx.ModelProto, count: int = HELDOUT_IMAGES, optimize: bool = True):
    """Top-1 agreement of q (run by onnxruntime) with the float model on held-out images."""
    size = MODELS[key][2]
    imgs = images("heldout", size, count)
    y_float = float_outputs(key, count)
    qin, qout = input_qparams(q), output_qparams(q)
    xq = to_quant_input(imgs, float(qin.scale), int(qin.zero_point), qin.dtype)
    (yq,) = run_ort(q, xq, optimize=optimize)
    assert yq.dtype == qin.dtype and yq.shape == y_float.shape
    y = dequantize_array(yq, qout.scale, qout.zero_point)
    agreement = float(np.mean(y.argmax(1) == y_float.argmax(1)))
    classes = len(np.unique(y_float.argmax(1)))
    print(f"{key} {q.graph.name} {'fused' if optimize else 'unfused'}: top-1 agreement {agreement:.3f} over "
          f"{len(imgs)} images ({classes} classes), max error {np.abs(y - y_float).max() / qout.scale:.1f} steps")
    assert classes >= 5  # a meaningful comparison, not one class everywhere
    return agreement, xq, yq


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("key", list(MODELS))
def test_quantized_model_agrees_with_float(key, scheme):
    q = quantized(key, scheme)
    # ONNX's QDQ semantics: onnxruntime without its fusions (float ops between Q/DQ pairs).
    agreement, xq, yq_plain = _agreement(key, q, optimize=False)
    assert agreement >= 0.9
    # onnxruntime's fused integer kernels (QLinearConv ...), as deployed.
    fused, _, _ = _agreement(key, q, optimize=True)
    if scheme == "uint8" or not _x86_without_vnni():
        assert fused >= 0.9
    # The quantizer's evaluator runs the QDQ graph like unfused onnxruntime, up to float rounding at
    # the quantizers (a value on a rounding boundary may flip one step and propagate).
    yq_np = Evaluator(q).run(xq)["probabilities"]
    assert np.mean(yq_np.argmax(1) == yq_plain.argmax(1)) >= 0.95
    assert np.abs(yq_np.astype(int) - yq_plain.astype(int)).mean() < 0.5


def test_reduced_range_int8_agrees_in_fused_onnxruntime():
    """7-bit weights avoid onnxruntime's int8 saturation on x86 without VNNI."""
    key = "tiny"
    size = MODELS[key][2]
    cal = to_float_input(images("calibration", size, CALIBRATION_IMAGES))
    q = quantize_model(float_model(key), [cal], scheme="int8", reduce_range=True)
    w = [a for a in map(numpy_helper.to_array, q.graph.initializer) if a.dtype == np.int8 and a.ndim >= 2]
    assert len(w) == 4 and all(np.abs(a.astype(int)).max() == 63 for a in w)
    fused, _, _ = _agreement(key, q, optimize=True)
    assert fused >= 0.9


@pytest.mark.parametrize("scheme", SCHEMES)
def test_quantization_report(scheme):
    imgs = images("heldout", 64, HELDOUT_IMAGES)[:50]
    model, q = float_model("v1"), quantized("v1", scheme)
    report = quantization_report(model, q, imgs, labels=heldout_labels(50))
    print(scheme, report)
    assert report["num_inputs"] == 50
    assert report["top1_agreement"] >= 0.9
    assert report["output_scale"] == pytest.approx(1 / 256)
    assert report["output_zero_point"] == (0 if scheme == "uint8" else -128)
    assert 0 < report["mean_abs_error_steps"] <= report["max_abs_error_steps"]
    assert report["max_abs_error"] == pytest.approx(report["max_abs_error_steps"] / 256, rel=1e-6)
    assert 0 <= report["float_accuracy"] <= 1 and 0 <= report["quant_accuracy"] <= 1
    # Float inputs instead of images; onnxruntime as the quantized runner.
    again = quantization_report(model, q, [to_float_input(imgs[:10])], runner="onnxruntime")
    assert again["num_inputs"] == 10 and again["runner"] == "onnxruntime"


def test_percentile_calibration():
    key = "v1"
    minmax, pct = quantized(key, "uint8"), quantized(key, "uint8", "percentile")
    onnx.checker.check_model(pct)
    c_mm, c_pct = consts(minmax), consts(pct)
    scales = [t for t in c_mm if t.endswith("_scale") and not t.split("_scale")[0].endswith((".weight", ".bias"))]
    narrower = 0
    for t in scales:
        assert c_pct[t] <= c_mm[t] * (1 + 1e-6), t
        narrower += bool(c_pct[t] < c_mm[t])
    assert narrower >= 3  # tensors with outliers; ReLU6 outputs often keep 6
    meta = {p.key: p.value for p in pct.metadata_props}
    assert '"percentile": 99.99' in meta["mlts.quantization"]
    imgs = images("heldout", MODELS[key][2], 50)
    report = quantization_report(float_model(key), pct, imgs)
    print("percentile", report)
    assert report["top1_agreement"] >= 0.85


def test_calibration_accepts_images_and_percentile_strings():
    model = float_model("tiny")
    imgs = images("calibration", 32, 16)
    from_images = quantize_model(model, (imgs[i:i + 5] for i in range(0, 16, 5)), calibration="percentile:99.9")
    from_floats = quantize_model(model, [to_float_input(imgs)], calibration="percentile", percentile=99.9)
    assert from_images.SerializeToString() == from_floats.SerializeToString()


def test_errors():
    model = float_model("tiny")
    x = to_float_input(images("calibration", 32, 2))
    with pytest.raises(ValueError, match="scheme"):
        quantize_model(model, [x], scheme="int4")
    with pytest.raises(ValueError, match="calibration"):
        quantize_model(model, [x], calibration="kl")
    with pytest.raises(ValueError, match="percentile"):
        quantize_model(model, [x], calibration="percentile:high")
    with pytest.raises(ValueError, match="percentile"):
        quantize_model(model, [x], calibration="percentile", percentile=20)
    with pytest.raises(ValueError, match="no calibration inputs"):
        quantize_model(model, [])
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    bad.graph.node[1].op_type = "Elu"
    with pytest.raises(NotImplementedError, match="Elu"):
        quantize_model(bad, [x])


@pytest.mark.slow
def test_calibrating_mobilenet_v2_1_0_224_is_fast_enough():
    """MobileNet v2 1.0 at 224 calibrated on 100 images in a few minutes on 2 cores."""
    rng = np.random.default_rng(0)
    weights = {k: (rng.standard_normal(s) / np.sqrt(max(1, int(np.prod(s[1:]))))).astype(np.float32)
               for k, s in mobilenet.weight_shapes("v2", 1.0).items()}
    model = mobilenet.build_onnx("v2", 1.0, 224, weights)
    ds = ShapesDataset("calibration", 224)
    batches = (to_float_input(np.stack([ds[i][0] for i in range(b, b + 20)])) for b in range(0, 100, 20))
    start = time.perf_counter()
    q = quantize_model(model, batches, scheme="int8")
    elapsed = time.perf_counter() - start
    print(f"v2 1.0 224: calibrated and quantized on 100 images in {elapsed:.1f} s")
    onnx.checker.check_model(q)
    assert elapsed < 300
