"""`mlts benchmark --ab BASELINE,CANDIDATE`: two drivers (or two builds of one, loaded under two names)
timed in alternation in one process, so that load drift and clock changes touch both alike.

Per model and mode: both compiled, then warm-up and timed pairs under the run-length rules (a pair is
one inference on each, in the order A B, then B A, and so on: neither side always runs second, on a
cache the other warmed). Each side gets its usual benchmark record (latency from its runs in the pairs,
compilation, accuracy), and the candidate's record also `paired`: the paired ratio with its interval
and verdict (paired_stats.decide_paired, threshold `DecisionRule.slowdown_pct`). A driver that cannot
run the whole model runs partitioned with nnapi-reference, as in a normal run (unless --no-partition).
"""
from __future__ import annotations

import time
from typing import Any, Iterable, Sequence

from mlts.runtime import MltsError, ResultCode
from mlts.runtime.drivers.reference import REFERENCE_DEVICE_NAME

from .decision import FAIL, DecisionRule, fmt_pct, p_text
from .paired_stats import decide_paired
from .record_schema import BenchmarkRecord
from .case_info import driver_times
from .inference import Inference, stage
from .model_run import ModelRun
from .runner import BenchmarkRunner
from .stage_timeout import CaseError, StageTimeout, Tick, inference_waiting_on, runs_waiting_on
from .stats import Measurement, latency_stats, measure

ORDER = "ABBA"


def parse_ab(text: str, available: Sequence[str]) -> list[str]:
    """[baseline, candidate] from "A,B" (or "B" alone: against nnapi-reference), both available devices."""
    names = [n.strip() for n in str(text).split(",") if n.strip()]
    if len(names) == 1:
        names.insert(0, REFERENCE_DEVICE_NAME)
    if len(names) != 2 or names[0] == names[1]:
        raise MltsError(ResultCode.BAD_DATA, f"--ab takes BASELINE,CANDIDATE (two different driver names), got {text!r}")
    missing = [n for n in names if n not in available]
    if missing:
        raise MltsError(ResultCode.BAD_DATA, f"--ab: no driver named {', '.join(missing)} (available devices: "
                                             f"{', '.join(available)}; load another build with --driver)")
    return names


class PairedRunner(BenchmarkRunner):
    """A BenchmarkRunner whose config names `ab` = [baseline, candidate]: one paired case per model and mode."""

    def model_run(self, *args: Any) -> "_PairedModelRun":
        return _PairedModelRun(self, *args)


class _PairedModelRun(ModelRun):
    def run(self) -> None:
        base, cand = self.cfg.ab
        pending = [m for m in self.cfg.modes if not self.writer.is_done(self._key(cand, m))]
        self._skip_done(2 * (len(self.cfg.modes) - len(pending)))
        if not pending:
            return
        try:
            self._load()
        except CaseError as e:
            for mode in pending:
                for name in (base, cand):
                    self._finish(self._error(name, mode, str(e)), mode)
            return
        for mode in pending:
            self._run_pair(mode)
        self.imported = None

    def _error(self, driver: str, mode: str, message: str, rec: BenchmarkRecord | None = None) -> BenchmarkRecord:
        rec = rec or self._record(driver, mode, [driver])
        rec.status, rec.message = "error", message
        return rec

    def _finish(self, rec: BenchmarkRecord, mode: str) -> None:
        if not self.writer.is_done(self._key(rec.driver, mode)):
            self._write(rec, f"{self.name} | {rec.driver} | {mode}")

    def _devices(self, name: str) -> list:
        """The devices one side runs on: the driver alone, or partitioned with nnapi-reference."""
        from mlts.runtime import get_device

        device = stage("finding the device", lambda: get_device(name))
        flags = self.watchdog.run("asking for the supported operations",
                                  lambda _tick: self.imported.model.get_supported_operations_for_devices([device]),
                                  [device])
        if all(flags):
            return [device]
        if not self.cfg.partition or not any(flags) or name == REFERENCE_DEVICE_NAME:
            raise CaseError("asking for the supported operations", None,
                            f"{name} supports {sum(flags)} of {len(flags)} operations"
                            + ("; partitioning is off (--no-partition)" if not self.cfg.partition else ""))
        return [device, stage("finding the device", lambda: get_device(REFERENCE_DEVICE_NAME))]

    def _run_pair(self, mode: str) -> None:
        names = self.cfg.ab
        recs = [self._record(n, mode, [n]) for n in names]
        infers: list[Inference] = []
        sides: list[list] = []
        stuck = False
        try:
            sides = [self._devices(n) for n in names]
            for rec, devices in zip(recs, sides):
                rec.devices = [d.name for d in devices]
                if len(devices) > 1:
                    rec.extra["partitioned"] = {"driver": devices[0].name, "with": REFERENCE_DEVICE_NAME}
            everything = [d for devices in sides for d in devices]
            for rec, devices in zip(recs, sides):
                compilation, rec.compilation_ms = self.watchdog.run(
                    f"compiling for {rec.driver}", lambda tick, dv=devices: self._compile_timed(dv, tick), devices)
                infers.append(Inference(compilation, mode, self.cfg.measure_timing, self.cfg.timeout_s))
            m = self.watchdog.run(f"running {' and '.join(names)} in pairs ({mode})",
                                  lambda tick: self._pairs(infers, tick), everything,
                                  waiting_on=runs_waiting_on(self.cfg.rules))
            self._fill(recs, m)
            reference = self.reference_outputs() if self.inputs else None
            for rec, infer, devices in zip(recs, infers, sides):
                rec.accuracy = self.watchdog.run(
                    f"scoring accuracy of {rec.driver}", lambda tick, i=infer, dv=devices: self._accuracy(
                        i, dv, mode, reference, tick), devices, waiting_on=inference_waiting_on(len(self.inputs), "image"))
        except CaseError as e:
            for rec in recs:
                if rec.status != "error":
                    self._error(rec.driver, mode, str(e), rec)
            stuck = isinstance(e, StageTimeout) and e.abandoned
        if not stuck:  # never wait on a thread stuck in a driver
            for rec, infer, devices in zip(recs, infers, sides):
                self._close(infer, rec, devices)
        for rec in recs:
            self._finish(rec, mode)
        paired = recs[1].extra.get("paired")
        if paired:
            self.progress.log(f"{self.name} | {names[0]} -> {names[1]} | {mode}: {paired['verdict']}, "
                              f"{paired['summary']}")

    def _pairs(self, infers: list[Inference], tick: Tick) -> Measurement:
        """Warm-up and timed pairs; each timed pair returns (baseline seconds, candidate seconds)."""
        x, count = self.timing_input, [0]

        def pair() -> tuple:
            order = (0, 1) if count[0] % 2 == 0 else (1, 0)
            count[0] += 1
            took, executions = [0.0, 0.0], [None, None]
            for side in order:
                t0 = time.perf_counter()
                executions[side] = infers[side](x)
                took[side] = time.perf_counter() - t0
                tick()
            return took[0], took[1], executions[0], executions[1]

        return measure(pair, self.cfg.rules)

    def _fill(self, recs: list[BenchmarkRecord], m: Measurement) -> None:
        pairs = m.returns
        sides = ([p[0] for p in pairs], [p[1] for p in pairs])
        for k, rec in enumerate(recs):
            rec.first_inference_ms = None
            rec.latency = latency_stats(sides[k])
            rec.run_length = {**m.summary(), "pairs": len(pairs), "order": ORDER, "rules": self.cfg.rules.to_dict()}
            rec.driver_time = driver_times([p[2 + k] for p in pairs])
        rule = DecisionRule(run_noise_pct=0.0)
        d = decide_paired([1000.0 * s for s in sides[0]], [1000.0 * s for s in sides[1]], rule)
        recs[1].extra["paired"] = {
            "baseline_driver": recs[0].driver, "candidate_driver": recs[1].driver, "pairs": len(pairs),
            "order": ORDER, "ratio": d.ratio, "ratio_low": d.ratio_low, "ratio_high": d.ratio_high,
            "confidence": d.confidence, "p_value": d.p_value, "test": d.test,
            "min_detectable_pct": d.min_detectable_pct, "verdict": d.verdict, "reason": d.reason,
            "threshold_pct": rule.slowdown_pct, "summary": d.summary()}
        m.returns.clear()


def paired_results(records: Iterable[dict], ab: Sequence[str]) -> tuple[str, list[dict]]:
    """(markdown table, one verdict object per paired case) of a paired run's records, for its end. A
    candidate record without `paired` (the pair errored or did not run) is a FAIL: nothing was compared."""
    base, cand = ab
    rows = []
    for r in records:
        if r.get("driver") != cand:
            continue
        p = r.get("paired")
        if not isinstance(p, dict):
            p = {"verdict": FAIL, "baseline_driver": base, "candidate_driver": cand, "pairs": 0,
                 "reason": f"not compared: the case is {r.get('status')}" + (f" ({r['message']})" if r.get("message") else "")}
        rows.append((r, p))
    lines = ["| Verdict | Model | Baseline → candidate | Mode | Pairs | Ratio [95% CI] | p | Could detect | Why |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r, p in rows:
        ratio = "-" if p.get("ratio") is None else f"{p['ratio']:.3f} [{p['ratio_low']:.3f}, {p['ratio_high']:.3f}]"
        detect = "-" if p.get("min_detectable_pct") is None else f"≥ {fmt_pct(p['min_detectable_pct'])}"
        lines.append(f"| {p.get('verdict', '-')} | {r.get('model')} | {p.get('baseline_driver')} → "
                     f"{p.get('candidate_driver')} | {r.get('mode')} | {p.get('pairs')} | {ratio} | "
                     f"{p_text(p.get('p_value'))} | {detect} | {p.get('reason') or '-'} |")
    return "\n".join(lines) + "\n", [p for _, p in rows]


def paired_exit_code(paired: Sequence[dict]) -> int:
    """1 when a paired case FAILed or was not compared, or no case was; 0 otherwise (WARN never fails a run)."""
    return 1 if not paired or any(p.get("verdict") == FAIL for p in paired) else 0
