"""The package's architecture, checked from its source: no import cycles (function-level imports count),
NNAPI's layers import only downwards, nothing but the command line imports the command line, and no module
grows past 500 lines. See the README's "Layout" section."""
from __future__ import annotations

from pathlib import Path

import pytest

from support.import_graph import cycles, import_graph, modules_of

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 500

#: Import edges allowed to close a cycle (at most 3, each with its reason). None today.
ALLOWED_CYCLE_EDGES: dict[tuple[str, str], str] = {}

R = "mlts.runtime."
#: package -> packages it must never import. The runtime's layers, bottom up: vocabulary (enums, errors,
#: operand_type, vlog), hal (the driver contract), ops (kernels), cpu (the executor), drivers, service,
#: app (what an application calls). The runtime knows nothing of the suite built on it.
FORBIDDEN = {
    R + "hal": [R + "app", R + "drivers", R + "service", R + "cpu", R + "qos"],
    R + "ops": [R + "app", R + "drivers", R + "service", R + "cpu"],
    R + "cpu": [R + "app", R + "drivers", R + "service"],
    R + "drivers": [R + "app", R + "service"],
    R + "service": [R + "app"],
    "mlts.runtime": ["mlts.benchmark", "mlts.stress", "mlts.report", "mlts.models", "mlts.datasets", "mlts.cli",
                     "mlts.conformance"],
    "mlts": ["mlts.cli"],
}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(ROOT, "mlts")


def test_no_import_cycles(graph):
    pruned = {m: {t for t in targets if (m, t) not in ALLOWED_CYCLE_EDGES} for m, targets in graph.items()}
    assert len(ALLOWED_CYCLE_EDGES) <= 3
    found = cycles(pruned)
    detail = ["; ".join(f"{m} -> {sorted(t for t in pruned[m] if t in c)}" for m in c) for c in found]
    assert not found, "import cycles:\n" + "\n".join(detail)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_layers_import_only_downwards(graph, package):
    bad = []
    for module, targets in graph.items():
        if not _within(module, package) or (package == "mlts" and _within(module, "mlts.cli")):
            continue
        for target in targets:
            if any(_within(target, forbidden) for forbidden in FORBIDDEN[package]):
                bad.append(f"{module} imports {target}")
    assert not bad, "\n".join(sorted(bad))


def test_modules_stay_small():
    big = {name: n for name, path in modules_of(ROOT, "mlts").items()
           if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines (split them by responsibility): {big}"


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_graph_sees_function_level_and_relative_imports_and_finds_their_cycles(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from . import b\n",
        "pkg/b.py": "def f():\n    from .sub.c import X\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "import pkg.a\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\n",
        "pkg/d.py": "from pkg.sub import c\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.sub.c"}
    assert graph["pkg.sub.c"] == {"pkg.a"}  # the TYPE_CHECKING import never runs
    assert graph["pkg.d"] == {"pkg.sub.c"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_an_acyclic_graph_has_no_cycles():
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"c"}}) == [["a", "b"]]
