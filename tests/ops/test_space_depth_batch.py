"""DEPTH_TO_SPACE, SPACE_TO_DEPTH, BATCH_TO_SPACE_ND and SPACE_TO_BATCH_ND through the public API.

Expectations: onnx.reference DepthToSpace (mode DCR, which is NNAPI's/TensorFlow's channel order; CRD is
not) and SpaceToDepth on NCHW data; element-by-element loops written from NNAPI's description of the
batch operations; hand-computed cases; examples from AOSP's spec files. Data movement is exact, so every
type (quantized included) is compared for equality.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from support import op_data
from support.op_data import int_scalar, int_vec
from support.op_runner import Const, Input, expect_error, inferred_output_types, run_op

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

F32 = OperandCode.TENSOR_FLOAT32
F16 = OperandCode.TENSOR_FLOAT16
U8 = OperandCode.TENSOR_QUANT8_ASYMM
S8 = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
I32 = OperandCode.TENSOR_INT32
D2S, S2D = OperationCode.DEPTH_TO_SPACE, OperationCode.SPACE_TO_DEPTH
B2S, S2B = OperationCode.BATCH_TO_SPACE_ND, OperationCode.SPACE_TO_BATCH_ND
ALL_CODES = [F32, F16, U8, S8]
CODE_IDS = ["f32", "f16", "u8", "s8"]
QUANT = {U8: (0.5, 3), S8: (0.25, -7)}   # scale, zero point

rng = np.random.default_rng(11)
ttype = partial(op_data.tensor_type, quant=QUANT)
sample = partial(op_data.random_data, rng)


def layout_inputs(nchw):
    """None: the flag left out (NHWC by default); True/False: given."""
    return [] if nchw is None else [(OperandType.scalar(OperandCode.BOOL), nchw)]


def run(op, code, x, params, expected_shape, nchw=None, out_dims=None):
    (y,) = run_op(op, [(ttype(code, x.shape), x), *params, *layout_inputs(nchw)],
                  [ttype(code, expected_shape if out_dims is None else out_dims)])
    assert y.dtype == x.dtype
    return y


def in_layout(x_nhwc, nchw):
    return x_nhwc.transpose(0, 3, 1, 2) if nchw else x_nhwc


# -- independent expectations ---------------------------------------------------------------------
def onnx_nchw(op_type, x_nchw, **attrs):
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return ReferenceEvaluator(model).run(None, {"x": x_nchw.astype(np.float32)})[0].astype(x_nchw.dtype)


def space_to_batch_loops(x, block, paddings, fill):
    """NNAPI SPACE_TO_BATCH_ND on NHWC data, one element at a time: pad, then output batch
    (i * bw + j) * batches + b, pixel (y, x) holds the padded input's [b, y * bh + i, x * bw + j]."""
    (bh, bw), ((top, bottom), (left, right)) = block, paddings
    n, h, w, c = x.shape
    padded = np.full((n, top + h + bottom, left + w + right, c), fill, dtype=x.dtype)
    padded[:, top:top + h, left:left + w] = x
    oh, ow = padded.shape[1] // bh, padded.shape[2] // bw
    out = np.empty((n * bh * bw, oh, ow, c), dtype=x.dtype)
    for i in range(bh):
        for j in range(bw):
            for b in range(n):
                for y in range(oh):
                    for xx in range(ow):
                        out[(i * bw + j) * n + b, y, xx] = padded[b, y * bh + i, xx * bw + j]
    return out


def batch_to_space_loops(x, block):
    """NNAPI BATCH_TO_SPACE_ND on NHWC data: output [b, y, x] is input batch
    ((y % bh) * bw + x % bw) * out batches + b at pixel (y // bh, x // bw)."""
    bh, bw = block
    n, h, w, c = x.shape
    on = n // (bh * bw)
    out = np.empty((on, h * bh, w * bw, c), dtype=x.dtype)
    for b in range(on):
        for y in range(h * bh):
            for xx in range(w * bw):
                out[b, y, xx] = x[((y % bh) * bw + xx % bw) * on + b, y // bh, xx // bw]
    return out


# -- DEPTH_TO_SPACE / SPACE_TO_DEPTH against onnx.reference ----------------------------------------
DEPTH_CASES = [((1, 1, 1, 8), 2), ((2, 2, 3, 8), 2), ((1, 2, 2, 18), 3), ((1, 3, 2, 5), 1), ((2, 1, 2, 4), 2)]


@pytest.mark.parametrize("nchw", [None, False, True], ids=["default", "nhwc", "nchw"])
@pytest.mark.parametrize("code", ALL_CODES, ids=CODE_IDS)
@pytest.mark.parametrize("case", range(len(DEPTH_CASES)))
def test_depth_to_space_against_onnx_dcr(case, code, nchw):
    shape, b = DEPTH_CASES[case]
    x = sample(code, shape)
    expected_nchw = onnx_nchw("DepthToSpace", x.transpose(0, 3, 1, 2), blocksize=b, mode="DCR")
    expected = expected_nchw if nchw else expected_nchw.transpose(0, 2, 3, 1)
    y = run(D2S, code, in_layout(x, nchw), [int_scalar(b)], expected.shape, nchw)
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("nchw", [None, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("code", ALL_CODES, ids=CODE_IDS)
@pytest.mark.parametrize("case", range(len(DEPTH_CASES)))
def test_space_to_depth_against_onnx(case, code, nchw):
    out_shape, b = DEPTH_CASES[case]
    n, h, w, c = out_shape
    shape = (n, h * b, w * b, c // (b * b))
    x = sample(code, shape)
    expected_nchw = onnx_nchw("SpaceToDepth", x.transpose(0, 3, 1, 2), blocksize=b)
    expected = expected_nchw if nchw else expected_nchw.transpose(0, 2, 3, 1)
    y = run(S2D, code, in_layout(x, nchw), [int_scalar(b)], expected.shape, nchw)
    np.testing.assert_array_equal(y, expected)


def test_depth_to_space_order_is_dcr_not_crd():
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 1, 8)
    y = run(D2S, F32, x, [int_scalar(2)], (1, 2, 2, 2))
    # Hand-computed: the block's pixel (r, c) takes channels [(2r + c) * 2, (2r + c) * 2 + 1].
    np.testing.assert_array_equal(y.ravel(), np.arange(8))
    crd = onnx_nchw("DepthToSpace", x.transpose(0, 3, 1, 2), blocksize=2, mode="CRD").transpose(0, 2, 3, 1)
    assert not np.array_equal(y, crd)


def test_depth_space_round_trip():
    x = sample(F32, (2, 4, 6, 3))
    (d,) = run_op(S2D, [(ttype(F32, x.shape), x), int_scalar(2)], [ttype(F32, (2, 2, 3, 12))])
    (back,) = run_op(D2S, [(ttype(F32, d.shape), d), int_scalar(2)], [ttype(F32, x.shape)])
    np.testing.assert_array_equal(back, x)


# AOSP V1_2/depth_to_space_v1_2.mod.py and V1_2/space_to_depth_v1_2.mod.py, test 3 (NHWC).
AOSP_DEPTH = [10, 20, 11, 21, 14, 24, 15, 25, 12, 22, 13, 23, 16, 26, 17, 27,
              18, 28, 19, 29, 112, 212, 113, 213, 110, 210, 111, 211, 114, 214, 115, 215]
AOSP_SPACE = [10, 20, 11, 21, 12, 22, 13, 23, 14, 24, 15, 25, 16, 26, 17, 27,
              18, 28, 19, 29, 110, 210, 111, 211, 112, 212, 113, 213, 114, 214, 115, 215]


@pytest.mark.parametrize("code", ALL_CODES, ids=CODE_IDS)
def test_aosp_depth_space_examples(code):
    dtype = ttype(code, ()).dtype
    depth = np.asarray(AOSP_DEPTH, dtype=np.float64)
    if code == S8:
        depth = depth - 100     # keep the stored values in int8's range
    depth = depth.astype(dtype).reshape(1, 2, 2, 8)
    space = np.asarray(AOSP_SPACE, dtype=np.float64)
    space = (space - 100 if code == S8 else space).astype(dtype).reshape(1, 4, 4, 2)
    np.testing.assert_array_equal(run(D2S, code, depth, [int_scalar(2)], (1, 4, 4, 2)), space)
    np.testing.assert_array_equal(run(S2D, code, space, [int_scalar(2)], (1, 2, 2, 8)), depth)


def test_aosp_depth_to_space_signed_example():
    # AOSP V1_3/depth_to_space_quant8_signed.mod.py, second model.
    x = np.array([-128, -127, -124, -123, -126, -125, -122, -121, 120, 121, 124, 125, 122, 123, 126, 127],
                 np.int8).reshape(1, 2, 2, 4)
    y = run(D2S, S8, x, [int_scalar(2)], (1, 4, 4, 1))
    np.testing.assert_array_equal(y.ravel(), [-128, -127, -126, -125, -124, -123, -122, -121,
                                              120, 121, 122, 123, 124, 125, 126, 127])


# -- SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND against loops ------------------------------------------
BATCH_CASES = [  # NHWC input shape, block [bh, bw], paddings [[top, bottom], [left, right]]
    ((1, 4, 4, 1), (2, 2), ((0, 0), (0, 0))),
    ((2, 5, 2, 3), (3, 2), ((1, 0), (2, 0))),
    ((1, 4, 2, 2), (3, 2), ((1, 1), (2, 4))),
    ((3, 2, 3, 1), (1, 3), ((0, 0), (0, 0))),
    ((1, 3, 3, 2), (2, 1), ((0, 1), (1, 1))),
]


def fill_of(code):
    return QUANT.get(code, (0.0, 0))[1]


@pytest.mark.parametrize("nchw", [None, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("code", ALL_CODES, ids=CODE_IDS)
@pytest.mark.parametrize("case", range(len(BATCH_CASES)))
def test_space_to_batch_against_loops(case, code, nchw):
    shape, block, paddings = BATCH_CASES[case]
    x = sample(code, shape)
    expected = space_to_batch_loops(x, block, paddings, fill_of(code))
    y = run(S2B, code, in_layout(x, nchw), [int_vec(block), int_vec(paddings)],
            in_layout(expected, nchw).shape, nchw)
    np.testing.assert_array_equal(y, in_layout(expected, nchw))


@pytest.mark.parametrize("nchw", [None, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("code", ALL_CODES, ids=CODE_IDS)
@pytest.mark.parametrize("case", range(len(BATCH_CASES)))
def test_batch_to_space_against_loops(case, code, nchw):
    shape, block, _ = BATCH_CASES[case]
    n, h, w, c = shape
    x = sample(code, (n * block[0] * block[1], h, w, c))
    expected = batch_to_space_loops(x, block)
    y = run(B2S, code, in_layout(x, nchw), [int_vec(block)], in_layout(expected, nchw).shape, nchw)
    np.testing.assert_array_equal(y, in_layout(expected, nchw))


def test_batch_space_round_trip():
    x = sample(S8, (2, 6, 4, 3))
    (b,) = run_op(S2B, [(ttype(S8, x.shape), x), int_vec([3, 2]), int_vec([[0, 0], [0, 0]])],
                  [ttype(S8, (12, 2, 2, 3))])
    (back,) = run_op(B2S, [(ttype(S8, b.shape), b), int_vec([3, 2])], [ttype(S8, x.shape)])
    np.testing.assert_array_equal(back, x)


def test_aosp_space_to_batch_examples():
    # AOSP V1_2/space_to_batch_v1_2.mod.py test 2 and test 4 (NHWC, float).
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 4, 4, 1)
    y = run(S2B, F32, x, [int_vec([2, 2]), int_vec([[0, 0], [0, 0]])], (4, 2, 2, 1))
    np.testing.assert_array_equal(y.ravel(), [1, 3, 9, 11, 2, 4, 10, 12, 5, 7, 13, 15, 6, 8, 14, 16])
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 4, 2, 1)
    y = run(S2B, F32, x, [int_vec([3, 2]), int_vec([[1, 1], [2, 4]])], (6, 2, 4, 1))
    np.testing.assert_array_equal(y.ravel(), [0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0,
                                              0, 1, 0, 0, 0, 7, 0, 0, 0, 2, 0, 0, 0, 8, 0, 0,
                                              0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0])


def test_aosp_space_to_batch_pads_with_zero_point():
    # AOSP V1_2/space_to_batch_quant8_nonzero.mod.py (zero point 9) and V1_3/space_to_batch_quant8_signed.mod.py
    # (zero point -119): the padding is real zero, i.e. the zero point.
    x = np.arange(1, 11, dtype=np.uint8).reshape(1, 5, 2, 1)
    (y,) = run_op(S2B, [(OperandType.tensor(U8, x.shape, 1.0, 9), x), int_vec([3, 2]),
                        int_vec([[1, 0], [2, 0]])], [OperandType.tensor(U8, (6, 2, 2, 1), 1.0, 9)])
    np.testing.assert_array_equal(y.ravel(), [9, 9, 9, 5, 9, 9, 9, 6, 9, 1, 9, 7, 9, 2, 9, 8, 9, 3, 9, 9, 9, 4, 9, 10])
    x = np.arange(-127, -117, dtype=np.int8).reshape(1, 5, 2, 1)
    (y,) = run_op(S2B, [(OperandType.tensor(S8, x.shape, 1.0, -119), x), int_vec([3, 2]),
                        int_vec([[1, 0], [2, 0]])], [OperandType.tensor(S8, (6, 2, 2, 1), 1.0, -119)])
    np.testing.assert_array_equal(y.ravel(), [-119, -119, -119, -123, -119, -119, -119, -122, -119, -127, -119,
                                              -121, -119, -126, -119, -120, -119, -125, -119, -119, -119, -124,
                                              -119, -118])


def test_aosp_batch_to_space_example():
    # AOSP V1_2/batch_to_space_v1_2.mod.py test 2, in NCHW (AddNchw: [4, 2, 2, 1] -> [4, 1, 2, 2]).
    x = np.arange(1, 17, dtype=np.float16).reshape(4, 2, 2, 1)
    y = run(B2S, F16, x.transpose(0, 3, 1, 2), [int_vec([2, 2])], (1, 1, 4, 4), nchw=True)
    np.testing.assert_array_equal(y.transpose(0, 2, 3, 1).ravel(),
                                  [1, 5, 2, 6, 9, 13, 10, 14, 3, 7, 4, 8, 11, 15, 12, 16])


def test_hand_computed_batch_to_space_nchw():
    # 4 batches of one 1x1 pixel with 2 channels -> one 2x2 image; batch k goes to pixel (k // 2, k % 2).
    x = np.array([[1, 2], [3, 4], [5, 6], [7, 8]], np.float32).reshape(4, 2, 1, 1)
    y = run(B2S, F32, x, [int_vec([2, 2])], (1, 2, 2, 2), nchw=True)
    np.testing.assert_array_equal(y[0, 0], [[1, 3], [5, 7]])
    np.testing.assert_array_equal(y[0, 1], [[2, 4], [6, 8]])


# -- optional layout and non-constant parameters --------------------------------------------------
@pytest.mark.parametrize("op, params, out_shape", [
    (D2S, [int_scalar(2)], (1, 4, 4, 2)),
    (B2S, [int_vec([2, 2])], (1, 4, 4, 8)),
    (S2B, [int_vec([2, 2]), int_vec([[0, 0], [0, 0]])], (16, 1, 1, 8)),
], ids=["d2s", "b2s", "s2b"])
def test_layout_flag_as_no_value_means_nhwc(op, params, out_shape):
    x = sample(F32, (1, 2, 2, 8) if op == D2S else (4, 2, 2, 8))
    (given,) = run_op(op, [(ttype(F32, x.shape), x), *params, (OperandType.scalar(OperandCode.BOOL), False)],
                      [ttype(F32, out_shape)])
    (omitted,) = run_op(op, [(ttype(F32, x.shape), x), *params, (OperandType.scalar(OperandCode.BOOL), None)],
                        [ttype(F32, out_shape)])
    np.testing.assert_array_equal(given, omitted)


def test_block_shape_and_paddings_as_model_inputs():
    shape, block, paddings = BATCH_CASES[2]
    x = sample(U8, shape)
    expected = space_to_batch_loops(x, block, paddings, fill_of(U8))
    y = run(S2B, U8, x, [int_vec(block, const=False), int_vec(paddings, const=False)], expected.shape,
            out_dims=(0, 0, 0, 0))
    np.testing.assert_array_equal(y, expected)
    back = run(B2S, U8, expected, [int_vec(block, const=False)], None, out_dims=(0, 0, 0, 0))
    assert back.shape == (1, 6, 8, 2)


def test_unknown_input_dims_resolved_at_run_time():
    x = sample(F16, (2, 2, 3, 8))
    expected = onnx_nchw("DepthToSpace", x.transpose(0, 3, 1, 2), blocksize=2, mode="DCR").transpose(0, 2, 3, 1)
    (y,) = run_op(D2S, [(ttype(F16, (0, 2, 0, 8)), x), int_scalar(2)], [ttype(F16, (0, 0, 0, 0))])
    np.testing.assert_array_equal(y, expected)


def inferred_output(op, inputs, out_type):
    """inferred_output_types with `None` meaning a model input and any other value a constant."""
    return inferred_output_types(op, [(t, Input() if v is None else Const(v)) for t, v in inputs], [out_type])[0]


BOOL = OperandType.scalar(OperandCode.BOOL)
INT = OperandType.scalar(OperandCode.INT32)


def test_build_time_shape_inference():
    unknown = ttype(F32, (0, 0, 0, 0))
    cases = [
        (D2S, [(ttype(F32, (2, 3, 5, 8)), None), (INT, 2)], (2, 6, 10, 2)),
        (D2S, [(ttype(F32, (2, 8, 3, 5)), None), (INT, 2), (BOOL, True)], (2, 2, 6, 10)),
        (S2D, [(ttype(F32, (1, 6, 4, 3)), None), (INT, 2), (BOOL, False)], (1, 3, 2, 12)),
        (S2D, [(ttype(F32, (1, 3, 6, 4)), None), (INT, 2), (BOOL, True)], (1, 12, 3, 2)),
        (B2S, [(ttype(F32, (12, 2, 2, 3)), None), (OperandType.tensor(I32, (2,)), [3, 2])], (2, 6, 4, 3)),
        (B2S, [(ttype(F32, (12, 3, 2, 2)), None), (OperandType.tensor(I32, (2,)), [3, 2]), (BOOL, True)],
         (2, 3, 6, 4)),
        (S2B, [(ttype(F32, (1, 4, 2, 2)), None), (OperandType.tensor(I32, (2,)), [3, 2]),
               (OperandType.tensor(I32, (2, 2)), [[1, 1], [2, 4]])], (6, 2, 4, 2)),
        (S2B, [(ttype(F32, (1, 2, 4, 2)), None), (OperandType.tensor(I32, (2,)), [3, 2]),
               (OperandType.tensor(I32, (2, 2)), [[1, 1], [2, 4]]), (BOOL, True)], (6, 2, 2, 4)),
    ]
    for op, inputs, expected in cases:
        assert inferred_output(op, inputs, unknown).dimensions == expected, (op.name, inputs)


def test_build_time_inference_waits_for_unknowns():
    unknown = ttype(F32, (0, 0, 0, 0))
    # An unknown input dimension, or a block shape only known at run time: nothing inferred, no error.
    assert inferred_output(D2S, [(ttype(F32, (0, 2, 2, 8)), None), (INT, 2)], unknown).dimensions == (0, 0, 0, 0)
    assert inferred_output(B2S, [(ttype(F32, (4, 2, 2, 8)), None), (OperandType.tensor(I32, (2,)), None)],
                           unknown).dimensions == (0, 0, 0, 0)


def test_declared_output_shape_must_match():
    with pytest.raises(MltsError) as info:
        inferred_output(D2S, [(ttype(F32, (1, 2, 2, 8)), None), (INT, 2)], ttype(F32, (1, 4, 4, 1)))
    assert info.value.code == ResultCode.BAD_DATA
    assert "output 0" in str(info.value)


# -- validation -----------------------------------------------------------------------------------
def f32(shape):
    return (ttype(F32, shape), np.zeros(shape, np.float32))


def test_rejects_bad_block_size():
    expect_error(D2S, [f32((1, 2, 2, 8)), int_scalar(0)], [ttype(F32, (1, 2, 2, 8))], "input 1", ">= 1")
    expect_error(S2D, [f32((1, 2, 2, 8)), int_scalar(-2)], [ttype(F32, (1, 2, 2, 8))], "input 1", ">= 1")
    expect_error(D2S, [f32((1, 2, 2, 8)), int_scalar(3)], [ttype(F32, (0, 0, 0, 0))], "input 1", "depth 8")
    expect_error(S2D, [f32((1, 4, 3, 1)), int_scalar(2)], [ttype(F32, (0, 0, 0, 0))], "input 1", "width 3")
    expect_error(D2S, [f32((1, 2, 2, 8)), (OperandType.scalar(OperandCode.FLOAT32), 2.0)],
                    [ttype(F32, (1, 4, 4, 2))], "input 1", "FLOAT32")


def test_rejects_bad_block_shape():
    expect_error(B2S, [f32((4, 1, 1, 1)), int_vec([2, 2, 1])], [ttype(F32, (1, 2, 2, 1))], "input 1", "[2]")
    expect_error(B2S, [f32((4, 1, 1, 1)), int_vec([[2, 2]])], [ttype(F32, (1, 2, 2, 1))], "input 1", "1-D")
    expect_error(B2S, [f32((4, 1, 1, 1)), int_vec([0, 2])], [ttype(F32, (1, 2, 2, 1))], "input 1", ">= 1")
    expect_error(B2S, [f32((6, 1, 1, 1)), int_vec([2, 2])], [ttype(F32, (0, 0, 0, 0))], "input 1", "batch 6")
    expect_error(S2B, [f32((1, 2, 2, 1)), int_vec([2, -1]), int_vec([[0, 0], [0, 0]])],
                    [ttype(F32, (0, 0, 0, 0))], "input 1", ">= 1")
    expect_error(S2B, [f32((1, 3, 2, 1)), int_vec([2, 2]), int_vec([[0, 0], [0, 0]])],
                    [ttype(F32, (0, 0, 0, 0))], "input 1", "padded height 3")


def test_rejects_bad_paddings():
    expect_error(S2B, [f32((1, 2, 2, 1)), int_vec([2, 2]), int_vec([[0, 0, 0], [0, 0, 0]])],
                    [ttype(F32, (0, 0, 0, 0))], "input 2", "[2, 2]")
    expect_error(S2B, [f32((1, 2, 2, 1)), int_vec([2, 2]), int_vec([[0, 0]] * 4)],
                    [ttype(F32, (0, 0, 0, 0))], "input 2", "[2, 2]")
    expect_error(S2B, [f32((1, 2, 2, 1)), int_vec([2, 2]), int_vec([0, 0, 0, 0])],
                    [ttype(F32, (0, 0, 0, 0))], "input 2", "2-D")
    expect_error(S2B, [f32((1, 2, 2, 1)), int_vec([2, 2]), int_vec([[1, -1], [0, 0]])],
                    [ttype(F32, (0, 0, 0, 0))], "input 2", ">= 0")


def test_rejects_bad_parameters_given_at_run_time():
    # Parameters that are model inputs are checked when the model runs.
    with pytest.raises(MltsError) as info:
        run_op(S2B, [f32((1, 2, 2, 1)), int_vec([2, 2]), int_vec([[1, -1], [0, 0]], const=False)],
               [ttype(F32, (0, 0, 0, 0))])
    assert "paddings must be >= 0" in str(info.value)
    with pytest.raises(MltsError) as info:
        run_op(B2S, [f32((6, 1, 1, 1)), int_vec([2, 2], const=False)], [ttype(F32, (0, 0, 0, 0))])
    assert "must divide the input batch 6" in str(info.value)


def test_rejects_bad_tensors_and_counts():
    expect_error(D2S, [f32((2, 2, 8)), int_scalar(2)], [ttype(F32, (4, 4, 2))], "input 0", "rank 3")
    expect_error(S2B, [f32((1, 2, 2, 1, 1)), int_vec([2, 2]), int_vec([[0, 0], [0, 0]])],
                    [ttype(F32, (0, 0, 0, 0, 0))], "input 0", "rank 5")
    x = np.zeros((1, 2, 2, 4), np.int32)
    expect_error(D2S, [(OperandType.tensor(I32, x.shape), x), int_scalar(2)],
                    [OperandType.tensor(I32, (1, 4, 4, 1))], "input 0", "TENSOR_INT32")
    expect_error(D2S, [f32((1, 2, 2, 4)), int_scalar(2), int_scalar(1)], [ttype(F32, (1, 4, 4, 1))],
                    "input 2", "BOOL")
    expect_error(D2S, [f32((1, 2, 2, 4))], [ttype(F32, (1, 4, 4, 1))], "inputs")
    expect_error(S2B, [f32((1, 2, 2, 1)), int_vec([2, 2])], [ttype(F32, (4, 1, 1, 1))], "3 or 4 inputs")
    expect_error(B2S, [f32((4, 1, 1, 1)), int_vec([2, 2]), (BOOL, False), (BOOL, False)],
                    [ttype(F32, (1, 2, 2, 1))], "2 or 3 inputs")


@pytest.mark.parametrize("op, params, in_shape, out_shape", [
    (D2S, [int_scalar(2)], (1, 2, 2, 4), (1, 4, 4, 1)),
    (S2D, [int_scalar(2)], (1, 4, 4, 1), (1, 2, 2, 4)),
    (B2S, [int_vec([2, 2])], (4, 1, 1, 1), (1, 2, 2, 1)),
    (S2B, [int_vec([2, 2]), int_vec([[0, 0], [0, 0]])], (1, 2, 2, 1), (4, 1, 1, 1)),
], ids=["d2s", "s2d", "b2s", "s2b"])
def test_rejects_changed_output_type_or_quantization(op, params, in_shape, out_shape):
    q = (OperandType.tensor(U8, in_shape, 0.5, 3), np.zeros(in_shape, np.uint8))
    expect_error(op, [q, *params], [OperandType.tensor(U8, out_shape, 0.5, 4)], "output 0", "zp")
    expect_error(op, [q, *params], [OperandType.tensor(S8, out_shape, 0.5, 3)], "output 0", "TENSOR_QUANT8_ASYMM")
    expect_error(op, [f32(in_shape), *params], [OperandType.tensor(F16, out_shape)], "output 0", "TENSOR_FLOAT16")
