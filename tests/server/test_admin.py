"""The admin API against a real aiohttp server: who may read and change what, and what it shows."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient

from adaptivespec.config import EngineConfig
from adaptivespec.server.app import create_app
from adaptivespec.server.state import SERVICES

from .conftest import TOKEN, sim_config

AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def _completion(client: TestClient[Any, Any], **body: Any) -> tuple[int, dict[str, Any]]:
    response = await client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 8} | body)
    return response.status, await response.json()


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


async def test_admin_overrides_freeze_history_and_page(sim_client: TestClient[Any, Any]) -> None:
    auth = AUTH
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


async def test_without_a_token_changes_are_refused_and_reads_are_local_only(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """The bind address decides nothing: 0.0.0.0 or not, a local client may read, nobody may change."""
    client = await aiohttp_client(create_app(sim_config(tmp_path, host="0.0.0.0")))
    assert (await client.get("/admin/thresholds")).status == 200
    for headers in (
        {"X-Forwarded-For": "203.0.113.9"},
        {"Forwarded": "for=203.0.113.9"},
        {"X-Real-IP": "1.2.3.4"},
    ):
        refused = await client.get("/admin/thresholds", headers=headers)
        assert (
            refused.status == 403 and "ADAPTIVESPEC_ADMIN_TOKEN" in (await refused.json())["error"]["message"]
        )
    for method, path, body in (
        ("POST", "/admin/freeze", {"frozen": True}),
        ("POST", "/admin/overrides", {"kind": "force_off"}),
        ("DELETE", "/admin/overrides", None),
    ):
        response = await client.request(method, path, json=body)
        assert response.status == 403, path
        assert "need a token" in (await response.json())["error"]["message"]


async def test_a_same_host_reverse_proxy_cannot_open_the_admin_api(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """A proxy on the daemon's own host: its requests come from loopback, yet nothing it forwards may
    change the policy without the token, and reads through it need the token too."""
    daemon = await aiohttp_client(create_app(sim_config(tmp_path)))
    upstream = f"http://127.0.0.1:{daemon.port}"

    async def forward(request: web.Request) -> web.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        headers["X-Forwarded-For"] = request.remote or ""
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method, upstream + request.path_qs, headers=headers, data=await request.read()
            ) as response,
        ):
            return web.Response(
                body=await response.read(), status=response.status, content_type=response.content_type
            )

    proxy_app = web.Application()
    proxy_app.router.add_route("*", "/{tail:.*}", forward)
    proxy = await aiohttp_client(proxy_app)
    assert (await proxy.post("/admin/freeze", json={"frozen": True})).status == 403
    assert (await proxy.post("/admin/overrides", json={"kind": "force_off"})).status == 403
    assert (await proxy.get("/admin/thresholds")).status == 403
    assert (await proxy.get("/health")).status == 200  # the proxy itself works


async def test_changes_must_be_json_and_name_this_host(sim_client: TestClient[Any, Any]) -> None:
    """A cross-site form can post text/plain without a CORS preflight; DNS rebinding sends a foreign Host."""
    form = await sim_client.post(
        "/admin/freeze", data='{"frozen": true}', headers=AUTH | {"Content-Type": "text/plain"}
    )
    assert form.status == 415
    rebound = await sim_client.get("/admin/thresholds", headers=AUTH | {"Host": "attacker.example:8000"})
    assert rebound.status == 403 and "allowed_hosts" in (await rebound.json())["error"]["message"]
    local = await sim_client.get("/admin/thresholds", headers=AUTH | {"Host": "localhost:8000"})
    assert local.status == 200


async def test_allowed_hosts_admits_a_configured_name(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await aiohttp_client(
        create_app(sim_config(tmp_path, admin_token=TOKEN, allowed_hosts=("gpu-7.internal",)))
    )
    ok = await client.get("/admin/thresholds", headers=AUTH | {"Host": "GPU-7.internal:8000"})
    assert ok.status == 200


async def test_overrides_are_bounded(sim_client: TestClient[Any, Any]) -> None:
    too_big = await sim_client.post("/admin/overrides", json={"kind": "pin", "k": 99}, headers=AUTH)
    assert too_big.status == 400 and "at most 8" in (await too_big.json())["error"]["message"]
    for ctx in range(4):
        for batch in range(16):
            pinned = await sim_client.post(
                "/admin/overrides",
                json={"kind": "pin", "k": 1, "ctx_bucket": ctx, "batch_bucket": batch},
                headers=AUTH,
            )
            assert pinned.status == 200
    same_scope = await sim_client.post(
        "/admin/overrides", json={"kind": "pin", "k": 2, "ctx_bucket": 0, "batch_bucket": 0}, headers=AUTH
    )
    assert (
        same_scope.status == 200 and len((await same_scope.json())["overrides"]) == 64
    )  # replaced, not added
    one_more = await sim_client.post(
        "/admin/overrides", json={"kind": "pin", "k": 1, "ctx_bucket": 5, "batch_bucket": 0}, headers=AUTH
    )
    assert one_more.status == 400 and "at most 64" in (await one_more.json())["error"]["message"]


async def test_page_api_and_metrics_show_the_same_decisions(aiohttp_client: Any, tmp_path: Path) -> None:
    engine = EngineConfig(max_batch=16, max_queued=32, max_context=2048)
    client = await aiohttp_client(create_app(sim_config(tmp_path, admin_token=TOKEN, engine=engine)))
    await asyncio.gather(*(_completion(client, max_tokens=60, ignore_eos=True) for _ in range(6)))
    rows = (await (await client.get("/admin/thresholds", headers=AUTH)).json())["data"]
    assert [r["ctx_bucket"] for r in rows] == ["1-512", "513-1024", "1025-2048"]  # stops at max_context
    api = {(r["ctx_bucket"], b): k for r in rows for b, k in r["k_by_bucket"].items()}
    metrics = await (await client.get("/metrics")).text()
    scraped = {
        (m["ctx"], m["batch"]): int(float(m["k"]))
        for m in re.finditer(
            r'adaptivespec:spec_k\{batch_bucket="(?P<batch>[^"]+)",ctx_bucket="(?P<ctx>[^"]+)"\} (?P<k>\S+)',
            metrics,
        )
    }
    assert scraped == api
    page = await (await client.get("/admin", headers=AUTH)).text()
    shown = [int(k) for k in re.findall(r'<td class="k[^"]*"[^>]*>(\d+)\*?</td>', page)]
    assert shown == [api[(r["ctx_bucket"], b)] for r in rows for b in r["k_by_bucket"]]
    measured = {b for r in rows for b, s in r["source_by_bucket"].items() if s == "measured"}
    assert measured and all(
        r["source_by_bucket"][b] in ("measured", "borrowed") for r in rows for b in r["k_by_bucket"]
    )


async def test_history_is_read_off_the_event_loop(sim_client: TestClient[Any, Any]) -> None:
    """A slow database must not stall every stream the loop serves."""
    store = sim_client.server.app[SERVICES].store
    real, threads = store.history, []

    def recording(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread())
        return real(*args, **kwargs)

    store.history = recording  # type: ignore[method-assign]
    response = await sim_client.get("/admin/decisions", headers=AUTH)
    assert response.status == 200
    assert threads and threading.main_thread() not in threads


async def test_restored_cells_show_their_restored_statistics(aiohttp_client: Any, tmp_path: Path) -> None:
    """After a restart, the admin view shows what the store gave back, not zeros."""
    config = sim_config(tmp_path, admin_token=TOKEN)
    first = await aiohttp_client(create_app(config))
    for _ in range(3):
        assert (await _completion(first, max_tokens=60))[0] == 200
    learned = (await (await first.get("/admin/thresholds", headers=AUTH)).json())["data"]
    await first.close()  # the shutdown flushes
    second = await aiohttp_client(create_app(config))
    restored = (await (await second.get("/admin/thresholds", headers=AUTH)).json())["data"]
    assert [r["samples"] for r in restored] == [r["samples"] for r in learned]
    measured = [r for r in restored if r["samples"]]
    assert measured and all(r["confidence"] is not None for r in measured)
    assert [r["threshold"] for r in restored] == [r["threshold"] for r in learned]


async def test_the_table_has_a_column_per_batch_bucket_the_engine_can_reach(
    sim_client: TestClient[Any, Any],
) -> None:
    rows = (await (await sim_client.get("/admin/thresholds", headers=AUTH)).json())["data"]
    reachable = ["1", "2", "3-4", "5-8", "9-12", "13-16"]  # max_batch 16
    assert rows and all(list(r["k_by_bucket"]) == reachable for r in rows)
    page = await (await sim_client.get("/admin", headers=AUTH)).text()
    head = re.search(r"<tr><th>context \\ batch</th>(.*?)</tr>", page)
    assert head is not None and re.findall(r"<th>(.*?)</th>", head.group(1)) == reachable


async def test_the_drafter_is_shown_and_pinned_beside_k(sim_client: TestClient[Any, Any]) -> None:
    await _completion(sim_client, max_tokens=40)
    rows = (await (await sim_client.get("/admin/thresholds", headers=AUTH)).json())["data"]
    for row in rows:
        for label, k in row["k_by_bucket"].items():
            assert row["method_by_bucket"][label] == ("draft" if k else "")  # the simulator's one drafter
    metrics = await (await sim_client.get("/metrics")).text()
    decided = re.findall(
        r'adaptivespec:spec_method\{batch_bucket="[^"]+",ctx_bucket="[^"]+",method="([^"]*)"\} 1', metrics
    )
    assert decided and set(decided) <= {"draft", ""}
    pinned = await sim_client.post(
        "/admin/overrides", json={"kind": "pin", "k": 3, "method": "draft", "batch_bucket": 0}, headers=AUTH
    )
    assert pinned.status == 200 and (await pinned.json())["overrides"][0]["method"] == "draft"
    for body, problem in (
        ({"kind": "pin", "k": 3, "method": "suffix"}, "drafters loaded"),
        ({"kind": "pin", "k": 3, "method": 5}, "method must be a string"),
        ({"kind": "pin", "k": 0, "method": "draft"}, "needs k > 0"),
        ({"kind": "force_on", "method": "draft"}, "takes no k and no method"),
    ):
        refused = await sim_client.post("/admin/overrides", json=body, headers=AUTH)
        assert refused.status == 400 and problem in (await refused.json())["error"]["message"], body
