"""Shared pieces of the stress tests: a check that a test leaves no process of its own behind (every
process a test starts carries a token in its environment). The in-process StressContext: stress_context.py."""
from __future__ import annotations

import os
import sys
import time
import uuid

import psutil
import pytest


sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))  # tests/ (for tests/models helpers)

TOKEN_ENV = "MLTS_STRESS_TEST_TOKEN"


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
