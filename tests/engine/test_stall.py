"""A step that never returns, with work pending, makes the engine unhealthy, so that /health
turns 503 and the systemd watchdog stops petting; it recovers once steps complete again."""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from dataclasses import replace
from typing import Any

from adaptivespec.engine.engine import Engine
from adaptivespec.engine.loader import LoadedModels
from adaptivespec.engine.runner import DecodeOutput, Runner
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.server.systemd import Notifier

from ..conftest import TinyPair, engine_config, wait_until


class BlockingRunner:
    """The real runner, whose decode steps wait while `gate` is closed."""

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self.gate = threading.Event()
        self.gate.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def decode(self, batch: int, k: int, method: str | None = None) -> DecodeOutput:
        self.gate.wait()
        return self._runner.decode(batch, k, method)


async def test_a_blocked_step_stops_the_watchdog(tiny_pair: TinyPair, tiny_models: LoadedModels) -> None:
    runner = BlockingRunner(tiny_models.runner)
    config = replace(engine_config(tiny_pair), stall_seconds=1.0, overlap="off")
    engine = Engine(runner, tiny_models.tokenizer, FixedK(0), config)  # type: ignore[arg-type]
    name = f"adaptivespec-test-{uuid.uuid4().hex}"
    await engine.start()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0" + name)
        listener.setblocking(False)
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "100000"})
        try:
            await asyncio.sleep(1.2)  # idle for longer than the bound: no work is no stall
            assert engine.healthy
            watchdog = asyncio.create_task(notifier.watchdog(lambda: engine.healthy))
            runner.gate.clear()
            stream = engine.submit("def add", SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True))
            await anext(stream)  # the prefill's token; the decode step after it blocks
            assert engine.healthy
            await wait_until(lambda: not engine.healthy)
            assert engine.stalled_for > 1.0
            await asyncio.wait_for(watchdog, timeout=5)  # the petting stopped
            pings = 0
            while True:
                try:
                    listener.recv(64)
                    pings += 1
                except BlockingIOError:
                    break
            assert pings >= 1
            runner.gate.set()
            events = [e async for e in stream]
            assert events[-1].finish_reason == "length"
            assert engine.healthy
        finally:
            runner.gate.set()
            await engine.stop()
