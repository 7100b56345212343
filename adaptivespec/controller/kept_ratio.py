"""How a cell's own rows keep a drafter's drafts, against what its pooled curve expects of them.

A drafter's acceptance curve (acceptance.py) pools every batch size, since acceptance depends
on the requests and not on the batch. Which requests share a batch does depend on the load,
though: at a light load a batch is the agent session or the code edit being served, at a heavy
one a mix; and one drafter's gain differs several-fold between requests (suffix decoding on a
repeated tool call against open chat). Priced by the pooled curve alone, a cell whose rows suit
a drafter less than the others' did kept running it at the K the others' rows earned.

So a cell keeps, per drafter and K, what its rows kept, and prices every K of the drafter with
the pooled curve's kept drafts scaled by one ratio: its rows' kept drafts over what the curve,
as it stands, expects of them, shrunk towards 1 by as much as the steps' scatter explains
(`CellTokens`). On traffic like the pool's it stays near 1, so the cells still share what every
batch size learned. One ratio per drafter, not per arm: the K of one drafter are judged on the
same rows, and the shadow drafts (engine/shadow_drafts.py) score the cheap drafters that did not
run on rows of the step that did, so a drafter is not priced on other requests than its rivals.
A correction learned per arm, instead, made whichever requests an arm happened to run beside a
lasting bias between arms (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from adaptivespec.controller.acceptance import Acceptance
from adaptivespec.controller.arms import Arm

DECAY = 0.99  # per step of the cell: its recent rows count, as the pooled curve's do
# A request stays in the batch for many steps, so one cell's consecutive steps deviate together:
# their sum scatters more than their squares' sum says. The shrinkage counts the squares twice.
CORRELATED = 2.0


@dataclass(slots=True)
class _Sums:
    """Decayed sums over one K's steps: rows n, drafts kept x, and their products."""

    n: float = 0.0
    x: float = 0.0
    xx: float = 0.0
    xn: float = 0.0
    nn: float = 0.0


@dataclass(slots=True)
class KeptRatio:
    """A cell's rows of one drafter, by K: what they kept, judged against the pooled curve as it
    stands when asked (the curve learns from the same rows; judged against it as it stood, a
    cell kept the curve's early error after the curve had outgrown it)."""

    by_k: dict[int, _Sums] = field(default_factory=dict)

    def observe(self, k: int, rows: int, kept: int) -> None:
        """One step (or one shadow score) of `rows` rows at K that kept `kept` drafts in all."""
        if k <= 0 or rows <= 0:
            return
        sums = self.by_k.setdefault(k, _Sums())
        sums.n += rows
        sums.x += kept
        sums.xx += kept * kept
        sums.xn += kept * rows
        sums.nn += rows * rows

    def fade(self) -> None:
        """One step of the cell's, whatever it ran: a cell that stopped running the drafter
        (speculation off) drifts back to the pool's curve instead of keeping old rows' verdict."""
        for sums in self.by_k.values():
            sums.n, sums.x, sums.xx = DECAY * sums.n, DECAY * sums.x, DECAY * sums.xx
            sums.xn, sums.nn = DECAY * sums.xn, DECAY * sums.nn

    def ratio(self, drafts: Callable[[int], float]) -> float:
        """Kept over what the curve expects (`drafts`: drafts a row keeps at K), shrunk towards 1
        by as much as the steps' own scatter explains (positive-part James-Stein): were the
        cell's rows like the pool's, the steps' deviations would scatter about zero and their
        sum's square be no larger than their squares' sum (`CORRELATED` times it); only a
        deviation that holds step after step moves the ratio, and then nearly all the way."""
        expected = excess = spread = 0.0
        for k, sums in self.by_k.items():
            d = drafts(k)
            expected += d * sums.n
            excess += sums.x - d * sums.n
            spread += sums.xx - 2 * d * sums.xn + d * d * sums.nn
        if expected <= 0 or excess == 0:
            return 1.0
        trust = max(0.0, 1.0 - CORRELATED * spread / excess**2)
        return 1.0 + trust * excess / expected


@dataclass(frozen=True, slots=True)
class CellTokens:
    """Tokens per row per step at each arm in one cell: the pooled curve's, with each drafter's
    kept drafts scaled by the cell's ratio (a row keeps at most K). What an arm may yet keep is
    the pooled curve's hope scaled alike: the ratio is already shrunk to what the cell's rows
    show step after step, and a hope of its own on top made every cell explore more arms on
    traffic like the pool's (docs/decisions.md)."""

    pooled: Acceptance
    ratios: Mapping[str, KeptRatio]  # by drafter
    _asked: dict[str, float] = field(default_factory=dict)  # each drafter's ratio, once asked

    def __call__(self, arm: Arm) -> float:
        return self._scaled(arm, self.pooled(arm))

    def hoped(self, arm: Arm) -> float:
        return self._scaled(arm, self.pooled.hoped(arm))

    def ratio(self, method: str) -> float:
        """How this cell's rows keep `method`'s drafts against its pooled curve (1: alike)."""
        kept = self.ratios.get(method)
        if kept is None:
            return 1.0
        if method not in self._asked:  # asked for every arm of the drafter: once per pricing
            self._asked[method] = kept.ratio(lambda k: self.pooled(Arm(method, k)) - 1.0)
        return self._asked[method]

    def _scaled(self, arm: Arm, tokens: float) -> float:
        if not arm.k or arm.method not in self.ratios:
            return tokens
        return min(1.0 + self.ratio(arm.method) * (tokens - 1.0), float(arm.k + 1))
