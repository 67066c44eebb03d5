import os
import sys

import pytest

# Make `fake_drivers` importable as a plain module from the runtime tests.
sys.path.insert(0, os.path.dirname(__file__))

from mlts.runtime import devices, register_driver, unregister_driver  # noqa: E402


@pytest.fixture
def register():
    """register(*drivers) -> [Device, ...]: make drivers available for this test only.

    Every driver registered through it is unregistered at teardown, even when the test fails, so
    that `Compilation(model)` in later tests sees only the built-in devices again.
    """
    before = [d.name for d in devices()]
    names: list[str] = []

    def _register(*drivers):
        out = []
        for d in drivers:
            out.append(register_driver(d))
            names.append(d.name)
        return out

    yield _register
    for name in reversed(names):
        unregister_driver(name)
    assert [d.name for d in devices()] == before, "a test left devices registered"
