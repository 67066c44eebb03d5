"""The stress tests: what each runs, for how long (default and quick, before --duration-scale), and
how long the watchdog waits for it. Durations are sized for a 2-core machine."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..runtime import MltsError, ResultCode

STARTUP_S = 20.0  # a test process importing mlts, numpy, its driver (numba) on a loaded machine
CONFORMANCE = "conformance"


@dataclass(frozen=True)
class StressTest:
    """One test of the catalog; the suite turns it into a job for a test process."""

    name: str
    function: str                 # module:function run in the test process
    duration_s: float             # default duration (the test's main loop), before scaling
    quick_s: float | None         # duration in the quick set; None: not in the quick set
    description: str
    params: dict[str, Any] = field(default_factory=dict)
    quick_params: dict[str, Any] = field(default_factory=dict)
    disruptive: bool = False      # kills or starves things: the driver's survival is checked after it
    hosting: str | None = None    # force the driver's hosting ("service" / "in-process")
    setup_s: float = 20.0         # beyond the duration: model building, compilation, checks
    group: str = "stress"         # "stress" or "conformance" (per-driver checks, not in the default sets)

    @property
    def per_driver(self) -> bool:
        """Conformance tests check one driver; the all-devices target has none."""
        return self.group == CONFORMANCE

    def duration(self, quick: bool, scale: float) -> float:
        base = self.quick_s if quick and self.quick_s is not None else self.duration_s
        return max(0.0, base * scale)

    def parameters(self, quick: bool) -> dict[str, Any]:
        return {**self.params, **(self.quick_params if quick else {})}

    def deadline(self, quick: bool, scale: float) -> float:
        """When the watchdog calls it a HANG: start-up, set-up, and twice the duration."""
        return STARTUP_S + self.setup_s + 2.0 * self.duration(quick, scale)


TESTS: list[StressTest] = [
    StressTest("parallel_inference", "mlts.stress.inference:parallel_inference", 10.0, 1.0,
               "every model on 4 threads at once, the driver in its own process (a driver service)",
               params={"threads": 4}, quick_params={"threads": 2}, hosting="service"),
    StressTest("parallel_inference_inprocess", "mlts.stress.inference:parallel_inference", 10.0, None,
               "every model on 4 threads at once, the driver in the test process", params={"threads": 4},
               hosting="in-process"),
    StressTest("interleaved_models", "mlts.stress.inference:interleaved_models", 5.0, 1.0,
               "prepare m1, m2; run m1, m2, m1, m2; free; repeat"),
    StressTest("model_loading", "mlts.stress.load_tests:model_loading", 10.0, 1.0,
               "load + compile + one inference, again and again"),
    StressTest("compile_many", "mlts.stress.load_tests:compile_many", 5.0, None,
               "32 compilations of one model alive at once, each run and checked", params={"count": 32}),
    StressTest("mmap_constants", "mlts.stress.load_tests:mmap_constants", 5.0, None,
               "model constants memory-mapped from a weights file; no descriptor leaks"),
    StressTest("client_termination", "mlts.stress.termination:client_termination", 0.0, 0.0,
               "client processes killed at a random moment of compilation/execution; the driver keeps serving",
               params={"kills": 4}, disruptive=True, setup_s=60.0,
               quick_params={"kills": 2, "models": ["convnet_f32", "convnet_u8", "conv_add_f32"]}),
    StressTest("multi_process", "mlts.stress.termination:multi_process", 10.0, None,
               "3 client processes run inference and model loading, one is killed at random; the others finish",
               params={"processes": 3, "kills": 1}, disruptive=True, setup_s=60.0),
    StressTest("performance_degradation", "mlts.stress.performance:performance_degradation", 8.0, 1.5,
               "latency alone vs while another thread compiles in a loop (and vs nnapi-reference)",
               params={"max_slowdown": 0.5, "compile_threads": 1, "compile_duty": 0.5, "attempts": 3,
                       "models": ["convnet_f32_large"]}),
    StressTest("sustained_inference", "mlts.stress.resources:sustained_inference", 30.0, 1.5,
               "sustained inference paired with nnapi-reference; fails on RSS growing >= 64 KiB per execution, "
               "any steady descriptor growth, or latency drifting >= 20% over the test (trends with 95% "
               "confidence; hard bounds +64 MiB, +16 descriptors)",
               params={"rss_growth_mb": 64, "fd_growth": 16, "warmup_executions": 20, "min_executions": 100,
                       "leak_kib_per_execution": 64, "max_latency_drift": 0.2},
               quick_params={"warmup_executions": 10, "min_executions": 40, "check_every": 2}),
    StressTest("random_graphs", "mlts.stress.random_graphs:random_graphs", 20.0, 2.5,
               "random valid graphs of the driver's operations, compared with nnapi-reference (CTS tolerances)"),
    StressTest("corner_cases", "mlts.stress.corner_cases:corner_cases", 0.0, 0.0,
               "NaN/inf inputs, zero-sized and huge dimensions, too-small outputs, omitted optional operands",
               params={"address_space_gb": 4,  # drivers may refuse impossible work, and the CPU then tries it
                       "tolerated_fallbacks": ["BAD_DATA", "OP_FAILED", "OUT_OF_MEMORY", "UNMAPPABLE",
                                               "RESOURCE_EXHAUSTED_TRANSIENT", "RESOURCE_EXHAUSTED_PERSISTENT"]},
               disruptive=True),
]


def _conformance(feature: str, description: str, setup_s: float = 40.0) -> StressTest:
    return StressTest(f"conformance_{feature}", f"mlts.stress.conformance:{feature}", 0.0, None, description,
                      group=CONFORMANCE, setup_s=setup_s)


CONFORMANCE_TESTS: list[StressTest] = [
    _conformance("validation", "invalid priorities, preferences, deadlines, requests, models and memory roles "
                               "are refused with BAD_DATA (by the driver and the runtime)"),
    _conformance("deadlines", "passed deadlines refused with MISSED_DEADLINE_*, generous ones met, never a late "
                              "NO_ERROR"),
    _conformance("control_flow", "IF both branches, a WHILE counting loop, the loop timeout (for drivers that "
                                 "claim IF/WHILE)"),
    _conformance("memory_domains", "driver-allocated buffers: copies, tokens in their roles only, freed/unknown/"
                                   "uninitialized refused, concurrent use; the shared-memory fallback"),
    _conformance("caching", "prepare from cache; corrupt, truncated and foreign caches never used as they are "
                            "(for drivers that cache)"),
    _conformance("execution_paths", "sync, async, burst and fenced executions agree; the driver waits for its "
                                    "fences; timings consistent"),
]

LIVENESS = StressTest("liveness", "mlts.stress.liveness:liveness", 0.0, 0.0,
                      "after a test that crashed, hung or disrupted: a supported model still runs correctly")
REPLAY = StressTest("replay", "mlts.stress.random_graphs:replay", 0.0, 0.0, "a saved random graph, run again")


def by_name() -> dict[str, StressTest]:
    """Tests by name, for --tests and for callers that pick one."""
    return {t.name: t for t in TESTS + CONFORMANCE_TESTS}


#: names --tests accepts for sets of tests
GROUPS = {"quick": lambda: [t for t in TESTS if t.quick_s is not None], "default": lambda: list(TESTS),
          CONFORMANCE: lambda: list(CONFORMANCE_TESTS)}


def select_tests(names: Sequence[str] | None, quick: bool) -> list[StressTest]:
    """`--tests` (names, comma lists, or the group names "quick", "default" and "conformance") in
    catalog order; without it, the quick or the default stress set."""
    if not names:
        return GROUPS["quick" if quick else "default"]()
    known = by_name()
    wanted: list[str] = []
    for n in (n.strip() for item in names for n in item.split(",")):
        if n in GROUPS:
            wanted += [t.name for t in GROUPS[n]()]
        elif n:
            wanted.append(n)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise MltsError(ResultCode.BAD_DATA, f"--tests: unknown {', '.join(unknown)} (known: {', '.join(known)}, "
                                             f"or the groups {', '.join(GROUPS)})")
    return [t for t in TESTS + CONFORMANCE_TESTS if t.name in wanted]


__all__ = ["CONFORMANCE", "CONFORMANCE_TESTS", "GROUPS", "LIVENESS", "REPLAY", "STARTUP_S", "StressTest", "TESTS", "by_name",
           "select_tests"]
