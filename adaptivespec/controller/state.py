"""The controller's learned state as plain typed records: what the store writes and reads back."""

from __future__ import annotations

from dataclasses import dataclass

from adaptivespec.controller.acceptance import AcceptanceRates
from adaptivespec.controller.overrides import Override


@dataclass(frozen=True, slots=True)
class ArmState:
    k: int
    method: str  # the drafter ("" at K = 0)
    reward_mean: float
    reward_var: float
    reward_count: int
    seconds_mean: float
    seconds_var: float
    seconds_count: int


@dataclass(frozen=True, slots=True)
class CellState:
    ctx_bucket: int
    batch_bucket: int
    decided: int  # K
    samples: int
    confidence: float
    reward_scale: float
    arms: tuple[ArmState, ...]
    decided_method: str = ""  # the drafter at `decided` ("" at K = 0)


@dataclass(frozen=True, slots=True)
class AcceptanceState:
    ctx_bucket: int
    rates: AcceptanceRates
    count: int  # rows measured
    method: str  # the drafter whose drafts these are


@dataclass(frozen=True, slots=True)
class ControlChanges:
    """Which operator controls were changed on this host since its last save: a save writes
    only those, so that no host writes back a freeze or overrides another host replaced."""

    frozen: bool = False
    overrides: bool = False

    def __or__(self, other: ControlChanges) -> ControlChanges:
        return ControlChanges(self.frozen or other.frozen, self.overrides or other.overrides)


@dataclass(frozen=True, slots=True)
class ControllerState:
    model_key: str
    hardware_key: str
    version: int
    frozen: bool
    cells: tuple[CellState, ...]
    acceptance: tuple[AcceptanceState, ...]
    overrides: tuple[Override, ...]
    changed: ControlChanges = ControlChanges()  # of `frozen` and `overrides`: what a save writes
