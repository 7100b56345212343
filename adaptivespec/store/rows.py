"""What the store reads out for operators: one row per context bucket of decisions, and one per
decision change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from adaptivespec.controller.buckets import BATCH_BUCKETS, CONTEXT_BUCKETS, crossover
from adaptivespec.controller.single_drafter import Option, method_options


@dataclass(frozen=True, slots=True)
class ThresholdRow:
    model_key: str
    hardware_key: str
    ctx_bucket: str
    threshold: int | None
    k_by_bucket: dict[str, int]
    samples: int
    confidence: float  # the lowest confidence among the context bucket's cells
    policy_version: int
    updated_at: str
    method_by_bucket: dict[str, str]  # the drafter at each bucket's K ("" at K = 0)
    # Per batch bucket, each drafter measured there: its best K and that arm's tokens/s.
    method_options: dict[str, dict[str, Option]]

    @classmethod
    def of(
        cls,
        keys: tuple[str, str],
        ctx: int,
        cells: Sequence[DecidedCell],
        *,
        samples: int,
        version: int,
        updated_at: str,
        rewards: Mapping[int, Mapping[tuple[str, int], float]],
    ) -> ThresholdRow:
        """One context bucket's row from its cells' decisions (stored, or pooled from a fleet), and
        the measured goodput (tokens per row per second) of each cell's arms by batch bucket."""
        ordered = sorted(cells, key=lambda c: c.batch_bucket)
        return cls(
            *keys,
            ctx_bucket=CONTEXT_BUCKETS[ctx].label,
            threshold=crossover([(BATCH_BUCKETS[c.batch_bucket], c.k) for c in ordered]),
            k_by_bucket={BATCH_BUCKETS[c.batch_bucket].label: c.k for c in ordered},
            samples=samples,
            confidence=min(c.confidence for c in ordered),
            policy_version=version,
            updated_at=updated_at,
            method_by_bucket={BATCH_BUCKETS[c.batch_bucket].label: c.method for c in ordered},
            method_options={
                BATCH_BUCKETS[c.batch_bucket].label: method_options(
                    rewards.get(c.batch_bucket, {}), BATCH_BUCKETS[c.batch_bucket]
                )
                for c in ordered
            },
        )


class DecidedCell(Protocol):
    @property
    def batch_bucket(self) -> int: ...
    @property
    def k(self) -> int: ...
    @property
    def method(self) -> str: ...
    @property
    def confidence(self) -> float: ...


@dataclass(frozen=True, slots=True)
class HistoryRow:
    model_key: str
    hardware_key: str
    ctx_bucket: int
    batch_bucket: int
    old_k: int
    new_k: int
    reason: str
    policy_version: int
    created_at: str
    old_method: str  # the drafters of old_k and new_k ("" at K = 0)
    new_method: str
