"""Disconnects, live overrides and fuzzing against a real aiohttp server (sim backend)."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adaptivespec.config import EngineConfig
from adaptivespec.server.app import create_app
from adaptivespec.server.state import SERVICES

from .conftest import TOKEN, sim_config


async def _wait_until(condition: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_hundred_clients_disconnecting_leave_nothing_behind(
    aiohttp_server: Any, tmp_path: Path
) -> None:
    config = sim_config(tmp_path, engine=EngineConfig(max_batch=16, max_queued=200, max_context=8192))
    app = create_app(config)
    server = await aiohttp_server(app)  # the test server cancels handlers on disconnect, as serve does
    engine = app[SERVICES].engine
    baseline_tasks = len(asyncio.all_tasks())

    async def client(i: int) -> None:
        async with aiohttp.ClientSession() as session:
            body = {"prompt": f"p{i}", "max_tokens": 6000, "stream": True}
            response = await session.post(server.make_url("/v1/completions"), json=body)
            if i % 2 == 0:  # half disconnect mid-stream, the other half while still queued
                await response.content.readline()
            response.close()

    await asyncio.gather(*(client(i) for i in range(100)))
    await _wait_until(lambda: not engine.scheduler.has_work)
    metrics = await _metrics(server)
    assert "adaptivespec:num_requests_running 0.0" in metrics
    assert "adaptivespec:num_requests_waiting 0.0" in metrics
    assert "adaptivespec:prefill_backlog_tokens 0.0" in metrics
    await _wait_until(lambda: len(asyncio.all_tasks()) <= baseline_tasks)


async def _metrics(server: Any) -> str:
    async with aiohttp.ClientSession() as session:
        return await (await session.get(server.make_url("/metrics"))).text()


async def test_override_while_streaming_shows_in_the_next_step(sim_client: TestClient[Any, Any]) -> None:
    engine = sim_client.app[SERVICES].engine
    watcher = engine.telemetry.subscribe()
    stream = await sim_client.post(
        "/v1/completions", json={"prompt": "x", "max_tokens": 3000, "stream": True}
    )
    await stream.content.readline()
    await _wait_until(lambda: engine.steps > 5)
    response = await sim_client.post(
        "/admin/overrides", json={"kind": "pin", "k": 7}, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert response.status == 200
    pinned_at = engine.steps
    await _wait_until(lambda: engine.steps > pinned_at + 3)
    stream.close()
    records = [watcher.queue.get_nowait() for _ in range(watcher.queue.qsize())]
    assert all(r.k == 7 for r in records[pinned_at + 1 :]) and records[pinned_at + 1 :]


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)  # seeds at and past 2^64 included
    | st.sampled_from([2**64, 2**64 - 1, 10**400, -(10**400)])  # past float's range
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=12,
)
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "prompt": JSON | st.lists(st.text(min_size=1, max_size=3), min_size=30, max_size=40),
        "max_tokens": JSON,
        "temperature": JSON,
        "top_p": JSON,
        "stream": JSON,
        "n": JSON,
        "stop": JSON | st.lists(st.text(min_size=1, max_size=300), max_size=40),
        "seed": JSON,
        "stream_options": JSON,
        "messages": JSON,
        "model": JSON,
        "kind": JSON,
        "k": JSON,
        "frozen": JSON,
    },
)
ENDPOINTS = ["/v1/completions", "/v1/chat/completions", "/admin/overrides", "/admin/freeze"]


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(body=FIELDS | JSON, endpoint=st.sampled_from(ENDPOINTS))
async def test_fuzzed_bodies_never_get_a_5xx(
    sim_client: TestClient[Any, Any], body: Any, endpoint: str
) -> None:
    if isinstance(body, dict) and isinstance(body.get("max_tokens"), int):
        body["max_tokens"] = min(body["max_tokens"], 64)

    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    data = json.dumps(body)
    if data.startswith("{") and random.Random(data).random() < 0.1:
        data = _nested(data, 50_000)  # deeper than Python's recursion limit
    response = await sim_client.post(endpoint, data=data, headers=headers)
    assert response.status < 500, (endpoint, body, await response.text())
    if response.status >= 400:
        assert "error" in await response.json()
    else:
        await response.read()


def _nested(body: str, depth: int) -> str:
    """`body` (a JSON object) with one more field that nests `depth` lists deep."""
    rest = "}" if body == "{}" else ", " + body[1:]
    return '{"nested": ' + "[" * depth + "]" * depth + rest


class _BrokenDecode:
    """A tokenizer whose decode raises: a fault in the loop's own work, outside model compute."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str:
        raise RuntimeError("detokenizer bug")

    def __len__(self) -> int:
        return len(self._tokenizer)


async def test_a_dead_engine_loop_fails_requests_and_turns_health_to_503(
    sim_client: TestClient[Any, Any],
) -> None:
    engine = sim_client.server.app[SERVICES].engine
    engine.intake.tokenizer = _BrokenDecode(engine.intake.tokenizer)
    response = await sim_client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 8})
    assert response.status == 500 and "restart" in (await response.json())["error"]["message"]
    health = await sim_client.get("/health")
    assert health.status == 503 and (await health.json())["status"] == "failed"
    refused = await sim_client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 8})
    assert refused.status == 503 and "restart the service" in (await refused.json())["error"]["message"]
