"""Buckets that group batch sizes and context lengths into the controller's decision cells."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Bucket:
    lo: int  # inclusive
    hi: int  # inclusive

    @property
    def label(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"


def _buckets(upper_bounds: tuple[int, ...]) -> tuple[Bucket, ...]:
    lows = (1, *(hi + 1 for hi in upper_bounds[:-1]))
    return tuple(Bucket(lo, hi) for lo, hi in zip(lows, upper_bounds, strict=True))


BATCH_BUCKETS = _buckets((1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024))
CONTEXT_BUCKETS = _buckets((512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 1 << 30))
_BATCH_HIGHS = [b.hi for b in BATCH_BUCKETS]
_CONTEXT_HIGHS = [b.hi for b in CONTEXT_BUCKETS]


def batch_bucket(batch_size: int) -> int:
    """Index into BATCH_BUCKETS; sizes past the last bucket share it."""
    return min(bisect.bisect_left(_BATCH_HIGHS, batch_size), len(BATCH_BUCKETS) - 1)


def context_bucket(context_len: int) -> int:
    return min(bisect.bisect_left(_CONTEXT_HIGHS, context_len), len(CONTEXT_BUCKETS) - 1)


def crossover(k_by_bucket: Sequence[tuple[Bucket, int]]) -> int | None:
    """Smallest batch size from which every larger bucket's K is 0; None if the last K is not 0."""
    threshold = None
    for bucket, k in k_by_bucket:
        if k != 0:
            threshold = None
        elif threshold is None:
            threshold = bucket.lo
    return threshold
