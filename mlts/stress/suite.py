"""Running the suite: every selected test on every target, each in a watched process, a liveness
check after the disruptive ones and after any HANG or CRASH, one "stress" record per test appended
to the run's results.jsonl as soon as it is known (a killed run keeps what it finished; a rerun with
the same directory skips it)."""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..benchmark.record_schema import SCHEMA_VERSION
from ..benchmark.results_writer import ResultsWriter
from .catalog import LIVENESS, StressTest
from .drivers import ALL_DEVICES, Target
from .models import BUILTIN
from .watchdog import CRASH, FAILURE, HANG, OUTCOMES, SKIPPED, SUCCESS, WatchResult, child_env, run_watched

LOG_DIR = "stress-logs"
ZOO_MODEL_S = 15.0  # deadline allowance per zoo model a test imports, compiles and runs on the reference
#: the run's own models when the zoo has none (each test takes those its driver runs whole)
FALLBACK_MODELS = ["convnet_f32", "convnet_u8", "conv_add_f32"]


@dataclass
class SuiteConfig:
    """Everything one run of the suite needs; the CLI fills it from its arguments."""

    run_dir: Path
    targets: list[Target]
    tests: list[StressTest]
    specs: list[str] = field(default_factory=list)   # --driver specs every test process loads
    hosting: str | None = None                        # --in-process
    quick: bool = False
    duration_scale: float = 1.0
    heartbeat_s: float = 30.0
    deadline_s: float | None = None                   # overrides every test's own deadline
    models: list[str] = field(default_factory=lambda: list(FALLBACK_MODELS))
    max_models: int | None = None                     # the parallel-inference tests take all, the others up to 2
    seed: int = 0
    liveness: bool = True                             # a liveness check after any HANG or CRASH
    liveness_after_disruptive: bool = True            # ... and after every disruptive test
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # test name -> parameters

    def test_models(self, test: StressTest) -> list[str]:
        own = test.parameters(self.quick).get("models")
        if own:
            return list(own) + [m for m in FALLBACK_MODELS if m not in own]
        if test.name.startswith("parallel_inference"):
            return self.models[:self.max_models] if self.max_models else list(self.models)
        first = self.models[:1 if self.quick else 2]
        return first + [m for m in FALLBACK_MODELS if m not in first]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def make_job(config: SuiteConfig, target: Target, test: StressTest, work_dir: Path, **params: Any) -> dict[str, Any]:
    """The JSON job a test process runs (see mlts.stress.child)."""
    p = test.parameters(config.quick)
    p["models"] = config.test_models(test)
    p.update(config.overrides.get(test.name, {}))
    p.update(params)
    return {"test": test.name, "function": test.function, "target": target.to_job(), "check_coverage": test.group == "stress",
            "specs": list(config.specs), "hosting": test.hosting or config.hosting,
            "duration_s": test.duration(config.quick, config.duration_scale), "params": p,
            "seed": config.seed + sum(map(ord, target.name + test.name)), "out_dir": str(config.run_dir),
            "work_dir": str(work_dir)}


def deadline_for(config: SuiteConfig, test: StressTest, models: list[str]) -> float:
    """The test's own deadline, plus time to import and compile each zoo model it loads."""
    if config.deadline_s:
        return config.deadline_s
    zoo_models = [m for m in models if m not in BUILTIN]
    return test.deadline(config.quick, config.duration_scale) + ZOO_MODEL_S * len(zoo_models)


def watch(config: SuiteConfig, target: Target, test: StressTest, work_dir: Path, *, log_name: str | None = None,
          **params: Any) -> WatchResult:
    job = make_job(config, target, test, work_dir, **params)
    deadline = deadline_for(config, test, job["params"].get("models", []))
    log_path = config.run_dir / LOG_DIR / f"{_safe(target.name)}.{_safe(log_name or test.name)}.log"
    if log_path.exists():
        log_path.unlink()  # a rerun's log, not the previous run's
    return run_watched(job, deadline_s=deadline, heartbeat_s=min(config.heartbeat_s, deadline),
                       log_path=log_path, env=child_env(drop=("MLTS_DRIVERS",)))


def run_test(config: SuiteConfig, target: Target, test: StressTest, work_dir: Path) -> dict[str, Any]:
    """One test on one target -> its stress record (not yet written)."""
    result = watch(config, target, test, work_dir)
    outcome, reason = result.outcome, result.reason
    liveness = None
    if config.liveness and (outcome in (HANG, CRASH) or test.disruptive and config.liveness_after_disruptive):
        live = watch(config, target, LIVENESS, work_dir, log_name=f"{test.name}.liveness",
                     models=config.models[:2] + FALLBACK_MODELS)
        liveness = {"outcome": live.outcome, "reason": live.reason, "duration_s": round(live.duration_s, 3)}
        if live.outcome not in (SUCCESS, SKIPPED) and outcome in (SUCCESS, SKIPPED):
            outcome = FAILURE
            reason = f"the driver did not survive the test: liveness check {live.outcome}: {live.reason}"
    deadline = deadline_for(config, test, config.test_models(test))
    return {"kind": "stress", "schema_version": SCHEMA_VERSION, "driver": target.name, "test": test.name,
            "group": test.group, "outcome": outcome, "duration_s": round(result.duration_s, 3), "reason": reason,
            "log_tail": result.log_tail, "description": test.description,
            "test_duration_s": test.duration(config.quick, config.duration_scale), "deadline_s": deadline,
            "heartbeat_s": config.heartbeat_s, "quick": config.quick, "duration_scale": config.duration_scale,
            "hosting": test.hosting or config.hosting or target.hosting, "exit_status": result.exit_status,
            "killed_processes": result.killed, "liveness": liveness, "details": result.details,
            "coverage": result.details.pop("coverage", None), "fallbacks": result.details.pop("fallbacks", None),
            "log": str(Path(LOG_DIR) / f"{_safe(target.name)}.{_safe(test.name)}.log")}


def stderr_progress(line: str) -> None:
    """Progress goes to stderr: stdout carries only the run directory, for scripts."""
    print(f"mlts stress: {line}", file=sys.stderr, flush=True)


def run_suite(config: SuiteConfig, *, progress: Callable[[str], None] = stderr_progress) -> list[dict[str, Any]]:
    """Run everything not already done in config.run_dir; returns every stress record of the run
    (those found from an interrupted earlier run included)."""
    config.run_dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="mlts-stress-"))
    records: list[dict[str, Any]] = []
    plan = [(t, s) for t in config.targets for s in config.tests if not (s.per_driver and t.name == ALL_DEVICES)]
    started = time.monotonic()
    try:
        with ResultsWriter(config.run_dir) as writer:
            for note in writer.notes:
                progress(note)
            earlier = _earlier_records(config.run_dir)
            for n, (target, test) in enumerate(plan, 1):
                key = ("stress", target.name, test.name)
                if writer.is_done(key):
                    records.append(earlier.get(key, {"driver": target.name, "test": test.name, "outcome": SUCCESS}))
                    progress(f"[{n}/{len(plan)}] {target.name} {test.name}: done in an earlier run, skipped")
                    continue
                progress(f"[{n}/{len(plan)}] {target.name} {test.name} ...")
                record = run_test(config, target, test, work_dir)
                records.append(writer.write(record))
                live = record["liveness"]
                progress(f"[{n}/{len(plan)}] {target.name} {test.name}: {record['outcome']} "
                         f"({record['duration_s']:.1f} s)" + (f": {record['reason']}" if record["reason"] else "")
                         + (f" [liveness {live['outcome']}]" if live else ""))
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    progress(f"{len(plan)} test(s) in {time.monotonic() - started:.1f} s")
    return records


def _earlier_records(run_dir: Path) -> dict[tuple, dict]:
    from ..benchmark.records import read_results

    try:
        results = read_results(run_dir)
    except Exception:
        return {}
    return {("stress", str(r.get("driver")), str(r.get("test"))): r for r in results.records
            if r.get("kind") == "stress"}


def outcome_counts(records: list[dict[str, Any]]) -> dict[str, int]:
    """Outcome -> count, every outcome present (for summaries)."""
    counts = {o: 0 for o in OUTCOMES}
    for r in records:
        counts[str(r.get("outcome"))] = counts.get(str(r.get("outcome")), 0) + 1
    return counts


def run_passed(records: list[dict[str, Any]]) -> bool:
    """The run's exit verdict: no FAILURE, HANG or CRASH, and every target had at least one test that
    exercised it (a driver whose tests were all SKIPPED was not tested, so it did not pass)."""
    if any(r.get("outcome") not in (SUCCESS, SKIPPED) for r in records):
        return False
    targets = {str(r.get("driver")) for r in records}
    return all(any(r.get("outcome") == SUCCESS for r in records if str(r.get("driver")) == t) for t in targets)


__all__ = ["FALLBACK_MODELS", "SuiteConfig", "make_job", "outcome_counts", "run_passed", "run_suite", "run_test",
           "watch"]
