"""What the controller publishes: the arm the engine runs per cell, and the decisions operators see.

Two answers exist per cell, and both are named:
- the *decision*: the best measured arm (drafter and K), with hysteresis, after overrides.
  The admin page, the admin API, `thresholds`, the store and the metrics all show this one.
- the *running* arm: what the engine runs at that cell's next step. It is the decision, except
  during an exploration step, when the bandit tries another arm to measure it. The engine's
  snapshot holds this one; operators see it only as "exploring".
An unvisited cell borrows the nearest visited cell's decision, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from adaptivespec.controller.arms import OFF, Arm
from adaptivespec.controller.buckets import BATCH_BUCKETS, CONTEXT_BUCKETS
from adaptivespec.controller.neighbours import CellKey, nearest_decision
from adaptivespec.controller.overrides import effective_arm

if TYPE_CHECKING:
    from adaptivespec.controller.controller import Controller

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


def publish_cell(controller: Controller, key: CellKey) -> None:
    ctx, batch = key
    arm = effective_arm(
        controller.overrides, ctx, batch, _running(controller, key), lambda: _best_on(controller, key)
    )
    snapshot = controller.live.snapshot
    if snapshot.table[ctx][batch] != arm or snapshot.version != controller.version:
        controller.live.snapshot = snapshot.with_cell(ctx, batch, arm, controller.version)


def publish_after_change(controller: Controller, ctx: int) -> None:
    """After a decision changed in row `ctx`: that row and every row without a visited cell,
    since their unvisited cells may borrow the new decision."""
    visited_rows = {c for (c, _), cell in controller.cells.items() if cell.informed}
    for row in range(len(CONTEXT_BUCKETS)):
        if row == ctx or row not in visited_rows:
            _publish_row(controller, row)


def republish(controller: Controller) -> None:
    """Recomputes every cell's arm (after overrides, freeze, reset or a restore)."""
    for ctx in range(len(CONTEXT_BUCKETS)):
        _publish_row(controller, ctx)


def _publish_row(controller: Controller, ctx: int) -> None:
    for batch in range(len(BATCH_BUCKETS)):
        publish_cell(controller, (ctx, batch))


def decided_arm(controller: Controller, key: CellKey) -> tuple[Arm, Source]:
    """A cell's own decision, its borrowed one, or the prior, before overrides."""
    cell = controller.cells.get(key)
    if cell is not None and cell.informed:
        return cell.decided, "measured" if cell.samples else "fleet"
    borrowed = nearest_decision(controller.cells, key)
    return (controller.start_arm, "prior") if borrowed is None else (borrowed, "borrowed")


def _running(controller: Controller, key: CellKey) -> Arm:
    cell = controller.cells.get(key)
    if cell is None or not cell.informed or controller.frozen:
        return decided_arm(controller, key)[0]
    return cell.running


def _best_on(controller: Controller, key: CellKey) -> Arm:
    """The best measured drafting arm of a cell, for overrides that need one; only asked for
    when one applies. Unmeasured: the first drafter's largest K."""
    drafting = [a for a in controller.arms if a.k > 0]
    fallback = max(drafting, key=lambda a: (a.method == drafting[0].method, a.k)) if drafting else OFF
    cell = controller.cells.get(key)
    if cell is None or not cell.informed:
        return fallback
    predicted = cell.predictions(controller.acceptance_of(key[0]))
    return max((a for a in predicted if a.k > 0), key=predicted.__getitem__, default=fallback)


def _published(controller: Controller, key: CellKey, running: Arm) -> PublishedCell:
    ctx, batch = key
    own, source = decided_arm(controller, key)
    decided = effective_arm(controller.overrides, ctx, batch, own, lambda: _best_on(controller, key))
    if any(o.covers(ctx, batch) for o in controller.overrides):
        source = "override"
    return PublishedCell(ctx, batch, decided, running, source)


def published_cells(
    controller: Controller, max_context: int | None = None, max_batch: int | None = None
) -> list[PublishedCell]:
    """Every cell up to the context bucket holding `max_context` and the batch bucket holding
    `max_batch` (the engine cannot reach the others), as operators should see it."""
    rows = [c for c, bucket in enumerate(CONTEXT_BUCKETS) if max_context is None or bucket.lo <= max_context]
    columns = [b for b, bucket in enumerate(BATCH_BUCKETS) if max_batch is None or bucket.lo <= max_batch]
    table = controller.live.snapshot.table
    out = []
    for ctx in rows:
        for batch in columns:
            out.append(_published(controller, (ctx, batch), table[ctx][batch]))
    return out
