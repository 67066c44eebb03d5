"""A case's `conditions`: other processes' share of the CPU from injected cpu_times readings, and the
real readers on this machine."""
from __future__ import annotations

import subprocess
import sys
from collections import namedtuple

import pytest

from mlts.benchmark import conditions as C

#: psutil.cpu_times() on Linux.
CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait irq softirq steal guest guest_nice")


class Script:
    """A reader that returns the given values in turn."""

    def __init__(self, *values):
        self.values = list(values)

    def __call__(self):
        return self.values.pop(0)


def _readers(cpu_times, ours, clock, cpus=2, **kw):
    times = Script(*cpu_times)
    return C.Readers(clock=Script(*clock), system_busy_s=lambda: C.busy_seconds(times()),
                     own_tree_cpu_s=Script(*ours), cpu_count=lambda: cpus,
                     load_average=kw.get("load", Script([1.0, 2.0, 3.0], [1.5, 2.0, 3.0])),
                     cpu_freq_mhz=kw.get("freq", Script(1000.0, 2000.0)),
                     thread_counts=lambda: {"blas": 1, "openmp": None, "numba": 1})


def test_other_cpu_share_is_busy_time_minus_ours_over_elapsed_times_cpus():
    before = CpuTimes(user=100.0, nice=1.0, system=20.0, idle=500.0, iowait=5.0, irq=0.0, softirq=1.0, steal=0.0,
                      guest=3.0, guest_nice=0.0)
    # Over 2 s on 2 CPUs (4 CPU-seconds): user +2.0 of which guest +0.5 (already in user), system +0.6,
    # steal +0.2 (another VM on our CPU: taken by others), idle +1.0 and iowait +0.2 (not busy).
    after = before._replace(user=102.0, system=20.6, steal=0.2, guest=3.5, idle=501.0, iowait=5.2)
    window = C.CaseWindow(3, _readers([before, after], ours=[10.0, 10.4], clock=[50.0, 52.0]))
    got = window.finish()
    # busy delta = 2.0 + 0.6 + 0.2 = 2.8; others = 2.8 - 0.4 (ours) = 2.4 of 4.0 CPU-seconds
    assert got["other_cpu_share"] == pytest.approx(0.6)
    assert got == {"threads": {"blas": 1, "openmp": None, "numba": 1}, "requested_threads": 3,
                   "load_before": [1.0, 2.0, 3.0], "load_after": [1.5, 2.0, 3.0], "cpu_freq_mhz": 1500.0,
                   "other_cpu_share": got["other_cpu_share"], "window_s": 2.0}
    assert C.busy_note(got) == "machine busy: 60% of the CPU taken by other processes"


def test_an_idle_machine_and_our_own_load_leave_no_share_to_others():
    before = CpuTimes(100.0, 0.0, 20.0, 500.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    after = before._replace(user=101.5, system=20.5, idle=502.0)  # we kept one of 2 CPUs busy for 2 s
    got = C.CaseWindow(1, _readers([before, after], ours=[7.0, 9.0], clock=[0.0, 2.0])).finish()
    assert got["other_cpu_share"] == 0.0 and C.busy_note(got) is None


def test_share_is_clamped_and_unknown_when_it_cannot_be_measured():
    assert C.other_cpu_share(10.0, 0.0, 1.0, 2) == 1.0  # tick rounding past the end
    assert C.other_cpu_share(0.0, 0.05, 1.0, 2) == 0.0
    assert C.other_cpu_share(1.0, 0.0, C.MIN_SHARE_WINDOW_S / 2, 2) is None  # too short for 10 ms ticks
    assert C.other_cpu_share(1.0, 0.0, 1.0, None) is None
    unreadable = C.Readers(clock=Script(0.0, 5.0), system_busy_s=lambda: None, own_tree_cpu_s=lambda: 1.0,
                           cpu_count=lambda: 2, load_average=lambda: None, cpu_freq_mhz=lambda: None,
                           thread_counts=lambda: {"blas": None, "openmp": None, "numba": None})
    got = C.CaseWindow(1, unreadable).finish()
    assert got["other_cpu_share"] is None and got["load_before"] is None and got["cpu_freq_mhz"] is None


@pytest.mark.parametrize("share, note", [(0.5, None), (0.62, "machine busy: 62% of the CPU taken by other processes"),
                                         (None, None)])
def test_busy_note_above_half_the_cpu(share, note):
    assert C.busy_note({"other_cpu_share": share}) == note


def test_our_tree_counts_a_child_while_it_lives_and_after_it_is_reaped(tmp_path):
    """CPU time, not wall time: the child burns 0.3 s of its own CPU, then idles until killed."""
    before = C.own_tree_cpu_s()
    child = subprocess.Popen(
        [sys.executable, "-c", "import time, sys\n"
                               "t = time.process_time()\n"
                               "while time.process_time() - t < 0.3: pass\n"
                               "print('done', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"
        alive = C.own_tree_cpu_s() - before
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    reaped = C.own_tree_cpu_s() - before
    assert alive >= 0.3
    assert reaped == pytest.approx(alive, abs=0.05)  # moved into our reaped-children time: not lost, not doubled


def test_real_readers_give_plausible_values():
    load = C.load_average()
    assert load is None or (len(load) == 3 and all(x >= 0 for x in load))
    freq = C.cpu_freq_mhz()
    assert freq is None or freq > 0
    assert C.system_busy_s() > 0 and C.cpu_count() >= 1
