"""The EAGLE-3 proposer on a tiny target and a head trained for it (the `tiny_head` fixture):
output is plain decoding's token for token, greedy equals transformers' `generate()`, and
the head really drafts: it is kept often, and rejected too."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.eagle3_proposer import catch_up_groups
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.records import Completion
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.spec_policy import SpecPolicy
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.engine.telemetry import StepTelemetry
from adaptivespec.errors import ConfigError

from ..conftest import TEST_DEVICE, TinyPair
from .drafting import PROMPTS, serve_staggered


def config_with_head(
    pair: TinyPair, head: Path | None, proposer: str = "eagle3", runtime: str = "torch"
) -> EngineConfig:
    """The tiny target drafting with `head`; the openvino runtime's tests ask for theirs."""
    models = ModelConfig(
        target=str(pair.target),
        draft=None if head is None else str(head),
        proposer=proposer,
        device=TEST_DEVICE,  # type: ignore[arg-type]
        dtype="float32",
        runtime=runtime,  # type: ignore[arg-type]
    )
    return EngineConfig(models=models, max_batch=16, max_context=256, max_queued=64, max_spec_tokens=8)


def params(sampled: bool, i: int) -> SamplingParams:
    if sampled:
        return SamplingParams(max_tokens=32, temperature=0.9, top_p=0.8, seed=7 + i, ignore_eos=True)
    return SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True)


async def serve_with(
    config: EngineConfig, policy: SpecPolicy | None, sampled: bool, rounds: int = 1
) -> tuple[list[Completion], list[StepTelemetry]]:
    return await serve_staggered(config, PROMPTS, lambda i: params(sampled, i), policy, rounds)


class Rotating:
    """K changes every step, K = 0 among them: the head sits out steps and must catch up."""

    def k_for(self, batch_size: int, context_len: int) -> int:
        return (0, 3, 1, 8, 2, 0, 4)[(context_len + batch_size) % 7]

    def method_for(self, batch_size: int, context_len: int) -> str | None:
        return None


POLICIES = [FixedK(1), FixedK(4), FixedK(8), Rotating()]
POLICY_IDS = ["k1", "k4", "k8", "rotating"]


@pytest.mark.parametrize("policy", POLICIES, ids=POLICY_IDS)
def test_greedy_drafting_with_the_head_is_transformers_generate(
    tiny_pair: TinyPair, tiny_head: Path, policy: SpecPolicy
) -> None:
    check_greedy_drafting(config_with_head(tiny_pair, tiny_head), policy)


def check_greedy_drafting(config: EngineConfig, policy: SpecPolicy) -> None:
    """Greedy output with the head drafting is `generate()`'s, and the head is kept often."""
    done, records = asyncio.run(serve_with(config, policy, sampled=False))
    plain = replace(config.models, proposer="ngram", draft=None, runtime="torch")
    model = load_runner(replace(config, models=plain), progress=False).runner.target.model
    for completion in done:
        prompt = torch.tensor([completion.prompt_ids])
        reference = model.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=32, do_sample=False
        )
        expected = reference[0, prompt.shape[1] :].tolist()
        assert completion.token_ids[: len(expected)] == expected
    drafting = [r for r in records if r.k > 0]
    assert {r.method for r in drafting} == {"eagle3"}
    accepted, drafted = sum(r.accepted for r in drafting), sum(r.drafted for r in drafting)
    row_steps = sum(r.drafted / r.k for r in drafting)
    assert accepted > 0.3 * row_steps, "the trained head must be kept often (tokens per row and step)"
    assert accepted < drafted, "and rejected too"
    if isinstance(policy, Rotating):
        assert any(r.catch_up_tokens > 0 for r in drafting)  # it sat out K = 0 steps


def test_sampled_drafting_with_the_head_keeps_plain_decodings_tokens(
    tiny_pair: TinyPair, tiny_head: Path
) -> None:
    check_sampled_drafting(config_with_head(tiny_pair, tiny_head))


def check_sampled_drafting(config: EngineConfig) -> None:
    """Top-p 0.8: the head's drafts are sampled through its reduced vocabulary under the noise
    the target uses, so every token is the one plain decoding draws."""
    plain, _ = asyncio.run(serve_with(replace(config, max_spec_tokens=0), FixedK(0), sampled=True))
    for policy in (FixedK(4), Rotating()):
        spec, records = asyncio.run(serve_with(config, policy, sampled=True))
        for reference, completion in zip(plain, spec, strict=True):
            assert completion.token_ids == reference.token_ids
        assert sum(r.accepted for r in records) > 0


def test_proposer_eagle3_without_a_head_says_how_to_get_one(tiny_pair: TinyPair) -> None:
    with pytest.raises(ConfigError, match="train-draft"):
        config_with_head(tiny_pair, None)
    with pytest.raises(ConfigError, match="eagle3"):
        config_with_head(tiny_pair, tiny_pair.draft, "eagle3")  # a causal LM is not a head


def test_auto_drafts_with_a_given_head(tiny_pair: TinyPair, tiny_head: Path) -> None:
    config = config_with_head(tiny_pair, tiny_head, "auto")
    assert config.models.proposers == ("eagle3",)
    assert load_runner(config, progress=False).runner.methods == ("eagle3",)


def test_the_controller_chooses_between_the_head_and_prompt_lookup(
    tiny_pair: TinyPair, tiny_head: Path
) -> None:
    """Both loaded (`--proposer ngram,eagle3`), the live controller over (drafter, K): sampled
    output is still plain decoding's, and the head drafted on some of the steps."""
    config = config_with_head(tiny_pair, tiny_head, "ngram,eagle3")
    plain, _ = asyncio.run(serve_with(replace(config, max_spec_tokens=0), FixedK(0), sampled=True))

    assert load_runner(config, progress=False).runner.methods == ("ngram", "eagle3")
    done, records = asyncio.run(serve_with(config, None, sampled=True, rounds=2))
    for reference, completion in zip(plain + plain, done, strict=True):
        assert completion.token_ids == reference.token_ids
    assert "eagle3" in {r.method for r in records if r.k > 0}


def test_a_prompt_costs_the_head_nothing_until_it_drafts(tiny_pair: TinyPair, tiny_head: Path) -> None:
    """Prompts go in and steps run at K = 0 without a forward of the head; the first draft
    catches every prompt up, reported as its step's catch-up, the long prompt in a forward of
    its own instead of padding the short ones to its length."""
    from adaptivespec.engine.runner import PrefillItem

    runner = load_runner(config_with_head(tiny_pair, tiny_head), progress=False).runner
    widths: list[int] = []  # tokens per row of each head forward
    head = runner.proposers["eagle3"].head  # type: ignore[attr-defined]
    head.register_forward_hook(lambda module, args, out: widths.append(int(args[0].shape[1])))
    greedy = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    prompts = [[5, 9, 12, 40, 41, 7], [3, 3, 8], [17], list(range(20, 60))]
    runner.prefill(0, [PrefillItem(p, greedy, seed=0) for p in prompts])
    plain = runner.decode(len(prompts), 0)
    assert widths == [] and plain.catch_up_tokens == 0
    drafting = runner.decode(len(prompts), 2)
    # Each row holds its prompt, the first token and one plain step's; all but the last column
    # are caught up: rows 0-2 together (padded to 6), row 3 alone, then the two drafts' forwards.
    assert drafting.catch_up_tokens == sum(len(p) for p in prompts)
    assert widths == [6, 40, 1, 1]
    assert 0.0 < drafting.catch_up_seconds <= drafting.draft_seconds
    steady = runner.decode(len(prompts), 2)
    assert steady.catch_up_tokens == 0


def test_catch_up_groups_put_each_row_far_behind_alone() -> None:
    missed = np.array([0, 40, 1, 2, 0, 17, 0])
    assert catch_up_groups(missed, alone=16) == [(1, 2), (2, 5), (5, 6)]
    assert catch_up_groups(np.zeros(3, dtype=np.int64)) == []
    assert catch_up_groups(np.array([3, 1])) == [(0, 2)]


def test_the_proposer_drafts_what_training_teaches_at_the_same_positions(
    tiny_pair: TinyPair, tiny_head: Path
) -> None:
    """The serving path (states kept by the tap from prefill, verify and plain steps, head
    columns caught up and rewritten, drafts fed back) feeds the head exactly what the trainer
    feeds it: each draft equals the trainer's prediction at that position and depth, wherever
    the drafts before it were right (training feeds the true tokens there)."""
    from adaptivespec.engine.runner import PrefillItem
    from adaptivespec.train.head_trainer import HeadTrainer, TrainSettings
    from adaptivespec.train.teacher import Teacher

    runner = load_runner(config_with_head(tiny_pair, tiny_head), progress=False).runner
    proposer = runner.proposers["eagle3"]
    seen: list[tuple[int, int, list[int]]] = []  # (row, length when drafted, drafts)
    propose = proposer.propose

    def recording(rows, batch, k, sampling):  # type: ignore[no-untyped-def]
        proposal = propose(rows, batch, k, sampling)
        for r in range(batch):
            seen.append((r, int(rows.host_lens[r]), proposal.drafts[r].tolist()))
        return proposal

    proposer.propose = recording  # type: ignore[method-assign]
    greedy = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    prompts = [[5, 9, 12, 40, 41, 7], [3, 3, 8], [17]]
    runner.prefill(0, [PrefillItem(p, greedy, seed=0) for p in prompts])
    for k in (1, 3, 0, 0, 2, 4, 0, 1, 3, 3, 3):
        runner.decode(3, k)
    target = runner.target.model
    finals = [runner.rows.host_tokens[r, : runner.rows.host_lens[r]].tolist() for r in range(3)]
    shard = Teacher(target, proposer.head.spec.aux_layers or ()).record(finals, torch.float32)
    trainer = HeadTrainer(proposer.head, target.get_input_embeddings(), TrainSettings(ttt_steps=3))
    with torch.no_grad():
        predicted = trainer.predictions(shard)  # per depth, [N, W] target ids
    checked = [0, 0, 0]
    for row, length, drafts in seen:
        final = finals[row]
        for depth, draft in enumerate(drafts[:3]):
            if final[length : length + depth] != drafts[:depth]:
                break  # a draft before it was rejected: training never sees this prefix
            assert draft == int(predicted[depth][row, length - 2]), (row, length, depth)
            checked[depth] += 1
    assert checked[0] == 3 * 8 and checked[1] > 0 and checked[2] > 0
