"""The execution hot path: what a reusable execution's compute() costs, counted in Python function calls
(the machine-independent measure; timings are in benchmarks/runtime_overhead.py), and the NNAPI behaviour
the reuse of a request must keep: new bindings are used, in-place changes are read, freed memory is
refused, and an application's arrays are written where they are bound."""
from __future__ import annotations

import os

import numpy as np
import pytest

import mlts
from mlts.benchmark.overhead import PROBE_SHAPE as SHAPE, add_model, python_calls
from mlts.runtime import Compilation, Execution, Memory, MltsError, ResultCode, get_device
from mlts.runtime.app.execution import LANE_AFTER_COMPUTES

#: Calls of mlts's own Python functions one compute may make (the Python library's are left out: they
#: differ between Python versions), measured with margin: mlts-fast 10 and nnapi-reference 17 when this
#: was written, through the reusable execution (reusable_lane.py; 33 for nnapi-reference before its
#: kernels' accessors, the predictor and the bound graph's checks were made inline, 58 and 138 when each compute sent its request,
#: 248 and 361 before a request was reused). Lower them when the path gets leaner.
MAX_CALLS = {"mlts-fast": 13, "nnapi-reference": 21}
MLTS_DIR = os.path.dirname(mlts.__file__)



def _execution(device: str) -> Execution:
    compilation = Compilation.for_devices(add_model(), [get_device(device)])
    compilation.finish()
    execution = Execution(compilation)
    execution.set_reusable(True)
    return execution


@pytest.mark.parametrize("device", sorted(MAX_CALLS))
def test_a_reused_compute_stays_within_its_call_budget(device):
    ex = _execution(device)
    x = np.arange(4, dtype=np.float32).reshape(SHAPE)
    out = np.empty(SHAPE, np.float32)
    ex.set_input(0, x)
    ex.set_input(1, x)
    ex.set_output(0, out)
    for _ in range(LANE_AFTER_COMPUTES):  # build and validate the request, then bind it (createReusableExecution)
        ex.compute()
    ex.compute()  # the first run of the bound request records what each operation's prepare read
    calls = python_calls(ex.compute, within=MLTS_DIR)
    assert calls <= MAX_CALLS[device], f"{device}: {calls} Python calls per compute"
    np.testing.assert_array_equal(out, [[0, 2, 4, 6]])


@pytest.mark.parametrize("device", sorted(MAX_CALLS))
def test_reuse_reads_new_and_changed_inputs_and_writes_the_bound_output(device):
    ex = _execution(device)
    a = np.array([[1, 2, 3, 4]], np.float32)
    b = np.array([[10, 20, 30, 40]], np.float32)
    out = np.empty(SHAPE, np.float32)
    ex.set_input(0, a)
    ex.set_input(1, b)
    ex.set_output(0, out)
    ex.compute()
    np.testing.assert_array_equal(out, [[11, 22, 33, 44]])
    a[0, 0] = 100  # the application changes its array in place: bound, not copied
    ex.compute()
    np.testing.assert_array_equal(out, [[110, 22, 33, 44]])
    ex.set_input(1, np.zeros(SHAPE, np.float32))  # a new binding
    ex.compute()
    np.testing.assert_array_equal(out, [[100, 2, 3, 4]])
    other = np.full(SHAPE, -1, np.float32)
    ex.set_output(0, other)  # a new output binding: the old array is left alone
    ex.compute()
    np.testing.assert_array_equal(other, [[100, 2, 3, 4]])
    np.testing.assert_array_equal(out, [[100, 2, 3, 4]])


@pytest.mark.parametrize("device", sorted(MAX_CALLS))
def test_a_memory_freed_between_computes_is_refused(device):
    ex = _execution(device)
    memory = Memory.create_shared(16)
    memory.array(0, np.float32, SHAPE)[:] = [[1, 2, 3, 4]]
    out = np.empty(SHAPE, np.float32)
    ex.set_input_from_memory(0, memory, 0, 16)
    ex.set_input(1, np.ones(SHAPE, np.float32))
    ex.set_output(0, out)
    ex.compute()
    np.testing.assert_array_equal(out, [[2, 3, 4, 5]])
    memory.free()
    with pytest.raises(MltsError) as caught:
        ex.compute()
    assert caught.value.code in (ResultCode.BAD_DATA, ResultCode.OP_FAILED)


def _leaf() -> int:
    return 1


def _two_leaves() -> int:
    return _leaf() + _leaf()


def test_python_calls_keeps_the_garbage_collector_out_of_the_count():
    """An automatic collection starting inside the counted call would run finalizers (weakref.finalize callbacks,
    as Memory's) and count them as the call's own (seen: 4 calls for _two_leaves' 2 in a full suite run): the
    collector is off while counting, and left as it was."""
    import gc

    seen = []
    assert gc.isenabled()
    assert python_calls(lambda: seen.append(gc.isenabled())) == 0 and seen == [False]
    assert gc.isenabled()
    gc.disable()
    try:
        python_calls(_two_leaves)
        assert not gc.isenabled()  # not switched on by the count either
    finally:
        gc.enable()


def test_python_calls_counts_what_a_call_makes_and_filters_by_file():
    assert python_calls(_two_leaves) == 2  # the two _leaf calls; _two_leaves itself is not counted
    assert python_calls(lambda: _two_leaves()) == 3
    assert python_calls(_two_leaves, within=__file__) == 2
    assert python_calls(_two_leaves, within=os.path.join("no", "such", "file")) == 0
