"""Daemons pooling through a real PostgreSQL: warm starts from the fleet, outages, exact counts."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from sqlalchemy import text

from adaptivespec.server.app import create_app
from adaptivespec.server.state import SERVICES
from adaptivespec.store.fleet import FleetKey, FleetRepository
from adaptivespec.store.repository import Store
from tests.postgres import Cluster

from .conftest import TOKEN, sim_config

AUTH = {"Authorization": f"Bearer {TOKEN}"}
DASHBOARD = Path(__file__).resolve().parents[2] / "ops" / "grafana-dashboard.json"


def _fleet_config(tmp_path: Path, db: str, host_id: str, **overrides: Any) -> Any:
    settings = {"flush_seconds": 0.1, "fleet_refresh_seconds": 0.1, "admin_token": TOKEN} | overrides
    return sim_config(tmp_path, db=db, host_id=host_id, **settings)


async def _wait_until(condition: Any, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


async def _serve_load(client: TestClient[Any, Any], requests: int = 12, tokens: int = 120) -> None:
    async def one(i: int) -> None:
        response = await client.post("/v1/completions", json={"prompt": f"p{i}", "max_tokens": tokens})
        assert response.status == 200, await response.text()
        assert (await response.json())["usage"]["completion_tokens"] == tokens

    await asyncio.gather(*(one(i) for i in range(requests)))


async def _thresholds(client: TestClient[Any, Any]) -> list[dict[str, Any]]:
    response = await client.get("/admin/thresholds", headers=AUTH)
    assert response.status == 200
    return list((await response.json())["data"])


def _pooled_steps(url: str, model_key: str, hardware_key: str) -> int:
    store = Store(url, migrate=False)
    try:
        return (
            FleetRepository(store.engine).pooled(FleetKey("outsider", model_key, hardware_key)).totals.steps
        )
    finally:
        store.close()


async def test_a_new_daemon_starts_from_the_fleet_and_other_hardware_does_not(
    aiohttp_client: Any, tmp_path: Path, postgres_url: str
) -> None:
    first = await aiohttp_client(create_app(_fleet_config(tmp_path, postgres_url, "gpu-a")))
    await _serve_load(first)
    services = first.app[SERVICES]
    learned = {(d.ctx_bucket, d.batch_bucket): d.k for d in services.controller.decisions()}
    assert learned
    # closing writes its last flush
    await first.close()
    store = Store(postgres_url, migrate=False)
    with store.engine.connect() as connection:  # shared rows hold decisions, never one host's statistics
        assert connection.execute(text("SELECT count(*) FROM decisions")).scalar() == len(learned)
        assert connection.execute(text("SELECT count(*) FROM arm_stats")).scalar() == 0
    store.close()

    second = await aiohttp_client(create_app(_fleet_config(tmp_path, postgres_url, "gpu-b")))
    controller = second.app[SERVICES].controller
    assert controller.ingested == 0
    adopted = {(d.ctx_bucket, d.batch_bucket): d.k for d in controller.decisions()}
    assert adopted == learned  # before its first step
    rows = await _thresholds(second)
    sources = [s for row in rows for s in row["source_by_bucket"].values()]
    hosts = [n for row in rows for n in row["hosts_by_bucket"].values()]
    assert sources.count("fleet") == len(learned)
    assert hosts == [1] * len(learned)  # one other host stands behind each decision
    assert sum(row["fleet_samples"] for row in rows) == _pooled_steps(
        postgres_url, controller.model_key, controller.hardware_key
    )
    health = await (await second.get("/health")).json()
    assert health["fleet"]["state"] == "ok" and health["fleet"]["hosts"] == 1
    await second.close()

    other = await aiohttp_client(
        create_app(_fleet_config(tmp_path, postgres_url, "gpu-c", sim_hardware="l4"))
    )
    rows = await _thresholds(other)
    assert {s for row in rows for s in row["source_by_bucket"].values()} == {"prior"}
    assert (await (await other.get("/health")).json())["fleet"]["hosts"] == 0


async def test_a_database_outage_keeps_serving_and_loses_nothing(
    aiohttp_client: Any, tmp_path: Path, own_postgres: Cluster
) -> None:
    url = own_postgres.url()
    client = await aiohttp_client(create_app(_fleet_config(tmp_path, url, "gpu-a")))
    services = client.app[SERVICES]
    fleet, controller = services.fleet, services.controller
    assert fleet is not None
    await _serve_load(client)
    await _wait_until(lambda: fleet.status.flushes > 0)

    own_postgres.stop("immediate")  # killed mid-run
    await _serve_load(client)  # still served
    await _wait_until(lambda: fleet.status.state == "unreachable")
    health = await client.get("/health")
    assert health.status == 200
    body = await health.json()
    assert body["status"] == "ok" and body["fleet"]["state"] == "unreachable" and body["fleet"]["error"]
    metrics = await (await client.get("/metrics")).text()
    assert "adaptivespec:fleet_db_up 0.0" in metrics
    served_while_down = controller.ingested

    own_postgres.start()
    fleet.status.failures = 1  # skip the rest of the backoff; the loop retries within a flush period
    await _wait_until(lambda: fleet.status.state == "ok", timeout=60.0)
    await fleet.flush()  # what the loop does next, now, so the count below is final
    assert controller.ingested == served_while_down  # idle since
    assert _pooled_steps(url, controller.model_key, controller.hardware_key) == controller.ingested
    metrics = await (await client.get("/metrics")).text()
    assert "adaptivespec:fleet_db_up 1.0" in metrics


async def test_a_daemon_shares_a_young_cell_at_once_and_a_learned_one_at_the_steady_pace(
    aiohttp_client: Any, tmp_path: Path, postgres_url: str
) -> None:
    slow = {"flush_seconds": 30.0, "fleet_refresh_seconds": 30.0, "fleet_learning_sync_seconds": 0.05}
    young = await aiohttp_client(
        create_app(_fleet_config(tmp_path, postgres_url, "gpu-young", fleet_young_cell_steps=10**6, **slow))
    )
    controller = young.app[SERVICES].controller
    await _serve_load(young)
    # every cell stepped is young: flushes come every 0.05 s, not every 30 s
    await _wait_until(
        lambda: (
            _pooled_steps(postgres_url, controller.model_key, controller.hardware_key) == controller.ingested
        ),
        timeout=10.0,
    )
    assert (await (await young.get("/health")).json())["fleet"]["sync"] == "learning"
    await young.close()

    steady = await aiohttp_client(
        create_app(
            _fleet_config(
                tmp_path, postgres_url, "gpu-steady", sim_hardware="l4", fleet_young_cell_steps=0, **slow
            )
        )
    )
    fleet, controller = steady.app[SERVICES].fleet, steady.app[SERVICES].controller
    assert fleet is not None
    assert fleet.status.flushes == 1  # the start says the host is live
    await _serve_load(steady)
    await asyncio.sleep(1.0)
    assert fleet.status.flushes == 1  # the next one is 30 s away
    assert _pooled_steps(postgres_url, controller.model_key, controller.hardware_key) == 0
    assert (await (await steady.get("/health")).json())["fleet"]["sync"] == "steady"
    await steady.close()


async def test_daemons_serving_together_take_different_shares_of_new_cells_probes(
    aiohttp_client: Any, tmp_path: Path, postgres_url: str
) -> None:
    clients = [
        await aiohttp_client(create_app(_fleet_config(tmp_path, postgres_url, host)))
        for host in ("gpu-b", "gpu-a")
    ]

    async def shares(serving: list[TestClient[Any, Any]]) -> list[tuple[int, int]]:
        fleets = [(await (await c.get("/health")).json())["fleet"] for c in serving]
        return [(f["probe_rank"], f["live_hosts"]) for f in fleets]

    async def until(serving: list[TestClient[Any, Any]], expected: list[tuple[int, int]]) -> None:
        deadline = asyncio.get_running_loop().time() + 20.0
        while await shares(serving) != expected:
            assert asyncio.get_running_loop().time() < deadline, await shares(serving)
            await asyncio.sleep(0.05)

    await until(clients, [(1, 2), (0, 2)])  # each sorts the same two ids
    await clients[0].close()  # gpu-b stops flushing: gpu-a soon counts itself alone
    await until(clients[1:], [(0, 1)])
    await clients[1].close()


async def test_the_dashboard_queries_only_metrics_the_daemon_exports(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    config = _fleet_config(tmp_path, f"sqlite:///{tmp_path}/fleet.db", "gpu-a", fleet="on")
    client = await aiohttp_client(create_app(config))
    await _serve_load(client, requests=2, tokens=20)
    exported = set(re.findall(r"^(adaptivespec:[a-z_]+)", await (await client.get("/metrics")).text(), re.M))
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"adaptivespec:[a-z_]+", target["expr"])
    }
    queried |= set(re.findall(r"adaptivespec:[a-z_]+", json.dumps(dashboard["templating"])))
    assert len(queried) >= 12
    assert queried <= exported, f"not exported: {sorted(queried - exported)}"
    titles = " ".join(panel["title"].lower() for panel in dashboard["panels"])
    for shown in ("k per bucket", "acceptance", "goodput", "step time", "database"):
        assert shown in titles


async def test_a_freeze_and_overrides_are_fleet_wide_and_no_flush_undoes_them(
    aiohttp_client: Any, tmp_path: Path, postgres_url: str
) -> None:
    """Operator controls are the fleet's: set on one host, they reach the others on refresh,
    and the others' periodic flushes never write them back; the shared version never goes back."""
    a = await aiohttp_client(create_app(_fleet_config(tmp_path / "a", postgres_url, "gpu-a")))
    b = await aiohttp_client(create_app(_fleet_config(tmp_path / "b", postgres_url, "gpu-b")))
    controllers = [c.app[SERVICES].controller for c in (a, b)]
    await asyncio.gather(_serve_load(a, requests=4, tokens=60), _serve_load(b, requests=4, tokens=60))
    assert (await a.post("/admin/freeze", json={"frozen": True}, headers=AUTH)).status == 200
    pin = {"kind": "pin", "k": 2, "batch_bucket": 0}
    assert (await a.post("/admin/overrides", json=pin, headers=AUTH)).status == 200
    await _wait_until(lambda: controllers[1].frozen and len(controllers[1].overrides) == 1)
    assert controllers[0].frozen and len(controllers[0].overrides) == 1  # its own flush undid neither
    before = _policy_row(postgres_url)
    await _serve_load(b, requests=4, tokens=60)  # b serves on, and flushes many times
    await asyncio.sleep(0.5)
    after = _policy_row(postgres_url)
    assert before[0] == after[0] == 1 and controllers[0].frozen  # b never wrote the freeze back
    assert after[1] >= before[1]  # the version never goes back, whichever host flushed last
    assert (await a.post("/admin/freeze", json={"frozen": False}, headers=AUTH)).status == 200
    await _wait_until(lambda: not controllers[1].frozen)
    await a.close()
    await b.close()


def _policy_row(url: str) -> tuple[int, int]:
    store = Store(url, migrate=False)
    try:
        with store.engine.connect() as connection:
            frozen, version = connection.execute(text("SELECT frozen, version FROM policy_state")).one()
    finally:
        store.close()
    return int(frozen), int(version)
