"""Corner cases: NaN and infinite inputs, zero-sized and very large dimensions, too-small output
buffers, omitted optional operands. What each may legitimately end in is listed with it; a crash of
the client, an exception other than MltsError, or a dead driver (DEAD_OBJECT) never is.

The test process runs with a bounded address space (see StressContext.open), so a driver that
tries to allocate a huge tensor gets an allocation failure instead of taking the machine down.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np

from ..runtime import (Execution, FuseCode, MltsError, Model, OperandCode, OperandType, OperationCode, PaddingCode,
                       ResultCode)
from .context import StressContext, StressSkipped, describe_error
from .graph_spec import GraphBuilder, build_model
from .models import compare

F32 = OperandCode.TENSOR_FLOAT32
I32 = OperandCode.TENSOR_INT32
#: clean refusals of work that cannot be done
CLEAN = {ResultCode.BAD_DATA, ResultCode.OP_FAILED, ResultCode.OUT_OF_MEMORY, ResultCode.RESOURCE_EXHAUSTED_TRANSIENT,
         ResultCode.RESOURCE_EXHAUSTED_PERSISTENT, ResultCode.UNMAPPABLE, ResultCode.OUTPUT_INSUFFICIENT_SIZE}


class CaseFailed(Exception):
    """A corner case ended in something a client must never see."""

    pass


def _attempt(what: str, fn: Callable[[], Any], allowed: set[ResultCode]) -> tuple[bool, Any]:
    """(True, value) or (False, the MltsError) when its code is allowed; anything else fails the case."""
    try:
        return True, fn()
    except MltsError as e:
        if e.code not in allowed:
            raise CaseFailed(f"{what}: {describe_error(e)} (expected success or one of "
                             f"{', '.join(sorted(c.name for c in allowed))})") from None
        return False, e
    except Exception as e:  # a client must only ever see MltsError
        raise CaseFailed(f"{what}: {type(e).__name__} escaped the API: {e}") from None


def _single_op(dims, op: OperationCode = OperationCode.RELU) -> Model:
    """One elementwise operation on one input: RELU(x), or ADD(x, x) (what NPU drivers that take no
    activation of their own still take)."""
    m = Model()
    a = m.add_operand(OperandType.tensor(F32, dims))
    b = m.add_operand(OperandType.tensor(F32, dims))
    if op == OperationCode.ADD:
        fuse = m.add_operand(OperandType(OperandCode.INT32))
        m.set_operand_value(fuse, np.int32(FuseCode.NONE))
        m.add_operation(op, [a, a, fuse], [b])
    else:
        m.add_operation(op, [a], [b])
    m.identify_inputs_and_outputs([a], [b])
    m.finish()
    return m


def _elementwise(ctx: StressContext, dims) -> Model | None:
    """The first single-operation model of RELU or ADD on `dims` that the driver takes (None: neither)."""
    for op in (OperationCode.RELU, OperationCode.ADD):
        model = _single_op(dims, op)
        if ctx.supports(model):
            return model
    return None


# -- the cases: each returns a note, raises CaseFailed, or returns None when it does not apply ---
def nan_inf_inputs(ctx: StressContext) -> str | None:
    """NaN, +-inf and huge finite inputs through a real model: a result or a clean error."""
    try:
        m = ctx.usable_models(["convnet_f32", "conv_add_f32"])[0]
    except StressSkipped:
        return None
    c = ctx.compile(m.model)
    x = m.inputs[0].copy()
    flat = x.reshape(-1)
    flat[0::7] = np.nan
    flat[1::7] = np.inf
    flat[2::7] = -np.inf
    flat[3::7] = np.finfo(np.float32).max
    with warnings.catch_warnings():  # NaN arithmetic warnings are the point here
        warnings.simplefilter("ignore", RuntimeWarning)
        ok, _ = _attempt(f"{m.name} with NaN/inf inputs", lambda: ctx.run(c, [x] + m.inputs[1:]), CLEAN)
    ctx.check(m, ctx.run(c, m.inputs), "after NaN/inf inputs")  # and the compilation is still good
    return f"{m.name}: {'ran' if ok else 'refused cleanly'}"


def zero_sized(ctx: StressContext) -> str | None:
    """An input with an unknown dimension given as 0: an empty result or a clean error."""
    m = _elementwise(ctx, (0, 4))
    if m is None:
        return None
    ok, c = _attempt("compiling a model with an unknown dimension", lambda: ctx.compile(m), CLEAN)
    if not ok:
        return "refused at compilation"

    def run() -> Any:
        e = Execution(c)
        e.set_input(0, np.zeros((0, 4), np.float32))
        e.compute()
        return e.get_output(0)
    ok, out = _attempt("executing with a zero-sized input", run, CLEAN)
    if ok and np.asarray(out).size != 0:
        raise CaseFailed(f"a zero-sized input gave {np.asarray(out).size} output values")
    return "empty result" if ok else f"refused cleanly ({out.code.name})"


def huge_dimensions(ctx: StressContext) -> str | None:
    """Dimensions whose tensors cannot exist (up to int64 overflow of the element count)."""
    notes = []
    for dims in ((1 << 16, 1 << 16, 16), (1 << 31,), (65535, 65535, 65535, 65535), (1 << 20, 1 << 20)):
        def build_and_run(dims=dims) -> Any:
            model = _elementwise(ctx, dims)
            if model is None:
                raise MltsError(ResultCode.BAD_DATA, "not supported by the driver")
            c = ctx.compile(model)
            e = Execution(c)
            e.set_input(0, np.zeros(4, np.float32), OperandType.tensor(F32, dims))
            e.compute()
        ok, err = _attempt(f"an elementwise operation on {list(dims)}", build_and_run, CLEAN)
        if ok:
            raise CaseFailed(f"an elementwise operation on {list(dims)} claimed success: no such tensor fits in "
                             f"memory")
        notes.append(err.code.name)
        ctx.beat()
    return "refused cleanly: " + ", ".join(notes)


def small_output_buffers(ctx: StressContext) -> str | None:
    """A fully specified output bound to a too-small buffer, and a dynamic output computed into one:
    BAD_DATA or OUTPUT_INSUFFICIENT_SIZE, then the right buffer works."""
    notes = []
    model = _elementwise(ctx, (2, 8))
    if model is not None:
        c = ctx.compile(model)
        e = Execution(c)
        e.set_input(0, np.ones((2, 8), np.float32))
        ok, err = _attempt("set_output with too small a buffer", lambda: e.set_output(0, np.empty(3, np.float32)),
                           {ResultCode.BAD_DATA, ResultCode.OUTPUT_INSUFFICIENT_SIZE})
        if ok:
            ok, err = _attempt("compute into too small a buffer", e.compute,
                               {ResultCode.OUTPUT_INSUFFICIENT_SIZE, ResultCode.BAD_DATA})
            if ok:
                raise CaseFailed("computing into a 3-element buffer for 16 values succeeded")
        notes.append(err.code.name)
    dyn = Model()
    a = dyn.add_operand(OperandType.tensor(F32, (2, 8)))
    s = dyn.add_operand(OperandType.tensor(I32, (2,)))
    b = dyn.add_operand(OperandType.tensor(F32, (0, 0)))
    dyn.add_operation(OperationCode.RESHAPE, [a, s], [b])
    dyn.identify_inputs_and_outputs([a, s], [b])
    dyn.finish()
    if ctx.supports(dyn):
        ok, c = _attempt("compiling a model with a dynamic output shape", lambda: ctx.compile(dyn), CLEAN)
        if ok:
            e = Execution(c)
            e.set_input(0, np.arange(16, dtype=np.float32).reshape(2, 8))
            e.set_input(1, np.asarray([4, 4], np.int32))
            e.set_output(0, np.empty(5, np.float32))
            ok, err = _attempt("compute into too small a dynamic output", e.compute,
                               {ResultCode.OUTPUT_INSUFFICIENT_SIZE})
            if ok:
                raise CaseFailed("computing 16 values into a 5-element dynamic output succeeded")
            dims = e.get_output_operand_dimensions(0)
            if tuple(dims) != (4, 4):
                raise CaseFailed(f"after OUTPUT_INSUFFICIENT_SIZE the output dimensions read {dims}, not [4, 4]")
            e2 = Execution(c)
            e2.set_input(0, np.arange(16, dtype=np.float32).reshape(2, 8))
            e2.set_input(1, np.asarray([4, 4], np.int32))
            out = np.empty((4, 4), np.float32)
            e2.set_output(0, out)
            e2.compute()
            if not np.array_equal(out.reshape(-1), np.arange(16, dtype=np.float32)):
                raise CaseFailed("a dynamic RESHAPE gave wrong values with a right-sized buffer")
            notes.append(err.code.name)
    return ", ".join(notes) or None


def _omitted_specs() -> list[tuple[str, dict]]:
    rng = np.random.default_rng(11)
    out = []
    for name, code, extra in (("TRANSPOSE without perm", OperationCode.TRANSPOSE, "omitted"),
                              ("SQUEEZE without axes", OperationCode.SQUEEZE, "omitted"),
                              ("SOFTMAX without axis", OperationCode.SOFTMAX, None)):
        b = GraphBuilder()
        dims = (1, 3, 1, 4) if code == OperationCode.SQUEEZE else (2, 3, 4)
        x = b.input(OperandType.tensor(F32, dims), rng.uniform(-2, 2, dims))
        if code == OperationCode.TRANSPOSE:
            y = b.temp(OperandType.tensor(F32, dims[::-1]))
            b.op(code, [x, b.omitted(OperandType.tensor(I32, (3,)))], [y])
        elif code == OperationCode.SQUEEZE:
            y = b.temp(OperandType.tensor(F32, (3, 4)))
            b.op(code, [x, b.omitted(OperandType.tensor(I32, (1,)))], [y])
        else:
            y = b.temp(OperandType.tensor(F32, dims))
            b.op(code, [x, b.f32(1.0)], [y])
        b.output(y)
        out.append((name, b.spec()))
    b = GraphBuilder()  # CONV_2D without the optional layout flag and dilation
    x = b.input(OperandType.tensor(F32, (1, 5, 5, 2)), rng.uniform(-1, 1, (1, 5, 5, 2)))
    y = b.temp(OperandType.tensor(F32, (1, 5, 5, 3)))
    b.op(OperationCode.CONV_2D, [x, b.const(OperandType.tensor(F32, (3, 3, 3, 2)), rng.uniform(-.5, .5, (3, 3, 3, 2))),
                                 b.const(OperandType.tensor(F32, (3,)), np.zeros(3)), b.i32(PaddingCode.SAME),
                                 b.i32(1), b.i32(1), b.i32(FuseCode.NONE)], [y])
    b.output(y)
    out.append(("CONV_2D without layout and dilation", b.spec()))
    return out


def omitted_optional_operands(ctx: StressContext) -> str | None:
    """Operations with optional operands left out must match the reference (CTS tolerance)."""
    ran = []
    for name, spec in _omitted_specs():
        model, inputs = build_model(spec)
        if not ctx.supports(model):
            continue
        expected = ctx.run(ctx.compile(model, reference=True), inputs)
        ok, actual = _attempt(name, lambda: ctx.run(ctx.compile(model), inputs), {ResultCode.OP_FAILED})
        if not ok:
            raise CaseFailed(f"{name}: {describe_error(actual)}")
        why = compare(actual[0], expected[0], F32, whole_model=False)
        if why is not None:
            raise CaseFailed(f"{name}: {why}")
        ran.append(name)
    return f"{len(ran)} ran" if ran else None


CASES: dict[str, Callable[[StressContext], str | None]] = {
    "nan_inf_inputs": nan_inf_inputs,
    "zero_sized": zero_sized,
    "huge_dimensions": huge_dimensions,
    "small_output_buffers": small_output_buffers,
    "omitted_optional_operands": omitted_optional_operands,
}


def corner_cases(ctx: StressContext) -> dict[str, Any]:
    """Every case (or `cases`), then the liveness check: all cases run even when one fails."""
    wanted = ctx.param("cases", None) or list(CASES)
    results: dict[str, str] = {}
    failures = []
    for name in wanted:
        try:
            note = CASES[name](ctx)
            results[name] = note if note is not None else "not applicable"
        except CaseFailed as e:
            results[name] = f"FAILED: {e}"
            failures.append(f"{name}: {e}")
        except StressSkipped:  # the case's models do not exercise the driver
            results[name] = "not applicable"
        except MltsError as e:  # outside what a case tolerates (e.g. DEAD_OBJECT while setting up)
            results[name] = f"FAILED: {describe_error(e)}"
            failures.append(f"{name}: {describe_error(e)}")
        ctx.log(f"corner case {name}: {results[name]}")
        ctx.beat()
    if failures:
        ctx.fail(failures[0] + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""), cases=results)
    if all(note == "not applicable" for note in results.values()):
        ctx.skip(f"{ctx.driver} takes none of the operations the corner cases use (RELU, ADD, RESHAPE, TRANSPOSE, "
                 f"SQUEEZE, SOFTMAX, CONV_2D, or the stress models)")
    try:
        ctx.liveness(ctx.usable_models(["convnet_f32", "conv_add_f32", "convnet_u8"])[0])
    except StressSkipped:
        pass
    return {"cases": results}
