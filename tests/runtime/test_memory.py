"""Memory pools: shared memory and mapped files, regions checked against size and protection."""
from __future__ import annotations

import mmap
import os

import numpy as np
import pytest

from mlts.runtime import PROT_READ, PROT_WRITE, Memory, MltsError, ResultCode


def test_shared_memory_is_visible_through_its_fd():
    mem = Memory.create_shared(64)
    mem.array(8, np.int32, (4,))[:] = [1, 2, 3, 4]
    # Another mapping of the same fd (what a driver service would do) sees the same bytes.
    other = mmap.mmap(mem.fd, 64, mmap.MAP_SHARED, PROT_READ)
    assert np.frombuffer(other, np.int32, 4, 8).tolist() == [1, 2, 3, 4]
    other.close()


def test_file_memory_at_unaligned_offset_reads_the_right_bytes(tmp_path):
    data = np.arange(5000, dtype=np.int32)
    path = tmp_path / "weights.bin"
    path.write_bytes(data.tobytes())
    offset = 4 * 1234  # not a multiple of the page size
    mem = Memory.from_file(path, offset=offset, size=4 * 100, protect=PROT_READ)
    assert mem.size == 400
    assert mem.array(0, np.int32, (100,)).tolist() == list(range(1234, 1334))


def test_read_only_file_memory_cannot_be_written(tmp_path):
    path = tmp_path / "ro.bin"
    path.write_bytes(bytes(16))
    mem = Memory.from_file(path, protect=PROT_READ)
    assert not mem.writable
    with pytest.raises(MltsError) as info:
        mem.check_region(0, 16, "output", for_write=True)
    assert info.value.code == ResultCode.BAD_DATA and "not writable" in info.value.message
    assert not mem.array(0, np.uint8, (16,)).flags.writeable


def test_writes_to_read_write_file_memory_reach_the_file(tmp_path):
    path = tmp_path / "rw.bin"
    path.write_bytes(bytes(8))
    mem = Memory.from_file(path, protect=PROT_READ | PROT_WRITE)
    mem.array(0, np.uint8, (8,))[:] = 7
    mem._mapping.flush()
    assert path.read_bytes() == bytes([7] * 8)


@pytest.mark.parametrize("offset,length", [(-1, 4), (0, 65), (60, 8), (64, 1)])
def test_regions_outside_the_pool_are_refused(offset, length):
    mem = Memory.create_shared(64)
    with pytest.raises(MltsError) as info:
        mem.check_region(offset, length, "input 0")
    assert info.value.code == ResultCode.BAD_DATA
    assert "input 0" in info.value.message and "outside" in info.value.message


def test_region_beyond_file_end_is_refused(tmp_path):
    path = tmp_path / "small.bin"
    path.write_bytes(bytes(10))
    with pytest.raises(MltsError) as info:
        Memory.from_file(path, offset=4, size=8)
    assert info.value.code == ResultCode.BAD_DATA and "exceeds" in info.value.message


def test_bad_protection_and_fd_are_refused(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(10))
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(MltsError):
            Memory.from_fd(10, 0x80, fd, 0)
    finally:
        os.close(fd)
    with pytest.raises(MltsError):
        Memory.from_fd(10, PROT_READ, 987654, 0)


def test_freed_memory_cannot_be_used():
    mem = Memory.create_shared(16)
    mem.free()
    with pytest.raises(MltsError) as info:
        mem.check_region(0, 4, "input 0")
    assert "freed" in info.value.message


def test_numpy_offsets_cannot_wrap_around():
    from mlts.runtime import Model, OperandCode, OperandType

    mem = Memory.create_shared(64)
    with pytest.raises(MltsError) as info:
        mem.check_region(np.uint64(2**64 - 16), np.uint64(16), "operand 0")
    assert info.value.code == ResultCode.BAD_DATA
    m = Model()
    c = m.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (4,)))
    with pytest.raises(MltsError):
        m.set_operand_value_from_memory(c, mem, np.uint64(2**64 - 16), np.uint64(16))
    m.set_operand_value_from_memory(c, mem, np.int64(16), np.int64(16))  # numpy ints are fine in range


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_memories_dropped_without_free_release_their_descriptors():
    """A finished model keeps its large constants in a shared pool: building and dropping many models (the
    fuzzers, `mlts diff`'s single-operation models) must not leak one descriptor each; free() closes once."""
    import gc

    from mlts.runtime import Model, OperandCode, OperandType, OperationCode

    gc.collect()
    before = _open_fds()
    for _ in range(50):
        m = Model()
        t = OperandType.tensor(OperandCode.TENSOR_FLOAT32, [64, 64])
        a, b, fuse, out = m.add_operand(t), m.add_operand(t), m.add_operand(OperandType.scalar(OperandCode.INT32)), \
            m.add_operand(t)
        m.set_operand_value(b, np.ones((64, 64), np.float32))  # 16 KiB: held in the model's shared pool
        m.set_operand_value(fuse, np.int32(0))
        m.add_operation(OperationCode.ADD, [a, b, fuse], [out])
        m.identify_inputs_and_outputs([a], [out])
        m.finish()
        m.hal_model()
        Memory.create_shared(4096)  # dropped at once
        del m
    gc.collect()
    assert _open_fds() <= before + 2
    mem = Memory.create_shared(4096)
    fd = mem.fd
    mem.free()
    mem.free()
    with pytest.raises(OSError):
        os.fstat(fd)  # closed by free(), and only once (a second close could hit a reused number)
