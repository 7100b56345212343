"""A synthetic machine for controller tests: known step costs and acceptance, a shared CPU's
stalls, and a drafter's catch-up after K = 0 steps. Seeded; no model, no clock. A run may have
several drafters, each a `Machine` of its own (its acceptance and its draft cost)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from adaptivespec.engine.runner import ShadowScore
from adaptivespec.engine.shadow_drafts import ROWS_PER_STEP
from adaptivespec.engine.spec_policy import SpecPolicy
from adaptivespec.engine.telemetry import StepTelemetry, survival_counts

ARMS = (0, 1, 2, 3, 4, 5, 6, 8)


@dataclass(frozen=True, slots=True)
class Machine:
    base: float = 0.010  # seconds of a K = 0 step
    slope: float = 0.35  # relative step-time rise per draft token
    alpha: float = 0.8  # P(a draft is kept | the one before it was)
    stall_share: float = 0.0  # steps that lose their core to another process
    stall: tuple[float, float] = (3.0, 6.0)  # ... and take this many times as long
    catch_up_per_token: float = 0.0  # seconds per row and missed token, after K = 0 steps
    # The verify's share of the rise (the rest is the draft's): None, all of it (a drafter whose
    # drafts cost nothing, as prompt lookup's nearly do).
    verify_slope: float | None = None
    # A drafter that drafts what it finds (prompt lookup, suffix decoding): (drafts found, their
    # probability) per row and step, a row drafting min(K, found); () finds K every time.
    found: tuple[tuple[int, float], ...] = ()

    def cost(self, width: int) -> float:
        """Seconds of a step that verifies `width` drafts a row (0: a plain step)."""
        return self.base * (1 + self.slope * width)

    def seconds(self, k: int) -> float:
        """Expected seconds of a step at K, at batch 1."""
        return sum(p * self.cost(min(k, n)) for n, p in self._found(k))

    def _found(self, k: int) -> tuple[tuple[int, float], ...]:
        return self.found or ((k, 1.0),)

    def draft_seconds(self, k: int) -> float:
        """The part of a step at K its drafter spends drafting (the rest verifies K + 1 tokens)."""
        verify_slope = self.slope if self.verify_slope is None else self.verify_slope
        return self.base * (self.slope - verify_slope) * k

    def tokens(self, k: int) -> float:
        """Expected tokens a row emits per step at K."""
        return sum(p * sum(self.alpha**j for j in range(min(k, n) + 1)) for n, p in self._found(k))

    def lengths(self, k: int, rows: int, rng: np.random.Generator) -> list[int]:
        """How many drafts each row drafts at K."""
        if not self.found:
            return [k] * rows
        counts, weights = zip(*self.found, strict=True)
        return [min(k, int(n)) for n in rng.choice(counts, size=rows, p=weights)]

    def goodput(self, k: int) -> float:
        return self.tokens(k) / self.seconds(k)

    def best(self) -> int:
        return max(ARMS, key=self.goodput)


class Run:
    """Steps one policy on the machine at one batch size, as an engine would."""

    def __init__(
        self,
        machine: Machine,
        batch: int,
        seed: int,
        drafters: Mapping[str, Machine] | None = None,
        shadows: bool = True,
    ) -> None:
        """`drafters`: by method, when the policy names them; `machine` is the default drafter
        ("draft"), and its base cost and stalls are every step's. `shadows`: a drafting step
        reports what the other named drafters would have kept (a runner's shadow drafts)."""
        self.machine = machine
        self.drafters = {"draft": machine, **(drafters or {})}
        self.batch = batch
        self.rng = np.random.default_rng(seed)
        # The other drafters' shadow drafts draw apart, so that a run's own steps stay as seeded.
        self.shadow_rng = np.random.default_rng([seed, 1])
        self.shadows = shadows
        self.tokens = 0
        self.seconds = 0.0
        self.ks: list[int] = []
        self.methods: list[str] = []  # the drafter of each step ("" at K = 0)
        self.missed: dict[str, int] = {}  # per drafter, the steps since it last drafted

    def step(self, policy: SpecPolicy) -> StepTelemetry:
        rng = self.rng
        k = policy.k_for(self.batch, 300)
        method = (policy.method_for(self.batch, 300) or "draft") if k else ""
        m = self.drafters[method or "draft"]
        accepted, lengths = [0] * self.batch, [0] * self.batch
        if k:
            kept = rng.random((self.batch, k)) < m.alpha
            lengths = m.lengths(k, self.batch, rng)
            kept &= np.arange(k) < np.array(lengths)[:, None]
            accepted = np.cumprod(kept, axis=1).sum(axis=1).tolist()
        width = max(lengths)
        seconds = m.cost(width)
        if rng.random() < self.machine.stall_share:
            seconds *= rng.uniform(*self.machine.stall)
        missed = self.missed.get(method, 0) if k else 0  # steps since this drafter last drafted
        catch_up_tokens = self.batch * missed if missed > 1 else 0
        catch_up = catch_up_tokens * m.catch_up_per_token
        self.missed = {name: self.missed.get(name, 0) + 1 for name in self.drafters}
        if k:
            self.missed[method] = 0
        self.methods.append(method)
        emitted = sum(accepted) + self.batch
        self.tokens += emitted
        self.seconds += seconds + catch_up
        self.ks.append(k)
        return StepTelemetry(
            "m", "h", self.batch, k, 300.0, sum(lengths), sum(accepted), emitted,
            catch_up + m.draft_seconds(width) if k else 0.0, seconds - m.draft_seconds(width),
            seconds + catch_up, 0.0, width,
            survival_counts(accepted, width), catch_up_tokens, catch_up, method,
            self._shadow(method) if k and self.shadows else (),
        )  # fmt: skip

    def _shadow(self, running: str) -> tuple[ShadowScore, ...]:
        """What the other drafters would have kept on a few rows, at the largest K (as the
        runner's shadow drafts report it)."""
        rows, horizon = min(self.batch, ROWS_PER_STEP), max(ARMS)
        scores = []
        for name, drafter in self.drafters.items():
            if name in (running, "draft"):
                continue
            kept = self.shadow_rng.random((rows, horizon)) < drafter.alpha
            per_row = np.cumprod(kept, axis=1).sum(axis=1).tolist()
            scores.append(ShadowScore(name, horizon, rows, survival_counts(per_row, horizon)))
        return tuple(scores)

    @property
    def goodput(self) -> float:
        return self.tokens / self.seconds
