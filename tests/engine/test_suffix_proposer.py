"""The suffix proposer: exact at every K, and drafting from its own request and from others'.

Its trees are arctic-inference's (ops/install-suffix.sh builds them; .ci/run does). Where it
is not installed these tests skip, unless ADAPTIVESPEC_REQUIRE_SUFFIX is set, as CI sets it.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from adaptivespec.config import EngineConfig, SuffixSettings
from adaptivespec.engine.engine import Engine
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.records import Completion
from adaptivespec.engine.rows import RowState
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.static_policy import FixedK, StaticTable
from adaptivespec.engine.suffix_proposer import SuffixProposer

from ..conftest import TinyPair, engine_config
from .drafting import (
    REPEATING_PROMPTS,
    greedy,
    rows_of,
    serve_in_groups_of_three,
    skip_without_suffix,
    staggered,
    top_p,
)

skip_without_suffix()

PROMPTS = REPEATING_PROMPTS
GREEDY = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)


async def _serve(
    config: EngineConfig, policy: FixedK | StaticTable, sampled: bool, rounds: int = 1
) -> list[Completion]:
    """Every prompt, staggered: each group joins a batch that is already decoding. `rounds` > 1
    serves them again, when the global tree holds the first round's outputs."""
    return await serve_in_groups_of_three(
        config, policy, lambda i: top_p(i, seed=31) if sampled else GREEDY, rounds
    )


@pytest.fixture(scope="module")
def plain(tiny_pair: TinyPair) -> dict[bool, list[Completion]]:
    config = engine_config(tiny_pair, "ngram", max_spec_tokens=16)
    return {sampled: asyncio.run(_serve(config, FixedK(0), sampled, rounds=2)) for sampled in (False, True)}


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "top-p"])
@pytest.mark.parametrize("k", [1, 4, 8, 16])
def test_suffix_output_equals_plain_decoding(
    tiny_pair: TinyPair, plain: dict[bool, list[Completion]], k: int, sampled: bool
) -> None:
    """Greedy, and sampled under coupled noise (sampling.py), the tokens are K = 0's, token
    for token, in a staggered batch; the second round drafts from the first round's outputs."""
    outputs = asyncio.run(
        _serve(engine_config(tiny_pair, "suffix", max_spec_tokens=16), FixedK(k), sampled, rounds=2)
    )
    for reference, spec in zip(plain[sampled], outputs, strict=True):
        assert spec.token_ids == reference.token_ids
    drafted = sum(o.stats.drafted for o in outputs)
    accepted = sum(o.stats.accepted for o in outputs)
    assert 0 < accepted < drafted, "both acceptance and rejection must happen for the check to mean anything"
    assert max(o.stats.drafted / o.stats.steps for o in outputs) <= k


def test_plain_decoding_equals_transformers_generate(
    tiny_pair: TinyPair, plain: dict[bool, list[Completion]]
) -> None:
    """The reference above is transformers' own greedy decoding."""
    model = load_runner(
        engine_config(tiny_pair, "ngram", max_spec_tokens=16), progress=False
    ).runner.target.model
    for completion in plain[False][: len(PROMPTS)]:
        prompt = torch.tensor([completion.prompt_ids])
        reference = model.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=GREEDY.max_tokens, do_sample=False
        )
        expected = reference[0, prompt.shape[1] :].tolist()
        assert completion.token_ids[: len(expected)] == expected


def test_switching_k_mid_stream_and_chunked_prompts_stay_exact(
    tiny_pair: TinyPair, plain: dict[bool, list[Completion]]
) -> None:
    """Steps at K = 0 never touch the trees; the next drafting step feeds them what they missed.
    Prompts go in 5 tokens a step, some into plain steps' own forwards."""
    chunked = engine_config(tiny_pair, "suffix", max_spec_tokens=16, prefill_chunk_tokens=5)
    flapping = StaticTable.parse([(1, 3, 6), (4, 6, 0), (7, 9, 3)], default_k=0)
    outputs = asyncio.run(_serve(chunked, flapping, sampled=False, rounds=2))
    for reference, spec in zip(plain[False], outputs, strict=True):
        assert spec.token_ids == reference.token_ids


def _drafts(proposer: SuffixProposer, rows: RowState, batch: int, k: int) -> list[list[int]]:
    proposal = proposer.propose(rows, batch, k, greedy(batch))
    return [proposal.drafts[r, : proposal.host_n_drafts[r]].tolist() for r in range(batch)]


def _finish(proposer: SuffixProposer, rows: RowState, prompt: list[int], output: list[int]) -> None:
    """One request in row 0: its prompt, a drafting step, then its output, then the row reused."""
    rows.write_prompt(0, prompt + output)
    rows.set_lens(0, [len(prompt)])
    proposer.prefill(0, [prompt], [0])
    proposer.propose(rows, 1, 4, greedy(1))
    rows.set_lens(0, [len(prompt) + len(output)])
    proposer.propose(rows, 1, 4, greedy(1))  # the trees take the output


def test_drafts_come_from_the_prompt_and_grow_with_the_match() -> None:
    """The continuation of the last match, at most max_spec_factor x its length, and at most K."""
    proposer = SuffixProposer(SuffixSettings(max_cached_requests=0), max_batch=2)
    prompt = [5, 6, 7, 8, 9, 10, 11, 5, 6, 7]  # "5 6 7" was followed by "8 9 10 11"
    rows = rows_of(prompt, [1, 2, 3])
    proposer.prefill(0, [prompt, [1, 2, 3]], [0, 0])
    assert _drafts(proposer, rows, 2, 8) == [[8, 9, 10], []]  # a 3-token match earns 3
    assert _drafts(proposer, rows, 2, 2) == [[8, 9], []]  # K caps it
    half = SuffixProposer(SuffixSettings(max_cached_requests=0, max_spec_factor=0.5), max_batch=2)
    half.prefill(0, [prompt, [1, 2, 3]], [0, 0])
    assert _drafts(half, rows, 2, 8) == [[8], []]


def test_the_global_tree_drafts_what_another_request_wrote() -> None:
    """A request's output stays in the global tree after it ends; a request without it in its
    own prompt drafts from it. With max_cached_requests = 0 there is no global tree."""
    earlier_output = [40, 41, 42, 43, 44, 45, 46, 47]
    newcomer = [90, 91, 40, 41, 42, 43]
    for cached, expected in ((1000, [44, 45, 46, 47]), (0, [])):
        proposer = SuffixProposer(SuffixSettings(max_cached_requests=cached), max_batch=1)
        rows = rows_of([0])
        _finish(proposer, rows, [1, 2, 3], earlier_output)
        rows.write_prompt(0, newcomer)
        rows.set_lens(0, [len(newcomer)])
        proposer.prefill(0, [newcomer], [0])  # the row's next request ends the first
        assert _drafts(proposer, rows, 1, 4) == [expected]


def test_a_request_it_never_drafted_for_joins_the_global_tree() -> None:
    """The controller may run a request at K = 0 throughout, or with another drafter: when its
    row is retired, its whole output joins the global tree all the same, and so does the tail
    a request wrote after suffix's last draft for it."""
    earlier_output = [40, 41, 42, 43, 44, 45, 46, 47]
    newcomer = [90, 91, 40, 41, 42, 43]
    for drafted_once in (False, True):
        proposer = SuffixProposer(SuffixSettings(), max_batch=1)
        prompt = [1, 2, 3]
        rows = rows_of(prompt + earlier_output)
        rows.set_lens(0, [len(prompt)])
        proposer.prefill(0, [prompt], [0])
        if drafted_once:
            rows.set_lens(0, [len(prompt) + 2])
            proposer.propose(rows, 1, 4, greedy(1))  # the trees hold 40, 41; the rest comes after
        rows.set_lens(0, [len(prompt) + len(earlier_output)])  # decoded with no draft from here
        proposer.retire_rows(rows, [0])
        rows.write_prompt(0, newcomer)
        rows.set_lens(0, [len(newcomer)])
        proposer.prefill(0, [newcomer], [0])
        assert _drafts(proposer, rows, 1, 4) == [[44, 45, 46, 47]]


def test_the_runner_retires_rows_before_they_take_other_requests(
    tiny_pair: TinyPair, plain: dict[bool, list[Completion]]
) -> None:
    """Served once at K = 0 (suffix never drafts), the prompts served again on the same runner
    draft their earlier outputs from the global tree: more kept than on a runner without them."""
    config = engine_config(tiny_pair, "suffix", max_spec_tokens=16)

    async def serve(runner_rounds: list[FixedK]) -> list[Completion]:
        loaded = load_runner(config, progress=False)
        outputs: list[Completion] = []
        for policy in runner_rounds:
            engine = Engine(loaded.runner, loaded.tokenizer, policy, config)
            await engine.start()
            try:
                outputs = await staggered(engine, PROMPTS, lambda i: GREEDY, group=3, rounds=1)
            finally:
                await engine.stop()
        return outputs

    remembered = asyncio.run(serve([FixedK(0), FixedK(8)]))
    fresh = asyncio.run(serve([FixedK(8)]))
    for reference, a, b in zip(plain[False][: len(PROMPTS)], remembered, fresh, strict=True):
        assert a.token_ids == b.token_ids == reference.token_ids
    kept, kept_fresh = (sum(o.stats.accepted for o in outs) for outs in (remembered, fresh))
    emitted = sum(len(o.token_ids) for o in remembered)
    assert kept > kept_fresh + emitted // 4, (kept, kept_fresh, emitted)


def test_requests_move_with_their_rows() -> None:
    """Compaction moves row 1's request into row 0 (whose request finished): it keeps its tree,
    and a prompt into the vacated row starts afresh."""
    proposer = SuffixProposer(SuffixSettings(max_cached_requests=0), max_batch=2)
    finished, moving = [7, 8, 9, 7], [3, 4, 5, 6, 3, 4]
    rows = rows_of(finished, moving)
    proposer.prefill(0, [finished, moving], [0, 0])
    assert _drafts(proposer, rows, 2, 4) == [[8], [5, 6]]
    rows.move([1], [0])
    proposer.move_rows([1], [0], upto=len(moving))
    assert _drafts(proposer, rows, 1, 4) == [[5, 6]]
    fresh = [9, 8, 9]
    rows.write_prompt(1, fresh)
    rows.set_lens(1, [len(fresh)])
    proposer.prefill(1, [fresh], [0])
    assert _drafts(proposer, rows, 2, 4) == [[5, 6], [8]]


def test_forgetting_drops_the_global_tree_and_every_row() -> None:
    """What benchmarks call between contenders replaying the same requests: afterwards no
    earlier output is drafted, and prefilling any row starts cleanly."""
    earlier_output = [40, 41, 42, 43, 44, 45, 46, 47]
    newcomer = [90, 91, 40, 41, 42, 43]
    proposer = SuffixProposer(SuffixSettings(), max_batch=1)
    rows = rows_of([0])
    _finish(proposer, rows, [1, 2, 3], earlier_output)
    proposer.forget()
    rows.write_prompt(0, newcomer)
    rows.set_lens(0, [len(newcomer)])
    proposer.prefill(0, [newcomer], [0])
    assert _drafts(proposer, rows, 1, 4) == [[]]
