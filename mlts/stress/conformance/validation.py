"""Conformance: invalid arguments are refused with BAD_DATA, by the driver itself (straight through the
HAL, as VTS's validation tests call a driver) and by the runtime's public API, and the driver still
runs the model correctly afterwards."""
from __future__ import annotations

import dataclasses
from typing import Any

from ...runtime import Compilation, Execution, MemoryDesc, MltsError, Preference, Priority, ResultCode
from ...runtime.hal import BufferDesc, BufferRole, DataLocation, RequestArgument
from ..context import StressContext
from .checks import (Checks, HalRequest, NotApplicable, compile_on, driver_model, expect_code, expect_error,
                     expect_outputs, expect_success, hal_execute, hal_prepare)

BAD = (ResultCode.BAD_DATA,)


def validation(ctx: StressContext) -> dict[str, Any]:
    checks = Checks(ctx, "validation")
    m = driver_model(ctx)
    if m is None:
        return checks.without_model()
    hal = m.model.hal_model()
    driver = ctx.device.driver
    prepared = hal_prepare(ctx, m)

    def refused_preparation(**bad: Any):
        args = {"preference": Preference.FAST_SINGLE_ANSWER, "priority": Priority.MEDIUM, "deadline": None,
                "cache": None, **bad}
        return lambda: expect_error(f"prepare_model({', '.join(f'{k}={v!r}' for k, v in bad.items())})",
                                    lambda: driver.prepare_model(hal, args["preference"], args["priority"],
                                                                 args["deadline"], args["cache"]), BAD)

    checks.run("prepare_model refuses an invalid priority", refused_preparation(priority=42))
    checks.run("prepare_model refuses an invalid preference", refused_preparation(preference=7))
    checks.run("prepare_model refuses a deadline that is not a time", refused_preparation(deadline="soon"))
    checks.run("prepare_model refuses malformed cache handles", refused_preparation(cache="no handles"))

    def malformed_model():
        op = hal.main.operations[0]
        broken = dataclasses.replace(op, inputs=(len(hal.main.operands) + 5,) + tuple(op.inputs[1:]))
        main = dataclasses.replace(hal.main, operations=(broken,) + tuple(hal.main.operations[1:]))
        bad_model = dataclasses.replace(hal, main=main)
        expect_error("get_supported_operations(operation input out of range)",
                     lambda: driver.get_supported_operations(bad_model), BAD)
        return expect_error("prepare_model(operation input out of range)",
                            lambda: driver.prepare_model(bad_model, Preference.FAST_SINGLE_ANSWER, Priority.MEDIUM,
                                                         None, None), BAD)
    checks.run("a malformed model is refused", malformed_model)

    def refused_request(what: str, change):
        def check():
            r = HalRequest(m)
            result = hal_execute(prepared, change(r.request))
            return expect_code(what, result.status, BAD, result.message)
        return check

    checks.run("execution refuses a request with an input missing",
               refused_request("request without its last input",
                               lambda req: dataclasses.replace(req, inputs=req.inputs[:-1])))
    checks.run("execution refuses an input outside its pool",
               refused_request("input 0 past the end of its pool", lambda req: dataclasses.replace(
                   req, inputs=(RequestArgument(False, DataLocation(0, 4096, req.inputs[0].location.length)),)
                   + req.inputs[1:])))
    checks.run("execution refuses an input of the wrong length",
               refused_request("input 0 one byte short", lambda req: dataclasses.replace(
                   req, inputs=(RequestArgument(False, DataLocation(0, 0, req.inputs[0].location.length - 1)),)
                   + req.inputs[1:])))
    checks.run("execution refuses a pool index that does not exist",
               refused_request("output 0 in pool 99", lambda req: dataclasses.replace(
                   req, outputs=(RequestArgument(False, DataLocation(99, 0, req.outputs[0].location.length)),)
                   + req.outputs[1:])))

    def refused_execution_argument(**bad: Any):
        def check():
            args = {"measure": False, "deadline": None, "loop_timeout_ns": 2_000_000_000, **bad}
            result = prepared.execute_synchronously(HalRequest(m).request, args["measure"], args["deadline"],
                                                    args["loop_timeout_ns"])
            return expect_code(f"execute_synchronously({', '.join(f'{k}={v!r}' for k, v in bad.items())})",
                               result.status, BAD, result.message)
        return check

    checks.run("execution refuses a negative loop timeout", refused_execution_argument(loop_timeout_ns=-1))
    checks.run("execution refuses a deadline that is not a time", refused_execution_argument(deadline="late"))

    def invalid_roles():
        try:
            valid = driver.allocate(BufferDesc(), [prepared], [BufferRole(0, 0, 1.0)], [])
        except MltsError as e:
            if e.code == ResultCode.OP_FAILED:
                raise NotApplicable(f"{ctx.driver} has no memory domains (allocate: {e.message})") from None
            raise
        valid.buffer.free()
        n_in = len(hal.main.input_indexes)
        for what, roles in ((f"input role {n_in} of {n_in} inputs", ([BufferRole(0, n_in, 1.0)], [])),
                            ("a role on prepared model 1 of 1", ([BufferRole(1, 0, 1.0)], [])),
                            ("a frequency of 0", ([BufferRole(0, 0, 0.0)], [])),
                            ("no roles at all", ([], [])),
                            ("the same input role twice", ([BufferRole(0, 0, 1.0), BufferRole(0, 0, 0.5)], []))):
            expect_error(f"allocate({what})", lambda r=roles: driver.allocate(BufferDesc(), [prepared], *r), BAD)
        return "five kinds of invalid roles refused"
    checks.run("allocate refuses invalid roles", invalid_roles)

    # The runtime's public API refuses the same mistakes before any driver sees them.
    def api_priority_and_timeouts():
        c = Compilation.for_devices(m.model, [ctx.device])
        expect_error("Compilation.set_priority(42)", lambda: c.set_priority(42), BAD)
        expect_error("Compilation.set_timeout(-1)", lambda: c.set_timeout(-1), BAD)
        c.finish()
        e = Execution(c)
        expect_error("Execution.set_timeout(-5)", lambda: e.set_timeout(-5), BAD)
        expect_error("Execution.set_loop_timeout(1.5)", lambda: e.set_loop_timeout(1.5), BAD)
        return expect_error("Execution.start_compute_with_dependencies(timeout -1)",
                            lambda: e.start_compute_with_dependencies([], -1), BAD)
    checks.run("the runtime refuses invalid priorities and timeouts", api_priority_and_timeouts)

    def api_roles():
        c = compile_on(ctx, m)
        desc = MemoryDesc()
        expect_error("MemoryDesc.add_input_role(index out of range)",
                     lambda: desc.add_input_role(c, len(m.inputs), 1.0), BAD)
        expect_error("MemoryDesc.add_input_role(frequency 2.0)", lambda: desc.add_input_role(c, 0, 2.0), BAD)
        desc.add_input_role(c, 0, 1.0)
        expect_error("MemoryDesc.add_input_role(the same role twice)", lambda: desc.add_input_role(c, 0, 0.5), BAD)
        return None
    checks.run("the runtime refuses invalid memory roles", api_roles)

    def still_right():
        r = HalRequest(m)
        result = hal_execute(prepared, r.request)
        expect_success("execution after the refused calls", result)
        expect_outputs("execution after the refused calls", r.outputs(), m.expected())
        return f"{m.name} still right"
    checks.run("the driver still runs correctly after refusing", still_right)
    return checks.finish()


__all__ = ["validation"]
