"""Driver services: drivers in child processes, pools crossing as descriptors, death and fallback.

Each service is a real child process (about 0.3 s to start); the plain hosted kernel driver is shared
by the module, the crashing ones are made per test because crashing is what they are for.
"""
from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from fake_drivers import ADD, MUL, SUB, chain_expected, chain_model, dynamic_chain_model, rand, run
from mlts.runtime import (PROT_READ, Burst, Compilation, DeviceType, DurationCode, Execution, Memory, MltsError,
                          Model, OperandCode, OperandType, OperationCode, ResultCode, devices, get_device)
from mlts.runtime.drivers import KernelDriver
from mlts.runtime.service import ServiceDriver, host_driver

KERNELS = "service_test_drivers:kernel_driver"
CRASHING = "service_test_drivers:CrashingDriver"
HERE = os.path.dirname(__file__)


@pytest.fixture(scope="module")
def hosted():
    """The reference kernels in a service, named svc-kernels, declared faster than nnapi-reference."""
    driver = ServiceDriver(KERNELS, ("svc-kernels",))
    yield driver
    driver.close()


def reference():
    return get_device("nnapi-reference")


def big_constant_model(n: int, constant: Memory, offset: int = 0) -> Model:
    """out = (x + c) * x over n float32 values, with c a CONSTANT_REFERENCE in `constant`."""
    m = Model()
    t = OperandType(OperandCode.TENSOR_FLOAT32, (n,))
    x, c, act, s, out = (m.add_operand(t), m.add_operand(t), m.add_operand(OperandType(OperandCode.INT32)),
                         m.add_operand(t), m.add_operand(t))
    m.set_operand_value_from_memory(c, constant, offset, 4 * n)
    m.set_operand_value(act, np.int32(0))
    m.add_operation(OperationCode.ADD, [x, c, act], [s])
    m.add_operation(OperationCode.MUL, [s, x, act], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    return m


def compiled(model: Model, *devs) -> Compilation:
    c = Compilation.for_devices(model, list(devs))
    c.finish()
    return c


def is_gone(pid: int) -> bool:
    """The process has exited (a zombie left to a non-reaping init counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


# -- identity and hosting -------------------------------------------------------------------------
def test_service_is_listed_with_its_identity(register, hosted):
    (dev,) = register(hosted)
    assert dev in devices() and dev.hosting == "service" and dev.name == "svc-kernels"
    assert dev.type == DeviceType.ACCELERATOR
    assert dev.capabilities.performance(OperandCode.TENSOR_FLOAT32).exec_time == 0.5
    assert hosted.pid != os.getpid() and hosted.alive
    assert "svc-kernels" in repr(dev)


def test_host_driver_picks_hosting_and_names():
    local = host_driver(KERNELS, ("local",), hosting="in-process")
    assert isinstance(local, KernelDriver) and local.hosting == "in-process"
    with pytest.raises(MltsError) as e:
        host_driver(KERNELS, ("x",), hosting="elsewhere")
    assert e.value.code == ResultCode.BAD_DATA
    second = host_driver("service_test_drivers:two_drivers", name="svc-second")
    try:
        assert isinstance(second, ServiceDriver) and second.name == "svc-second"
    finally:
        second.close()
    with pytest.raises(MltsError) as e:
        ServiceDriver("service_test_drivers:two_drivers")
    assert e.value.code == ResultCode.BAD_DATA and "svc-first" in e.value.message


def test_services_that_cannot_start_fail_with_the_reference_named():
    with pytest.raises(MltsError) as e:
        ServiceDriver("no_such_module_anywhere:factory")
    assert e.value.code == ResultCode.BAD_DATA and "no_such_module_anywhere" in e.value.message
    t0 = time.monotonic()
    with pytest.raises(MltsError) as e:
        ServiceDriver("service_test_drivers:exiting_factory")
    assert e.value.code == ResultCode.DEAD_OBJECT and "exit code 3" in e.value.message
    assert "service_test_drivers:exiting_factory" in e.value.message
    assert time.monotonic() - t0 < 5


# -- results ----------------------------------------------------------------------------------------
def test_small_model_is_bit_identical_to_in_process(register, hosted):
    (dev,) = register(hosted)
    ops = [ADD, MUL, SUB, MUL]
    model = chain_model(ops, shape=(5, 7))
    x, y = rand((5, 7), seed=1), rand((5, 7), seed=2)
    hosted_out = run(compiled(model, dev), x, y)
    local_out = run(compiled(model, reference()), x, y)
    assert hosted_out.tobytes() == local_out.tobytes()
    np.testing.assert_allclose(hosted_out, chain_expected(ops, x, y), rtol=1e-6)
    # start_compute (asynchronous) and bursts go through the service too
    ex = Execution(compiled(model, dev))
    out = np.empty((5, 7), np.float32)
    ex.set_input(0, x), ex.set_input(1, y), ex.set_output(0, out)
    ex.start_compute().wait(10)
    assert out.tobytes() == local_out.tobytes()
    comp = compiled(model, dev)
    burst = Burst(comp)
    for k in range(3):
        ex = Execution(comp)
        xk = rand((5, 7), seed=10 + k)
        out = np.empty((5, 7), np.float32)
        ex.set_input(0, xk), ex.set_input(1, y), ex.set_output(0, out)
        ex.burst_compute(burst)
        assert out.tobytes() == run(compiled(model, reference()), xk, y).tobytes()
    burst.close()


def test_conv_model_is_bit_identical_and_its_weights_cross_as_a_descriptor(register, hosted):
    pytest.importorskip("onnx")
    from mlts.models import import_onnx
    from mlts.models.mobilenet import build_onnx, weight_shapes

    (dev,) = register(hosted)
    rng = np.random.default_rng(0)
    weights = {k: rng.normal(0, 0.2, s).astype(np.float32) for k, s in weight_shapes("v1", 0.25).items()}
    imported = import_onnx(build_onnx("v1", 0.25, 32, weights).SerializeToString())
    pools = imported.model.hal_model().pools
    weight_bytes = sum(p.size for p in pools)
    assert weight_bytes > 500_000
    before = hosted.channel_stats()
    comp = imported.compilation([dev])  # get_supported_operations + prepare_model
    after = hosted.channel_stats()
    assert after["fds_sent"] - before["fds_sent"] == len(pools)  # each pool's descriptor, once
    assert after["bytes_sent"] - before["bytes_sent"] < weight_bytes / 10  # the weights did not go through
    assert comp.plan.steps[0].device is dev
    x = rng.uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    hosted_out = imported.run({"input": x}, devices=[dev])
    local_out = imported.run({"input": x}, devices=[reference()])
    (name,) = hosted_out
    assert hosted_out[name].tobytes() == local_out[name].tobytes()


def test_partitions_carry_intermediates_and_dynamic_shapes_through_the_service(register):
    add_only = ServiceDriver(KERNELS, ("svc-add-only",), {"operations": [int(ADD)]})
    try:
        register(add_only)
        ops = [ADD, MUL, ADD]
        comp = Compilation(chain_model(ops))
        comp.finish()
        assert [s.device.name for s in comp.plan.steps] == ["svc-add-only", "nnapi-reference", "svc-add-only"]
        x, y = rand(seed=11), rand(seed=12)
        np.testing.assert_allclose(run(comp, x, y), chain_expected(ops, x, y), rtol=1e-6)
        # an output of unknown shape: the service reports it, the runtime grows its buffer and retries
        dyn = Compilation(dynamic_chain_model([ADD]))
        dyn.finish()
        assert dyn.plan.steps[0].device.name == "svc-add-only"
        ex = Execution(dyn)
        ex.set_input(0, x), ex.set_input(1, y)
        ex.compute()
        assert ex.get_output_operand_dimensions(0) == (3, 4)
        np.testing.assert_allclose(ex.get_output(0), x + y, rtol=1e-6)
    finally:
        add_only.close()


def test_memfd_and_file_pools_cross_once_and_requests_stay_out_of_the_channel(register, hosted, tmp_path):
    (dev,) = register(hosted)
    n = 64 * 1024  # 256 KiB per tensor
    c = np.linspace(-3, 3, n, dtype=np.float32)
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\0" * 4160 + c.tobytes())  # the constant sits at an unaligned file offset
    file_const = Memory.from_file(path, protect=PROT_READ)
    shared_const = Memory.create_shared(4 * n)
    shared_const.view()[:] = c.tobytes()
    x = np.random.default_rng(3).uniform(-2, 2, n).astype(np.float32)
    expected = (x + c) * x
    in_mem = Memory.create_shared(4 * n)
    in_mem.view()[:] = x.tobytes()
    out_path = tmp_path / "out.bin"
    out_path.write_bytes(b"\0" * (8 * n))
    out_file = Memory.from_file(out_path)
    for model in (big_constant_model(n, file_const, 4160), big_constant_model(n, shared_const)):
        comp = compiled(model, dev)
        for k in range(3):
            before = hosted.channel_stats()
            ex = Execution(comp)
            ex.set_input_from_memory(0, in_mem, 0, 4 * n)
            ex.set_output_from_memory(0, out_file, 4 * n, 4 * n)
            ex.compute()
            sent = hosted.channel_stats()
            assert sent["bytes_sent"] - before["bytes_sent"] < 8192  # 512 KiB of tensors, only handles crossed
            assert sent["bytes_received"] - before["bytes_received"] < 8192
            if k > 0:  # the service kept its mappings: no descriptor is sent again
                assert sent["fds_sent"] == before["fds_sent"]
            got = np.frombuffer(out_path.read_bytes(), np.float32)[n:]
            assert got.tobytes() == expected.tobytes()
            out_file.view(4 * n, 4 * n)[:] = b"\0" * (4 * n)


def test_dropped_models_and_pools_are_released_in_the_service(hosted):
    dev_driver = hosted
    baseline = dev_driver.service_stats()
    n = 4096
    const = Memory.create_shared(4 * n)
    model = big_constant_model(n, const)
    from mlts.runtime import Preference, Priority

    prepared = dev_driver.prepare_model(model.hal_model(), Preference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None)
    held = dev_driver.service_stats()
    assert held["prepared"] == baseline["prepared"] + 1 and held["pools"] == baseline["pools"] + 1
    del prepared, model, const
    gc.collect()
    assert dev_driver.service_stats() == baseline


def test_a_call_that_cannot_be_sent_fails_alone(hosted):
    with pytest.raises(MltsError) as e:
        hosted._conn.call("ping", (lambda: None,))  # not picklable
    assert e.value.code == ResultCode.OP_FAILED and "cannot send ping" in e.value.message
    assert hosted.alive and hosted.service_stats()["prepared"] >= 0


def test_concurrent_executions_from_four_threads(register, hosted):
    (dev,) = register(hosted)
    ops = [ADD, MUL, SUB]
    comp = compiled(chain_model(ops, shape=(16, 16)), dev)
    errors = []

    def worker(seed: int) -> None:
        try:
            for k in range(8):
                x, y = rand((16, 16), seed=seed * 100 + k), rand((16, 16), seed=seed)
                out = run(comp, x, y)
                np.testing.assert_allclose(out, chain_expected(ops, x, y), rtol=1e-6)
        except Exception as e:  # reported below, with the thread's seed
            errors.append((seed, e))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors


def test_timing_breakdown_adds_up(register, hosted):
    (dev,) = register(hosted)
    n = 64 * 1024
    const = Memory.create_shared(4 * n)
    comp = compiled(big_constant_model(n, const), dev)
    x = np.ones(n, np.float32)
    for _ in range(2):
        ex = Execution(comp)
        ex.set_measure_timing(True)
        ex.set_input(0, x)  # an application array: staged through shared memory by the runtime
        out = np.empty(n, np.float32)
        ex.set_output(0, out)
        t0 = time.perf_counter_ns()
        ex.compute()
        wall_us = (time.perf_counter_ns() - t0) // 1000
    b = ex.get_timing_breakdown()
    assert all(b[k] >= 0 for k in ("total", "runtime", "ipc", "driver"))
    assert b["runtime"] + b["ipc"] + b["driver"] == b["total"] <= wall_us
    assert b["total"] >= 0.5 * wall_us
    assert b["ipc"] > 0 and b["driver"] > 0 and b["device"] is not None and b["device"] <= b["driver"]
    (call,) = b["calls"]
    assert call["device_name"] == "svc-kernels" and call["hosting"] == "service" and call["status"] == "NO_ERROR"
    assert call["runtime"] > 0  # the staging copies of the input and output arrays
    # NNAPI's durations are the driver's own report, untouched
    assert ex.get_duration(DurationCode.IN_DRIVER) >= ex.get_duration(DurationCode.ON_HARDWARE) > 0
    assert ex.get_duration(DurationCode.ON_HARDWARE) == b["device"] * 1000
    # in-process drivers: everything is driver or runtime time
    local = Execution(compiled(big_constant_model(n, const), reference()))
    local.set_input(0, x), local.set_output(0, out)
    local.compute()
    lb = local.get_timing_breakdown()
    assert lb["ipc"] == 0 and lb["runtime"] + lb["driver"] == lb["total"] and lb["calls"][0]["hosting"] == "in-process"


# -- death ------------------------------------------------------------------------------------------
def test_service_aborting_at_execute_gives_dead_object_within_a_second(register):
    crashing = ServiceDriver(CRASHING, ("svc-crash-exec",), {"at": "execute", "delay_s": 0.3}, restart=False)
    try:
        (dev,) = register(crashing)
        comp = compiled(chain_model([ADD]), dev)
        x, y = rand(seed=1), rand(seed=2)
        events = []
        for _ in range(3):  # three calls in flight when the service dies
            ex = Execution(comp)
            ex.set_input(0, x), ex.set_input(1, y), ex.set_output(0, np.empty((3, 4), np.float32))
            events.append(ex.start_compute())
        t0 = time.monotonic()
        for event in events:
            with pytest.raises(MltsError) as e:
                event.wait(5)
            assert e.value.code == ResultCode.DEAD_OBJECT
            assert "svc-crash-exec" in e.value.message and "SIGABRT" in e.value.message
            assert "during execute" in e.value.message
        assert time.monotonic() - t0 < 0.3 + 1.0
        assert not crashing.alive and is_gone(crashing.pid)
        t0 = time.monotonic()
        with pytest.raises(MltsError) as e:  # later calls fail at once
            run(comp, x, y)
        assert e.value.code == ResultCode.DEAD_OBJECT and time.monotonic() - t0 < 0.5
        with pytest.raises(MltsError) as e:
            crashing.prepare_model(chain_model([ADD]).hal_model(), 1, 100, None, None)
        assert e.value.code == ResultCode.DEAD_OBJECT and "refused" in e.value.message
    finally:
        crashing.close()


def test_service_aborting_at_prepare_falls_back_to_the_cpu(register):
    crashing = ServiceDriver(CRASHING, ("svc-crash-prepare",), {"at": "prepare"}, restart=False)
    try:
        register(crashing)
        ops = [ADD, MUL]
        comp = Compilation(chain_model(ops))
        comp.finish()
        assert [s.device.name for s in comp.plan.steps] == ["nnapi-reference"]
        assert any("DEAD_OBJECT" in line and "falls back" in line for line in comp.plan_log)
        x, y = rand(seed=4), rand(seed=5)
        np.testing.assert_allclose(run(comp, x, y), chain_expected(ops, x, y), rtol=1e-6)
        assert not crashing.alive
    finally:
        crashing.close()


def test_service_dying_at_execution_follows_the_fallback_rules(register, caplog):
    caplog.set_level(logging.INFO, logger="mlts.ExecutionPlan")
    # The service takes ADD (declared faster), nnapi-reference MUL; ADD steps crash the service.
    crashing = ServiceDriver(CRASHING, ("svc-crash-add",), {"at": "execute", "operations": [int(ADD)]},
                             restart=True, max_restarts=2)
    try:
        (dev,) = register(crashing)
        ops = [ADD, MUL]
        model = chain_model(ops)
        x, y = rand(seed=6), rand(seed=7)
        # for_devices: no fallback, the error is returned
        explicit = compiled(model, dev, reference())
        assert [s.device.name for s in explicit.plan.steps] == ["svc-crash-add", "nnapi-reference"]
        with pytest.raises(MltsError) as e:
            run(explicit, x, y)
        assert e.value.code == ResultCode.DEAD_OBJECT
        first_pid = crashing.pid
        # Compilation(model): the next model-level call restarts the service; the failed step reruns on the CPU
        comp = Compilation(model)
        comp.finish()
        assert crashing.restarts == 1 and crashing.pid != first_pid
        assert [s.device.name for s in comp.plan.steps] == ["svc-crash-add", "nnapi-reference"]
        np.testing.assert_allclose(run(comp, x, y), chain_expected(ops, x, y), rtol=1e-6)
        assert any("DEAD_OBJECT" in r.message and "retrying the step on nnapi-reference" in r.message
                   for r in caplog.records)
        # the dead partition's later executions keep falling back, with correct results
        np.testing.assert_allclose(run(comp, x, y), chain_expected(ops, x, y), rtol=1e-6)
        # a single-device plan on the service falls back to the whole model on the CPU
        crashing_all = Compilation(chain_model([ADD]))
        crashing_all.finish()
        assert crashing.restarts == 2 and crashing_all.plan.steps[0].device is dev
        np.testing.assert_allclose(run(crashing_all, x, y), chain_expected([ADD], x, y), rtol=1e-6)
        # restarts are bounded: now the device supports nothing, and compilations go to the CPU
        after = Compilation(model)
        after.finish()
        assert [s.device.name for s in after.plan.steps] == ["nnapi-reference"]
    finally:
        crashing.close()


def test_deadline_bounds_the_wait_on_a_hung_service(register):
    hanging = ServiceDriver("service_test_drivers:HangingDriver", ("svc-hang",), {"sleep_s": 30.0})
    try:
        (dev,) = register(hanging)
        comp = compiled(chain_model([ADD]), dev)
        ex = Execution(comp)
        ex.set_timeout(200_000_000)
        ex.set_input(0, rand()), ex.set_input(1, rand()), ex.set_output(0, np.empty((3, 4), np.float32))
        t0 = time.monotonic()
        with pytest.raises(MltsError) as e:
            ex.compute()
        assert e.value.code == ResultCode.MISSED_DEADLINE_TRANSIENT and "svc-hang" in e.value.message
        assert time.monotonic() - t0 < 2.0
        hanging.wait_for_ready()  # busy, not dead: it still answers
        pid = hanging.pid
    finally:
        hanging.close()
    assert is_gone(pid)  # closing stops it even in the middle of a call


def test_call_timeout_kills_a_hung_service(register):
    hanging = ServiceDriver("service_test_drivers:HangingDriver", ("svc-hang2",), {"sleep_s": 30.0},
                            call_timeout=0.5, restart=False)
    try:
        (dev,) = register(hanging)
        ex = Execution(compiled(chain_model([ADD]), dev))
        ex.set_input(0, rand()), ex.set_input(1, rand()), ex.set_output(0, np.empty((3, 4), np.float32))
        t0 = time.monotonic()
        with pytest.raises(MltsError) as e:
            ex.compute()
        assert e.value.code == ResultCode.DEAD_OBJECT and "did not answer execute within 0.5 s" in e.value.message
        assert time.monotonic() - t0 < 2.0 and is_gone(hanging.pid)
    finally:
        hanging.close()


def test_service_exits_with_its_client():
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {HERE!r})
        from mlts.runtime.service import ServiceDriver
        d = ServiceDriver({KERNELS!r}, ("svc-orphan",))
        print(d.pid, flush=True)
        os.kill(os.getpid(), 9)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9
    pid = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 2.0
    while not is_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert is_gone(pid)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork of a threaded process, on purpose
def test_forked_child_neither_uses_nor_stops_the_parents_service(register, hosted):
    (dev,) = register(hosted)
    pid = os.fork()
    if pid == 0:  # the child: the connection is marked unusable, and its exit must not stop the service
        from mlts.runtime.service.client import _close_all

        code = 0 if not hosted.alive and "forked" in (hosted._conn.death or "") else 1
        _close_all()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    x, y = rand(seed=8), rand(seed=9)
    assert hosted.alive
    np.testing.assert_allclose(run(compiled(chain_model([ADD]), dev), x, y), x + y, rtol=1e-6)
