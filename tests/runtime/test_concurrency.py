"""Many executions in parallel on one compilation, and several compiled models interleaved."""
from __future__ import annotations

import gc
import threading
import weakref

import numpy as np

from fake_drivers import ADD, DIV, MUL, SUB, FakeDriver, chain_expected, chain_model, rand
from mlts.runtime import Burst, Compilation, Execution, FuseCode, Model, OperandCode, OperandType

THREADS, PER_THREAD = 8, 100
OPS = [ADD, MUL, SUB, DIV, ADD]
SHAPE = (4, 6)


def diamond_model() -> Model:
    """s = x + y; p = s * y; q = s - x; out = p / q + y ... several ops with fan-out and fan-in."""
    t = OperandType(OperandCode.TENSOR_FLOAT32, SHAPE)
    m = Model()
    x, y = m.add_operand(t), m.add_operand(t)
    act = m.add_operand(OperandType(OperandCode.INT32))
    m.set_operand_value(act, np.int32(FuseCode.NONE))
    s, p, q, r, out = (m.add_operand(t) for _ in range(5))
    m.add_operation(ADD, [x, y, act], [s])
    m.add_operation(MUL, [s, y, act], [p])
    m.add_operation(SUB, [s, x, act], [q])  # == y (up to rounding), never 0 for y >= 0.5
    m.add_operation(DIV, [p, q, act], [r])
    m.add_operation(ADD, [r, y, act], [out])
    m.identify_inputs_and_outputs([x, y], [out])
    m.finish()
    return m


def diamond_expected(x, y):
    s = x + y
    return (s * y) / (s - x) + y


def one_run(comp, x, y, burst=None) -> np.ndarray:
    ex = Execution(comp)
    ex.set_input(0, x)
    ex.set_input(1, y)
    out = np.full(x.shape, np.nan, np.float32)
    ex.set_output(0, out)
    if burst is None:
        ex.compute()
    else:
        ex.burst_compute(burst)
    return out


def parallel_matches_serial(comp, expected_fn, *, use_bursts=False):
    rng = np.random.default_rng(1234)
    inputs = [(rng.uniform(0.5, 2, SHAPE).astype(np.float32), rng.uniform(0.5, 2, SHAPE).astype(np.float32))
              for _ in range(THREADS * PER_THREAD)]
    serial = [one_run(comp, x, y) for x, y in inputs]
    for (x, y), s in zip(inputs[:20], serial[:20]):
        np.testing.assert_allclose(s, expected_fn(x, y), rtol=1e-5)
    results: list[np.ndarray | None] = [None] * len(inputs)
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        try:
            burst = Burst(comp) if use_bursts else None  # a burst serves one thread's sequence
            start.wait()
            for k in range(t, len(inputs), THREADS):  # interleaved slices: neighbours run concurrently
                x, y = inputs[k]
                results[k] = one_run(comp, x, y, burst)
            if burst is not None:
                burst.close()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors[:3]
    for k, (r, s) in enumerate(zip(results, serial)):
        assert r is not None, k
        np.testing.assert_array_equal(r, s, err_msg=f"execution {k}")


def test_parallel_executions_on_the_reference():
    comp = Compilation(diamond_model())
    comp.finish()
    parallel_matches_serial(comp, diamond_expected)


def test_parallel_executions_on_a_compound_plan(register):
    """Intermediate tensors carried between devices must never be shared between executions."""
    a = FakeDriver("drv-a", 0.5, 0.5, operations=[ADD, SUB])
    b = FakeDriver("drv-b", 0.5, 0.5, operations=[MUL, DIV])
    register(a, b)
    comp = Compilation(chain_model(OPS, shape=SHAPE))
    comp.finish()
    assert [s.device.name for s in comp.plan.steps] == ["drv-a", "drv-b", "drv-a", "drv-b", "drv-a"]
    parallel_matches_serial(comp, lambda x, y: chain_expected(OPS, x, y))
    assert a.executed_ops() == {"ADD", "SUB"} and b.executed_ops() == {"MUL", "DIV"}


def test_parallel_bursts_one_per_thread():
    comp = Compilation(diamond_model())
    comp.finish()
    parallel_matches_serial(comp, diamond_expected, use_bursts=True)


def test_parallel_async_executions():
    comp = Compilation(chain_model(OPS, shape=SHAPE))
    comp.finish()
    rng = np.random.default_rng(7)
    runs = []
    for _ in range(64):
        x, y = rng.uniform(0.5, 2, SHAPE).astype(np.float32), rng.uniform(0.5, 2, SHAPE).astype(np.float32)
        ex = Execution(comp)
        ex.set_input(0, x)
        ex.set_input(1, y)
        out = np.full(SHAPE, np.nan, np.float32)
        ex.set_output(0, out)
        runs.append((ex.start_compute(), x, y, out))
    for event, x, y, out in runs:
        event.wait(30)
        np.testing.assert_allclose(out, chain_expected(OPS, x, y), rtol=1e-5)


def test_interleaved_compiled_models():
    """prepare m1, prepare m2; run m1, m2, m1, m2; free both (as NNAPI's guide allows)."""
    m1 = chain_model([ADD, MUL], shape=(2, 3))
    m2 = diamond_model()
    c1, c2 = Compilation(m1), Compilation(m2)
    c1.finish()
    c2.finish()
    x1, y1 = rand((2, 3), seed=1), rand((2, 3), seed=2)
    x2, y2 = rand(SHAPE, seed=3), rand(SHAPE, seed=4)
    outs = []
    for k in range(2):
        outs.append(one_run(c1, x1 + k, y1))
        outs.append(one_run(c2, x2 + k, y2))
    np.testing.assert_allclose(outs[0], (x1 + y1) * y1, rtol=1e-6)
    np.testing.assert_allclose(outs[1], diamond_expected(x2, y2), rtol=1e-5)
    np.testing.assert_allclose(outs[2], (x1 + 1 + y1) * y1, rtol=1e-6)
    np.testing.assert_allclose(outs[3], diamond_expected(x2 + 1, y2), rtol=1e-5)
    # free both: nothing in the runtime keeps the compilations (or their models) alive
    refs = [weakref.ref(c1), weakref.ref(c2), weakref.ref(m1), weakref.ref(m2)]
    del c1, c2, m1, m2
    gc.collect()
    assert [r() for r in refs] == [None] * 4


def test_interleaved_models_from_threads():
    """Two threads each alternating between two compilations."""
    c1 = Compilation(chain_model([SUB, DIV], shape=SHAPE))
    c2 = Compilation(diamond_model())
    c1.finish()
    c2.finish()
    errors = []

    def worker(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(50):
                x, y = rng.uniform(0.5, 2, SHAPE).astype(np.float32), rng.uniform(0.5, 2, SHAPE).astype(np.float32)
                np.testing.assert_allclose(one_run(c1, x, y), (x - y) / y, rtol=1e-5)
                np.testing.assert_allclose(one_run(c2, x, y), diamond_expected(x, y), rtol=1e-5)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]
