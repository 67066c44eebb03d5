"""Memory domains: memories created from a MemoryDesc, allocated by a driver (nnapi-reference in this
process, a kernel driver hosted as a service) or falling back to shared memory; copies; role checks;
unknown dimensions; tokens of one client unusable by another; concurrent use; both pool kinds across
the service boundary; and the seeded fault `accepts-foreign-token@memory`.

Expected values are hand-computed: the models are ADD and MUL of small float vectors.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from fake_drivers import FailingExecutionDriver
from mlts.runtime import (Burst, Capabilities, Compilation, Execution, Memory, MemoryDesc, MltsError, Model, OperandCode, OperandType,
                          OperationCode, ResultCode, get_device)
from mlts.runtime.drivers import KernelDriver
from mlts.runtime.drivers.faulty import create as faulty_driver
from mlts.runtime.hal import (BufferDesc, BufferRole, BufferToken, DataLocation, Request, RequestArgument)
from mlts.runtime.app.memory import DeviceMemory
from mlts.runtime.service import ServiceDriver

KERNELS = "service_test_drivers:kernel_driver"
F32 = OperandCode.TENSOR_FLOAT32
FAST = Capabilities.uniform(0.3, 0.3)  # preferred over nnapi-reference by Compilation(model)


@pytest.fixture(scope="module")
def hosted():
    """A kernel driver with memory domains, in a service (declared faster than nnapi-reference)."""
    driver = ServiceDriver(KERNELS, ("svc-domains",))
    yield driver
    driver.close()


@pytest.fixture(params=["nnapi-reference", "service"])
def device(request, register):
    """The device under test: nnapi-reference in this process, or the hosted kernel driver."""
    if request.param == "service":
        return register(request.getfixturevalue("hosted"))[0]
    return get_device("nnapi-reference")


def binary_model(op: OperationCode, dims=(4,)) -> Model:
    """out = a <op> b over float32 tensors of `dims` (0 = unknown)."""
    m = Model()
    t = OperandType(F32, dims)
    a, b, act, out = m.add_operand(t), m.add_operand(t), m.add_operand(OperandType(OperandCode.INT32)), m.add_operand(t)
    m.set_operand_value(act, np.int32(0))
    m.add_operation(op, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    return m


def compiled(model: Model, *devices) -> Compilation:
    c = Compilation.for_devices(model, list(devices)) if devices else Compilation(model)
    c.finish()
    return c


def desc_for(outputs=(), inputs=(), dims=None) -> MemoryDesc:
    d = MemoryDesc()
    for c, i in outputs:
        d.add_output_role(c, i, 1.0)
    for c, i in inputs:
        d.add_input_role(c, i, 0.5)
    if dims is not None:
        d.set_dimensions(dims)
    d.finish()
    return d


def f32(*values) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def shared_with(values: np.ndarray) -> Memory:
    mem = Memory.create_shared(values.nbytes)
    np.frombuffer(mem.view(), values.dtype)[:] = values
    return mem


def contents(mem: Memory) -> np.ndarray:
    return np.frombuffer(bytes(mem.view()), np.float32)


def run_add(c: Compilation, a, b, out_memory: Memory | None = None) -> np.ndarray | None:
    e = Execution(c)
    for i, v in enumerate((a, b)):
        if isinstance(v, Memory):
            e.set_input_from_memory(i, v, 0, 0)
        else:
            e.set_input(i, v)
    out = None
    if out_memory is not None:
        e.set_output_from_memory(0, out_memory, 0, 0)
    else:
        out = np.zeros(4, np.float32)
        e.set_output(0, out)
    e.compute()
    return out


def record_requests(c: Compilation) -> list[Request]:
    """Requests the runtime sends to the compilation's (single) prepared model, as the driver gets them."""
    prepared = c.plan.steps[0].prepared
    seen: list[Request] = []
    original = prepared.execute_synchronously

    def recording(request, *args, **kwargs):
        seen.append(request)
        return original(request, *args, **kwargs)

    prepared.execute_synchronously = recording
    return seen


# -- allocation, chaining, copies ----------------------------------------------------------------
def test_chained_executions_pass_a_token_not_bytes(device):
    producer = compiled(binary_model(OperationCode.ADD), device)
    consumer = compiled(binary_model(OperationCode.MUL), device)
    mem = Memory.create_from_desc(desc_for(outputs=[(producer, 0)], inputs=[(consumer, 0)]))
    assert isinstance(mem, DeviceMemory) and mem.device_name == device.name and mem.size == 16
    sent_to_producer, sent_to_consumer = record_requests(producer), record_requests(consumer)

    run_add(producer, f32(1, 2, 3, 4), f32(10, 20, 30, 40), out_memory=mem)  # mem = [11, 22, 33, 44]
    out = run_add(consumer, mem, f32(2, 2, 0.5, -1))

    np.testing.assert_array_equal(out, f32(22, 44, 16.5, -44))
    (produced,), (consumed,) = sent_to_producer, sent_to_consumer
    out_pool = produced.pools[produced.outputs[0].location.pool_index]
    in_pool = consumed.pools[consumed.inputs[0].location.pool_index]
    assert out_pool == BufferToken(mem.token) and in_pool == BufferToken(mem.token)
    assert produced.outputs[0].location == DataLocation(produced.outputs[0].location.pool_index, 0, 0)
    assert not any(isinstance(p, Memory) and p.size == 16 and p.kind != "user" for p in consumed.pools)
    with pytest.raises(MltsError) as err:
        mem.view()
    assert err.value.code == ResultCode.BAD_DATA and "opaque" in err.value.message


def test_copy_between_shared_file_and_device_memory(device, tmp_path):
    producer = compiled(binary_model(OperationCode.ADD), device)
    consumer = compiled(binary_model(OperationCode.ADD), device)
    mem = Memory.create_from_desc(desc_for(outputs=[(producer, 0)], inputs=[(consumer, 0)]))

    Memory.copy(shared_with(f32(1, -2, 3.5, 8)), mem)  # state initialization, without an execution
    out = run_add(consumer, mem, f32(1, 1, 1, 1))
    np.testing.assert_array_equal(out, f32(2, -1, 4.5, 9))

    run_add(producer, f32(0.25, 0.5, 1, 2), f32(4, 4, 4, 4), out_memory=mem)
    back = Memory.create_shared(16)
    Memory.copy(mem, back)
    np.testing.assert_array_equal(contents(back), f32(4.25, 4.5, 5, 6))

    path = tmp_path / "state.bin"
    path.write_bytes(f32(7, 6, 5, 4).tobytes())
    Memory.copy(Memory.from_file(path), mem)  # an mmap'd file as the source
    file_out = Memory.from_file(path)
    np.testing.assert_array_equal(run_add(consumer, mem, f32(0, 0, 0, 0)), f32(7, 6, 5, 4))
    path.write_bytes(bytes(16))
    Memory.copy(mem, file_out)  # and as the destination: the file itself holds the value
    np.testing.assert_array_equal(np.frombuffer(path.read_bytes(), np.float32), f32(7, 6, 5, 4))

    for src, dst, why in ((Memory.create_shared(8), mem, "size"), (mem, Memory.create_shared(12), "size")):
        with pytest.raises(MltsError) as err:
            Memory.copy(src, dst)
        assert err.value.code == ResultCode.BAD_DATA and "Memory.copy" in err.value.message


def test_device_to_device_copy(device):
    c = compiled(binary_model(OperationCode.ADD), device)
    first = Memory.create_from_desc(desc_for(outputs=[(c, 0)], inputs=[(c, 0)]))
    second = Memory.create_from_desc(desc_for(outputs=[(c, 0)], inputs=[(c, 0)]))
    Memory.copy(shared_with(f32(3, 1, 4, 1)), first)
    Memory.copy(first, second)
    back = Memory.create_shared(16)
    Memory.copy(second, back)
    np.testing.assert_array_equal(contents(back), f32(3, 1, 4, 1))


# -- role checks and initialization --------------------------------------------------------------
def test_every_illegal_use_fails_at_once_with_bad_data(device):
    c = compiled(binary_model(OperationCode.ADD), device)
    other = compiled(binary_model(OperationCode.ADD), device)
    input_only = Memory.create_from_desc(desc_for(inputs=[(c, 0)]))
    cases = [
        (lambda e: e.set_input_from_memory(0, input_only, 0, 0), Execution(other), "set_input_from_memory(0)"),
        (lambda e: e.set_input_from_memory(1, input_only, 0, 0), Execution(c), "set_input_from_memory(1)"),
        (lambda e: e.set_output_from_memory(0, input_only, 0, 0), Execution(c), "set_output_from_memory(0)"),
        (lambda e: e.set_input_from_memory(0, input_only, 0, 16), Execution(c), "offset and length must be 0"),
        (lambda e: e.set_input_from_memory(0, input_only, 4, 0), Execution(c), "offset and length must be 0"),
        (lambda e: e.set_input_from_memory(0, input_only, 0, 0, OperandType(F32, (5,))), Execution(c), "conflict"),
    ]
    for use, execution, named in cases:
        with pytest.raises(MltsError) as err:
            use(execution)
        assert err.value.code == ResultCode.BAD_DATA and named in err.value.message, err.value.message


def test_uninitialized_memory_cannot_be_read(device):
    producer = compiled(binary_model(OperationCode.ADD), device)
    consumer = compiled(binary_model(OperationCode.ADD), device)
    mem = Memory.create_from_desc(desc_for(outputs=[(producer, 0)], inputs=[(consumer, 0)]))
    e = Execution(consumer)
    e.set_input_from_memory(0, mem, 0, 0)
    e.set_input(1, f32(1, 1, 1, 1))
    e.set_output(0, np.zeros(4, np.float32))
    with pytest.raises(MltsError) as err:
        e.compute()
    assert err.value.code == ResultCode.OP_FAILED and "uninitialized" in err.value.message
    with pytest.raises(MltsError) as err:
        Memory.copy(mem, Memory.create_shared(16))
    assert err.value.code == ResultCode.BAD_DATA and "not initialized" in err.value.message


# -- unknown dimensions --------------------------------------------------------------------------
def test_unknown_dimensions_resize_as_output_and_fix_as_input(device):
    producer = compiled(binary_model(OperationCode.ADD, (0,)), device)
    consumer = compiled(binary_model(OperationCode.MUL, (0,)), device)
    mem = Memory.create_from_desc(desc_for(outputs=[(producer, 0)], inputs=[(consumer, 0)]))
    assert isinstance(mem, DeviceMemory) and mem.size == 0  # nothing known until written

    for n in (3, 5):
        e = Execution(producer)
        e.set_input(0, np.arange(n, dtype=np.float32))
        e.set_input(1, np.full(n, 2, np.float32))
        e.set_output_from_memory(0, mem, 0, 0)
        e.compute()  # mem = [2, 3, ..., n + 1], resized to the computed shape
        assert e.get_output_operand_dimensions(0) == (n,) and mem.size == 4 * n

        out = np.zeros(n, np.float32)
        e = Execution(consumer)
        e.set_input_from_memory(0, mem, 0, 0)  # dimensions come from the memory
        e.set_input(1, np.full(n, 10, np.float32))
        e.set_output(0, out)
        e.compute()
        np.testing.assert_array_equal(out, (np.arange(n) + 2) * 10)

    e = Execution(consumer)  # an input of other dimensions than the memory holds (5): refused
    e.set_input_from_memory(0, mem, 0, 0, OperandType(F32, (4,)))
    e.set_input(1, np.ones(4, np.float32))
    e.set_output(0, np.zeros(4, np.float32))
    with pytest.raises(MltsError) as err:
        e.compute()
    assert err.value.code == ResultCode.OP_FAILED and "[4]" in err.value.message and "[5]" in err.value.message


# -- tokens and clients ----------------------------------------------------------------------------
def token_request(prepared, token: int) -> Request:
    """A HAL request naming `token` as input 0 (input 1 and the output in shared memory)."""
    ones, out = shared_with(f32(1, 1, 1, 1)), Memory.create_shared(16)
    return Request((RequestArgument(False, DataLocation(0, 0, 0)), RequestArgument(False, DataLocation(1, 0, 16))),
                   (RequestArgument(False, DataLocation(2, 0, 16)),), (BufferToken(token), ones, out))


def secret_buffer(device, c: Compilation):
    """A buffer allocated directly through the HAL for input 0 of `c`, holding [100, 200, 300, 400]."""
    allocated = device.driver.allocate(BufferDesc(), [c.plan.steps[0].prepared], [BufferRole(0, 0, 1.0)], [])
    allocated.buffer.copy_from(shared_with(f32(100, 200, 300, 400)), ())
    return allocated


def test_a_token_serves_only_its_own_roles(device):
    owner = compiled(binary_model(OperationCode.ADD), device)
    stranger = compiled(binary_model(OperationCode.ADD), device)
    allocated = secret_buffer(device, owner)
    mine = owner.plan.steps[0].prepared.execute_synchronously(token_request(owner.plan.steps[0].prepared,
                                                                            allocated.token), False, None, 10**9)
    assert mine.status == ResultCode.NO_ERROR
    theirs = stranger.plan.steps[0].prepared.execute_synchronously(
        token_request(stranger.plan.steps[0].prepared, allocated.token), False, None, 10**9)
    assert theirs.status == ResultCode.BAD_DATA
    guessed = owner.plan.steps[0].prepared.execute_synchronously(
        token_request(owner.plan.steps[0].prepared, allocated.token ^ 1), False, None, 10**9)
    assert guessed.status == ResultCode.BAD_DATA
    allocated.buffer.free()
    freed = owner.plan.steps[0].prepared.execute_synchronously(
        token_request(owner.plan.steps[0].prepared, allocated.token), False, None, 10**9)
    assert freed.status == ResultCode.BAD_DATA


def test_another_connection_cannot_use_a_token(register, hosted):
    (dev,) = register(hosted)
    second = ServiceDriver(KERNELS, ("svc-domains-2",))
    try:
        (dev2,) = register(second)
        owner = compiled(binary_model(OperationCode.ADD), dev)
        other = compiled(binary_model(OperationCode.ADD), dev2)
        allocated = secret_buffer(dev, owner)
        result = other.plan.steps[0].prepared.execute_synchronously(
            token_request(other.plan.steps[0].prepared, allocated.token), False, None, 10**9)
        assert result.status == ResultCode.BAD_DATA and "not allocated by this client" in result.message
        baseline = hosted.service_stats()["buffers"]
        allocated.buffer.free()
        assert hosted.service_stats()["buffers"] == baseline - 1  # freed in the service with the next call
    finally:
        second.close()


def test_seeded_fault_accepts_a_foreign_token_and_leaks_its_contents(register):
    """The conformance probe: a buffer of one model named by another model's request must be refused."""
    (dev,) = register(faulty_driver("faulty:accepts-foreign-token@memory"))
    for d, leaks in ((get_device("nnapi-reference"), False), (dev, True)):
        owner = compiled(binary_model(OperationCode.ADD), d)
        stranger = compiled(binary_model(OperationCode.ADD), d)
        allocated = secret_buffer(d, owner)
        prepared = stranger.plan.steps[0].prepared
        request = token_request(prepared, allocated.token)
        result = prepared.execute_synchronously(request, False, None, 10**9)
        if not leaks:
            assert result.status == ResultCode.BAD_DATA
            continue
        assert result.status == ResultCode.NO_ERROR  # the fault: another model read the secret
        np.testing.assert_array_equal(contents(request.pools[2]), f32(101, 201, 301, 401))


# -- concurrency ---------------------------------------------------------------------------------
def test_concurrent_writers_and_readers_terminate_without_crashing(device):
    producer = compiled(binary_model(OperationCode.ADD), device)
    consumer = compiled(binary_model(OperationCode.ADD), device)
    mem = Memory.create_from_desc(desc_for(outputs=[(producer, 0)], inputs=[(consumer, 0)]))
    Memory.copy(shared_with(f32(0, 0, 0, 0)), mem)
    errors: list[BaseException] = []
    seen: list[np.ndarray] = []

    def writer(k: int) -> None:
        try:
            for _ in range(10):
                run_add(producer, np.full(4, k, np.float32), np.zeros(4, np.float32), out_memory=mem)
        except BaseException as e:  # noqa: BLE001 - anything but a clean run is a failure here
            errors.append(e)

    def reader() -> None:
        try:
            for _ in range(10):
                seen.append(run_add(consumer, mem, np.zeros(4, np.float32)))
                back = Memory.create_shared(16)
                Memory.copy(mem, back)
                seen.append(contents(back))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in (1, 2)] + [threading.Thread(target=reader)
                                                                              for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a thread blocked"
    assert not errors, errors
    # Concurrent writes leave some complete value: every element from the same write.
    assert seen and all(len(set(v.tolist())) == 1 and v[0] in (0, 1, 2) for v in seen)


# -- fallback to shared memory ---------------------------------------------------------------------
def test_a_driver_that_cannot_allocate_falls_back_to_shared_memory(register):
    (dev,) = register(KernelDriver("no-domains", FAST, memory_domains=False))
    producer = compiled(binary_model(OperationCode.ADD))  # Compilation(model): NNAPI allows the fallback
    consumer = compiled(binary_model(OperationCode.MUL))
    assert {s.device.name for c in (producer, consumer) for s in c.plan.steps} == {"no-domains"}
    mem = Memory.create_from_desc(desc_for(outputs=[(producer, 0)], inputs=[(consumer, 0)]))
    assert not isinstance(mem, DeviceMemory) and mem.kind == "shared" and mem.size == 16

    run_add(producer, f32(1, 2, 3, 4), f32(1, 1, 1, 1), out_memory=mem)
    np.testing.assert_array_equal(contents(mem), f32(2, 3, 4, 5))  # plain shared memory: readable
    np.testing.assert_array_equal(run_add(consumer, mem, f32(3, 3, 3, 3)), f32(6, 9, 12, 15))
    with pytest.raises(MltsError) as err:  # the roles still hold
        Execution(consumer).set_output_from_memory(0, mem, 0, 0)
    assert err.value.code == ResultCode.BAD_DATA

    explicit = compiled(binary_model(OperationCode.ADD), dev)  # a named device: no fallback (NNAPI)
    with pytest.raises(MltsError) as err:
        Memory.create_from_desc(desc_for(outputs=[(explicit, 0)]))
    assert err.value.code == ResultCode.OP_FAILED and "explicit devices" in err.value.message
    dynamic = compiled(binary_model(OperationCode.ADD, (0,)))  # unknown size: nothing to fall back to
    with pytest.raises(MltsError) as err:
        Memory.create_from_desc(desc_for(outputs=[(dynamic, 0)]))
    assert err.value.code == ResultCode.OP_FAILED and "not fully known" in err.value.message


def test_cpu_fallback_reads_and_writes_device_memory_through_copies(register):
    """The device allocates but fails executions: the CPU runs the model on staged shared-memory copies."""
    (dev,) = register(FailingExecutionDriver("fails-at-execution", mode="status"))
    producer = compiled(binary_model(OperationCode.ADD))
    consumer = compiled(binary_model(OperationCode.MUL))
    mem = Memory.create_from_desc(desc_for(outputs=[(producer, 0)], inputs=[(consumer, 0)]))
    assert isinstance(mem, DeviceMemory) and mem.device_name == "fails-at-execution"

    run_add(producer, f32(1, 2, 3, 4), f32(4, 3, 2, 1), out_memory=mem)  # on the CPU, then into the buffer
    back = Memory.create_shared(16)
    Memory.copy(mem, back)
    np.testing.assert_array_equal(contents(back), f32(5, 5, 5, 5))
    np.testing.assert_array_equal(run_add(consumer, mem, f32(1, 2, 3, 4)), f32(5, 10, 15, 20))
    assert dev.driver.failures == 2


def test_bursts_use_device_memory(device):
    producer = compiled(binary_model(OperationCode.ADD), device)
    mem = Memory.create_from_desc(desc_for(outputs=[(producer, 0)], inputs=[(producer, 0)]))
    Memory.copy(shared_with(f32(0, 1, 2, 3)), mem)
    burst = Burst(producer)
    for _ in range(3):  # mem = mem + 1, in the driver; the output is the next run's input
        step = Memory.create_from_desc(desc_for(outputs=[(producer, 0)], inputs=[(producer, 0)]))
        e = Execution(producer)
        e.set_input_from_memory(0, mem, 0, 0)
        e.set_input(1, f32(1, 1, 1, 1))
        e.set_output_from_memory(0, step, 0, 0)
        e.burst_compute(burst)
        mem = step
    burst.close()
    back = Memory.create_shared(16)
    Memory.copy(mem, back)
    np.testing.assert_array_equal(contents(back), f32(3, 4, 5, 6))


def test_mlts_fast_cannot_allocate_so_the_memory_is_shared():
    c = compiled(binary_model(OperationCode.ADD, (1, 2, 2, 1)))
    if c.plan.steps[0].device.name != "mlts-fast":
        pytest.skip("mlts-fast does not take this model here")
    mem = Memory.create_from_desc(desc_for(outputs=[(c, 0)]))
    assert mem.kind == "shared" and mem.size == 16
    e = Execution(c)
    e.set_input(0, np.arange(4, dtype=np.float32).reshape(1, 2, 2, 1))
    e.set_input(1, np.ones((1, 2, 2, 1), np.float32))
    e.set_output_from_memory(0, mem, 0, 0)
    e.compute()
    np.testing.assert_array_equal(contents(mem), f32(1, 2, 3, 4))


def test_roles_on_two_devices_fall_back_to_shared_memory(register):
    (dev,) = register(KernelDriver("domains-b", FAST))
    producer = compiled(binary_model(OperationCode.ADD), dev)
    consumer = compiled(binary_model(OperationCode.ADD), get_device("nnapi-reference"))
    # No single allocator, and explicit device lists forbid the fallback: NNAPI's OP_FAILED.
    with pytest.raises(MltsError) as err:
        Memory.create_from_desc(desc_for(outputs=[(producer, 0)], inputs=[(consumer, 0)]))
    assert err.value.code == ResultCode.OP_FAILED


# -- both pool kinds across the service boundary ---------------------------------------------------
def test_shared_and_file_pools_as_constants_inputs_and_outputs_of_a_service(register, hosted, tmp_path):
    (dev,) = register(hosted)
    weights = tmp_path / "weights.bin"
    weights.write_bytes(bytes(8) + f32(0.5, 1.5, 2.5, 3.5).tobytes())
    m = Model()
    t = OperandType(F32, (4,))
    x, c, act, out = m.add_operand(t), m.add_operand(t), m.add_operand(OperandType(OperandCode.INT32)), m.add_operand(t)
    m.set_operand_value_from_memory(c, Memory.from_file(weights), 8, 16)  # a constant in an mmap'd file
    m.set_operand_value(act, np.int32(0))
    m.add_operation(OperationCode.ADD, [x, c, act], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    comp = compiled(m, dev)

    results = tmp_path / "results.bin"
    results.write_bytes(bytes(32))
    file_out = Memory.from_file(results)
    for source, sink, offset in ((shared_with(f32(1, 2, 3, 4)), file_out, 16),
                                 (Memory.from_file(weights), Memory.create_shared(16), 0)):
        e = Execution(comp)
        e.set_input_from_memory(0, source, 8 if source.kind == "file" else 0, 16)
        e.set_output_from_memory(0, sink, offset, 16)
        e.compute()
    np.testing.assert_array_equal(np.frombuffer(results.read_bytes(), np.float32)[4:], f32(1.5, 3.5, 5.5, 7.5))
    np.testing.assert_array_equal(contents(sink), f32(1, 3, 5, 7))  # weights + weights

