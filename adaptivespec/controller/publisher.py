"""What the controller publishes: the arm the engine runs per cell, and the decisions operators see.

Two answers exist per cell, and both are named:
- the *decision*: the best measured arm (drafter and K), with hysteresis, after overrides.
  The admin page, the admin API, `thresholds`, the store and the metrics all show this one.
- the *running* arm: what the engine runs at that cell's next step. It is the decision, except
  during an exploration step, when the bandit tries another arm to measure it. The engine's
  snapshot holds this one; operators see it only as "exploring".
An unvisited cell borrows the nearest visited cell's decision, and says so.

The publisher owns the engine's `LivePolicy`; it reads the cells, the operator controls and
the version, and changes none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from adaptivespec.controller.acceptance import Acceptance
from adaptivespec.controller.arms import OFF, Arm
from adaptivespec.controller.buckets import BATCH_BUCKETS, CONTEXT_BUCKETS
from adaptivespec.controller.cell_table import CellKey, CellTable
from adaptivespec.controller.decision_log import DecisionLog
from adaptivespec.controller.operator_controls import OperatorControls
from adaptivespec.controller.overrides import effective_arm
from adaptivespec.controller.snapshot import LivePolicy, PolicySnapshot

Source = Literal["measured", "fleet", "borrowed", "prior", "override"]


@dataclass(frozen=True, slots=True)
class PublishedCell:
    ctx_bucket: int
    batch_bucket: int
    decided: Arm  # the decision, after overrides
    running: Arm  # what the engine runs at the next step: `decided`, or an arm being explored
    source: Source  # where `decided` comes from

    @property
    def exploring(self) -> bool:
        return self.running != self.decided


class Publisher:
    def __init__(
        self,
        cells: CellTable,
        controls: OperatorControls,
        log: DecisionLog,
        *,
        arms: tuple[Arm, ...],
        prior: Arm,
        acceptance_of: Callable[[int], Acceptance],
    ) -> None:
        """`prior`: the arm of a cell when no cell was visited; `acceptance_of`: a context
        bucket's tokens per arm, to find a cell's best drafting arm for overrides."""
        self._cells, self._controls, self._log = cells, controls, log
        self._arms, self._prior, self._acceptance_of = arms, prior, acceptance_of
        self.live = LivePolicy(PolicySnapshot.uniform(prior))

    def cell(self, key: CellKey, running: Arm | None = None) -> None:
        """Publishes one cell: `running`, the arm its bandit chose for the next step (None: the
        cell's own), or its decision where the cell is not informed or learning is frozen."""
        ctx, batch = key
        arm = effective_arm(
            self._controls.overrides, ctx, batch, self._running(key, running), lambda: self._best_on(key)
        )
        snapshot, version = self.live.snapshot, self._log.version
        if snapshot.table[ctx][batch] != arm or snapshot.version != version:
            self.live.snapshot = snapshot.with_cell(ctx, batch, arm, version)

    def after_change(self, ctx: int) -> None:
        """After a decision changed in row `ctx`: that row and every row without a visited cell,
        since their unvisited cells may borrow the new decision."""
        visited_rows = self._cells.informed_rows()
        for row in range(len(CONTEXT_BUCKETS)):
            if row == ctx or row not in visited_rows:
                self._row(row)

    def everything(self) -> None:
        """Recomputes every cell's arm (after overrides, freeze, a fleet view or a restore)."""
        for ctx in range(len(CONTEXT_BUCKETS)):
            self._row(ctx)

    def restart(self) -> None:
        """After everything learned was forgotten: the prior everywhere, then overrides."""
        self.live.snapshot = PolicySnapshot.uniform(self._prior, self._log.version)
        self.everything()

    def decided_arm(self, key: CellKey) -> tuple[Arm, Source]:
        """A cell's own decision, its borrowed one, or the prior, before overrides."""
        cell = self._cells.get(key)
        if cell is not None and cell.informed:
            return cell.decided, "measured" if cell.evidence.samples else "fleet"
        borrowed = self._cells.nearest_decision(key)
        return (self._prior, "prior") if borrowed is None else (borrowed, "borrowed")

    def published(self, max_context: int | None = None, max_batch: int | None = None) -> list[PublishedCell]:
        """Every cell up to the context bucket holding `max_context` and the batch bucket holding
        `max_batch` (the engine cannot reach the others), as operators should see it."""
        rows = [
            c for c, bucket in enumerate(CONTEXT_BUCKETS) if max_context is None or bucket.lo <= max_context
        ]
        columns = [b for b, bucket in enumerate(BATCH_BUCKETS) if max_batch is None or bucket.lo <= max_batch]
        table = self.live.snapshot.table
        return [self._published((ctx, batch), table[ctx][batch]) for ctx in rows for batch in columns]

    def _row(self, ctx: int) -> None:
        for batch in range(len(BATCH_BUCKETS)):
            self.cell((ctx, batch))

    def _running(self, key: CellKey, chosen: Arm | None) -> Arm:
        cell = self._cells.get(key)
        if cell is None or not cell.informed or self._controls.frozen:
            return self.decided_arm(key)[0]
        return cell.running if chosen is None else chosen

    def _best_on(self, key: CellKey) -> Arm:
        """The best measured drafting arm of a cell, for overrides that need one; only asked for
        when one applies. Unmeasured: the first drafter's largest K."""
        drafting = [a for a in self._arms if a.k > 0]
        fallback = max(drafting, key=lambda a: (a.method == drafting[0].method, a.k)) if drafting else OFF
        cell = self._cells.get(key)
        if cell is None or not cell.informed:
            return fallback
        predicted = cell.predictions(self._acceptance_of(key[0]))
        return max((a for a in predicted if a.k > 0), key=predicted.__getitem__, default=fallback)

    def _published(self, key: CellKey, running: Arm) -> PublishedCell:
        ctx, batch = key
        overrides = self._controls.overrides
        own, source = self.decided_arm(key)
        decided = effective_arm(overrides, ctx, batch, own, lambda: self._best_on(key))
        if any(o.covers(ctx, batch) for o in overrides):
            source = "override"
        return PublishedCell(ctx, batch, decided, running, source)
