from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from adaptivespec.config import EngineConfig
from adaptivespec.engine.engine import Engine
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.engine.tokenizer import ByteTokenizer
from adaptivespec.errors import ConfigError
from adaptivespec.sim import specs
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.loop import AcceptanceModel, SimLoop
from adaptivespec.sim.runner import SimRunner
from adaptivespec.sim.workload import DriftPoint, Phase, Workload

COST = StepCostModel(specs.hardware("h100-sxm"), specs.model("llama-3.1-8b"), specs.model("llama-3.2-1b"))
LOAD = (Phase(1, 300), Phase(16, 300), Phase(128, 300))


def _loop(seed: int, workload: Workload | None = None) -> SimLoop:
    return SimLoop(COST, workload or Workload(acceptance_mean=0.7, load=LOAD), seed, "m", "h")


def test_same_seed_same_result_other_seed_differs() -> None:
    runs = [_loop(seed).run(FixedK(3)) for seed in (5, 5, 6)]
    summary = [[(p.tokens, p.seconds) for p in run] for run in runs]
    assert summary[0] == summary[1]
    assert summary[0] != summary[2]


def test_each_host_serves_its_own_requests_and_host_zero_the_loops() -> None:
    loop = _loop(5)
    runs = [loop.run(FixedK(3)), loop.for_host(0).run(FixedK(3)), loop.for_host(1).run(FixedK(3))]
    traces = [[p.goodput_trace for p in run] for run in runs]
    assert traces[0] == traces[1]  # host 0: the draws of a loop without hosts
    assert all(ours != theirs for ours, theirs in zip(traces[0], traces[2], strict=True))
    assert loop.for_host(1).run(FixedK(3))[0].goodput_trace == traces[2][0]  # each host reproduces


def test_acceptance_follows_the_geometric_law() -> None:
    rng = np.random.default_rng(0)
    alpha = np.full(200_000, 0.7)
    accepted = AcceptanceModel.accepted(alpha, rng.random(alpha.size), 4)
    expected = (1 - 0.7**5) / (1 - 0.7) - 1  # E(a, K) minus the bonus token
    assert accepted.mean() == pytest.approx(expected, abs=0.01)
    assert accepted.max() == 4


def test_drift_changes_acceptance_mid_run() -> None:
    workload = Workload(acceptance_mean=0.8, load=(Phase(32, 2000),), drift=(DriftPoint(1000, 0.4),))
    records = []
    _loop(1, workload).run(FixedK(4), on_step=records.append)
    before = sum(r.accepted for r in records[:1000]) / sum(r.drafted for r in records[:1000])
    after = sum(r.accepted for r in records[1000:]) / sum(r.drafted for r in records[1000:])
    assert before > 0.55 and after < 0.3  # per-draft rates, i.e. (E - 1) / K


def test_workload_file_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    path.write_text(
        json.dumps(
            {
                "acceptance_mean": 0.8,
                "drift": [{"at_step": 500, "acceptance_mean": 0.4}],
                "prompt_len": {"min": 100, "max": 200},
                "output_len": {"min": 50, "max": 60},
                "load": [{"concurrency": 8, "steps": 1000}],
            }
        )
    )
    workload = Workload.from_file(path)
    assert workload.drift == (DriftPoint(500, 0.4),) and workload.load == (Phase(8, 1000),)
    path.write_text(json.dumps({"acceptance": 0.8}))
    with pytest.raises(ConfigError, match="unknown keys.*valid keys: acceptance_mean"):
        Workload.from_file(path)
    path.write_text(json.dumps({"acceptance_mean": 1.5}))
    with pytest.raises(ConfigError, match=r"acceptance_mean must be in \[0, 1\]"):
        Workload.from_file(path)


def test_default_load_sweeps_batch_sizes_to_256() -> None:
    sizes = [phase.concurrency for phase in Workload().load]
    assert sizes[0] == 1 and sizes[-1] == 256 and sizes == sorted(sizes)


async def test_engine_runs_on_the_sim_runner() -> None:
    runner = SimRunner(COST, Workload(acceptance_mean=0.9), max_batch=8, max_spec_tokens=8, seed=0)
    config = EngineConfig(max_batch=8, max_context=4096, max_prefill_tokens=8192)
    engine = Engine(runner, ByteTokenizer(), FixedK(4), config)
    subscription = engine.telemetry.subscribe()
    await engine.start()
    try:
        params = SamplingParams(max_tokens=100, temperature=0.0)
        done = await asyncio.gather(*(engine.generate("x" * 300, params) for _ in range(8)))
    finally:
        await engine.stop()
    assert all(len(c.token_ids) == 100 and c.finish_reason == "length" for c in done)
    records = [subscription.queue.get_nowait() for _ in range(subscription.queue.qsize())]
    assert records[0].step_seconds == pytest.approx(COST.step(8, 4, 8 * 301).step_seconds)
    assert sum(c.stats.accepted for c in done) / sum(c.stats.drafted for c in done) > 0.6
    assert runner.clock == pytest.approx(
        sum(r.step_seconds for r in records) + COST.prefill_seconds(8 * 300, 8), rel=1e-9
    )
