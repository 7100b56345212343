"""The aiohttp application: `create_app(config)`, with every resource owned by a cleanup context."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from adaptivespec.config import ServeConfig
from adaptivespec.controller import persistence
from adaptivespec.controller.controller import Controller, ControllerConfig
from adaptivespec.controller.learning_settings import LearningSettings
from adaptivespec.controller.sync_cadence import SyncCadence
from adaptivespec.controller.task import run_controller
from adaptivespec.engine.engine import Engine, compute_thread
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.runner import Runner
from adaptivespec.engine.tokenizer import ByteTokenizer, Tokenizer
from adaptivespec.server import admin, admin_auth, openai_api
from adaptivespec.server.fleet_sync import FleetSync
from adaptivespec.server.metrics import Metrics
from adaptivespec.server.protocol import ApiError, error_body
from adaptivespec.server.state import (
    CONFIG,
    LIFECYCLE,
    METRICS,
    NOTIFIER,
    SERVICES,
    Lifecycle,
    Services,
)
from adaptivespec.server.systemd import Notifier
from adaptivespec.server.thread_work import run_to_the_end
from adaptivespec.sim import specs
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.runner import SimRunner
from adaptivespec.sim.workload import Workload
from adaptivespec.store.fleet import FleetRepository
from adaptivespec.store.repository import Store

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_app(config: ServeConfig, notifier: Notifier | None = None) -> web.Application:
    app = web.Application(
        client_max_size=config.max_body_bytes, middlewares=[errors, draining, admin_auth.guard]
    )
    app[CONFIG] = config
    app[METRICS] = Metrics()
    app[NOTIFIER] = notifier or Notifier()
    app[LIFECYCLE] = Lifecycle()
    app.cleanup_ctx.append(runtime)
    app.add_routes(
        [
            web.post("/v1/completions", openai_api.completions),
            web.post("/v1/chat/completions", openai_api.chat_completions),
            web.get("/v1/models", openai_api.models),
            web.get("/health", health),
            web.get("/metrics", metrics),
            *admin.routes(),
        ]
    )
    return app


@dataclass(frozen=True, slots=True)
class Loaded:
    runner: Runner
    tokenizer: Tokenizer
    chat: bool  # the tokenizer has a chat template
    name: str  # the model's own name, listed by /v1/models
    aliases: frozenset[str]  # other names clients may send as "model" (compared case-insensitively)


def _load(config: ServeConfig) -> Loaded:
    if config.backend == "sim":
        cost = StepCostModel(
            specs.hardware(config.sim_hardware), specs.model(config.sim_target), specs.model(config.sim_draft)
        )
        engine = config.engine
        runner = SimRunner(
            cost,
            Workload(acceptance_mean=config.sim_acceptance),
            max_batch=engine.max_batch,
            max_spec_tokens=engine.max_spec_tokens,
            seed=engine.seed,
        )
        return Loaded(runner, ByteTokenizer(), False, runner.model_key, frozenset())
    loaded = load_runner(config.engine)
    chat = getattr(loaded.tokenizer, "chat_template", None) is not None
    target = loaded.target
    aliases = {config.engine.models.target, target.served_name, target.key, loaded.runner.model_key}
    return Loaded(loaded.runner, loaded.tokenizer, chat, target.served_name, frozenset(aliases))


async def runtime(app: web.Application) -> AsyncIterator[None]:
    """Store (checked and migrated here), models, controller and engine, in that order; torn down in
    reverse."""
    config = app[CONFIG]
    # The store first: a damaged or foreign database is refused before minutes of model loading.
    store = Store(config.db)
    compute = compute_thread()  # the models load on the thread that will run them
    try:
        loaded = await asyncio.get_running_loop().run_in_executor(compute, _load, config)
    except BaseException:
        store.close()
        compute.shutdown(wait=False)
        raise
    runner, tokenizer = loaded.runner, loaded.tokenizer
    controller, fleet = await _learner(config, runner, store)
    engine = Engine(runner, tokenizer, controller.live, config.engine, compute=compute)
    name = config.served_model_name or loaded.name
    aliases = frozenset(a.lower() for a in {name, loaded.name, *loaded.aliases})
    app[SERVICES] = Services(engine, tokenizer, controller, store, name, aliases, loaded.chat, fleet)
    lock = asyncio.Lock()

    async def flush() -> None:
        """Saves what changed since the last save; if the save fails, all of it is kept for the next."""
        async with lock:
            unsaved = controller.take_unsaved()
            state = unsaved.state if fleet is None else persistence.decisions_only(unsaved.state)
            try:
                await run_to_the_end(store.save, state, unsaved.history)
            except Exception:
                controller.give_back(unsaved)
                raise

    await engine.start()
    tasks = [
        asyncio.create_task(run_controller(controller, engine.telemetry.subscribe()), name="controller"),
        asyncio.create_task(app[METRICS].consume(engine.telemetry.subscribe()), name="metrics"),
        asyncio.create_task(_periodic(flush, config.flush_seconds), name="store-flush"),
        asyncio.create_task(app[NOTIFIER].watchdog(lambda: engine.healthy), name="watchdog"),
    ]
    if fleet is not None:
        tasks.append(asyncio.create_task(fleet.run(), name="fleet-sync"))
    app[LIFECYCLE].ready = True
    log.info("serving %s on %s", name, runner.hardware_key)
    try:
        yield
    finally:
        app[LIFECYCLE].ready = False
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await engine.stop("abort")
        with contextlib.suppress(Exception):
            await flush()
        if fleet is not None:
            with contextlib.suppress(Exception):
                await fleet.flush()
        store.close()
        compute.shutdown(wait=True)


async def _learner(config: ServeConfig, runner: Runner, store: Store) -> tuple[Controller, FleetSync | None]:
    """The controller, with what the store (and the fleet, when pooling) learned before."""
    pooling = config.pools_with_fleet(store.engine.dialect.name)
    host_id = config.host_id or default_host_id(config.port)
    learning = LearningSettings().capped(runner.max_spec_tokens)
    controller = Controller(
        runner.model_key, runner.hardware_key, ControllerConfig(settings=learning), runner.methods
    )
    saved = store.load(runner.model_key, runner.hardware_key)
    if saved is not None:
        controller.restore(saved, statistics=not pooling)  # applied before the first step
    if not pooling:
        return controller, None
    repository = FleetRepository(store.engine)
    keys = (runner.model_key, runner.hardware_key)
    fleet = FleetSync(
        controller,
        repository,
        host_id,
        SyncCadence(
            config.flush_seconds,
            config.fleet_refresh_seconds,
            config.fleet_learning_sync_seconds,
            config.fleet_young_cell_steps,
        ),
        operator_state=lambda: store.operator_state(*keys),
    )
    await fleet.start()
    log.info("pooling with %d other hosts as %r", fleet.status.hosts, host_id)
    return controller, fleet


async def _periodic(flush: Callable[[], Awaitable[None]], seconds: float) -> None:
    failing = False
    while True:
        await asyncio.sleep(seconds)
        try:
            await flush()
        except Exception as exc:  # the next flush retries; serving goes on
            if not failing:  # once per outage, not every few seconds
                log.exception("writing controller state failed; retrying every %.0f s", seconds)
            else:
                log.debug("writing controller state failed again: %s", exc)
            failing = True
        else:
            if failing:
                log.warning("writing controller state works again")
            failing = False


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response(exc.body(), status=exc.status, headers=_retry(exc.status))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        kind = "invalid_request_error" if exc.status < 500 else "server_error"
        return web.json_response(error_body(exc.reason, kind), status=exc.status)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return web.json_response(error_body("internal server error", "server_error"), status=500)


def _retry(status: int) -> dict[str, str]:
    return {"Retry-After": "1"} if status in (429, 503) else {}


@web.middleware
async def draining(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path.startswith("/v1/") and request.app[LIFECYCLE].draining:
        request.app[METRICS].rejections.labels("draining").inc()
        raise ApiError(503, "the server is shutting down; retry on another replica", kind="server_error")
    return await handler(request)


async def health(request: web.Request) -> web.Response:
    lifecycle = request.app[LIFECYCLE]
    if lifecycle.draining:
        return web.json_response({"status": "draining"}, status=503)
    if not lifecycle.ready:
        return web.json_response({"status": "starting"}, status=503)
    engine = request.app[SERVICES].engine
    if not engine.healthy:
        error = engine.failure or _stall(engine) or "the engine loop is not running"
        return web.json_response({"status": "failed", "error": error}, status=503)
    fleet = request.app[SERVICES].fleet
    if fleet is None:
        return web.json_response({"status": "ok"})
    return web.json_response({"status": "ok", "fleet": fleet.status.as_json()})


async def metrics(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    fleet = services.fleet.status if services.fleet is not None else None
    body = request.app[METRICS].render(services.engine, services.controller, fleet)
    return web.Response(body=body, content_type="text/plain", charset="utf-8", headers={"X-Format": "0.0.4"})


def _stall(engine: Engine) -> str | None:
    waited = engine.stalled_for
    if waited <= engine.config.stall_seconds:
        return None
    return (
        f"no engine step has completed for {waited:.0f} s with work pending "
        f"(stall_seconds {engine.config.stall_seconds:g}); restart the service"
    )


def default_host_id(port: int) -> str:
    """The machine's name and the port: daemons on one machine (one per GPU) bind different
    ports, so each keeps its own rows, and a restart keeps its id. A daemon on an ephemeral
    port gets a random suffix instead."""
    suffix = str(port) if port else uuid.uuid4().hex[:8]
    return f"{socket.gethostname()}:{suffix}"
