"""Immutable, versioned speculation decisions, and the live reference the engine reads.

The controller publishes a new PolicySnapshot for every change; publishing is one reference
assignment, so the engine never sees a half-built table and never takes a lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from adaptivespec.controller.arms import Arm
from adaptivespec.controller.buckets import BATCH_BUCKETS, CONTEXT_BUCKETS, batch_bucket, context_bucket

Table = tuple[tuple[Arm, ...], ...]  # [context bucket][batch bucket] -> the arm to run


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    version: int
    table: Table

    @classmethod
    def uniform(cls, arm: Arm, version: int = 0) -> PolicySnapshot:
        row = (arm,) * len(BATCH_BUCKETS)
        return cls(version, (row,) * len(CONTEXT_BUCKETS))

    def arm_for(self, batch_size: int, context_len: int) -> Arm:
        return self.table[context_bucket(context_len)][batch_bucket(batch_size)]

    def k_for(self, batch_size: int, context_len: int) -> int:
        return self.arm_for(batch_size, context_len).k

    def method_for(self, batch_size: int, context_len: int) -> str | None:
        return self.arm_for(batch_size, context_len).method or None

    def with_cell(self, ctx: int, batch: int, arm: Arm, version: int) -> PolicySnapshot:
        row = self.table[ctx]
        new_row = (*row[:batch], arm, *row[batch + 1 :])
        return PolicySnapshot(version, (*self.table[:ctx], new_row, *self.table[ctx + 1 :]))


class LivePolicy:
    """What the engine holds: each call reads whichever snapshot was published last."""

    def __init__(self, snapshot: PolicySnapshot) -> None:
        self.snapshot = snapshot

    def k_for(self, batch_size: int, context_len: int) -> int:
        return self.snapshot.k_for(batch_size, context_len)

    def method_for(self, batch_size: int, context_len: int) -> str | None:
        return self.snapshot.method_for(batch_size, context_len)
