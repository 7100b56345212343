"""Operator overrides: pin K (and the drafter) for a bucket, force speculation off or on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from adaptivespec.controller.arms import OFF, Arm, arm
from adaptivespec.controller.buckets import BATCH_BUCKETS, CONTEXT_BUCKETS
from adaptivespec.errors import ConfigError

OverrideKind = Literal["pin", "force_off", "force_on"]


@dataclass(frozen=True, slots=True)
class Override:
    kind: OverrideKind
    k: int | None = None  # for "pin"
    ctx_bucket: int | None = None  # None: every context bucket
    batch_bucket: int | None = None  # None: every batch bucket
    method: str | None = None  # for "pin" at k > 0: the drafter; None keeps the learned one

    def __post_init__(self) -> None:
        if self.kind not in ("pin", "force_off", "force_on"):
            raise ConfigError(f"override kind must be pin, force_off or force_on, got {self.kind!r}")
        if self.kind == "pin" and (self.k is None or self.k < 0):
            raise ConfigError("a pin override needs k >= 0")
        if self.kind != "pin" and (self.k is not None or self.method is not None):
            raise ConfigError(f"{self.kind} takes no k and no method")
        if self.method is not None and not self.k:
            raise ConfigError("a pin's method needs k > 0: at k = 0 no drafter runs")
        if self.ctx_bucket is not None and not 0 <= self.ctx_bucket < len(CONTEXT_BUCKETS):
            raise ConfigError(f"ctx_bucket must be in [0, {len(CONTEXT_BUCKETS)})")
        if self.batch_bucket is not None and not 0 <= self.batch_bucket < len(BATCH_BUCKETS):
            raise ConfigError(f"batch_bucket must be in [0, {len(BATCH_BUCKETS)})")

    def covers(self, ctx: int, batch: int) -> bool:
        return (self.ctx_bucket is None or self.ctx_bucket == ctx) and (
            self.batch_bucket is None or self.batch_bucket == batch
        )

    @property
    def scope(self) -> tuple[int | None, int | None]:
        return self.ctx_bucket, self.batch_bucket

    @property
    def specificity(self) -> int:
        return (self.ctx_bucket is not None) + (self.batch_bucket is not None)


def effective_arm(
    overrides: tuple[Override, ...], ctx: int, batch: int, learned: Arm, best_on: Callable[[], Arm]
) -> Arm:
    """The arm the engine gets: the most specific override covering the cell, else the learned
    one. `best_on` is the best drafting arm, asked for only when an override needs it."""
    covering = [o for o in overrides if o.covers(ctx, batch)]
    if not covering:
        return learned
    winner = max(covering, key=lambda o: o.specificity)
    if winner.kind == "force_off":
        return OFF
    if winner.kind == "force_on":
        return learned if learned.k > 0 else best_on()
    k = int(winner.k or 0)
    if winner.method is not None:
        return arm(winner.method, k)
    return arm(learned.method if learned.k > 0 else best_on().method, k)
