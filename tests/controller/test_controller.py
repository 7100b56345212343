from __future__ import annotations

import gc
import math
import threading
import tracemalloc
from dataclasses import replace

import pytest

from adaptivespec.bench.control import baseline_policies, oracle_from_sweep, ratio_to_oracle, summarise
from adaptivespec.controller.controller import Controller
from adaptivespec.controller.keys import batch_bucket, context_bucket
from adaptivespec.controller.overrides import Override
from adaptivespec.controller.policy import FixedK
from adaptivespec.controller.snapshot import PolicySnapshot
from adaptivespec.engine.telemetry import StepTelemetry
from adaptivespec.errors import ConfigError
from adaptivespec.sim import specs
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.loop import SimLoop
from adaptivespec.sim.workload import Phase, Workload

COST = StepCostModel(specs.hardware("a100-80gb"), specs.model("llama-3.1-8b"), specs.model("llama-3.2-1b"))
LOAD = (Phase(1, 2000), Phase(8, 2000), Phase(64, 2000), Phase(256, 2000))


def _record(**changes: object) -> StepTelemetry:
    base = StepTelemetry("m", "h", 8, 2, 300.0, 16, 10, 18, 0.001, 0.01, 0.012, 0.0)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_learns_close_to_the_oracle_and_beats_every_static_baseline() -> None:
    loop = SimLoop(COST, Workload(acceptance_mean=0.6, load=LOAD), 11, "m", "h")
    oracle = oracle_from_sweep({k: loop.run(FixedK(k)) for k in (0, 1, 2, 3, 4, 5, 6, 8)})
    controller = Controller("m", "h")
    learned = ratio_to_oracle(summarise(loop.run(controller.live, on_step=controller.ingest)), oracle)
    assert learned >= 0.95
    for name, policy in baseline_policies().items():
        assert learned >= ratio_to_oracle(summarise(loop.run(policy)), oracle) - 1e-9, name


@pytest.mark.parametrize(
    "bad",
    [
        {"step_seconds": math.nan},
        {"step_seconds": math.inf},
        {"step_seconds": -0.01},
        {"draft_seconds": -1.0},
        {"accepted": 20},  # more than drafted
        {"batch_size": 0},
        {"mean_context_len": math.nan},
    ],
)
def test_bad_telemetry_is_rejected_and_counted(bad: dict[str, object]) -> None:
    controller = Controller("m", "h")
    before = controller.live.snapshot
    assert not controller.ingest(_record(**bad))
    assert controller.rejected == 1 and controller.ingested == 0
    assert controller.live.snapshot is before


def test_overrides_apply_to_the_next_lookup() -> None:
    controller = Controller("m", "h")
    for _ in range(20):
        controller.ingest(_record())
    ctx, batch = context_bucket(300), batch_bucket(8)
    controller.set_overrides((Override("pin", 5, ctx, batch),))
    assert controller.live.k_for(8, 300) == 5
    assert controller.live.k_for(1, 300) != 5 or controller.live.k_for(1, 300) == controller.cells.get(
        (ctx, 0), None
    )
    controller.set_overrides((Override("force_off"),))
    assert all(k == 0 for row in controller.live.snapshot.table for k in row)
    controller.set_overrides((Override("force_off"), Override("pin", 3, ctx, batch)))
    assert controller.live.k_for(8, 300) == 3  # the more specific override wins
    controller.set_overrides((Override("force_on"),))
    assert all(k > 0 for row in controller.live.snapshot.table for k in row)
    controller.set_overrides(())
    assert controller.live.k_for(8, 300) == controller.cells[(ctx, batch)].current


def test_freeze_stops_learning_and_reset_forgets() -> None:
    controller = Controller("m", "h")
    for _ in range(10):
        controller.ingest(_record())
    controller.freeze(True)
    table = controller.live.snapshot.table
    for _ in range(50):
        controller.ingest(_record(k=controller.live.k_for(8, 300), emitted=8, accepted=0))
    assert controller.live.snapshot.table == table
    controller.freeze(False)
    controller.reset()
    assert not controller.cells and controller.live.snapshot.version == controller.version


@pytest.mark.parametrize(
    "bad", [{"kind": "pin"}, {"kind": "force_off", "k": 2}, {"kind": "pin", "k": 2, "ctx_bucket": 99}]
)
def test_bad_overrides_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        Override(**bad)  # type: ignore[arg-type]


def test_readers_never_see_a_half_built_snapshot() -> None:
    controller = Controller("m", "h")
    seen: list[PolicySnapshot] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            snapshot = controller.live.snapshot
            snapshot.k_for(8, 300)
            seen.append(snapshot)

    reader = threading.Thread(target=read)
    reader.start()
    loop = SimLoop(COST, Workload(load=(Phase(8, 3000),)), 3, "m", "h")
    loop.run(controller.live, on_step=controller.ingest)
    stop.set()
    reader.join()
    assert seen
    shapes = {(len(s.table), len(s.table[0])) for s in seen}
    assert len(shapes) == 1
    versions = [s.version for s in seen]
    assert versions == sorted(versions)  # published in order, never rolled back


def test_memory_is_bounded_by_cells_not_steps() -> None:
    controller = Controller("m", "h")
    records = [
        _record(
            batch_size=b,
            k=k,
            mean_context_len=c,
            drafted=k * b,
            accepted=min(k * b, b),
            emitted=b + min(k * b, b),
        )
        for b in (1, 8, 64)
        for k in (0, 2, 4)
        for c in (300, 900)
    ]

    def feed(count: int) -> int:
        for i in range(count):
            controller.ingest(records[i % len(records)])
            if i % 1000 == 0:
                controller.history.clear()  # what the store's periodic flush does
        controller.history.clear()
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    after_10k = feed(10_000)
    after_60k = feed(50_000)
    tracemalloc.stop()
    assert after_60k <= after_10k * 1.02 + 4096
