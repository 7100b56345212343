"""How many prompt tokens a step may prefill while other streams are decoding.

A prefill runs inside the step, so every decoding stream waits for it: fed whole, one
2,000-token prompt stalls 32 streams for its whole forward. The pacer gives each step's
prefill about `PACE` of a decode step for every prompt that is waiting, so that one long
prompt keeps the running streams' gaps under twice their steady length, while a queue of
many prompts still drains at a rate that grows with it. It sizes the chunk from its own
measurements: a prefill forward costs a fixed part (reading the weights, as a decode step
does) plus a part per token, fitted over recent prefills; a chunk that goes into the decode
step's forward (segments.py) costs only what it adds to the step, fitted apart. With no
stream decoding there is nothing to protect, and prompts go in up to the step's ceiling, but
not all in one forward where that delays the first of them for nothing (`_idle`).
PACE is 0.6 rather than nearer 1: on a small CPU the p99 of the gaps sits well above their
typical length, and the bar is the p99 at twice the steady gap.

That share is sized for a full house, STALL_STREAMS decoding. With fewer streams decoding the
pacer allows the same stall in stream-seconds, shared among fewer streams: each of them waits
longer for that step, and the prompt reaches its first token in fewer steps. The full house's
step is read off a line through the step times measured at each batch size (`StepTimes`):
a few streams step faster than a full house, and sizing their stall by their own step would
chunk a light load's prompts about twice as finely as the stream-seconds allow. Chunking never
saves the streams any stall in total (a prompt's tokens cost the same in one chunk or many);
it only spreads the stall, which matters most when many streams share it, while every extra
chunk adds a whole step to the prompt's time to first token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

PACE = 0.6  # prefill seconds per step per waiting prompt, as a share of a decode step's seconds
STALL_STREAMS = 32  # the streams decoding for which PACE holds; fewer share the same stall
FIRST_CHUNK = 64  # before anything has been measured
SMALLEST_CHUNK = 16  # a floor, so that a prompt always advances at a useful rate
MEMORY = 0.9  # weight kept by the older measurements at each new one
MIN_ADDED_SECONDS = 1e-4  # what a chunk adds to a step is fitted as at least this (timing noise)


@dataclass(slots=True)
class PrefillCost:
    """seconds ~ fixed + per_token * tokens, least squares over recent prefills."""

    # What chunks add to a decode step: no tokens add nothing, so before two sizes are seen
    # the cost per token seen prices any size, as a fitted line without a fixed part would.
    through_origin: bool = False
    n: float = 0.0
    x: float = 0.0
    y: float = 0.0
    xx: float = 0.0
    xy: float = 0.0

    def add(self, tokens: int, seconds: float) -> None:
        self.n = MEMORY * self.n + 1.0
        self.x = MEMORY * self.x + tokens
        self.y = MEMORY * self.y + seconds
        self.xx = MEMORY * self.xx + tokens * tokens
        self.xy = MEMORY * self.xy + tokens * seconds

    @property
    def measured(self) -> bool:
        return self.n > 0 and self.x > 0

    def line(self) -> tuple[float, float] | None:
        """(fixed, per_token), or None while recent prefills were too alike in size to tell the
        fixed part from the part per token.

        A chunk's tokens cost more the further into its prompt they sit (they attend to all
        before them), so big late chunks can tilt the line below zero at the origin. The fixed
        part is then taken as 0: the line through the origin at the fitted slope lies above
        the fitted one, so it never lets a step take more than the fit says fits."""
        spread = self.n * self.xx - self.x**2
        if spread <= 0.01 * self.n * self.xx:  # sizes within about 10% of each other
            return None
        per_token = (self.n * self.xy - self.x * self.y) / spread
        fixed = (self.y - per_token * self.x) / self.n
        return (max(fixed, 0.0), per_token) if per_token > 0 else None

    def per_token(self) -> float | None:
        """The fitted slope; through the origin, the cost per token seen until there is one."""
        line = self.line()
        if line is not None:
            return line[1]
        return self.y / self.x if self.through_origin and self.measured else None

    def tokens_within(self, seconds: float) -> int:
        """Without a line, cost is taken as proportional to the size seen. Above that size this
        overestimates (the fixed part is paid once), so it is safe; below it, it underestimates,
        so a share smaller than the size seen gets 0, the pacer's floor: a probe that gives the
        fit its second size. Through the origin there is no fixed part to miss, and the
        proportion holds at any size."""
        line = self.line()
        if line is None:
            fits = self.through_origin or self.y / self.n <= seconds
            return int(seconds * self.x / self.y) if fits else 0
        fixed, per_token = line
        return int(max(0.0, seconds - fixed) / per_token)


@dataclass(slots=True)
class StepTimes:
    """A decode step's seconds per batch size (recent steps weigh most), and the line through
    them, each size seen weighing alike: what a batch not seen yet would take."""

    by_batch: dict[int, float] = field(default_factory=dict)

    def add(self, batch: int, seconds: float) -> None:
        current = self.by_batch.get(batch)
        self.by_batch[batch] = seconds if current is None else MEMORY * current + (1 - MEMORY) * seconds

    def at(self, batch: int, per_stream: float | None = None) -> float | None:
        """The line's step at `batch`; None before two sizes are seen or if it does not rise.

        `per_stream`: with one size seen, the step from it, each stream more adding this
        (a burst's steps all carry prompt chunks, so its plain steps come late)."""
        if len(self.by_batch) == 1 and per_stream is not None:
            ((seen, seconds),) = self.by_batch.items()
            return seconds + per_stream * max(0, batch - seen)
        if len(self.by_batch) < 2:
            return None
        slope, intercept = np.polyfit(list(self.by_batch), list(self.by_batch.values()), 1)
        seconds = float(intercept + slope * batch)
        return seconds if slope > 0 and seconds > 0 else None


@dataclass(slots=True)
class PrefillPacer:
    ceiling: int  # max_prefill_tokens: the most one step may prefill
    fixed: int = 0  # > 0: this many tokens per step while streams decode, unmeasured
    cost: PrefillCost = field(default_factory=PrefillCost)  # a prefill forward of its own
    beside_step: PrefillCost = field(  # what chunks add to a decode step
        default_factory=lambda: PrefillCost(through_origin=True)
    )
    step_seconds: float | None = None  # recent decode steps, whatever their batch
    steps: StepTimes = field(default_factory=StepTimes)

    def budget(self, decoding: int, queued: Sequence[int], fused: bool = False) -> int:
        """Prompt tokens for this step while `decoding` streams decode; `queued`: each prompt
        not yet fully prefilled, its tokens to go, in the order they go in. `fused`: the chunks
        go into the decode step's forward, so only what they add counts."""
        if not decoding:
            return self._idle(queued)
        waiting = len(queued)
        if self.fixed:
            return min(self.fixed, self.ceiling)
        # Until chunks beside a step are measured, they are priced as prefills of their own:
        # the same tokens plus a fixed part, so never more than fits.
        cost = self.beside_step if fused and self.beside_step.measured else self.cost
        if not cost.measured or self.step_seconds is None:
            return min(FIRST_CHUNK, self.ceiling)
        shares = max(1, waiting) * max(1.0, STALL_STREAMS / decoding)
        tokens = cost.tokens_within(PACE * shares * self._full_house_step(self.step_seconds, decoding))
        return max(SMALLEST_CHUNK, min(tokens, self.ceiling))

    def _idle(self, queued: Sequence[int]) -> int:
        """Prompt tokens for a step while no stream decodes.

        Prompts fed together all reach their first token when the forward ends. Fed apart,
        the first reaches it sooner by the second's tokens, and the second later by one more
        forward's fixed part: apart lowers their summed time to first token when the second's
        tokens cost more than that fixed part (on a CPU, where a prefill's time grows with
        its tokens from a few dozen on, any but the shortest prompt; on a GPU, whose fixed part
        dwarfs short prompts' tokens, rarely). So a prompt joins the ones before it in the
        forward only while its own tokens cost at most the fixed part; a prompt left out goes in
        at the next step, beside the first's decoding."""
        line = self.cost.line()
        if line is None or not queued:
            return self.ceiling  # nothing fitted yet to tell the two parts apart
        fixed, per_token = line
        budget = queued[0]
        for tokens in queued[1:]:
            if per_token * tokens > fixed:
                break
            budget += tokens
        return max(1, min(budget, self.ceiling))

    def _full_house_step(self, recent: float, decoding: int) -> float:
        """A decode step of STALL_STREAMS streams, as the step times by batch imply; never less
        than the recent steps' time, nor more than it scaled by the streams (a step with no
        fixed part: the most a line through the origin's right side allows)."""
        if decoding >= STALL_STREAMS:
            return recent
        # With one batch size seen, each stream more adds one token's forward: the prefills' slope.
        per_token = self.beside_step.per_token() or self.cost.per_token()
        full = self.steps.at(STALL_STREAMS, per_token)
        if full is None:
            return recent
        return min(max(full, recent), recent * STALL_STREAMS / decoding)

    def prefilled(self, tokens: int, seconds: float) -> None:
        """Every prefill is fitted, those fed while nothing decoded too: a burst that arrives at
        an idle engine then paces its second wave from what its first one cost, not from a
        blind first chunk."""
        if tokens > 0:
            self.cost.add(tokens, seconds)

    @property
    def knows_steps(self) -> bool:
        """Whether a plain step has been measured: what sizes a chunk beside one."""
        return self.step_seconds is not None

    def prefilled_beside_step(self, tokens: int, seconds: float, batch: int) -> None:
        """A decode step of `batch` streams that carried `tokens` prompt tokens took `seconds`:
        fits what they added over a plain step of that batch, as measured or as the step times
        by batch imply (a step of more streams takes longer, and that is not the chunk's)."""
        plain = self.steps.by_batch.get(batch) or self.steps.at(batch) or self.step_seconds
        if tokens > 0 and plain is not None:
            self.beside_step.add(tokens, max(seconds - plain, MIN_ADDED_SECONDS))

    def decoded(self, step_seconds: float, batch: int) -> None:
        """A decode step alone, of `batch` streams, took `step_seconds`."""
        self.steps.add(batch, step_seconds)
        current = self.step_seconds
        self.step_seconds = (
            step_seconds if current is None else MEMORY * current + (1 - MEMORY) * step_seconds
        )
