"""Rows and greedy sampling settings for tests that call a proposer directly, and staggered
traffic for tests that serve through the engine."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import numpy as np
import pytest
import torch

from adaptivespec.config import EngineConfig
from adaptivespec.controller.controller import Controller
from adaptivespec.controller.task import run_controller
from adaptivespec.engine.engine import Engine
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.records import Completion
from adaptivespec.engine.rows import RowState
from adaptivespec.engine.sampling import BatchSampling, SamplingParams
from adaptivespec.engine.spec_policy import SpecPolicy
from adaptivespec.engine.suffix_proposer import suffix_available
from adaptivespec.engine.telemetry import StepTelemetry

from ..conftest import TEST_DEVICE

# Code-like prompts the tiny models know, some repeating themselves (drafters find matches),
# one a single token.
PROMPTS = [
    "def add(a, b):\n    return a + b\ndef add(a, b):\n",
    "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(",
    "class Point:\n    def __init__(self",
    "x",
    "import os\nimport sys\nprint(",
    "self.x = x\n        self.y",
]

# Prompts that repeat themselves, so that suffix trees find matches, and some that do not.
REPEATING_PROMPTS = [
    "def add(a, b):\n    return a + b\ndef add(a, b):\n",
    "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(",
    "print(i)\nprint(i)\nprint(",
    "class Point:\n    def __init__(self",
    "x",
    "import os\nimport sys\nprint(",
    "self.x = x\n        self.y",
]


def skip_without_suffix() -> None:
    """At a test module's top: skips it where arctic-inference is not installed, unless
    ADAPTIVESPEC_REQUIRE_SUFFIX is set (as CI sets it), where it fails instead."""
    if suffix_available():
        return
    if os.environ.get("ADAPTIVESPEC_REQUIRE_SUFFIX"):
        raise RuntimeError("arctic-inference is not installed: run ops/install-suffix.sh")
    pytest.skip("arctic-inference is not installed (ops/install-suffix.sh)", allow_module_level=True)


def top_p(i: int, seed: int) -> SamplingParams:
    """Prompt i's sampled settings (T 0.9, top-p 0.8), 40 tokens, its own seed."""
    return SamplingParams(max_tokens=40, temperature=0.9, top_p=0.8, seed=seed + i, ignore_eos=True)


async def serve_in_groups_of_three(
    config: EngineConfig, policy: SpecPolicy, params: Callable[[int], SamplingParams], rounds: int
) -> list[Completion]:
    """REPEATING_PROMPTS through a fresh engine under a fixed policy, `staggered` three at a time."""
    loaded = load_runner(config, progress=False)
    engine = Engine(loaded.runner, loaded.tokenizer, policy, config)
    await engine.start()
    try:
        return await staggered(engine, REPEATING_PROMPTS, params, group=3, rounds=rounds)
    finally:
        await engine.stop()


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


async def serve_staggered(
    config: EngineConfig,
    prompts: list[str],
    params: Callable[[int], SamplingParams],
    policy: SpecPolicy | None,
    rounds: int,
) -> tuple[list[Completion], list[StepTelemetry]]:
    """`staggered` traffic through a fresh engine, two at a time; its completions and every
    step's telemetry. Without a policy the live controller steers, over the runner's drafters."""
    loaded = load_runner(config, progress=False)
    runner = loaded.runner
    controller = Controller(runner.model_key, runner.hardware_key, methods=runner.methods)
    engine = Engine(runner, loaded.tokenizer, controller.live if policy is None else policy, config)
    subscription = engine.telemetry.subscribe(100_000)
    learning = asyncio.create_task(run_controller(controller, engine.telemetry.subscribe()))
    await engine.start()
    try:
        done = await staggered(engine, prompts, params, group=2, rounds=rounds)
    finally:
        await engine.stop()
        learning.cancel()
    records = []
    while not subscription.queue.empty():
        records.append(subscription.queue.get_nowait())
    return done, records
