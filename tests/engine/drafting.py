"""Rows and greedy sampling settings for tests that call a proposer directly, and staggered
traffic for tests that serve through the engine."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import torch

from adaptivespec.engine.engine import Engine
from adaptivespec.engine.records import Completion
from adaptivespec.engine.rows import RowState
from adaptivespec.engine.sampling import BatchSampling, SamplingParams

from ..conftest import TEST_DEVICE


def rows_of(*histories: list[int], width: int = 64) -> RowState:
    """One row per history, each holding it whole."""
    rows = RowState.allocate(len(histories), width, torch.device(TEST_DEVICE))
    for r, history in enumerate(histories):
        rows.write_prompt(r, history)
        rows.set_lens(r, [len(history)])
    return rows


def greedy(batch: int) -> BatchSampling:
    ones = torch.ones(batch)
    flags = np.ones(batch, dtype=bool)
    return BatchSampling(
        ones,
        ones,
        ones.bool(),
        [0] * batch,
        np.zeros(batch, np.int64),
        flags,
        all_greedy=True,
        any_top_p=False,
    )


async def staggered(
    engine: Engine, prompts: list[str], params: Callable[[int], SamplingParams], group: int, rounds: int
) -> list[Completion]:
    """Every prompt, `group` at a time, each group joining a batch that is already decoding
    (two steps later), `rounds` times over; the completions in order."""
    done: list[Completion] = []
    for _ in range(rounds):
        tasks = []
        for i, prompt in enumerate(prompts):
            tasks.append(asyncio.create_task(engine.generate(prompt, params(i))))
            if i % group == group - 1:
                target = engine.steps + 2
                while engine.steps < target:
                    await asyncio.sleep(0.001)
        done.extend(await asyncio.gather(*tasks))
    return done
