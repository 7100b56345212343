"""Speculation must never change greedy output: K > 0 gives exactly the K = 0 tokens."""

from __future__ import annotations

import asyncio

import pytest
import torch

from adaptivespec.config import EngineConfig
from adaptivespec.engine.engine import Engine
from adaptivespec.engine.loader import LoadedModels, load_runner
from adaptivespec.engine.records import Completion
from adaptivespec.engine.runner import DecodeOutput, PrefillItem, PrefillOutput
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.static_policy import FixedK, StaticTable

from ..conftest import TinyPair, engine_config

PROMPTS = [
    "def add",
    "for i in range(10):\n",
    "class Point:\n    def __init__(self",
    "import os\nimport sys\nprint(",
    "def add(a, b):\n    return a + b\ndef add(a, b):\n",
    "print(i)\nprint(i)\nprint(",
    # A long prompt, then a short one that overtakes it while it goes in in chunks.
    "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(",
    "x",
    "self.x = x\n        self.y",
]
GREEDY = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)


async def _run(
    pair: TinyPair,
    proposer: str,
    policy: FixedK | StaticTable,
    staggered: bool,
    prefills: list[list[PrefillItem]] | None = None,
    **limits: int,
) -> list[Completion]:
    config = engine_config(pair, proposer, **limits)
    loaded = load_runner(config, progress=False)
    if prefills is not None:
        prefill = loaded.runner.prefill

        def recording(row_start: int, items: list[PrefillItem]) -> PrefillOutput:
            prefills.append(list(items))
            return prefill(row_start, items)

        loaded.runner.prefill = recording  # type: ignore[method-assign]
    return await _serve(loaded, config, policy, staggered)


async def _serve(
    loaded: LoadedModels, config: EngineConfig, policy: FixedK | StaticTable, staggered: bool = True
) -> list[Completion]:
    engine = Engine(loaded.runner, loaded.tokenizer, policy, config)
    await engine.start()
    try:
        tasks = []
        for i, prompt in enumerate(PROMPTS):
            tasks.append(asyncio.create_task(engine.generate(prompt, GREEDY)))
            if staggered and i % 3 == 2:
                # Let the running batch take a few steps before the next group joins.
                target = engine.steps + 2
                while engine.steps < target:
                    await asyncio.sleep(0.001)
        return await asyncio.gather(*tasks)
    finally:
        await engine.stop()


@pytest.fixture(scope="module")
def baseline(tiny_pair: TinyPair) -> list[Completion]:
    return asyncio.run(_run(tiny_pair, "draft", FixedK(0), staggered=False))


@pytest.mark.parametrize("proposer", ["draft", "ngram"])
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_speculative_greedy_equals_plain_decoding(
    tiny_pair: TinyPair, baseline: list[Completion], proposer: str, k: int
) -> None:
    outputs = asyncio.run(_run(tiny_pair, proposer, FixedK(k), staggered=True))
    for plain, spec in zip(baseline, outputs, strict=True):
        assert spec.token_ids == plain.token_ids
    drafted = sum(o.stats.drafted for o in outputs)
    accepted = sum(o.stats.accepted for o in outputs)
    assert drafted > 0, "the proposer never drafted, so nothing was verified"
    if proposer == "draft":
        # Both acceptance and rejection happened, so both paths were exercised.
        assert 0 < accepted < drafted
        assert sum(o.stats.steps for o in outputs) < sum(o.stats.steps for o in baseline)


def test_plain_decoding_equals_transformers_generate(tiny_pair: TinyPair, baseline: list[Completion]) -> None:
    loaded = load_runner(engine_config(tiny_pair), progress=False)
    model = loaded.runner.target.model
    checked = 0
    for completion in baseline:
        prompt = torch.tensor([completion.prompt_ids])
        reference = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=GREEDY.max_tokens,
            do_sample=False,
        )
        expected = reference[0, prompt.shape[1] :].tolist()
        # generate() stops at EOS; our requests ignore EOS, so compare up to where it stopped.
        assert completion.token_ids[: len(expected)] == expected
        checked += len(expected)
    assert checked >= 50


def test_policy_switching_mid_stream_stays_exact(tiny_pair: TinyPair, baseline: list[Completion]) -> None:
    """K = 0 steps leave the draft cache behind; resuming must catch it up exactly."""
    flapping = StaticTable.parse([(1, 3, 4), (4, 6, 0), (7, 9, 2)], default_k=0)
    outputs = asyncio.run(_run(tiny_pair, "draft", flapping, staggered=True))
    for plain, spec in zip(baseline, outputs, strict=True):
        assert spec.token_ids == plain.token_ids


@pytest.mark.parametrize("proposer", ["draft", "ngram"])
def test_prompts_fed_in_chunks_between_decode_steps_stay_exact(
    tiny_pair: TinyPair, baseline: list[Completion], proposer: str
) -> None:
    """Later groups arrive while the first decodes, so their prompts go in 5 tokens a step,
    into both the target's and the draft's caches, and the first token comes after the last.
    A short prompt queued behind a long one goes in ahead of it, and the long one moves up a
    row with what it has prefilled so far."""
    calls: list[list[PrefillItem]] = []
    outputs = asyncio.run(_run(tiny_pair, proposer, FixedK(2), True, calls, prefill_chunk_tokens=5))
    for plain, chunked in zip(baseline, outputs, strict=True):
        assert chunked.token_ids == plain.token_ids
    prefills = [item for call in calls for item in call]
    assert any(not item.completes for item in prefills), "no prompt was split"
    assert any(item.start > 0 and item.completes for item in prefills), "no prompt was finished in pieces"
    assert any(_overtaken(call) for call in calls), "no prompt went in ahead of a part-way one"


@pytest.mark.parametrize("proposer", ["draft", "ngram"])
def test_prompts_fed_into_plain_steps_stay_exact(
    tiny_pair: TinyPair, baseline: list[Completion], proposer: str
) -> None:
    """At K = 0 the later groups' chunks go into the decode step's own forward (segments.py),
    and the draft's cache is filled beside it for the steps that speculate later."""
    fused: list[PrefillItem] = []
    overtaken: list[bool] = []
    config = engine_config(tiny_pair, proposer, prefill_chunk_tokens=5)
    loaded = load_runner(config, progress=False)
    together = loaded.runner.decode_with_prompts

    def recording(batch: int, items: list[PrefillItem]) -> tuple[DecodeOutput, PrefillOutput]:
        fused.extend(items)
        overtaken.append(_overtaken(items))
        return together(batch, items)

    loaded.runner.decode_with_prompts = recording  # type: ignore[method-assign]
    # Speculating while the second group goes in, plain while the third does (a long prompt
    # overtaken by a short one), speculating again once all have joined.
    flapping = StaticTable.parse([(1, 3, 2), (4, 6, 0), (7, 9, 2)], default_k=0)
    outputs = asyncio.run(_serve(loaded, config, flapping))
    for plain, mixed in zip(baseline, outputs, strict=True):
        assert mixed.token_ids == plain.token_ids
    assert any(not item.completes for item in fused), "no chunk went into a decode step"
    assert any(item.start > 0 and item.completes for item in fused), "no prompt was finished in a decode step"
    assert any(overtaken), "no prompt went into a decode step ahead of a part-way one"


def _overtaken(items: list[PrefillItem]) -> bool:
    """A prompt fed whole in the rows before a prompt that continues part-way."""
    return any(a.start == 0 and a.completes and b.start > 0 for a, b in zip(items, items[1:], strict=False))
