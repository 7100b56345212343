"""One request never harms another: a request whose own compute fails fails alone, and the
streams beside it finish with exactly the tokens of a run without it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adaptivespec.engine.engine import Engine
from adaptivespec.engine.loader import LoadedModels
from adaptivespec.engine.runner import DecodeOutput, PrefillItem, PrefillOutput, Runner
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.errors import InvalidRequestError

from ..conftest import TinyPair, engine_config

POISON = 7  # a token id whose prefill the runner below refuses


class PoisonedRunner:
    """The real runner, except that a prefill carrying POISON raises, as a row's own bad
    numerics or a kernel's refusal would; every other call goes to the real runner."""

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self.refusals = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def _check(self, items: list[PrefillItem]) -> None:
        if any(POISON in item.chunk for item in items):
            self.refusals += 1
            raise RuntimeError("value cannot be converted to type float without overflow")

    def prefill(self, row_start: int, items: list[PrefillItem]) -> PrefillOutput:
        self._check(items)
        return self._runner.prefill(row_start, items)

    def decode_with_prompts(self, batch: int, items: list[PrefillItem]) -> tuple[DecodeOutput, PrefillOutput]:
        self._check(items)
        return self._runner.decode_with_prompts(batch, items)


PROMPTS = ["def add", "for i in", "class Point", "import os", "print(", "return a", "x = 1", "self.y"]


def _params(i: int) -> SamplingParams:
    if i % 2:
        return SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    return SamplingParams(max_tokens=24, temperature=0.8, seed=100 + i, ignore_eos=True)


async def _run(engine: Engine, poison: bool) -> tuple[list[list[int]], str | None]:
    streams = [engine.submit(p, _params(i)) for i, p in enumerate(PROMPTS)]
    firsts = [await anext(s) for s in streams]  # all 8 are decoding before the poison arrives
    tokens = [list(e.token_ids) for e in firsts]
    poisoned = None
    if poison:
        poisoned = engine.submit([1, POISON, 3], SamplingParams(max_tokens=4, temperature=0.8, seed=1))
    for row, stream in zip(tokens, streams, strict=True):
        async for event in stream:
            row.extend(event.token_ids)
            assert event.finish_reason in {None, "length"}, event.error
    error = None
    if poisoned is not None:
        events = [e async for e in poisoned]
        assert events[-1].finish_reason == "error"
        error = events[-1].error
    return tokens, error


@pytest.mark.parametrize("k", [0, 2])  # K = 0: the prompt rides in the decode step's own forward
async def test_a_failing_request_leaves_eight_streams_untouched(
    tiny_pair: TinyPair, tiny_models: LoadedModels, k: int
) -> None:
    runner = PoisonedRunner(tiny_models.runner)
    engine = Engine(runner, tiny_models.tokenizer, FixedK(k), engine_config(tiny_pair))  # type: ignore[arg-type]
    await engine.start()
    try:
        clean, _ = await _run(engine, poison=False)
        dirty, error = await _run(engine, poison=True)
        assert engine.healthy
    finally:
        await engine.stop()
    assert runner.refusals >= 1
    assert error is not None and "RuntimeError" in error
    assert dirty == clean
    assert all(len(row) == 24 for row in clean)


async def test_sampling_values_the_runner_cannot_hold_are_refused_at_intake(
    tiny_pair: TinyPair, tiny_models: LoadedModels
) -> None:
    engine = Engine(tiny_models.runner, tiny_models.tokenizer, FixedK(2), engine_config(tiny_pair))
    await engine.start()
    try:
        for temperature in (1e39, 1e300):
            with pytest.raises(InvalidRequestError, match="temperature") as caught:
                engine.submit("def", SamplingParams(max_tokens=2, temperature=temperature))
            assert caught.value.param == "temperature"
        with pytest.raises(InvalidRequestError, match="top_p"):
            engine.submit("def", SamplingParams(max_tokens=2, top_p=1e-60))
        # A temperature too small to divide by decodes greedily, as its limit does.
        tiny, greedy = await asyncio.gather(
            *(
                engine.generate("for i in", SamplingParams(max_tokens=12, temperature=t, seed=3))
                for t in (1e-38, 0.0)
            )
        )
    finally:
        await engine.stop()
    assert tiny.token_ids == greedy.token_ids
