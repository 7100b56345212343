"""The controller: learns K per (context bucket, batch bucket) from step telemetry, live.

`ingest` is synchronous and cheap (tens of microseconds): it validates a record, updates
the acceptance and step-cost estimates and the cell's bandit, and publishes a new snapshot
when the K of a cell changes. `run` drives it from the engine's telemetry bus; the engine
never waits for it, and if it fails the engine keeps the last snapshot it published.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from adaptivespec.controller.acceptance import AcceptanceEstimator
from adaptivespec.controller.bandit import ArmPolicy, BanditKind, RiverBandit
from adaptivespec.controller.cell import Cell, CostFloor, LearningSettings, Neighbourhood, initial_k
from adaptivespec.controller.costmodel import relative_cost_floor
from adaptivespec.controller.keys import (
    BATCH_BUCKETS,
    CONTEXT_BUCKETS,
    batch_bucket,
    context_bucket,
    crossover,
)
from adaptivespec.controller.overrides import Override, effective_k
from adaptivespec.controller.snapshot import LivePolicy, PolicySnapshot
from adaptivespec.controller.state import AcceptanceState, ArmState, CellState, ControllerState
from adaptivespec.controller.stats import EWStat
from adaptivespec.engine.telemetry import StepTelemetry, Subscription

log = logging.getLogger(__name__)
CellKey = tuple[int, int]  # (context bucket, batch bucket)
MIN_SAVED_ROWS = 100
INITIAL_SLOPE = 0.15  # relative cost of one more draft token, before anything is measured


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    settings: LearningSettings = field(default_factory=LearningSettings)
    bandit: BanditKind = "ucb"
    seed: int = 0
    history_limit: int = 10_000  # decision changes kept in memory until the store takes them


@dataclass(frozen=True, slots=True)
class DecisionChange:
    ctx_bucket: int
    batch_bucket: int
    old_k: int
    new_k: int
    reason: str
    version: int
    at: float


@dataclass(frozen=True, slots=True)
class CellDecision:
    ctx_bucket: int
    batch_bucket: int
    k: int
    samples: int
    confidence: float


class Controller:
    def __init__(self, model_key: str, hardware_key: str, config: ControllerConfig | None = None) -> None:
        self.model_key = model_key
        self.hardware_key = hardware_key
        self.config = config or ControllerConfig()
        self.cells: dict[CellKey, Cell] = {}
        self.acceptance = AcceptanceEstimator(len(CONTEXT_BUCKETS))
        self.version = 0  # bumps on every persisted decision change
        self.frozen = False
        self.overrides: tuple[Override, ...] = ()
        self.ingested = 0
        self.rejected = 0
        self.history: deque[DecisionChange] = deque(maxlen=self.config.history_limit)
        self.dirty: set[CellKey] = set()
        start = initial_k(self.config.settings.arms, self.acceptance.alpha(0), INITIAL_SLOPE)
        self.live = LivePolicy(PolicySnapshot.uniform(start))

    # ---- learning --------------------------------------------------------------------
    def ingest(self, record: StepTelemetry) -> bool:
        """Learns from one step; returns False (and counts it) if the record is invalid."""
        if not _valid(record):
            self.rejected += 1
            return False
        self.ingested += 1
        if self.frozen:
            return True
        key = (context_bucket(int(record.mean_context_len)), batch_bucket(record.batch_size))
        self.acceptance.observe(key[0], record.drafted, record.accepted, record.k, record.batch_size)
        cell = self._cell(key)
        acceptance = self._acceptance(key[0])
        if record.k in self.config.settings.arms:
            cell.observe(record.k, record.emitted / record.batch_size, record.step_seconds, acceptance)
        decided_before = cell.decided
        cell.next_k(acceptance, lambda: self._neighbourhood(key))
        if cell.decided != decided_before:
            self._record_change(key, decided_before, cell.decided, "learned")
            self._publish_row(key[0])  # unvisited neighbours borrow the new decision
        else:
            self._publish(key)
        return True

    def _neighbourhood(self, key: CellKey) -> Neighbourhood:
        """What the nearest smaller visited batch bucket implies for this cell."""
        smaller = self._smaller_neighbour(key)
        ruled_out = self.cells[smaller].ruled_out if smaller is not None else frozenset()
        return Neighbourhood(self._cost_floor(key), ruled_out)

    def _smaller_neighbour(self, key: CellKey) -> CellKey | None:
        """The nearest smaller visited batch bucket, batch 1 excepted.

        A batch-1 plain step takes other kernels (GEMV, not GEMM): on a 2-core CPU one draft
        token costs 2x the plain step at batch 1 and 1.3x at batch 2, so batch 1 says nothing
        about how cost grows with K at larger batches.
        """
        ctx, batch = key
        for smaller in range(batch - 1, 0, -1):
            cell = self.cells.get((ctx, smaller))
            if cell is not None and cell.samples:
                return ctx, smaller
        return None

    def _cost_floor(self, key: CellKey) -> CostFloor | None:
        """Step-time floors for this cell's unmeasured arms, from the nearest smaller visited bucket.

        One hop only: what lies further down already reached that bucket through its own
        pruning (`ruled_out`), and walking the whole chain on every re-prune cost 50 us a step.
        """
        smaller = self._smaller_neighbour(key)
        if smaller is None:
            return None
        return relative_cost_floor(self.cells[key].seconds, self.cells[smaller].seconds)

    def _acceptance(self, ctx: int) -> Callable[[int], float]:
        estimator = self.acceptance
        return lambda k: estimator.expected_tokens(ctx, k)

    def _cell(self, key: CellKey) -> Cell:
        cell = self.cells.get(key)
        if cell is None:
            seed = self.config.seed * 1_000_003 + key[0] * 101 + key[1]
            cell = Cell(self.config.settings, self._bandit_factory(seed))
            cell.current = cell.decided = self._nearest_decision(key)
            self.cells[key] = cell
        return cell

    def _bandit_factory(self, seed: int) -> Callable[[], ArmPolicy]:
        kind, fading = self.config.bandit, self.config.settings.fading
        return lambda: RiverBandit(kind, seed=seed, fading=fading)

    # ---- publication -----------------------------------------------------------------
    def _publish(self, key: CellKey) -> None:
        ctx, batch = key
        k = effective_k(self.overrides, ctx, batch, self._learned_k(key), lambda: self._best_on(key))
        snapshot = self.live.snapshot
        if snapshot.table[ctx][batch] != k or snapshot.version != self.version:
            self.live.snapshot = snapshot.with_cell(ctx, batch, k, self.version)

    def _best_on(self, key: CellKey) -> int:
        """The best measured K > 0 of a cell, for "force on"; only asked for when that override applies."""
        fallback = max((k for k in self.config.settings.arms if k > 0), default=0)
        cell = self.cells.get(key)
        if cell is None or not cell.samples:
            return fallback
        predicted = cell.predictions(self._acceptance(key[0]))
        return max((k for k in predicted if k > 0), key=predicted.__getitem__, default=fallback)

    def _learned_k(self, key: CellKey) -> int:
        cell = self.cells.get(key)
        if cell is None:
            return self._nearest_decision(key)
        return cell.decided if self.frozen else cell.current

    def _nearest_decision(self, key: CellKey) -> int:
        """An unvisited cell borrows the decision of the nearest visited batch bucket."""
        ctx, batch = key
        for distance in range(1, len(BATCH_BUCKETS)):
            for b in (batch - distance, batch + distance):
                cell = self.cells.get((ctx, b))
                if cell is not None and cell.samples:
                    return cell.decided
        return self.live.snapshot.table[ctx][batch]

    def republish(self) -> None:
        """Recomputes every cell's K (after overrides, freeze, reset or a restore)."""
        for ctx in range(len(CONTEXT_BUCKETS)):
            self._publish_row(ctx)

    def _publish_row(self, ctx: int) -> None:
        for batch in range(len(BATCH_BUCKETS)):
            self._publish((ctx, batch))

    def exploration(self) -> dict[str, float]:
        """How many steps went to arms the measurements already showed to be worse than the decision."""
        pulls = sum(c.pulls for c in self.cells.values())
        dominated = sum(c.dominated_pulls for c in self.cells.values())
        return {
            "steps": float(pulls),
            "dominated_steps": float(dominated),
            "dominated_share": dominated / max(pulls, 1),
        }

    def _record_change(self, key: CellKey, old: int, new: int, reason: str) -> None:
        self.version += 1
        self.dirty.add(key)
        self.history.append(DecisionChange(key[0], key[1], old, new, reason, self.version, time.time()))

    # ---- what operators see ------------------------------------------------------------
    def decisions(self) -> list[CellDecision]:
        out = []
        for (ctx, batch), cell in sorted(self.cells.items()):
            if cell.samples == 0 or not cell.candidates:
                continue
            predicted = cell.predictions(self._acceptance(ctx))
            out.append(CellDecision(ctx, batch, cell.decided, cell.samples, cell.confidence(predicted)))
        return out

    def thresholds(self) -> dict[int, int | None]:
        """Per context bucket: smallest batch size from which every larger visited bucket decides K=0."""
        per_ctx: dict[int, list[tuple[int, int]]] = {}
        for d in self.decisions():
            per_ctx.setdefault(d.ctx_bucket, []).append((d.batch_bucket, d.k))
        return {
            ctx: crossover([(BATCH_BUCKETS[b], k) for b, k in sorted(rows)]) for ctx, rows in per_ctx.items()
        }

    # ---- operator controls -------------------------------------------------------------
    def set_overrides(self, overrides: tuple[Override, ...], reason: str = "override") -> None:
        self.overrides = overrides
        self.version += 1
        self.history.append(
            DecisionChange(-1, -1, -1, -1, f"{reason}: {len(overrides)} active", self.version, time.time())
        )
        self.republish()

    def freeze(self, frozen: bool) -> None:
        self.frozen = frozen
        self.version += 1
        self.history.append(
            DecisionChange(-1, -1, -1, -1, "frozen" if frozen else "unfrozen", self.version, time.time())
        )
        self.republish()

    def reset(self) -> None:
        """Forgets everything learned for this model and hardware (overrides stay)."""
        self.cells.clear()
        self.acceptance = AcceptanceEstimator(len(CONTEXT_BUCKETS))
        self.version += 1
        self.history.append(DecisionChange(-1, -1, -1, -1, "reset", self.version, time.time()))
        start = initial_k(self.config.settings.arms, self.acceptance.alpha(0), INITIAL_SLOPE)
        self.live.snapshot = PolicySnapshot.uniform(start, self.version)
        self.republish()

    # ---- persistence (plain records; the store does the I/O) ---------------------------
    def export_state(self, dirty_only: bool = False) -> ControllerState:
        keys = sorted(self.dirty if dirty_only else set(self.cells))
        confidence = {(d.ctx_bucket, d.batch_bucket): d.confidence for d in self.decisions()}
        cells = tuple(self._cell_state(key, confidence.get(key, 0.0)) for key in keys if key in self.cells)
        acceptance = tuple(
            AcceptanceState(ctx, self.acceptance.alpha(ctx), 0.0, int(self.acceptance.rows(ctx)))
            for ctx in range(len(CONTEXT_BUCKETS))
            if self.acceptance.rows(ctx) >= MIN_SAVED_ROWS  # too few rows are a worse prior than the default
        )
        return ControllerState(
            self.model_key, self.hardware_key, self.version, self.frozen, cells, acceptance, self.overrides
        )

    def _cell_state(self, key: CellKey, confidence: float) -> CellState:
        cell = self.cells[key]
        arms = []
        for k, seconds in sorted(cell.seconds.items()):
            reward = cell.rewards.get(k) or EWStat()
            arms.append(
                ArmState(k, reward.mean, reward.var, reward.count, seconds.mean, seconds.var, seconds.count)
            )
        return CellState(key[0], key[1], cell.decided, cell.samples, confidence, cell.scale, tuple(arms))

    def restore(self, state: ControllerState) -> None:
        """Loads learned state and publishes it before the first step: a warm restart does not re-explore."""
        fading = self.config.settings.fading
        for saved in state.cells:
            key = (saved.ctx_bucket, saved.batch_bucket)
            cell = self._cell(key)
            cell.decided = cell.current = saved.decided
            cell.samples, cell.scale = saved.samples, saved.reward_scale
            for arm in saved.arms:
                cell.rewards[arm.k] = EWStat(fading, arm.reward_mean, arm.reward_var, arm.reward_count)
                cell.seconds[arm.k] = EWStat(fading, arm.seconds_mean, arm.seconds_var, arm.seconds_count)
        for acc in state.acceptance:
            self.acceptance.seed(acc.ctx_bucket, acc.mean)
        self.version, self.frozen, self.overrides = state.version, state.frozen, state.overrides
        self.dirty.clear()
        self.republish()

    # ---- the asyncio task --------------------------------------------------------------
    async def run(
        self, subscription: Subscription, on_error: Callable[[BaseException], None] | None = None
    ) -> None:
        """Consumes telemetry until cancelled; a failure stops learning, not serving."""
        try:
            while True:
                self.ingest(await subscription.get())
        except Exception as exc:  # the engine keeps the last good snapshot
            log.exception("controller failed; keeping policy version %s", self.live.snapshot.version)
            if on_error is not None:
                on_error(exc)


def _valid(record: StepTelemetry) -> bool:
    times = (record.step_seconds, record.draft_seconds, record.verify_seconds)
    if not all(math.isfinite(t) and t >= 0 for t in times) or record.step_seconds <= 0:
        return False
    if record.batch_size < 1 or record.k < 0 or record.emitted < 1:
        return False
    if not math.isfinite(record.mean_context_len) or record.mean_context_len < 0:
        return False
    return 0 <= record.accepted <= record.drafted
