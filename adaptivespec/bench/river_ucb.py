"""Plain river UCB over draft lengths: the textbook learner `bench control` compares ours with.

river's API has changed between versions, so nothing outside this file touches it. Each
arm's reward object is an exponentially weighted mean, so old evidence fades under drift.
The controller itself does not use it: its cells keep robust step times and their own
upper-confidence rule (controller/cell.py), which river's policies would need fake updates
to seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from river import bandit as river_bandit
from river import stats as river_stats

BanditKind = Literal["ucb", "epsilon"]


class RiverBandit:
    """A river policy over draft lengths, with EWMean rewards.

    >>> policy = RiverBandit("ucb", seed=1)
    >>> for reward_of_arm in ({0: 0.2, 2: 0.9, 4: 0.5},) * 20:
    ...     arm = policy.pull([0, 2, 4])
    ...     policy.update(arm, reward_of_arm[arm])
    >>> policy.pull([0, 2, 4])
    2
    """

    def __init__(
        self, kind: BanditKind = "ucb", seed: int = 0, fading: float = 0.1, delta: float = 0.03
    ) -> None:
        reward = river_stats.EWMean(fading_factor=fading)
        # Thompson sampling and Exp3 in river expect rewards in [0, 1] (Beta / bounded);
        # goodput ratios are unbounded, so only the mean-based policies are offered.
        if kind == "ucb":
            self._policy: river_bandit.base.Policy = river_bandit.UCB(
                delta=delta, reward_obj=reward, seed=seed
            )
        else:
            self._policy = river_bandit.EpsilonGreedy(epsilon=0.05, reward_obj=reward, seed=seed)

    def pull(self, arms: Sequence[int]) -> int:
        return int(self._policy.pull(list(arms)))

    def update(self, arm: int, reward: float) -> None:
        self._policy.update(arm, reward)
