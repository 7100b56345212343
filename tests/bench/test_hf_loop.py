"""`bench control --backend hf`'s closed loop: what a segment's time is made of."""

from __future__ import annotations

import pytest

from adaptivespec.bench.hf_loop import HFLoop
from adaptivespec.controller.learning_settings import ARMS
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.engine.telemetry import StepTelemetry
from adaptivespec.sim.loop import PhaseResult
from adaptivespec.sim.workload import Phase

from ..conftest import TinyPair, engine_config

# Prompts long enough that prefilling one takes as long as several decode steps.
PROMPTS = [[5 + (i * 7 + j) % 200 for j in range(160)] for i in range(6)]


def test_a_segment_times_its_decode_steps_and_not_the_prompts_it_refills(tiny_pair: TinyPair) -> None:
    """Rows finish inside the segment (budgets of at most 3 tokens over 12 steps) and are
    prefilled with the next prompt: every contender prefills the same prompts for the same
    tokens, so the segment's time is its decode steps' alone, and a policy that ends rows
    sooner is not charged a long prompt's prefill in a segment of a few steps."""
    runner = load_runner(engine_config(tiny_pair, "ngram"), progress=False).runner
    assert isinstance(runner, HFRunner)
    loop = HFLoop(runner, PROMPTS, new_tokens=3, load=(Phase(concurrency=2, steps=12),), seed=0)
    steps: list[StepTelemetry] = []
    result = loop.segment(0, 0, 12, FixedK(2, "ngram"), steps.append)
    assert result.steps == len(steps) == 12
    assert result.tokens >= 2 * 12  # every row emits a token a step: each refilled 3 times or more
    assert result.seconds == sum(s.step_seconds for s in steps)


def test_settling_and_warming_leave_no_trace_in_what_is_measured(tiny_pair: TinyPair) -> None:
    """The untimed steps before a run and before a bucket feed no learner and no drafter: a
    segment measured after them emits exactly the tokens the same segment emits on a runner
    that never ran them, and the warm-up fits a request's context at the smallest budget."""
    config = engine_config(tiny_pair, "ngram")
    results = []
    for settle in (False, True):
        runner = load_runner(config, progress=False).runner
        assert isinstance(runner, HFRunner)
        loop = HFLoop(runner, PROMPTS, new_tokens=1, load=(Phase(concurrency=2, steps=12),), seed=0)
        if settle:
            assert loop.settle(seconds=0.2) >= len(ARMS)  # at least one warm-up: every K
            assert loop.warm(0) == len(ARMS)  # every K of the one drafter
        steps: list[StepTelemetry] = []
        results.append((loop.segment(0, 0, 12, FixedK(2, "ngram"), steps.append), steps))
    (plain, plain_steps), (settled, settled_steps) = results
    assert settled.tokens == plain.tokens
    assert [s.accepted for s in settled_steps] == [s.accepted for s in plain_steps]


def test_a_segment_reads_the_machines_pace_first_and_leaves_its_requests_as_they_were(
    tiny_pair: TinyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference steps before a segment are rewound: the segment emits and keeps exactly
    what it does when they never run, and its result carries their pace."""
    config = engine_config(tiny_pair, "ngram")

    def segment() -> tuple[PhaseResult, list[StepTelemetry]]:
        runner = load_runner(config, progress=False).runner
        assert isinstance(runner, HFRunner)
        loop = HFLoop(runner, PROMPTS, new_tokens=5, load=(Phase(concurrency=2, steps=8),), seed=0)
        steps: list[StepTelemetry] = []
        return loop.segment(0, 0, 8, FixedK(2, "ngram"), steps.append), steps

    with monkeypatch.context() as unpaced:
        unpaced.setattr(HFLoop, "_pace", lambda self, batch: 1.0)
        plain, plain_steps = segment()
    paced_result, paced_steps = segment()
    assert plain.levels == [1.0]
    assert len(paced_result.levels) == 1 and paced_result.levels[0] > 0
    assert paced_result.tokens == plain.tokens
    assert [s.accepted for s in paced_steps] == [s.accepted for s in plain_steps]
