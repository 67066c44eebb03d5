"""Resources held by this process and every process it started (driver services, worker processes):
resident memory and open file descriptors, summed over the tree. The benchmark samples the peak
memory of a run; the stress tests watch both for leaks."""
from __future__ import annotations

import math
import time
from typing import Callable

import psutil


class ProcessTree:
    """This process and its descendants. Listing the descendants scans /proc, so a frequent sampler
    refreshes the list only every `refresh_s` seconds (0: at every reading)."""

    def __init__(self, refresh_s: float = 0.0) -> None:
        self.refresh_s = refresh_s
        self._me = psutil.Process()
        self._children: list[psutil.Process] = []
        self._children_at = -math.inf

    def processes(self) -> list[psutil.Process]:
        now = time.monotonic()
        if now - self._children_at >= self.refresh_s:
            try:
                self._children = self._me.children(recursive=True)
            except psutil.Error:  # this process unreadable: its children are not known either
                self._children = []
            self._children_at = now
        return [self._me] + self._children

    def _sum(self, read: Callable[[psutil.Process], tuple[int, int]]) -> tuple[int, int]:
        """`read` summed over the tree; a process that exited meanwhile (or cannot be read) counts nothing."""
        a = b = 0
        for p in self.processes():
            try:
                with p.oneshot():
                    x, y = read(p)
            except psutil.Error:
                continue
            a, b = a + x, b + y
        return a, b

    def rss(self) -> int:
        """Resident memory in bytes."""
        return self._sum(lambda p: (p.memory_info().rss, 0))[0]

    def usage(self) -> tuple[int, int]:
        """(resident memory in bytes, open file descriptors)."""
        return self._sum(lambda p: (p.memory_info().rss, p.num_fds()))

