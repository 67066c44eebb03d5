import os
import sys

import pytest

# Make `fake_drivers` importable as a plain module from the runtime tests.
sys.path.insert(0, os.path.dirname(__file__))

from mlts.runtime import devices, register_driver, unregister_driver  # noqa: E402
from mlts.runtime.drivers.fast import FAST_DEVICE_NAME  # noqa: E402


@pytest.fixture
def register():
    """register(*drivers) -> [Device, ...]: make drivers available for this test only.

    While a test has drivers of its own registered, the built-in optimized driver (mlts-fast, which
    declares better performance than any test driver) is set aside, so that `Compilation(model)`
    partitions between nnapi-reference and the test's drivers only, as these tests expect. Every
    driver registered through it is unregistered at teardown, even when the test fails, and
    mlts-fast comes back, so that later tests see the built-in devices again.
    """
    before = [d.name for d in devices()]
    names: list[str] = []
    set_aside = []

    def _register(*drivers):
        if not set_aside:
            set_aside.extend(d.driver for d in devices() if d.name == FAST_DEVICE_NAME)
            unregister_driver(FAST_DEVICE_NAME)
            set_aside.append(None)  # marks "done" even when mlts-fast was not there
        out = []
        for d in drivers:
            out.append(register_driver(d))
            names.append(d.name)
        return out

    yield _register
    for name in reversed(names):
        unregister_driver(name)
    for driver in set_aside:
        if driver is not None:
            register_driver(driver)
    assert [d.name for d in devices()] == before, "a test left devices registered"
