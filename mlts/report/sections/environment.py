"""The environment section: each machine's environment.json and the run configuration, the results
files read and the problems met reading them, so a reader knows what the numbers were measured on.
"""
from __future__ import annotations

import json
from typing import Any

from mlts.benchmark.record_schema import BENCHMARK

from ..formatting import as_dict, number
from ..report_data import ReportData
from ..stress_rows import STRESS


def _gb(v: Any) -> str:
    n = number(v)
    return "–" if n is None else f"{n / 2 ** 30:.1f} GiB"


def environment_items(env: dict | None) -> list[tuple[str, str]]:
    """The environment as label/value lines, most telling first; absent facts are left out."""
    if not env:
        return [("Environment", "not recorded (no environment.json in the run directory)")]
    items: list[tuple[str, str]] = []
    cpu, mem, os_, py = (as_dict(env.get(k)) for k in ("cpu", "memory", "os", "python"))
    if env.get("hostname"):
        items.append(("Host", str(env["hostname"])))
    if cpu:
        cores = ", ".join(f"{cpu[k]} {label}" for k, label in (("logical_cores", "logical"),
                                                               ("physical_cores", "physical"),
                                                               ("usable_cores", "usable"))
                          if cpu.get(k) is not None)
        freq = number(cpu.get("max_frequency_mhz"))
        text = " · ".join(x for x in (str(cpu.get("model") or ""), str(cpu.get("architecture") or ""),
                                       cores and f"cores: {cores}", freq and f"{freq:.0f} MHz") if x)
        items.append(("CPU", text))
    if mem:
        items.append(("Memory", f"{_gb(mem.get('total_bytes'))} total, {_gb(mem.get('available_bytes'))} available"))
    if os_:
        items.append(("OS", str(os_.get("platform") or f"{os_.get('system', '')} {os_.get('release', '')}".strip())))
    if py:
        items.append(("Python", f"{py.get('version', '?')} ({py.get('implementation', '?')})"))
    np_ = as_dict(env.get("numpy"))
    if np_:
        blas = as_dict(np_.get("blas"))
        text = str(np_.get("version") or "?")
        if blas:
            text += f" · BLAS {blas.get('name', '?')} {blas.get('version', '')}".rstrip()
        pools = np_.get("threadpools")
        if isinstance(pools, list) and pools:
            text += " · threads: " + ", ".join(
                f"{as_dict(p).get('internal_api', '?')}={as_dict(p).get('num_threads', '?')}" for p in pools)
        items.append(("numpy", text))
    pk = as_dict(env.get("packages"))
    if pk:
        items.append(("Packages", ", ".join(f"{k} {v}" for k, v in pk.items() if v)))
    ml = as_dict(env.get("mlts"))
    if ml:
        commit = ml.get("commit")
        text = str(ml.get("version") or "?")
        if commit:
            text += f" · commit {str(commit)[:12]}" + (" (uncommitted changes)" if ml.get("dirty") else "")
        items.append(("mlts", text))
    ev = as_dict(env.get("env"))
    if ev:
        items.append(("Environment variables", " ".join(f"{k}={v}" for k, v in ev.items())))
    if env.get("collected_at"):
        items.append(("Collected", str(env["collected_at"])))
    return items


def _value_text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(",", ": "))


def configuration_items(records: list[dict]) -> list[tuple[str, str]]:
    """Run configuration seen across the benchmark records: each setting with its distinct values."""
    seen: dict[str, list[str]] = {}

    def add(name: str, v: Any) -> None:
        if v is None:
            return
        text = _value_text(v)
        values = seen.setdefault(name, [])
        if text not in values:
            values.append(text)

    for r in records:
        add("Mode", r.get("mode", "sync"))
        add("Preference", r.get("preference", "FAST_SINGLE_ANSWER"))
        for k, v in as_dict(r.get("config")).items():
            add(str(k), v)
        rl = as_dict(r.get("run_length"))
        add("Run length", rl.get("preset") or rl.get("name"))
        for k, v in as_dict(r.get("seeds")).items():
            add(f"Seed ({k})", v)
    items = []
    for name, values in seen.items():
        shown = values[:6]
        text = ", ".join(shown) + (f" … ({len(values)} values)" if len(values) > len(shown) else "")
        items.append((name, text))
    return items


def variables(data: ReportData) -> dict[str, Any]:
    """Template variables of the environment section."""
    kinds = {str(r.get("kind")) for r in data.results.records}
    return {
        "environments": [(m, environment_items(m.environment)) for m in data.machines.values()],
        "configuration": configuration_items(data.benchmark_records),
        "sources": data.results.sources,
        "problems": list(data.results.problems),
        "other_kinds": sorted(kinds - {BENCHMARK, STRESS}),
    }
