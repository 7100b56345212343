"""Hosts that meet a new cell at the same time split its probes instead of each paying them all.

Every arm of a new cell that may beat its decision is probed once before the bandit can rule
on it, and a probe of a poor arm is a step at a fraction of the best goodput. A lone host pays
all of them. Hosts of a fleet that reach the cell together, a fleet rolled out at once or a
load that hits every host behind a balancer, would each pay the same probes, since they only
see each other's measurements at the next refresh. So each live host takes a share of the
arms, by its rank among the live host ids (every host sorts the same ids, so the shares do not
overlap), and probes its share first. Once its share is measured it waits a refresh or two,
holding what it measured best (see `Cell._pull`), and then probes whatever is still
unmeasured, starting after its share: a peer that died, or one that never reached this cell,
costs that host a short wait.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from adaptivespec.errors import ConfigError

T = TypeVar("T")  # an arm


@dataclass(frozen=True, slots=True)
class ProbeShare:
    rank: int  # this host's place among the live host ids, sorted
    hosts: int  # live hosts of this (model, hardware), this one included
    refreshes: int = 0  # fleet views read so far: a host done with its share waits for the next

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.hosts:
            raise ConfigError(f"rank must be in [0, hosts), got rank {self.rank} of {self.hosts}")

    @property
    def shared(self) -> bool:
        return self.hosts > 1

    def turned(self, turn: int) -> ProbeShare:
        """The share for one cell: ranks move round by `turn` from cell to cell, so that the
        probes of the arms that cost most (K = 0 at small batch) do not all fall on one host."""
        return self if not self.shared else replace(self, rank=(self.rank + turn) % self.hosts)

    def probes(self, arms: Sequence[T], unmeasured: Sequence[T], everyone: bool) -> list[T]:
        """The unmeasured arms this host probes, in order: its share alone, or all of them
        starting from its share (`everyone`). `arms` is in the same order on every host."""
        start, end = self._bounds(len(arms))
        order = [*arms[start:], *arms[:start]]
        allowed = order if everyone else order[: end - start]
        waiting = set(unmeasured)
        return [k for k in allowed if k in waiting]

    def _bounds(self, count: int) -> tuple[int, int]:
        """This host's slice of `count` arms: [start, end), empty when there are more hosts."""
        return self.rank * count // self.hosts, (self.rank + 1) * count // self.hosts


ALONE = ProbeShare(rank=0, hosts=1)
