"""`adaptivespec serve`: bind, announce readiness, and drain on SIGTERM.

On SIGTERM (or SIGINT) /health turns 503 and new requests get 503; in-flight requests may
finish for up to the drain timeout, then end with finish_reason "abort"; the process then
exits 0. systemd hears READY=1 once migrations have run and the port is bound, WATCHDOG=1
from the event loop, and STOPPING=1 when the drain starts.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time

from aiohttp import web

from adaptivespec.config import ServeConfig
from adaptivespec.server.app import create_app
from adaptivespec.server.state import LIFECYCLE, NOTIFIER, SERVICES
from adaptivespec.server.systemd import Notifier

log = logging.getLogger(__name__)


async def serve(config: ServeConfig) -> int:
    app = create_app(config, Notifier())
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()  # loads the models and runs the migrations
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    for address in runner.addresses:
        print(f"[adaptivespec] listening on http://{_host(address)}", file=sys.stderr, flush=True)
    app[NOTIFIER].notify("READY=1")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    app[NOTIFIER].notify("STOPPING=1")
    app[LIFECYCLE].draining = True
    await _drain(app, config.drain_timeout)
    await runner.cleanup()
    return 0


async def _drain(app: web.Application, timeout: float) -> None:
    engine = app[SERVICES].engine
    deadline = time.monotonic() + timeout
    while engine.scheduler.has_work and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if engine.scheduler.has_work:
        log.warning("drain timeout reached; aborting %d requests", len(engine.scheduler.running))
    await engine.stop("abort")
    await asyncio.sleep(0.1)  # let handlers write the final events


def _host(address: object) -> str:
    if isinstance(address, tuple):
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(address)
