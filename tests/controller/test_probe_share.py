"""Hosts that meet a new cell together split its probes; a host whose peers never come probes the rest."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from adaptivespec.controller.arms import Arm
from adaptivespec.controller.buckets import batch_bucket
from adaptivespec.controller.controller import Controller
from adaptivespec.controller.fleet import ArmTotals, FleetTotals, FleetView, Tally
from adaptivespec.controller.learning_settings import ARMS
from adaptivespec.controller.probe_share import ALONE, ProbeShare
from adaptivespec.errors import ConfigError
from adaptivespec.sim import specs
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.loop import PhaseResult, SimLoop
from adaptivespec.sim.workload import Phase, Workload
from adaptivespec.store.fleet import FleetKey, FleetRepository
from adaptivespec.store.repository import Store

COST = StepCostModel(specs.hardware("h100-sxm"), specs.model("llama-3.1-8b"), specs.model("llama-3.2-1b"))
MODEL, HARDWARE = "llama-3.1-8b+llama-3.2-1b:bf16", "sim:h100-sxm"
BATCH = 2


def test_the_shares_of_the_live_hosts_cover_every_arm_once() -> None:
    for hosts in (1, 2, 3, 4, 8, 11):
        shares = [ProbeShare(rank, hosts).probes(ARMS, ARMS, everyone=False) for rank in range(hosts)]
        assert sorted(k for share in shares for k in share) == list(ARMS)
    assert ProbeShare(1, 4).probes(ARMS, ARMS, everyone=False) == [2, 3]
    assert ProbeShare(1, 4).probes(ARMS, [0, 3, 8], everyone=False) == [3]
    assert ProbeShare(1, 4).probes(ARMS, [0, 3, 8], everyone=True) == [3, 8, 0]  # its share first


def test_ranks_move_round_from_cell_to_cell() -> None:
    assert [ProbeShare(3, 4).turned(turn).rank for turn in range(5)] == [3, 0, 1, 2, 3]
    assert ALONE.turned(7) == ALONE


def test_a_rank_outside_the_hosts_is_refused() -> None:
    with pytest.raises(ConfigError, match="rank must be in"):
        ProbeShare(rank=4, hosts=4)


def _steps(
    controllers: list[Controller], steps: int, sync: int, repository: FleetRepository | None
) -> list[list[int]]:
    """Every host steps the same batch-2 load in lockstep, flushing and refreshing every
    `sync` steps (never without a repository: a lone host); returns the K of each host's steps."""
    keys = [FleetKey(f"host-{h}", MODEL, HARDWARE) for h in range(len(controllers))]
    ks: list[list[int]] = [[] for _ in controllers]
    loops = []
    for h, controller in enumerate(controllers):
        controller.pool(Tally())
        loop = SimLoop(COST, Workload(load=(Phase(BATCH, steps),)), h, MODEL, HARDWARE)

        def on_step(record, controller=controller, seen=ks[h]):  # type: ignore[no-untyped-def]
            seen.append(record.k)
            controller.ingest(record)

        results: list[PhaseResult] = []
        loops.append(loop.stepping(controller.live, results, on_step))
    if repository is not None:  # hosts started together: each says it is live, then reads the others
        for controller, key in zip(controllers, keys, strict=True):
            _flush(controller, key, repository)
        for controller, key in zip(controllers, keys, strict=True):
            controller.fold(repository.pooled(key))
    for step in range(steps):
        for stepper in loops:
            next(stepper)
        if repository is not None and (step + 1) % sync == 0:
            for controller, key in zip(controllers, keys, strict=True):
                _sync(controller, key, repository)
    return ks


def _sync(controller: Controller, key: FleetKey, repository: FleetRepository) -> None:
    _flush(controller, key, repository)
    controller.fold(repository.pooled(key))


def _flush(controller: Controller, key: FleetKey, repository: FleetRepository) -> None:
    tally = controller.tally
    assert tally is not None
    repository.flush(key, tally.take_changes(), tally.all_steps, datetime.now(UTC))


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[FleetRepository]:
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    yield FleetRepository(store.engine)
    store.close()


def test_hosts_meeting_a_new_cell_together_probe_different_arms(repository: FleetRepository) -> None:
    hosts = [Controller(MODEL, HARDWARE) for _ in range(4)]
    ks = _steps(hosts, steps=40, sync=4, repository=repository)
    start = hosts[0].start_arm.k
    cell = _busiest(hosts[0])
    shares = [
        _ks(host.share.turned(sum(cell)).probes(host.arms, host.arms, everyone=False)) for host in hosts
    ]
    assert sorted(host.share.rank for host in hosts) == [0, 1, 2, 3]
    for h, seen in enumerate(ks):  # before the first refresh that shows the others' probes
        assert set(seen[:4]) <= {start, *shares[h]}, (h, seen[:4], shares[h])
    alone = _steps([Controller(MODEL, HARDWARE)], steps=40, sync=4, repository=None)[0]
    probes = [len(set(seen[:10]) - {start}) for seen in ks]
    assert max(probes) < len(set(alone[:10]) - {start}), (probes, alone[:10])
    measured = _ks(hosts[0].cells[cell].evidence.times())
    assert measured >= set(shares[1]) & _ks(hosts[0].cells[cell].candidates)  # its peers' share reached it


def _busiest(controller: Controller) -> tuple[int, int]:
    return max(controller.cells, key=lambda key: controller.cells[key].evidence.samples)


def _first_probe_outside_its_share(peers_in_cell: int) -> tuple[int, set[int]]:
    """A host of four steps a new cell alone, refreshing every 5 steps a view in which
    `peers_in_cell` other hosts have stepped the cell (at the start K) and nobody probed;
    returns the step of its first probe outside its share, and the arms it measured there."""
    controller = Controller(MODEL, HARDWARE)
    cells = [(ctx, batch_bucket(BATCH)) for ctx in (0, 1)]  # the load's contexts straddle 512
    start = ArmTotals()
    start.add(100.0, 0.01)
    first_arm = controller.start_arm
    evidence = FleetTotals({(*cell, first_arm.method, first_arm.k): start for cell in cells})
    view = FleetView(
        evidence, hosts=3, hosts_by_cell=dict.fromkeys(cells, peers_in_cell), share=ProbeShare(0, 4)
    )
    controller.fold(view)
    seen: list[int] = []

    def on_step(record):  # type: ignore[no-untyped-def]
        seen.append(record.k)
        controller.ingest(record)
        if len(seen) % 5 == 0:
            controller.fold(view)

    SimLoop(COST, Workload(load=(Phase(BATCH, 60),)), 0, MODEL, HARDWARE).run(
        controller.live, on_step=on_step
    )
    key = _busiest(controller)
    share = controller.share.turned(sum(key))
    mine = _ks(share.probes(controller.arms, controller.arms, everyone=False)) | {first_arm.k}
    first = next(i for i, k in enumerate(seen) if k not in mine)
    return first, _ks(controller.cells[key].evidence.times()) - mine


def _ks(arms: Iterable[Arm]) -> set[int]:
    return {a.k for a in arms}


def test_a_host_alone_in_a_cell_waits_one_refresh_for_the_rest_and_a_host_with_peers_two() -> None:
    alone, measured_alone = _first_probe_outside_its_share(peers_in_cell=0)
    crowded, measured_crowded = _first_probe_outside_its_share(peers_in_cell=3)
    assert 3 <= alone < crowded, (alone, crowded)  # it held what it measured through the refreshes
    assert measured_alone and measured_crowded  # and then measured others' arms itself
