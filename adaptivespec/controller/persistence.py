"""The controller's learned state as plain records, and what a flush takes and gives back.

A flush takes every cell whose statistics changed since the last successful save and every
history entry not yet saved. If the save fails, `give_back` returns them, so nothing is lost
and the next flush retries; statistics are absolute values, so saving a cell twice is harmless.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from adaptivespec.controller.buckets import CONTEXT_BUCKETS
from adaptivespec.controller.neighbours import CellKey
from adaptivespec.controller.publication import republish
from adaptivespec.controller.robust_stat import RobustStat
from adaptivespec.controller.state import AcceptanceState, ArmState, CellState, ControllerState
from adaptivespec.controller.stats import EWStat

if TYPE_CHECKING:
    from adaptivespec.controller.controller import Controller, DecisionChange

MIN_SAVED_ROWS = 100  # fewer acceptance rows are a worse prior than the default


@dataclass(frozen=True, slots=True)
class Unsaved:
    state: ControllerState  # the changed cells, with everything else the store keeps
    history: tuple[DecisionChange, ...]
    cells: frozenset[CellKey]


def take_unsaved(controller: Controller) -> Unsaved:
    """What the next save must write; the controller forgets it until `give_back`."""
    cells = frozenset(controller.dirty)
    unsaved = Unsaved(export_state(controller, cells), tuple(controller.history), cells)
    controller.dirty = set()
    controller.history.clear()
    return unsaved


def give_back(controller: Controller, unsaved: Unsaved) -> None:
    """After a failed save: the cells are dirty again and the history is unsaved again, oldest first."""
    controller.dirty |= unsaved.cells
    kept = deque(unsaved.history, maxlen=controller.history.maxlen)
    kept.extend(controller.history)
    controller.history = kept


def decisions_only(state: ControllerState) -> ControllerState:
    """The state without the cells' arm statistics: what a pooling host saves to the shared
    tables, where every host would overwrite the others' statistics (the fleet's own tables
    keep every host's, apart)."""
    return replace(state, cells=tuple(replace(cell, arms=()) for cell in state.cells))


def export_state(controller: Controller, keys: frozenset[CellKey] | None = None) -> ControllerState:
    """Every cell (or those in `keys`), the acceptance rates, overrides, version and freeze."""
    chosen = sorted(controller.cells if keys is None else keys & controller.cells.keys())
    confidence = {(d.ctx_bucket, d.batch_bucket): d.confidence for d in controller.decisions()}
    cells = tuple(_cell_state(controller, key, confidence.get(key, 0.0)) for key in chosen)
    estimator = controller.acceptance
    acceptance = tuple(
        AcceptanceState(ctx, estimator.rates(ctx), int(estimator.rows(ctx)))
        for ctx in range(len(CONTEXT_BUCKETS))
        if estimator.rows(ctx) >= MIN_SAVED_ROWS
    )
    return ControllerState(
        controller.model_key,
        controller.hardware_key,
        controller.version,
        controller.frozen,
        cells,
        acceptance,
        controller.overrides,
    )


def _cell_state(controller: Controller, key: CellKey, confidence: float) -> CellState:
    cell = controller.cells[key]
    arms = []
    for k, seconds in sorted(cell.seconds.items()):
        reward = cell.rewards.get(k) or EWStat()
        arms.append(
            ArmState(k, reward.mean, reward.var, reward.count, seconds.mean, seconds.var, seconds.count)
        )
    return CellState(key[0], key[1], cell.decided, cell.samples, confidence, cell.scale, tuple(arms))


def restore(controller: Controller, state: ControllerState, statistics: bool = True) -> None:
    """Loads learned state and publishes it before the first step: a warm restart does not re-explore.

    `statistics=False` is for a host that pools with a fleet: the shared cell rows hold the
    statistics of whichever host wrote last, while the fleet's totals hold every host's steps,
    so only the decisions are taken here (the fleet's evidence then moves them, with hysteresis).
    """
    fading = controller.config.settings.fading
    for saved in state.cells:
        cell = controller.cell((saved.ctx_bucket, saved.batch_bucket))
        cell.decided = cell.running = saved.decided
        if not statistics:
            continue
        cell.samples, cell.scale = saved.samples, saved.reward_scale
        for arm in saved.arms:
            cell.rewards[arm.k] = EWStat(fading, arm.reward_mean, arm.reward_var, arm.reward_count)
            cell.seconds[arm.k] = RobustStat.restored(arm.seconds_mean, arm.seconds_var, arm.seconds_count)
    for acc in state.acceptance:
        controller.acceptance.seed(acc.ctx_bucket, acc.rates)
    controller.version, controller.frozen, controller.overrides = state.version, state.frozen, state.overrides
    controller.dirty = set()
    republish(controller)
