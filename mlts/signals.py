"""SIGTERM handled like Ctrl-C, so that a long command stopped by `timeout`, CI or a service manager keeps
what it finished and writes its report, exactly as it does on Ctrl-C.

    with interrupt_on_signals():
        try:
            run_everything()
        except KeyboardInterrupt as e:
            status = exit_status(e)      # 130 for SIGINT (Ctrl-C), 143 for SIGTERM
            ...write what finished...

Python only runs signal handlers in the main thread, so the KeyboardInterrupt arrives there, between two
bytecodes or in an interruptible wait (Event.wait, sleep, a blocking read): code that must not be cut
half way writes atomically (mlts.fileio). A second signal raises again, so a second Ctrl-C still stops
a cleanup that hangs. A signal this process ignores (SIG_IGN, e.g. under nohup) stays ignored.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

#: The conventional exit status of a process stopped by a signal it handled: 128 + the signal's number.
SIGNAL_EXIT_BASE = 128
DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """The KeyboardInterrupt a handled signal raises; `signum` says which one."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(signal_name(self.signum))


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_status(error: BaseException | None = None) -> int:
    """128 + the signal's number for an Interrupted (143 for SIGTERM); 130 (SIGINT) for a plain
    KeyboardInterrupt or None."""
    signum = getattr(error, "signum", None)
    return SIGNAL_EXIT_BASE + int(signum if signum is not None else signal.SIGINT)


def _raise(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


@contextmanager
def interrupt_on_signals(signals: Sequence[int] = DEFAULT_SIGNALS) -> Iterator[None]:
    """Within the block, each of `signals` raises Interrupted (a KeyboardInterrupt) in the main thread;
    the previous handlers come back afterwards. Outside the main thread (where Python cannot install
    handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}
    try:
        for sig in signals:
            old = signal.getsignal(sig)
            if old == signal.SIG_IGN:
                continue
            previous[sig] = old
            signal.signal(sig, _raise)
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
