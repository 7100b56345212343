"""The HTTP API against a real aiohttp server (sim backend: no model weights needed)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from adaptivespec.config import EngineConfig
from adaptivespec.server.app import create_app

from .conftest import TOKEN, sim_config


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
    ]
    for body, param in cases:
        status, reply = await _completion(sim_client, **body)
        assert status == 400, body
        assert reply["error"]["type"] == "invalid_request_error" and reply["error"]["param"] == param, body
        assert reply["error"]["message"]
    response = await sim_client.post("/v1/completions", data=b"{not json")
    assert response.status == 400 and "not valid JSON" in (await response.json())["error"]["message"]
    status, reply = await _completion(sim_client, model="other")
    assert status == 404 and reply["error"]["code"] == "model_not_found"
    response = await sim_client.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
    )
    assert response.status == 400 and "chat template" in (await response.json())["error"]["message"]


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
        "adaptivespec:spec_decode_num_draft_tokens_total",
        "adaptivespec:spec_decode_num_accepted_tokens_total",
        'adaptivespec:spec_k{batch_bucket="1",ctx_bucket="1-512"}',
        "adaptivespec:policy_version",
    ):
        assert name in text, name


async def test_admin_requires_the_exact_token(sim_client: TestClient[Any, Any]) -> None:
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN.upper()}"},
        {"Authorization": TOKEN},
    ):
        response = await sim_client.get("/admin/thresholds", headers=headers)
        assert response.status == 401, headers
        assert (await response.json())["error"]["type"] == "authentication_error"
    ok = await sim_client.get("/admin/thresholds", headers={"Authorization": f"bearer {TOKEN}"})
    assert ok.status == 200
    assert (await sim_client.get("/health")).status == 200  # open routes stay open


async def test_admin_is_refused_without_a_token_off_loopback(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await aiohttp_client(create_app(sim_config(tmp_path, host="0.0.0.0")))
    response = await client.get("/admin/thresholds")
    assert (
        response.status == 403 and "ADAPTIVESPEC_ADMIN_TOKEN" in (await response.json())["error"]["message"]
    )


async def test_admin_overrides_freeze_history_and_page(sim_client: TestClient[Any, Any]) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    await _completion(sim_client, max_tokens=40)
    pinned = await sim_client.post(
        "/admin/overrides", json={"kind": "pin", "k": 6, "batch_bucket": 0}, headers=auth
    )
    assert pinned.status == 200 and (await pinned.json())["overrides"][0]["k"] == 6
    bad = await sim_client.post("/admin/overrides", json={"kind": "pin"}, headers=auth)
    assert bad.status == 400 and "k >= 0" in (await bad.json())["error"]["message"]
    bad = await sim_client.post("/admin/overrides", json={"kind": "pin", "k": 2, "bogus": 1}, headers=auth)
    assert bad.status == 400
    frozen = await sim_client.post("/admin/freeze", json={"frozen": True}, headers=auth)
    assert (await frozen.json())["frozen"] is True
    assert (await sim_client.post("/admin/freeze", json={"frozen": "yes"}, headers=auth)).status == 400
    history = await (await sim_client.get("/admin/decisions?limit=2", headers=auth)).json()
    assert history["total"] >= 2 and len(history["data"]) == 2
    assert {"reason", "policy_version", "created_at"} <= history["data"][0].keys()
    assert (await sim_client.get("/admin/decisions?limit=0", headers=auth)).status == 400
    cleared = await sim_client.delete("/admin/overrides", headers=auth)
    assert (await cleared.json())["overrides"] == []
    page = await sim_client.get("/admin", headers=auth)
    assert page.status == 200 and "<table>" in await page.text()
