"""The controller's asyncio task: telemetry in, decisions out, never blocking the engine."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from adaptivespec.engine.telemetry import Subscription

if TYPE_CHECKING:
    from adaptivespec.controller.controller import Controller

log = logging.getLogger(__name__)


async def run_controller(
    controller: Controller,
    subscription: Subscription,
    on_error: Callable[[BaseException], None] | None = None,
) -> None:
    """Consumes telemetry until cancelled; a failure stops learning, not serving."""
    try:
        while True:
            controller.ingest(await subscription.get())
    except Exception as exc:  # the engine keeps the last good snapshot
        log.exception("controller failed; keeping policy version %s", controller.live.snapshot.version)
        if on_error is not None:
            on_error(exc)
