"""Input a hostile or careless client sends gets a clear 4xx with an OpenAI-style body, never
a 500, and a GET never writes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp.test_utils import TestClient

from adaptivespec.server.admin_auth import host_name
from adaptivespec.server.state import SERVICES

from .conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def _raw(client: TestClient[Any, Any], head: bytes, body: bytes = b"") -> tuple[int, dict[str, Any]]:
    """One HTTP/1.1 request written byte for byte (clients refuse to send some of these headers)."""
    server = client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(head + b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    reply = await reader.read()
    writer.close()
    status = int(reply.split(b" ", 2)[1])
    payload = reply.split(b"\r\n\r\n", 1)[1]
    return status, json.loads(payload) if payload.startswith(b"{") else {}


async def test_lone_surrogates_in_a_prompt_are_400s(sim_client: TestClient[Any, Any]) -> None:
    for prompt in ('"abc\\ud800"', '["ok", "abc\\udfff"]'):
        body = b'{"prompt": %s, "max_tokens": 2}' % prompt.encode()
        response = await sim_client.post(
            "/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        assert response.status == 400, prompt
        error = (await response.json())["error"]
        assert error["param"] == "prompt" and "surrogate" in error["message"]


async def test_query_integers_are_ascii_digits_of_bounded_length(sim_client: TestClient[Any, Any]) -> None:
    for limit in ("²", "١٢", "9" * 5000, "-1", "1e3", " 5"):
        response = await sim_client.get("/admin/decisions", params={"limit": limit}, headers=AUTH)
        assert response.status == 400, limit
        assert (await response.json())["error"]["param"] == "limit"


async def test_a_token_of_any_bytes_is_a_401(sim_client: TestClient[Any, Any]) -> None:
    for token in (b"\xff\xfe\xfd", "jeton-é".encode(), b"\xed\xa0\x80"):
        head = (
            b"GET /admin/thresholds HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token + b"\r\n"
        )
        status, body = await _raw(sim_client, head)
        assert status == 401, token
        assert body["error"]["type"] == "authentication_error"


async def test_the_admin_host_check_parses_the_header_strictly(sim_client: TestClient[Any, Any]) -> None:
    for host in (b"evil.com@127.0.0.1", b"127.0.0.1@evil.com", b"evil.com#@127.0.0.1", b"127.0.0.1/x"):
        head = b"GET /admin/thresholds HTTP/1.1\r\nHost: " + host + b"\r\nAuthorization: Bearer "
        status, body = await _raw(sim_client, head + TOKEN.encode() + b"\r\n")
        assert status in (400, 403), host
        assert "error" in body
    ok, _ = await _raw(
        sim_client,
        b"GET /admin/thresholds HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
        b"Authorization: Bearer " + TOKEN.encode() + b"\r\n",
    )
    assert ok == 200
    assert host_name("[::1]:80") == "::1" and host_name("LocalHost") == "localhost"
    assert host_name("a b") is None and host_name("") is None and host_name("x:99999999") is None


async def test_reading_the_history_never_writes(sim_client: TestClient[Any, Any]) -> None:
    services = sim_client.server.app[SERVICES]
    reply = await sim_client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 40})
    assert reply.status == 200
    pin = {"kind": "pin", "k": 3, "batch_bucket": 0}
    assert (await sim_client.post("/admin/overrides", json=pin, headers=AUTH)).status == 200
    writes: list[object] = []

    def refuse(*args: Any) -> None:
        writes.append(args)
        raise RuntimeError("the store is read-only")

    services.store.save = refuse  # type: ignore[method-assign]
    history = await sim_client.get("/admin/decisions", headers=AUTH)
    assert history.status == 200 and writes == []
    data = (await history.json())["data"]
    assert data and data[0]["reason"].startswith("admin: pin")  # unsaved changes are shown, newest first
