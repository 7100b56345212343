"""One decision cell (context bucket x batch bucket): which arm to run next, and the decision.

An arm is a drafter and a draft length K, or speculation off (arms.py). What the cell
measured is its `CellEvidence`; this module is the rule that acts on it.

Exploration is an upper-confidence rule of our own, over bounds that hold on a shared machine:
- An arm's price is its *expected* goodput (arm_prices.py): tokens per row at that arm, its
  drafter's acceptance pooled over every batch size and every K, over the arm's robust step
  time (the lower quartile of its recent steps, `RobustStat`, each first moved to the width
  the arm typically verifies: verify_widths.py). A step's own tokens
  (acceptance noise) and seconds (another process's stall) move it little. There is no per-arm
  correction of the tokens: each arm runs while other requests are in the batch, and one
  learned apart per arm carried which requests those were into the comparison
  (docs/decisions.md).
- Bounds widen with measured noise: a measured arm's by its standard error; one measured only
  a few times also by the machine's stall tail (`StallTail`), since its steps may have stalled;
  and the decision's neighbours along K, once each is measured, are looked at a second time
  before one step is taken at its word (arm_prices.py).
- An unmeasured arm is priced with an optimistic step-cost bound (step_costs.py, and floors
  from a smaller batch): if even that is far below the best measured arm it is never tried,
  and while it is below what the decision is estimated to keep it waits (a short horizon has
  no step to spare for an arm that could at best tie). Unmeasured arms are tried nearest the
  decision first: goodput over one drafter's K is single-peaked in the roofline, and each
  neighbour measured tightens the bound on the arms beyond it; another drafter at the
  decision's K counts as one step away.
- With several drafters, each drafter's acceptance is uncertain on its own: another drafter's
  arms are bounded with what it may yet keep, and so is the decision, which stands for its own
  drafter against them (its other K share its curve and are bounded as measured).
- Candidates are re-pruned (pruning.py) when a dwell ends or the fleet's evidence changes.
- The next step runs the candidate with the highest upper bound (the decision on a tie); a
  well-measured arm is then held for `dwell` steps. Decisions are made among measured arms
  only, with hysteresis.
- Switching a drafter on after it sat out a spell (speculation off, or another drafter) costs a
  catch-up, kept per drafter apart from the arm's step time (a draft model a few steps behind
  takes them in its first forward instead, at a small share of a step: proposers.py). An
  exploration that switches is made only if its best case pays the switch, and is held until
  the switch is amortised.
- In a fleet, hosts that meet a new cell together split the probes of its unmeasured arms
  (`probe_share`), instead of each paying them all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from math import ceil, erf, inf, sqrt

from adaptivespec.controller.acceptance import Acceptance
from adaptivespec.controller.arm_prices import ArmPrices, CostBound
from adaptivespec.controller.arms import OFF, Arm, distance
from adaptivespec.controller.evidence import CellEvidence
from adaptivespec.controller.learning_settings import LearningSettings
from adaptivespec.controller.probe_share import ALONE, ProbeShare
from adaptivespec.controller.pruning import prune
from adaptivespec.controller.robust_stat import MIN_ROBUST
from adaptivespec.controller.stall_tail import PRIOR_TAIL
from adaptivespec.controller.stats import EWStat, samples_of


@dataclass(frozen=True, slots=True)
class Neighbourhood:
    """What the nearest smaller visited batch bucket tells a cell, by the roofline's monotonicity.

    All three hold because drafting's relative cost, t(K) / t(j) for K > j, does not shrink as the
    batch grows, while acceptance does not depend on the batch.
    """

    floor: CostBound | None = None  # step-time floors for unmeasured arms
    ruled_out: frozenset[Arm] = frozenset()  # arms a smaller K dominated there: dominated here too
    ceiling: CostBound | None = None  # step-time ceilings for measured arms, from a larger arm here


@dataclass(slots=True)
class Cell:
    settings: LearningSettings
    arms: tuple[Arm, ...]  # what this cell chooses among (arms.arm_space)
    evidence: CellEvidence
    decided: Arm = OFF
    running: Arm = OFF  # what the engine runs at the next step: `decided`, or an arm being explored
    candidates: tuple[Arm, ...] = ()
    pulls: int = 0  # steps this cell chose an arm for
    dominated_pulls: int = 0  # ... with an arm whose upper bound was below the decision's lower bound
    ruled_out: frozenset[Arm] = frozenset()  # arms dominated by a smaller K, here or at a smaller batch
    _dwell_left: int = 0
    _upper: dict[Arm, float] = field(default_factory=dict)  # optimistic bounds at the last refresh
    _fleet_changed: bool = False  # since the candidates were last pruned
    _share_done_at: int | None = None  # fleet refreshes read when this host's probe share was done
    _lead_over_off: float | None = None  # the decision's estimate over speculation off's, both measured

    @classmethod
    def starting_at(cls, settings: LearningSettings, arms: tuple[Arm, ...], start: Arm) -> Cell:
        """A cell nothing was measured in, running `start` (a prior or a neighbour's decision)."""
        return cls(settings, arms, CellEvidence(settings), decided=start, running=start)

    @property
    def informed(self) -> bool:
        return self.evidence.informed

    @property
    def lent_to_larger_batch(self) -> Arm:
        """The decision a larger batch bucket starts from while it has measured nothing.

        At a larger batch drafting's relative cost does not shrink (`Neighbourhood`), so a
        decision that keeps no more than the hysteresis over speculation off here keeps no more
        there: the larger batch starts from off, the shorter step, instead of running a tie on
        every one of its rows until the tie is judged."""
        lead = self._lead_over_off
        if self.decided.k and lead is not None and lead <= 1 + self.settings.hysteresis:
            return OFF
        return self.decided

    def set_fleet(self, seconds: dict[Arm, EWStat], hosts: int, reward_scale: float) -> None:
        """New evidence from other hosts: the candidates are re-pruned at the next step (an arm
        held for its dwell stops as soon as the fleet's measurements rule it out)."""
        self.evidence.set_fleet(seconds, hosts, reward_scale)
        self._fleet_changed = True

    def restore(self, decided: Arm | None) -> None:
        """A saved decision (None: one this controller cannot run) becomes the running arm too."""
        if decided is not None:
            self.decided = self.running = decided

    def adopt(self, acceptance: Acceptance) -> None:
        """Decides from the fleet's measurements alone, before this host runs the cell."""
        predicted = self.predictions(acceptance)
        if predicted:
            self._decide(predicted)
            self.running = self.decided

    def prices(self, acceptance: Acceptance, tail: float = PRIOR_TAIL) -> ArmPrices:
        return self.evidence.prices(self.arms, acceptance, tail)

    def predictions(self, acceptance: Acceptance) -> dict[Arm, float]:
        """Expected reward of each measured arm (same units as observed rewards)."""
        return self.prices(acceptance).predicted()

    def next_k(
        self,
        acceptance: Acceptance,
        around: Callable[[], Neighbourhood] | None = None,
        share: ProbeShare = ALONE,
        tail: float = PRIOR_TAIL,
    ) -> Arm:
        """Chooses the arm for this cell's next step, and updates the decision with hysteresis.

        `around` tells what smaller batch buckets imply; it is asked only when the candidates
        are re-pruned, not on every step. `share` splits the probes of unmeasured arms with
        the fleet's other live hosts. `tail` is the machine's stall tail (stall_tail.py).
        """
        if not self.informed:
            return self.running
        prices = self.prices(acceptance, tail)
        predicted = prices.predicted()
        if self._dwell_left == 0 or self._fleet_changed or not self.candidates:
            neighbourhood = around() if around is not None else Neighbourhood()
            leading = _leading(self.decided, predicted)
            self._upper = prices.optimistic(
                predicted, neighbourhood.floor, leading, self.decided, neighbourhood.ceiling
            )
            lowers = {j: prices.lower(j, predicted) for j in predicted}
            pruned = prune(
                self._upper,
                lowers,
                predicted,
                decided=self.decided,
                support=prices.support,
                inherited=neighbourhood.ruled_out,
                margin=self.settings.prune_margin,
            )
            self.candidates, self.ruled_out = pruned.candidates, pruned.ruled_out
            self._fleet_changed = False
        self._decide(predicted)
        off = predicted.get(OFF, 0.0)
        self._lead_over_off = predicted[self.decided] / off if off > 0 and self.decided in predicted else None
        if self._dwell_left > 0 and self.running in self.candidates:
            self._dwell_left -= 1
        else:
            was = self.running
            self.running = self._priced_switch(was, self._pull(predicted, share), predicted)
            # An arm measured too few times to judge needs one step more; a judged one is held,
            # and longer when switching to it cost a catch-up.
            judged = (
                self.running in predicted
                and samples_of(self.evidence.times().get(self.running)) >= MIN_ROBUST
            )
            self._dwell_left = self._dwell(was, self.running) - 1 if judged else 0
        self.pulls += 1
        if self.running != self.decided:
            lower = prices.lower(self.decided, predicted)
            self.dominated_pulls += self._upper.get(self.running, inf) < lower
        return self.running

    def _pull(self, predicted: dict[Arm, float], share: ProbeShare) -> Arm:
        """Unmeasured candidates first, nearest the decision; then the highest upper bound.

        An unmeasured arm is probed only while its optimistic bound is above what the decision
        is estimated to keep: one below could at best tie it, and a short horizon has no step
        to spare for it (with many arms, most of them). It stays a candidate, and is probed
        once the decision's estimate falls below its bound.

        In a fleet, an unmeasured arm comes from this host's share first. Once that is measured
        the host holds to measured arms until the fleet has had time to measure the rest, then
        probes what is left: one refresh when it showed no other host in this cell, two
        otherwise (one may have been read before they flushed)."""
        standing = predicted.get(self.decided, -inf)
        unmeasured = [
            k for k in self.candidates if k not in predicted and self._upper.get(k, inf) >= standing
        ]
        measured = [k for k in self.candidates if k in predicted]
        if not unmeasured:
            return self._most_promising(measured)  # the decision is among them
        if not share.shared:
            return min(unmeasured, key=lambda k: (distance(k, self.decided), k.k, k))
        mine = share.probes(self.arms, unmeasured, everyone=False)
        if mine:
            return mine[0]
        if self._share_done_at is None:
            self._share_done_at = share.refreshes
        refreshed = share.refreshes - self._share_done_at
        if refreshed >= 2 or (refreshed == 1 and not self.evidence.fleet_hosts):
            return share.probes(self.arms, unmeasured, everyone=True)[0]
        return self._most_promising(measured)

    def _most_promising(self, arms: Sequence[Arm]) -> Arm:
        return max(arms, key=lambda k: (self._upper.get(k, inf), k == self.decided))

    def _switch_seconds(self, was: Arm, to: Arm) -> float:
        """What moving from `was` to `to` costs in `to`'s drafter catching up: only when it
        starts drafting again (from speculation off, or from another drafter)."""
        if to.k == 0 or was.method == to.method:
            return 0.0
        return self.evidence.switch_seconds(to.method)

    def _priced_switch(self, was: Arm, choice: Arm, predicted: dict[Arm, float]) -> Arm:
        """The choice, unless it is an exploration whose best case does not pay its switch."""
        switch = self._switch_seconds(was, choice)
        seconds = self.evidence.times().get(choice)
        if not switch or choice == self.decided or self.decided not in predicted or seconds is None:
            return choice  # no switch to pay, or an unmeasured arm: its one step measures it
        held = self._dwell(was, choice) if samples_of(seconds) >= MIN_ROBUST else 1
        best_case = self._upper.get(choice, inf) * held * seconds.mean / (held * seconds.mean + switch)
        return choice if best_case >= predicted[self.decided] else self.decided

    def _dwell(self, was: Arm, to: Arm) -> int:
        """Steps to hold `to`: the usual dwell, or long enough that a switch's catch-up is at
        most `switch_share` of them."""
        switch, seconds = self._switch_seconds(was, to), self.evidence.times().get(to)
        if not switch or seconds is None or not seconds.count or seconds.mean <= 0:
            return self.settings.dwell
        amortise = ceil(switch / (self.settings.switch_share * seconds.mean))
        return max(self.settings.dwell, min(amortise, self.settings.max_dwell))

    def _decide(self, predicted: dict[Arm, float]) -> None:
        best = max(predicted, key=predicted.__getitem__)
        if self.decided not in predicted:
            self.decided = best
            return
        if predicted.get(best, 0.0) > (1 + self.settings.hysteresis) * predicted.get(self.decided, 0.0):
            self.decided = best

    def confidence(self, acceptance: Acceptance) -> float:
        """How sure the decision is: P(decided beats the runner-up), normal approximation, from
        the two arms' measured step-time errors."""
        prices = self.prices(acceptance)
        predicted = prices.predicted()
        others = [k for k in predicted if k != self.decided]
        if self.decided not in predicted:
            return 0.0
        if not others:
            return 1.0
        runner_up = max(others, key=predicted.__getitem__)
        gap = predicted[self.decided] - predicted[runner_up]
        errors = [predicted[k] * prices.relative_error(k) for k in (self.decided, runner_up)]
        spread = sqrt(sum(e * e for e in errors))
        return 0.5 * (1 + erf(gap / (spread * sqrt(2)))) if spread > 0 else 1.0


def _leading(decided: Arm, predicted: Mapping[Arm, float]) -> str:
    """The decision's drafter; when the decision is off, the drafter of the best measured arm."""
    if decided.k or not predicted:
        return decided.method
    return max(predicted, key=lambda a: (a.k > 0, predicted[a])).method


def initial_arm(arms: Sequence[Arm], acceptance: Acceptance, slope: float) -> Arm:
    """Before any measurement: the arm that maximises tokens per row / (1 + slope K) (the first
    drafter's on a tie)."""
    return max(arms, key=lambda k: acceptance(k) / (1.0 + slope * k.k))
