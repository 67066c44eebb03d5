"""Quality of service: priorities through the per-client device queues, deadlines, the busy and
too-big codes, invalid settings; in this process and with a kernel driver hosted as a service.

Ordering tests are deterministic: runs are held at a checkpoint by files (qos_test_drivers) and the
tests wait for observable states (a file created, a queue's counters), never for a time to pass.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from fake_drivers import ADD, MUL, activation, chain_expected, chain_model, rand, tensor
from mlts.runtime import (Capabilities, Compilation, Execution, MltsError, Model, Priority, ResultCode, get_device,
                          qos)
from mlts.runtime.drivers import KernelDriver
from mlts.runtime.drivers.faulty import create as create_faulty
from mlts.runtime.app.plugins import load_drivers
from mlts.runtime.service import ServiceDriver
from qos_test_drivers import GatedDriver

CAPS = Capabilities.uniform(0.5, 0.5)  # preferred over nnapi-reference
OPS = [ADD] * 4
WAIT_S = 20.0  # upper bound for states that come within milliseconds; reached only when broken


def until(condition, what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def tagged(tag: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs whose first element is the run's tag (see qos_test_drivers)."""
    x = rand(seed=seed)
    x.flat[0] = tag
    return x, rand(seed=seed + 100)


def compile_for(device, priority=Priority.MEDIUM, ops=OPS) -> Compilation:
    c = Compilation.for_devices(chain_model(ops), [device])
    c.set_priority(priority)
    c.finish()
    return c


class Runs:
    """Executions in threads; records the order in which they finish and their outcomes."""

    def __init__(self) -> None:
        self.finished: list[str] = []
        self.outcomes: dict[str, object] = {}
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self, name: str, comp: Compilation, x, y, timeout_ns: int | None = None) -> None:
        def work():
            ex = Execution(comp)
            if timeout_ns is not None:
                ex.set_timeout(timeout_ns)
            ex.set_input(0, x)
            ex.set_input(1, y)
            out = np.full(x.shape, np.nan, np.float32)
            ex.set_output(0, out)
            try:
                ex.compute()
                outcome = out
            except MltsError as e:
                outcome = e
            with self._lock:
                self.finished.append(name)
                self.outcomes[name] = outcome

        t = threading.Thread(target=work, name=f"qos-{name}", daemon=True)
        self.threads.append(t)
        t.start()

    def join(self) -> None:
        for t in self.threads:
            t.join(WAIT_S)
        assert not any(t.is_alive() for t in self.threads)


class Gates:
    def __init__(self, directory: str) -> None:
        self.dir = directory

    def path(self, tag: int, what: str) -> str:
        return os.path.join(self.dir, f"{tag}.{what}")

    def set(self, tag: int, what: str, text: str = "") -> None:
        with open(self.path(tag, what), "w") as f:
            f.write(text)

    def has(self, tag: int, what: str) -> bool:
        return os.path.exists(self.path(tag, what))

    def checkpoints(self, tag: int) -> int:
        with open(self.path(tag, "checkpoints")) as f:
            return int(f.read())


@pytest.fixture
def gates(tmp_path):
    return Gates(str(tmp_path))


@pytest.fixture
def gated(register, gates):
    driver = GatedDriver("qos-gated", gates.dir)
    (device,) = register(driver)
    yield device
    qos.configure(device)  # back to the defaults


# -- priority ----------------------------------------------------------------------------------------------
def test_high_priority_run_started_during_a_low_one_finishes_first(gated, gates):
    low, high = compile_for(gated, Priority.LOW), compile_for(gated, Priority.HIGH)
    (xl, yl), (xh, yh) = tagged(1, 1), tagged(2, 2)
    gates.set(1, "gate")
    gates.set(2, "gate")
    runs = Runs()
    runs.start("low", low, xl, yl)
    until(lambda: gates.has(1, "entered"), "the low run to start")
    runs.start("high", high, xh, yh)
    until(lambda: gates.has(2, "entered"), "the high run to start")
    gates.set(1, "go")  # the low run goes on to its next checkpoint, where it must yield
    queue = qos.queue_for(gated)
    until(lambda: queue.stats()["yields"] >= 1, "the low run to yield")
    assert runs.finished == []
    gates.set(2, "go")
    runs.join()
    assert runs.finished == ["high", "low"]
    # Resumed after yielding: the same result as an undisturbed run (runs are deterministic).
    np.testing.assert_array_equal(runs.outcomes["low"], chain_expected(OPS, xl, yl))
    np.testing.assert_array_equal(runs.outcomes["high"], chain_expected(OPS, xh, yh))
    assert gates.checkpoints(1) == len(OPS) and gates.checkpoints(2) == len(OPS)


def test_without_a_priority_difference_nothing_yields(gated, gates):
    first, second = compile_for(gated), compile_for(gated)
    (x1, y1), (x2, y2) = tagged(1, 3), tagged(2, 4)
    gates.set(1, "gate")
    gates.set(2, "gate")
    runs = Runs()
    runs.start("first", first, x1, y1)
    until(lambda: gates.has(1, "entered"), "the first run to start")
    runs.start("second", second, x2, y2)
    until(lambda: gates.has(2, "entered"), "the second run to start")
    gates.set(1, "go")
    until(lambda: runs.finished == ["first"], "the first run to finish while the second is held")
    gates.set(2, "go")
    runs.join()
    assert qos.queue_for(gated).stats()["yields"] == 0


def test_equal_priorities_are_served_first_come_first_served(gated, gates):
    qos.configure(gated, max_concurrent=1)
    comp = compile_for(gated, Priority.LOW)
    inputs = {tag: tagged(tag, 10 + tag) for tag in (1, 2, 3, 4)}
    gates.set(1, "gate")
    runs = Runs()
    queue = qos.queue_for(gated)
    runs.start("a", comp, *inputs[1])
    until(lambda: gates.has(1, "entered"), "a to hold the device")
    for k, (name, tag) in enumerate([("b", 2), ("c", 3), ("d", 4)], start=1):
        runs.start(name, comp, *inputs[tag])
        until(lambda: queue.stats()["waiting"] == k, f"{name} to queue")
    gates.set(1, "go")
    runs.join()
    assert runs.finished == ["a", "b", "c", "d"]
    for name, tag in [("a", 1), ("b", 2), ("c", 3), ("d", 4)]:
        np.testing.assert_array_equal(runs.outcomes[name], chain_expected(OPS, *inputs[tag]))


def test_a_preempted_run_keeps_its_place_ahead_of_later_equals(gated, gates):
    """One at a time: A (low) runs, B (low) waits, H (high) arrives: A yields to H at its next
    checkpoint, then A resumes before B (no starvation of earlier equal-priority work)."""
    qos.configure(gated, max_concurrent=1)
    low, high = compile_for(gated, Priority.LOW), compile_for(gated, Priority.HIGH)
    inputs = {tag: tagged(tag, 20 + tag) for tag in (1, 2, 3)}
    gates.set(1, "gate")
    runs = Runs()
    queue = qos.queue_for(gated)
    runs.start("A", low, *inputs[1])
    until(lambda: gates.has(1, "entered"), "A to hold the device")
    runs.start("B", low, *inputs[2])
    until(lambda: queue.stats()["waiting"] == 1, "B to queue")
    runs.start("H", high, *inputs[3])
    until(lambda: queue.stats()["waiting"] == 2, "H to queue")
    gates.set(1, "go")
    runs.join()
    assert runs.finished == ["H", "A", "B"]
    assert queue.stats()["yields"] == 1
    for name, tag in [("A", 1), ("B", 2), ("H", 3)]:
        np.testing.assert_array_equal(runs.outcomes[name], chain_expected(OPS, *inputs[tag]))


def test_priority_reaches_a_kernel_driver_hosted_as_a_service(register, gates):
    """The priority crosses with prepare_model; the service's queue pre-empts at operation checkpoints."""
    driver = ServiceDriver("qos_test_drivers:gated_driver", ("svc-qos-gated", gates.dir))
    try:
        (device,) = register(driver)
        low, high = compile_for(device, Priority.LOW), compile_for(device, Priority.HIGH)
        (xl, yl), (xh, yh) = tagged(1, 31), tagged(2, 32)
        gates.set(1, "gate")
        gates.set(2, "gate")
        runs = Runs()
        runs.start("low", low, xl, yl)
        until(lambda: gates.has(1, "entered"), "the low run to start in the service")
        runs.start("high", high, xh, yh)
        until(lambda: gates.has(2, "entered"), "the high run to start in the service")
        gates.set(1, "go")
        until(lambda: driver.service_stats().get("qos_yields", 0) >= 1, "the low run to yield in the service")
        assert runs.finished == []
        gates.set(2, "go")
        runs.join()
        # The order in which the service's queue finished them (the client threads may see the replies in
        # either order, as the low run resumes as soon as the high one is done).
        finished = [label.rsplit(" ", 1)[1] for label in driver.service_stats()["qos_finished"]]
        assert finished == ["HIGH", "LOW"]
        np.testing.assert_array_equal(runs.outcomes["low"], chain_expected(OPS, xl, yl))
        np.testing.assert_array_equal(runs.outcomes["high"], chain_expected(OPS, xh, yh))
    finally:
        driver.close()


def test_a_partition_boundary_is_a_checkpoint(register, gates):
    """Plan A, B, A: a low run between its partitions waits for the high run that holds device A."""
    adds = GatedDriver("qos-adds", gates.dir, operations=[ADD])
    muls = KernelDriver("qos-muls", CAPS, operations=[MUL])
    (a, b) = register(adds, muls)
    low = Compilation.for_devices(chain_model([ADD, MUL, ADD]), [a, b])
    low.set_priority(Priority.LOW)
    low.finish()
    assert [s.device.name for s in low.plan.steps] == ["qos-adds", "qos-muls", "qos-adds"]
    high = compile_for(a, Priority.HIGH, ops=[ADD])
    (xl, yl), (xh, yh) = tagged(101, 51), tagged(102, 52)
    gates.set(101, "gate")
    gates.set(102, "gate")
    runs = Runs()
    runs.start("low", low, xl, yl)
    until(lambda: gates.has(101, "entered"), "the low run's first partition to start")
    runs.start("high", high, xh, yh)
    until(lambda: gates.has(102, "entered"), "the high run to start")
    gates.set(101, "go")
    until(lambda: qos.queue_for(a).stats()["waiting"] == 1, "the low run to wait before its third partition")
    assert runs.finished == []
    gates.set(102, "go")
    runs.join()
    assert runs.finished == ["high", "low"]
    np.testing.assert_array_equal(runs.outcomes["low"], chain_expected([ADD, MUL, ADD], xl, yl))
    np.testing.assert_array_equal(runs.outcomes["high"], chain_expected([ADD], xh, yh))


# -- deadlines -------------------------------------------------------------------------------------------
@pytest.fixture
def timed(register, gates):
    """A driver whose every operation takes 20 ms: runs of the 4-operation chain take about 80 ms."""
    (device,) = register(GatedDriver("qos-timed", gates.dir, op_sleep_s=0.02))
    return device


def warm(comp: Compilation, runs: int = 2) -> float | None:
    """Run a few times so that the driver knows how long the model takes; its estimate (seconds) when
    the driver is in this process."""
    for k in range(runs):
        x, y = tagged(900 + k, 900 + k)
        ex = Execution(comp)
        ex.set_input(0, x)
        ex.set_input(1, y)
        ex.set_output(0, np.empty_like(x))
        ex.compute()
    estimate = getattr(comp.plan.steps[0].prepared, "estimate", None)
    return None if estimate is None else estimate.value


def run_with_timeout(comp, tag, timeout_ns):
    x, y = tagged(tag, tag)
    ex = Execution(comp)
    ex.set_timeout(timeout_ns)
    ex.set_input(0, x)
    ex.set_input(1, y)
    out = np.full(x.shape, np.nan, np.float32)
    ex.set_output(0, out)
    with pytest.raises(MltsError) as e:
        ex.compute()
    return e.value, out


# Deadlines are chosen relative to the driver's own estimate E (about 80 ms), so that a busy machine,
# which makes E larger, does not change which rule applies.
def test_a_deadline_shorter_than_the_prediction_is_refused_before_starting(timed, gates):
    comp = compile_for(timed)
    estimate = warm(comp)
    assert estimate >= 4 * 0.02  # four operations of 20 ms
    err, out = run_with_timeout(comp, 5, int(estimate / 8 * 1e9))  # not even an idle device makes it
    assert err.code == ResultCode.MISSED_DEADLINE_PERSISTENT and "qos-timed" in err.message
    assert not gates.has(5, "checkpoints") or gates.checkpoints(5) == 0  # never started
    assert np.isnan(out).all()  # a deadline never forces a result


def test_a_deadline_only_busy_work_makes_missable_is_transient(timed, gates):
    comp = compile_for(timed)
    estimate = warm(comp)
    gates.set(1, "gate")
    runs = Runs()
    runs.start("busy", comp, *tagged(1, 1))
    until(lambda: gates.has(1, "entered"), "a run in flight")
    try:
        # Alone the run fits (E of 1.6 E); after the run in flight (another E) it would not.
        err, out = run_with_timeout(comp, 6, int(estimate * 1.6 * 1e9))
        assert err.code == ResultCode.MISSED_DEADLINE_TRANSIENT, err
        assert "busy" in err.message and np.isnan(out).all()
        assert not gates.has(6, "checkpoints") or gates.checkpoints(6) == 0  # refused before starting
    finally:
        gates.set(1, "go")
        runs.join()


def test_a_run_that_will_miss_is_aborted_at_a_checkpoint(timed, gates):
    comp = compile_for(timed)
    estimate = warm(comp)
    gates.set(7, "extra", str(estimate * 1.5))  # held 1.5 E before its first operation: 1.5 E + E > 2 E
    err, out = run_with_timeout(comp, 7, int(estimate * 2 * 1e9))  # accepted: E < 2 E
    assert err.code == ResultCode.MISSED_DEADLINE_TRANSIENT and "aborted" in err.message
    assert gates.checkpoints(7) < len(OPS)  # stopped before running every operation
    assert np.isnan(out).all()


def test_a_deadline_already_passed_is_persistent(timed):
    comp = compile_for(timed)
    err, _ = run_with_timeout(comp, 8, 1)  # 1 ns
    assert err.code == ResultCode.MISSED_DEADLINE_PERSISTENT


def test_deadlines_on_the_reference_and_a_generous_one_is_met():
    ref = get_device("nnapi-reference")
    comp = compile_for(ref, ops=[ADD] * 30)
    x, y = rand(seed=1), rand(seed=2)
    ex = Execution(comp)
    ex.set_timeout(10 * 10**9)  # 10 s: met
    ex.set_input(0, x)
    ex.set_input(1, y)
    out = np.empty_like(x)
    ex.set_output(0, out)
    ex.compute()
    np.testing.assert_allclose(out, chain_expected([ADD] * 30, x, y), rtol=1e-5)
    err, _ = run_with_timeout(comp, 3, 1_000)  # 1 us: the reference predicts (or sees) the miss
    assert err.code in (ResultCode.MISSED_DEADLINE_PERSISTENT, ResultCode.MISSED_DEADLINE_TRANSIENT)


class SlowPreparation(KernelDriver):
    """Preparation takes 250 ms (spent checking support while preparing, not while partitioning)."""

    def __init__(self, name: str) -> None:
        super().__init__(name, CAPS)
        self._preparing = threading.local()

    def prepare_model(self, *args):
        self._preparing.on = True
        try:
            return super().prepare_model(*args)
        finally:
            self._preparing.on = False

    def get_supported_operations(self, model):
        if getattr(self._preparing, "on", False):
            time.sleep(0.25)
        return super().get_supported_operations(model)


@pytest.fixture(scope="module")
def sample_service():
    driver = ServiceDriver("mlts.runtime.drivers.sample:sample_drivers", name="sample-all")
    yield driver
    driver.close()


@pytest.mark.parametrize("where", ["nnapi-reference", "sample-all-service"])
def test_deadline_codes_on_the_reference_and_a_sample_driver_service(request, register, where):
    device = get_device(where) if where == "nnapi-reference" else register(request.getfixturevalue("sample_service"))[0]
    c = Compilation.for_devices(chain_model([ADD] * 20), [device])
    c.set_priority(Priority.HIGH)
    c.set_timeout(30 * 10**9)  # preparation deadline: met
    c.finish()
    x, y = rand(seed=1), rand(seed=2)
    ex = Execution(c)
    ex.set_timeout(30 * 10**9)
    ex.set_input(0, x)
    ex.set_input(1, y)
    out = np.empty_like(x)
    ex.set_output(0, out)
    ex.compute()
    np.testing.assert_allclose(out, chain_expected([ADD] * 20, x, y), rtol=1e-5)
    err, out = run_with_timeout(c, 3, 1)  # 1 ns: passed before the driver starts
    assert err.code == ResultCode.MISSED_DEADLINE_PERSISTENT and np.isnan(out).all()


def test_preparation_deadline_refused_by_prediction(register):
    (device,) = register(SlowPreparation("qos-prep"))
    model = chain_model([ADD] * 10)
    Compilation.for_devices(model, [device]).finish()  # the driver learns its preparation time
    c = Compilation.for_devices(model, [device])
    c.set_timeout(100_000_000)  # 100 ms, about 250 ms predicted
    with pytest.raises(MltsError) as e:
        c.finish()
    assert e.value.code == ResultCode.MISSED_DEADLINE_PERSISTENT
    assert "qos-prep" in e.value.message and "predicted" in e.value.message
    ok = Compilation.for_devices(model, [device])
    ok.set_timeout(30 * 10**9)
    ok.finish()
    passed = Compilation.for_devices(model, [device])
    passed.set_timeout(1)  # 1 ns: passed before the driver starts
    with pytest.raises(MltsError) as e:
        passed.finish()
    assert e.value.code == ResultCode.MISSED_DEADLINE_PERSISTENT


def test_missed_deadline_on_a_service_hosted_driver(register, gates):
    driver = ServiceDriver("qos_test_drivers:gated_driver", ("svc-qos-timed", gates.dir, 0.05))
    try:
        (device,) = register(driver)
        comp = compile_for(device)
        warm(comp)  # the service's driver now predicts about 200 ms (four operations of 50 ms)
        err, out = run_with_timeout(comp, 5, 20_000_000)
        assert err.code == ResultCode.MISSED_DEADLINE_PERSISTENT and "svc-qos-timed" in err.message
        gates.set(7, "extra", "0.6")  # accepted with 800 ms, held 600 ms: 600 + 200 > 800 ms
        err, out = run_with_timeout(comp, 7, 800_000_000)
        assert err.code == ResultCode.MISSED_DEADLINE_TRANSIENT and np.isnan(out).all()
    finally:
        driver.close()


# -- busy and too big ----------------------------------------------------------------------------------------
def test_a_full_queue_is_resource_exhausted_transient(gated, gates):
    qos.configure(gated, max_concurrent=1, max_queued=1)
    comp = compile_for(gated)
    gates.set(1, "gate")
    runs = Runs()
    runs.start("holder", comp, *tagged(1, 1))
    until(lambda: gates.has(1, "entered"), "a run holding the device")
    runs.start("queued", comp, *tagged(2, 2))
    until(lambda: qos.queue_for(gated).stats()["waiting"] == 1, "a queued run")
    x, y = tagged(3, 3)
    ex = Execution(comp)
    ex.set_input(0, x)
    ex.set_input(1, y)
    ex.set_output(0, np.empty_like(x))
    with pytest.raises(MltsError) as e:
        ex.compute()
    assert e.value.code == ResultCode.RESOURCE_EXHAUSTED_TRANSIENT and "busy" in e.value.message
    gates.set(1, "go")
    runs.join()
    assert runs.finished == ["holder", "queued"]  # the busy answer disturbed nothing


def test_a_model_that_can_never_fit_is_resource_exhausted_persistent(register):
    small = KernelDriver("qos-small", CAPS)
    small.max_model_bytes = 16
    (device,) = register(small)
    m = Model()
    a, b = m.add_operand(tensor()), m.add_operand(tensor())
    act, out = m.add_operand(activation()), m.add_operand(tensor())
    m.set_operand_value(b, np.ones((3, 4), np.float32))  # 48 bytes of constants > 16
    m.set_operand_value(act, np.int32(0))
    m.add_operation(ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a], [out])
    m.finish()
    c = Compilation.for_devices(m, [device])
    with pytest.raises(MltsError) as e:
        c.finish()
    assert e.value.code == ResultCode.RESOURCE_EXHAUSTED_PERSISTENT and "never fit" in e.value.message
    fallback = Compilation(m)  # with CPU fallback the model still runs (on nnapi-reference)
    fallback.finish()
    assert [s.device.name for s in fallback.plan.steps] == ["nnapi-reference"]


# -- invalid settings ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [42, -1, 90.0, "HIGH", None, True])
def test_invalid_priorities_are_rejected(bad):
    c = Compilation(chain_model([ADD]))
    with pytest.raises(MltsError) as e:
        c.set_priority(bad)
    assert e.value.code == ResultCode.BAD_DATA and "set_priority" in e.value.message


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True, None])
def test_invalid_timeouts_are_rejected(bad):
    ref = get_device("nnapi-reference")
    c = Compilation.for_devices(chain_model([ADD]), [ref])
    with pytest.raises(MltsError) as e:
        c.set_timeout(bad)
    assert e.value.code == ResultCode.BAD_DATA
    c.finish()
    ex = Execution(c)
    with pytest.raises(MltsError) as e:
        ex.set_timeout(bad)
    assert e.value.code == ResultCode.BAD_DATA


def test_timeouts_need_a_single_device_compilation():
    c = Compilation(chain_model([ADD]))
    with pytest.raises(MltsError) as e:
        c.set_timeout(10**9)
    assert e.value.code == ResultCode.BAD_DATA
    c.finish()
    with pytest.raises(MltsError) as e:
        Execution(c).set_timeout(10**9)
    assert e.value.code == ResultCode.BAD_DATA


def test_queue_settings_are_validated(gated):
    for bad in ({"max_concurrent": 0}, {"max_concurrent": 1.5}, {"max_queued": -1}, {"max_queued": True}):
        with pytest.raises(MltsError) as e:
            qos.configure(gated, **bad)
        assert e.value.code == ResultCode.BAD_DATA


# -- the seeded fault ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hosting", ["in-process", "service"])
def test_ignores_deadline_fault_is_caught(register, hosting):
    """A conformance-style check: a run with a deadline either meets it or reports MISSED_DEADLINE_*;
    success long after the deadline is the fault."""
    spec = "faulty:ignores-deadline@execute?late=0.2"
    driver = create_faulty(spec) if hosting == "in-process" else load_drivers(spec)[0]
    assert driver.hosting == hosting
    healthy = KernelDriver("qos-healthy", CAPS)
    try:
        devices = register(driver, healthy)
        verdicts = {}
        for device in devices:
            comp = compile_for(device, ops=[ADD] * 3)
            x, y = rand(seed=5), rand(seed=6)
            ex = Execution(comp)
            ex.set_timeout(30_000_000)  # 30 ms: ample for 3 small additions
            ex.set_input(0, x)
            ex.set_input(1, y)
            out = np.full(x.shape, np.nan, np.float32)
            ex.set_output(0, out)
            deadline = time.monotonic() + 0.03
            try:
                ex.compute()
                late = time.monotonic() - deadline
                verdicts[device.name] = "late success" if late > 0.1 else "met"
            except MltsError as e:
                assert e.code in (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_PERSISTENT)
                verdicts[device.name] = "missed"
        assert verdicts[driver.name] == "late success"
        assert verdicts["qos-healthy"] in ("met", "missed")
    finally:
        if hosting == "service":
            driver.close()
