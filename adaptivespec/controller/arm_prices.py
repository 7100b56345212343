"""What each arm of a cell is worth, as one step sees it: a point estimate and its bounds.

An arm's price is its expected goodput: tokens per row at that arm (its drafter's pooled
acceptance at that K) over its step seconds, relative to the cell's scale. Bounds are
symmetric about it by the arm's measured error, except in four cases:
- the upper bound of another drafter's arm than the decision's takes the tokens that drafter
  may yet keep (`hoped`: each acceptance rate a standard error up), so that a drafter measured
  on a few rows is not ruled out by its prior;
- an arm never measured gets an optimistic step time from the cost model (`OptimisticCosts`:
  its drafter's chain, a smaller batch, and what any drafter's steps spent verifying at its
  K), so that it is tried unless even that cannot win;
- an arm measured only a few times may have met a stall (a step that lost its core), which
  only ever makes a step slower: its upper bound is widened by the machine's measured stall
  tail, shared out over its samples, and on a noisy machine an arm measured once is bounded
  no lower than the cost model would bound it unmeasured, so one unlucky step does not price
  a good arm out; on any machine that stalls at all, so is an arm measured once next to the
  decision on its chain (what the decision stands on), so that it runs a second time;
- on any machine, an arm measured once whose step time is above what a larger arm measured
  here and a smaller batch's ratio allow (`relative_cost_ceiling`) is bounded at that ceiling,
  since one slow step can price out the arm a whole bucket should run (speculation off, most
  often). The leading drafter's next K past the decision also takes what its curve may yet
  keep beyond the decision's, until it is judged here; past speculation off, for as long as
  the first draft's rate is unsure (see `optimistic`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from math import sqrt

from adaptivespec.controller.arms import OFF, Arm, chain
from adaptivespec.controller.robust_stat import MIN_ROBUST
from adaptivespec.controller.stats import Summary, samples_of
from adaptivespec.controller.step_costs import OptimisticCosts

CostBound = Callable[[Arm], float | None]  # arm -> a bound on its step seconds from elsewhere, or None

Z = 2.0  # standard errors either side of a measured arm's mean: its upper and lower bounds
# The least relative error an estimate carries: acceptance noise is not in the step-time variance,
# and a deterministic clock (the simulator) has none at all.
MIN_RELATIVE_ERROR = 0.02
# A machine whose slow steps (90th percentile) take 1.5x its typical one: there a single step
# may well have stalled, and is not enough to price an arm out alone. On a quieter one it is.
NOISY_TAIL = 0.5
LINE_SAMPLES = 4.0  # the steps the cost line drawn through an arm's neighbours counts for


@dataclass(frozen=True, slots=True)
class ArmPrices:
    arms: tuple[Arm, ...]
    times: Mapping[Arm, Summary]  # step seconds per measured arm
    tokens: Mapping[Arm, float]  # expected tokens per row per step, per arm
    hoped: Mapping[Arm, float]  # ... at its drafter's optimistic acceptance (>= tokens)
    scale: float  # tokens/row/s that a reward of 1 stands for
    window: float  # samples an estimate stands on at most
    tail: float  # the machine's stall tail: how much slower its slow steps are than its typical
    seconds: Mapping[Arm, float]  # each measured arm's step seconds, shrunk towards the cost line
    support: Mapping[Arm, float]  # the steps each of those stands on, the line's share included
    verify: Mapping[Arm, Summary]  # seconds each measured arm's steps spent verifying (OFF: whole)

    @classmethod
    def of(
        cls,
        arms: tuple[Arm, ...],
        times: Mapping[Arm, Summary],
        tokens: Mapping[Arm, float],
        *,
        scale: float,
        window: float,
        tail: float,
        hoped: Mapping[Arm, float] | None = None,
        verify: Mapping[Arm, Summary] | None = None,
    ) -> ArmPrices:
        seconds, support = _shrunk(times)
        return cls(
            arms,
            times,
            tokens,
            tokens if hoped is None else hoped,
            scale,
            window,
            tail,
            seconds,
            support,
            verify or {},
        )

    def predicted(self) -> dict[Arm, float]:
        """Expected reward of each measured arm."""
        return {k: self._price(k, self.seconds[k]) for k in self.arms if k in self.seconds}

    def optimistic(
        self,
        predicted: dict[Arm, float],
        floor: CostBound | None = None,
        drafting: str = "",
        standing: Arm | None = None,
        ceiling: CostBound | None = None,
    ) -> dict[Arm, float]:
        """An upper bound on the reward of every arm that can be priced. `drafting` is the
        leading drafter (the decision's, or the best measured one's when the decision is off):
        its own arms share one acceptance curve, whose error moves them together, and they are
        bounded as they are measured; another drafter's curve is an independent estimate, and
        its arms are bounded with what that drafter may yet keep. `standing` (the decision)
        stands for the leading drafter against the others, so it is bounded with what its own
        drafter may yet keep where another drafter is priced: otherwise a rival's hope, which
        never falls below a few percent, outbids a decision that is never run again. `floor`
        bounds unmeasured arms' step times from below, `ceiling` measured arms' from above."""
        # Unmeasured arms are bounded from the measured arms' figures; on a noisy machine from
        # each one's best case, as its own upper bound prices it (less its error and the stall a
        # few steps may hold), so that one stalled step does not price out the arms beyond it.
        noisy = self.tail >= NOISY_TAIL
        best_case = {
            j: self.seconds[j] / (1 + self._upper_error(j)) if noisy else self.seconds[j] for j in predicted
        }
        costs = OptimisticCosts(best_case, floor, self._verify_best(best_case))
        bounds = {}
        rivals = any(k.k and k.method != drafting for k in self.arms)
        # The leading drafter's curve moves as one up to the decision's K, which every step at
        # the decision measures; the next K's last position is measured only when it runs, so
        # until that arm stands on enough steps here to be judged, it is bounded with what the
        # position may yet keep (goodput along K is single-peaked: the curve's unmeasured tail
        # is then learned one arm at a time, and not re-explored for as long as a cell lives).
        # With the decision off, that next arm's position is the first draft, which a step at
        # off never measures: it keeps what the first draft may yet keep however many steps it
        # ran here, and that hope narrows only as drafting steps (at any batch) measure rows, or
        # a few unlucky rows at a small batch would hold the cell at off for as long as it lives.
        lead = standing if standing is not None and standing.method == drafting else OFF
        beyond = None
        if standing is not None:
            beyond = next((k for k in chain(self.arms, drafting) if k.k > lead.k), None)
            if beyond is not None and standing.k and samples_of(self.times.get(beyond)) >= MIN_ROBUST:
                beyond = None
        # The decision stands on its neighbours along its chain being worse (goodput is
        # single-peaked in K): a neighbour measured once is looked at twice before it is taken at
        # its word, on any machine that stalls at all, since one stalled step would otherwise
        # keep the decision off the better arm for as long as the cell lives.
        second_look = _neighbours(self.arms, standing, drafting) if self.tail > MIN_RELATIVE_ERROR else ()
        for k in self.arms:
            own_curve = k.method == drafting and not (rivals and k == standing)
            hope = 1.0 if own_curve else self.hoped[k] / self.tokens[k]
            if own_curve and k == beyond:
                lead_hope = self.hoped.get(lead, 1.0) / self.tokens.get(lead, 1.0)
                hope = max(1.0, self.hoped[k] / self.tokens[k] / lead_hope)
            if k in predicted:
                bounds[k] = predicted[k] * hope * (1 + self._upper_error(k))
                # An arm measured once may have met a stall, and is bounded at the cheapest step
                # the cost model allows it: on a noisy machine, what it would bound it by
                # unmeasured; on any machine, the ceiling a larger arm and a smaller batch set
                # (a machine quiet enough to take one step at its word still stalls at times).
                if samples_of(self.times.get(k)) < 2:
                    allowed = [
                        seconds
                        for seconds in (
                            _unmeasured_seconds(k, best_case, floor, self._verify_best(best_case, k))
                            if noisy or k in second_look
                            else None,
                            ceiling(k) if ceiling is not None else None,
                        )
                        if seconds is not None
                    ]
                    if allowed:
                        bounds[k] = max(bounds[k], self._bound_at(k, min(allowed), hope))
            elif (seconds := costs.seconds(k)) is not None:
                bounds[k] = self._bound_at(k, seconds, hope)
        return bounds

    def lower(self, k: Arm, predicted: dict[Arm, float]) -> float:
        return predicted[k] * (1 - Z * self.relative_error(k)) if k in predicted else 0.0

    def relative_error(self, k: Arm) -> float:
        """Standard error of a measured arm's step time, relative to it (the floor when unmeasured)."""
        stat = self.times.get(k)
        if stat is None or stat.count < 2 or stat.mean <= 0:
            return MIN_RELATIVE_ERROR
        samples = min(float(stat.count) + self.support[k] - samples_of(stat), self.window)
        return max(sqrt(stat.var / samples) / stat.mean, MIN_RELATIVE_ERROR)

    def _upper_error(self, k: Arm) -> float:
        error = Z * self.relative_error(k)
        support = self.support.get(k, 1.0)
        if support < MIN_ROBUST:
            return max(error, self.tail / support)  # one of its steps may have been a stall
        return error

    def _verify_best(self, best_case: Mapping[Arm, float], without: Arm | None = None) -> dict[int, float]:
        """By K, the least verify seconds measured at K over the drafters (`without` one arm's),
        each taken at its arm's best case, as the step's own figure is."""
        by_k: dict[int, float] = {}
        for j, best in best_case.items():
            stat = self.verify.get(j)
            if j == without or stat is None or not stat.count or self.seconds[j] <= 0:
                continue
            seconds = min(stat.mean, self.seconds[j]) * best / self.seconds[j]
            by_k[j.k] = min(by_k.get(j.k, seconds), seconds)
        return by_k

    def _bound_at(self, k: Arm, seconds: float, hope: float) -> float:
        """An upper bound priced at a step time the cost model allows: no error of its own."""
        return self._price(k, seconds) * hope * (1 + Z * MIN_RELATIVE_ERROR)

    def _price(self, k: Arm, seconds: float) -> float:
        return self.tokens[k] / seconds / self.scale


def _neighbours(arms: tuple[Arm, ...], standing: Arm | None, drafting: str) -> tuple[Arm, ...]:
    """The arms either side of the decision on its drafter's chain (the leading drafter's,
    when the decision is off)."""
    if standing is None:
        return ()
    line = chain(arms, standing.method if standing.k else drafting)
    if standing not in line:
        return ()
    at = line.index(standing)
    return tuple(line[i] for i in (at - 1, at + 1) if 0 <= i < len(line))


def _unmeasured_seconds(
    k: Arm, best_case: Mapping[Arm, float], floor: CostBound | None, verify: Mapping[int, float]
) -> float | None:
    """The step time the cost model would bound a measured arm by, were it unmeasured."""
    return OptimisticCosts({j: t for j, t in best_case.items() if j != k}, floor, verify).seconds(k)


def _shrunk(times: Mapping[Arm, Summary]) -> tuple[dict[Arm, float], dict[Arm, float]]:
    """Each measured arm's step seconds, shrunk towards the line its drafter's other arms draw.

    A drafting step's cost grows about linearly with K (K draft passes, a verify K + 1 tokens
    wide), so the arms measured beside an arm say what it should cost: a line fitted to them
    (weighted by their steps) counts as `LINE_SAMPLES` steps of its own, never more than the
    steps it is drawn through, and may only lower the arm's own figure. An arm measured once,
    on a step that stalled, is then priced near the line instead of out of the running, and an
    arm measured many times is priced by its own steps, whatever the line says. K = 0 runs no
    drafter (a plain step is another kernel) and stands on its own steps; so does an arm with
    fewer than two others to draw a line through. Another drafter's arms draw no line for it:
    their draft passes cost differently.
    """
    measured = {k: (stat.mean, float(samples_of(stat))) for k, stat in times.items() if stat.count}
    seconds = {k: mean for k, (mean, _) in measured.items()}
    support = {k: n for k, (_, n) in measured.items()}
    for k, (mean, n) in measured.items():
        others = [
            (j.k, t, w) for j, (t, w) in measured.items() if j.k >= 1 and j.method == k.method and j != k
        ]
        if k.k == 0 or len(others) < 2:
            continue
        line = _line(others)
        if line is not None:
            # A line through two arms measured once each is two steps of evidence, not four:
            # counted as more, an arm measured once beside them would be judged (pruning.py)
            # and ruled out at every larger batch on three steps in all.
            weight = min(LINE_SAMPLES, sum(w for _, _, w in others))
            # Only ever down: a stall inflates an arm's own steps, never deflates them, and a
            # neighbour's stalled step may tilt the line up.
            seconds[k] = min((n * mean + weight * line(k.k)) / (n + weight), mean)
            support[k] = n + weight
    return seconds, support


def _line(points: list[tuple[int, float, float]]) -> Callable[[int], float] | None:
    """Weighted least squares t = a + b K through (K, seconds, weight), with b >= 0."""
    total = sum(w for _, _, w in points)
    k_mean = sum(k * w for k, _, w in points) / total
    t_mean = sum(t * w for _, t, w in points) / total
    spread = sum(w * (k - k_mean) ** 2 for k, _, w in points)
    if spread <= 0:
        return None
    slope = max(sum(w * (k - k_mean) * (t - t_mean) for k, t, w in points) / spread, 0.0)
    return lambda k: max(t_mean + slope * (k - k_mean), 0.0) or t_mean
