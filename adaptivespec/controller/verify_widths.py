"""What one cell's verify costs by its width: how two steps of one arm differ when its drafter
found drafts of different lengths.

A drafter that drafts what it finds (prompt lookup, suffix decoding) verifies fewer than K
tokens a row when no row found K (the engine trims the verify to the longest draft), and
nothing at all when none found one. So an arm's steps differ in cost by their width as well as
by the machine's stalls. An arm's robust step time is the lower quartile of its steps
(robust_stat.py): over steps of mixed widths that is the time of its narrowest ones, while its
tokens are its drafter's acceptance at K, the wide steps' drafts included. An arm whose drafter
often finds little would look cheaper than it is, and the more so the larger its K.

So an arm's steps are priced at its typical width (`ArmWidths`), each scaled by what this
cell's verify costs at the two widths (`VerifyWidths.scale`), and priced again whenever the arm
steps: its typical width and the verify's costs move as steps come, and a step priced once, at
what was known then, would keep an arm's first figure for its whole window.

A verify at a width is one kernel whichever drafter drafted, so every arm's steps measure it:
each width's verify seconds keep a robust location of their own (a stall only slows a step),
and a width never costs less than a narrower one.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from itertools import accumulate

from adaptivespec.controller.robust_stat import WINDOW, RobustStat
from adaptivespec.controller.stats import EWStat


@dataclass(slots=True)
class VerifyWidths:
    _at: dict[int, RobustStat] = field(default_factory=dict)  # verify seconds, by drafts per row
    _profile: tuple[list[int], list[float]] | None = None  # widths and monotone seconds, cached

    def observe(self, width: float, seconds: float) -> None:
        """A step that verified `width` drafts a row (0: a plain step) in `seconds`. A mean
        width (rows that verified their own drafts) counts at the nearest whole one, so that
        each kept width gathers steps enough for a robust location."""
        self._at.setdefault(round(width), RobustStat()).update(seconds)
        self._profile = None

    def seconds(self, width: float) -> float | None:
        """The verify's seconds at a (fractional) width: interpolated between the widths
        measured, held at the nearest one outside them; None before any is measured."""
        widths, times = self._monotone()
        if not widths:
            return None
        i = bisect_left(widths, width)
        if i == 0:
            return times[0]
        if i == len(widths):
            return times[-1]
        lo, hi = widths[i - 1], widths[i]
        share = (width - lo) / (hi - lo)
        return times[i - 1] + share * (times[i] - times[i - 1])

    def scale(self, width: float, typical: float) -> float:
        """What a step of `width` is multiplied by to price it at the `typical` width (1 when
        the two are one, or nothing is measured). A ratio, not a difference: a stalled step
        stays as stalled, and no step's time can turn negative."""
        if width == typical:
            return 1.0
        here, there = self.seconds(width), self.seconds(typical)
        return there / here if here and there else 1.0

    def _monotone(self) -> tuple[list[int], list[float]]:
        """Each width's robust seconds, capped by every wider width's: a verify never costs
        less with more drafts, so a narrower width measured slower met a stall."""
        if self._profile is None:
            widths = sorted(self._at)
            capped = list(accumulate((self._at[w].mean for w in reversed(widths)), min))[::-1]
            self._profile = (widths, capped)
        return self._profile


@dataclass(slots=True)
class ArmWidths:
    """One arm's recent steps with the widths they verified, and the width it typically does."""

    typical: EWStat  # drafts verified a row
    _steps: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def add(self, seconds: float, width: float) -> None:
        self.typical.update(width)
        self._steps.append((seconds, width))

    @property
    def varied(self) -> bool:
        """Whether the recent steps verified more than one width (else they need no moving)."""
        first = self._steps[0][1] if self._steps else 0
        return any(width != first for _, width in self._steps)

    def priced(self, widths: VerifyWidths) -> list[float]:
        """The recent steps' seconds, oldest first, each at the arm's typical width."""
        typical = self.typical.mean
        factors = {width: widths.scale(width, typical) for width in {width for _, width in self._steps}}
        return [seconds * factors[width] for seconds, width in self._steps]
