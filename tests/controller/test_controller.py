from __future__ import annotations

import gc
import math
import tracemalloc
from dataclasses import replace

import pytest

from adaptivespec.bench.oracle import baseline_policies, oracle_from_sweep, ratio_to_oracle, summarise
from adaptivespec.controller.arms import arm
from adaptivespec.controller.buckets import batch_bucket, context_bucket
from adaptivespec.controller.controller import Controller, ControllerConfig
from adaptivespec.controller.learning_settings import LearningSettings
from adaptivespec.controller.overrides import Override
from adaptivespec.engine.runner import ShadowScore
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.engine.telemetry import StepTelemetry
from adaptivespec.errors import ConfigError
from adaptivespec.sim import specs
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.loop import SimLoop
from adaptivespec.sim.workload import Phase, Workload

COST = StepCostModel(specs.hardware("a100-80gb"), specs.model("llama-3.1-8b"), specs.model("llama-3.2-1b"))
LOAD = (Phase(1, 2000), Phase(8, 2000), Phase(64, 2000), Phase(256, 2000))


def _record(**changes: object) -> StepTelemetry:
    base = StepTelemetry("m", "h", 8, 2, 300.0, 16, 10, 18, 0.001, 0.01, 0.012, 0.0, 2, (6, 4))
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
        {"width": 3},  # more than the K chosen
        {"kept_at_least": (6,)},  # one count per verified position
        {"kept_at_least": (4, 6)},  # more rows kept the second draft than the first
        {"kept_at_least": (9, 1)},  # more rows than the batch
        {"kept_at_least": (5, 4)},  # does not add up to `accepted`
        {"catch_up_seconds": math.nan},
        {"catch_up_seconds": -0.001},
        {"catch_up_seconds": 0.012},  # all of the step, or more
        {"catch_up_tokens": -1},
        {"shadow": (ShadowScore("ngram", 2, 4, (1, 2)),)},  # more rows kept the second draft
        {"shadow": (ShadowScore("ngram", 2, 4, (5, 1)),)},  # more rows than were scored
        {"shadow": (ShadowScore("ngram", 3, 4, (1, 1)),)},  # one count per drafted position
        {"shadow": (ShadowScore("ngram", 2, 0, (0, 0)),)},  # no row scored
        {"verified_width": 2.5},  # rows verified more drafts on average than the widest did
        {"verified_width": -0.5},
        {"verified_width": math.nan},
    ],
)
def test_bad_telemetry_is_rejected_and_counted(bad: dict[str, object]) -> None:
    controller = Controller("m", "h")
    before = controller.live.snapshot
    assert not controller.ingest(_record(**bad))
    assert controller.rejected == 1 and controller.ingested == 0
    assert controller.live.snapshot is before


def test_a_step_whose_rows_verified_their_own_drafts_is_taken() -> None:
    """On a runtime that verifies each row's own drafts the mean width is below the widest."""
    controller = Controller("m", "h")
    assert controller.ingest(_record(verified_width=1.25))
    assert controller.ingested == 1 and controller.rejected == 0


def test_overrides_apply_to_the_next_lookup() -> None:
    controller = Controller("m", "h")
    for _ in range(20):
        controller.ingest(_record())
    ctx, batch = context_bucket(300), batch_bucket(8)
    elsewhere = controller.live.k_for(1, 300)
    controller.set_overrides((Override("pin", 5, ctx, batch),))
    assert controller.live.k_for(8, 300) == 5
    assert controller.live.k_for(1, 300) == elsewhere  # a pin applies to its own cell only
    controller.set_overrides((Override("force_off"),))
    assert all(a.k == 0 for row in controller.live.snapshot.table for a in row)
    controller.set_overrides((Override("force_off"), Override("pin", 3, ctx, batch)))
    assert controller.live.k_for(8, 300) == 3  # the more specific override wins
    controller.set_overrides((Override("force_on"),))
    assert all(a.k > 0 for row in controller.live.snapshot.table for a in row)
    controller.set_overrides(())
    assert controller.live.k_for(8, 300) == controller.cells[(ctx, batch)].running.k


def test_freeze_stops_learning_and_reset_forgets() -> None:
    controller = Controller("m", "h")
    for _ in range(10):
        controller.ingest(_record())
    controller.freeze(True)
    table = controller.live.snapshot.table
    for _ in range(50):
        k = controller.live.k_for(8, 300)
        controller.ingest(_record(k=k, width=0, kept_at_least=(), drafted=0, accepted=0, emitted=8))
    assert controller.rejected == 0  # the records were taken, and still nothing was learned
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


def test_a_published_snapshot_never_changes_under_its_reader() -> None:
    """The engine reads one snapshot per step without a lock: publishing must replace it, never edit it."""
    controller = Controller("m", "h")
    held = controller.live.snapshot
    before = (held.version, held.table)
    loop = SimLoop(COST, Workload(load=(Phase(8, 3000),)), 3, "m", "h")
    loop.run(controller.live, on_step=controller.ingest)
    assert controller.live.snapshot is not held and controller.live.snapshot.version > 0
    assert (held.version, held.table) == before
    with pytest.raises(AttributeError):
        held.version = 99  # type: ignore[misc]


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
                controller.log.take()  # what the store's periodic flush does
        controller.log.take()
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    after_10k = feed(10_000)
    after_60k = feed(50_000)
    tracemalloc.stop()
    assert after_60k <= after_10k * 1.02 + 4096


def test_a_step_that_ran_plain_is_credited_to_the_k_that_was_chosen() -> None:
    """Prompt lookup that finds no match runs a plain step; choosing K = 8 still cost that step."""
    controller = Controller("m", "h")
    plain = _record(k=8, width=0, drafted=0, accepted=0, emitted=8, kept_at_least=())
    assert controller.ingest(plain)
    cell = controller.cells[(context_bucket(300), batch_bucket(8))]
    assert set(cell.evidence.seconds) == {arm("draft", 8)}
    drafts = controller.acceptance["draft"]
    assert (
        drafts.expected_tokens(context_bucket(300), 1) < drafts.rates(context_bucket(300)).first + 1.0 + 1e-9
    )


def test_arms_stop_at_the_runner_limit() -> None:
    """An arm the runner cannot run would be clamped, never credited, and stay unexplored forever."""
    settings = LearningSettings().capped(3)
    assert settings.arms == (0, 1, 2, 3)
    controller = Controller("m", "h", ControllerConfig(settings=settings))
    loop = SimLoop(COST, Workload(acceptance_mean=0.85, load=LOAD[:2]), 3, "m", "h")
    loop.run(controller.live, on_step=controller.ingest)
    assert {a.k for row in controller.live.snapshot.table for a in row} <= set(settings.arms)
    for cell in controller.cells.values():
        assert {a.k for a in cell.evidence.seconds} <= set(settings.arms)
        assert {a.k for a in cell.candidates} <= set(settings.arms)
    assert controller.live.k_for(1, 300) == 3  # high acceptance at batch 1: the largest K it may run


@pytest.mark.parametrize("arms", [(), (1, 2), (0, 2, 2), (0, 3, 1)])
def test_arms_must_start_at_zero_and_increase(arms: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="arms"):
        LearningSettings(arms=arms)
