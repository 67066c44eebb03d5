"""Shared pieces of the stress tests: an in-process StressContext, and a check that a test leaves no
process of its own behind (every process a test starts carries a token in its environment)."""
from __future__ import annotations

import os
import sys
import time
import uuid

import psutil
import pytest

from mlts.stress.context import StressContext
from mlts.stress.drivers import Target

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))  # tests/ (for tests/models helpers)

TOKEN_ENV = "MLTS_STRESS_TEST_TOKEN"


class QuietReporter:
    def __init__(self) -> None:
        self.beats = 0

    def beat(self, note=None) -> None:
        self.beats += 1

    def result(self, *args, **kwargs) -> None:
        pass


def make_context(driver: str, *, spec: str | None = None, hosting: str | None = "in-process", duration: float = 0.5,
                 params: dict | None = None, out_dir=None, specs=None, seed: int = 0) -> StressContext:
    """A StressContext run in this process (no watchdog), opened on `driver`."""
    target = Target(driver, spec, hosting or "in-process")
    if specs is None:
        specs = [spec] if spec else []
    job = {"test": "in-process", "target": target.to_job(), "specs": specs,
           "hosting": hosting, "duration_s": duration, "params": params or {}, "seed": seed,
           "out_dir": str(out_dir or "."), "work_dir": str(out_dir or ".")}
    ctx = StressContext(job, QuietReporter())
    ctx.open()
    return ctx


def tagged_processes(token: str) -> list[psutil.Process]:
    """Live processes (not zombies) whose environment carries `token`."""
    found = []
    for p in psutil.process_iter(["pid"]):
        if p.pid == os.getpid():
            continue
        try:
            if p.environ().get(TOKEN_ENV) == token and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


@pytest.fixture
def no_strays(monkeypatch):
    """Tags every process the test starts; after it, none of them may still be running."""
    token = uuid.uuid4().hex
    monkeypatch.setenv(TOKEN_ENV, token)
    yield token
    deadline = time.monotonic() + 3.0  # processes already killed may take a moment to be reaped
    left = tagged_processes(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = tagged_processes(token)
    described = [f"{p.pid} {' '.join(p.cmdline()[:4])}" for p in left]
    for p in left:
        p.kill()
    assert not left, f"stray processes left behind: {described}"
