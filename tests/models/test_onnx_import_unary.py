"""Element-wise operators (converters/unary.py, converters/variadic.py) and the x * HardSigmoid(x) -> HardSwish
rewrite (activation_patterns.py), imported and run on nnapi-reference against onnxruntime on the same graph
(CTS float32 tolerance; quantized: within one or two steps), plus Erf/Gelu against math.erf in float64."""
from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, os.path.dirname(__file__))
from onnx_import_helpers import (assert_quant_close, check_against_ort, const, make_model, op_types,  # noqa: E402
                                 ort_run, tensor)

from mlts.models import import_onnx  # noqa: E402
from mlts.runtime import MltsError, OperandCode, ResultCode  # noqa: E402
from support.tolerance import assert_cts_close  # noqa: E402

pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(1717)
F16 = TensorProto.FLOAT16


def rnd(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def ops_of(imported, code_name):
    """Operations of one type: (input operand types, output operand types)."""
    m = imported.model
    return [([m.operand_type(i) for i in ins], [m.operand_type(o) for o in outs])
            for code, ins, outs in m.operations() if code.name == code_name]


def import_fails(model, *words):
    with pytest.raises(MltsError) as info:
        import_onnx(model.SerializeToString())
    assert info.value.code == ResultCode.BAD_DATA
    for w in words:
        assert w in str(info.value), str(info.value)
    return str(info.value)


# -- one-input operators: every attribute variant, fed by a graph input and by a Conv (NHWC-held) -----------
UNARY = {  # case: (op, attributes, opset, positive inputs only)
    "Sqrt": ("Sqrt", {}, 13, True), "Exp": ("Exp", {}, 13, False), "Log": ("Log", {}, 13, True),
    "Sin": ("Sin", {}, 13, False), "Abs": ("Abs", {}, 13, False), "Neg": ("Neg", {}, 13, False),
    "Floor": ("Floor", {}, 13, False), "Reciprocal": ("Reciprocal", {}, 13, True),
    "Softplus": ("Softplus", {}, 13, False), "Erf": ("Erf", {}, 13, False),
    "HardSigmoid_default": ("HardSigmoid", {}, 13, False),
    "HardSigmoid_attrs": ("HardSigmoid", {"alpha": 0.3, "beta": 0.35}, 13, False),
    "HardSigmoid_opset6": ("HardSigmoid", {"alpha": 0.1}, 7, False),
    "HardSwish": ("HardSwish", {}, 14, False),
    "LeakyRelu_default": ("LeakyRelu", {}, 13, False), "LeakyRelu_alpha": ("LeakyRelu", {"alpha": 0.2}, 13, False),
    "LeakyRelu_negative_alpha": ("LeakyRelu", {"alpha": -0.5}, 16, False),
    "Elu_default": ("Elu", {}, 13, False), "Elu_alpha": ("Elu", {"alpha": 0.4}, 13, False),
    "Elu_zero_alpha": ("Elu", {"alpha": 0.0}, 13, False), "Elu_negative_alpha": ("Elu", {"alpha": -0.7}, 13, False),
    "Selu_default": ("Selu", {}, 13, False), "Selu_attrs": ("Selu", {"alpha": 1.2, "gamma": 2.5}, 13, False),
    "Selu_negative_alpha": ("Selu", {"alpha": -0.5, "gamma": 1.5}, 13, False),
    "Gelu_none": ("Gelu", {}, 20, False), "Gelu_none_explicit": ("Gelu", {"approximate": "none"}, 20, False),
    "Gelu_tanh": ("Gelu", {"approximate": "tanh"}, 20, False),
}


def unary_model(op, attrs, opset, positive, *, conv: bool, elem=TensorProto.FLOAT):
    np_type = np.float16 if elem == F16 else np.float32
    if conv:
        # Exp magnifies the Conv's own summation-order differences (relative error = absolute input error).
        w_scale = 0.1 if op == "Exp" else 0.6
        w = np.abs(rnd(4, 3, 3, 3, scale=0.4)) if positive else rnd(4, 3, 3, 3, scale=w_scale)
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node(op, ["c"], ["y"], name="the_op", **attrs)]
        inits = [const("w", w.astype(np_type)), const("b", np.full(4, 0.1 if positive else 0.0, np_type))]
        x = np.abs(rnd(1, 3, 6, 6)) + 0.1 if positive else rnd(1, 3, 6, 6, scale=2.0)
        return make_model(nodes, [tensor("x", [1, 3, 6, 6], elem)], [tensor("y", [1, 4, 6, 6], elem)], inits,
                          opset=opset), {"x": x.astype(np_type)}
    x = np.abs(rnd(2, 3, 5)) + 0.05 if positive else rnd(2, 3, 5, scale=3.0)
    model = make_model([helper.make_node(op, ["x"], ["y"], name="the_op", **attrs)], [tensor("x", [2, 3, 5], elem)],
                       [tensor("y", [2, 3, 5], elem)], opset=opset)
    return model, {"x": x.astype(np_type)}


@pytest.mark.parametrize("layout", ["input", "conv"])
@pytest.mark.parametrize("case", sorted(UNARY))
def test_unary_against_onnxruntime(case, layout):
    op, attrs, opset, positive = UNARY[case]
    model, feeds = unary_model(op, attrs, opset, positive, conv=layout == "conv")
    imported, _, _ = check_against_ort(model, feeds)
    ops = op_types(imported)
    if layout == "conv":  # the operator works in the Conv's NHWC layout: only the boundary transposes
        assert ops.count("TRANSPOSE") == 2 and ops[0] == "TRANSPOSE" and ops[-1] == "TRANSPOSE", ops
    else:
        assert "TRANSPOSE" not in ops, ops
    direct = {"Sqrt": "SQRT", "Exp": "EXP", "Log": "LOG", "Sin": "SIN", "Abs": "ABS", "Neg": "NEG", "Floor": "FLOOR",
              "HardSwish": "HARD_SWISH", "LeakyRelu": "PRELU", "Elu": "ELU"}
    if op in direct and not case.endswith("negative_alpha"):
        assert [o for o in ops if o != "TRANSPOSE" and o != "CONV_2D"] == [direct[op]]
    assert "CAST" not in ops or op in ("Erf", "Gelu", "Softplus")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the tolerance check's inf - inf
def test_special_values():
    """inf, -inf, NaN, +-0 and huge inputs through the decompositions (Erf, Gelu, Softplus, HardSigmoid...)."""
    x = np.asarray([[np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30, 88.0, -100.0, 3.9, -3.9]], np.float32)
    for op, attrs, opset in (("Erf", {}, 13), ("Softplus", {}, 13), ("HardSigmoid", {}, 13), ("Selu", {}, 13),
                             ("Gelu", {}, 20), ("HardSwish", {}, 14), ("Reciprocal", {}, 13)):
        model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [tensor("x", list(x.shape))],
                           [tensor("y", list(x.shape))], opset=opset)
        check_against_ort(model, {"x": x})
    nan = np.asarray([np.nan], np.float32)
    for op in ("Erf", "Softplus", "Gelu"):
        model = make_model([helper.make_node(op, ["x"], ["y"])], [tensor("x", [1])], [tensor("y", [1])],
                           opset=20 if op == "Gelu" else 13)
        assert np.isnan(import_onnx(model.SerializeToString()).run({"x": nan})["y"]).all()


def test_int32_abs_and_neg():
    for op in ("Abs", "Neg"):
        for elem, dtype in ((TensorProto.INT32, np.int32), (TensorProto.INT64, np.int64)):
            model = make_model([helper.make_node(op, ["x"], ["y"])], [tensor("x", [3, 4], elem)],
                               [tensor("y", [3, 4], elem)])
            imported, _, _ = check_against_ort(model, {"x": RNG.integers(-1000, 1000, (3, 4)).astype(dtype)})
            assert ops_of(imported, op.upper())[0][0][0].code == OperandCode.TENSOR_INT32


F16_CASES = ["Sqrt", "Reciprocal", "Softplus", "Erf", "HardSigmoid_attrs", "HardSwish", "LeakyRelu_alpha", "Elu_alpha",
             "Selu_default", "Gelu_none", "Gelu_tanh", "Floor"]


@pytest.mark.parametrize("case", F16_CASES)
def test_float16(case):
    """float16 graphs use the operations' float16 forms (Erf/Gelu-erf/Softplus: float32 between CASTs), within
    the CTS float16 tolerance of onnxruntime running the same graph in float32."""
    op, attrs, opset, positive = UNARY[case]
    model16, feeds16 = unary_model(op, attrs, opset, positive, conv=False, elem=F16)
    model32, _ = unary_model(op, attrs, opset, positive, conv=False)
    imported = import_onnx(model16.SerializeToString())
    got = imported.run(feeds16)["y"]
    assert got.dtype == np.float16
    ref = ort_run(model32, {"x": feeds16["x"].astype(np.float32)})["y"]
    assert_cts_close(got, ref, OperandCode.TENSOR_FLOAT16)
    m = imported.model
    assert m.operand_type(m.inputs[0]).code == OperandCode.TENSOR_FLOAT16


def test_float16_broadcasting_operators():
    """Mean, Pow (POW and the MUL shortcut), Where, PRelu, Max on float16 tensors."""
    nodes = [helper.make_node("Mean", ["a", "b"], ["m"]), helper.make_node("Pow", ["m", "two"], ["p"]),
             helper.make_node("Pow", ["p", "e"], ["q"]), helper.make_node("Greater", ["a", "b"], ["c"]),
             helper.make_node("Where", ["c", "q", "b"], ["w"]), helper.make_node("PRelu", ["w", "s"], ["r"]),
             helper.make_node("Max", ["r", "b"], ["y"])]

    def model(elem, np_type):
        inits = [const("two", np.asarray(2, np_type)), const("e", np.asarray([0.5, 1.5, 1.0], np_type)),
                 const("s", np.asarray([[0.1], [-0.2]], np_type))]
        return make_model(nodes, [tensor("a", [2, 3], elem), tensor("b", [3], elem)], [tensor("y", [2, 3], elem)],
                          inits)
    feeds = {"a": rnd(2, 3).astype(np.float16), "b": rnd(3).astype(np.float16)}
    imported = import_onnx(model(F16, np.float16).SerializeToString())
    ops = op_types(imported)
    assert ops.count("ADD") == 1 and "MUL" in ops and "POW" in ops and "SELECT" in ops and "PRELU" in ops
    ref = ort_run(model(TensorProto.FLOAT, np.float32), {k: v.astype(np.float32) for k, v in feeds.items()})["y"]
    assert_cts_close(imported.run(feeds)["y"], ref, OperandCode.TENSOR_FLOAT16)


# -- Erf and Gelu accuracy ---------------------------------------------------------------------------------
def _run_1d(op, x, **attrs):
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [tensor("x", [x.size])], [tensor("y", [x.size])],
                       opset=20 if op == "Gelu" else 13)
    return import_onnx(model.SerializeToString()).run({"x": x})["y"].astype(np.float64)


def test_erf_error_bound_over_a_dense_range():
    """The documented bound: |Erf(x) - erf(x)| <= 2e-7 for every float32 x (dense grid over [-8, 8], every float32
    around the region split at |x| = 1, and the tails)."""
    around_split = np.concatenate([np.atleast_1d(np.nextafter(np.float32(1), np.float32(k))) for k in (0, 2)]
                                  + [np.float32(1) + np.arange(-3000, 3000, dtype=np.float32) * np.float32(6e-8)])
    x = np.concatenate([np.linspace(-8, 8, 800_001, dtype=np.float32), around_split, -around_split,
                        np.geomspace(1e-38, 1e-3, 2000, dtype=np.float32), np.asarray([0, 40, -40, 1e38], np.float32)])
    got = _run_1d("Erf", x)
    ref = np.vectorize(math.erf)(x.astype(np.float64))
    err = np.abs(got - ref)
    assert err.max() <= 2e-7, f"max error {err.max():.3g} at x={x[err.argmax()]!r}"
    assert np.all(np.abs(got) <= 1.0)
    assert np.array_equal(np.sign(got), np.sign(x.astype(np.float64)))  # odd, and exactly 0 at 0
    small = np.abs(x) < 1e-3  # relative accuracy near 0 (erf(x) ~ 2x / sqrt(pi))
    assert np.all(np.abs(got[small] - ref[small]) <= 4e-7 * np.abs(ref[small]))


def test_gelu_against_float64():
    """Gelu(approximate=none) against x/2 (1 + erf(x / sqrt 2)) in float64: for x <= -sqrt 2 it takes erfc directly,
    so even small negative outputs keep their absolute accuracy."""
    x = np.linspace(-12, 12, 240_001, dtype=np.float32)
    got = _run_1d("Gelu", x)
    xd = x.astype(np.float64)
    ref = 0.5 * xd * np.vectorize(math.erfc)(-xd / math.sqrt(2.0))
    err = np.abs(got - ref)
    assert np.all(err <= 2e-7 * np.maximum(np.abs(xd), 1.0) + 6e-8 * np.abs(ref)), float(err.max())
    tail = (xd < -2) & (xd > -5)  # where 1 + erf would cancel: the tail's relative accuracy
    assert np.all(err[tail] <= 1e-5 * np.abs(ref[tail]) + 1e-9)


# -- PRelu: slope broadcasting ---------------------------------------------------------------------------
PRELU_CASES = {  # (x shape, slope shape or None for a [C,1,1] slope after a Conv, slope is a graph input)
    "conv_c11": (None, False), "scalar_slope": ([2, 3, 4], False), "last_axis": ([2, 3, 4], False),
    "middle": ([2, 3, 4], False), "full_shape": ([2, 3, 4], False), "computed_slope": ([2, 3, 4], True),
    "rank0_slope": ([2, 3, 4], False),
}
SLOPES = {"scalar_slope": [1], "last_axis": [4], "middle": [3, 1], "full_shape": [2, 3, 4],
          "computed_slope": [3, 1], "rank0_slope": []}


@pytest.mark.parametrize("opset", [7, 16])
@pytest.mark.parametrize("case", sorted(PRELU_CASES))
def test_prelu(case, opset):
    x_shape, computed = PRELU_CASES[case]
    if x_shape is None:
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("PRelu", ["c", "slope"], ["y"])]
        inits = [const("w", rnd(4, 3, 3, 3, scale=0.5)), const("slope", rnd(4, 1, 1, scale=0.5))]
        model = make_model(nodes, [tensor("x", [1, 3, 5, 5])], [tensor("y", None)], inits, opset=opset)
        imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 5, 5, scale=2)})
        assert op_types(imported) == ["TRANSPOSE", "CONV_2D", "PRELU", "TRANSPOSE"]
        return
    slope = rnd(*SLOPES[case], scale=0.5)
    inputs, inits, feeds = [tensor("x", x_shape)], [], {"x": rnd(*x_shape, scale=2)}
    if computed:
        inputs.append(tensor("slope", list(slope.shape)))
        feeds["slope"] = slope
    else:
        inits.append(const("slope", slope))
    model = make_model([helper.make_node("PRelu", ["x", "slope"], ["y"])], inputs, [tensor("y", None)], inits,
                       opset=opset)
    imported, _, _ = check_against_ort(model, feeds)
    assert op_types(imported) == ["PRELU"]


# -- Sum, Mean, Max, Min ---------------------------------------------------------------------------------
VARIADIC_SHAPES = {"one": [[2, 3]], "two_same": [[2, 3], [2, 3]],
                   "three_broadcast": [[2, 3, 4, 5], [4, 1], [3, 1, 5]], "four": [[3, 4], [4], [1, 4], [3, 1]]}


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
@pytest.mark.parametrize("shapes", sorted(VARIADIC_SHAPES))
def test_variadic(op, shapes):
    shapes = VARIADIC_SHAPES[shapes]
    names = [f"i{k}" for k in range(len(shapes))]
    # The second input is a constant (laid out at import), the others graph inputs.
    inits = [const(names[1], rnd(*shapes[1]))] if len(shapes) > 1 else []
    inputs = [tensor(n, s) for k, (n, s) in enumerate(zip(names, shapes)) if k != 1]
    feeds = {n: rnd(*s) for k, (n, s) in enumerate(zip(names, shapes)) if k != 1}
    model = make_model([helper.make_node(op, names, ["y"])], inputs, [tensor("y", None)], inits,
                       opset=8 if shapes == [[2, 3]] else 13)
    imported, _, _ = check_against_ort(model, feeds)
    code = {"Sum": "ADD", "Mean": "ADD", "Max": "MAXIMUM", "Min": "MINIMUM"}[op]
    assert op_types(imported).count(code) == len(shapes) - 1
    assert ("MUL" in op_types(imported)) == (op == "Mean" and len(shapes) > 1)


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_variadic_nhwc(op):
    """A Conv output (held NHWC), a [C,1,1] constant and a [1,C,1,1] graph input: no TRANSPOSE in between."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c", "k", "g"], ["y"])]
    model = make_model(nodes, [tensor("x", [1, 3, 5, 5]), tensor("g", [1, 4, 1, 1])], [tensor("y", None)],
                       [const("w", rnd(4, 3, 3, 3, scale=0.5)), const("k", rnd(4, 1, 1))])
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 5, 5), "g": rnd(1, 4, 1, 1)})
    assert op_types(imported).count("TRANSPOSE") == 2


@pytest.mark.parametrize("op", ["Max", "Min"])  # ONNX Sum and Mean are float-only
@pytest.mark.parametrize("elem,dtype", [(TensorProto.INT32, np.int32), (TensorProto.INT64, np.int64)])
def test_variadic_integers(op, elem, dtype):
    model = make_model([helper.make_node(op, ["a", "b", "c"], ["y"])],
                       [tensor("a", [2, 3], elem), tensor("b", [3], elem), tensor("c", [2, 1], elem)],
                       [tensor("y", None, elem)])
    feeds = {n: RNG.integers(-50, 50, s).astype(dtype) for n, s in (("a", (2, 3)), ("b", (3,)), ("c", (2, 1)))}
    check_against_ort(model, feeds)


# -- Pow ---------------------------------------------------------------------------------------------------
POW_CASES = {  # exponent constant, expected NNAPI operations
    "square": (np.float32(2.0), ["MUL"]), "square_int": (np.int64(2), ["MUL"]), "sqrt": (np.float32(0.5), ["SQRT"]),
    "one": (np.float32(1.0), ["CAST"]), "cube": (np.float32(3.0), ["POW"]), "int_exponent": (np.int32(3), ["POW"]),
    "double_exponent": (np.float64(-1.5), ["POW"]), "vector": (np.asarray([2.0, 3.0, 0.5], np.float32), ["POW"]),
    "broadcast_up": (np.full((2, 1, 1), 2.0, np.float32), ["POW"]),  # not a shortcut: the output grows
}


@pytest.mark.parametrize("case", sorted(POW_CASES))
def test_pow_constant_exponent(case):
    exponent, expected = POW_CASES[case]
    model = make_model([helper.make_node("Pow", ["x", "e"], ["y"])], [tensor("x", [4, 3])], [tensor("y", None)],
                       [const("e", exponent)])
    imported, _, _ = check_against_ort(model, {"x": np.abs(rnd(4, 3, scale=2)) + 0.1})
    assert op_types(imported) == expected


def test_pow_computed_exponent_and_nhwc_base():
    # Float exponent broadcast against the base.
    model = make_model([helper.make_node("Pow", ["x", "e"], ["y"])], [tensor("x", [2, 3, 4]), tensor("e", [3, 1])],
                       [tensor("y", None)])
    imported, _, _ = check_against_ort(model, {"x": np.abs(rnd(2, 3, 4)) + 0.1, "e": rnd(3, 1)})
    assert op_types(imported) == ["POW"]
    # int32 exponent: CAST to the base's type first (Pow-12 allows differing types).
    model = make_model([helper.make_node("Pow", ["x", "e"], ["y"])],
                       [tensor("x", [2, 3]), tensor("e", [2, 3], TensorProto.INT32)], [tensor("y", None)])
    imported, _, _ = check_against_ort(model, {"x": rnd(2, 3), "e": RNG.integers(-3, 4, (2, 3)).astype(np.int32)})
    assert op_types(imported) == ["CAST", "POW"]
    # Constant base, computed exponent.
    model = make_model([helper.make_node("Pow", ["b", "e"], ["y"])], [tensor("e", [2, 3])], [tensor("y", None)],
                       [const("b", np.float32(2.0))])
    check_against_ort(model, {"e": rnd(2, 3)})
    # A Conv output (NHWC) squared and raised to a per-channel power: no layout change.
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Pow", ["c", "two"], ["s"]),
             helper.make_node("Pow", ["s", "k"], ["y"])]
    model = make_model(nodes, [tensor("x", [1, 3, 4, 4])], [tensor("y", None)],
                       [const("w", rnd(4, 3, 1, 1)), const("two", np.float32(2)),
                        const("k", np.asarray([1.0, 0.5, 1.5, 0.25], np.float32).reshape(4, 1, 1))])
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 4, 4)})
    assert op_types(imported) == ["TRANSPOSE", "CONV_2D", "MUL", "POW", "TRANSPOSE"]


# -- Where -------------------------------------------------------------------------------------------------
def test_where_broadcasting():
    model = make_model([helper.make_node("Where", ["c", "a", "b"], ["y"])],
                       [tensor("c", [3, 1, 5], TensorProto.BOOL), tensor("a", [2, 3, 4, 1]), tensor("b", [5])],
                       [tensor("y", None)])
    imported, _, _ = check_against_ort(model, {"c": RNG.random((3, 1, 5)) > 0.5, "a": rnd(2, 3, 4, 1), "b": rnd(5)})
    assert op_types(imported)[-1] == "SELECT" and "TILE" in op_types(imported)


def test_where_nhwc_constant_and_integer_values():
    # A Conv output (NHWC) against a scalar constant, the condition computed from the Conv output.
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Greater", ["c", "t"], ["m"]),
             helper.make_node("Where", ["m", "c", "zero"], ["y"])]
    model = make_model(nodes, [tensor("x", [1, 3, 5, 5]), tensor("t", [4, 1, 1])], [tensor("y", None)],
                       [const("w", rnd(4, 3, 3, 3)), const("zero", np.float32(0.0))])
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 5, 5), "t": rnd(4, 1, 1)})
    assert op_types(imported).count("TRANSPOSE") == 2
    # int64 values, constant condition.
    model = make_model([helper.make_node("Where", ["c", "a", "b"], ["y"])],
                       [tensor("a", [2, 3], TensorProto.INT64), tensor("b", [2, 1], TensorProto.INT64)],
                       [tensor("y", None, TensorProto.INT64)], [const("c", np.asarray([True, False, True]))])
    check_against_ort(model, {"a": RNG.integers(-9, 9, (2, 3)), "b": RNG.integers(-9, 9, (2, 1))})
    # bool values: no SELECT form, logical operations instead (onnxruntime has no bool Where: onnx.reference).
    model = make_model([helper.make_node("Where", ["c", "a", "b"], ["y"])],
                       [tensor(n, s, TensorProto.BOOL) for n, s in (("c", [2, 3]), ("a", [3]), ("b", [2, 1]))],
                       [tensor("y", None, TensorProto.BOOL)])
    feeds = {"c": RNG.random((2, 3)) > 0.5, "a": RNG.random(3) > 0.5, "b": RNG.random((2, 1)) > 0.5}
    imported = import_onnx(model.SerializeToString())
    np.testing.assert_array_equal(imported.run(feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0])
    assert "SELECT" not in op_types(imported)
    # Scalars.
    model = make_model([helper.make_node("Where", ["c", "a", "b"], ["y"])],
                       [tensor("c", [], TensorProto.BOOL), tensor("a", []), tensor("b", [])], [tensor("y", None)])
    check_against_ort(model, {"c": np.asarray(False), "a": np.asarray(1.5, np.float32),
                              "b": np.asarray(-2.0, np.float32)})


# -- the HardSwish pattern -------------------------------------------------------------------------------------
def hardswish_pattern(order, *, alpha=np.float32(1 / 6), beta=None, extra_use=False, other_x=False):
    """Conv -> HardSigmoid -> Mul as torch.onnx writes hardswish below opset 14 (Mul(x, hs)) or hs first."""
    attrs = {"alpha": float(alpha)} | ({"beta": beta} if beta is not None else {})
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSigmoid", ["c2" if other_x else "c"], ["h"], **attrs),
             helper.make_node("Mul", ["c", "h"] if order == "x_first" else ["h", "c"], ["y"], name="hswish")]
    inits = [const("w", rnd(4, 3, 3, 3, scale=0.8))]
    outputs = [tensor("y", None)]
    if other_x:
        nodes.insert(1, helper.make_node("Neg", ["c"], ["c2"]))
    if extra_use:
        nodes.append(helper.make_node("Add", ["h", "c"], ["z"]))
        outputs += [tensor("h", None), tensor("z", None)]
    return make_model(nodes, [tensor("x", [1, 3, 6, 6])], outputs, inits, opset=13), {"x": rnd(1, 3, 6, 6, scale=3)}


@pytest.mark.parametrize("order", ["x_first", "hs_first"])
def test_hardsigmoid_mul_becomes_hardswish(order):
    model, feeds = hardswish_pattern(order, beta=0.5 if order == "hs_first" else None)
    imported, _, _ = check_against_ort(model, feeds)
    assert op_types(imported) == ["TRANSPOSE", "CONV_2D", "HARD_SWISH", "TRANSPOSE"]
    assert "HardSigmoid+Mul as HardSwish" in imported.origin(2) and "hswish" in imported.origin(2)


def test_hardswish_pattern_with_other_uses_of_the_hard_sigmoid():
    model, feeds = hardswish_pattern("x_first", extra_use=True)
    imported, _, _ = check_against_ort(model, feeds)
    ops = op_types(imported)
    assert "HARD_SWISH" in ops and "MINIMUM" in ops and "ADD" in ops  # the HardSigmoid stays for its other uses


@pytest.mark.parametrize("variant", ["alpha_0.2", "beta_0.4", "other_tensor"])
def test_hardswish_pattern_not_matched(variant):
    kwargs = {"alpha_0.2": {"alpha": 0.2}, "beta_0.4": {"beta": 0.4}, "other_tensor": {"other_x": True}}[variant]
    model, feeds = hardswish_pattern("x_first", **kwargs)
    imported, _, _ = check_against_ort(model, feeds)
    assert "HARD_SWISH" not in op_types(imported) and "MUL" in op_types(imported)


# -- quantized (QDQ graphs built by hand) ------------------------------------------------------------------------
def qdq(x, scale, zp, dtype, prefix):
    nodes = [helper.make_node("QuantizeLinear", [x, f"{prefix}_s", f"{prefix}_z"], [f"{prefix}_q"]),
             helper.make_node("DequantizeLinear", [f"{prefix}_q", f"{prefix}_s", f"{prefix}_z"], [f"{prefix}_dq"])]
    return nodes, [const(f"{prefix}_s", np.float32(scale)), const(f"{prefix}_z", np.asarray(zp, dtype))], f"{prefix}_dq"


def qdq_unary(op, dtype, in_q, out_q, shape=(2, 4, 3, 3), opset=14, extra_inputs=(), extra_inits=(), extra_nodes=(),
              **attrs):
    """x -> Q -> DQ -> op -> Q -> DQ -> y."""
    n_in, i_in, x_dq = qdq("x", *in_q, dtype, "in")
    n_out, i_out, _ = qdq("r", *out_q, dtype, "out")
    nodes = n_in + list(extra_nodes) + [helper.make_node(op, [x_dq, *extra_inputs], ["r"], name="qop", **attrs)] + n_out
    nodes.append(helper.make_node("Identity", ["out_dq"], ["y"]))
    return make_model(nodes, [tensor("x", list(shape))], [tensor("y", list(shape))],
                      i_in + i_out + list(extra_inits), opset=opset)


def check_quantized(model, feeds, step, op_code, quantized=True, max_steps=1.0):
    data = model.SerializeToString()
    imported = import_onnx(data)
    assert_quant_close(imported.run(feeds)["y"], ort_run(data, feeds)["y"], step, max_steps=max_steps, argmax=False)
    (ins, _), = ops_of(imported, op_code)
    assert (ins[0].code in (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED)) == quantized
    return imported


@pytest.mark.parametrize("dtype,in_zp,out_zp", [(np.uint8, 128, 40), (np.int8, 0, -88)])
def test_quantized_hardswish(dtype, in_zp, out_zp):
    model = qdq_unary("HardSwish", dtype, (0.04, in_zp), (0.025, out_zp))
    imported = check_quantized(model, {"x": rnd(2, 4, 3, 3, scale=2.5)}, 0.025, "HARD_SWISH")
    assert op_types(imported) == ["QUANTIZE", "HARD_SWISH", "DEQUANTIZE"]


def test_quantized_hardswish_beyond_the_kernel_scale_limit_runs_in_float():
    """NNAPI's 8-bit HARD_SWISH fails when input scale / (128 x output scale) >= 1: that graph stays float."""
    model = qdq_unary("HardSwish", np.uint8, (1.0, 128), (0.005, 0))
    check_quantized(model, {"x": rnd(2, 4, 3, 3) * 0.5}, 0.005, "HARD_SWISH", quantized=False)


@pytest.mark.parametrize("alpha", [0.1, -0.3, 0.0, 1.7])
@pytest.mark.parametrize("dtype,in_zp,out_zp", [(np.uint8, 128, 100), (np.int8, 5, -20)])
def test_quantized_leaky_relu(alpha, dtype, in_zp, out_zp):
    model = qdq_unary("LeakyRelu", dtype, (0.03, in_zp), (0.03, out_zp), opset=13, alpha=alpha)
    imported = check_quantized(model, {"x": rnd(2, 4, 3, 3, scale=2)}, 0.03, "PRELU")
    assert op_types(imported) == ["QUANTIZE", "PRELU", "DEQUANTIZE"]


@pytest.mark.parametrize("slope_kind", ["dq_per_tensor", "float_constant", "dq_per_channel", "imprecise"])
def test_quantized_prelu(slope_kind):
    slope = np.asarray([0.25, 0.1, -0.2, 0.05], np.float32).reshape(4, 1, 1)
    in_q, out_q = (0.02, 128), (0.05, 128)
    inits, inputs = [], ["slope"]
    if slope_kind == "dq_per_tensor":
        inits = [const("sq", np.round(slope / 0.002 + 128).astype(np.uint8)), const("ss", np.float32(0.002)),
                 const("sz", np.uint8(128))]
        nodes_extra = [helper.make_node("DequantizeLinear", ["sq", "ss", "sz"], ["slope"])]
    elif slope_kind == "dq_per_channel":
        scales = np.asarray([0.002, 0.001, 0.0025, 0.0005], np.float32)
        inits = [const("sq", np.round(slope.reshape(-1) / scales).astype(np.int8).reshape(4, 1, 1)),
                 const("ss", scales), const("sz", np.zeros(4, np.int8))]
        nodes_extra = [helper.make_node("DequantizeLinear", ["sq", "ss", "sz"], ["slope"], axis=0)]
    else:
        if slope_kind == "imprecise":  # a wide slope range on 8 bits would move outputs by over half a step
            slope = np.asarray([0.013, 3.0, -2.0, 0.5], np.float32).reshape(4, 1, 1)
            in_q, out_q = (0.1, 128), (0.1, 128)
        inits, nodes_extra = [const("slope", slope)], []
    model = qdq_unary("PRelu", np.uint8, in_q, out_q, opset=13, extra_inputs=inputs, extra_inits=inits,
                      extra_nodes=nodes_extra)
    check_quantized(model, {"x": rnd(2, 4, 3, 3, scale=1.5)}, out_q[0], "PRELU",
                    quantized=slope_kind != "imprecise")


def qdq_variadic(op, n, dtype=np.uint8, shapes=None, opset=13):
    shapes = shapes or [[2, 3, 4]] * n
    nodes, inits, dqs = [], [], []
    for k in range(n):
        nd, it, dq = qdq(f"x{k}", 0.02 * (k + 1), 128 if dtype == np.uint8 else 0, dtype, f"in{k}")
        nodes += nd
        inits += it
        dqs.append(dq)
    n_out, i_out, _ = qdq("r", 0.05, 128 if dtype == np.uint8 else 3, dtype, "out")
    nodes += [helper.make_node(op, dqs, ["r"])] + n_out + [helper.make_node("Identity", ["out_dq"], ["y"])]
    return make_model(nodes, [tensor(f"x{k}", s) for k, s in enumerate(shapes)], [tensor("y", None)], inits + i_out,
                      opset=opset), {f"x{k}": rnd(*s, scale=1.5) for k, s in enumerate(shapes)}


@pytest.mark.parametrize("op,n,quantized", [("Max", 3, True), ("Min", 2, True), ("Sum", 2, True), ("Sum", 3, False),
                                            ("Mean", 2, False)])
def test_quantized_variadic(op, n, quantized):
    model, feeds = qdq_variadic(op, n, shapes=[[2, 3, 4], [3, 1], [4]][:n])
    code = {"Max": "MAXIMUM", "Min": "MINIMUM", "Sum": "ADD", "Mean": "ADD"}[op]
    data = model.SerializeToString()
    imported = import_onnx(data)
    assert_quant_close(imported.run(feeds)["y"], ort_run(data, feeds)["y"], 0.05, max_steps=1, argmax=False)
    first = ops_of(imported, code)[0][0][0]
    assert (first.code == OperandCode.TENSOR_QUANT8_ASYMM) == quantized


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_quantized_where(dtype):
    model, feeds = qdq_variadic("Where", 2, dtype, shapes=[[2, 3, 4], [4]])
    (where,) = [n for n in model.graph.node if n.op_type == "Where"]
    where.input.insert(0, "cond")
    model.graph.input.append(tensor("cond", [3, 1], TensorProto.BOOL))
    feeds["cond"] = RNG.random((3, 1)) > 0.5
    data = model.SerializeToString()
    imported = import_onnx(data)
    assert_quant_close(imported.run(feeds)["y"], ort_run(data, feeds)["y"], 0.05, max_steps=1, argmax=False)
    (ins, _), = ops_of(imported, "SELECT")
    assert ins[1].code in (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED)


def test_quantized_hardswish_pattern():
    """Mul(DQ(x), DQ(Q(HardSigmoid(DQ(x))))) -> Q, as a QDQ tool writes x * hardsigmoid(x): one 8-bit HARD_SWISH
    (without the hard-sigmoid's own rounding, so within two steps of onnxruntime's graph)."""
    n_in, i_in, x_dq = qdq("x", 0.04, 128, np.uint8, "in")
    n_h, i_h, h_dq = qdq("h", 1 / 255, 0, np.uint8, "hs")
    n_out, i_out, _ = qdq("r", 0.03, 40, np.uint8, "out")
    nodes = n_in + [helper.make_node("DequantizeLinear", ["in_q", "in_s", "in_z"], ["x_dq2"]),
                    helper.make_node("HardSigmoid", ["x_dq2"], ["h"], alpha=1 / 6)] + n_h
    nodes += [helper.make_node("Mul", [h_dq, x_dq], ["r"])] + n_out + [helper.make_node("Identity", ["out_dq"], ["y"])]
    model = make_model(nodes, [tensor("x", [1, 4, 5, 5])], [tensor("y", None)], i_in + i_h + i_out)
    data = model.SerializeToString()
    imported = import_onnx(data)
    assert op_types(imported) == ["QUANTIZE", "HARD_SWISH", "DEQUANTIZE"]
    feeds = {"x": rnd(1, 4, 5, 5, scale=2.5)}
    assert_quant_close(imported.run(feeds)["y"], ort_run(data, feeds)["y"], 0.03, max_steps=2, argmax=False)


# -- clear errors for what NNAPI cannot express ----------------------------------------------------------------
def single(op, shape, elem=TensorProto.FLOAT, opset=13, **attrs):
    return make_model([helper.make_node(op, ["x"], ["y"], name="bad_node", **attrs)], [tensor("x", shape, elem)],
                      [tensor("y", None, elem)], opset=opset)


def two_input(op, a, b, elem=TensorProto.FLOAT, inits=()):
    inputs = [tensor(n, shape, e) for n, shape, e in (("a", a, elem), ("b", b, elem)) if shape is not None]
    return make_model([helper.make_node(op, ["a", "b"], ["y"], name="bad_node")], inputs, [tensor("y", None, elem)],
                      list(inits))


def where_unknown_broadcast():
    return make_model([helper.make_node("Where", ["c", "a", "b"], ["y"], name="bad_node")],
                      [tensor("c", ["N", 1], TensorProto.BOOL), tensor("a", [1, 3]), tensor("b", [1, 3])],
                      [tensor("y", None)])


UNSUPPORTED = {  # case: (model, words the message must contain)
    "elu_nan_alpha": (lambda: single("Elu", [2, 3], alpha=float("nan")), ["alpha"]),
    "selu_rank5": (lambda: single("Selu", [1, 2, 1, 2, 2]), ["rank 5"]),
    "gelu_approximate": (lambda: single("Gelu", [2, 3], opset=20, approximate="fast"), ["approximate"]),
    "sqrt_int": (lambda: single("Sqrt", [2, 3], TensorProto.INT32), ["int32"]),
    "floor_rank5": (lambda: single("Floor", [1, 2, 1, 2, 2]), ["rank 5"]),
    "erf_rank5": (lambda: single("Erf", [1, 2, 1, 2, 2]), ["rank 5"]),
    "hardsigmoid_int": (lambda: single("HardSigmoid", [2, 3], TensorProto.INT32), ["int32"]),
    "pow_int_base": (lambda: two_input("Pow", [2, 3], None, TensorProto.INT32, [const("b", np.int32(2))]), ["POW"]),
    "where_unknown_broadcast": (where_unknown_broadcast, ["unknown"]),
    "mean_int": (lambda: two_input("Mean", [2], [2], TensorProto.INT32), ["int32"]),
}


@pytest.mark.parametrize("case", sorted(UNSUPPORTED))
def test_unsupported_variants_fail_clearly(case):
    build, words = UNSUPPORTED[case]
    msg = import_fails(build(), "bad_node", *words)
    assert "\n" not in msg
