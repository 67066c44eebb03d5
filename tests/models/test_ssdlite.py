"""SSD-lite: anchors, the ONNX builder against the trainer's torch network, the trainer's augmentation and
matching, and the ai.mlts DetectionPostProcess converter: whole models and hand-built graphs on
nnapi-reference against an independent numpy DETECTION_POSTPROCESSING written from NNAPI's documentation."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlts.models import import_onnx, ssdlite
from mlts.models.onnx_import.converters import detection  # importing it registers the converter
from mlts.models.mobilenet import macs as mobilenet_macs
from mlts.runtime import MltsError, ResultCode

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import train_detector  # noqa: E402


# -- an independent DETECTION_POSTPROCESSING (NNAPI's documented semantics) ------------------------------------
def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    ymin, xmin = np.maximum(box[0], boxes[:, 0]), np.maximum(box[1], boxes[:, 1])
    ymax, xmax = np.minimum(box[2], boxes[:, 2]), np.minimum(box[3], boxes[:, 3])
    inter = np.clip(ymax - ymin, 0, None) * np.clip(xmax - xmin, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / (area + areas - inter)


def _hard_nms(boxes: np.ndarray, scores: np.ndarray, threshold: float, iou_threshold: float, limit: int) -> list[int]:
    """Anchors scoring above the threshold, best first; each kept one drops those overlapping it by IoU >= the
    IoU threshold; at most `limit`."""
    alive = scores > threshold
    kept = []
    while alive.any() and len(kept) < limit:
        best = int(np.flatnonzero(alive)[np.argmax(scores[alive])])
        kept.append(best)
        alive[best] = False
        alive &= ~(_iou(boxes[best], boxes) >= iou_threshold)
    return kept


def reference_postprocess(encodings: np.ndarray, scores: np.ndarray, anchors: np.ndarray, p: dict):
    """(scores [B, N], boxes [B, N, 4], classes [B, N], counts [B]) as NNAPI documents the operation."""
    batches, _, num_classes = scores.shape
    n = p["max_num_detections"] * (1 if p["use_regular_nms"] else p["max_classes_per_detection"])
    out = (np.zeros((batches, n), np.float32), np.zeros((batches, n, 4), np.float32),
           np.zeros((batches, n), np.int32), np.zeros(batches, np.int32))
    ya, xa, ha, wa = (anchors[:, i].astype(np.float64) for i in range(4))
    for b in range(batches):
        e = encodings[b].astype(np.float64)
        yc, xc = ya + ha * e[:, 0] / p["scale_y"], xa + wa * e[:, 1] / p["scale_x"]
        h, w = ha * np.exp(e[:, 2] / p["scale_h"]), wa * np.exp(e[:, 3] / p["scale_w"])
        boxes = np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=1)
        s = scores[b]
        found = []  # (score, anchor, class)
        if p["use_regular_nms"]:
            for c in range(1, num_classes):
                found += [(s[a, c], a, c) for a in _hard_nms(boxes, s[:, c], p["score_threshold"],
                                                             p["iou_threshold"], p["detections_per_class"])]
            found = sorted(found, key=lambda f: -f[0])[:p["max_num_detections"]]
        else:
            best = s[:, 1:].max(axis=1)
            for a in _hard_nms(boxes, best, p["score_threshold"], p["iou_threshold"], p["max_num_detections"]):
                top = np.argsort(-s[a, 1:], kind="stable")[:min(num_classes - 1, p["max_classes_per_detection"])]
                found += [(s[a, c + 1], a, c + 1) for c in top]
        for k, (score, a, c) in enumerate(found):
            out[0][b, k], out[1][b, k] = score, boxes[a]
            out[2][b, k] = c - (0 if p["is_background_in_label"] else 1)
        out[3][b] = len(found)
    return out


def assert_detections_match(got: dict, expected) -> None:
    names = ssdlite.DETECTION_OUTPUTS
    assert got[names[2]].dtype == np.int32 and got[names[3]].dtype == np.int32
    np.testing.assert_array_equal(got[names[3]], expected[3])
    assert expected[3].sum() > 0, "the case detects nothing: it tests little"
    np.testing.assert_allclose(got[names[0]], expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[names[1]], expected[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[names[2]], expected[2])


# -- the description -------------------------------------------------------------------------------------
def test_anchors_by_hand():
    anchors = ssdlite.anchors()
    grids = [fm.grid for fm in ssdlite.FEATURE_MAPS]
    assert grids == [20, 10, 5]  # strides 8, 16, 32 at 160 px
    assert anchors.shape == (20 * 20 * 4 + 10 * 10 * 4 + 5 * 5 * 4, 4) == (ssdlite.num_anchors(), 4)
    # Second map (10 x 10, scale 0.27, next 0.42), cell row 2, column 7: after the 1600 anchors of the first map.
    first = 1600 + (2 * 10 + 7) * 4
    r = math.sqrt(1.5)
    expected = [[0.25, 0.75, 0.27, 0.27], [0.25, 0.75, 0.27 / r, 0.27 * r], [0.25, 0.75, 0.27 * r, 0.27 / r],
                [0.25, 0.75, math.sqrt(0.27 * 0.42), math.sqrt(0.27 * 0.42)]]
    np.testing.assert_allclose(anchors[first:first + 4], expected, rtol=1e-6)
    # Last anchor: third map's bottom-right cell, its extra square anchor.
    np.testing.assert_allclose(anchors[-1], [0.9, 0.9, math.sqrt(0.42 * 0.6), math.sqrt(0.42 * 0.6)], rtol=1e-6)


def test_sizes_by_hand():
    shapes = ssdlite.weight_shapes()
    assert ssdlite.parameters() == sum(int(np.prod(s)) for s in shapes.values())
    heads = 0
    for k, fm in enumerate(ssdlite.FEATURE_MAPS):
        cells, c = fm.grid ** 2, fm.channels
        assert shapes[f"box{k}_pw.weight"] == (4 * 4, c, 1, 1)
        assert shapes[f"class{k}_pw.weight"] == (4 * 11, c, 1, 1)
        heads += 2 * cells * c * 9 + cells * c * 4 * (4 + 11)
    backbone = mobilenet_macs("v2", 0.5, 160) - 1280 * 10  # the classifier without its final layer
    assert ssdlite.macs() == backbone + heads
    assert ssdlite.MODEL_NAME == "ssdlite_mobilenet_v2_0.5_160"


def _random_weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in ssdlite.weight_shapes().items():
        if name.endswith(".bias"):
            weights[name] = rng.normal(0, 0.1, shape).astype(np.float32)
        else:
            fan_in = int(np.prod(shape[1:]))
            weights[name] = rng.normal(0, math.sqrt(2.0 / fan_in), shape).astype(np.float32)
    for k, _ in enumerate(ssdlite.FEATURE_MAPS):  # moderate, varied scores and encodings
        weights[f"class{k}_pw.weight"] *= 0.3
        weights[f"class{k}_pw.bias"] = rng.normal(-1.5, 1.0, weights[f"class{k}_pw.bias"].shape).astype(np.float32)
        weights[f"box{k}_pw.weight"] *= 0.3
    return weights


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (1, 3, ssdlite.RESOLUTION, ssdlite.RESOLUTION)).astype(np.float32)


def _ort_network(weights, x):
    model = ssdlite.build_onnx(weights, postprocess=False)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["box_encodings", "class_scores"], {"image": x})


def test_onnx_network_matches_the_trainers_torch_network():
    weights = _random_weights(1)
    net = train_detector.build_torch()
    state = {f"convs.{k.replace('.weight', '').replace('.bias', '')}.{k.rsplit('.', 1)[1]}": torch.from_numpy(v)
             for k, v in weights.items()}
    net.load_state_dict(state)
    net.eval()
    x = _image(2)
    with torch.no_grad():
        enc, logits = net(torch.from_numpy(x))
    got_enc, got_scores = _ort_network(weights, x)
    assert got_enc.shape == (1, ssdlite.num_anchors(), 4) and got_scores.shape == (1, ssdlite.num_anchors(), 11)
    np.testing.assert_allclose(got_enc, enc.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_scores, torch.sigmoid(logits).numpy(), rtol=1e-4, atol=1e-4)
    assert {k: v.shape for k, v in train_detector.weights_of(net).items()} == ssdlite.weight_shapes()


def test_postprocessed_graph_declares_every_parameter():
    assert list(ssdlite.POSTPROCESS) == list(detection.ATTRIBUTES)  # the builder writes what the converter reads
    model = ssdlite.build_onnx(_random_weights(0))
    (node,) = [n for n in model.graph.node if n.domain == detection.DOMAIN]
    assert node.op_type == "DetectionPostProcess" and list(node.input) == ["box_encodings", "class_scores", "anchors"]
    assert {a.name for a in node.attribute} == set(ssdlite.POSTPROCESS)
    assert [o.name for o in model.graph.output] == list(ssdlite.DETECTION_OUTPUTS) == list(node.output)
    assert [o.type.tensor_type.elem_type for o in model.graph.output] == [TensorProto.FLOAT, TensorProto.FLOAT,
                                                                        TensorProto.INT32, TensorProto.INT32]
    assert {(o.domain, o.version) for o in model.opset_import} == {("", 13), ("ai.mlts", 1)}


@pytest.mark.parametrize("regular", [1, 0])
def test_whole_model_on_nnapi_reference_matches_onnxruntime_and_the_documented_postprocessing(regular):
    weights = _random_weights(3)
    params = dict(ssdlite.POSTPROCESS, use_regular_nms=regular, max_classes_per_detection=2)
    imported = import_onnx(ssdlite.build_onnx(weights, postprocess_params=params))
    assert "DETECTION_POSTPROCESSING" in [code.name for code, _, _ in imported.model.operations()]
    x = _image(4)
    got = imported.run({"image": x}, devices=["nnapi-reference"])
    enc, scores = _ort_network(weights, x)
    expected = reference_postprocess(enc, scores, ssdlite.anchors(), params)
    assert_detections_match(got, expected)
    assert got["detection_scores"].shape == (1, ssdlite.output_count(params))


# -- the trainer's augmentation and matching -------------------------------------------------------------------
def test_augmentation_moves_boxes_with_the_pixels():
    rng = np.random.default_rng(0)
    batch, size = 32, 40
    boxes = np.zeros((batch, 2, 4), np.float32)  # the second box is padding
    images = np.zeros((batch, size, size, 3), np.uint8)
    for b in range(batch):
        y0, x0 = rng.integers(2, 18, 2)
        h, w = rng.integers(5, 20, 2)
        images[b, y0:y0 + h, x0:x0 + w] = (200, 120, 40)
        boxes[b, 0] = np.array([y0, x0, y0 + h, x0 + w]) / size
    out, moved = train_detector.augment(torch.from_numpy(images), torch.from_numpy(boxes),
                                        torch.Generator().manual_seed(5))
    out, moved = out.numpy(), moved.numpy()
    inverted, orientations = set(), set()
    for b in range(batch):
        background = out[b, 0, 0]
        painted = np.any(out[b] != background, axis=-1)
        rows, cols = np.nonzero(painted)
        np.testing.assert_allclose(moved[b, 0], np.array([rows.min(), cols.min(), rows.max() + 1, cols.max() + 1]) / size,
                                   atol=1e-6)
        colour = out[b][painted][0]
        assert sorted(colour.tolist()) in ([40, 120, 200], [55, 135, 215])  # channels permuted; 255 - colour
        inverted.add(int(background[0]))
        orientations.add(tuple(np.round(moved[b, 0] - boxes[b, 0], 4)) == (0, 0, 0, 0))
    assert inverted == {0, 255} and orientations == {True, False}


def test_matching_encodes_boxes_the_postprocessing_decodes():
    anchors = ssdlite.anchors()
    truth = torch.tensor([[[0.1, 0.2, 0.3, 0.35], [0.5, 0.4, 0.95, 0.9], [0, 0, 0, 0]]], dtype=torch.float32)
    classes = torch.tensor([[3, 7, -1]])
    labels, encoded, positive = train_detector.targets(torch.from_numpy(anchors), truth, classes)
    labels, encoded, positive = labels[0].numpy(), encoded[0].numpy(), positive[0].numpy()
    assert set(labels[positive].tolist()) == {4, 8}  # class + 1 (0: background); both boxes matched
    assert (labels == -1).any() and (labels == 0).sum() > 0.9 * len(anchors)  # ignored band, background
    decoded = train_detector.decode(encoded, anchors, dict(ssdlite.POSTPROCESS))
    for a in np.flatnonzero(positive):
        box = truth[0, 0 if labels[a] == 4 else 1].numpy()
        np.testing.assert_allclose(decoded[a], box, atol=1e-5)
        np.testing.assert_allclose(ssdlite.encode_boxes(box, anchors[a]), encoded[a], rtol=1e-4, atol=1e-4)


# -- the converter on hand-built graphs ------------------------------------------------------------------------
ANCHORS = 12
PARAMS = {"scale_y": 10.0, "scale_x": 10.0, "scale_h": 5.0, "scale_w": 5.0, "use_regular_nms": 1,
          "max_num_detections": 5, "max_classes_per_detection": 1, "detections_per_class": 3,
          "score_threshold": 0.3, "iou_threshold": 0.5, "is_background_in_label": 0}


def _anchors() -> np.ndarray:
    rng = np.random.default_rng(7)  # crowded: many overlaps for NMS to settle
    centers = rng.uniform(0.3, 0.7, (ANCHORS, 2))
    sizes = rng.uniform(0.2, 0.4, (ANCHORS, 2))
    return np.concatenate([centers, sizes], axis=1).astype(np.float32)


def _graph(params: dict, *, classes: int = 4, batches: int = 2, anchors_as_input: bool = False,
           quantized_scores: bool = False, out_types=(TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.INT32,
                                                       TensorProto.INT32), boxes_shape=None) -> onnx.ModelProto:
    n = params.get("max_num_detections", 1) * (1 if params.get("use_regular_nms", 1) else
                                               params.get("max_classes_per_detection", 1))
    n = n if isinstance(n, int) and n > 0 else None  # a bad attribute: the declared size does not matter
    inputs = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, boxes_shape or [batches, ANCHORS, 4]),
              helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batches, ANCHORS, classes])]
    inits, nodes, scores = [], [], "scores"
    if anchors_as_input:
        inputs.append(helper.make_tensor_value_info("anchors", TensorProto.FLOAT, [ANCHORS, 4]))
    else:
        inits.append(numpy_helper.from_array(_anchors(), "anchors"))
    if quantized_scores:
        inits += [numpy_helper.from_array(np.array(1 / 255, np.float32), "s"),
                  numpy_helper.from_array(np.array(0, np.uint8), "zp")]
        nodes.append(helper.make_node("QuantizeLinear", ["scores", "s", "zp"], ["scores_q"], name="q"))
        scores = "scores_q"
    nodes.append(helper.make_node("DetectionPostProcess", ["boxes", scores, "anchors"], list(ssdlite.DETECTION_OUTPUTS),
                                  name="postprocess", domain="ai.mlts", **params))
    shapes = ([batches, n], [batches, n, 4], [batches, n], [batches])
    outputs = [helper.make_tensor_value_info(name, t, s) for name, t, s in zip(ssdlite.DETECTION_OUTPUTS, out_types, shapes)]
    model = helper.make_model(helper.make_graph(nodes, "pp", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.mlts", 1)])
    model.ir_version = 8
    return model


def _feeds(seed: int, classes: int = 4, batches: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    # Distinct multiples of 1/255: no ties, and exact once quantized with scale 1/255.
    scores = rng.permutation(255)[:batches * ANCHORS * classes].reshape(batches, ANCHORS, classes) / 255
    return {"boxes": rng.normal(0, 1.0, (batches, ANCHORS, 4)).astype(np.float32),
            "scores": scores.astype(np.float32)}


@pytest.mark.parametrize("changes", [
    {},
    {"use_regular_nms": 0, "max_num_detections": 3, "max_classes_per_detection": 2, "score_threshold": 0.2,
     "iou_threshold": 0.4, "is_background_in_label": 1},
    {"use_regular_nms": 0, "max_classes_per_detection": 5},  # more than the 3 classes: all of them
    {"scale_y": 2.5, "scale_h": 1.5, "detections_per_class": 1, "iou_threshold": 0.8},
])
def test_converter_matches_the_documented_semantics(changes):
    params = dict(PARAMS, **changes)
    imported = import_onnx(_graph(params))
    feeds = _feeds(11)
    got = imported.run(feeds, devices=["nnapi-reference"])
    assert_detections_match(got, reference_postprocess(feeds["boxes"], feeds["scores"], _anchors(), params))


def test_quantized_scores_are_dequantized_first():
    imported = import_onnx(_graph(PARAMS, quantized_scores=True))
    codes = [code.name for code, _, _ in imported.model.operations()]
    assert codes == ["QUANTIZE", "DEQUANTIZE", "DETECTION_POSTPROCESSING"]
    feeds = _feeds(12)
    got = imported.run(feeds, devices=["nnapi-reference"])
    assert_detections_match(got, reference_postprocess(feeds["boxes"], feeds["scores"], _anchors(), PARAMS))


def _bad(model: onnx.ModelProto, *words: str) -> None:
    with pytest.raises(MltsError) as e:
        import_onnx(model)
    assert e.value.code == ResultCode.BAD_DATA
    assert "'postprocess'" in e.value.message and "DetectionPostProcess" in e.value.message, e.value.message
    for word in words:
        assert word in e.value.message, e.value.message


@pytest.mark.parametrize("changes,words", [
    ({"scale_y": 0.0}, ("scale_y", "> 0")),
    ({"score_threshold": -0.1}, ("score_threshold", ">= 0")),
    ({"iou_threshold": -1.0}, ("iou_threshold",)),
    ({"use_regular_nms": 2}, ("use_regular_nms", "0 or 1")),
    ({"max_num_detections": 0}, ("max_num_detections",)),
    ({"detections_per_class": 0}, ("detections_per_class", "regular")),
    ({"use_regular_nms": 0, "max_classes_per_detection": 0}, ("max_classes_per_detection", "fast")),
    ({"max_num_detections": 2.5}, ("max_num_detections", "integer")),
    ({"score_thresold": 0.3}, ("unknown attribute", "score_thresold")),
    ({"scale_w": None}, ("missing attribute", "scale_w")),
])
def test_converter_refuses_bad_attributes(changes, words):
    params = {k: v for k, v in dict(PARAMS, **changes).items() if v is not None}
    _bad(_graph(params), *words)


def test_converter_refuses_bad_inputs_and_outputs():
    _bad(_graph(PARAMS, anchors_as_input=True), "anchors", "constant")
    _bad(_graph(PARAMS, boxes_shape=[2, ANCHORS]), "rank 3")
    _bad(_graph(PARAMS, boxes_shape=[2, ANCHORS + 1, 4]), "anchors")
    _bad(_graph(PARAMS, classes=1), "background")
    _bad(_graph(PARAMS, out_types=(TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.INT32)),
         "detection_classes", "int32")


def test_outputs_the_node_leaves_out_are_still_written_by_the_operation():
    model = _graph(PARAMS)
    node = model.graph.node[-1]
    del node.output[2:]
    del model.graph.output[2:]
    imported = import_onnx(model)
    feeds = _feeds(13)
    got = imported.run(feeds, devices=["nnapi-reference"])
    expected = reference_postprocess(feeds["boxes"], feeds["scores"], _anchors(), PARAMS)
    assert set(got) == {"detection_scores", "detection_boxes"}
    np.testing.assert_allclose(got["detection_scores"], expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["detection_boxes"], expected[1], rtol=1e-5, atol=1e-5)


def test_onnxruntime_values_cover_what_onnxruntime_can_run():
    """`mlts diff` against onnxruntime: the default-domain part runs there (the scores quantized and dequantized);
    the custom node's outputs have no onnxruntime value, rather than failing the whole comparison."""
    from mlts.models.onnx_import.onnx_values import onnxruntime_values

    imported = import_onnx(_graph(PARAMS, quantized_scores=True))
    feeds = _feeds(5)
    values = onnxruntime_values(imported, feeds)
    ops = imported.model.operations()
    (quantize_out,) = ops[0][2]
    expected = np.clip(np.rint(feeds["scores"] * 255), 0, 255).astype(np.uint8)  # scale 1/255, zero point 0
    np.testing.assert_array_equal(values[quantize_out].reshape(expected.shape), expected)
    assert not set(ops[2][2]) & set(values)  # DETECTION_POSTPROCESSING's outputs: nothing to compare
