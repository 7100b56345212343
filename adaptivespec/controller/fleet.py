"""Fleet evidence: what this host measured, as totals other hosts can add up, and what they measured.

Hosts pool sufficient statistics, not decisions: per (cell, arm) the step count and the sums and
squares of goodput and step seconds; per (context bucket, drafter, draft position) the rows that
kept a draft and the rows at risk of losing it. Sums add across hosts exactly, so the database keeps
them summed (see `store.fleet`), and a retried flush of absolute totals is idempotent.

What a host folds in is everyone else's totals plus its own from before this start (which the
live cells no longer hold); the live cells keep only what this process measured. So nothing is
counted twice, however often the view is refreshed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from adaptivespec.controller.arms import Arm, arm
from adaptivespec.controller.probe_share import ALONE, ProbeShare
from adaptivespec.controller.stats import EWStat

ArmKey = tuple[int, int, str, int]  # (context bucket, batch bucket, drafter ("" at K = 0), K)
PositionKey = tuple[int, str, int]  # (context bucket, drafter, draft position from 1)
# Pooled rows weigh at most this many local rows' worth per position: the local estimate
# forgets (it follows workload drift) and a fleet's cumulative millions would freeze it.
MAX_POOLED_ROWS = 2000.0


@dataclass(slots=True)
class ArmTotals:
    steps: int = 0
    reward_sum: float = 0.0  # tokens per row per second
    reward_sq: float = 0.0
    seconds_sum: float = 0.0  # step seconds
    seconds_sq: float = 0.0

    def add(self, reward: float, seconds: float) -> None:
        self.steps += 1
        self.reward_sum += reward
        self.reward_sq += reward * reward
        self.seconds_sum += seconds
        self.seconds_sq += seconds * seconds

    def plus(self, other: ArmTotals) -> ArmTotals:
        return ArmTotals(
            self.steps + other.steps,
            self.reward_sum + other.reward_sum,
            self.reward_sq + other.reward_sq,
            self.seconds_sum + other.seconds_sum,
            self.seconds_sq + other.seconds_sq,
        )

    def minus(self, other: ArmTotals) -> ArmTotals:
        return ArmTotals(
            self.steps - other.steps,
            self.reward_sum - other.reward_sum,
            self.reward_sq - other.reward_sq,
            self.seconds_sum - other.seconds_sum,
            self.seconds_sq - other.seconds_sq,
        )

    def seconds(self) -> EWStat:
        """Mean and variance of the step seconds, as the cells keep them."""
        mean = self.seconds_sum / self.steps
        return EWStat(mean=mean, var=max(0.0, self.seconds_sq / self.steps - mean * mean), count=self.steps)

    @property
    def reward_mean(self) -> float:
        return self.reward_sum / self.steps


@dataclass(slots=True)
class PositionTotals:
    kept: int = 0
    at_risk: int = 0

    def plus(self, other: PositionTotals) -> PositionTotals:
        return PositionTotals(self.kept + other.kept, self.at_risk + other.at_risk)


@dataclass(frozen=True, slots=True)
class FleetTotals:
    """Totals of one host, or summed over hosts. Read-only by convention once built."""

    arms: Mapping[ArmKey, ArmTotals] = field(default_factory=dict)
    acceptance: Mapping[PositionKey, PositionTotals] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return sum(a.steps for a in self.arms.values())

    def plus(self, other: FleetTotals) -> FleetTotals:
        arms = dict(self.arms)
        for key, totals in other.arms.items():
            arms[key] = arms[key].plus(totals) if key in arms else totals
        acceptance = dict(self.acceptance)
        for pos, counts in other.acceptance.items():
            acceptance[pos] = acceptance[pos].plus(counts) if pos in acceptance else counts
        return FleetTotals(arms, acceptance)


@dataclass(frozen=True, slots=True)
class FleetView:
    """What the other hosts of this (model, hardware) measured, as of one refresh."""

    totals: FleetTotals
    hosts: int  # other hosts with any evidence
    hosts_by_cell: Mapping[tuple[int, int], int]  # other hosts with evidence in each cell
    share: ProbeShare = ALONE  # this host's share of the probes among the live hosts


class Tally:
    """This host's cumulative totals under its host id, over all its lives (its earlier lives'
    totals are the baseline it reads back at start), and which of them changed since a flush."""

    def __init__(self, baseline: FleetTotals | None = None) -> None:
        self.baseline = baseline or FleetTotals()
        self._arms: dict[ArmKey, ArmTotals] = {}  # this life only
        self._acceptance: dict[PositionKey, PositionTotals] = {}
        self._changed_arms: set[ArmKey] = set()
        self._changed_positions: set[PositionKey] = set()

    def record(
        self, key: ArmKey, tokens_per_row: float, seconds: float, rows: int, kept_at_least: tuple[int, ...]
    ) -> None:
        """One step at K = key[3] with drafter key[2] over `rows` rows; `kept_at_least[j - 1]` rows
        kept >= j drafts."""
        self._arms.setdefault(key, ArmTotals()).add(tokens_per_row / seconds, seconds)
        self._changed_arms.add(key)
        previous = rows
        ctx, _, method, k = key
        for j in range(1, k + 1):
            kept = kept_at_least[j - 1] if j <= len(kept_at_least) else 0
            position = (ctx, method, j)
            counts = self._acceptance.setdefault(position, PositionTotals())
            counts.kept += kept
            counts.at_risk += previous
            self._changed_positions.add(position)
            previous = kept

    @property
    def steps(self) -> int:
        """Steps of this life."""
        return sum(a.steps for a in self._arms.values())

    @property
    def all_steps(self) -> int:
        """Steps of every life: what the host's row in the fleet counts."""
        return self.baseline.steps + self.steps

    def changed_cells(self) -> set[tuple[int, int]]:
        """(context bucket, batch bucket) of every row the next flush writes."""
        return {(ctx, batch) for ctx, batch, _, _ in self._changed_arms}

    def take_changes(self) -> FleetTotals:
        """The absolute totals (all lives) of every row that changed since the last flush; they
        count as flushed until `give_back`. Absolute, so a flush retried after it did commit
        writes the same numbers again: nothing is counted twice."""
        arms = {key: self._absolute_arm(key) for key in self._changed_arms}
        positions = {pos: self._absolute_position(pos) for pos in self._changed_positions}
        self._changed_arms, self._changed_positions = set(), set()
        return FleetTotals(arms, positions)

    def give_back(self, changes: FleetTotals) -> None:
        """After a failed flush: those rows are written again by the next one (with newer totals)."""
        self._changed_arms |= changes.arms.keys()
        self._changed_positions |= changes.acceptance.keys()

    def _absolute_arm(self, key: ArmKey) -> ArmTotals:
        return self._arms[key].plus(self.baseline.arms.get(key, ArmTotals()))

    def _absolute_position(self, pos: PositionKey) -> PositionTotals:
        return self._acceptance[pos].plus(self.baseline.acceptance.get(pos, PositionTotals()))


def by_cell(
    totals: FleetTotals, drafter: Callable[[str], str], arms: Collection[Arm]
) -> dict[tuple[int, int], dict[Arm, ArmTotals]]:
    """The arm totals per (context bucket, batch bucket), of the arms among `arms`;
    `drafter` names a row's drafter (rows saved before drafters were named carry none)."""
    out: dict[tuple[int, int], dict[Arm, ArmTotals]] = {}
    for (ctx, batch, method, k), arm_totals in totals.arms.items():
        where = arm(drafter(method), k)
        if where in arms and arm_totals.steps > 0:
            out.setdefault((ctx, batch), {})[where] = arm_totals
    return out


def pooled_positions(
    acceptance: Mapping[PositionKey, PositionTotals],
) -> dict[PositionKey, tuple[float, float]]:
    """(kept, at risk) per position, scaled down where the fleet has more than MAX_POOLED_ROWS."""
    out = {}
    for pos, counts in acceptance.items():
        scale = min(1.0, MAX_POOLED_ROWS / counts.at_risk) if counts.at_risk else 1.0
        out[pos] = (counts.kept * scale, counts.at_risk * scale)
    return out
