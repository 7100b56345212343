"""Engine behaviour through its public interface: streaming, abort, limits, telemetry, memory."""

from __future__ import annotations

import asyncio
import gc
import resource
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from adaptivespec.engine.engine import Engine
from adaptivespec.engine.loader import LoadedModels, load_runner
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.sequence import TokenEvent
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.errors import EngineStoppedError, InvalidRequestError, ModelLoadError, QueueFullError

from ..conftest import TEST_DEVICE, TinyPair, engine_config


async def _engine(tiny_pair: TinyPair, tiny_models: LoadedModels, k: int = 4, **limits: int) -> Engine:
    config = engine_config(tiny_pair, **limits)
    engine = Engine(tiny_models.runner, tiny_models.tokenizer, FixedK(k), config)
    await engine.start()
    return engine


async def _wait_until(condition: object, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.001)


async def test_stream_yields_tokens_then_finish(tiny_pair: TinyPair, tiny_models: LoadedModels) -> None:
    engine = await _engine(tiny_pair, tiny_models)
    try:
        events = [e async for e in engine.submit("def add", SamplingParams(max_tokens=12, temperature=0.0))]
    finally:
        await engine.stop()
    assert events[-1].finish_reason in {"stop", "length"}
    assert all(e.finish_reason is None for e in events[:-1])
    tokens = [t for e in events for t in e.token_ids]
    assert 1 <= len(tokens) <= 12
    assert "".join(e.text for e in events) == tiny_models.tokenizer.decode(tokens, skip_special_tokens=True)


async def test_abort_frees_the_slot(tiny_pair: TinyPair, tiny_models: LoadedModels) -> None:
    engine = await _engine(tiny_pair, tiny_models)
    params = SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True)
    try:
        streams: list[AsyncIterator[TokenEvent]] = [engine.submit("for i in", params) for _ in range(5)]
        for stream in streams[:3]:
            await anext(stream)
        # One consumer closes its stream; another is cancelled while waiting for tokens.
        await streams[0].aclose()  # type: ignore[attr-defined]
        waiter = asyncio.create_task(anext(streams[1]))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await _wait_until(lambda: len(engine.scheduler.running) == 3)
        for stream in streams[2:]:
            await stream.aclose()  # type: ignore[attr-defined]
        await _wait_until(lambda: not engine.scheduler.has_work)
    finally:
        await engine.stop()


async def test_abort_while_queued_never_runs(tiny_pair: TinyPair, tiny_models: LoadedModels) -> None:
    engine = await _engine(tiny_pair, tiny_models, max_batch=1)
    params = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    try:
        first = engine.submit("def", params)
        queued = engine.submit("for", params)
        await anext(first)
        await queued.aclose()  # type: ignore[attr-defined]
        rest = [e async for e in first]
        assert rest[-1].finish_reason == "length"
        await _wait_until(lambda: not engine.scheduler.has_work)
    finally:
        await engine.stop()


@pytest.mark.parametrize(
    ("prompt", "params", "message"),
    [
        ("", {}, "prompt is empty"),
        ("x " * 400, {}, "context holds"),
        ("def", {"max_tokens": 0}, "max_tokens must be a positive integer"),
        ("def", {"max_tokens": -3}, "max_tokens must be a positive integer"),
        ("def", {"temperature": -0.5}, "temperature must be"),
        ("def", {"top_p": 0.0}, "top_p must be"),
        ("def", {"max_tokens": 1000}, "lower max_tokens"),
    ],
)
async def test_bad_input_is_rejected_with_a_clear_message(
    tiny_pair: TinyPair, tiny_models: LoadedModels, prompt: str, params: dict[str, int], message: str
) -> None:
    engine = await _engine(tiny_pair, tiny_models)
    try:
        with pytest.raises(InvalidRequestError, match=message):
            engine.submit(prompt, SamplingParams(**params))
    finally:
        await engine.stop()


def test_draft_with_another_vocabulary_is_refused(tiny_pair: TinyPair) -> None:
    config = engine_config(tiny_pair)
    mismatched = config.models.__class__(
        target=str(tiny_pair.target),
        draft=str(tiny_pair.other_vocab_draft),
        device=TEST_DEVICE,
        dtype="float32",
    )
    with pytest.raises(ModelLoadError, match="vocabulary|tokenizer"):
        load_runner(config.__class__(models=mismatched, max_batch=2, max_context=64), progress=False)


async def test_full_queue_raises(tiny_pair: TinyPair, tiny_models: LoadedModels) -> None:
    engine = await _engine(tiny_pair, tiny_models, max_batch=1, max_queued=2)
    params = SamplingParams(max_tokens=5, temperature=0.0)
    try:
        streams = [engine.submit("def", params) for _ in range(2)]
        with pytest.raises(QueueFullError, match="retry later"):
            for _ in range(3):
                streams.append(engine.submit("def", params))
        for stream in streams:
            async for _ in stream:
                pass
    finally:
        await engine.stop()


async def test_stop_string_ends_the_request_and_is_not_shown(
    tiny_pair: TinyPair, tiny_models: LoadedModels
) -> None:
    engine = await _engine(tiny_pair, tiny_models)
    free = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    try:
        full = await engine.generate("for i in", free)
        stop = full.text[5:8]
        cut = await engine.generate("for i in", SamplingParams(max_tokens=40, temperature=0.0, stop=(stop,)))
    finally:
        await engine.stop()
    assert len(full.text) > 8
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.index(stop)]


async def test_seeded_sampling_is_reproducible(tiny_pair: TinyPair, tiny_models: LoadedModels) -> None:
    engine = await _engine(tiny_pair, tiny_models)
    try:
        runs = [
            await engine.generate(
                "def", SamplingParams(max_tokens=30, temperature=2.0, top_p=0.95, seed=seed)
            )
            for seed in (7, 7, 8, 9, 10)
        ]
    finally:
        await engine.stop()
    assert runs[0].token_ids == runs[1].token_ids
    # The tiny model has memorised its corpus, so one other seed may coincide; not all three.
    assert any(run.token_ids != runs[0].token_ids for run in runs[2:])


async def test_telemetry_reports_each_step_and_counts_drops(
    tiny_pair: TinyPair, tiny_models: LoadedModels
) -> None:
    engine = await _engine(tiny_pair, tiny_models, k=3)
    fast = engine.telemetry.subscribe()
    slow = engine.telemetry.subscribe(maxsize=2)  # a consumer that never reads
    try:
        await asyncio.gather(
            *(
                engine.generate(p, SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True))
                for p in ("a", "b")
            )
        )
    finally:
        await engine.stop()
    records = [fast.queue.get_nowait() for _ in range(fast.queue.qsize())]
    assert len(records) == engine.steps == engine.telemetry.published
    assert slow.dropped == engine.steps - 2
    first = records[0]
    assert first.batch_size == 2 and first.k == 3
    assert first.drafted == 6 and 0 <= first.accepted <= first.drafted
    assert first.emitted == first.accepted + first.batch_size
    assert first.step_seconds >= first.verify_seconds > 0 and first.draft_seconds > 0
    assert first.model_key.startswith("target+draft") and first.hardware_key.startswith("cpu:")


async def test_memory_stays_bounded_over_many_requests(
    tiny_pair: TinyPair, tiny_models: LoadedModels
) -> None:
    """RSS after 2,000 requests is within 5% of RSS after the first 200."""
    engine = await _engine(tiny_pair, tiny_models)
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)

    async def wave(count: int) -> None:
        await asyncio.gather(*(engine.generate(f"x{i % 50}", params) for i in range(count)))

    try:
        for _ in range(4):
            await wave(50)
        gc.collect()
        after_200 = _rss_bytes()
        for _ in range(36):
            await wave(50)
        gc.collect()
        after_2000 = _rss_bytes()
    finally:
        await engine.stop()
    assert after_2000 <= after_200 * 1.05


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def test_kv_cache_is_preallocated_and_reported(tiny_models: LoadedModels) -> None:
    runner = tiny_models.runner
    assert runner.target.cache.keys[0].shape[0] == runner.max_batch
    assert runner.target.cache.keys[0].shape[2] == runner.cache_len
    assert "KV cache preallocated for 16 rows" in runner.describe()
    assert f"{runner.kv_bytes / 2**20:.1f} MiB" in runner.describe()


async def test_a_failing_step_fails_only_its_requests(tiny_pair: TinyPair, tiny_models: LoadedModels) -> None:
    engine = await _engine(tiny_pair, tiny_models)
    runner = tiny_models.runner
    real = runner.decode
    calls = {"n": 0}

    def flaky(batch: int, k: int, method: str | None = None) -> object:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated kernel failure")
        return real(batch, k, method)

    runner.decode = flaky  # type: ignore[method-assign]
    try:
        first = [
            e
            async for e in engine.submit(
                "def", SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
            )
        ]
        after = await engine.generate("for", SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True))
    finally:
        runner.decode = real  # type: ignore[method-assign]
        await engine.stop()
    assert first[-1].finish_reason == "error" and "RuntimeError" in (first[-1].error or "")
    assert after.finish_reason == "length" and len(after.token_ids) == 10


class _BreaksAfter:
    """The real tokenizer, whose decode raises after `calls` calls: a fault outside model compute."""

    backend_tokenizer = None  # no fast path around `decode`: every window goes through it

    def __init__(self, tokenizer: object, calls: int) -> None:
        self._tokenizer = tokenizer
        self._left = calls

    def __getattr__(self, name: str) -> object:
        return getattr(self._tokenizer, name)

    def __len__(self) -> int:
        return len(self._tokenizer)  # type: ignore[arg-type]

    def decode(self, *args: object, **kwargs: object) -> object:
        self._left -= 1
        if self._left < 0:
            raise RuntimeError("detokenizer bug")
        return self._tokenizer.decode(*args, **kwargs)  # type: ignore[attr-defined]


async def test_a_crashed_loop_fails_every_request_and_reports_itself(
    tiny_pair: TinyPair, tiny_models: LoadedModels
) -> None:
    config = engine_config(tiny_pair, max_batch=2)
    engine = Engine(tiny_models.runner, _BreaksAfter(tiny_models.tokenizer, 12), FixedK(2), config)  # type: ignore[arg-type]
    await engine.start()
    params = SamplingParams(max_tokens=60, temperature=0.0, ignore_eos=True)
    try:
        streams = [engine.submit(p, params) for p in ("def", "for i in", "class")]  # one waits in the queue
        ends = [await _last(stream) for stream in streams]
        assert engine.failure is not None and not engine.healthy
        with pytest.raises(EngineStoppedError, match="restart"):
            engine.submit("def", params)
    finally:
        await engine.stop()
    assert [e.finish_reason for e in ends] == ["error"] * 3
    assert all("RuntimeError" in (e.error or "") and "restart" in (e.error or "") for e in ends)


async def _last(stream: AsyncIterator[TokenEvent]) -> TokenEvent:
    return [e async for e in stream][-1]


async def test_text_is_tokenized_off_the_event_loop_by_the_server_path(
    tiny_pair: TinyPair, tiny_models: LoadedModels
) -> None:
    """`encode` refuses text that cannot fit by its length alone, and runs on any thread."""
    engine = await _engine(tiny_pair, tiny_models)
    try:
        with pytest.raises(InvalidRequestError, match="characters"):
            engine.encode("x" * (engine.intake.max_prompt_chars + 1))
        ids = await asyncio.to_thread(engine.encode, "def add")
        done = await engine.generate(ids, SamplingParams(max_tokens=4, temperature=0.0))
    finally:
        await engine.stop()
    assert ids == tiny_models.tokenizer.encode("def add") and done.prompt_ids == ids


async def test_mixed_greedy_and_sampled_rows_do_not_disturb_each_other(
    tiny_pair: TinyPair, tiny_models: LoadedModels
) -> None:
    """Through the draft proposer at K = 3: a greedy row and seeded top-p rows give, sharing a batch,
    what each gives alone."""
    greedy = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    sampled = [
        SamplingParams(max_tokens=24, temperature=1.5, top_p=0.9, seed=s, ignore_eos=True) for s in (1, 2)
    ]
    engine = await _engine(tiny_pair, tiny_models, k=3)
    try:
        alone = [await engine.generate("for i in", p) for p in (greedy, *sampled)]
        together = await asyncio.gather(*(engine.generate("for i in", p) for p in (greedy, *sampled)))
    finally:
        await engine.stop()
    assert [c.token_ids for c in together] == [c.token_ids for c in alone]
    assert alone[1].token_ids != alone[2].token_ids  # the seeds matter


async def test_overlapped_steps_stream_what_serial_steps_do(
    tiny_pair: TinyPair, tiny_models: LoadedModels
) -> None:
    """A step submitted before the last one's tokens are streamed changes no output: greedy and
    seeded rows, ragged lengths, a stop string, and a request that arrives mid-run."""
    params = [
        SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True),
        SamplingParams(max_tokens=23, temperature=1.2, top_p=0.9, seed=5, ignore_eos=True),
        SamplingParams(max_tokens=31, temperature=0.0),
        SamplingParams(max_tokens=40, temperature=0.0, stop=("\n",)),
    ]
    prompts = ["def add", "for i in", "class Point", "import os"]
    results, overlapped = {}, {}
    for overlap in ("off", "on"):
        config = replace(engine_config(tiny_pair), overlap=overlap)
        engine = Engine(tiny_models.runner, tiny_models.tokenizer, FixedK(3), config)
        await engine.start()
        try:
            first = [
                asyncio.create_task(engine.generate(p, q))
                for p, q in zip(prompts[:3], params[:3], strict=True)
            ]
            await _wait_until(lambda: engine.steps >= 5)  # noqa: B023 - polled before the next loop
            late = await engine.generate(prompts[3], params[3])
            done = [*(await asyncio.gather(*first)), late]
        finally:
            await engine.stop()
        results[overlap] = [(c.token_ids, c.text, c.finish_reason) for c in done]
        overlapped[overlap] = engine.totals.overlapped_steps
    assert results["on"] == results["off"]
    assert overlapped["off"] == 0 and overlapped["on"] >= 5  # 12 in practice; >= 5 before the late one


async def test_sampled_output_is_the_same_at_every_k_and_beside_any_batch(
    tiny_pair: TinyPair, tiny_models: LoadedModels
) -> None:
    """Coupled sampling: a seeded request's tokens are those of K = 0 token for token, at
    K = 1, 4 and 8, alone or beside four greedy streams, with top-p or without. (That each
    token follows the target's distribution is tested on the sampler, test_verification.py.)"""
    params = [
        SamplingParams(max_tokens=20, temperature=t, top_p=p, seed=s, ignore_eos=True)
        for s in range(12)
        for t, p in ((0.8, 1.0), (1.5, 0.9))
    ]
    greedy = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    outputs = {}
    for k in (0, 1, 4, 8):
        engine = await _engine(tiny_pair, tiny_models, k=k, max_queued=512)
        try:
            crowd = [asyncio.create_task(engine.generate(f"for i in {n}", greedy)) for n in range(4)]
            beside = await asyncio.gather(*(engine.generate("x = ", p) for p in params))
            await asyncio.gather(*crowd)
            alone = [await engine.generate("x = ", p) for p in params[:4]]
        finally:
            await engine.stop()
        outputs[k] = [c.token_ids for c in beside]
        assert [c.token_ids for c in alone] == outputs[k][:4]
    assert outputs[1] == outputs[0] and outputs[4] == outputs[0] and outputs[8] == outputs[0]
    assert len({tuple(o) for o in outputs[0]}) > 12  # the seeds and temperatures matter


def test_prompts_arriving_together_at_an_idle_engine_reach_the_first_token_one_by_one(
    tiny_pair: TinyPair,
) -> None:
    """Two prompts submitted together to an idle engine, after the pacer has fitted a line
    whose fixed part is below the second prompt's tokens: the first prompt's first token comes
    a step before the second's, from a prefill of its own."""
    loaded = load_runner(engine_config(tiny_pair, "ngram"), progress=False)
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    prompts = [list(range(5, 5 + n)) for n in (40, 60)]

    async def serve() -> list[int]:
        engine = Engine(loaded.runner, loaded.tokenizer, FixedK(0), engine_config(tiny_pair, "ngram"))
        await engine.start()
        for tokens in (16, 64, 128):  # a fitted line: 1 ms a forward, 1 ms a token (60 tokens: 60 ms)
            engine.pacer.prefilled(tokens, 0.001 + 0.001 * tokens)
        steps_at_first: list[int] = []

        async def one(prompt: list[int]) -> None:
            async for event in engine.submit(prompt, params):
                if event.token_ids:
                    steps_at_first.append(engine.steps)
                    return

        await asyncio.gather(*(one(p) for p in prompts))
        await engine.stop()
        return steps_at_first

    first, second = asyncio.run(serve())
    assert second > first


@pytest.mark.parametrize("warm", [True, False])
def test_a_prompt_fed_apart_is_followed_by_a_step_that_takes_the_rest_with_its_decode(
    tiny_pair: TinyPair, warm: bool
) -> None:
    """After an idle step fed the first of two prompts apart, the second goes into the next
    forward beside the first's decode, not behind a plain step of its own; unless the pacer has
    not yet measured a plain step, which sizes what a fused step may take."""
    loaded = load_runner(engine_config(tiny_pair, "ngram"), progress=False)
    assert loaded.runner.fuses_prompts
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    calls: list[str] = []
    runner = loaded.runner
    for name in ("prefill", "decode", "decode_with_prompts"):
        method = getattr(runner, name)
        setattr(runner, name, lambda *a, _m=method, _n=name: (calls.append(_n), _m(*a))[1])

    async def serve() -> None:
        engine = Engine(runner, loaded.tokenizer, FixedK(0), engine_config(tiny_pair, "ngram"))
        await engine.start()
        for tokens in (16, 64, 128):  # 1 ms a forward, 1 ms a token: the prompts go in apart
            engine.pacer.prefilled(tokens, 0.001 + 0.001 * tokens)
        if warm:
            engine.pacer.decoded(0.010, 1)
        streams = [engine.submit(list(range(5, 5 + n)), params) for n in (40, 60)]

        async def drain(stream: AsyncIterator[object]) -> None:
            async for _ in stream:
                pass

        await asyncio.gather(*(drain(s) for s in streams))
        await engine.stop()

    asyncio.run(serve())
    assert calls[0] == "prefill"
    assert calls[1] == ("decode_with_prompts" if warm else "decode")
