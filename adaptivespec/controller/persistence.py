"""The controller's learned state as plain records (state.py), and back: the conversions a save
and a restore make, and what a flush takes and gives back.

A flush takes every cell whose statistics changed since the last successful save, every history
entry not yet saved, and the operator controls changed here. If the save fails, the controller
gets them back, so nothing is lost and the next flush retries; statistics are absolute values,
so saving a cell twice is harmless.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from adaptivespec.controller.acceptance import AcceptanceEstimator
from adaptivespec.controller.arms import Arm
from adaptivespec.controller.buckets import CONTEXT_BUCKETS
from adaptivespec.controller.cell import Cell
from adaptivespec.controller.cell_table import CellKey
from adaptivespec.controller.decision_log import DecisionChange
from adaptivespec.controller.state import AcceptanceState, ArmState, CellState, ControllerState

MIN_SAVED_ROWS = 100  # fewer acceptance rows are a worse prior than the default
Known = Callable[[str, int], Arm | None]  # a saved (drafter, K), if this controller can run it


@dataclass(frozen=True, slots=True)
class Unsaved:
    state: ControllerState  # the changed cells, with everything else the store keeps
    history: tuple[DecisionChange, ...]
    cells: frozenset[CellKey]


def decisions_only(state: ControllerState) -> ControllerState:
    """The state without the cells' arm statistics: what a pooling host saves to the shared
    tables, where every host would overwrite the others' statistics (the fleet's own tables
    keep every host's, apart)."""
    return replace(state, cells=tuple(replace(cell, arms=()) for cell in state.cells))


def cell_state(key: CellKey, cell: Cell, confidence: float) -> CellState:
    decided, evidence = cell.decided, cell.evidence
    return CellState(
        key[0],
        key[1],
        decided.k,
        evidence.samples,
        confidence,
        evidence.scale,
        evidence.saved_arms(),
        decided.method,
    )


def acceptance_states(estimators: Mapping[str, AcceptanceEstimator]) -> tuple[AcceptanceState, ...]:
    """Each drafter's rates per context bucket, where enough rows stand behind them."""
    return tuple(
        AcceptanceState(ctx, estimator.rates(ctx), int(estimator.rows(ctx)), method)
        for method, estimator in estimators.items()
        for ctx in range(len(CONTEXT_BUCKETS))
        if estimator.rows(ctx) >= MIN_SAVED_ROWS
    )


def restored_arms(saved: CellState, known: Known) -> dict[Arm, ArmState]:
    """A saved cell's arm statistics, by arm, for the arms this controller can run."""
    out = {}
    for stats in saved.arms:
        where = known(stats.method, stats.k)
        if where is not None:
            out[where] = stats
    return out
