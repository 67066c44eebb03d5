"""The plugin API: driver specs (`faulty:`, `sample`, `module:factory`, `file.py[:factory]`), hosting,
$MLTS_DRIVERS / $MLTS_DRIVER_HOSTING, the `mlts.drivers` entry points, and `mlts devices --driver`."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from mlts.runtime import MltsError, ResultCode, devices, get_device, unregister_driver
from mlts.runtime.app import manager
from mlts.runtime.drivers import KernelDriver
from mlts.runtime.drivers.faulty import FaultyDriver, fault_specs
from mlts.runtime.app.plugins import PluginWarning, driver_specs, entry_point_drivers, load_drivers
from mlts.runtime.app.manager import register_drivers

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_ids = itertools.count()

PLUGIN = """
from mlts.runtime import Capabilities, DeviceType
from mlts.runtime.drivers import KernelDriver


def make(prefix="{prefix}"):
    return [KernelDriver(prefix + "-a", Capabilities.uniform(0.9, 0.9), device_type=DeviceType.GPU, version="2.5"),
            KernelDriver(prefix + "-b", Capabilities.uniform(2.0, 2.0))]


def create_driver():
    return make()[0]


def not_a_driver():
    return "nope"


def raises():
    raise RuntimeError("vendor library missing")


def aborts():
    import os
    os.abort()
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A fresh importable plugin module: (module name, file path, driver-name prefix)."""
    n = next(_ids)
    name, prefix = f"acme_drivers_{n}_{os.getpid()}", f"acme{n}"
    path = tmp_path / f"{name}.py"
    path.write_text(PLUGIN.format(prefix=prefix))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name, path, prefix


@pytest.fixture
def cleanup():
    """Unregister every device a test added (register_drivers has no fixture of its own)."""
    before = {d.name for d in devices()}
    yield
    for d in devices():
        if d.name not in before:
            unregister_driver(d.name)


def names(drivers) -> list[str]:
    return [d.name for d in drivers]


# -- specs and hosting ---------------------------------------------------------------------------------
def test_module_factory_in_process(plugin):
    module, _, prefix = plugin
    drivers = load_drivers(f"{module}:make", hosting="in-process")
    assert names(drivers) == [f"{prefix}-a", f"{prefix}-b"]
    assert all(isinstance(d, KernelDriver) and d.hosting == "in-process" for d in drivers)
    assert drivers[0].mlts_source == f"{module}:make"


def test_py_path_defaults_to_create_driver_or_a_named_factory(plugin):
    _, path, prefix = plugin
    assert names(load_drivers(str(path), hosting="in-process")) == [f"{prefix}-a"]
    assert names(load_drivers(f"{path}:make", hosting="in-process")) == [f"{prefix}-a", f"{prefix}-b"]


def test_third_party_drivers_default_to_services(plugin):
    pytest.importorskip("mlts.runtime.service")
    module, path, prefix = plugin
    drivers = load_drivers(f"{module}:make")
    try:
        assert names(drivers) == [f"{prefix}-a", f"{prefix}-b"]
        assert [d.hosting for d in drivers] == ["service", "service"]
        assert drivers[0].version == "2.5" and drivers[0].get_capabilities().performance(None).exec_time == 1.0
        assert len({d.pid for d in drivers}) == 2  # one process each
    finally:
        for d in drivers:
            d.close()


def test_builtin_drivers_default_to_in_process():
    assert names(load_drivers("sample"))[:2] == ["sample-all", "sample-float-fast"]
    drivers = load_drivers("mlts.runtime.drivers.sample:sample_drivers")
    assert len(drivers) == 5 and all(d.hosting == "in-process" for d in drivers)


def test_fault_drivers_default_to_services_unless_told():
    in_process = load_drivers("faulty:all", hosting="in-process")
    assert len(in_process) == len(fault_specs()) and all(isinstance(d, FaultyDriver) for d in in_process)
    pytest.importorskip("mlts.runtime.service")
    (d,) = load_drivers("faulty:wrong-large@execute?seed=2")
    try:
        assert d.hosting == "service" and d.name == "faulty-wrong-large-execute-seed2"
        assert d.mlts_source == "faulty:wrong-large@execute?seed=2"
    finally:
        d.close()


def test_hosting_environment_variable_overrides_the_default(plugin, monkeypatch):
    module, _, _ = plugin
    monkeypatch.setenv("MLTS_DRIVER_HOSTING", "in-process")
    (d,) = load_drivers("faulty:leak@execute")
    assert isinstance(d, FaultyDriver)
    assert all(isinstance(x, KernelDriver) for x in load_drivers(f"{module}:make"))
    monkeypatch.setenv("MLTS_DRIVER_HOSTING", "elsewhere")
    with pytest.raises(MltsError) as info:
        load_drivers("sample")
    assert info.value.code == ResultCode.BAD_DATA and "hosting" in info.value.message


@pytest.mark.parametrize("spec, words", [
    ("", ["non-empty"]),
    ("   ", ["non-empty"]),
    ("no_such_module_xyz:create", ["no_such_module_xyz", "cannot import"]),
    ("just_a_name", ["module:factory"]),
    ("/nonexistent/driver.py", ["/nonexistent/driver.py", "does not exist"]),
    ("faulty:explode@execute", ["explode", "faulty:crash@execute"]),
])
def test_bad_specs_are_bad_data_naming_the_spec(spec, words):
    with pytest.raises(MltsError) as info:
        load_drivers(spec, hosting="in-process")
    assert info.value.code == ResultCode.BAD_DATA
    for w in words:
        assert w in info.value.message


@pytest.mark.parametrize("factory, words", [("not_a_driver", ["str", "not an mlts.runtime.Driver"]),
                                            ("raises", ["RuntimeError", "vendor library missing"]),
                                            ("missing", ["has no 'missing'"])])
def test_broken_factories_are_bad_data_naming_them(plugin, factory, words):
    module, _, _ = plugin
    with pytest.raises(MltsError) as info:
        load_drivers(f"{module}:{factory}", hosting="in-process")
    assert info.value.code == ResultCode.BAD_DATA and module in info.value.message
    for w in words:
        assert w in info.value.message


def test_a_file_that_does_not_import_is_bad_data(tmp_path):
    bad = tmp_path / "broken_driver.py"
    bad.write_text("def create_driver(:\n")
    with pytest.raises(MltsError) as info:
        load_drivers(str(bad), hosting="in-process")
    assert info.value.code == ResultCode.BAD_DATA and "broken_driver.py" in info.value.message
    assert "SyntaxError" in info.value.message


def test_a_factory_that_crashes_cannot_take_the_caller_down(plugin):
    pytest.importorskip("mlts.runtime.service")
    module, _, _ = plugin
    with pytest.raises(MltsError) as info:
        load_drivers(f"{module}:aborts")  # service hosting: created in a throw-away process first
    assert info.value.code == ResultCode.DEAD_OBJECT and f"{module}:aborts" in info.value.message
    with pytest.raises(MltsError) as info:
        load_drivers(f"{module}:raises")
    assert info.value.code == ResultCode.BAD_DATA and "vendor library missing" in info.value.message


# -- a run's drivers: --driver, $MLTS_DRIVERS, register_drivers ----------------------------------------------
def test_driver_specs_take_the_environment_first(monkeypatch):
    monkeypatch.setenv("MLTS_DRIVERS", " sample , faulty:leak@execute?mb=2,,")
    assert driver_specs(["x.py", "sample"]) == ["sample", "faulty:leak@execute?mb=2", "x.py"]
    assert driver_specs(["x.py"], environ=False) == ["x.py"]
    monkeypatch.delenv("MLTS_DRIVERS")
    assert driver_specs(None) == []


def test_register_drivers_is_all_or_nothing(cleanup):
    added = register_drivers(["faulty:fail@prepare"], hosting="in-process")
    assert [d.name for d in added] == ["faulty-fail-prepare"] and get_device("faulty-fail-prepare")
    before = names(devices())
    with pytest.raises(MltsError) as info:  # the second spec clashes with what the first registered
        register_drivers(["sample", "faulty:fail@prepare"], hosting="in-process")
    assert info.value.code == ResultCode.BAD_DATA and "faulty-fail-prepare" in info.value.message
    assert names(devices()) == before  # the sample drivers were not registered either


# -- entry points ----------------------------------------------------------------------------------------
@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    """A fake installed distribution: a module plus a *.dist-info with entry_points.txt on sys.path."""
    n = next(_ids)
    site = tmp_path / "site"
    site.mkdir()
    module, prefix = f"vendor_plugin_{n}_{os.getpid()}", f"vendor{n}"
    (site / f"{module}.py").write_text(PLUGIN.format(prefix=prefix))
    info = site / f"vendor_plugin_{n}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vendor-plugin-{n}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(f"""\
        [mlts.drivers]
        vendor = {module}:make
        broken = {module}_missing:create
        bad = {module}:raises
        """))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("MLTS_NO_PLUGINS", raising=False)
    return module, prefix, n


def test_entry_points_load_and_broken_ones_only_warn(installed_plugin):
    module, prefix, n = installed_plugin
    with pytest.warns(PluginWarning) as caught:
        drivers = entry_point_drivers(hosting="in-process")
    assert names(drivers) == [f"{prefix}-a", f"{prefix}-b"]
    assert drivers[0].mlts_source == "entry point vendor"
    messages = " ".join(str(w.message) for w in caught)
    assert "'broken'" in messages and f"{module}_missing" in messages and f"vendor-plugin-{n}" in messages
    assert "'bad'" in messages and "vendor library missing" in messages


def test_installed_plugins_are_devices(installed_plugin, monkeypatch):
    pytest.importorskip("mlts.runtime.service")
    _, prefix, _ = installed_plugin
    monkeypatch.setattr(manager, "_devices", None)  # discovery again, as in a fresh process
    with pytest.warns(PluginWarning):
        found = {d.name: d for d in devices()}
    assert "nnapi-reference" in found
    assert found[f"{prefix}-a"].hosting == "service" and found[f"{prefix}-b"].hosting == "service"
    for name in (f"{prefix}-a", f"{prefix}-b"):
        found[name].driver.close()


def test_plugins_can_be_turned_off(installed_plugin, monkeypatch):
    monkeypatch.setenv("MLTS_NO_PLUGINS", "1")
    assert entry_point_drivers(hosting="in-process") == []
    monkeypatch.setattr(manager, "_devices", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the broken entry points are not even looked at
        found = names(devices())
    assert "nnapi-reference" in found and not any(n.startswith(installed_plugin[1]) for n in found)


# -- the command line ------------------------------------------------------------------------------------
def mlts(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "MLTS_DRIVERS"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "mlts.cli", *args], cwd=REPO, env=full, capture_output=True,
                          text=True, timeout=120)


def test_cli_devices_with_driver_options_and_environment():
    pytest.importorskip("mlts.runtime.service")
    proc = mlts("devices", "--json", "--driver", "faulty:crash@execute", env={"MLTS_DRIVERS": "sample"})
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    crash = rows["faulty-crash-execute"]
    assert crash["hosting"] == "service" and crash["type"] == "ACCELERATOR" and crash["source"] == "faulty:crash@execute"
    assert crash["performance"]["TENSOR_FLOAT32"] == {"exec_time": 0.5, "power_usage": 0.5}
    assert {"capabilities", "relaxed_float32_to_float16", "if_performance", "cache_files", "extensions",
            "feature_level", "version"} <= set(crash)
    assert rows["sample-quant"]["hosting"] == "in-process" and rows["sample-quant"]["source"] == "sample"
    assert rows["sample-quant"]["performance"]["TENSOR_QUANT8_ASYMM"]["exec_time"] == 50.0
    text = mlts("devices", "--in-process", "--driver", "faulty:slow@execute")
    assert text.returncode == 0, text.stderr
    line = next(x for x in text.stdout.splitlines() if x.startswith("faulty-slow-execute"))
    assert "ACCELERATOR" in line and "in-process" in line and "0.5/0.5 all types" in line


def test_cli_bad_driver_spec_is_a_clear_error():
    proc = mlts("devices", "--driver", "faulty:melt@execute")
    assert proc.returncode == 1 and "mlts devices: error: BAD_DATA" in proc.stderr and "melt" in proc.stderr
