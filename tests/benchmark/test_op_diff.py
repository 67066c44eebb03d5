"""mlts.benchmark.op_diff: output differences in each type's units (hand-computed), the model with every
operation output made an output, and OperationDiffer on nnapi-reference, on two vendor-style quantized
CONV_2D drivers (tests/quantized_rounding_drivers.py: one rounding once where NNAPI rounds twice, within
one step; one ignoring the input zero point, out of tolerance on exactly the convolutions whose input zero
point is not 0), and against onnxruntime on onnxruntime-quantized MobileNets (issue 17: every operation
within NNAPI's per-operation tolerance)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from mlts.benchmark.op_diff import (OperationDiffer, compare_operand, first_out_of_tolerance, per_operation_verdict,
                                    with_every_output)
from mlts.benchmark.single_op import reference_values
from mlts.cli import main
from mlts.models import import_onnx
from mlts.models.mobilenet import build_onnx
from mlts.runtime import (Compilation, Execution, MltsError, OperandCode, OperandType, OperationCode, ResultCode,
                          get_device, register_driver, unregister_driver)
from mlts.runtime.enums import FuseCode
from mlts.runtime.operand_type import SymmPerChannelQuantParams
from mlts.stress.conformance.models import Builder

import quantized_rounding_drivers as Q

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from onnx_import_helpers import const, image_batch, make_model, mobilenet_weights, quantize, tensor  # noqa: E402

ort = pytest.importorskip("onnxruntime")

REF = "nnapi-reference"
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
F32, I32 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_INT32
INT = OperandType(OperandCode.INT32)


@pytest.fixture(scope="module")
def npu():
    """The two test drivers as devices: {"single": ..., "ignores": ...} (unregistered afterwards)."""
    devices = {"single": register_driver(Q.create_single_rounding()),
               "ignores": register_driver(Q.create_ignores_zero_point())}
    yield devices
    for d in devices.values():
        unregister_driver(d.name)


# -- compare_operand ------------------------------------------------------------------------------
def test_quantized_differences_are_steps_judged_by_one_step():
    d = compare_operand(7, U8, np.array([10, 12, 200], np.uint8), np.array([11, 12, 198], np.uint8))
    assert (d.operand, d.unit, d.max_diff, d.max_abs_diff, d.within_tolerance, d.elements) == \
        (7, "steps", 2.0, 2.0, False, 3)
    assert d.text() == "2 steps"
    one = compare_operand(7, U8, np.array([0, 255], np.uint8), np.array([1, 254], np.uint8))
    assert (one.max_diff, one.within_tolerance, one.text()) == (1.0, True, "1 step")
    assert compare_operand(7, U8, np.array([3], np.uint8), np.array([3], np.uint8)).text() == "0 steps"
    # no unsigned wrap-around: 0 against 255 is 255 steps; signed types the same
    assert compare_operand(1, U8, np.array([0], np.uint8), np.array([255], np.uint8)).max_diff == 255
    assert compare_operand(1, S8, np.array([-128], np.int8), np.array([127], np.int8)).max_diff == 255


def test_float_differences_are_relative_to_the_largest_expected_magnitude():
    expected = np.array([2.0, -4.0, 1.0], np.float32)
    d = compare_operand(3, F32, np.array([2.0, -4.0, 1.5], np.float32), expected)
    assert (d.unit, d.max_abs_diff, d.max_diff, d.within_tolerance) == ("relative", 0.5, 0.125, False)
    assert d.text() == "1.25e-01 rel"
    # the CTS float32 rule: |e - a| <= 1e-5 + 5 ulp(1) * |e|
    close = compare_operand(3, F32, expected + np.float32(2e-6) * np.abs(expected), expected)
    assert close.within_tolerance and 0 < close.max_abs_diff <= 1e-5
    zero = compare_operand(3, F32, np.array([0.0, 3e-5], np.float32), np.zeros(2, np.float32))
    assert (zero.max_diff, zero.max_abs_diff, zero.within_tolerance) == (pytest.approx(3e-5), pytest.approx(3e-5),
                                                                        False)  # no scale: the absolute difference


def test_relaxed_float_uses_the_float16_rule():
    expected = np.array([1.0, 2.0], np.float32)
    actual = expected + np.float32(1e-3)
    assert not compare_operand(0, F32, actual, expected).within_tolerance
    assert compare_operand(0, F32, actual, expected, relaxed=True).within_tolerance


def test_nan_and_infinities():
    nan, inf = np.float32("nan"), np.float32("inf")
    same = compare_operand(0, F32, np.array([nan, inf, 1.0], np.float32), np.array([nan, inf, 1.0], np.float32))
    assert (same.max_abs_diff, same.max_diff, same.within_tolerance) == (0.0, 0.0, True)  # NaN = NaN, inf = inf
    lost = compare_operand(0, F32, np.array([nan, 1.0], np.float32), np.array([1.0, 1.0], np.float32))
    assert lost.max_abs_diff == np.inf and not lost.within_tolerance
    made = compare_operand(0, F32, np.array([2.0, 4.0], np.float32), np.array([nan, 4.0], np.float32))
    assert made.max_abs_diff == np.inf and not made.within_tolerance
    overflow = compare_operand(0, F32, np.array([inf, 1.0], np.float32), np.array([8.0, 1.0], np.float32))
    assert overflow.max_abs_diff == np.inf and not overflow.within_tolerance
    # infinities in the expected tensor do not make the scale infinite
    scaled = compare_operand(0, F32, np.array([inf, 3.0], np.float32), np.array([inf, 4.0], np.float32))
    assert (scaled.max_abs_diff, scaled.max_diff) == (1.0, 0.25)


def test_integer_and_boolean_differences_count_mismatches():
    d = compare_operand(0, I32, np.array([1, 5, 3, 9], np.int32), np.array([1, 2, 3, 4], np.int32))
    assert (d.unit, d.max_diff, d.within_tolerance, d.text()) == ("mismatches", 2.0, False, "2 mismatches")
    b = compare_operand(0, OperandCode.TENSOR_BOOL8, np.array([True, False]), np.array([True, True]))
    assert (b.max_diff, b.within_tolerance, b.text()) == (1.0, False, "1 mismatch")
    assert compare_operand(0, I32, np.array([4], np.int32), np.array([4], np.int32)).within_tolerance


def test_rank_0_against_1_but_never_a_transposition():
    d = compare_operand(0, F32, np.array([2.5], np.float32), np.array(2.5, np.float32))  # ONNX scalar, NNAPI [1]
    assert (d.max_diff, d.within_tolerance, d.elements) == (0.0, True, 1)
    assert compare_operand(0, U8, np.array([[4]], np.uint8), np.array([6], np.uint8)).max_diff == 2
    for actual, expected in ((np.zeros((2, 3)), np.zeros((3, 2))), (np.zeros(3), np.zeros(4))):
        with pytest.raises(MltsError) as info:
            compare_operand(5, F32, actual.astype(np.float32), expected.astype(np.float32))
        assert info.value.code == ResultCode.OP_FAILED and "operand 5: shape" in str(info.value)


# -- with_every_output -----------------------------------------------------------------------------
def _float_chain():
    """x -> a = x + c -> m = a * a -> out = m - x (the model's one output); hand-computable in float32."""
    t = OperandType(F32, (2, 3))
    b = Builder()
    x = b.operand(t)
    c = b.operand(t, np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    a = b.arith(OperationCode.ADD, x, c, t)
    m = b.arith(OperationCode.MUL, a, a, t)
    out = b.arith(OperationCode.SUB, m, x, t)
    return b.finish([x], [out]), (x, a, m, out)


def _run(model, devices, feeds):
    c = Compilation.for_devices(model, devices)
    c.finish()
    ex = Execution(c)
    for k, v in enumerate(feeds):
        ex.set_input(k, v)
    ex.compute()
    return [ex.get_output(k) for k in range(len(model.outputs))]


def test_with_every_output_makes_every_operation_output_an_output():
    model, (x, a, m, out) = _float_chain()
    copy, outputs = with_every_output(model)
    assert outputs == [out, a, m]  # the model's own outputs first, then every other operation output
    assert len(copy.outputs) == 3 and copy.operand_count == model.operand_count
    assert copy.operations() == model.operations() and list(model.outputs) == [out]  # the original is unchanged
    xv = np.array([[-1, 0, 2], [3, -5, 0.5]], np.float32)
    av = xv + np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    expected = {a: av, m: av * av, out: av * av - xv}
    got = dict(zip(outputs, _run(copy, [get_device(REF)], [xv])))
    for operand, value in expected.items():
        np.testing.assert_array_equal(got[operand], value)
    reference = reference_values(model, [xv])  # the executor's values, as OperationDiffer expects them
    for operand in outputs:
        np.testing.assert_array_equal(got[operand], reference[operand])


def test_a_model_with_control_flow_cannot_be_diffed():
    t = OperandType(F32, (3,))

    def branch(code):
        b = Builder()
        p, q = b.operand(t), b.operand(t)
        return b.finish([p, q], [b.arith(code, p, q, t)])

    b = Builder()
    cond, x, y = b.operand(OperandType(OperandCode.TENSOR_BOOL8, (1,))), b.operand(t), b.operand(t)
    out = b.op(OperationCode.IF, [cond, b.ref(branch(OperationCode.ADD)), b.ref(branch(OperationCode.SUB)), x, y], t)
    with pytest.raises(MltsError) as info:
        with_every_output(b.finish([cond, x, y], [out]))
    assert info.value.code == ResultCode.BAD_DATA and "control flow" in str(info.value)


# -- OperationDiffer with expected values of its own -----------------------------------------------
def test_an_operand_without_an_expected_value_carries_on_from_the_expected_values():
    """Another reference says a = x + c + 0.5 (and so out = (a*a) - x from it); m has no expected value: m is
    fed nnapi-reference's MUL of the expected a, so SUB is judged on what it does, not on a's difference."""
    model, (x, a, m, out) = _float_chain()
    xv = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    other_a = xv + np.arange(1, 7, dtype=np.float32).reshape(2, 3) + np.float32(0.5)
    expected = {x: xv, a: other_a, out: other_a * other_a - xv}
    differ = OperationDiffer(model, [get_device(REF)], [xv], expected=expected)
    np.testing.assert_array_equal(differ.feeds[m], other_a * other_a)
    rows = differ.isolated()
    assert [(r.operation, r.status) for r in rows] == [("ADD", "out of tolerance"), ("MUL", "not judged"),
                                                       ("SUB", "ok")]
    assert rows[0].isolated[0].max_abs_diff == 0.5 and rows[2].isolated[0].max_abs_diff == 0.0
    assert first_out_of_tolerance(rows).index == 0
    assert differ.end_to_end(rows) is None
    assert rows[1].end_to_end == [] and rows[0].end_to_end[0].max_abs_diff == 0.5


# -- hand-built quantized CONV_2D on the test drivers -------------------------------------------------
IN_SCALE, IN_ZP, W_SCALE, W_ZP = 0.05, 120, 0.02, 130
OUT_QUANT = {FuseCode.NONE: (0.4, 100), FuseCode.RELU: (0.4, 30), FuseCode.RELU1: (0.01, 128),
             FuseCode.RELU6: (0.05, 5)}


def conv_model(fuse: int = FuseCode.NONE, per_channel: bool = False, form: str = "explicit"):
    """One quantized CONV_2D, input [1, 7, 7, 3] (zero point 120), filter [4, 3, 3, 3]; `form`: "explicit"
    (pads 1, 2, 0, 1, strides w 2, h 1: 10 inputs), "dilated" (13 inputs, dilation 2), "implicit", "nchw"."""
    rng = np.random.default_rng(int(fuse) + 10 * per_channel)
    b = Builder()
    scalar = lambda v: b.operand(INT, np.int32(v))  # noqa: E731
    nchw = form == "nchw"
    x = b.operand(OperandType.tensor(U8, (1, 3, 7, 7) if nchw else (1, 7, 7, 3), IN_SCALE, IN_ZP))
    if per_channel:
        scales = (0.01, 0.02, 0.015, 0.03)
        w = b.operand(OperandType.tensor(OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, (4, 3, 3, 3), 0.0, 0,
                                         SymmPerChannelQuantParams(scales, 0)),
                      rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8))
        bias_scale = 0.0
    else:
        w = b.operand(OperandType.tensor(U8, (4, 3, 3, 3), W_SCALE, W_ZP),
                      rng.integers(0, 256, (4, 3, 3, 3), np.uint8))
        bias_scale = float(np.float32(IN_SCALE) * np.float32(W_SCALE))
    bias = b.operand(OperandType.tensor(I32, (4,), bias_scale, 0), rng.integers(-3000, 3000, 4).astype(np.int32))
    if form == "implicit":
        params = [scalar(1), scalar(2), scalar(1), scalar(fuse)]  # SAME, stride w 2, h 1
        shape = (1, 7, 4, 4)
    else:
        params = [scalar(v) for v in (1, 2, 0, 1, 2, 1, fuse)]
        shape = (1, 6, 4, 4)
        if form == "dilated":
            params += [b.operand(OperandType(OperandCode.BOOL), np.bool_(False)), scalar(2), scalar(2)]
            shape = (1, 4, 3, 4)  # h: 7 + 1 - 5 + 1, w: (7 + 3 - 5) // 2 + 1
        if nchw:
            params.append(b.operand(OperandType(OperandCode.BOOL), np.bool_(True)))
            shape = (1, 4, 6, 4)
    scale, zp = OUT_QUANT[FuseCode(fuse)]
    out = b.op(OperationCode.CONV_2D, [x, w, bias] + params, OperandType.tensor(U8, shape, scale, zp))
    model = b.finish([x], [out])
    x_value = rng.integers(0, 256, model.operand_type(x).dimensions).astype(np.uint8)
    return model, x_value


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("fuse", list(FuseCode), ids=[f.name for f in FuseCode])
def test_single_rounding_conv_is_within_one_step_and_ignoring_the_zero_point_is_not(npu, fuse, per_channel):
    model, x = conv_model(fuse, per_channel, "dilated" if fuse == FuseCode.RELU else "explicit")
    for kind, within in (("single", True), ("ignores", False)):
        differ = OperationDiffer(model, [npu[kind]], [x])
        (row,) = differ.isolated()
        (diff,) = row.isolated
        assert row.devices == [npu[kind].name]
        assert (row.status == "ok") is within and diff.within_tolerance is within, (kind, diff)
        if within:
            assert diff.max_diff <= 1
        # the driver's own result stays in the fused activation's range (hand-computed bounds)
        out = _run(model, [npu[kind]], [x])[0].astype(int)
        scale, zp = OUT_QUANT[fuse]
        lo = {FuseCode.NONE: 0, FuseCode.RELU: zp, FuseCode.RELU1: zp - 100, FuseCode.RELU6: zp}[fuse]
        hi = {FuseCode.RELU1: zp + 100, FuseCode.RELU6: zp + 120}.get(fuse, 255)
        assert lo <= out.min() and out.max() <= hi


@pytest.mark.parametrize("form, message", [("implicit", "only the explicit-padding form"),
                                           ("nchw", "the NCHW layout is not implemented")])
def test_the_test_driver_fails_clearly_on_forms_it_does_not_implement(npu, form, message):
    model, x = conv_model(form=form)
    with pytest.raises(MltsError) as info:
        _run(model, [npu["single"]], [x])
    assert info.value.code == ResultCode.OP_FAILED and message in str(info.value)
    (row,) = OperationDiffer(model, [npu["single"]], [x]).isolated()
    assert row.status == "error" and message in row.message and row.isolated is None
    verdict = per_operation_verdict(model, [npu["single"]], [x])
    assert not verdict["pass"] and verdict["first_out_of_tolerance"] is None
    assert len(verdict["operations_failed"]) == 1 and verdict["operations_failed"][0].startswith("0 CONV_2D: ")


# -- an imported quantized conv stack -----------------------------------------------------------------
def conv_stack() -> onnx.ModelProto:
    """Four Convs: 3x3 + Relu; 3x3 stride 2 with asymmetric pads; 3x3 dilation 2 + Clip(0, 6); 1x1 + Clip(-1, 1).
    Quantized by onnxruntime, the inputs of the first and third have non-zero zero points."""
    rng = np.random.default_rng(7)
    r = lambda *s, k=0.3: (rng.standard_normal(s) * k).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv_a", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu_a"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv_b", pads=[1, 1, 0, 0], strides=[2, 2]),
        helper.make_node("Conv", ["c2", "w3", "b3"], ["c3"], name="conv_c", pads=[2, 2, 2, 2], dilations=[2, 2]),
        helper.make_node("Clip", ["c3", "lo", "hi"], ["r3"], name="clip_c"),
        helper.make_node("Conv", ["r3", "w4", "b4"], ["c4"], name="conv_d"),
        helper.make_node("Clip", ["c4", "m1", "p1"], ["y"], name="clip_d"),
    ]
    inits = [const("w1", r(8, 3, 3, 3)), const("b1", r(8, k=0.1)), const("w2", r(8, 8, 3, 3, k=0.2)),
             const("b2", r(8, k=0.1)), const("w3", r(6, 8, 3, 3, k=0.2)), const("b3", r(6, k=0.1)),
             const("w4", r(4, 6, 1, 1)), const("b4", r(4, k=0.1)), const("lo", np.float32(0)),
             const("hi", np.float32(6)), const("m1", np.float32(-1)), const("p1", np.float32(1))]
    return make_model(nodes, [tensor("x", [1, 3, 16, 16])], [tensor("y", [1, 4, 8, 8])], inits)


@pytest.fixture(scope="module", params=[False, True], ids=["per-tensor", "per-channel"])
def stack(request):
    imported = import_onnx(quantize(conv_stack(), "x", [1, 3, 16, 16], fmt="QDQ", per_channel=request.param))
    x = np.random.default_rng(3).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    return imported, imported.input_arrays({"x": x})


def _conv_rows(imported):
    """(index, ONNX node, input zero point) of each CONV_2D."""
    return [(j, imported.origin(j), imported.model.operand_type(ins[0]).zero_point)
            for j, (code, ins, _) in enumerate(imported.model.operations()) if code == OperationCode.CONV_2D]


def test_the_stack_has_what_the_drivers_must_handle(stack):
    imported, _ = stack
    convs = _conv_rows(imported)
    assert [origin for _, origin, _ in convs] == [f"node 'conv_{c}' (Conv, opset 13)" for c in "abcd"]
    assert [zp != 0 for _, _, zp in convs] == [True, False, True, False]
    counts = [len(imported.model.operations()[j][1]) for j, _, _ in convs]
    assert counts == [10, 10, 13, 10]  # explicit padding; the dilated one with the layout flag and dilations


def test_nnapi_reference_against_itself_is_all_zero(stack):
    imported, arrays = stack
    differ = OperationDiffer(imported.model, [get_device(REF)], arrays, origins=imported.origin)
    rows = differ.isolated()
    assert differ.end_to_end(rows) is None
    assert len(rows) == len(imported.model.operations())
    for r in rows:
        assert r.status == "ok" and r.isolated and r.end_to_end and r.origin == imported.origin(r.index)
        assert all(d.max_diff == 0 and d.within_tolerance for d in r.isolated + r.end_to_end)
    verdict = per_operation_verdict(imported.model, [get_device(REF)], arrays, imported.origin)
    assert verdict == {"operations": len(rows), "operations_judged": len(rows), "operations_out_of_tolerance": 0,
                       "operations_failed": [], "pass": True, "first_out_of_tolerance": None}


def test_single_rounding_driver_passes_operation_by_operation(stack, npu):
    imported, arrays = stack
    devices = [npu["single"], get_device(REF)]  # the others on nnapi-reference, as when partitioned
    differ = OperationDiffer(imported.model, devices, arrays, origins=imported.origin)
    rows = differ.isolated()
    assert all(r.status == "ok" for r in rows), [(r.index, r.operation, r.status, r.message) for r in rows]
    # one step off somewhere: the driver's own rounding, not NNAPI's kernel (the other operations run there)
    assert max(d.max_diff for r in rows for d in r.isolated if d.unit == "steps") == 1
    assert differ.end_to_end(rows) is None
    assert all(r.end_to_end for r in rows)  # end to end: every operation's difference, whatever its size
    assert per_operation_verdict(imported.model, devices, arrays, imported.origin)["pass"]


def test_ignoring_the_input_zero_point_fails_on_the_convolutions_it_breaks(stack, npu):
    imported, arrays = stack
    devices = [npu["ignores"], get_device(REF)]
    differ = OperationDiffer(imported.model, devices, arrays, origins=imported.origin)
    rows = differ.isolated()
    convs = _conv_rows(imported)
    # exactly the convolutions whose input zero point is not 0 are wrong
    assert [rows[j].status for j, _, _ in convs] == ["out of tolerance", "ok", "out of tolerance", "ok"]
    assert all(r.status == "ok" for r in rows if r.operation != "CONV_2D")
    bad = first_out_of_tolerance(rows)
    assert (bad.index, bad.operation, bad.origin) == (convs[0][0], "CONV_2D", "node 'conv_a' (Conv, opset 13)")
    assert differ.end_to_end(rows) is None
    assert rows[bad.index].end_to_end[0].max_diff > 1  # where the drift starts
    verdict = per_operation_verdict(imported.model, devices, arrays, imported.origin)
    assert not verdict["pass"] and verdict["operations_out_of_tolerance"] == 2
    first = verdict["first_out_of_tolerance"]
    assert (first["index"], first["operation"], first["origin"]) == (bad.index, "CONV_2D",
                                                                     "node 'conv_a' (Conv, opset 13)")
    assert first["max_diff"] == rows[bad.index].isolated[0].max_diff > 1
    assert first["difference"] == f"{first['max_diff']:.0f} steps"


# -- against onnxruntime: onnxruntime-quantized MobileNets (issue 17) ----------------------------------
@pytest.fixture(scope="module")
def float_mobilenet() -> onnx.ModelProto:
    return build_onnx("v1", 0.25, 96, mobilenet_weights("v1", 0.25, seed=1))


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_onnxruntime_quantized_mobilenet_is_within_tolerance_of_onnxruntime(float_mobilenet, fmt, per_channel,
                                                                           tmp_path, capsys):
    """`mlts diff model.onnx` (nnapi-reference against onnxruntime): every NNAPI operation that computes an ONNX
    tensor is judged against onnxruntime's value of it, and is within NNAPI's per-operation tolerance."""
    path = tmp_path / "mobilenet_q.onnx"
    path.write_bytes(quantize(float_mobilenet, "input", [1, 3, 96, 96], fmt=fmt, per_channel=per_channel))
    np.save(tmp_path / "x.npy", image_batch(5, 96))
    status = main(["diff", str(path), "--input", str(tmp_path / "x.npy"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert (out["driver"], out["against"]) == (REF, "onnxruntime")
    imported = import_onnx(str(path))
    holds = set(imported.operand_tensors)
    for row in out["operations"]:
        outs = imported.model.operations()[row["index"]][2]
        if any(o in holds for o in outs):  # computes an ONNX tensor: judged, within tolerance
            assert row["status"] == "ok", row
            assert all(d["within_tolerance"] for d in row["isolated"]), row
        else:  # inside a decomposition: nothing to compare with
            assert row["status"] == "not judged", row
    assert {r["operation"] for r in out["operations"] if r["status"] == "ok"} >= {"CONV_2D", "DEPTHWISE_CONV_2D"}
    assert (out["out_of_tolerance"], out["errors"], out["end_to_end_error"]) == (0, 0, None)
    assert status == 0
