"""Simulated workloads: acceptance, lengths, drift, and the load schedule (concurrency over time)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaptivespec.controller.buckets import BATCH_BUCKETS
from adaptivespec.errors import ConfigError

DEFAULT_STEPS_PER_PHASE = 2000
DEFAULT_MAX_CONCURRENCY = 256


@dataclass(frozen=True, slots=True)
class Range:
    min: int
    max: int

    def __post_init__(self) -> None:
        if not (isinstance(self.min, int) and isinstance(self.max, int) and 1 <= self.min <= self.max):
            raise ConfigError(
                f"a length range needs integers 1 <= min <= max, got {self.min!r}..{self.max!r}"
            )


@dataclass(frozen=True, slots=True)
class DriftPoint:
    at_step: int
    acceptance_mean: float


@dataclass(frozen=True, slots=True)
class Phase:
    concurrency: int
    steps: int


def default_load(
    steps: int = DEFAULT_STEPS_PER_PHASE, up_to: int = DEFAULT_MAX_CONCURRENCY
) -> tuple[Phase, ...]:
    """One phase per batch bucket, at the bucket's largest batch size, from 1 to `up_to`."""
    return tuple(Phase(b.hi, steps) for b in BATCH_BUCKETS if b.hi <= up_to)


@dataclass(frozen=True, slots=True)
class Workload:
    acceptance_mean: float = 0.7
    # Per-request rates are Beta(mean * c, (1 - mean) * c): c = 20 gives a std of about 0.1 at 0.7.
    acceptance_concentration: float = 20.0
    prompt_len: Range = field(default_factory=lambda: Range(256, 768))
    output_len: Range = field(default_factory=lambda: Range(128, 384))
    drift: tuple[DriftPoint, ...] = ()
    load: tuple[Phase, ...] = field(default_factory=default_load)

    def __post_init__(self) -> None:
        _check_rate(self.acceptance_mean, "acceptance_mean")
        if not self.acceptance_concentration > 0:
            raise ConfigError("acceptance_concentration must be > 0")
        for point in self.drift:
            _check_rate(point.acceptance_mean, "drift acceptance_mean")
            if point.at_step < 0:
                raise ConfigError("drift at_step must be >= 0")
        if not self.load:
            raise ConfigError("the load schedule needs at least one phase")
        for phase in self.load:
            if phase.concurrency < 1 or phase.steps < 1:
                raise ConfigError(f"load phases need concurrency >= 1 and steps >= 1, got {phase}")

    @property
    def total_steps(self) -> int:
        return sum(p.steps for p in self.load)

    @classmethod
    def from_file(cls, path: Path, steps_per_phase: int = DEFAULT_STEPS_PER_PHASE) -> Workload:
        try:
            data: Any = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read workload {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path} must hold a JSON object with keys {', '.join(_KEYS)}")
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise ConfigError(f"{path}: unknown keys {unknown}; valid keys: {', '.join(_KEYS)}")
        try:
            return cls(
                **{key: _KEYS[key](value) for key, value in data.items()}
                | _default_load(data, steps_per_phase)
            )
        except (TypeError, KeyError, ValueError) as exc:
            raise ConfigError(f"{path}: {exc}; valid keys: {', '.join(_KEYS)}") from exc


def _check_rate(value: float, name: str) -> None:
    if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must be in [0, 1], got {value!r}")


def _default_load(data: dict[str, Any], steps: int) -> dict[str, Any]:
    return {} if "load" in data else {"load": default_load(steps)}


_KEYS: dict[str, Any] = {
    "acceptance_mean": float,
    "acceptance_concentration": float,
    "prompt_len": lambda v: Range(**v),
    "output_len": lambda v: Range(**v),
    "drift": lambda v: tuple(DriftPoint(int(p["at_step"]), float(p["acceptance_mean"])) for p in v),
    "load": lambda v: tuple(Phase(int(p["concurrency"]), int(p["steps"])) for p in v),
}
