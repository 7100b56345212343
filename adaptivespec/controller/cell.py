"""One decision cell (context bucket x batch bucket): what was measured, and which K to use.

The bandit (river, behind `ArmPolicy`) chooses which K to try; the structure makes each try
cheap and informative:
- A step's tokens are dominated by acceptance noise (at batch 1, one row emits 1..K+1), so
  the bandit is fed the *expected* goodput of the step instead: tokens per row at that K,
  pooled over every batch size, over the step's measured seconds, times a slowly learned
  per-cell correction (observed / expected) for where the pooling is off.
- Measured arms seed each fresh bandit with their expected goodput (warm start). An
  unmeasured arm is priced with an optimistic step-cost bound: if even that is far below the
  best measured arm it is never tried (bounded exploration); otherwise the bandit tries it.
  Decisions are made among measured arms only, with hysteresis.
- In a fleet, hosts that meet a new cell together split the probes of its unmeasured arms
  (`probe_share`), instead of each paying them all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from math import erf, inf, sqrt

from adaptivespec.controller.bandit import ArmPolicy
from adaptivespec.controller.probe_share import ALONE, ProbeShare
from adaptivespec.controller.stats import EWStat
from adaptivespec.controller.step_costs import OptimisticCosts, measured_seconds

Acceptance = Callable[[int], float]  # K -> expected tokens per row per step
CostFloor = Callable[[int], float | None]  # K -> a lower bound on its step seconds, from elsewhere


@dataclass(frozen=True, slots=True)
class Neighbourhood:
    """What the nearest smaller visited batch bucket tells a cell, by the roofline's monotonicity.

    Both hold because drafting's relative cost, t(K) / t(j) for K > j, does not shrink as the
    batch grows, while acceptance does not depend on the batch.
    """

    floor: CostFloor | None = None  # step-time floors for unmeasured arms
    ruled_out: frozenset[int] = frozenset()  # arms a smaller K dominated there: dominated here too


Z = 2.0  # standard errors either side of a measured arm's mean: its upper and lower bounds
# The least relative error an estimate carries: acceptance noise is not in the step-time variance,
# and a deterministic clock (the simulator) has none at all.
MIN_RELATIVE_ERROR = 0.02


ARMS = (0, 1, 2, 3, 4, 5, 6, 8)  # the draft lengths learned over, and the oracle's sweep


@dataclass(frozen=True, slots=True)
class LearningSettings:
    arms: tuple[int, ...] = ARMS
    prune_margin: float = 0.15  # never try an arm whose optimistic bound is this far below the best
    hysteresis: float = 0.02  # a new decision must beat the current one by this much
    prior_weight: int = 2  # pseudo-observations seeding the bandit from predictions
    dwell: int = 4  # steps an explored K is held, so K does not flap step to step
    fading: float = 0.1  # step-time and reward memory
    correction_fading: float = 0.02  # observed/expected memory: slow, it corrects model error
    correction_prior: float = 30.0  # pseudo-count pulling the correction towards 1

    def __post_init__(self) -> None:
        if not self.arms or self.arms[0] != 0 or list(self.arms) != sorted(set(self.arms)):
            raise ValueError(f"arms must start at 0 and increase strictly, got {self.arms}")

    def capped(self, max_k: int) -> LearningSettings:
        """Only the arms a runner that drafts at most `max_k` tokens can run: K = 8 on a runner
        capped at 4 would be run as 4 and never credited, and an arm that is never credited
        keeps an infinite upper bound."""
        return replace(self, arms=tuple(k for k in self.arms if k <= max_k))

    @property
    def effective_samples(self) -> float:
        """How many recent samples an exponentially weighted mean stands for: (2 - f) / f."""
        return (2 - self.fading) / self.fading


@dataclass(slots=True)
class Cell:
    settings: LearningSettings
    make_bandit: Callable[[], ArmPolicy]
    rewards: dict[int, EWStat] = field(default_factory=dict)  # observed tokens/row/s over `scale`
    seconds: dict[int, EWStat] = field(default_factory=dict)  # step seconds, measured here
    fleet: dict[int, EWStat] = field(default_factory=dict)  # step seconds other hosts measured
    fleet_hosts: int = 0  # other hosts behind `fleet`
    corrections: dict[int, EWStat] = field(default_factory=dict)  # observed / expected goodput
    scale: float = 0.0  # tokens/row/s of the first measurement: makes rewards ~1
    decided: int = -1
    running: int = -1  # what the engine runs at the next step: `decided`, or an arm being explored
    samples: int = 0
    candidates: tuple[int, ...] = ()
    pulls: int = 0  # steps this cell chose K for
    dominated_pulls: int = 0  # ... with an arm whose upper bound was below the decision's lower bound
    _bandit: ArmPolicy | None = None
    _dwell_left: int = 0
    _upper: dict[int, float] = field(default_factory=dict)  # optimistic bounds at the last refresh
    ruled_out: frozenset[int] = frozenset()  # arms dominated by a smaller K, here or at a smaller batch
    _times: dict[int, EWStat] | None = None  # `seconds` and `fleet` merged, until either changes
    _fleet_changed: bool = False  # since the candidates were last pruned
    _seeded: frozenset[int] = frozenset()  # arms the bandit knows a measurement of
    _share_done_at: int | None = None  # fleet refreshes read when this host's probe share was done

    @property
    def informed(self) -> bool:
        """Measured here, or by other hosts of the fleet."""
        return self.samples > 0 or bool(self.fleet)

    @property
    def evidence_steps(self) -> int:
        """Steps measured in this cell, here and by the fleet."""
        return self.samples + sum(stat.count for stat in self.fleet.values())

    def times(self) -> dict[int, EWStat]:
        """Step seconds per K: this host's, beside the fleet's (each weighing at most one window)."""
        if not self.fleet:
            return self.seconds  # a host alone: nothing to merge on every step
        if self._times is None:
            window = self.settings.effective_samples
            arms = self.seconds.keys() | self.fleet.keys()
            self._times = {k: _merged(self.seconds.get(k), self.fleet.get(k), window) for k in arms}
        return self._times

    def set_fleet(self, seconds: dict[int, EWStat], hosts: int) -> None:
        """New evidence from other hosts: the candidates are re-pruned at the next step (an arm
        held for its dwell stops as soon as the fleet's measurements rule it out), and an arm
        only the fleet measured seeds the bandit."""
        self.fleet, self.fleet_hosts, self._times = seconds, hosts, None
        self._fleet_changed = True

    def adopt(self, acceptance: Acceptance) -> None:
        """Decides from the fleet's measurements alone, before this host runs the cell."""
        predicted = self.predictions(acceptance)
        if predicted:
            self._decide(predicted)
            self.running = self.decided

    def observe(self, k: int, tokens_per_row: float, step_seconds: float, acceptance: Acceptance) -> None:
        if self.scale <= 0.0:
            self.scale = tokens_per_row / step_seconds
        observed = tokens_per_row / step_seconds / self.scale
        expected = acceptance(k) / step_seconds / self.scale
        self.rewards.setdefault(k, EWStat(self.settings.fading)).update(observed)
        self.seconds.setdefault(k, EWStat(self.settings.fading)).update(step_seconds)
        self._times = None
        self.corrections.setdefault(k, EWStat(self.settings.correction_fading)).update(observed / expected)
        self.samples += 1
        if self._bandit is not None and k in self.candidates:
            self._bandit.update(k, expected * self.correction(k))
            self._seeded |= {k}

    def correction(self, k: int) -> float:
        stat = self.corrections.get(k)
        if stat is None or not stat.count:
            return 1.0
        prior = self.settings.correction_prior
        return (stat.count * stat.mean + prior) / (stat.count + prior)

    def predictions(self, acceptance: Acceptance) -> dict[int, float]:
        """Expected reward of each measured arm (same units as observed rewards)."""
        return self._priced(acceptance, measured_seconds)

    def optimistic(
        self,
        acceptance: Acceptance,
        floor: CostFloor | None = None,
        predicted: dict[int, float] | None = None,
    ) -> dict[int, float]:
        """An upper bound on the reward of every arm: measured arms at their mean plus Z errors."""
        predicted = self.predictions(acceptance) if predicted is None else predicted
        costs = OptimisticCosts(self.times(), floor)
        unmeasured = {k for k in self.settings.arms if k not in predicted}
        priced = self._priced(acceptance, lambda times, k: costs.seconds(k) if k in unmeasured else None)
        priced.update(predicted)
        return {k: priced[k] * (1 + Z * self._relative_error(k)) for k in self.settings.arms if k in priced}

    def lower(self, k: int, predicted: dict[int, float]) -> float:
        return predicted[k] * (1 - Z * self._relative_error(k)) if k in predicted else 0.0

    def _relative_error(self, k: int) -> float:
        """Standard error of a measured arm's mean step time, relative to it (the floor when unmeasured)."""
        stat = self.times().get(k)
        if stat is None or stat.count < 2 or stat.mean <= 0:
            return MIN_RELATIVE_ERROR
        samples = min(float(stat.count), self.settings.effective_samples)
        return max(sqrt(stat.var / samples) / stat.mean, MIN_RELATIVE_ERROR)

    def _priced(
        self, acceptance: Acceptance, seconds_of: Callable[[dict[int, EWStat], int], float | None]
    ) -> dict[int, float]:
        priced = {}
        times = self.times()
        for k in self.settings.arms:
            seconds = seconds_of(times, k)
            if seconds is not None:
                priced[k] = acceptance(k) / seconds / self.scale * self.correction(k)
        return priced

    def next_k(
        self,
        acceptance: Acceptance,
        around: Callable[[], Neighbourhood] | None = None,
        share: ProbeShare = ALONE,
    ) -> int:
        """Chooses the K for this cell's next step, and updates the decision with hysteresis.

        `around` tells what smaller batch buckets imply; it is asked only when the candidates
        are re-pruned, not on every step. `share` splits the probes of unmeasured arms with
        the fleet's other live hosts.
        """
        if not self.informed:
            return self.running
        tokens = {k: acceptance(k) for k in self.settings.arms}  # once per step, for every pricing
        predicted = self.predictions(tokens.__getitem__)
        bandit = self._bandit
        if bandit is None or self._dwell_left == 0 or self._fleet_changed:
            neighbourhood = around() if around is not None else Neighbourhood()
            self._upper = self.optimistic(tokens.__getitem__, neighbourhood.floor, predicted)
            bandit = self._refresh(predicted, self._upper, neighbourhood.ruled_out, self._fleet_changed)
            self._fleet_changed = False
        self._decide(predicted)
        if self._dwell_left > 0 and self.running in self.candidates:
            self._dwell_left -= 1
        else:
            self.running = self._pull(bandit, predicted, share)
            # An unmeasured arm needs one step to price it (acceptance is pooled); a measured one is held.
            self._dwell_left = self.settings.dwell - 1 if self.running in predicted else 0
        self.pulls += 1
        if self.running != self.decided:
            self.dominated_pulls += self._upper.get(self.running, inf) < self.lower(self.decided, predicted)
        return self.running

    def _pull(self, bandit: ArmPolicy, predicted: dict[int, float], share: ProbeShare) -> int:
        """The bandit's choice; in a fleet, an unmeasured arm comes from this host's share
        first. Once that is measured the host holds to measured arms until the fleet has had
        time to measure the rest, then probes what is left: one refresh when it showed no
        other host in this cell, two otherwise (one may have been read before they flushed)."""
        unmeasured = [k for k in self.candidates if k not in predicted]
        if not share.shared or not unmeasured:
            return bandit.pull(self.candidates)
        mine = share.probes(self.settings.arms, unmeasured, everyone=False)
        if mine:
            return mine[0]
        if self._share_done_at is None:
            self._share_done_at = share.refreshes
        refreshed = share.refreshes - self._share_done_at
        if refreshed >= 2 or (refreshed == 1 and not self.fleet_hosts):
            return share.probes(self.settings.arms, unmeasured, everyone=True)[0]
        return bandit.pull([k for k in self.candidates if k in predicted])

    def _refresh(
        self,
        predicted: dict[int, float],
        bounds: dict[int, float],
        inherited: frozenset[int],
        fleet_changed: bool = False,
    ) -> ArmPolicy:
        """Re-prunes the candidates; a changed set gets a fresh bandit, warm-started from measurements.

        So does fleet evidence of an arm the bandit has not seen measured: it is then seeded
        like one measured here, instead of staying untried, which the bandit would spend a step
        on. Other fleet evidence keeps the bandit, and what it has learned from its pulls.

        An arm stays a candidate while its upper bound is within `prune_margin` of the best
        prediction and above the decision's lower bound: exploration never spends a step on an
        arm the measurements already show to be worse. Arms above the decision whose bound is
        below even the margin, or that a smaller K dominates, are ruled out at larger batches
        too (`inherited` there). K = 0, the cheapest step and the baseline every other arm must
        beat, is always measured before it can be pruned: its bound is inferred from the other
        arms, and an optimistic acceptance estimate would otherwise rule it out unseen.
        """
        lowers = {j: 2 * predicted[j] - bounds[j] for j in predicted}  # bounds are symmetric about it
        margin_floor = (1 - self.settings.prune_margin) * max(predicted.values())
        floor = max(margin_floor, lowers.get(self.decided, 0.0))
        pruned_above = {k for k, bound in bounds.items() if k > self.decided and bound < margin_floor}
        self.ruled_out = self._dominated(lowers) | inherited | pruned_above
        candidates = tuple(
            k
            for k, bound in bounds.items()
            if k == self.decided
            or (bound >= floor and k not in self.ruled_out)
            or (k == 0 and k not in predicted)
        )
        unseeded = fleet_changed and bool(predicted.keys() - self._seeded)
        if self._bandit is not None and candidates == self.candidates and not unseeded:
            return self._bandit
        self.candidates = candidates
        bandit = self.make_bandit()
        for k in candidates:
            for _ in range(self.settings.prior_weight if k in predicted else 0):
                bandit.update(k, predicted[k])
        self._bandit, self._seeded = bandit, frozenset(predicted)
        return bandit

    def _dominated(self, lowers: dict[int, float]) -> frozenset[int]:
        """Arms whose upper bound is below some smaller K's lower bound (K = 0 is never dominated)."""
        dominated, best_lower_below = set(), 0.0
        for k in sorted(self._upper):
            if self._upper[k] < best_lower_below:
                dominated.add(k)
            best_lower_below = max(best_lower_below, lowers.get(k, 0.0))
        return frozenset(dominated)

    def _decide(self, predicted: dict[int, float]) -> None:
        best = max(predicted, key=predicted.__getitem__)
        if self.decided not in predicted:
            self.decided = best
            return
        if predicted.get(best, 0.0) > (1 + self.settings.hysteresis) * predicted.get(self.decided, 0.0):
            self.decided = best

    def confidence(self, predicted: dict[int, float]) -> float:
        """How sure the decision is: P(decided beats the runner-up), normal approximation."""
        others = [k for k in predicted if k != self.decided]
        times = self.times()
        decided = times.get(self.decided)
        if decided is None or not decided.count:
            return 0.0
        if not others:
            return 1.0
        runner_up = max(others, key=lambda k: predicted.get(k, 0.0))
        gap = predicted.get(self.decided, 0.0) - predicted.get(runner_up, 0.0)
        measured = times.get(runner_up)
        relative = [1 / sqrt(s.count) for s in (decided, measured) if s is not None and s.count]
        unmeasured = 0 if measured else 1
        spread = 0.05 * predicted.get(self.decided, 1.0) * sqrt(sum(r * r for r in relative) + unmeasured)
        return 0.5 * (1 + erf(gap / (spread * sqrt(2)))) if spread > 0 else 1.0


def _merged(own: EWStat | None, pooled: EWStat | None, window: float) -> EWStat:
    """One mean and variance from two: each side weighs its count, at most `window`."""
    if own is None or not own.count:
        return pooled if pooled is not None else EWStat()
    if pooled is None or not pooled.count:
        return own
    w_own, w_pooled = min(own.count, window), min(pooled.count, window)
    total = w_own + w_pooled
    mean = (w_own * own.mean + w_pooled * pooled.mean) / total
    spread = w_own * (own.var + (own.mean - mean) ** 2) + w_pooled * (pooled.var + (pooled.mean - mean) ** 2)
    return EWStat(own.fading, mean, spread / total, own.count + pooled.count)


def initial_k(arms: Sequence[int], acceptance: Acceptance, slope: float) -> int:
    """Before any measurement: the K that maximises tokens per row / (1 + slope K)."""
    return max(arms, key=lambda k: acceptance(k) / (1.0 + slope * k))
