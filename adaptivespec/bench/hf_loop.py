"""A closed load loop on the real `hf` runner, for `bench control --backend hf`.

A segment keeps B rows decoding on the real models; a row that has generated its budget is
re-prefilled with the next held-out prompt. Segments start from seeded prompts and budgets,
so every policy given the same seed sees the same requests. Time is the decode steps' wall
time, measured (prefills are left out: see `HFLoop.segment`).
"""

from __future__ import annotations

import time

import numpy as np

from adaptivespec.controller.arms import arm
from adaptivespec.controller.learning_settings import ARMS
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.runner import DecodeOutput, PrefillItem
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.spec_policy import SpecPolicy
from adaptivespec.engine.telemetry import decode_record
from adaptivespec.sim.loop import PhaseResult, StepSink
from adaptivespec.sim.workload import Phase

GREEDY = SamplingParams(max_tokens=1, temperature=0.0)
# Long enough for a background load's workers to start and for the thread governor to take the
# two agreeing readings a resize needs (engine/thread_governor.py), with a reading to spare.
SETTLE_SECONDS = 3.0
# Plain steps that read the machine's pace as a segment begins (their median: one stall does
# not set it). Rewound afterwards, so the segment's requests start where they would have.
LEVEL_STEPS = 3


class HFLoop:
    def __init__(
        self, runner: HFRunner, prompts: list[list[int]], new_tokens: int, load: tuple[Phase, ...], seed: int
    ) -> None:
        self.runner = runner
        self.prompts = prompts
        self.new_tokens = new_tokens
        self.load = load
        self.seed = seed
        self.model_key = runner.model_key
        self.hardware_key = runner.hardware_key

    def segment(
        self, phase: int, repeat: int, steps: int, policy: SpecPolicy, on_step: StepSink | None = None
    ) -> PhaseResult:
        """`steps` decode steps at phase `phase`'s batch size, on requests seeded by (phase, repeat).

        Every contender given the same (phase, repeat) starts from the same prompts and budgets.
        Prefills are not timed, the initial one nor those of rows that finish mid-segment: every
        contender prefills the same prompts for the same tokens, so per token a prefill costs
        each alike, while in a segment of a few steps one long prompt's prefill (a source file
        to edit) outweighs the segment's decode steps, and falls on whichever contender happened
        to end a row inside it. What is compared is the decode: what the policies change.
        """
        rng = np.random.default_rng([self.seed, phase, repeat])
        batch = self.load[phase].concurrency
        # Every contender replays these requests: none may draft from another's outputs.
        self.runner.forget_history()
        next_prompt = int(rng.integers(len(self.prompts)))
        self._fill(batch, next_prompt)
        next_prompt += batch
        remaining = rng.integers(1, self.new_tokens + 1, batch)  # a batch caught mid-generation
        result = PhaseResult(batch, levels=[self._pace(batch)])
        for _ in range(steps):
            lens = self.runner.rows.host_lens[:batch]
            length = int(lens.mean())
            out = self.runner.decode(batch, policy.k_for(batch, length), policy.method_for(batch, length))
            emitted = np.minimum(np.array([len(t) for t in out.tokens]), remaining)
            remaining -= emitted
            _account(result, out, emitted)
            if on_step is not None:
                context = float(lens.mean())
                kept = max(int(emitted.sum()), 1)
                keys = {"model_key": self.model_key, "hardware_key": self.hardware_key}
                on_step(decode_record(out, **keys, batch_size=batch, context=context, emitted=kept))
            for row in np.flatnonzero(remaining <= 0).tolist():
                self.runner.prefill(row, [self._item(next_prompt)])
                next_prompt += 1
                remaining[row] = self.new_tokens
        return result

    def settle(self, seconds: float = SETTLE_SECONDS) -> int:
        """Untimed steps at the first phase's batch size, for `seconds` of wall time, before
        anything is measured; returns how many ran.

        The machine a run measures is the one it ends up on: a background load started, the
        thread team resized to the cores it leaves, caches warm. Measured from the first step
        instead, the first repeat of the first bucket falls inside that transition (steps twice
        as slow and erratic, on threads that lose their core to the load), and only on the
        contenders that repeat runs first: the interleaving no longer spreads the drift alike.
        The steps are the first phase's warm-up (`warm`), repeated: every K and drafter."""
        steps, started = 0, time.monotonic()
        while time.monotonic() - started < seconds or steps == 0:
            steps += self.warm(0)
        return steps

    def warm(self, phase: int) -> int:
        """One untimed step at every K the arms span and every drafter, at phase `phase`'s batch
        size, before its first segment; returns how many ran.

        A step whose shape (batch size, K) the process has not run before pays for it: kernels
        picked and buffers allocated on first use make it markedly slower than the same step the
        next time (docs/results.md). Unwarmed, that falls on whichever contender first runs each
        K at a new batch size: a fixed K pays it once in its segments, but a learner that probes
        an arm once keeps the slow step as all it knows of that arm. The drafters forget these
        steps, and no learner sees them."""
        batch = self.load[phase].concurrency
        methods: tuple[str | None, ...] = self.runner.methods or (None,)
        steps = [(method, k) for method in methods for k in (ARMS if method else (0,))]
        # A request may write new_tokens past its prompt, and one step's K + 1 beyond them (the
        # margin `segment` relies on too): refill once the next step would pass new_tokens.
        room = self.new_tokens
        written = room  # a fresh request before the first step
        for method, k in steps:
            if written + k + 1 > room:  # a fresh request before this step could outgrow it
                self.runner.forget_history()
                self._fill(batch, 0)
                written = 0
            self.runner.decode(batch, k, method)
            written += k + 1
        self.runner.forget_history()
        return len(steps)

    def _pace(self, batch: int) -> float:
        """The median seconds of `LEVEL_STEPS` plain steps over the rows as they are, each
        rewound: the same reference step before every contender's segment, so that a busy
        spell of the machine is seen as such and not as the contender's (machine_level.py).
        A plain step makes no drafter call, so no drafter sees these tokens."""
        seconds = []
        for _ in range(LEVEL_STEPS):
            seconds.append(self.runner.decode(batch, 0).step_seconds)
            self.runner.rows.rewind(batch, 1)
        return float(np.median(seconds))

    def _fill(self, batch: int, first: int) -> None:
        """Rows [0, batch) take prompts first, first + 1, ..., prefilled 16 at a time."""
        for start in range(0, batch, 16):
            self.runner.prefill(start, [self._item(first + r) for r in range(start, min(start + 16, batch))])

    def _item(self, index: int) -> PrefillItem:
        return PrefillItem(self.prompts[index % len(self.prompts)], GREEDY, 0)


def _account(result: PhaseResult, out: DecodeOutput, emitted: np.ndarray) -> None:
    result.steps += 1
    result.tokens += int(emitted.sum())
    result.seconds += out.step_seconds
    result.k_counts[out.k] = result.k_counts.get(out.k, 0) + 1
    ran = str(arm(out.method, out.k))
    result.arm_counts[ran] = result.arm_counts.get(ran, 0) + 1
    result.itl_seconds.append(out.step_seconds / np.maximum(emitted, 1))
    result.itl_weights.append(emitted)
    result.goodput_trace.append(float(emitted.sum()) / out.step_seconds)
