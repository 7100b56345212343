"""Every request ends explicitly, by its id: refused part-way, finished, or cancelled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adaptivespec.config import EngineConfig
from adaptivespec.server.app import create_app
from adaptivespec.server.state import SERVICES

from ..conftest import wait_until
from .conftest import sim_config


async def test_prompts_queued_before_a_refusal_are_aborted(aiohttp_client: Any, tmp_path: Path) -> None:
    config = sim_config(tmp_path, engine=EngineConfig(max_batch=1, max_queued=2, max_context=4096))
    client = await aiohttp_client(create_app(config))
    engine = client.server.app[SERVICES].engine
    busy = await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 3000, "stream": True})
    await busy.content.readline()  # its row is taken: the next prompts must wait
    refused = await client.post("/v1/completions", json={"prompt": ["a", "b", "c"], "max_tokens": 3000})
    assert refused.status == 429
    # The two prompts that were queued before the third was refused are gone, not waiting
    # for a reader that will never come.
    assert all(s.aborted for s in engine.scheduler.waiting)
    busy.close()
    await wait_until(lambda: not engine.scheduler.has_work)


async def test_requests_leave_no_handle_behind(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await aiohttp_client(create_app(sim_config(tmp_path)))
    engine = client.server.app[SERVICES].engine
    done = await client.post("/v1/completions", json={"prompt": ["a", "b"], "max_tokens": 5})
    assert done.status == 200
    streamed = await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 3000, "stream": True})
    await streamed.content.readline()
    streamed.close()  # the client goes away mid-stream
    await wait_until(lambda: not engine.scheduler.has_work)
    for request_id in [f"req-{n}" for n in range(1, 4)]:
        engine.abort(request_id)  # ids that ended are no-ops, never errors
    assert not engine.scheduler.has_work
