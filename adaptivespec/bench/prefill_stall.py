"""What a long prompt arriving costs the streams already decoding: the chunked-prefill check.

N streams decode; their steady inter-token gaps are measured, then one long prompt arrives.
Every gap of theirs that overlaps its prefill is compared with the steady ones. Fed whole,
the prompt's forward sits inside one step and stalls every stream for all of it; paced,
each step carries a chunk sized to about one decode step.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from adaptivespec.bench.traffic import percentile_ms
from adaptivespec.config import EngineConfig
from adaptivespec.engine.engine import Engine
from adaptivespec.engine.request_stream import RequestStream
from adaptivespec.engine.runner import Runner
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.engine.tokenizer import Tokenizer

STREAM_PROMPT = 64  # tokens per decoding stream's prompt


@dataclass(frozen=True, slots=True)
class Stall:
    chunking: str  # "paced" (the default) or "whole" (the prompt in one forward)
    streams: int
    long_prompt_tokens: int
    steady_itl_p50_ms: float
    steady_itl_p99_ms: float
    long_prompt_itl_p99_ms: float  # over the streams' gaps that overlap the long prompt's prefill
    long_prompt_itl_max_ms: float
    long_prompt_ttft_ms: float
    ratio: float  # long_prompt_itl_p99_ms / steady_itl_p99_ms


async def measure(
    runner: Runner,
    tokenizer: Tokenizer,
    compute: ThreadPoolExecutor,
    config: EngineConfig,
    corpus: list[int],
    *,
    streams: int,
    long_tokens: int,
    steady_steps: int = 30,
    whole: bool = False,
) -> Stall:
    most = config.max_context if whole else config.max_prefill_tokens
    config = replace(
        config, max_batch=streams + 1, max_prefill_tokens=most, prefill_chunk_tokens=most if whole else 0
    )
    engine = Engine(runner, tokenizer, FixedK(0), config, compute=compute)
    await engine.start()
    endless = SamplingParams(max_tokens=config.max_context - STREAM_PROMPT, temperature=0.0, ignore_eos=True)
    step = len(corpus) // (streams + 1)
    times: list[list[float]] = [[] for _ in range(streams)]
    opened = [engine.submit(corpus[i * step : i * step + STREAM_PROMPT], endless) for i in range(streams)]
    readers = [asyncio.create_task(_note_times(s, t)) for s, t in zip(opened, times, strict=True)]
    try:
        while min(len(t) for t in times) < 3:
            await asyncio.sleep(0.01)
        steady_from = time.perf_counter()
        target = engine.steps + steady_steps
        while engine.steps < target:
            await asyncio.sleep(0.005)
        arrived = time.perf_counter()
        long = corpus[-long_tokens - 1 : -1]
        first = await anext(engine.submit(long, SamplingParams(max_tokens=1, temperature=0.0)))
        answered = time.perf_counter()
        await asyncio.sleep(0.5)  # the step that carried the last chunk ends after its token
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        await engine.stop()
    if not first.token_ids:
        raise RuntimeError(f"the long prompt produced no token: {first.error or first.finish_reason}")
    steady = [
        b - a for t in times for a, b in zip(t, t[1:], strict=False) if steady_from <= a and b <= arrived
    ]
    during = [b - a for t in times for a, b in zip(t, t[1:], strict=False) if b > arrived and a < answered]
    steady_p99 = percentile_ms(steady, 99)
    during_p99 = percentile_ms(during, 99)
    return Stall(
        chunking="whole" if whole else "paced",
        streams=streams,
        long_prompt_tokens=long_tokens,
        steady_itl_p50_ms=percentile_ms(steady, 50),
        steady_itl_p99_ms=steady_p99,
        long_prompt_itl_p99_ms=during_p99,
        long_prompt_itl_max_ms=max(during) * 1000.0,
        long_prompt_ttft_ms=(answered - arrived) * 1000.0,
        ratio=during_p99 / steady_p99,
    )


async def _note_times(stream: RequestStream, times: list[float]) -> None:
    try:
        async for event in stream:
            if event.token_ids:
                times.append(time.perf_counter())
    finally:
        await stream.aclose()
