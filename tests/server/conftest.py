from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from adaptivespec.config import EngineConfig, ServeConfig
from adaptivespec.server.app import create_app

TOKEN = "s3cret-admin-token-0123456789"

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


def sim_config(tmp_path: Path, **overrides: Any) -> ServeConfig:
    engine = overrides.pop("engine", EngineConfig(max_batch=16, max_queued=32, max_context=4096))
    settings: dict[str, Any] = {"backend": "sim", "db": f"sqlite:///{tmp_path}/state.db", "engine": engine}
    return ServeConfig(**(settings | overrides))


@pytest.fixture
async def sim_client(aiohttp_client: Any, tmp_path: Path) -> TestClient[Any, Any]:
    return await aiohttp_client(create_app(sim_config(tmp_path, admin_token=TOKEN)))
