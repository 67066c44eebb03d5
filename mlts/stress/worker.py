"""A client process for the termination tests: `python -m mlts.stress.worker JOB_FILE`.

It loads the job's driver the way a test process does, then compiles and runs the job's model in
a loop (mode "client": until killed; mode "mixed": inference and model loading until the duration
is over). It talks on stdout, one line each: `ready`, then `ok N` or `fail REASON`.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..childproc import die_with_parent

MAX_CLIENT_S = 120.0  # a client nobody kills stops by itself


def _say(line: str) -> None:
    sys.stdout.write(line.replace("\n", " ") + "\n")
    sys.stdout.flush()


class _Quiet:
    """The StressContext reporter of a worker: nobody watches its heartbeat."""

    def beat(self, note: str | None = None) -> None:
        pass

    def result(self, *args: Any, **kwargs: Any) -> None:
        pass


def main(argv: list[str]) -> int:
    """Run the client loop of a job; always ends with os._exit (a driver thread must not keep it alive)."""
    if len(argv) != 1:
        print("usage: python -m mlts.stress.worker JOB_FILE  (started by the mlts stress termination tests)",
              file=sys.stderr)
        return 2
    die_with_parent()  # a killed test process (or a SIGKILLed mlts stress) takes its clients with it
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    from .context import StressContext, StressFailure, describe_error
    from .models import load_model

    ctx = StressContext(job, _Quiet())
    try:
        ctx.open()
        m = load_model(job["model"])
        compilation = ctx.compile(m.model)
        ctx.check(m, ctx.run(compilation, m.inputs))
        _say("ready")
        mode = job.get("mode", "client")
        end = time.monotonic() + (MAX_CLIENT_S if mode == "client" else ctx.duration)
        runs = 0
        while time.monotonic() < end:
            if mode == "client" or runs % 4 == 3:  # clients recompile each time: killed mid-compile or mid-run
                m = load_model(job["model"]) if mode == "mixed" else m
                compilation = ctx.compile(m.model)
            ctx.check(m, ctx.run(compilation, m.inputs))
            runs += 1
        _say(f"ok {runs}")
        code = 0
    except StressFailure as e:
        _say(f"fail {e.reason}")
        code = 1
    except BaseException as e:
        _say(f"fail {describe_error(e)}")
        code = 1
    finally:
        ctx.close()
    sys.stderr.flush()
    os._exit(code)


class Worker:
    """The test side of one worker process: start it, read its lines, kill it."""

    def __init__(self, ctx: Any, model: str, mode: str, index: int) -> None:
        import subprocess

        from ..childproc import module_command
        from .watchdog import child_env

        job = dict(ctx.job)
        job.update(model=model, mode=mode, seed=ctx.seed * 1000 + index)
        path = ctx.work_dir / f"worker-{os.getpid()}-{index}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(job), encoding="utf-8")
        self.index = index
        self.lines: list[str] = []
        self.event = threading.Event()
        self.proc = subprocess.Popen(module_command("mlts.stress.worker", str(path)), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, env=child_env(), text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            self.event.set()
        self.event.set()

    def wait_for(self, prefix: str | tuple[str, ...], timeout: float, beat) -> str | None:
        """The first line starting with `prefix`, or None if the worker ended or the time ran out."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for line in self.lines:
                if line.startswith(prefix):
                    return line
            if self.proc.poll() is not None and not self._reader.is_alive():
                return None
            self.event.wait(0.1)
            self.event.clear()
            beat()
        return None

    def last_line(self) -> str:
        return self.lines[-1] if self.lines else "(nothing)"

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
