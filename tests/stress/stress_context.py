"""A StressContext run in this process, for the stress tests (a module of its own: `from conftest import`
picks whichever tests/*/conftest.py was imported first when several test folders run together)."""
from __future__ import annotations

from mlts.stress.context import StressContext
from mlts.stress.drivers import Target


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
