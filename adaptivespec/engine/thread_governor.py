"""Torch threads on a shared CPU: as many as the other processes leave free.

An intra-op parallel region ends when its slowest thread does. Where another process keeps one
of two cores busy, the scheduler parks one of ours for a time slice in most regions, and every
op of a two-thread step waits for it; the same step on one thread runs on the free core at its
quiet speed (docs/results.md). So, with the thread count left to the engine (`threads` 0), it
reads how busy the CPUs it may use were, and how much of that was its own work, and between
steps runs torch on the CPUs the others left: the usable CPUs less the cores other processes
kept busy, rounded, at least one. A new count takes two readings in a row that agree, so a
burst in one reading does not resize the team.

Linux only (`/proc/stat`); elsewhere torch keeps every usable CPU. A CPU quota (a container's
`--cpus`) is invisible here; pin `threads` to the quota there.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)

PROC_STAT = Path("/proc/stat")
READING_SECONDS = 0.5  # long enough for the kernel's 10 ms ticks, short beside a load's lifetime
# /proc/stat columns after the name: user nice system idle iowait irq softirq steal; busy is all
# but idle and iowait. Steal counts: a hypervisor's other guests took the CPU.
_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class CpuTimes:
    wall: float  # seconds, monotonic
    busy: float  # CPU-seconds the usable CPUs spent on any process's work since boot
    ours: float  # CPU-seconds this process spent (all its threads) since it started


def read_cpu_times(cpus: Collection[int], stat: Path = PROC_STAT) -> CpuTimes | None:
    """The busy time of the given CPUs and this process's own; None where /proc/stat is missing."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    wanted = {f"cpu{cpu}" for cpu in cpus}
    ticks = 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if name in wanted:
            columns = rest.split()
            ticks += sum(int(columns[i]) for i in _BUSY_COLUMNS if i < len(columns))
    own = os.times()
    return CpuTimes(time.monotonic(), ticks / os.sysconf("SC_CLK_TCK"), own.user + own.system)


class ThreadGovernor:
    """Between steps, on the thread that runs them: `settle()` resizes torch's team when due."""

    def __init__(
        self,
        cpus: int,
        read: Callable[[], CpuTimes | None],
        *,
        every: float = READING_SECONDS,
        apply: Callable[[int], None] = torch.set_num_threads,
    ) -> None:
        if cpus < 1:
            raise ValueError(f"cpus must be >= 1, got {cpus}")
        self.cpus = cpus
        self.every = every
        self._read = read
        self._apply = apply
        self._threads = cpus  # torch's team at the start: every usable CPU
        self._last = read()
        self._pending: int | None = None
        self.others = 0.0  # cores other processes kept busy over the last reading

    @property
    def threads(self) -> int:
        return self._threads

    def settle(self) -> int:
        """Takes a reading if one is due, resizes the team if two agree; returns the thread count."""
        if self._last is None or time.monotonic() - self._last.wall < self.every:
            return self._threads
        now = self._read()
        if now is None or now.wall <= self._last.wall:
            return self._threads
        elapsed = now.wall - self._last.wall
        self.others = max(0.0, (now.busy - self._last.busy) - (now.ours - self._last.ours)) / elapsed
        self._last = now
        wanted = max(1, math.floor(self.cpus - self.others + 0.5))
        if wanted == self._threads:
            self._pending = None
        elif wanted != self._pending:
            self._pending = wanted
        else:
            log.info(
                "torch threads %d -> %d: other processes kept %.1f of %d usable CPUs busy",
                self._threads,
                wanted,
                self.others,
                self.cpus,
            )
            self._apply(wanted)
            self._threads, self._pending = wanted, None
        return self._threads
