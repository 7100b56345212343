"""Blocking work on a worker thread that a cancelled caller still waits out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def run_to_the_end(work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`asyncio.to_thread`, except that a caller cancelled meanwhile waits for the thread first.

    A thread cannot be cancelled: a save goes on after its caller was. Had the caller stopped
    at once, a shutdown would go on to its last save and close the store while this one still
    ran, return before it committed, and let a write of older totals land after newer ones.
    So the cancellation is deferred, not lost: the caller gets the work's outcome (its result,
    or its exception to give back what it took) and the cancellation at its next await.
    """
    running = asyncio.ensure_future(asyncio.to_thread(work, *args, **kwargs))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        await asyncio.wait([running])  # a second cancellation stops this wait
        task = asyncio.current_task()
        if task is not None:
            if hasattr(task, "uncancel"):  # 3.11+: the request counts once, as its sender expects
                task.uncancel()
            task.cancel()
        return running.result()
