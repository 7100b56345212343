"""What one decision cell measured: step times and goodput per arm, here and across the fleet,
and what switching a drafter on cost."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from adaptivespec.controller.acceptance import Acceptance
from adaptivespec.controller.arm_prices import ArmPrices
from adaptivespec.controller.arms import Arm
from adaptivespec.controller.learning_settings import LearningSettings
from adaptivespec.controller.robust_stat import MIN_ROBUST, RobustStat
from adaptivespec.controller.stall_tail import PRIOR_TAIL
from adaptivespec.controller.state import ArmState
from adaptivespec.controller.stats import EWStat, Summary
from adaptivespec.controller.verify_widths import ArmWidths, VerifyWidths


@dataclass(slots=True)
class CellEvidence:
    settings: LearningSettings
    rewards: dict[Arm, EWStat] = field(default_factory=dict)  # observed tokens/row/s over `scale`
    seconds: dict[Arm, RobustStat] = field(default_factory=dict)  # step seconds here, switches apart
    verify: dict[Arm, RobustStat] = field(default_factory=dict)  # ... of which verifying: this host's only
    fleet: dict[Arm, EWStat] = field(default_factory=dict)  # step seconds other hosts measured
    fleet_hosts: int = 0  # other hosts behind `fleet`
    switch: dict[str, RobustStat] = field(default_factory=dict)  # per drafter: catch-up seconds a switch
    widths: dict[Arm, ArmWidths] = field(default_factory=dict)  # recent steps' widths, per arm
    verify_widths: VerifyWidths = field(default_factory=VerifyWidths)  # the verify's seconds by width
    scale: float = 0.0  # tokens/row/s of the first measurement: makes rewards ~1
    samples: int = 0  # steps measured here
    _times: dict[Arm, Summary] | None = None  # `seconds` and `fleet` merged, until either changes

    @property
    def informed(self) -> bool:
        """Measured here, or by other hosts of the fleet."""
        return self.samples > 0 or bool(self.fleet)

    @property
    def steps(self) -> int:
        """Steps measured in this cell, here and by the fleet."""
        return self.samples + self.pooled_steps

    @property
    def pooled_steps(self) -> int:
        """Steps other hosts measured (and this host before its restart)."""
        return sum(stat.count for stat in self.fleet.values())

    def times(self) -> Mapping[Arm, Summary]:
        """Step seconds per arm: this host's, beside the fleet's (each weighing at most one window)."""
        if not self.fleet:
            return self.seconds  # a host alone: nothing to merge on every step
        if self._times is None:
            window = self.settings.effective_samples
            arms = self.seconds.keys() | self.fleet.keys()
            self._times = {k: _merged(self.seconds.get(k), self.fleet.get(k), window) for k in arms}
        return self._times

    def observe(
        self,
        k: Arm,
        tokens_per_row: float,
        step_seconds: float,
        verify_seconds: float,
        *,
        width: float | None = None,
    ) -> float:
        """One step at arm `k`; `step_seconds` without any switch's catch-up (`observe_switch`),
        `verify_seconds` the part of it after the draft, `width` the drafts it verified a row
        (None: K; fewer when its drafter found fewer; a mean where rows verified their own).
        Returns the step's seconds at the arm's typical width (verify_widths.py): what the
        arm's step time learns, and what the step is to be compared by."""
        width = k.k if width is None else width
        self.verify_widths.observe(width, min(verify_seconds, step_seconds))
        steps = self.widths.setdefault(k, ArmWidths(EWStat(self.settings.fading)))
        steps.add(step_seconds, width)
        if self.scale <= 0.0:
            self.scale = tokens_per_row / step_seconds
        self.rewards.setdefault(k, EWStat(self.settings.fading)).update(
            tokens_per_row / step_seconds / self.scale
        )
        priced = steps.priced(self.verify_widths) if steps.varied else None
        self.seconds.setdefault(k, RobustStat()).update(step_seconds, priced)
        self.verify.setdefault(k, RobustStat()).update(min(verify_seconds, step_seconds))
        self._times = None
        self.samples += 1
        return priced[-1] if priced else step_seconds

    def observe_switch(self, method: str, seconds: float) -> None:
        """`method`'s drafter, which had sat out steps, caught up at this step in `seconds`."""
        self.switch.setdefault(method, RobustStat()).update(seconds)

    def switch_seconds(self, method: str) -> float:
        """What switching `method`'s drafter on has cost here, on average (0 before it is seen)."""
        switch = self.switch.get(method)
        return switch.mean if switch is not None and switch.count else 0.0

    def set_fleet(self, seconds: dict[Arm, EWStat], hosts: int, reward_scale: float) -> None:
        """What other hosts measured; `reward_scale` sets the scale when this host has none yet."""
        self.fleet, self.fleet_hosts, self._times = seconds, hosts, None
        if self.scale <= 0.0:
            self.scale = reward_scale

    def restore(self, samples: int, scale: float, arms: Mapping[Arm, ArmState]) -> None:
        """What a store saved: the statistics of a host's earlier life."""
        self.samples, self.scale = samples, scale
        fading = self.settings.fading
        for where, saved in arms.items():
            self.rewards[where] = EWStat(fading, saved.reward_mean, saved.reward_var, saved.reward_count)
            self.seconds[where] = RobustStat.restored(
                saved.seconds_mean, saved.seconds_var, saved.seconds_count
            )
        self._times = None

    def typical_seconds(self, k: Arm) -> float | None:
        """This host's robust step time at K, once it stands on enough steps to judge one by."""
        stat = self.seconds.get(k)
        return stat.mean if stat is not None and stat.samples >= MIN_ROBUST else None

    def prices(self, arms: tuple[Arm, ...], acceptance: Acceptance, tail: float = PRIOR_TAIL) -> ArmPrices:
        tokens = {k: acceptance(k) for k in arms}  # once per step, for every pricing
        hoped = {k: acceptance.hoped(k) for k in arms}
        window = self.settings.effective_samples
        return ArmPrices.of(
            arms,
            self.times(),
            tokens,
            scale=self.scale,
            window=window,
            tail=tail,
            hoped=hoped,
            verify=self.verify,
        )

    def saved_arms(self) -> tuple[ArmState, ...]:
        """Per arm measured here, what the store keeps."""
        out = []
        for a, seconds in sorted(self.seconds.items()):
            reward = self.rewards.get(a) or EWStat()
            out.append(
                ArmState(
                    a.k,
                    a.method,
                    reward.mean,
                    reward.var,
                    reward.count,
                    seconds.mean,
                    seconds.var,
                    seconds.count,
                )
            )
        return tuple(out)


def _merged(own: Summary | None, pooled: Summary | None, window: float) -> Summary:
    """One mean and variance from two: each side weighs its count, at most `window`."""
    if own is None or not own.count:
        return pooled if pooled is not None else EWStat()
    if pooled is None or not pooled.count:
        return own
    w_own, w_pooled = min(own.count, window), min(pooled.count, window)
    total = w_own + w_pooled
    mean = (w_own * own.mean + w_pooled * pooled.mean) / total
    spread = w_own * (own.var + (own.mean - mean) ** 2) + w_pooled * (pooled.var + (pooled.mean - mean) ** 2)
    return EWStat(mean=mean, var=spread / total, count=own.count + pooled.count)
