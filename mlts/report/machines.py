"""Which machine each record was measured on, so merged runs compare like with like.

A machine is identified by its environment.json (hostname and CPU), or by its run directory when a
run left none; each driver's differences are then taken against the CPU reference measured on the
same machine.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mlts.benchmark.records import Results

from .formatting import as_dict


@dataclass
class Machine:
    key: tuple
    label: str
    environment: dict | None
    run_dirs: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)


def machine_key(results: Results, record: dict) -> tuple:
    """("env", host, CPU) from the record's environment.json, else ("run", run dir), else ("none",)."""
    src = results.source_of(record)
    env = src.environment if src else None
    if env:
        return ("env", str(env.get("hostname") or "?"), str(as_dict(env.get("cpu")).get("model") or "?"))
    if src:
        return ("run", str(src.run_dir))
    return ("none",)


def collect_machines(results: Results, records: list[dict]) -> dict[tuple, Machine]:
    """The machines of `records` by key, in order of first appearance, each labelled uniquely."""
    machines: dict[tuple, Machine] = {}
    for r in records:
        key = machine_key(results, r)
        m = machines.get(key)
        if m is None:
            src = results.source_of(r)
            env = src.environment if src else None
            if key[0] == "env":
                label = key[1]
            elif key[0] == "run":
                label = src.run_dir.name or str(src.run_dir)
            else:
                label = "unknown machine"
            m = machines[key] = Machine(key=key, label=label, environment=env)
        src = results.source_of(r)
        if src and str(src.run_dir) not in m.run_dirs:
            m.run_dirs.append(str(src.run_dir))
        rid = r.get("run_id")
        if isinstance(rid, str) and rid and rid not in m.run_ids:
            m.run_ids.append(rid)
    # Two machines with one hostname (different CPUs): tell them apart in their labels.
    seen: dict[str, int] = {}
    for m in machines.values():
        seen[m.label] = seen.get(m.label, 0) + 1
    counter: dict[str, int] = {}
    for m in machines.values():
        if seen[m.label] > 1:
            counter[m.label] = counter.get(m.label, 0) + 1
            m.label = f"{m.label} #{counter[m.label]}"
    return machines
