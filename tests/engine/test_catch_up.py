"""Switching speculation back on: a drafter that sat out a spell at K = 0 catches up in a pass
of its own, timed apart, so that the controller can charge the switch and not the arm; one
that sat out a few steps takes them in drafting's first forward, as it takes a bonus token."""

from __future__ import annotations

import pytest

from adaptivespec.engine import proposers
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.runner import PrefillItem
from adaptivespec.engine.sampling import SamplingParams

from ..conftest import TinyPair, engine_config

PROMPTS = [[5, 6, 7, 8, 5, 6, 7], [9, 10, 11], [12, 13, 14, 15, 16, 12, 13], [20, 21]]
GREEDY = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)


def _runner(pair: TinyPair, proposer: str) -> HFRunner:
    runner = load_runner(engine_config(pair, proposer), progress=False).runner
    assert isinstance(runner, HFRunner)
    runner.prefill(0, [PrefillItem(prompt, GREEDY, seed=row) for row, prompt in enumerate(PROMPTS)])
    return runner


@pytest.mark.parametrize("idle_steps", [proposers.FOLDED_LAG + 1, proposers.FOLDED_LAG + 4])
def test_a_drafter_back_from_a_spell_at_k0_reports_its_catch_up(tiny_pair: TinyPair, idle_steps: int) -> None:
    runner, batch = _runner(tiny_pair, "draft"), len(PROMPTS)
    drafting = runner.decode(batch, 2)
    assert (drafting.catch_up_tokens, drafting.catch_up_seconds) == (0, 0.0)  # in step since prefill
    for _ in range(idle_steps):
        plain = runner.decode(batch, 0)
        assert (plain.catch_up_tokens, plain.catch_up_seconds) == (0, 0.0)  # K = 0 never drafts
    back = runner.decode(batch, 2)
    # Each row missed one token per plain step, and may owe its bonus token from before.
    assert batch * idle_steps <= back.catch_up_tokens <= batch * (idle_steps + 1)
    assert 0.0 < back.catch_up_seconds <= back.draft_seconds <= back.step_seconds
    steady = runner.decode(batch, 2)
    assert (steady.catch_up_tokens, steady.catch_up_seconds) == (0, 0.0)


@pytest.mark.parametrize("idle_steps", [2, 4, proposers.FOLDED_LAG - 2])
def test_a_few_steps_at_k0_ride_in_the_first_forward_and_draft_as_a_catch_up_apart_would(
    tiny_pair: TinyPair, idle_steps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is reported apart, and every row keeps the drafts it keeps when the same steps
    are caught up in a pass of their own (the drafter's cache holds the same columns)."""

    def back(folded: bool) -> list[int]:
        if not folded:
            monkeypatch.setattr(proposers, "FOLDED_LAG", 2)  # drafting's own lag only
        runner, batch = _runner(tiny_pair, "draft"), len(PROMPTS)
        runner.decode(batch, 2)
        for _ in range(idle_steps):
            runner.decode(batch, 0)
        out = runner.decode(batch, 4)
        assert (out.catch_up_tokens > 0) == (not folded)
        assert (out.catch_up_seconds == 0.0) if folded else (out.catch_up_seconds > 0.0)
        monkeypatch.undo()
        return [*out.accepted, *(len(t) for t in out.tokens)]

    assert back(folded=True) == back(folded=False)


def test_prompt_lookup_has_nothing_to_catch_up(tiny_pair: TinyPair) -> None:
    runner, batch = _runner(tiny_pair, "ngram"), len(PROMPTS)
    for k in (0, 0, 0, 3, 3):
        out = runner.decode(batch, k)
        assert (out.catch_up_tokens, out.catch_up_seconds) == (0, 0.0)
