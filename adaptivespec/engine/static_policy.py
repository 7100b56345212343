"""Static speculation policies: a draft length K (and a drafter) per batch size.

They implement the engine's `SpecPolicy` (engine/spec_policy.py). Policies are immutable;
changing policy means swapping the engine's reference.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from adaptivespec.errors import ConfigError


@dataclass(frozen=True, slots=True)
class FixedK:
    """The same K at every batch size, with one drafter (None: the runner's first); K = 0 turns
    speculation off."""

    k: int
    method: str | None = None

    def __post_init__(self) -> None:
        if self.k < 0:
            raise ConfigError(f"K must be >= 0, got {self.k}")

    def k_for(self, batch_size: int, context_len: int) -> int:
        return self.k

    def method_for(self, batch_size: int, context_len: int) -> str | None:
        return self.method


@dataclass(frozen=True, slots=True)
class TableEntry:
    lo: int  # inclusive batch size
    hi: int  # inclusive batch size
    k: int


@dataclass(frozen=True, slots=True)
class StaticTable:
    """A hand-written batch-size table, as vLLM's `num_speculative_tokens_per_batch_size`.

    Batch sizes not covered by any entry get `default_k`.
    """

    entries: tuple[TableEntry, ...]
    default_k: int = 0

    def __post_init__(self) -> None:
        ordered = sorted(self.entries, key=lambda e: e.lo)
        for entry in ordered:
            if entry.lo < 1 or entry.hi < entry.lo or entry.k < 0:
                raise ConfigError(f"bad table entry {entry}: need 1 <= lo <= hi and k >= 0")
        for before, after in zip(ordered, ordered[1:], strict=False):
            if after.lo <= before.hi:
                raise ConfigError(f"table entries {before} and {after} overlap")
        object.__setattr__(self, "entries", tuple(ordered))

    @classmethod
    def parse(cls, triples: Iterable[tuple[int, int, int]], default_k: int = 0) -> StaticTable:
        return cls(tuple(TableEntry(lo, hi, k) for lo, hi, k in triples), default_k)

    def k_for(self, batch_size: int, context_len: int) -> int:
        for entry in self.entries:
            if entry.lo <= batch_size <= entry.hi:
                return entry.k
        return self.default_k

    def method_for(self, batch_size: int, context_len: int) -> str | None:
        return None  # the runner's first drafter: a table names draft lengths only
