"""The daemon's side of fleet pooling: flush this host's totals, refresh and fold everyone else's.

The database may go away at any time. Serving never waits on it: the controller keeps the last
folded view and keeps counting into its tally; failed flushes give their rows back and are
retried with exponential backoff (what is written is absolute, so a retry of a flush that did
commit counts nothing twice); when the database answers again, one flush catches up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from adaptivespec.controller.controller import Controller
from adaptivespec.controller.fleet import Tally
from adaptivespec.controller.overrides import Override
from adaptivespec.controller.probe_share import ALONE, ProbeShare
from adaptivespec.controller.sync_cadence import SyncCadence
from adaptivespec.server.thread_work import run_to_the_end
from adaptivespec.store.fleet import DuplicateHostError, FleetKey, FleetRepository

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 60.0
DatabaseState = Literal["ok", "unreachable", "duplicate"]
OperatorState = tuple[bool, tuple[Override, ...]]  # frozen, overrides


@dataclass(slots=True)
class FleetStatus:
    """What /health and /metrics report about the fleet database."""

    state: DatabaseState = "ok"
    hosts: int = 0  # other hosts of this (model, hardware) with evidence
    share: ProbeShare = ALONE  # the live hosts, and this host's rank among them: they split new cells' probes
    pooled_steps: int = 0  # their steps, summed
    last_flush_at: float | None = None  # wall clock
    last_refresh_at: float | None = None
    refresh_seconds: float = 0.0  # how long the last refresh took (query and fold)
    failures: int = 0  # consecutive
    learning: bool = False  # a cell served lately has little fleet evidence: syncing fast
    error: str | None = None
    flushes: int = 0
    rows_written: int = 0
    since: float = field(default_factory=time.time)  # when `state` last changed

    def as_json(self) -> dict[str, object]:
        now = time.time()

        def age(at: float | None) -> float | None:
            return None if at is None else round(now - at, 1)

        return {
            "state": self.state,
            "since_s": round(now - self.since, 1),
            "hosts": self.hosts,
            "live_hosts": self.share.hosts,
            "probe_rank": self.share.rank,
            "pooled_steps": self.pooled_steps,
            "last_flush_age_s": age(self.last_flush_at),
            "last_refresh_age_s": age(self.last_refresh_at),
            "consecutive_failures": self.failures,
            "sync": "learning" if self.learning else "steady",
            "error": self.error,
        }


class FleetSync:
    def __init__(
        self,
        controller: Controller,
        repository: FleetRepository,
        host_id: str,
        cadence: SyncCadence,
        operator_state: Callable[[], OperatorState | None] | None = None,
    ) -> None:
        """`operator_state`: reads the freeze and overrides operators set on any host; each
        refresh applies what another host changed since the last one (fleet-scoped controls)."""
        self.controller = controller
        self.operator_state = operator_state
        self._seen: OperatorState = (controller.frozen, controller.overrides)
        self.repository = repository
        self.key = FleetKey(host_id, controller.model_key, controller.hardware_key)
        self.cadence = cadence
        self.status = FleetStatus()
        self.started_at = datetime.now(UTC)

    async def start(self) -> None:
        """Reads what this host id flushed before, says it is live, then folds in the fleet's
        view before the first step, so a new host starts from what the others learned, and
        hosts that start together split the probes of the cells they meet together."""
        self.controller.pool(Tally(await asyncio.to_thread(self.repository.own, self.key)))
        await self.flush()
        await self.refresh()

    async def run(self) -> None:
        """Flushes and refreshes whenever the cadence says they are due, until cancelled."""
        while True:
            await asyncio.sleep(self._delay())
            try:
                await self.sync()
                self._succeeded()
            except DuplicateHostError as exc:  # another live daemon took this id: pool no more
                log.error("%s; this daemon goes on serving alone on what it pooled so far", exc)
                self.status.state, self.status.since, self.status.error = "duplicate", time.time(), str(exc)
                return
            except Exception as exc:  # the database is away: serve on, retry later
                self._failed(exc)

    async def sync(self) -> None:
        """A flush, a refresh, both or neither: fast while a cell served lately is young."""
        status = self.status
        learning = self.controller.stepping_young_cells(self.cadence.young_steps)
        due = self.cadence.due(learning, time.time(), status.last_flush_at, status.last_refresh_at)
        status.learning = due.learning
        if due.flush:
            await self.flush()
        if due.refresh:
            await self.refresh()

    async def flush(self) -> None:
        tally = self.controller.tally
        if tally is None:
            return
        changes = tally.take_changes()
        try:
            flush = self.repository.flush
            rows = await run_to_the_end(flush, self.key, changes, tally.all_steps, self.started_at)
        except BaseException:
            tally.give_back(changes)
            raise
        self.status.flushes += 1
        self.status.rows_written += rows
        self.status.last_flush_at = time.time()

    async def refresh(self) -> None:
        began = time.perf_counter()
        view = await asyncio.to_thread(self.repository.pooled, self.key, self.cadence.live_seconds)
        self.controller.fold(view)
        if self.operator_state is not None:
            self._adopt(await asyncio.to_thread(self.operator_state))
        self.status.refresh_seconds = time.perf_counter() - began
        self.status.last_refresh_at = time.time()
        self.status.hosts = view.hosts
        self.status.share = view.share
        self.status.pooled_steps = view.totals.steps

    def _adopt(self, shared: OperatorState | None) -> None:
        """Applies a freeze or overrides another host's operator set. Each control counts only
        when the shared value changed since the last look, so a change made here and not yet
        flushed is not undone (nor one control by the flush of the other)."""
        if shared is None:
            return
        (frozen, overrides), (seen_frozen, seen_overrides) = shared, self._seen
        self._seen = shared
        controller = self.controller
        new_freeze = frozen not in (seen_frozen, controller.frozen)
        new_overrides = overrides not in (seen_overrides, controller.overrides)
        changes = []
        if new_freeze:
            changes.append("frozen" if frozen else "unfrozen")
        if new_overrides:
            changes.append(f"overrides: {len(overrides)} active")
        if changes:
            controller.adopt_controls(
                frozen if new_freeze else controller.frozen,
                overrides if new_overrides else controller.overrides,
                "fleet: " + ", ".join(changes),
            )

    def _delay(self) -> float:
        if not self.status.failures:
            return self.cadence.tick_seconds
        return min(MAX_BACKOFF_SECONDS, self.cadence.flush_seconds * 2.0 ** min(self.status.failures, 16))

    def _succeeded(self) -> None:
        if self.status.state != "ok":
            log.warning("fleet database reachable again after %d failures; caught up", self.status.failures)
            self.status.state, self.status.since = "ok", time.time()
        self.status.failures, self.status.error = 0, None

    def _failed(self, exc: Exception) -> None:
        self.status.failures += 1
        self.status.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        if self.status.state != "unreachable":
            self.status.state, self.status.since = "unreachable", time.time()
            log.warning(
                "fleet database unreachable (%s); serving on the last view, retrying with backoff",
                self.status.error,
            )
