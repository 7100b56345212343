"""A save on a worker thread is waited out by a cancelled caller, and the cancellation still arrives."""

from __future__ import annotations

import asyncio
import threading

import pytest

from adaptivespec.server.thread_work import run_to_the_end


class Gate:
    """A blocking piece of work the test lets finish when it chooses."""

    def __init__(self, fails: bool = False) -> None:
        self.started, self.release, self.fails = threading.Event(), threading.Event(), fails
        self.finished = False

    def work(self, value: int) -> int:
        self.started.set()
        self.release.wait(timeout=10.0)
        self.finished = True
        if self.fails:
            raise OSError("the database went away")
        return value * 2


async def _caller(gate: Gate, seen: list[object]) -> None:
    try:
        seen.append(await run_to_the_end(gate.work, 21))
    except OSError as exc:
        seen.append(exc)  # what a save does to give back what it took
    await asyncio.sleep(60.0)  # the next await: where the deferred cancellation lands


async def _cancelled_mid_work(gate: Gate) -> tuple[asyncio.Task[None], list[object]]:
    seen: list[object] = []
    task = asyncio.create_task(_caller(gate, seen))
    await asyncio.to_thread(gate.started.wait, 10.0)
    task.cancel()
    await asyncio.sleep(0.1)
    assert not task.done() and not gate.finished  # still waiting for the thread
    gate.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    return task, seen


async def test_it_returns_what_the_thread_returned() -> None:
    gate = Gate()
    gate.release.set()
    assert await run_to_the_end(gate.work, 5) == 10


async def test_a_cancelled_caller_waits_for_the_thread_sees_its_result_then_stops() -> None:
    gate = Gate()
    task, seen = await _cancelled_mid_work(gate)
    assert gate.finished and seen == [42] and task.cancelled()


async def test_a_cancelled_caller_sees_the_failure_so_it_can_give_back_then_stops() -> None:
    gate = Gate(fails=True)
    task, seen = await _cancelled_mid_work(gate)
    assert gate.finished and task.cancelled()
    assert len(seen) == 1 and isinstance(seen[0], OSError)
