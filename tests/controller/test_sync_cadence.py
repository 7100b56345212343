"""A host syncs with its fleet fast while a cell it steps is young, and at the steady pace after."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adaptivespec.controller.buckets import batch_bucket, context_bucket
from adaptivespec.controller.controller import Controller
from adaptivespec.controller.fleet import ArmTotals, FleetTotals, FleetView, Tally
from adaptivespec.controller.sync_cadence import SyncCadence
from adaptivespec.engine.telemetry import StepTelemetry
from adaptivespec.errors import ConfigError

CADENCE = SyncCadence(flush_seconds=2.0, refresh_seconds=5.0, young_seconds=0.05, young_steps=50)


def _record(batch: int) -> StepTelemetry:
    base = StepTelemetry("m", "h", 8, 2, 300.0, 16, 10, 18, 0.001, 0.01, 0.012, 0.0, 2, (6, 4))
    return replace(base, batch_size=batch)


def _host() -> Controller:
    controller = Controller("m", "h")
    controller.pool(Tally())
    return controller


def _stepped(controller: Controller) -> set[tuple[int, int]]:
    assert controller.tally is not None
    return controller.tally.changed_cells()


def _fleet_measured(cell: tuple[int, int], steps: int) -> FleetView:
    arm = ArmTotals()
    for _ in range(steps):
        arm.add(200.0, 0.012)
    return FleetView(FleetTotals({(*cell, "draft", 2): arm}), hosts=1, hosts_by_cell={cell: 1})


def test_a_host_syncs_fast_while_a_cell_it_steps_is_young_and_steadily_once_the_fleet_measured_it() -> None:
    controller = _host()
    assert not controller.stepping_young_cells(CADENCE.young_steps)  # nothing stepped: nothing to share
    assert CADENCE.intervals(False) == (2.0, 5.0)

    for _ in range(10):
        controller.ingest(_record(batch=8))
    cell = (context_bucket(300), batch_bucket(8))
    assert _stepped(controller) == {cell}
    assert controller.stepping_young_cells(CADENCE.young_steps)
    assert CADENCE.intervals(True) == (0.05, 0.05)

    controller.fold(_fleet_measured(cell, steps=40))  # 10 here + 40 elsewhere = young_steps
    assert controller.cells[cell].evidence.steps == 50
    assert not controller.stepping_young_cells(CADENCE.young_steps)

    controller.ingest(_record(batch=40))  # a new load level: a young cell again
    assert controller.stepping_young_cells(CADENCE.young_steps)


def test_young_steps_zero_never_syncs_fast() -> None:
    controller = _host()
    controller.ingest(_record(batch=8))
    assert not controller.stepping_young_cells(0)


def test_the_fast_pace_never_exceeds_the_steady_one() -> None:
    slow_young = SyncCadence(flush_seconds=0.5, refresh_seconds=1.0, young_seconds=2.0)
    assert slow_young.intervals(True) == (0.5, 1.0)
    assert slow_young.tick_seconds == 0.5


@pytest.mark.parametrize(
    ("field", "value"),
    [("flush_seconds", 0.0), ("refresh_seconds", -1.0), ("young_seconds", 0.0), ("young_steps", -1)],
)
def test_bad_values_name_the_setting(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=field):
        SyncCadence(**{field: value})  # type: ignore[arg-type]


def test_what_is_due_follows_the_pace_of_the_cells_stepped() -> None:
    steady = CADENCE.due(False, now=10.0, last_flush=9.0, last_refresh=9.0)
    assert (steady.flush, steady.refresh, steady.learning) == (False, False, False)
    fast = CADENCE.due(True, now=10.0, last_flush=9.0, last_refresh=9.0)
    assert (fast.flush, fast.refresh, fast.learning) == (True, True, True)
    first = CADENCE.due(False, now=10.0, last_flush=None, last_refresh=None)
    assert first.flush and first.refresh  # a host that never synced syncs at once
