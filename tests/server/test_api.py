"""The HTTP API against a real aiohttp server (sim backend: no model weights needed)."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from adaptivespec.config import EngineConfig
from adaptivespec.server.app import create_app
from adaptivespec.server.state import SERVICES

from .conftest import sim_config


async def _completion(client: TestClient[Any, Any], **body: Any) -> tuple[int, dict[str, Any]]:
    response = await client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 8} | body)
    return response.status, await response.json()


async def test_completion_list_prompts_and_usage(sim_client: TestClient[Any, Any]) -> None:
    status, body = await _completion(sim_client, prompt=["a", "bb", "ccc"], max_tokens=6)
    assert status == 200 and body["object"] == "text_completion"
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert all(c["finish_reason"] == "length" for c in body["choices"])
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 18, "total_tokens": 24}


async def test_raw_sse_has_only_data_events_then_done(sim_client: TestClient[Any, Any]) -> None:
    response = await sim_client.post(
        "/v1/completions",
        json={"prompt": "hi", "max_tokens": 12, "stream": True, "stream_options": {"include_usage": True}},
    )
    assert response.status == 200 and response.headers["Content-Type"].startswith("text/event-stream")
    raw = (await response.read()).decode()
    events = [block for block in raw.split("\n\n") if block]
    assert all(block.startswith("data: ") and "\n" not in block for block in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(block.removeprefix("data: ")) for block in events[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 12
    text_chunks = chunks[:-1]
    assert text_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in text_chunks[:-1])


async def test_validation_errors_are_openai_400s(sim_client: TestClient[Any, Any]) -> None:
    cases = [
        ({"n": 2}, "n"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": "ten"}, "max_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"max_tokens": 100_000}, "max_tokens"),
        ({"stop": 5}, "stop"),
        ({"logprobs": 3}, "logprobs"),
        ({"seed": 2**64}, "seed"),  # torch would raise in prefill and fail the whole batch
        ({"seed": -1}, "seed"),
        ({"temperature": 10**400}, "temperature"),  # beyond float: an OverflowError, not a 500
        ({"stop": ["x"] * 17}, "stop"),
        ({"stop": ["x" * 257]}, "stop"),
        ({"prompt": ["a"] * 33}, "prompt"),
        ({"prompt": "word " * 5000}, "prompt"),  # refused by its length, before it is tokenized
        # Fields that would change the text, which this server does not honour: refused, not dropped.
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"frequency_penalty": -1}, "frequency_penalty"),
        ({"repetition_penalty": 1.2}, "repetition_penalty"),  # vLLM's extensions, as vLLM clients send them
        ({"top_k": 40}, "top_k"),
        ({"min_p": 0.05}, "min_p"),
        ({"min_tokens": 4}, "min_tokens"),
        ({"stop_token_ids": [2]}, "stop_token_ids"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"guided_json": {"type": "object"}}, "guided_json"),
        ({"tool_choice": "required"}, "tool_choice"),
    ]
    for body, param in cases:
        status, reply = await _completion(sim_client, **body)
        assert status == 400, body
        assert reply["error"]["type"] == "invalid_request_error" and reply["error"]["param"] == param, body
        assert reply["error"]["message"]
    unsupported = await _completion(sim_client, top_k=40)
    assert "top_k is not supported by this server; leave it out" in unsupported[1]["error"]["message"]
    response = await sim_client.post("/v1/completions", data=b"{not json")
    assert response.status == 400 and "not valid JSON" in (await response.json())["error"]["message"]
    deep = b'{"prompt": "x", "n": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    response = await sim_client.post("/v1/completions", data=deep)
    assert response.status == 400 and "nests too deeply" in (await response.json())["error"]["message"]
    limits = await _completion(sim_client, stop=["x"] * 17)
    assert "at most 16 stop strings of at most 256 characters" in limits[1]["error"]["message"]
    status, reply = await _completion(sim_client, model="other")
    assert status == 404 and reply["error"]["code"] == "model_not_found"
    response = await sim_client.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
    )
    assert response.status == 400 and "chat template" in (await response.json())["error"]["message"]


async def test_fields_left_at_what_asks_for_nothing_are_served(sim_client: TestClient[Any, Any]) -> None:
    """OpenAI's clients send null for a field left unset, and some send a field at its neutral
    value; neither asks for anything this server does not do."""
    neutral: dict[str, Any] = {
        "temperature": None, "top_p": None, "n": None, "stream": None, "stream_options": None,
        "stop": None, "seed": None, "presence_penalty": 0, "frequency_penalty": 0.0, "top_k": -1,
        "repetition_penalty": 1.0, "min_p": 0, "response_format": {"type": "text"}, "tool_choice": "none",
        "logprobs": None, "modalities": ["text"], "user": "u-1",
    }  # fmt: skip
    status, reply = await _completion(sim_client, **neutral)
    assert status == 200, reply
    assert reply["usage"]["completion_tokens"] == 8
    status, reply = await _completion(sim_client, max_tokens=None)
    assert status == 200 and reply["usage"]["completion_tokens"] == 16  # the completions API's default


async def test_oversize_body_gets_413(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await aiohttp_client(create_app(sim_config(tmp_path, max_body_bytes=2048)))
    response = await client.post("/v1/completions", json={"prompt": "x" * 5000, "max_tokens": 1})
    assert response.status == 413
    assert (await response.json())["error"]["type"] == "invalid_request_error"


async def test_full_queue_gets_429_with_retry_after(aiohttp_client: Any, tmp_path: Path) -> None:
    config = sim_config(tmp_path, engine=EngineConfig(max_batch=1, max_queued=1, max_context=4096))
    client = await aiohttp_client(create_app(config))
    long = {"prompt": "x", "max_tokens": 3000, "stream": True}
    first = await client.post("/v1/completions", json=long)
    second_task = asyncio.create_task(client.post("/v1/completions", json=long))
    await asyncio.sleep(0.2)
    third = await client.post("/v1/completions", json=long)
    assert third.status == 429 and third.headers["Retry-After"] == "1"
    assert (await third.json())["error"]["type"] == "rate_limit_error"
    first.close()
    (await second_task).close()


async def test_health_models_and_metrics(sim_client: TestClient[Any, Any]) -> None:
    assert (await (await sim_client.get("/health")).json()) == {"status": "ok"}
    models = await (await sim_client.get("/v1/models")).json()
    assert models["data"][0]["id"] == "llama-3.1-8b+llama-3.2-1b:bf16"
    await _completion(sim_client, max_tokens=20)
    text = await (await sim_client.get("/metrics")).text()
    for name in (
        "adaptivespec:num_requests_running 0.0",
        "adaptivespec:num_requests_waiting 0.0",
        "adaptivespec:prompt_tokens_total",
        "adaptivespec:generation_tokens_total",
        "adaptivespec:step_seconds_bucket",
        "adaptivespec:decode_steps_overlapped_total",
        "adaptivespec:decode_steps_with_prompts_total 0.0",  # the simulator prefills apart
        "adaptivespec:spec_decode_num_draft_tokens_total",
        "adaptivespec:spec_decode_num_accepted_tokens_total",
        'adaptivespec:spec_k{batch_bucket="1",ctx_bucket="1-512"}',
        "adaptivespec:policy_version",
    ):
        assert name in text, name
    assert "fleet" not in text  # a lone host exports no fleet series: absent, not "database down"
    assert 'batch_bucket="17-24"' not in text  # beyond max_batch (16): no column, no series


async def test_a_seeded_request_beside_a_bad_seed_is_unharmed(sim_client: TestClient[Any, Any]) -> None:
    good = asyncio.create_task(_completion(sim_client, seed=2**64 - 1, max_tokens=12, temperature=1.0))
    bad = await _completion(sim_client, seed=2**64, max_tokens=12)
    assert bad[0] == 400
    status, reply = await good
    assert status == 200 and reply["choices"][0]["finish_reason"] == "length"


async def test_quiet_streams_get_keepalive_comments_and_no_proxy_buffering(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """A request queued behind a full batch is silent a while: comments keep proxies from timing it out."""
    engine = EngineConfig(max_batch=1, max_queued=4, max_context=4096)
    client = await aiohttp_client(create_app(sim_config(tmp_path, engine=engine, sse_keepalive_seconds=0.02)))
    first = await client.post(
        "/v1/completions", json={"prompt": "x", "max_tokens": 400, "stream": True, "ignore_eos": True}
    )
    queued = await client.post("/v1/completions", json={"prompt": "y", "max_tokens": 2, "stream": True})
    assert queued.headers["X-Accel-Buffering"] == "no"
    body = (await queued.read()).decode()
    await first.read()
    assert ": keep-alive\n\n" in body
    events = [line for line in body.split("\n\n") if line and not line.startswith(":")]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)


async def test_token_metrics_count_what_requests_kept_when_they_were_admitted(
    sim_client: TestClient[Any, Any],
) -> None:
    """Drafts accepted past max_tokens are not generated tokens; a queued prompt is not yet a prompt token."""
    usage = {"prompt_tokens": 0, "completion_tokens": 0}
    for max_tokens in (1, 5, 17, 30):
        status, reply = await _completion(sim_client, max_tokens=max_tokens, ignore_eos=True)
        assert status == 200
        for name in usage:
            usage[name] += reply["usage"][name]
    metrics = await (await sim_client.get("/metrics")).text()
    assert f"adaptivespec:generation_tokens_total {float(usage['completion_tokens'])}" in metrics
    assert f"adaptivespec:prompt_tokens_total {float(usage['prompt_tokens'])}" in metrics


async def test_prompts_are_tokenized_off_the_event_loop(sim_client: TestClient[Any, Any]) -> None:
    tokenizer = sim_client.server.app[SERVICES].engine.intake.tokenizer
    real, threads = tokenizer.encode, []

    def recording(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread())
        return real(*args, **kwargs)

    tokenizer.encode = recording  # type: ignore[method-assign]
    status, _ = await _completion(sim_client, prompt=["one", "two"], max_tokens=2)
    assert status == 200
    assert len(threads) == 2 and threading.main_thread() not in threads
