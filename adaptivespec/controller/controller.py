"""The controller: learns the arm, a drafter and K, per (context bucket, batch bucket), live.

`ingest` is synchronous and cheap (tens of microseconds): it validates a record, updates
its drafter's acceptance estimate, the machine's stall tail and the cell's step costs, and
publishes a new snapshot when the arm of a cell changes. Around it, each in its own module:
what is published (`publication`), what cells borrow from their neighbours (`neighbours`),
operator controls (`operator`), persistence (`persistence`) and the asyncio task (`task`).
"""

from __future__ import annotations

import itertools
import math
import time
from collections import deque
from dataclasses import dataclass, field
from functools import partial

from adaptivespec.controller.acceptance import AcceptanceEstimator, ArmTokens
from adaptivespec.controller.arms import OFF, Arm, arm, arm_space
from adaptivespec.controller.buckets import (
    BATCH_BUCKETS,
    CONTEXT_BUCKETS,
    batch_bucket,
    context_bucket,
    crossover,
)
from adaptivespec.controller.cell import Acceptance, Cell, initial_arm
from adaptivespec.controller.fleet import Tally
from adaptivespec.controller.learning_settings import LearningSettings
from adaptivespec.controller.neighbours import CellKey, nearest_decision, neighbourhood
from adaptivespec.controller.overrides import Override
from adaptivespec.controller.probe_share import ALONE
from adaptivespec.controller.publication import publish_after_change, publish_cell
from adaptivespec.controller.snapshot import LivePolicy, PolicySnapshot
from adaptivespec.controller.stall_tail import StallTail
from adaptivespec.engine.telemetry import StepTelemetry

INITIAL_SLOPE = 0.15  # relative cost of one more draft token, before anything is measured
SIM_METHODS = ("draft",)  # the simulator's one drafter: what a controller learns over by default


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    settings: LearningSettings = field(default_factory=LearningSettings)
    history_limit: int = 10_000  # decision changes kept in memory until the store takes them


@dataclass(frozen=True, slots=True)
class DecisionChange:
    ctx_bucket: int  # -1 for changes that are not one cell's
    batch_bucket: int
    old_k: int
    new_k: int
    reason: str
    version: int
    at: float
    old_method: str = ""  # the drafters of old_k and new_k ("" at K = 0)
    new_method: str = ""


@dataclass(frozen=True, slots=True)
class CellDecision:
    ctx_bucket: int
    batch_bucket: int
    k: int
    samples: int  # steps this host measured
    confidence: float
    fleet_samples: int = 0  # steps other hosts measured (and this host before its restart)
    hosts: int = 1  # hosts whose steps stand behind the decision
    method: str = ""  # the drafter at k ("" at K = 0)


class Controller:
    def __init__(
        self,
        model_key: str,
        hardware_key: str,
        config: ControllerConfig | None = None,
        methods: tuple[str, ...] = SIM_METHODS,
    ) -> None:
        """`methods`: the drafters the runner loaded, in its order (the first is its default)."""
        self.model_key = model_key
        self.hardware_key = hardware_key
        self.config = config or ControllerConfig()
        self.methods = methods
        self.arms = arm_space(methods, self.config.settings.arms)
        self.version = 0  # bumps on every decision change and operator action
        self.frozen = False
        self.overrides: tuple[Override, ...] = ()
        self.ingested = 0
        self.rejected = 0
        self.history: deque[DecisionChange] = deque(maxlen=self.config.history_limit)
        self.dirty: set[CellKey] = set()  # cells whose statistics changed since the last save
        self.cells: dict[CellKey, Cell] = {}
        self.tally: Tally | None = None  # this host's totals for the fleet, when it pools with one
        self.share = ALONE  # this host's share of new cells' probes, as of the last fleet view
        self.acceptance = self._new_acceptance()
        self.stalls = StallTail()  # how much slower this machine's slow steps are, over every cell
        self.start_arm = initial_arm(self.arms, self.acceptance_of(0), INITIAL_SLOPE)
        self.live = LivePolicy(PolicySnapshot.uniform(self.start_arm))

    def ingest(self, record: StepTelemetry) -> bool:
        """Learns from one step; returns False (and counts it) if the record is invalid."""
        if not _valid(record):
            self.rejected += 1
            return False
        self.ingested += 1
        if self.frozen:
            return True
        key = (context_bucket(int(record.mean_context_len)), batch_bucket(record.batch_size))
        ran = arm(self.drafter(record.method), record.k) if self.methods else OFF
        estimator = self.acceptance.get(ran.method)
        if estimator is not None:
            estimator.observe(key[0], ran.k, record.batch_size, record.kept_at_least)
        cell = self.cell(key)
        if ran in cell.arms:  # credited to the arm chosen, whatever the drafter found
            tokens_per_row = record.emitted / record.batch_size
            # The arm's own cost, without switching's: that one is the switch's (cell.observe_switch).
            seconds = record.step_seconds - record.catch_up_seconds
            typical = cell.typical_seconds(ran)
            if typical is not None:
                self.stalls.observe(seconds, typical)
            cell.observe(ran, tokens_per_row, seconds)
            if record.catch_up_tokens:
                cell.observe_switch(ran.method, record.catch_up_seconds)
            self.dirty.add(key)
            if self.tally is not None:
                where, rows = (key[0], key[1], ran.method, ran.k), record.batch_size
                self.tally.record(where, tokens_per_row, seconds, rows, record.kept_at_least)
        decided_before = cell.decided
        around = partial(neighbourhood, self.cells, key)
        cell.next_k(self.acceptance_of(key[0]), around, self.share.turned(sum(key)), self.stalls.tail)
        if cell.decided != decided_before:
            self._record_change(key, decided_before, cell.decided)
            publish_after_change(self, key[0])  # unvisited cells may borrow the new decision
        else:
            publish_cell(self, key)
        return True

    def cell(self, key: CellKey) -> Cell:
        cell = self.cells.get(key)
        if cell is None:
            cell = Cell(self.config.settings, self.arms)
            borrowed = nearest_decision(self.cells, key)
            cell.running = cell.decided = self.start_arm if borrowed is None else borrowed
            self.cells[key] = cell
        return cell

    def drafter(self, named: str) -> str:
        """The drafter a record names; an unnamed one (a runner with one drafter, or a row saved
        before drafters were named) is the first."""
        return named or (self.methods[0] if self.methods else "")

    def acceptance_of(self, ctx: int) -> Acceptance:
        """Expected tokens per row at each arm (its drafter's estimate at its K), in context
        bucket `ctx`."""
        return ArmTokens(self.acceptance, ctx)

    def _new_acceptance(self) -> dict[str, AcceptanceEstimator]:
        """One estimator per drafter: each drafter keeps its own drafts."""
        positions = max(self.config.settings.arms)
        return {
            method: AcceptanceEstimator(len(CONTEXT_BUCKETS), positions=positions) for method in self.methods
        }

    def _record_change(self, key: CellKey, old: Arm, new: Arm) -> None:
        self.version += 1
        change = DecisionChange(
            key[0], key[1], old.k, new.k, "learned", self.version, time.time(), old.method, new.method
        )
        self.history.append(change)

    def record_event(self, reason: str) -> None:
        """An operator action: a new policy version and a history entry that is not one cell's."""
        self.version += 1
        self.history.append(DecisionChange(-1, -1, -1, -1, reason, self.version, time.time()))

    def forget(self) -> None:
        """Drops every cell and acceptance estimate (see `operator.reset`)."""
        self.cells.clear()
        self.dirty.clear()
        self.acceptance = self._new_acceptance()
        self.live.snapshot = PolicySnapshot.uniform(self.start_arm, self.version)

    # ---- what operators see ------------------------------------------------------------
    def decisions(self) -> list[CellDecision]:
        """The informed cells' decisions (measured here, restored from the store, or from the
        fleet), with how sure each is."""
        out = []
        for (ctx, batch), cell in sorted(self.cells.items()):
            if not cell.informed:
                continue
            pooled = sum(s.count for s in cell.fleet.values())
            hosts = (1 if cell.samples else 0) + cell.fleet_hosts
            confidence = cell.confidence(self.acceptance_of(ctx))
            decided = cell.decided
            out.append(
                CellDecision(ctx, batch, decided.k, cell.samples, confidence, pooled, hosts, decided.method)
            )
        return out

    def thresholds(self) -> dict[int, int | None]:
        """Per context bucket: smallest batch size from which every larger visited bucket decides K=0."""
        per_ctx: dict[int, list[tuple[int, int]]] = {}
        for d in self.decisions():
            per_ctx.setdefault(d.ctx_bucket, []).append((d.batch_bucket, d.k))
        return {
            ctx: crossover([(BATCH_BUCKETS[b], k) for b, k in sorted(rows)]) for ctx, rows in per_ctx.items()
        }

    def exploration(self) -> dict[str, float]:
        """How many steps went to arms the measurements already showed to be worse than the decision."""
        pulls = sum(c.pulls for c in self.cells.values())
        dominated = sum(c.dominated_pulls for c in self.cells.values())
        return {
            "steps": float(pulls),
            "dominated_steps": float(dominated),
            "dominated_share": dominated / max(pulls, 1),
        }


def _valid(record: StepTelemetry) -> bool:
    times = (record.step_seconds, record.draft_seconds, record.verify_seconds, record.catch_up_seconds)
    if not all(math.isfinite(t) and t >= 0 for t in times) or record.step_seconds <= 0:
        return False
    if record.catch_up_tokens < 0 or record.catch_up_seconds >= record.step_seconds:
        return False
    if record.batch_size < 1 or record.k < 0 or record.emitted < 1:
        return False
    if not math.isfinite(record.mean_context_len) or record.mean_context_len < 0:
        return False
    if not 0 <= record.width <= record.k or len(record.kept_at_least) != record.width:
        return False
    kept = (record.batch_size, *record.kept_at_least)
    if any(later < 0 or later > earlier for earlier, later in itertools.pairwise(kept)):
        return False  # rows keeping j drafts are a subset of those keeping j - 1
    return 0 <= record.accepted <= record.drafted and sum(record.kept_at_least) == record.accepted
