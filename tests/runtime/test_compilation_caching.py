"""Compilation caching through the public API: set_caching, prepare from cache, and every way a cache
can be bad (corrupt, truncated, empty, foreign, another driver's, another version) falling back to a
full compile with right results and a rewritten cache. Expected values are computed by hand (numpy).
"""
from __future__ import annotations

import os
import shutil
import threading

import numpy as np
import pytest

from fake_drivers import FakeDriver
from mlts.runtime import (Compilation, Execution, Memory, MltsError, Model, OperandCode, OperandType, OperationCode,
                          Preference, ResultCode, get_device)
from mlts.runtime.app.compilation_cache import CacheStatus
from mlts.runtime.drivers import KernelDriver
from mlts.runtime.drivers.cache_files import DATA, MODEL, Identity, read_cache_file, write_cache_file
from mlts.runtime.drivers.faulty import create as create_faulty
from mlts.runtime.drivers.model_codec import decode_model, encode_model
from mlts.runtime.hal import DataLocation, HalModel, HalOperand, HalOperation, Subgraph
from mlts.runtime.enums import OperandLifetime
from mlts.runtime.service import ServiceDriver

N = 64  # a 256-byte weight: stored by reference (in a pool), not copied into the model
TOKEN = bytes(range(32))
OTHER_TOKEN = bytes(range(1, 33))


def weights(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(1.0, 2.0, N).astype(np.float32), rng.uniform(1.0, 2.0, 4).astype(np.float32)


def affine_model(seed: int = 0) -> tuple[Model, np.ndarray, np.ndarray]:
    """out = (x + w) * b: w a CONSTANT_REFERENCE in a Memory, b [4] a small CONSTANT_COPY broadcast over
    x [16, 4] (so the data cache holds both kinds of constants)."""
    w, b = weights(seed)
    memory = Memory.create_shared(w.nbytes)
    memory.array(0, np.float32, (N,))[:] = w
    m = Model()
    t = OperandType(OperandCode.TENSOR_FLOAT32, (16, 4))
    x, wop, act, s = m.add_operand(t), m.add_operand(t), m.add_operand(OperandType(OperandCode.INT32)), m.add_operand(t)
    bop = m.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (4,)))
    out = m.add_operand(t)
    m.set_operand_value_from_memory(wop, memory, 0, w.nbytes)
    m.set_operand_value(bop, b)
    m.set_operand_value(act, np.int32(0))
    m.add_operation(OperationCode.ADD, [x, wop, act], [s])
    m.add_operation(OperationCode.MUL, [s, bop, act], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    return m, w.reshape(16, 4), b


X = np.linspace(-1.0, 1.0, N, dtype=np.float32).reshape(16, 4)


def expected(seed: int = 0) -> np.ndarray:
    w, b = weights(seed)
    return ((X + w.reshape(16, 4)) * b).astype(np.float32)


def compile_cached(model: Model, device, cache_dir, token: bytes = TOKEN, **settings) -> Compilation:
    c = Compilation.for_devices(model, [device])
    if "preference" in settings:
        c.set_preference(settings["preference"])
    c.set_caching(cache_dir, token)
    c.finish()
    return c


def compute(c: Compilation) -> np.ndarray:
    out = np.full((16, 4), np.nan, np.float32)
    e = Execution(c)
    e.set_input(0, X)
    e.set_output(0, out)
    e.compute()
    return out


def files_of(c: Compilation) -> tuple[str, str]:
    (report,) = c.cache_reports
    model_file, data_file = report.files
    assert model_file.endswith(".model0") and data_file.endswith(".data0")
    return model_file, data_file


@pytest.fixture
def reference():
    return get_device("nnapi-reference")


@pytest.fixture
def model():
    return affine_model(0)[0]


# -- the happy path ------------------------------------------------------------------------------------
def test_second_compilation_prepares_from_cache_with_the_same_results(reference, model, tmp_path):
    plain = Compilation.for_devices(model, [reference])
    plain.finish()
    assert plain.cache_status == "disabled"
    first = compile_cached(model, reference, tmp_path)
    assert first.cache_status == "saved" and first.cache_reports[0].status == CacheStatus.SAVED
    assert all(os.path.getsize(f) > 0 for f in files_of(first))
    second = compile_cached(model, reference, tmp_path)
    assert second.cache_status == "prepared-from-cache"
    assert files_of(second) == files_of(first)
    out = compute(second)
    np.testing.assert_array_equal(out, compute(plain))
    np.testing.assert_allclose(out, expected(0), rtol=1e-6)


def test_a_cached_compilation_does_not_call_prepare_model(register, model, tmp_path):
    (device,) = register(FakeDriver("cache-recorder"))
    driver = device.driver
    assert driver.get_number_of_cache_files_needed() == (1, 1)
    compile_cached(model, device, tmp_path)
    assert driver.prepare_calls == 1
    again = compile_cached(model, device, tmp_path)
    assert driver.prepare_calls == 1 and again.cache_status == "prepared-from-cache"
    np.testing.assert_allclose(compute(again), expected(0), rtol=1e-6)


def test_the_cache_owns_its_constants(reference, tmp_path):
    """A model prepared from cache reads the weights from the cache, not from the application's memory."""
    model, w, _ = affine_model(0)
    compile_cached(model, reference, tmp_path)
    again = compile_cached(model, reference, tmp_path)
    pool = model.hal_model().pools[0]
    pool.array(0, np.float32, (N,))[:] = 0.0  # the application overwrites its weights afterwards
    np.testing.assert_allclose(compute(again), expected(0), rtol=1e-6)


def test_a_different_token_or_preference_does_not_reuse_the_cache(reference, model, tmp_path):
    first = compile_cached(model, reference, tmp_path)
    other = compile_cached(model, reference, tmp_path, OTHER_TOKEN)
    assert other.cache_status == "saved" and set(files_of(other)).isdisjoint(files_of(first))
    low_power = compile_cached(model, reference, tmp_path, preference=Preference.LOW_POWER)
    assert low_power.cache_status == "saved" and set(files_of(low_power)).isdisjoint(files_of(first))
    np.testing.assert_allclose(compute(other), expected(0), rtol=1e-6)


def test_partitions_are_cached_per_device(register, tmp_path):
    """ADD on a test driver, MUL on nnapi-reference: two steps, two caches, both reused."""
    (adder,) = register(FakeDriver("cache-adder", 0.5, operations={OperationCode.ADD}))
    model = affine_model(0)[0]

    def build() -> Compilation:
        c = Compilation(model)
        c.set_caching(tmp_path, TOKEN)
        c.finish()
        return c

    first = build()
    assert [r.device for r in first.cache_reports] == ["cache-adder", "nnapi-reference"]
    assert first.cache_status == "saved"
    second = build()
    assert second.cache_status == "prepared-from-cache" and adder.driver.prepare_calls == 1
    np.testing.assert_allclose(compute(second), expected(0), rtol=1e-6)


# -- bad caches fall back -----------------------------------------------------------------------------
def _flip_last_byte(path: str) -> None:
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte ^ 0x80]))  # a float32's sign bit: a wrong weight if it were ever used


def _flip_header_version(path: str) -> None:
    with open(path, "r+b") as f:
        f.seek(8)  # the format version follows the 8-byte magic
        f.write((99).to_bytes(4, "little"))


def _truncate(path: str) -> None:
    os.truncate(path, os.path.getsize(path) // 2)


def _empty(path: str) -> None:
    open(path, "wb").close()


def _extend(path: str) -> None:
    with open(path, "ab") as f:
        f.write(b"\0")


def _other_mlts_version(path: str) -> None:
    """The same file as an older mlts would have written it (framing read without checks, rewritten)."""
    kind = MODEL if path.endswith(".model0") else DATA
    header, payload = read_cache_file(path, kind, Identity("", ""), b"", verify=False)
    write_cache_file(path, kind, Identity(header.driver_name, header.driver_version, "0.0.0-older"),
                     header.token, payload.tobytes())


#: damage -> (how, what the report says)
DAMAGE = {"flipped byte": (_flip_last_byte, "checksum mismatch"),
          "format version": (_flip_header_version, "format version 99"),
          "truncated": (_truncate, "truncated"), "empty": (_empty, "too short"), "extended": (_extend, "extended"),
          "other mlts version": (_other_mlts_version, "(mlts 0.0.0-older)"), "deleted": (os.unlink, "no cache files")}


@pytest.mark.parametrize("which", ["model", "data"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cache_falls_back_to_a_full_compile_and_is_rewritten(reference, model, tmp_path, damage, which):
    files = dict(zip(("model", "data"), files_of(compile_cached(model, reference, tmp_path))))
    how, why = DAMAGE[damage]
    how(files[which])
    again = compile_cached(model, reference, tmp_path)
    assert again.cache_status == "saved"
    assert why in again.cache_reports[0].message
    np.testing.assert_allclose(compute(again), expected(0), rtol=1e-6)
    third = compile_cached(model, reference, tmp_path)
    assert third.cache_status == "prepared-from-cache"  # the fallback rewrote the cache
    np.testing.assert_allclose(compute(third), expected(0), rtol=1e-6)


def _plant(source: Compilation, target: Compilation) -> None:
    """Copy the cache files of `source` over those of `target` (kind by kind)."""
    for src, dst in zip(files_of(source), files_of(target)):
        shutil.copyfile(src, dst)


def test_a_foreign_cache_is_refused(reference, tmp_path):
    """Another model's cache files under this model's names: written for another token."""
    model_a, model_b = affine_model(0)[0], affine_model(1)[0]
    a = compile_cached(model_a, reference, tmp_path, TOKEN)
    b = compile_cached(model_b, reference, tmp_path, OTHER_TOKEN)
    _plant(b, a)
    again = compile_cached(model_a, reference, tmp_path, TOKEN)
    assert again.cache_status == "saved" and "another cache token" in again.cache_reports[0].message
    np.testing.assert_allclose(compute(again), expected(0), rtol=1e-6)


def test_a_model_cache_paired_with_another_compilations_data_is_refused(reference, tmp_path):
    model_a, model_b = affine_model(0)[0], affine_model(1)[0]
    a = compile_cached(model_a, reference, tmp_path, TOKEN)
    b_dir = tmp_path / "b"
    b_dir.mkdir()
    b = compile_cached(model_b, reference, b_dir, TOKEN)  # same token, same names, another directory
    shutil.copyfile(files_of(b)[1], files_of(a)[1])
    again = compile_cached(model_a, reference, tmp_path, TOKEN)
    assert again.cache_status == "saved" and "does not belong" in again.cache_reports[0].message
    np.testing.assert_allclose(compute(again), expected(0), rtol=1e-6)


def test_files_of_another_driver_are_refused(register, model, tmp_path):
    first, second = register(KernelDriver("cache-first", _caps()), KernelDriver("cache-second", _caps()))
    one = compile_cached(model, first, tmp_path)
    two = compile_cached(model, second, tmp_path)
    _plant(one, two)
    again = compile_cached(model, second, tmp_path)
    assert again.cache_status == "saved" and "written by cache-first" in again.cache_reports[0].message
    np.testing.assert_allclose(compute(again), expected(0), rtol=1e-6)


def _caps():
    from mlts.runtime import Capabilities

    return Capabilities.uniform(0.5, 0.5)


class RaisingFromCache(KernelDriver):
    """Caches, but its prepare_model_from_cache raises something other than MltsError (or returns None)."""

    def __init__(self, name: str, returns_none: bool = False) -> None:
        super().__init__(name, _caps())
        self.returns_none = returns_none

    def prepare_model_from_cache(self, deadline, cache):
        if self.returns_none:
            return None
        raise ZeroDivisionError("driver bug")


@pytest.mark.parametrize("returns_none", [False, True])
def test_a_driver_failing_to_prepare_from_cache_falls_back(register, model, tmp_path, returns_none):
    (device,) = register(RaisingFromCache("cache-raising", returns_none))
    compile_cached(model, device, tmp_path)
    again = compile_cached(model, device, tmp_path)
    assert again.cache_status == "saved"
    assert ("no prepared model" if returns_none else "ZeroDivisionError") in again.cache_reports[0].message
    np.testing.assert_allclose(compute(again), expected(0), rtol=1e-6)


class OddCacheAnswers(KernelDriver):
    def __init__(self, name: str, answer) -> None:
        super().__init__(name, _caps())
        self.answer = answer

    def get_number_of_cache_files_needed(self):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize("answer", [(0, 0), (-1, 1), (1, 99), ("1", 1), None, RuntimeError("no")])
def test_drivers_that_need_no_cache_or_answer_nonsense_compile_without_caching(register, model, tmp_path, answer):
    (device,) = register(OddCacheAnswers(f"cache-odd-{abs(hash(repr(answer))) % 10**6}", answer))
    c = compile_cached(model, device, tmp_path)
    assert c.cache_status == "unsupported" and c.cache_reports[0].status == CacheStatus.UNSUPPORTED
    assert os.listdir(tmp_path) == []
    np.testing.assert_allclose(compute(c), expected(0), rtol=1e-6)


class NeverSaves(KernelDriver):
    """Asks for cache files, never writes them (NNAPI allows a driver not to cache a model)."""

    def prepare_model(self, model, preference, priority, deadline, cache):
        return super().prepare_model(model, preference, priority, deadline, None)


def test_a_driver_that_does_not_save_is_reported_and_still_compiles(register, model, tmp_path):
    (device,) = register(NeverSaves("cache-never", _caps()))
    for _ in range(2):
        c = compile_cached(model, device, tmp_path)
        assert c.cache_status == "not-saved"
    np.testing.assert_allclose(compute(c), expected(0), rtol=1e-6)


def test_an_unwritable_cache_costs_only_the_shortcut(reference, model, tmp_path):
    """A cache path the driver cannot write (here: a directory in the way) never fails the compilation."""
    first = compile_cached(model, reference, tmp_path)
    model_file, data_file = files_of(first)
    os.unlink(data_file)
    os.mkdir(data_file)
    again = compile_cached(model, reference, tmp_path)
    assert again.cache_status == "not-saved"
    np.testing.assert_allclose(compute(again), expected(0), rtol=1e-6)


def test_concurrent_compilations_with_one_token_all_get_right_results(reference, model, tmp_path):
    results, errors = [], []

    def work():
        try:
            for _ in range(3):
                results.append(compute(compile_cached(model, reference, tmp_path)))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(results) == 12
    for out in results:
        np.testing.assert_allclose(out, expected(0), rtol=1e-6)
    assert compile_cached(model, reference, tmp_path).cache_status == "prepared-from-cache"
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(f) for f in files_of(compile_cached(
        model, reference, tmp_path)))  # the cache files and nothing else: no temporary left over


# -- set_caching ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad_dir", ["", "/no/such/directory", 42, None, "FILE"])
def test_set_caching_rejects_a_bad_directory(reference, model, tmp_path, bad_dir):
    if bad_dir == "FILE":
        bad_dir = tmp_path / "a-file"
        bad_dir.write_text("x")
    c = Compilation.for_devices(model, [reference])
    with pytest.raises(MltsError) as info:
        c.set_caching(bad_dir, TOKEN)
    assert info.value.code == ResultCode.BAD_DATA and "set_caching" in info.value.message


@pytest.mark.parametrize("bad_token", [b"", bytes(31), bytes(33), "x" * 32, None, list(range(32))])
def test_set_caching_rejects_a_bad_token(reference, model, tmp_path, bad_token):
    c = Compilation.for_devices(model, [reference])
    with pytest.raises(MltsError) as info:
        c.set_caching(tmp_path, bad_token)
    assert info.value.code == ResultCode.BAD_DATA and "32 bytes" in info.value.message


def test_set_caching_after_finish_is_bad_state(reference, model, tmp_path):
    c = Compilation.for_devices(model, [reference])
    c.finish()
    with pytest.raises(MltsError) as info:
        c.set_caching(tmp_path, TOKEN)
    assert info.value.code == ResultCode.BAD_STATE


# -- across the service boundary -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def hosted_sample():
    """sample-all, an AOSP-style sample driver, hosted in a driver service."""
    driver = ServiceDriver("mlts.runtime.drivers.sample:sample_drivers", name="sample-all")
    yield driver
    driver.close()


def test_caching_on_a_sample_driver_hosted_as_a_service(register, hosted_sample, model, tmp_path):
    (device,) = register(hosted_sample)
    assert device.hosting == "service" and hosted_sample.get_number_of_cache_files_needed() == (1, 1)
    first = compile_cached(model, device, tmp_path)
    assert first.cache_status == "saved"  # written by the service process
    second = compile_cached(model, device, tmp_path)
    assert second.cache_status == "prepared-from-cache"  # by the service, from the paths it was given
    np.testing.assert_allclose(compute(second), expected(0), rtol=1e-6)
    _flip_last_byte(files_of(second)[1])
    third = compile_cached(model, device, tmp_path)
    assert third.cache_status == "saved" and "checksum" in third.cache_reports[0].message
    np.testing.assert_allclose(compute(third), expected(0), rtol=1e-6)


def test_the_service_validates_cache_handles(hosted_sample):
    from mlts.runtime.hal import CacheHandles

    for bad in (CacheHandles(("x",), ("y",), b"short"), CacheHandles(["x"], ("y",), bytes(32)),
                CacheHandles((3,), ("y",), bytes(32)), "not handles"):
        with pytest.raises(MltsError) as info:
            hosted_sample.prepare_model_from_cache(None, bad)
        assert info.value.code == ResultCode.BAD_DATA
    with pytest.raises(MltsError) as info:  # the right form, but no such files: refused, the service lives
        hosted_sample.prepare_model_from_cache(None, CacheHandles(("/no/m",), ("/no/d",), bytes(32)))
    assert info.value.code == ResultCode.OP_FAILED and "missing" in info.value.message
    assert hosted_sample.alive


# -- the seeded fault ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fault", ["foreign", "corrupt"])
def test_stale_cache_fault_gives_wrong_results_where_a_healthy_driver_falls_back(register, tmp_path, fault):
    """The conformance check: plant a foreign cache (or flip a weight's sign in the data cache), compile
    again: a healthy driver recompiles and is right; faulty:stale-cache@prepare uses the cache as it is."""
    healthy_dev, stale_dev = register(KernelDriver("cache-healthy", _caps()), create_faulty("stale-cache@prepare"))
    model_a, model_b = affine_model(0)[0], affine_model(1)[0]
    outcomes = {}
    for device in (healthy_dev, stale_dev):
        directory = tmp_path / device.name
        directory.mkdir()
        a = compile_cached(model_a, device, directory, TOKEN)
        if fault == "foreign":
            _plant(compile_cached(model_b, device, directory, OTHER_TOKEN), a)
        else:
            _flip_last_byte(files_of(a)[1])
        again = compile_cached(model_a, device, directory, TOKEN)
        outcomes[device.name] = (again.cache_status, compute(again))
    status, out = outcomes["cache-healthy"]
    assert status == "saved"
    np.testing.assert_allclose(out, expected(0), rtol=1e-6)
    status, out = outcomes[stale_dev.name]
    assert status == "prepared-from-cache"
    assert not np.allclose(out, expected(0), rtol=1e-3)
    if fault == "foreign":
        np.testing.assert_allclose(out, expected(1), rtol=1e-6)  # model B's weights, run as model A


def test_faults_of_preparation_strike_a_cached_compilation_too(register, model, tmp_path):
    (device,) = register(create_faulty("wrong-large@execute"))
    compile_cached(model, device, tmp_path)
    again = compile_cached(model, device, tmp_path)
    assert again.cache_status == "prepared-from-cache"
    assert not np.allclose(compute(again), expected(0), rtol=1e-3)  # still the faulty driver's results


# -- the cache format ----------------------------------------------------------------------------------
def test_the_model_codec_round_trips_referenced_subgraphs_and_every_operand_field():
    """A model with a referenced subgraph (SUBGRAPH operand), per-channel quantization, an unknown-rank
    operand and both constant kinds survives encode/decode field by field."""
    from mlts.runtime.operand_type import SymmPerChannelQuantParams

    pool = Memory.create_shared(16)
    pool.array(0, np.int8, (16,))[:] = np.arange(16, dtype=np.int8)
    f32 = OperandType(OperandCode.TENSOR_FLOAT32, (2,))
    per_channel = OperandType(OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 2), 0.0, 0,
                              SymmPerChannelQuantParams((0.5, 0.25), 0))
    inner = Subgraph((HalOperand(f32, OperandLifetime.SUBGRAPH_INPUT, None, 1),
                      HalOperand(OperandType(OperandCode.TENSOR_FLOAT32, None), OperandLifetime.SUBGRAPH_OUTPUT)),
                     (HalOperation(OperationCode.RELU, (0,), (1,)),), (0,), (1,))
    main = Subgraph((HalOperand(f32, OperandLifetime.SUBGRAPH_INPUT, None, 1),
                     HalOperand(OperandType(OperandCode.MODEL), OperandLifetime.SUBGRAPH, DataLocation(0, 0, 0), 1),
                     HalOperand(per_channel, OperandLifetime.CONSTANT_REFERENCE, DataLocation(0, 8, 4), 0),
                     HalOperand(OperandType(OperandCode.INT32), OperandLifetime.CONSTANT_COPY,
                                DataLocation(-1, 0, 4), 0),
                     HalOperand(f32, OperandLifetime.SUBGRAPH_OUTPUT)),
                    (HalOperation(OperationCode.IF, (3, 1, 1, 0), (4,)),), (0,), (4,))
    model = HalModel(main, (inner,), np.int32(7).tobytes(), (pool,), True)
    structure, data = encode_model(model)
    back = decode_model(structure, np.frombuffer(data, np.uint8).copy())
    assert back.main.operations == main.operations and back.referenced == model.referenced
    assert back.main.input_indexes == (0,) and back.main.output_indexes == (4,)
    assert back.operand_values == model.operand_values and back.relax_computation_float32_to_float16
    for a, b in zip(back.main.operands, main.operands):
        assert (a.type, a.lifetime, a.number_of_consumers) == (b.type, b.lifetime, b.number_of_consumers)
    moved = back.main.operands[2].location
    assert moved.pool_index == 0 and moved.offset % 64 == 0 and moved.length == 4
    assert back.pools[0].view(moved.offset, 4).tobytes() == bytes([8, 9, 10, 11])
    assert back.main.operands[1].location == DataLocation(0, 0, 0)  # a SUBGRAPH reference is not data
    with pytest.raises(MltsError) as info:
        decode_model(b"{not json", np.zeros(4, np.uint8))
    assert info.value.code == ResultCode.OP_FAILED and "model cache" in info.value.message
