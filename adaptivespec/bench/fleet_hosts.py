"""The hosts of `bench fleet` on one virtual clock, with the database's latency modelled.

Everything happens in virtual seconds, so that a run does not depend on how fast the machine
that runs it is: decode steps advance their host's clock by their simulated time, and the
database's own clock (`VirtualTime`, which the repository reads for its timestamps and for
which hosts are live) is the time of the event it serves. Events run in time order: the next
step of the host whose clock is behind, or a database call coming due.

A database call takes `latency` seconds each way round, as a daemon's does: `FleetSync` awaits
its flush, then its refresh, off the step loop, so the host keeps stepping while they are in
flight, and syncs again only once both are back. A flush takes the tally's changes when it is
sent and writes them when it arrives; a refresh reads the pooled view when it arrives and
folds it then. A daemon's start awaits its first flush and refresh before its first step.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from adaptivespec.controller.controller import Controller
from adaptivespec.controller.fleet import FleetTotals
from adaptivespec.controller.sync_cadence import SyncCadence
from adaptivespec.engine.telemetry import StepTelemetry
from adaptivespec.sim.loop import PhaseResult
from adaptivespec.store.fleet import FleetKey, FleetRepository

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # virtual second 0, as the database sees it


@dataclass(slots=True)
class VirtualTime:
    seconds: float = 0.0

    def now(self) -> datetime:
        return EPOCH + timedelta(seconds=self.seconds)


@dataclass(slots=True)
class Host:
    index: int
    controller: Controller
    order: list[int]
    key: FleetKey
    results: list[PhaseResult] = field(default_factory=list)
    clock: float = 0.0  # virtual seconds of decode steps
    next_tick: float = 0.0
    last_flush: float | None = None
    last_refresh: float | None = None
    syncing_until: float = 0.0  # its flush and refresh in flight come back by then


@dataclass(slots=True)
class Database:
    """What the hosts' flushes and refreshes cost in wall time (the real calls' own cost, not
    the modelled latency), and how many rows they wrote."""

    flush_ms: list[float] = field(default_factory=list)
    refresh_ms: list[float] = field(default_factory=list)
    rows: int = 0


def clocked(host: Host) -> Callable[[StepTelemetry], None]:
    def on_step(record: StepTelemetry) -> None:
        host.clock += record.step_seconds
        host.controller.ingest(record)

    return on_step


Stepper = Iterator[Any]
_STEP, _FLUSH, _REFRESH = 0, 1, 2


class FleetRun:
    """Steps every host to the end of its schedule, syncing through `repository`."""

    def __init__(
        self,
        repository: FleetRepository,
        clock: VirtualTime,
        cadence: SyncCadence,
        latency: float,
        phase_done: Callable[[Host], bool] | None,
    ) -> None:
        """`phase_done`: with it, a host that finished a load level waits until every host has,
        and the next level starts on all at once (`--stagger none`)."""
        self.repository, self.clock, self.cadence, self.latency = repository, clock, cadence, latency
        self.phase_done = phase_done
        self.database = Database()
        self._queue: list[tuple[float, int, int, int, FleetTotals | None]] = []
        self._order = itertools.count()  # ties run in the order they were scheduled
        self._steps_queued = 0
        self._started: dict[int, datetime] = {}

    def run(
        self, hosts: list[Host], steppers: dict[int, Stepper], progress: Callable[[int], object]
    ) -> float:
        self._started = {h.index: EPOCH + timedelta(seconds=h.clock) for h in hosts}
        for host in hosts:  # a daemon's start: its first flush, then its first refresh
            self._send(host, host.clock, flush=True, refresh=True)
            host.clock = host.syncing_until
            self._push(host.clock, _STEP, host.index)
        waiting: list[Host] = []
        while self._queue:
            at, _, kind, index, changes = heapq.heappop(self._queue)
            host = hosts[index]
            if kind != _STEP:
                self._arrive(host, at, kind, changes)
            else:
                self._steps_queued -= 1
                if next(steppers[index], StopIteration) is not StopIteration:
                    progress(1)
                    self._sync(host)
                    if self.phase_done is not None and self.phase_done(host):
                        waiting.append(host)
                    else:
                        self._push(host.clock, _STEP, index)
            if waiting and not self._steps_queued:  # the next load level reaches every host at once
                start = max(h.clock for h in waiting)
                for waiter in waiting:
                    waiter.clock = start
                    self._push(start, _STEP, waiter.index)
                waiting = []
        for host in hosts:  # the last totals, as a daemon's shutdown flush writes them
            self._write(host, max(host.clock, host.syncing_until), self._changes(host))
        return max(h.clock for h in hosts)

    def _sync(self, host: Host) -> None:
        """What `FleetSync.sync` does every tick, on the host's clock, when nothing is in flight."""
        if host.clock < host.next_tick or host.clock < host.syncing_until:
            return
        host.next_tick = host.clock + self.cadence.tick_seconds
        learning = host.controller.stepping_young_cells(self.cadence.young_steps)
        due = self.cadence.due(learning, host.clock, host.last_flush, host.last_refresh)
        self._send(host, host.clock, due.flush, due.refresh)

    def _send(self, host: Host, at: float, flush: bool, refresh: bool) -> None:
        arrives = at
        if flush:
            arrives += self.latency
            self._push(arrives, _FLUSH, host.index, self._changes(host))
        if refresh:
            arrives += self.latency
            self._push(arrives, _REFRESH, host.index)
        host.syncing_until = arrives

    def _arrive(self, host: Host, at: float, kind: int, changes: FleetTotals | None) -> None:
        if kind == _FLUSH:
            self._write(host, at, changes or FleetTotals())
            host.last_flush = at
            return
        self.clock.seconds = at
        began = time.perf_counter()
        host.controller.fold(self.repository.pooled(host.key, self.cadence.live_seconds))
        self.database.refresh_ms.append((time.perf_counter() - began) * 1000)
        host.last_refresh = at

    def _write(self, host: Host, at: float, changes: FleetTotals) -> None:
        tally = host.controller.tally
        if tally is None:
            return
        self.clock.seconds = at
        began = time.perf_counter()
        started = self._started[host.index]
        self.database.rows += self.repository.flush(host.key, changes, tally.all_steps, started)
        self.database.flush_ms.append((time.perf_counter() - began) * 1000)

    @staticmethod
    def _changes(host: Host) -> FleetTotals:
        tally = host.controller.tally
        return tally.take_changes() if tally is not None else FleetTotals()

    def _push(self, at: float, kind: int, index: int, changes: FleetTotals | None = None) -> None:
        self._steps_queued += kind == _STEP
        heapq.heappush(self._queue, (at, next(self._order), kind, index, changes))
