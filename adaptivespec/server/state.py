"""What the request handlers share, held under typed app keys (no string keys, no globals)."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from adaptivespec.config import ServeConfig
from adaptivespec.controller.controller import Controller
from adaptivespec.engine.engine import Engine
from adaptivespec.engine.tokenizer import Tokenizer
from adaptivespec.server.fleet_sync import FleetSync
from adaptivespec.server.metrics import Metrics
from adaptivespec.server.systemd import Notifier
from adaptivespec.store.repository import Store


@dataclass(slots=True)
class Lifecycle:
    ready: bool = False
    draining: bool = False


@dataclass(slots=True)
class Services:
    engine: Engine
    tokenizer: Tokenizer
    controller: Controller
    store: Store
    model_name: str
    model_aliases: frozenset[str]  # lower-cased names accepted as "model", model_name included
    chat_template: bool
    fleet: FleetSync | None = None  # when this host pools with a fleet


CONFIG = web.AppKey("config", ServeConfig)
SERVICES = web.AppKey("services", Services)
METRICS = web.AppKey("metrics", Metrics)
NOTIFIER = web.AppKey("notifier", Notifier)
LIFECYCLE = web.AppKey("lifecycle", Lifecycle)
