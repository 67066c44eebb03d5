"""Property test: random, mostly malformed models built through the public API never make the
runtime raise anything but MltsError, and whatever succeeds yields numpy arrays.

Each example adds random operand types (invalid codes, negative dims, odd scales and zero points,
per-channel parameters), sets random constants (bytes, arrays, None, memory regions), adds random
operations (any code, out-of-range index lists), identifies random inputs/outputs, finishes, and
when the model got that far compiles it (on nnapi-reference alone, or on every device) and executes
it with random inputs. Generation is biased towards well-formed pieces (ADD/SUB/MUL/DIV over
float32 tensors) so that a fair share of examples reaches compilation and execution.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlts.runtime import (Burst, Compilation, Execution, Memory, MltsError, Model, OperandCode, OperandType,
                          OperationCode, ResultCode, SymmPerChannelQuantParams, get_device)

GOOD_OPS = [OperationCode.ADD, OperationCode.SUB, OperationCode.MUL, OperationCode.DIV]
SCALES = [0.0, 0.5, 1.0, 0.003921, -1.0, math.nan, math.inf, 1e-30, 1e30]
ZERO_POINTS = [0, 1, 127, 128, 255, 256, -1, -128, -129, 65535, 2**31]
DTYPES = [np.float32, np.float16, np.float64, np.int32, np.int64, np.uint8, np.int8, np.int16, np.uint16,
          np.uint32, np.bool_]


class Outcome:
    """Counts how far examples got (useful when tuning the generator; asserted loosely)."""

    def __init__(self) -> None:
        self.stages: dict[str, int] = {}

    def reached(self, stage: str) -> None:
        self.stages[stage] = self.stages.get(stage, 0) + 1


def attempt(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[bool, Any]:
    """Run one public call: MltsError is an accepted outcome; anything else escapes and fails the test."""
    try:
        return True, fn(*args, **kwargs)
    except MltsError as e:
        assert isinstance(e.code, ResultCode) and e.code != ResultCode.NO_ERROR
        assert isinstance(e.message, str) and e.message
        return False, None


# -- strategies --------------------------------------------------------------------------------------
dims_st = st.one_of(
    st.just((2, 2)),
    st.just((2, 2)),
    st.lists(st.integers(0, 3), min_size=0, max_size=4).map(tuple),
    st.lists(st.integers(-2, 4), min_size=0, max_size=5).map(tuple),
    st.none(),
    st.sampled_from([(2**33,), (2**20, 2**20, 2**10), ("x",), 3]),
)

code_st = st.one_of(
    st.just(OperandCode.TENSOR_FLOAT32),
    st.just(OperandCode.INT32),
    st.sampled_from(list(OperandCode)),
    st.integers(-3, 20),
    st.sampled_from(["TENSOR_FLOAT32", None, 3.0]),
)


@st.composite
def operand_type_st(draw: st.DrawFn) -> Any:
    good = draw(st.integers(0, 9))
    if good < 5:
        return OperandType(OperandCode.TENSOR_FLOAT32, (2, 2))
    if good < 7:
        return OperandType(OperandCode.INT32)
    code = draw(code_st)
    dims = draw(dims_st)
    scale = draw(st.sampled_from(SCALES))
    zp = draw(st.sampled_from(ZERO_POINTS))
    channel_quant = None
    if draw(st.integers(0, 5)) == 0:
        scales = draw(st.one_of(st.lists(st.sampled_from(SCALES), max_size=4).map(tuple),
                                st.sampled_from(["abc", None, (1.0, "x"), np.ones((2, 2))])))
        channel_dim = draw(st.one_of(st.integers(-1, 4), st.sampled_from([None, "0", 1.0, True])))
        ok, channel_quant = attempt(SymmPerChannelQuantParams, scales, channel_dim)
        if not ok:
            channel_quant = draw(st.sampled_from([None, "per-channel", (0.5, 0)]))
    ok, t = attempt(OperandType, code, dims, scale, zp, channel_quant)
    if not ok:
        return draw(st.sampled_from(["not a type", None, OperandCode.TENSOR_FLOAT32]))
    return t


# Factories (values are built fresh per example: arrays and memoryviews are mutable and unhashable).
ODD_VALUES: list[Callable[[], Any]] = [
    lambda: np.int32(7), lambda: np.int32(-1), lambda: 3, lambda: 2.5, lambda: "abc", object, lambda: [1, 2],
    lambda: [[1.0, 2.0], [3.0, 4.0]], lambda: np.float32(1), lambda: True, lambda: 2**40, lambda: 2**70,
    lambda: bytearray(16), lambda: memoryview(bytes(16)), lambda: memoryview(np.zeros(8, np.float32))[::2],
    lambda: memoryview(np.zeros((2, 2), np.float32)), lambda: np.zeros((4, 4), np.float32)[::2, ::2],
    lambda: {"a": 1}, lambda: [[1.0], [1.0, 2.0]],
]


def _filled(dtype: Any, shape: tuple[int, ...], fill: Any) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.full(shape, fill).astype(dtype)


def value_st(n_operands: int) -> st.SearchStrategy:
    arrays = st.builds(
        _filled,
        st.sampled_from(DTYPES),
        st.lists(st.integers(0, 3), max_size=3).map(tuple),
        st.sampled_from([0, 1, 7, -1, 1.5, math.nan]),
    )
    return st.one_of(
        st.just(np.int32(0)),
        st.just(np.zeros((2, 2), np.float32)),
        st.none(),
        st.binary(max_size=40),
        arrays,
        st.sampled_from(ODD_VALUES).map(lambda make: make()),
    )


def index_st(n: int) -> st.SearchStrategy:
    return st.one_of(st.integers(0, max(n - 1, 0)), st.integers(-2, n + 2),
                     st.sampled_from([1.0, "0", None, True, np.int64(0), 2**40]))


def index_list_st(n: int, max_size: int) -> st.SearchStrategy:
    return st.one_of(st.lists(index_st(n), max_size=max_size),
                     st.lists(st.integers(0, max(n - 1, 0)), max_size=max_size),
                     st.sampled_from([None, 0, "01", (i for i in ())]))


# -- the property ------------------------------------------------------------------------------------
def build_and_run(data: st.DataObject, outcome: Outcome | None = None) -> None:
    outcome = outcome or Outcome()
    model = Model()
    valued: set[int] = set()  # operands given a value (constant, omitted or model) successfully
    well_formed = data.draw(st.integers(0, 2), label="well-formed start") == 0
    if well_formed:
        _well_formed_chain(data, model, valued)
    # An operand nothing writes makes finish() fail (as in NNAPI), so well-formed starts rarely get extras.
    n_types = data.draw(st.sampled_from([0, 0, 0, 1, 3]) if well_formed else st.integers(0, 8), label="n_operands")
    for _ in range(n_types):
        attempt(model.add_operand, data.draw(operand_type_st(), label="operand type"))
    n = model.operand_count
    # Give int32 scalars a fused-activation value most of the time.
    for i in range(n):
        if i not in valued and model.operand_type(i).code == OperandCode.INT32 and data.draw(st.integers(0, 3)) > 0:
            if attempt(model.set_operand_value, i, np.int32(data.draw(st.sampled_from([0, 0, 1, 2, 3, 7, -1]))))[0]:
                valued.add(i)

    memory = Memory.create_shared(64)
    sub_model = _finished_sub_model()
    for _ in range(data.draw(st.integers(0, 6), label="n_steps")):
        step = data.draw(st.sampled_from(["value", "value", "memory", "model", "op", "op", "op", "identify",
                                          "relax", "per_channel"]), label="step")
        if step == "value":
            index = data.draw(index_st(n))
            if attempt(model.set_operand_value, index, data.draw(value_st(n), label="value"))[0]:
                valued.add(index)
        elif step == "memory":
            index = data.draw(index_st(n))
            if attempt(model.set_operand_value_from_memory, index,
                    data.draw(st.sampled_from([memory, memory, None, _freed_memory()])),
                    data.draw(st.sampled_from([0, 16, 48, 60, -4, 1.0])),
                    data.draw(st.sampled_from([16, 4, 0, 64, -1, 100])))[0]:
                valued.add(index)
        elif step == "model":
            index = data.draw(index_st(n))
            if attempt(model.set_operand_value_from_model, index,
                       data.draw(st.sampled_from([sub_model, model, Model(), "model"])))[0]:
                valued.add(index)
        elif step == "op":
            code = data.draw(st.one_of(st.sampled_from(GOOD_OPS), st.sampled_from(list(OperationCode)),
                                       st.integers(-2, 130), st.sampled_from(["ADD", None, 1.5])), label="op code")
            if data.draw(st.booleans()):
                ins = data.draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=3, max_size=3), label="ins")
                outs = data.draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=1, max_size=1), label="outs")
            else:
                ins = data.draw(index_list_st(n, 6), label="ins")
                outs = data.draw(index_list_st(n, 3), label="outs")
            attempt(model.add_operation, code, ins, outs)
        elif step == "identify":
            attempt(model.identify_inputs_and_outputs, data.draw(index_list_st(n, 3)), data.draw(index_list_st(n, 3)))
        elif step == "relax":
            attempt(model.relax_computation_float32_to_float16, data.draw(st.sampled_from([True, False, 1, None])))
        else:
            attempt(model.set_operand_symm_per_channel_quant_params, data.draw(index_st(n)),
                    data.draw(st.sampled_from([SymmPerChannelQuantParams((0.5, 0.5), 0),
                                               SymmPerChannelQuantParams((0.5,), 3), None, (0.5, 0)])))
    if data.draw(st.integers(0, 3)) > 0:
        # The usual way models end: every operation output that nobody reads is a model output,
        # every temporary that is read but not written is a model input.
        ins, outs = _plausible_io(model, valued)
        attempt(model.identify_inputs_and_outputs, ins, outs)

    ok, _ = attempt(model.finish)
    if not ok:
        # A failed finish leaves the model unusable, never half-finished.
        assert not model.finished
        attempt(Compilation, model)
        return
    outcome.reached("finished")

    on_all = data.draw(st.booleans(), label="Compilation(model)")
    ok, compilation = (attempt(Compilation, model) if on_all
                       else attempt(Compilation.for_devices, model, [get_device("nnapi-reference")]))
    if not ok:
        return
    attempt(compilation.set_preference, data.draw(st.sampled_from([0, 1, 2, 3, -1])))
    ok, _ = attempt(compilation.finish)
    if not ok:
        return
    outcome.reached("compiled")

    ok, execution = attempt(Execution, compilation)
    if not ok:
        return
    attempt(execution.set_loop_timeout, 10_000_000)
    for k, operand_index in enumerate(model.inputs):
        attempt(execution.set_input, data.draw(st.sampled_from([k] * 12 + [-1, k + 7])),
                _random_input(data, model.operand_type(operand_index)))
    bound: dict[int, np.ndarray] = {}
    for k, operand_index in enumerate(model.outputs):
        if data.draw(st.booleans()):
            t = model.operand_type(operand_index)
            dims = tuple(d if d > 0 else 1 for d in (t.dimensions or ()))
            arr = np.zeros(dims, t.dtype)
            if attempt(execution.set_output, k, arr)[0]:
                bound[k] = arr
    how = data.draw(st.sampled_from(["compute"] * 5 + ["burst", "async", "fenced"]), label="how")
    if how == "burst":
        ok, burst = attempt(Burst, compilation)
        ok, _ = attempt(execution.burst_compute, burst) if ok else (False, None)
    elif how in ("async", "fenced"):
        ok, event = (attempt(execution.start_compute) if how == "async"
                     else attempt(execution.start_compute_with_dependencies, []))
        ok, _ = attempt(event.wait, 30) if ok else (False, None)
    else:
        ok, _ = attempt(execution.compute)
    if not ok:
        return
    outcome.reached("computed")
    for k in range(len(model.outputs)):
        ok, out = attempt(execution.get_output, k)
        assert ok, "a successful computation has every output"
        assert isinstance(out, np.ndarray)
        assert out.dtype == model.operand_type(model.outputs[k]).dtype
        dims = attempt(execution.get_output_operand_dimensions, k)[1]
        assert tuple(out.shape) == tuple(dims)
        if k in bound:
            assert np.shares_memory(out, bound[k]) or out.size == 0
    ok, duration = attempt(execution.get_duration, 0)
    assert not ok or isinstance(duration, int)


def _well_formed_chain(data: st.DataObject, model: Model, valued: set[int]) -> None:
    """1 to 3 binary float operations, each reading the previous result (or a fresh input)."""
    t = OperandType(OperandCode.TENSOR_FLOAT32, data.draw(st.sampled_from([(2, 2), (2, 2), (0, 2), (1, 2, 2)])))
    fuse = model.add_operand(OperandType(OperandCode.INT32))
    model.set_operand_value(fuse, np.int32(data.draw(st.sampled_from([0, 1, 2, 3]))))
    valued.add(fuse)
    previous = model.add_operand(t)
    for _ in range(data.draw(st.integers(1, 3))):
        other = model.add_operand(t)
        if data.draw(st.booleans()) and t.is_fully_specified:
            model.set_operand_value(other, np.full(t.dimensions, 1.5, np.float32))
            valued.add(other)
        out = model.add_operand(t)
        model.add_operation(data.draw(st.sampled_from(GOOD_OPS)), [previous, other, fuse], [out])
        previous = out


def _plausible_io(model: Model, valued: set[int]) -> tuple[list[int], list[int]]:
    ops = model.operations()
    written = {o for _, _, outs in ops for o in outs}
    read = {i for _, ins, _ in ops for i in ins}
    ins = sorted(read - written - valued)
    outs = sorted(written - read) or sorted(written)[:1]
    return ins, outs


def _random_input(data: st.DataObject, t: OperandType) -> Any:
    kind = data.draw(st.integers(0, 19), label="input kind")
    if kind < 18:
        try:
            dtype = t.dtype
        except KeyError:
            dtype = np.float32
        dims = tuple(d if d > 0 else data.draw(st.integers(1, 3)) for d in (t.dimensions or ()))
        return (np.arange(int(np.prod(dims, dtype=np.int64)) if dims else 1) % 5).astype(dtype).reshape(dims)
    return data.draw(st.sampled_from([None, np.zeros((3,), np.float32), np.zeros((2, 2), np.float64), "x",
                                      [[1.0, 2.0], [3.0, 4.0]], np.zeros((1, 2, 2), np.float32)]))


_SUB_MODEL: Model | None = None


def _finished_sub_model() -> Model:
    global _SUB_MODEL
    if _SUB_MODEL is None:
        m = Model()
        for t in (OperandType(OperandCode.TENSOR_FLOAT32, (2, 2)),) * 2 + (OperandType(OperandCode.INT32),) + (
                OperandType(OperandCode.TENSOR_FLOAT32, (2, 2)),):
            m.add_operand(t)
        m.set_operand_value(2, np.int32(0))
        m.add_operation(OperationCode.ADD, [0, 1, 2], [3])
        m.identify_inputs_and_outputs([0, 1], [3])
        m.finish()
        _SUB_MODEL = m
    return _SUB_MODEL


def _freed_memory() -> Memory:
    m = Memory.create_shared(64)
    m.free()
    return m


COMMON = dict(deadline=None, derandomize=True, database=None, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


def _run_counting(max_examples: int) -> dict[str, int]:
    """Run the property over a fixed batch and count how far the examples got."""
    outcome = Outcome()

    @settings(max_examples=max_examples, **COMMON)
    @given(st.data())
    def run(data: st.DataObject) -> None:
        build_and_run(data, outcome)

    run()
    return outcome.stages


def test_random_models_only_raise_mlts_error() -> None:
    """The property, plus a guard against a generator that never gets past finish().

    The guard counts over all 1000 examples rather than a small batch of its own: Hypothesis also draws
    constants found in the modules loaded so far, so the mix of examples depends on what the suite
    imported first (150 examples reached execution between 4 and 40 times). Over 1000 it was 97 to
    141 finished, 52 to 80 computed; a broken generator reaches neither."""
    stages = _run_counting(1000)
    assert stages.get("finished", 0) >= 15, stages
    assert stages.get("computed", 0) >= 5, stages


@pytest.mark.slow
def test_random_models_only_raise_mlts_error_slow() -> None:
    """~35 s on 2 cores: the suite keeps under 20 minutes."""
    _run_counting(2000)
