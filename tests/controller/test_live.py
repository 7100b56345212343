"""The controller steering a running engine: decisions and overrides apply without a restart."""

from __future__ import annotations

import asyncio

from adaptivespec.config import EngineConfig
from adaptivespec.controller.controller import Controller
from adaptivespec.controller.overrides import Override
from adaptivespec.controller.task import run_controller
from adaptivespec.engine.engine import Engine
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.telemetry import StepTelemetry
from adaptivespec.engine.tokenizer import ByteTokenizer
from adaptivespec.sim import specs
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.runner import SimRunner
from adaptivespec.sim.workload import Workload

COST = StepCostModel(specs.hardware("h100-sxm"), specs.model("llama-3.1-8b"), specs.model("llama-3.2-1b"))


async def _engine() -> tuple[Engine, Controller, asyncio.Task[None]]:
    runner = SimRunner(COST, Workload(acceptance_mean=0.8), max_batch=8, max_spec_tokens=8, seed=0)
    controller = Controller(runner.model_key, runner.hardware_key)
    config = EngineConfig(max_batch=8, max_context=4096, max_prefill_tokens=8192)
    engine = Engine(runner, ByteTokenizer(), controller.live, config)
    task = asyncio.create_task(run_controller(controller, engine.telemetry.subscribe()))
    await engine.start()
    return engine, controller, task


async def test_override_is_visible_in_the_next_steps_telemetry() -> None:
    engine, controller, task = await _engine()
    watcher = engine.telemetry.subscribe()
    params = SamplingParams(max_tokens=400, temperature=0.0)
    try:
        requests = [asyncio.create_task(engine.generate("x" * 200, params)) for _ in range(4)]
        while controller.ingested < 20:
            await asyncio.sleep(0.001)
        controller.set_overrides((Override("pin", 7),))
        pinned_at = engine.steps
        await asyncio.gather(*requests)
    finally:
        await engine.stop()
        task.cancel()
    records: list[StepTelemetry] = [watcher.queue.get_nowait() for _ in range(watcher.queue.qsize())]
    after = records[pinned_at + 1 :]
    assert after and all(r.k == 7 for r in after)
    assert any(r.k != 7 for r in records[:pinned_at])  # the pin changed what the engine did


async def test_a_failing_controller_leaves_the_last_snapshot_in_place() -> None:
    engine, controller, task = await _engine()
    errors: list[BaseException] = []

    def broken(record: StepTelemetry) -> bool:
        raise RuntimeError("controller bug")

    task.cancel()
    controller.ingest = broken  # type: ignore[method-assign]
    failing = asyncio.create_task(
        run_controller(controller, engine.telemetry.subscribe(), on_error=errors.append)
    )
    before = controller.live.snapshot
    try:
        done = await engine.generate("x" * 100, SamplingParams(max_tokens=50, temperature=0.0))
    finally:
        await engine.stop()
    await asyncio.wait_for(failing, 1.0)
    assert done.finish_reason == "length" and len(done.token_ids) == 50
    assert errors and isinstance(errors[0], RuntimeError)
    assert controller.live.snapshot is before
