"""GENERATE_PROPOSALS through the public API (run_op on nnapi-reference).

Expectations: a float64 numpy transcription of NNAPI's documented steps (anchors shifted to every
feature-map cell, moved by the deltas, clipped to the image; the pre-NMS maximum best scores; boxes not
larger than the minimum size or centered outside the image dropped) with onnx.reference
NonMaxSuppression as the hard NMS, on tie-free scores, in both layouts and every operand type; the
examples of AOSP's V1_2/generate_proposals.mod.py (TEST 1) and V1_3/generate_proposals_quant8_signed.mod.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from support.direct import run_op_direct
from support.op_runner import Input, expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import OperandCode, OperandType, OperationCode, ResultCode

F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
Q16A, Q16S, I32 = OperandCode.TENSOR_QUANT16_ASYMM, OperandCode.TENSOR_QUANT16_SYMM, OperandCode.TENSOR_INT32
INT, BOOL = OperandType.scalar(OperandCode.INT32), OperandType.scalar(OperandCode.BOOL)
SCALAR = {F32: OperandType.scalar(OperandCode.FLOAT32), F16: OperandType.scalar(OperandCode.FLOAT16),
          U8: OperandType.scalar(OperandCode.FLOAT32), S8: OperandType.scalar(OperandCode.FLOAT32)}
PROPOSALS = OperationCode.GENERATE_PROPOSALS
RANGE = {U8: (0, 255), S8: (-128, 127), Q16A: (0, 65535), Q16S: (-32768, 32767)}
#: (scores, deltas) quantization of the random tests
QUANT = {U8: ((1 / 256, 0), (0.05, 128)), S8: ((1 / 256, -128), (0.05, 0))}

rng = np.random.default_rng(52)


def stored(values, code, quant=(0.0, 0)):
    """(operand type, stored values, the real values they hold in float64) of `values` as `code`."""
    values = np.asarray(values, dtype=np.float64)
    if code in (F32, F16):
        t = OperandType.tensor(code, values.shape)
        v = values.astype(t.dtype)
        return t, v, v.astype(np.float64)
    scale, zp = quant
    t = OperandType.tensor(code, values.shape, scale, zp)
    q = np.clip(np.round(values / scale) + zp, *RANGE[code]).astype(t.dtype)
    return t, q, (q.astype(np.float64) - zp) * scale


def onnx_nms(boxes, scores, iou_threshold):
    """onnx.reference NonMaxSuppression (one batch, one class): the kept indexes, best first."""
    node = helper.make_node("NonMaxSuppression", ["b", "s", "m", "i"], ["out"])
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in "bs"] + \
             [helper.make_tensor_value_info("m", TensorProto.INT64, None),
              helper.make_tensor_value_info("i", TensorProto.FLOAT, None)]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("out", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"b": boxes[None].astype(np.float32), "s": scores[None, None].astype(np.float32),
             "m": np.array([max(len(scores), 1)], np.int64), "i": np.array([iou_threshold], np.float32)}
    return ReferenceEvaluator(model).run(None, feeds)[0][:, 2]


def expected_proposals(scores, deltas, anchors, info, strides, pre_nms, post_nms, iou_threshold, min_size):
    """NHWC real inputs -> (scores, boxes, batches) as documented, in float64."""
    batches, height, width, num_anchors = scores.shape
    ys, xs = np.meshgrid(np.arange(height) * strides[0], np.arange(width) * strides[1], indexing="ij")
    shifts = np.stack([xs, ys, xs, ys], axis=-1)[:, :, None, :]
    rois = (anchors[None, None] + shifts).reshape(-1, 4)
    out_scores, out_boxes, out_batches = [], [], []
    for b in range(batches):
        d = deltas[b].reshape(-1, 4)
        w, h = rois[:, 2] - rois[:, 0], rois[:, 3] - rois[:, 1]
        cx, cy = rois[:, 0] + w / 2 + d[:, 0] * w, rois[:, 1] + h / 2 + d[:, 1] * h
        nw, nh = w * np.exp(d[:, 2]), h * np.exp(d[:, 3])
        boxes = np.stack([np.clip(cx - nw / 2, 0, info[b, 1]), np.clip(cy - nh / 2, 0, info[b, 0]),
                          np.clip(cx + nw / 2, 0, info[b, 1]), np.clip(cy + nh / 2, 0, info[b, 0])], axis=1)
        s = scores[b].reshape(-1)
        order = np.argsort(-s)
        if 0 < pre_nms < s.size:
            order = order[:pre_nms]
        bw, bh = boxes[order, 2] - boxes[order, 0], boxes[order, 3] - boxes[order, 1]
        inside = (boxes[order, 0] + bw / 2 < info[b, 1]) & (boxes[order, 1] + bh / 2 < info[b, 0])
        order = order[(bw > min_size) & (bh > min_size) & inside]
        kept = order[onnx_nms(boxes[order], s[order], iou_threshold)] if order.size else order
        kept = kept if post_nms < 0 else kept[:post_nms]
        out_scores += s[kept].tolist()
        out_boxes += boxes[kept].tolist()
        out_batches += [b] * len(kept)
    return np.array(out_scores), np.array(out_boxes).reshape(-1, 4), np.array(out_batches)


def proposal_inputs(code, scores, deltas, anchors, info, strides, pre_nms, post_nms, iou, min_size, nchw,
                    quant=None):
    """The operation's inputs from NHWC real values, and the real values the stored inputs hold."""
    score_q, delta_q = quant or QUANT.get(code, ((0.0, 0), (0.0, 0)))
    quantized = code in (U8, S8)
    if nchw:
        scores, deltas = scores.transpose(0, 3, 1, 2), deltas.transpose(0, 3, 1, 2)
    score_t, score_v, score_real = stored(scores, code, score_q)
    delta_t, delta_v, delta_real = stored(deltas, code, delta_q)
    anchor_t, anchor_v, anchor_real = stored(anchors, Q16S if quantized else code, (0.125, 0))
    info_t, info_v, info_real = stored(info, Q16A if quantized else code, (0.125, 0))
    if nchw:
        score_real, delta_real = score_real.transpose(0, 2, 3, 1), delta_real.transpose(0, 2, 3, 1)
    s = SCALAR[code]
    cast = np.float16 if code == F16 else np.float32
    params = [float(cast(v)) for v in (*strides, iou, min_size)]
    inputs = [(score_t, score_v), (delta_t, delta_v), (anchor_t, anchor_v), (info_t, info_v), (s, params[0]),
              (s, params[1]), (INT, pre_nms), (INT, post_nms), (s, params[2]), (s, params[3]), (BOOL, nchw)]
    box_t = OperandType.tensor(Q16A, (0, 4), 0.125, 0) if quantized else OperandType.tensor(code, (0, 4))
    outputs = [score_t.with_dimensions((0,)), box_t, OperandType.tensor(I32, (0,))]
    real = (score_real, delta_real, anchor_real, info_real, params[:2], pre_nms, post_nms, params[2], params[3])
    return inputs, outputs, real


def check_proposals(code, outputs, expected, score_quant):
    scores, boxes, batches = outputs
    exp_scores, exp_boxes, exp_batches = expected
    assert len(scores) == len(exp_scores), (scores, exp_scores)
    np.testing.assert_array_equal(batches, exp_batches)
    if code in (U8, S8):
        assert_cts_close(scores, np.round(exp_scores / score_quant[0]) + score_quant[1], code)
        assert_cts_close(boxes, np.round(exp_boxes / 0.125), Q16A)
    else:
        assert_cts_close(scores, exp_scores, code)
        assert_cts_close(boxes, exp_boxes, code)


def random_case(code):
    batches, height, width = 2, 3, 4
    anchors = np.array([[-4, -2, 4, 2], [-3, -3, 3, 3], [-1.5, -5, 1.5, 5]]) + 2
    if code in (U8, S8):
        q = rng.choice(np.arange(4, 252), batches * height * width * 3, replace=False)
        scores = q.reshape(batches, height, width, 3) / 256
    else:
        scores = (rng.permutation(batches * height * width * 3) + 1).reshape(batches, height, width, 3) / 100
    deltas = rng.uniform(-0.6, 0.6, (batches, height, width, 12))
    info = np.array([[12.0, 15.0], [10.0, 16.0]])
    return scores, deltas, anchors, info


@pytest.mark.parametrize("code", [F32, F16, U8, S8], ids=["f32", "f16", "u8", "s8"])
@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("pre_nms, post_nms, min_size", [(-1, -1, 1.0), (10, -1, 0.5), (0, 4, 2.0), (30, 6, 1.0)])
def test_against_documented_steps(code, nchw, pre_nms, post_nms, min_size):
    scores, deltas, anchors, info = random_case(code)
    inputs, outputs, real = proposal_inputs(code, scores, deltas, anchors, info, (4.0, 4.0), pre_nms, post_nms,
                                            0.4, min_size, nchw)
    result = run_op(PROPOSALS, inputs, outputs)
    assert [r.dtype for r in result] == [t.dtype for t in outputs]
    expected = expected_proposals(*real)
    assert len(expected[0]) > 0
    check_proposals(code, result, expected, QUANT.get(code, ((0.0, 0),))[0])


AOSP_SCORES = np.array([0.8, 0.9, 0.85, 0.85, 0.75, 0.8, 0.9, 0.95]).reshape(1, 2, 2, 2)
AOSP_DELTAS = np.array([[0.5, 0.1, 0.1, 0.1, 0.5, 0.1, 0.5, 0.1], [-0.25, 0.1, -0.1, -0.1, -0.25, 0.1, 0.2, 0.1],
                        [0.4, -0.1, -0.2, 0.2, 0.4, -0.1, -0.2, 0.2],
                        [-0.2, -0.2, 0.2, 0.2, -0.2, -0.2, 0.2, 0.2]]).reshape(1, 2, 2, 8)
AOSP_OUT_BOXES = [[4.3785973, 2.7571943, 6.8214025, 7.642805], [1.3512788, 0.18965816, 4.648721, 4.610342],
                  [3.1903253, 1.2951627, 6.8096747, 3.1048374], [1.9812691, 3.1571944, 3.6187308, 8.042806]]


@pytest.mark.parametrize("code, quant", [(F32, None), (F16, None), (U8, ((0.01, 100), (0.05, 128))),
                                         (S8, ((0.01, -28), (0.05, 0)))], ids=["f32", "f16", "u8", "s8"])
@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
def test_aosp_example(code, quant, nchw):
    # V1_2/generate_proposals.mod.py TEST 1 (its quant8 variant) and
    # V1_3/generate_proposals_quant8_signed.mod.py TEST 1: tied scores, the first of equals kept first
    inputs, outputs, _ = proposal_inputs(code, AOSP_SCORES, AOSP_DELTAS, np.array([[0, 1, 4, 3], [1, 0, 3, 4]]),
                                         np.array([[32.0, 32.0]]), (4.0, 4.0), -1, -1, 0.3, 1.0, nchw, quant)
    scores, boxes, batches = run_op(PROPOSALS, inputs, outputs)
    expected_scores = np.array([0.95, 0.9, 0.85, 0.8])
    if quant:
        assert_cts_close(scores, np.round(expected_scores / 0.01) + quant[0][1], code)
        assert_cts_close(boxes, np.round(np.array(AOSP_OUT_BOXES) / 0.125), Q16A)
    else:
        assert_cts_close(scores, expected_scores, code)
        assert_cts_close(boxes, AOSP_OUT_BOXES, code)
    np.testing.assert_array_equal(batches, [0, 0, 0, 0])


@pytest.mark.parametrize("post_nms, min_size", [(-1, 100.0), (0, 1.0)], ids=["all_too_small", "post_nms_0"])
def test_zero_proposals(post_nms, min_size):
    inputs, outputs, _ = proposal_inputs(F32, *random_case(F32), (4.0, 4.0), -1, post_nms, 0.4, min_size, False)
    result = run_op(PROPOSALS, inputs, outputs)
    assert [r.shape for r in result] == [(0,), (0, 4), (0,)]


def test_zero_batches():
    # zero-sized inputs cannot be model inputs: the kernel is run directly
    f = OperandType.tensor
    inputs = [(f(U8, (0, 2, 2, 2), 0.01, 100), np.zeros((0, 2, 2, 2))), (f(U8, (0, 8, 2, 2), 0.05, 128),
              np.zeros((0, 8, 2, 2))), (f(Q16S, (2, 4), 0.125, 0), [[0, 8, 32, 24], [8, 0, 24, 32]]),
              (f(Q16A, (0, 2), 0.125, 0), np.zeros((0, 2))), (SCALAR[U8], 4.0), (SCALAR[U8], 4.0), (INT, -1),
              (INT, -1), (SCALAR[U8], 0.3), (SCALAR[U8], 1.0), (BOOL, True)]
    results = run_op_direct(PROPOSALS, inputs, [f(U8, (0,), 0.01, 100), f(Q16A, (0, 4), 0.125, 0), f(I32, (0,))])
    assert [(r.shape, r.dtype) for r in results] == [((0,), np.uint8), ((0, 4), np.uint16), ((0,), np.int32)]


def valid_inputs(code=F32, nchw=False):
    return proposal_inputs(code, *random_case(code), (4.0, 4.0), -1, -1, 0.4, 1.0, nchw)[:2]


def replaced(inputs, i, t, value=None):
    inputs = list(inputs)
    inputs[i] = (t, inputs[i][1] if value is None else value)
    return inputs


def test_rejects_bad_types_and_quantization():
    inputs, outputs = valid_inputs(U8)
    anchors = inputs[2][1]
    expect_error(PROPOSALS, replaced(inputs, 2, OperandType.tensor(Q16S, anchors.shape, 0.25, 0)), outputs,
                 "input 2", "scale 0.125")
    expect_error(PROPOSALS, replaced(inputs, 3, OperandType.tensor(Q16S, (2, 2), 0.125, 0)), outputs,
                 "input 3", "TENSOR_QUANT16_SYMM")
    expect_error(PROPOSALS, replaced(inputs, 3, OperandType.tensor(Q16A, (2, 2), 0.125, 2)), outputs,
                 "input 3", "zeroPoint 0")
    expect_error(PROPOSALS, inputs, [OperandType.tensor(U8, (0,), 0.5, 0), *outputs[1:]], "output 0",
                 "must equal input 0")
    expect_error(PROPOSALS, inputs, [outputs[0], OperandType.tensor(Q16A, (0, 4), 0.25, 0), outputs[2]],
                 "output 1", "scale 0.125")
    inputs, outputs = valid_inputs(F16)
    expect_error(PROPOSALS, replaced(inputs, 4, SCALAR[F32], 4.0), outputs, "input 4", "FLOAT16")
    expect_error(PROPOSALS, replaced(inputs, 10, INT, 0), outputs, "input 10", "BOOL")
    expect_error(PROPOSALS, inputs, [outputs[0], OperandType.tensor(F32, (0, 4)), outputs[2]], "output 1")


def test_rejects_bad_shapes():
    inputs, outputs = valid_inputs(F32, nchw=True)  # scores [2, 3, 3, 4], deltas [2, 12, 3, 4]
    expect_error(PROPOSALS, replaced(inputs, 1, OperandType.tensor(F32, (2, 13, 3, 4)), np.zeros((2, 13, 3, 4))),
                 outputs, "input 1", "NCHW")
    expect_error(PROPOSALS, replaced(inputs, 2, OperandType.tensor(F32, (2, 4)), np.zeros((2, 4))), outputs,
                 "input 2", "[3, 4]")
    expect_error(PROPOSALS, replaced(inputs, 3, OperandType.tensor(F32, (1, 2)), np.ones((1, 2))), outputs,
                 "input 3", "[2, 2]")
    expect_error(PROPOSALS, replaced(inputs, 0, OperandType.tensor(F32, (2, 3, 12)), np.zeros((2, 3, 12))),
                 outputs, "input 0", "rank 3")
    # the same tensors read as NHWC: the deltas' channels no longer match
    expect_error(PROPOSALS, replaced(inputs, 10, BOOL, False), outputs, "input 1", "NHWC")


def test_fails_on_an_invalid_anchor():
    inputs, outputs = valid_inputs(F32)
    anchors = inputs[2][1].copy()
    anchors[1] = [3, 0, 1, 2]  # x1 > x2
    expect_error(PROPOSALS, replaced(inputs, 2, inputs[2][0], anchors), outputs, "input 2", "anchor 1",
                 result=ResultCode.OP_FAILED)


def test_output_shapes_are_known_only_at_run_time():
    inputs, outputs = valid_inputs(F32)
    inputs = [(t, v) if t.is_scalar else (t, Input()) for t, v in inputs]
    declared = [outputs[0].with_dimensions((7,)), outputs[1].with_dimensions((7, 4)), outputs[2]]
    assert inferred_output_types(PROPOSALS, inputs, declared) == declared
