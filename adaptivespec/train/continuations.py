"""The target writes its continuations of the training prompts through the serving engine.

The teacher needs the target's own text after each prompt, greedy for half the prompts of
each shape and sampled for the other half. Written one padded batch at a time by
transformers' `generate`, that text was most of train-draft's time; the engine runs the
prompts as one continuous batch, refilling rows as requests finish, with its packed linears.
Nothing is drafted (K = 0), so the text is exactly the target's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.engine import Engine, compute_thread
from adaptivespec.engine.loader import LoadedModels, load_runner
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.train.corpus import SHAPES

ROWS = 32  # rows decoding at once (the size measured against generate: docs/decisions.md)
SAMPLED_TEMPERATURE, SAMPLED_TOP_P = 0.8, 0.95


@dataclass(frozen=True, slots=True)
class Continuations:
    """The engine settings for writing `new_tokens` after prompts of up to `longest` tokens."""

    target: str
    threads: int
    longest: int
    new_tokens: int

    def config(self) -> EngineConfig:
        # torch, as every head in docs/results.md was taught (the openvino runtime's timing is untried here).
        models = ModelConfig(
            target=self.target, proposer="ngram", device="cpu", dtype="float32", runtime="torch"
        )
        return EngineConfig(
            max_batch=ROWS,
            max_queued=1 << 16,  # a whole group of prompts is queued at once
            max_context=self.longest + self.new_tokens + 1,
            threads=self.threads,
            models=models,
        )


def sampling(index: int, new_tokens: int, seed: int) -> SamplingParams:
    """Greedy and sampled (each its own seed) in turn, one round of the prompts' shapes at a time.

    The prompts come with their shapes interleaved (corpus.py): alternating prompt by prompt
    would give every raw window a greedy continuation and every chat request a sampled one,
    so the head would never see the target copying a function greedily, as code edits
    served at temperature 0 have it do."""
    if (index // SHAPES) % 2 == 0:
        return SamplingParams(max_tokens=new_tokens, temperature=0.0)
    return SamplingParams(
        max_tokens=new_tokens, temperature=SAMPLED_TEMPERATURE, top_p=SAMPLED_TOP_P, seed=seed + index
    )


class ContinuationWriter:
    """One loaded engine that writes continuations for successive groups of prompts."""

    def __init__(self, settings: Continuations, progress: bool) -> None:
        self.settings = settings
        self.config = settings.config()
        self.loaded: LoadedModels = load_runner(self.config, progress=progress)

    def write(self, prompts: Sequence[Sequence[int]], first_index: int, seed: int) -> list[list[int]]:
        """Each prompt followed by the target's continuation (ended at its EOS, which stays);
        `first_index` numbers the prompts, which picks greedy or sampled and the seed."""
        params = [sampling(first_index + i, self.settings.new_tokens, seed) for i in range(len(prompts))]
        outputs = asyncio.run(self._run(list(prompts), params))
        return [list(prompt) + output for prompt, output in zip(prompts, outputs, strict=True)]

    async def _run(self, prompts: list[Sequence[int]], params: list[SamplingParams]) -> list[list[int]]:
        compute = compute_thread()
        engine = Engine(self.loaded.runner, self.loaded.tokenizer, FixedK(0), self.config, compute=compute)
        await engine.start()
        try:
            requests = (engine.generate(p, q) for p, q in zip(prompts, params, strict=True))
            done = await asyncio.gather(*requests)
        finally:
            await engine.stop()
            compute.shutdown(wait=True)
        return [list(d.token_ids) for d in done]
