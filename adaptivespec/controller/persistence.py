"""The controller's learned state as plain records, and what a flush takes and gives back.

A flush takes every cell whose statistics changed since the last successful save and every
history entry not yet saved. If the save fails, `give_back` returns them, so nothing is lost
and the next flush retries; statistics are absolute values, so saving a cell twice is harmless.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from adaptivespec.controller.arms import Arm, arm
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
    acceptance = tuple(
        AcceptanceState(ctx, estimator.rates(ctx), int(estimator.rows(ctx)), method)
        for method, estimator in controller.acceptance.items()
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
    for a, seconds in sorted(cell.seconds.items()):
        reward = cell.rewards.get(a) or EWStat()
        arms.append(
            ArmState(
                a.k, a.method, reward.mean, reward.var, reward.count, seconds.mean, seconds.var, seconds.count
            )
        )
    decided = cell.decided
    return CellState(
        key[0], key[1], decided.k, cell.samples, confidence, cell.scale, tuple(arms), decided.method
    )


def restore(controller: Controller, state: ControllerState, statistics: bool = True) -> None:
    """Loads learned state and publishes it before the first step: a warm restart does not re-explore.

    `statistics=False` is for a host that pools with a fleet: the shared cell rows hold the
    statistics of whichever host wrote last, while the fleet's totals hold every host's steps,
    so only the decisions are taken here (the fleet's evidence then moves them, with hysteresis).
    """
    fading = controller.config.settings.fading
    for saved in state.cells:
        cell = controller.cell((saved.ctx_bucket, saved.batch_bucket))
        decided = _known(controller, saved.decided_method, saved.decided)
        if decided is not None:
            cell.decided = cell.running = decided
        if not statistics:
            continue
        cell.samples, cell.scale = saved.samples, saved.reward_scale
        for stats in saved.arms:
            where = _known(controller, stats.method, stats.k)
            if where is None:
                continue
            cell.rewards[where] = EWStat(fading, stats.reward_mean, stats.reward_var, stats.reward_count)
            cell.seconds[where] = RobustStat.restored(
                stats.seconds_mean, stats.seconds_var, stats.seconds_count
            )
    for acc in state.acceptance:
        estimator = controller.acceptance.get(controller.drafter(acc.method))
        if estimator is not None:
            estimator.seed(acc.ctx_bucket, acc.rates)
    controller.version, controller.frozen, controller.overrides = state.version, state.frozen, state.overrides
    controller.dirty = set()
    republish(controller)


def _known(controller: Controller, method: str, k: int) -> Arm | None:
    """A saved arm, if this controller can run it. Rows saved before drafters were named carry
    no method: they are the first drafter's (a model key names one set of drafters)."""
    saved = arm(controller.drafter(method), k)
    return saved if saved in controller.arms else None
