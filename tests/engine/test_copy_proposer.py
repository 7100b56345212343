"""The copy proposer: each row verifies the longer draft of prompt lookup and suffix trees, and
stays exact. Skips where arctic-inference is not installed, unless ADAPTIVESPEC_REQUIRE_SUFFIX
is set, as CI sets it."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from adaptivespec.config import EngineConfig, SuffixSettings
from adaptivespec.engine.copy_proposer import CopyProposer
from adaptivespec.engine.proposers import NgramProposer
from adaptivespec.engine.records import Completion
from adaptivespec.engine.rows import RowState
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.static_policy import FixedK, StaticTable
from adaptivespec.engine.suffix_proposer import SuffixProposer

from ..conftest import TinyPair, engine_config
from .drafting import greedy, rows_of, serve_in_groups_of_three, skip_without_suffix, top_p

skip_without_suffix()

GREEDY = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)


def _copy(settings: SuffixSettings, max_batch: int) -> CopyProposer:
    return CopyProposer(NgramProposer(3, 1), SuffixProposer(settings, max_batch))


def _drafts(proposer: CopyProposer, rows: RowState, batch: int, k: int) -> list[list[int]]:
    proposal = proposer.propose(rows, batch, k, greedy(batch))
    return [proposal.drafts[r, : proposal.host_n_drafts[r]].tolist() for r in range(batch)]


async def _serve(
    config: EngineConfig, policy: FixedK | StaticTable, sampled: bool, rounds: int = 2
) -> list[Completion]:
    return await serve_in_groups_of_three(
        config, policy, lambda i: top_p(i, seed=57) if sampled else GREEDY, rounds
    )


def test_each_row_takes_the_longer_draft() -> None:
    """Row 0 repeats itself: prompt lookup copies all that followed the match, suffix only what
    its 3-token match earns. Row 1 holds nothing to look up, and suffix drafts what an earlier
    request wrote, from the global tree. Row 2 finds nothing anywhere."""
    proposer = _copy(SuffixSettings(), max_batch=3)
    earlier_prompt, earlier_output = [1, 2, 3], [40, 41, 42, 43, 44, 45, 46, 47]
    rows = rows_of(earlier_prompt + earlier_output, [0], [0])
    rows.set_lens(0, [len(earlier_prompt)])
    proposer.prefill(0, [earlier_prompt], [0])
    rows.set_lens(0, [len(earlier_prompt) + len(earlier_output)])
    proposer.propose(rows, 1, 4, greedy(1))  # the trees take the output
    repeating, newcomer, stranger = [5, 6, 7, 8, 9, 10, 11, 5, 6, 7], [90, 91, 40, 41, 42, 43], [70, 71]
    for row, prompt in enumerate((repeating, newcomer, stranger)):
        rows.write_prompt(row, prompt)
        rows.set_lens(row, [len(prompt)])
    proposer.prefill(0, [repeating, newcomer, stranger], [0, 0, 0])
    assert _drafts(proposer, rows, 3, 8) == [[8, 9, 10, 11, 5, 6, 7], [44, 45, 46, 47], []]


def test_a_tie_takes_suffix_s_draft() -> None:
    """Both find a match as long, and draft different continuations: suffix's is the one whose
    continuation is the most frequent, prompt lookup's the latest."""
    proposer = _copy(SuffixSettings(max_cached_requests=0, max_spec_factor=4.0), max_batch=1)
    history = [1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 2]  # "1 2" went on to 3 twice, to 4 once (latest)
    rows = rows_of(history)
    proposer.prefill(0, [history], [0])
    lookup = NgramProposer(3, 1).draft_rows(rows, np.arange(1), 1)
    assert lookup[0][0].tolist() == [4]
    assert _drafts(proposer, rows, 1, 1) == [[3]]


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "top-p"])
@pytest.mark.parametrize("k", [4, 16])
def test_copy_output_equals_plain_decoding(tiny_pair: TinyPair, k: int, sampled: bool) -> None:
    """Greedy, and sampled under coupled noise, the tokens are K = 0's, in a staggered batch
    served twice (the second round drafting from the first round's outputs too)."""
    config = engine_config(tiny_pair, "copy", max_spec_tokens=16)
    plain = asyncio.run(_serve(config, FixedK(0), sampled))
    outputs = asyncio.run(_serve(config, FixedK(k), sampled))
    for reference, spec in zip(plain, outputs, strict=True):
        assert spec.token_ids == reference.token_ids
    drafted = sum(o.stats.drafted for o in outputs)
    accepted = sum(o.stats.accepted for o in outputs)
    assert 0 < accepted < drafted, "both acceptance and rejection must happen for the check to mean anything"


def test_switching_k_and_chunked_prompts_stay_exact(tiny_pair: TinyPair) -> None:
    """Steps at K = 0 touch neither part; prompts go in 5 tokens a step."""
    chunked = engine_config(tiny_pair, "copy", max_spec_tokens=16, prefill_chunk_tokens=5)
    plain = asyncio.run(_serve(chunked, FixedK(0), sampled=False))
    flapping = StaticTable.parse([(1, 3, 6), (4, 6, 0), (7, 9, 3)], default_k=0)
    for reference, spec in zip(plain, asyncio.run(_serve(chunked, flapping, sampled=False)), strict=True):
        assert spec.token_ids == reference.token_ids
