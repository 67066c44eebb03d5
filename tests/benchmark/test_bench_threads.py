"""`mlts benchmark --threads N`: thread pools pinned (default 1) in mlts, its stage threads and the driver
services it starts; what they used is recorded in each record's `conditions` and in environment.json."""
from __future__ import annotations

import io
import json
import os
import threading

import psutil
import pytest
from threadpoolctl import threadpool_info

from mlts.benchmark import conditions as C
from mlts.benchmark import runner as R
from mlts.benchmark.inference import Inference
from mlts.benchmark.records import read_results
from mlts.benchmark.run_config import BenchmarkConfig
from mlts import childproc
from mlts.benchmark.threads import OWN_THREAD_ENV, THREAD_ENV, PinnedWatchdog, ThreadPinning, parse_threads
from mlts.runtime import MltsError, get_device

from test_bench_runner import REF, TINY, TINY_RULES, register, tiny_zoo  # noqa: F401  (fixtures)


def _blas() -> list[int]:
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def _openmp() -> list[int]:
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp"]


def _numba() -> int:
    import numba

    return numba.get_num_threads()


def _main(argv):
    from mlts.cli import main

    return main(argv)


class Watching(io.StringIO):
    """A progress stream that also notes the BLAS threads in force at each line (during the run)."""

    def __init__(self):
        super().__init__()
        self.blas: list[list[int]] = []

    def write(self, text):
        self.blas += [_blas() for _ in range(text.count("\n"))]  # one entry per finished line
        return super().write(text)


@pytest.mark.parametrize("bad", [0, -1, "0", "x", "1.5", "", True, 2.0])
def test_a_thread_count_must_be_an_integer_of_at_least_one(bad):
    with pytest.raises(MltsError, match=r"--threads must be an integer >= 1"):
        parse_threads(bad)
    with pytest.raises(MltsError, match=r"threads must be an integer >= 1"):
        BenchmarkConfig(models=[TINY], drivers=[REF], threads=bad)


def test_good_thread_counts():
    assert parse_threads("3") == 3 and parse_threads(" 2 ") == 2 and parse_threads(1) == 1


@pytest.mark.parametrize("bad", ["0", "x"])
def test_cli_refuses_a_bad_thread_count_with_one_line(bad, tmp_path, capsys):
    assert _main(["benchmark", "--threads", bad, "--quick", "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mlts benchmark: error: ")
    assert f"--threads must be an integer >= 1 (threads per pool), got {bad!r}" in err
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_pinning_applies_to_new_threads_and_is_undone():
    blas_before, env_before = _blas(), {k: os.environ.get(k) for k in THREAD_ENV}
    seen = {}
    with ThreadPinning(1) as pinning:
        assert _blas() and set(_blas()) == {1}
        assert {k: os.environ[k] for k in OWN_THREAD_ENV} == dict.fromkeys(OWN_THREAD_ENV, "1")
        assert childproc.child_env()["NUMBA_NUM_THREADS"] == "1"  # children only: numba rereads it here
        assert os.environ.get("NUMBA_NUM_THREADS") == env_before["NUMBA_NUM_THREADS"]

        def stage():
            pinning.apply_to_current_thread()  # what every benchmark stage thread does first
            seen.update(numba=_numba(), openmp=_openmp())

        t = threading.Thread(target=stage)
        t.start()
        t.join()
    assert seen["numba"] == 1 and set(seen["openmp"]) <= {1}
    assert _blas() == blas_before and {k: os.environ.get(k) for k in THREAD_ENV} == env_before


@pytest.mark.parametrize("timeout_s", [None, 30.0])  # the calling thread, or a worker thread per stage
def test_every_stage_applies_the_per_thread_limits_in_its_own_thread(timeout_s):
    class Recording:
        def __init__(self):
            self.threads = []

        def apply_to_current_thread(self):
            self.threads.append(threading.get_ident())

    pinning = Recording()
    ran_in = PinnedWatchdog(timeout_s, pinning).run("a stage", lambda tick: threading.get_ident())
    assert pinning.threads == [ran_in]
    assert (ran_in == threading.get_ident()) == (timeout_s is None)


def test_a_run_pins_one_thread_by_default_and_records_conditions_and_samples(tiny_zoo, tmp_path, monkeypatch):
    blas_before = _blas()
    in_stage = []
    original = Inference.__call__

    def spying(self, x):  # runs in the benchmark's stage threads
        in_stage.append((tuple(_blas()), tuple(_openmp()), _numba()))
        return original(self, x)

    monkeypatch.setattr(Inference, "__call__", spying)
    stream = Watching()
    cfg = BenchmarkConfig(models=[TINY], drivers=[REF], images=2, rules=TINY_RULES, preset="test")
    assert cfg.threads == 1
    R.run_benchmark_config(cfg, tmp_path / "run", stream=stream)
    assert in_stage and all(set(b) == {1} and set(o) <= {1} and n == 1 for b, o, n in in_stage)
    case_lines = [b for b, line in zip(stream.blas, stream.getvalue().splitlines(keepends=True)) if "[1/1]" in line]
    assert case_lines == [[1] * len(blas_before)]  # still pinned when the case was reported
    assert _blas() == blas_before  # given back after the run

    rec, = read_results(tmp_path / "run").benchmark_records()
    cond = rec["conditions"]
    assert cond["threads"]["blas"] == 1 and cond["threads"]["numba"] == 1 and cond["threads"]["openmp"] in (1, None)
    assert cond["requested_threads"] == 1
    for load in (cond["load_before"], cond["load_after"]):
        assert load is None or (len(load) == 3 and all(x >= 0 for x in load))
    assert cond["other_cpu_share"] is None or 0.0 <= cond["other_cpu_share"] <= 1.0
    assert cond["cpu_freq_mhz"] is None or cond["cpu_freq_mhz"] > 0
    lat = rec["latency"]
    assert len(lat["samples_ms"]) == lat["count"] == rec["run_length"]["timed_runs"] and lat["samples_reservoir"] is False
    assert min(lat["samples_ms"]) == pytest.approx(lat["min_ms"], abs=1e-4)
    assert max(lat["samples_ms"]) == pytest.approx(lat["max_ms"], abs=1e-4)
    assert sum(lat["samples_ms"]) == pytest.approx(lat["total_ms"], abs=1e-4 * lat["count"])


def test_a_busy_machine_is_noted_on_the_progress_line(tiny_zoo, tmp_path, monkeypatch):
    """Fake readers: each case window sees 1 s pass on 2 CPUs, 1.44 CPU-s busy of which 0.2 ours."""
    def counter(step):
        box = [0.0]

        def read():
            box[0] += step
            return box[0]
        return read

    monkeypatch.setattr(C, "DEFAULT_READERS", C.Readers(clock=counter(1.0), system_busy_s=counter(1.44),
                                                        own_tree_cpu_s=counter(0.2), cpu_count=lambda: 2))
    stream = io.StringIO()
    cfg = BenchmarkConfig(models=[TINY], drivers=[REF], images=0, rules=TINY_RULES, preset="test",
                          compile_with_cache=False)
    R.run_benchmark_config(cfg, tmp_path / "run", stream=stream)
    line, = [x for x in stream.getvalue().splitlines() if "[1/1]" in x]
    assert "ok, p50" in line and "; machine busy: 62% of the CPU taken by other processes" in line
    rec, = read_results(tmp_path / "run").benchmark_records()
    assert rec["conditions"]["other_cpu_share"] == pytest.approx(0.62)


def test_cli_threads_n_pins_records_and_reaches_driver_services(tiny_zoo, register, tmp_path, capsys):
    run = tmp_path / "run"
    blas_before = _blas()
    # The faulty driver is hosted in a service, started when --driver registers it (after the pinning).
    assert _main(["benchmark", "--threads", "2", "--quick", "--models", TINY, "--drivers", REF, "--images", "1",
                  "--driver", "faulty:fail@prepare", "--no-report", "--out", str(run)]) == 0
    capsys.readouterr()
    assert _blas() == blas_before
    env = json.loads((run / "environment.json").read_text())
    assert env["requested_threads"] == 2
    assert [p["num_threads"] for p in env["threadpools"] if p["user_api"] == "blas"] == [2] * len(blas_before)
    assert env["threads"]["blas"] == 2 and env["env"]["OPENBLAS_NUM_THREADS"] == "2"
    assert env["numpy"]["threadpools"] and len(env["load_average_at_start"]) == 3
    rec, = read_results(run).benchmark_records()
    assert rec["conditions"]["threads"]["blas"] == 2 and rec["conditions"]["requested_threads"] == 2
    import numba

    assert rec["conditions"]["threads"]["numba"] == min(2, numba.config.NUMBA_NUM_THREADS)
    assert json.loads((run / "run.json").read_text())["config"]["threads"] == 2
    service = psutil.Process(get_device("faulty-fail-prepare").driver.pid).environ()
    assert {k: service.get(k) for k in THREAD_ENV} == dict.fromkeys(THREAD_ENV, "2")
    # A resumed run keeps the run's own thread count.
    assert _main(["benchmark", "--resume", str(run), "--threads", "1"]) == 1
    assert "leave out --threads" in capsys.readouterr().err
