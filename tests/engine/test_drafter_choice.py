"""Several drafters in one runner, the policy naming which one drafts at each step: the output is
plain decoding's, token for token, whichever drafter ran and however often they switched.

Each drafter that sat out steps catches up by itself when it next drafts: the draft model's KV
in its first forward after a few steps and in a pass of its own after a spell, the suffix trees
from the committed tokens, prompt lookup with nothing to catch.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace

import pytest
import torch

from adaptivespec.config import EngineConfig
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.proposers import FOLDED_LAG
from adaptivespec.engine.records import Completion
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.spec_policy import SpecPolicy
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.engine.suffix_proposer import suffix_available
from adaptivespec.engine.telemetry import StepTelemetry

from ..conftest import TinyPair, engine_config
from .drafting import PROMPTS, serve_staggered

DRAFTERS = ("draft", "ngram", "suffix") if suffix_available() else ("draft", "ngram")
SPELL = FOLDED_LAG + 4  # context positions: steps at K = 0 in a row, past what a first forward takes


class Rotating:
    """A drafter and K that change from step to step (the batch's mean context grows each step),
    K = 0 among them: every drafter sits out steps and must catch up. Spells at K = 0 longer
    than a draft model takes in its first forward come round too, so that it also catches up
    in a pass of its own."""

    def __init__(self, methods: tuple[str, ...]) -> None:
        self.methods = methods

    def k_for(self, batch_size: int, context_len: int) -> int:
        if (context_len // SPELL) % 3 == 2:  # mean contexts 24-35 here, mid-request
            return 0
        return (0, 3, 1, 6, 2)[(context_len + batch_size) % 5]

    def method_for(self, batch_size: int, context_len: int) -> str | None:
        return self.methods[(context_len // 2 + batch_size) % len(self.methods)]


def _config(tiny_pair: TinyPair) -> EngineConfig:
    config = engine_config(tiny_pair, "draft", max_spec_tokens=8)
    return replace(config, models=replace(config.models, proposer=",".join(DRAFTERS)))


def _params(sampled: bool, i: int) -> SamplingParams:
    if sampled:
        return SamplingParams(max_tokens=32, temperature=0.9, top_p=0.8, seed=7 + i, ignore_eos=True)
    return SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True)


async def _serve(
    config: EngineConfig, policy: SpecPolicy | None, sampled: bool
) -> tuple[list[Completion], list[StepTelemetry]]:
    """Every prompt, staggered, twice (the suffix trees' second round drafts from the first).
    Without a policy the controller steers, over the runner's drafters."""
    return await serve_staggered(config, PROMPTS, lambda i: _params(sampled, i), policy, rounds=2)


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "top-p"])
def test_switching_drafters_step_by_step_keeps_plain_decodings_tokens(
    tiny_pair: TinyPair, sampled: bool
) -> None:
    config = _config(tiny_pair)
    plain, _ = asyncio.run(_serve(config, FixedK(0), sampled))
    mixed, records = asyncio.run(_serve(config, Rotating(DRAFTERS), sampled))
    for reference, spec in zip(plain, mixed, strict=True):
        assert spec.token_ids == reference.token_ids
    drafting = [r for r in records if r.k > 0]
    assert Counter(r.method for r in drafting).keys() == set(DRAFTERS)  # each drafter drafted
    assert {r.method for r in records if r.k == 0} <= {""}
    assert any(r.catch_up_tokens > 0 for r in drafting if r.method == "draft")  # it sat out a spell
    accepted = sum(r.accepted for r in drafting)
    assert 0 < accepted < sum(r.drafted for r in drafting), "both acceptance and rejection must happen"
    if not sampled:  # and plain decoding is transformers' own, which stops at the EOS we ignore
        model = load_runner(config, progress=False).runner.target.model
        lengths = []
        for completion in mixed[: len(PROMPTS)]:
            prompt = torch.tensor([completion.prompt_ids])
            mask = torch.ones_like(prompt)
            reference = model.generate(prompt, attention_mask=mask, max_new_tokens=32, do_sample=False)
            expected = reference[0, prompt.shape[1] :].tolist()
            assert completion.token_ids[: len(expected)] == expected
            lengths.append(len(expected))
        assert max(lengths) >= 16


def test_the_controller_choosing_drafters_keeps_plain_decodings_tokens(tiny_pair: TinyPair) -> None:
    """The controller over (drafter, K), live: sampled output is still plain decoding's, and
    it tried more than one drafter."""
    config = _config(tiny_pair)
    plain, _ = asyncio.run(_serve(config, FixedK(0), sampled=True))
    learned, records = asyncio.run(_serve(config, None, sampled=True))
    for reference, spec in zip(plain, learned, strict=True):
        assert spec.token_ids == reference.token_ids
    assert len({r.method for r in records if r.k > 0}) >= 2


def test_a_drafter_the_runner_lacks_fails_the_step_and_says_which_it_has(tiny_pair: TinyPair) -> None:
    engine_config_ = engine_config(tiny_pair, "ngram", max_spec_tokens=4)
    runner = load_runner(engine_config_, progress=False).runner
    assert runner.methods == ("ngram",)
    with pytest.raises(ValueError, match=r"no 'suffix' drafter here; this runner drafts with \('ngram',\)"):
        runner.decode(1, 2, "suffix")
