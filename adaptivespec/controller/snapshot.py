"""Immutable, versioned speculation decisions, and the live reference the engine reads.

The controller publishes a new PolicySnapshot for every change; publishing is one reference
assignment, so the engine never sees a half-built table and never takes a lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from adaptivespec.controller.buckets import BATCH_BUCKETS, CONTEXT_BUCKETS, batch_bucket, context_bucket

Table = tuple[tuple[int, ...], ...]  # [context bucket][batch bucket] -> K


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    version: int
    table: Table

    @classmethod
    def uniform(cls, k: int, version: int = 0) -> PolicySnapshot:
        row = (k,) * len(BATCH_BUCKETS)
        return cls(version, (row,) * len(CONTEXT_BUCKETS))

    def k_for(self, batch_size: int, context_len: int) -> int:
        return self.table[context_bucket(context_len)][batch_bucket(batch_size)]

    def with_cell(self, ctx: int, batch: int, k: int, version: int) -> PolicySnapshot:
        row = self.table[ctx]
        new_row = (*row[:batch], k, *row[batch + 1 :])
        return PolicySnapshot(version, (*self.table[:ctx], new_row, *self.table[ctx + 1 :]))


class LivePolicy:
    """What the engine holds: `k_for` reads whichever snapshot was published last."""

    def __init__(self, snapshot: PolicySnapshot) -> None:
        self.snapshot = snapshot

    def k_for(self, batch_size: int, context_len: int) -> int:
        return self.snapshot.k_for(batch_size, context_len)
