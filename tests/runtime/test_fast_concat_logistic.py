"""mlts-fast's CONCATENATION and LOGISTIC against nnapi-reference, bit for bit.

Each case runs the one-operation model on mlts-fast alone and on the reference alone (through the
public API, `run_op`) and asserts identical arrays (float32 compared by bit pattern, so NaN and -0.0
too), and checks the result against an expectation of its own: numpy's concatenate (quantized:
NNAPI's requantization formula written out here), and the logistic function (float: within one
float32 step of the float64 value; quantized: within one step of round(256 * sigmoid(real))).
Then what mlts-fast reports supported, what it declines and why, a compiled plan run twice, and an
SSD-lite-like tail (RESHAPE -> CONCATENATION -> LOGISTIC) compiled for mlts-fast alone.
"""
from __future__ import annotations

import numpy as np
import pytest

from mlts.runtime import Compilation, Execution, MltsError, Model, OperandCode, OperandType, OperationCode, \
    ResultCode, get_device
from mlts.runtime.drivers.fast import FAST_DEVICE_NAME, FastDriver, FastPreparedModel
from mlts.runtime.drivers.fast import steps_other
from mlts.runtime.drivers.fast.support import unsupported_reason
from support.op_runner import Const, Input, build_op_model, run_op

F32 = OperandCode.TENSOR_FLOAT32
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
INT = OperandType.scalar(OperandCode.INT32)
REF = "nnapi-reference"
CONCAT, LOGISTIC = OperationCode.CONCATENATION, OperationCode.LOGISTIC
KINDS = ("float", "uint8", "int8")
CODES = {"float": F32, "uint8": U8, "int8": S8}


def both(code, inputs, outputs):
    return run_op(code, inputs, outputs, device=FAST_DEVICE_NAME), run_op(code, inputs, outputs, device=REF)


def assert_identical(fast: np.ndarray, ref: np.ndarray) -> None:
    assert fast.dtype == ref.dtype and fast.shape == ref.shape
    if fast.dtype == np.float32:
        np.testing.assert_array_equal(fast.view(np.uint32), ref.view(np.uint32))
    else:
        np.testing.assert_array_equal(fast, ref)


def tensor_type(kind: str, shape, scale: float = 0.05, zero_point: int = 0) -> OperandType:
    if kind == "float":
        return OperandType(F32, tuple(shape))
    return OperandType(CODES[kind], tuple(shape), scale, zero_point)


def random_data(kind: str, shape, r: np.random.Generator) -> np.ndarray:
    if kind == "float":
        return r.uniform(-10, 10, shape).astype(np.float32)
    info = np.iinfo(np.uint8 if kind == "uint8" else np.int8)
    return r.integers(info.min, info.max + 1, shape).astype(info.dtype)


def fast_supported(code, inputs, outputs) -> tuple[bool, str | None]:
    """(what FastDriver reports, the reason support.py gives) for the one-operation model."""
    model, _, _ = build_op_model(code, inputs, outputs)
    hal = model.hal_model()
    return FastDriver().get_supported_operations(hal) == [True], unsupported_reason(hal, 0)


# -- CONCATENATION -------------------------------------------------------------------------------------
def nnapi_requantize(q: np.ndarray, t_in: OperandType, t_out: OperandType) -> np.ndarray:
    """NNAPI's concatenation rescale (float32: q * s_in/s_out - zp_in * s_in/s_out, rounded half away
    from zero, + zp_out, clamped), in the unsigned domain (int8 shifted by 128), written out here."""
    if (t_in.scale, t_in.zero_point) == (t_out.scale, t_out.zero_point):
        return q
    shift = 128 if t_out.code == S8 else 0
    ratio = np.float32(t_in.scale) * (np.float32(1) / np.float32(t_out.scale))
    real = (q.astype(np.int32) + shift).astype(np.float32) * ratio + np.float32(-(t_in.zero_point + shift)) * ratio
    rounded = np.sign(real) * np.floor(np.abs(real) + np.float32(0.5))
    return (np.clip(rounded.astype(np.int64) + t_out.zero_point + shift, 0, 255) - shift).astype(q.dtype)


def concat_case(kind: str, shapes, axis: int, seed: int, params=None, out_params=(0.05, 3), const=()):
    """inputs/outputs/expected of a concatenation; params[k] = (scale, zero point) of input k."""
    r = np.random.default_rng(seed)
    out_scale, out_zp = out_params
    if kind == "uint8":
        out_zp += 125
    ins, parts = [], []
    for k, shape in enumerate(shapes):
        scale, zp = params[k] if params else (out_scale, out_zp)
        t = tensor_type(kind, shape, scale, zp)
        x = random_data(kind, shape, r)
        ins.append((t, Const(x) if k in const else x))
        parts.append((t, x))
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    out_t = tensor_type(kind, out_shape, out_scale, out_zp)
    expected = np.concatenate([x if kind == "float" else nnapi_requantize(x, t, out_t) for t, x in parts], axis=axis)
    return ins + [(INT, axis)], [out_t], expected


def check_concat(kind, shapes, axis, seed, **kw):
    inputs, outputs, expected = concat_case(kind, shapes, axis, seed, **kw)
    (fast,), (ref,) = both(CONCAT, inputs, outputs)
    assert_identical(fast, ref)
    assert_identical(fast, expected)


def shapes_along(rank: int, axis: int, count: int, r: np.random.Generator) -> list[tuple[int, ...]]:
    base = [int(d) for d in r.integers(1, 4, rank)]
    shapes = []
    for _ in range(count):
        s = list(base)
        s[axis] = int(r.integers(1, 4))
        shapes.append(tuple(s))
    return shapes


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_concatenation_every_axis_and_input_count(kind, rank):
    r = np.random.default_rng(rank)
    for axis in range(rank):
        for count in (1, 2, 3, 5):
            check_concat(kind, shapes_along(rank, axis, count, r), axis, seed=100 * axis + count)


@pytest.mark.parametrize("kind", ["uint8", "int8"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_quantized_inputs_with_their_own_scale_and_zero_point_are_requantized(kind, axis):
    """Input parameters other than the output's (larger and smaller scales, other zero points, one
    input sharing the output's), along the first axis (contiguous slices) and inner ones (strided)."""
    r = np.random.default_rng(axis)
    zp = 0 if kind == "int8" else 128
    params = [(0.013, zp + 17), (0.05, 3 + (125 if kind == "uint8" else 0)), (0.31, zp - 60), (0.0499, zp)]
    check_concat(kind, shapes_along(3, axis, 4, r), axis, seed=axis, params=params)


@pytest.mark.parametrize("kind", KINDS)
def test_concatenation_of_constants_and_repeated_inputs(kind):
    """A constant input, and one model input used twice."""
    inputs, outputs, _ = concat_case(kind, [(2, 3), (2, 2)], 1, seed=5, const=(1,))
    x_t, x = inputs[0]
    inputs = [inputs[0], inputs[1], (x_t, x), inputs[2]]  # x twice (two operands of equal type and data)
    outputs = [tensor_type(kind, (2, 8), outputs[0].scale, outputs[0].zero_point)]
    (fast,), (ref,) = both(CONCAT, inputs, outputs)
    assert_identical(fast, ref)
    np.testing.assert_array_equal(fast, np.concatenate([x, inputs[1][1].value, x], axis=1))


def test_concatenation_keeps_nan_payloads_and_signed_zeros():
    special = np.array([[np.nan, -0.0, np.inf, -np.inf, 1e-45]], dtype=np.float32)
    payload = np.array([[0x7FC12345, 0xFFC00001]], dtype=np.uint32).view(np.float32)
    inputs = [(tensor_type("float", (1, 5)), special), (tensor_type("float", (1, 2)), payload), (INT, 1)]
    (fast,), (ref,) = both(CONCAT, inputs, [tensor_type("float", (1, 7))])
    assert_identical(fast, ref)
    np.testing.assert_array_equal(fast.view(np.uint32), np.concatenate([special, payload], 1).view(np.uint32))


def test_negative_axis_is_refused_by_nnapi_validation_before_any_device():
    """NNAPI 1.3's CONCATENATION axis lies in [0, rank): a negative one fails model building."""
    inputs = [(tensor_type("float", (2, 3)), Input()), (tensor_type("float", (2, 3)), Input()), (INT, -1)]
    with pytest.raises(MltsError) as info:
        build_op_model(CONCAT, inputs, [tensor_type("float", (2, 6))])
    assert info.value.code == ResultCode.BAD_DATA and "axis -1" in info.value.message


# -- LOGISTIC ------------------------------------------------------------------------------------------
def float_logistic_inputs() -> np.ndarray:
    r = np.random.default_rng(7)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 88.7, -88.7, 103.9, -103.9, 709.0, -709.0,
               745.2, -745.2, 3.4e38, -3.4e38, 16.635532, -16.635532, 17.0, -17.0]
    values = np.concatenate([special, r.uniform(-20, 20, 2000), r.standard_normal(1000) * 3,
                             r.uniform(-800, 800, 200)])
    return values.astype(np.float32)


@pytest.mark.parametrize("shape", [(2000 + 1000 + 200 + 21,), (1, 3221), (1, 1, 3221), (1, 1, 1, 3221)])
def test_float_logistic_equals_the_reference(shape):
    x = float_logistic_inputs().reshape(shape)
    t = tensor_type("float", shape)
    (fast,), (ref,) = both(LOGISTIC, [(t, x)], [t])
    assert_identical(fast, ref)
    with np.errstate(over="ignore"):
        exact = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    finite = ~np.isnan(x)
    assert np.isnan(fast[~finite]).all()
    ulp = np.spacing(np.abs(fast[finite]).astype(np.float32)).astype(np.float64)
    assert (np.abs(fast[finite] - exact[finite]) <= ulp).all()
    assert fast.reshape(-1)[0] == np.float32(0.5) and fast.reshape(-1)[3] == 0.0


def quant_logistic_case(kind: str, scale: float, zero_point: int, shape=(4, 8, 8)):
    """Every stored value (then repeated, shuffled) through LOGISTIC with NNAPI's output parameters."""
    info = np.iinfo(np.uint8 if kind == "uint8" else np.int8)
    values = np.arange(info.min, info.max + 1, dtype=info.dtype)
    x = np.random.default_rng(3).permutation(np.resize(values, int(np.prod(shape)))).reshape(shape)
    in_t = tensor_type(kind, shape, scale, zero_point)
    out_t = tensor_type(kind, shape, 1.0 / 256, 0 if kind == "uint8" else -128)
    return x, in_t, out_t


@pytest.mark.parametrize("kind", ["uint8", "int8"])
@pytest.mark.parametrize("scale,zero_point", [(0.2032742202281952, 35), (1 / 16, 0), (0.001, -20), (0.5, 100),
                                              (1e-5, 7), (2.0, -128)])
def test_quantized_logistic_equals_the_reference(kind, scale, zero_point):
    if kind == "uint8":
        zero_point += 128
    x, in_t, out_t = quant_logistic_case(kind, scale, zero_point)
    (fast,), (ref,) = both(LOGISTIC, [(in_t, x)], [out_t])
    assert_identical(fast, ref)
    real = np.float64(np.float32(scale)) * (x.astype(np.int64) - zero_point)
    ideal = np.clip(np.round(256.0 / (1.0 + np.exp(-real))), 0, 255) + out_t.zero_point
    assert np.abs(fast.astype(np.int64) - ideal).max() <= 1


# -- what mlts-fast takes and declines -------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_both_operations_are_reported_supported(kind):
    inputs, outputs, _ = concat_case(kind, [(1, 4, 3), (1, 2, 3)], 1, seed=1,
                                     params=[(0.1, 4), (0.05, 3 + (125 if kind == "uint8" else 0))])
    assert fast_supported(CONCAT, inputs, outputs) == (True, None)
    if kind == "float":
        t = tensor_type("float", (2, 3))
        assert fast_supported(LOGISTIC, [(t, Input())], [t]) == (True, None)
    else:
        _, in_t, out_t = quant_logistic_case(kind, 0.1, 0)
        assert fast_supported(LOGISTIC, [(in_t, Input())], [out_t]) == (True, None)


def test_quantized_logistic_with_an_input_scale_the_integer_kernel_refuses_is_declined():
    """scale * 2^27 <= 1: the reference's kernel fails the execution; mlts-fast says why it declines."""
    x, in_t, out_t = quant_logistic_case("uint8", 2.0 ** -28, 128, shape=(4,))
    supported, reason = fast_supported(LOGISTIC, [(in_t, Input())], [out_t])
    assert not supported and "integer kernel refuses" in reason and "too small" in reason
    with pytest.raises(MltsError) as info:
        run_op(LOGISTIC, [(in_t, x[:4])], [out_t], device=REF)
    assert info.value.code == ResultCode.OP_FAILED


def test_concatenation_with_an_axis_known_only_at_execution_is_declined():
    t = tensor_type("float", (2, 3))
    inputs = [(t, Input()), (t, Input()), (INT, Input(1))]
    supported, reason = fast_supported(CONCAT, inputs, [tensor_type("float", (2, 6))])
    assert not supported and reason is not None


def test_concatenation_beyond_the_input_limit_is_declined(monkeypatch):
    monkeypatch.setattr(steps_other, "CONCATENATION_MAX_INPUTS", 2)
    inputs, outputs, _ = concat_case("float", [(2, 1)] * 3, 1, seed=0)
    assert fast_supported(CONCAT, inputs, outputs) == (False, "more than 2 inputs")
    assert fast_supported(CONCAT, inputs[1:], [tensor_type("float", (2, 2))]) == (True, None)


# -- whole plans -------------------------------------------------------------------------------------------
def ssd_tail_model(kind: str, params) -> tuple[Model, list[tuple[OperandType, tuple]]]:
    """Two heads [1, h, w, 2 * c] -> RESHAPE [1, h * w * 2, c] -> CONCATENATION (axis 1) -> LOGISTIC."""
    m = Model()
    c = 3
    heads = [((1, 4, 4, 2 * c), params[0]), ((1, 2, 2, 2 * c), params[1])]
    concat_in, model_inputs, feeds = [], [], []
    for shape, (scale, zp) in heads:
        t = tensor_type(kind, shape, scale, zp)
        x = m.add_operand(t)
        new_shape = m.add_operand(OperandType(OperandCode.TENSOR_INT32, (3,)))
        m.set_operand_value(new_shape, np.array([1, shape[1] * shape[2] * 2, c], dtype=np.int32))
        rows = shape[1] * shape[2] * 2
        y = m.add_operand(tensor_type(kind, (1, rows, c), scale, zp))
        m.add_operation(OperationCode.RESHAPE, [x, new_shape], [y])
        concat_in.append(y)
        model_inputs.append(x)
        feeds.append((t, shape))
    total = sum(shape[1] * shape[2] * 2 for shape, _ in heads)
    out_scale, out_zp = params[2]
    joined = m.add_operand(tensor_type(kind, (1, total, c), out_scale, out_zp))
    axis = m.add_operand(INT)
    m.set_operand_value(axis, np.int32(1))
    m.add_operation(CONCAT, concat_in + [axis], [joined])
    probs_t = (tensor_type(kind, (1, total, c)) if kind == "float"
               else tensor_type(kind, (1, total, c), 1 / 256, 0 if kind == "uint8" else -128))
    probs = m.add_operand(probs_t)
    m.add_operation(LOGISTIC, [joined], [probs])
    m.identify_inputs_and_outputs(model_inputs, [joined, probs])
    m.finish()
    return m, feeds


@pytest.mark.parametrize("kind", KINDS)
def test_an_ssd_tail_runs_on_mlts_fast_alone_and_matches_the_reference_run_after_run(kind):
    zp = 0 if kind != "uint8" else 128
    model, feeds = ssd_tail_model(kind, [(0.2, zp + 5), (0.1, zp - 9), (0.2, zp + 5)])
    fast_comp = Compilation.for_devices(model, [get_device(FAST_DEVICE_NAME)])
    fast_comp.finish()
    lines = []
    for step in fast_comp.plan.steps:
        assert step.device.name == FAST_DEVICE_NAME and isinstance(step.prepared, FastPreparedModel)
        lines += step.prepared.plan.describe()
    assert any("CONCATENATION" in line for line in lines) and any("LOGISTIC" in line for line in lines)
    assert not any("reference kernel" in line for line in lines)
    ref_comp = Compilation.for_devices(model, [get_device(REF)])
    ref_comp.finish()
    r = np.random.default_rng(11)
    for _ in range(3):  # one compiled plan, new data each run (buffers reused)
        data = [random_data(kind, shape, r) for _, shape in feeds]
        results = []
        for comp in (fast_comp, ref_comp):
            execution = Execution(comp)
            for i, x in enumerate(data):
                execution.set_input(i, x)
            execution.compute()
            results.append([execution.get_output(0), execution.get_output(1)])
        for f, ref in zip(*results):
            assert_identical(f, ref)
