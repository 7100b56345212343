"""Fleet pooling against a real PostgreSQL server: migrations, concurrent flushes, exact counts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from adaptivespec.cli import main
from adaptivespec.controller.buckets import BATCH_BUCKETS, CONTEXT_BUCKETS
from adaptivespec.controller.controller import Controller
from adaptivespec.controller.fleet import FleetTotals, Tally
from adaptivespec.controller.overrides import Override
from adaptivespec.controller.probe_share import ProbeShare
from adaptivespec.sim import specs
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.loop import SimLoop
from adaptivespec.sim.workload import Phase, Workload
from adaptivespec.store.db import current_revision, make_engine, upgrade
from adaptivespec.store.fleet import FleetKey, FleetRepository
from adaptivespec.store.models import Base
from adaptivespec.store.repository import Store

COST = StepCostModel(specs.hardware("h100-sxm"), specs.model("llama-3.1-8b"), specs.model("llama-3.2-1b"))
MODEL, HARDWARE = "llama-3.1-8b+llama-3.2-1b:bf16", "sim:h100-sxm"
FLEET_TABLES = {"fleet_hosts", "fleet_arm_totals", "fleet_acceptance_totals"}


@pytest.fixture
def repository(postgres_url: str) -> Iterator[FleetRepository]:
    """The fleet tables of a fresh, migrated PostgreSQL database."""
    store = Store(postgres_url)
    yield FleetRepository(store.engine)
    store.close()


def _host(repository: FleetRepository, host_id: str, hardware: str = HARDWARE) -> tuple[Controller, FleetKey]:
    controller = Controller(MODEL, hardware)
    key = FleetKey(host_id, MODEL, hardware)
    controller.pool(Tally(repository.own(key)))
    return controller, key


def _flush(repository: FleetRepository, controller: Controller, key: FleetKey) -> int:
    tally = controller.tally
    assert tally is not None
    return repository.flush(key, tally.take_changes(), tally.all_steps, datetime.now(UTC))


def _run(controller: Controller, phases: tuple[Phase, ...], seed: int = 0) -> None:
    SimLoop(COST, Workload(load=phases), seed, MODEL, HARDWARE).run(
        controller.live, on_step=controller.ingest
    )


def _pooled_steps(repository: FleetRepository) -> int:
    """Every host's steps, summed by the database: the pooled view as an outsider sees it."""
    return repository.pooled(FleetKey("nobody", MODEL, HARDWARE)).totals.steps


def test_migrations_run_from_empty_on_postgresql(postgres_url: str) -> None:
    engine = make_engine(postgres_url)
    assert upgrade(engine) == "0005"
    assert FLEET_TABLES <= set(inspect(engine).get_table_names())
    assert upgrade(engine) == "0005"  # a second start finds it current
    engine.dispose()


def test_migrations_upgrade_the_previous_schema_on_postgresql(postgres_url: str) -> None:
    engine = make_engine(postgres_url)
    upgrade(engine, "0003")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO decisions (model_key, hardware_key, ctx_bucket, batch_bucket, k, samples, "
                "confidence, policy_version, reward_scale) VALUES ('m', 'h', 0, 2, 3, 10, 0.5, 7, 1.0)"
            )
        )
    assert upgrade(engine) == "0005"
    with engine.connect() as connection:
        assert connection.execute(text("SELECT k, samples FROM decisions")).one() == (3, 10)
    engine.dispose()


def test_hosts_starting_at_once_migrate_one_at_a_time(postgres_url: str) -> None:
    errors: list[BaseException] = []

    def start() -> None:
        try:
            Store(postgres_url).close()
        except BaseException as exc:  # collected, so the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    engine = make_engine(postgres_url)
    assert current_revision(engine) == "0005"
    engine.dispose()


def test_four_hosts_flushing_at_once_for_30_seconds_count_every_step_exactly(
    repository: FleetRepository,
) -> None:
    hosts = [_host(repository, f"host-{i}") for i in range(4)]
    errors: list[BaseException] = []
    deadline = time.monotonic() + 30.0
    phases = (Phase(1, 40), Phase(8, 40), Phase(64, 40))

    def serve(index: int) -> None:
        controller, key = hosts[index]
        seed = 0
        try:
            while time.monotonic() < deadline:
                _run(controller, phases, seed=index * 1000 + seed)
                _flush(repository, controller, key)
                repository.pooled(key)
                seed += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=serve, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    steps = [controller.ingested for controller, _ in hosts]
    assert min(steps) > 0
    assert _pooled_steps(repository) == sum(steps)
    assert {h.host_id: h.steps for h in repository.hosts()} == {key.host_id: c.ingested for c, key in hosts}
    _assert_sums_equal_the_host_rows(repository)


def _assert_sums_equal_the_host_rows(repository: FleetRepository) -> None:
    """The pooled sums a refresh reads are exactly the GROUP BY of every host's rows."""
    grouped = text(
        "SELECT ctx_bucket, batch_bucket, k, sum(steps), count(*), sum(seconds_sum) FROM fleet_arm_totals "
        "GROUP BY ctx_bucket, batch_bucket, k"
    )
    pooled = text("SELECT ctx_bucket, batch_bucket, k, steps, hosts, seconds_sum FROM fleet_pooled_arms")
    positions = "SELECT ctx_bucket, position, {} FROM {} "
    with repository.engine.connect() as connection:
        by_rows = {tuple(r[:3]): r[3:] for r in connection.execute(grouped)}
        by_sums = {tuple(r[:3]): r[3:] for r in connection.execute(pooled)}
        kept_rows = set(
            connection.execute(
                text(
                    positions.format("sum(kept), sum(at_risk)", "fleet_acceptance_totals")
                    + "GROUP BY ctx_bucket, position"
                )
            )
        )
        kept_sums = set(
            connection.execute(text(positions.format("kept, at_risk", "fleet_pooled_acceptance")))
        )
    assert by_rows.keys() == by_sums.keys() and by_rows
    for cell, (steps, hosts, seconds) in by_rows.items():
        assert by_sums[cell][:2] == (steps, hosts)
        assert by_sums[cell][2] == pytest.approx(seconds, rel=1e-9)
    assert {tuple(map(int, r)) for r in kept_rows} == {tuple(map(int, r)) for r in kept_sums}


def test_a_retried_flush_counts_nothing_twice(repository: FleetRepository) -> None:
    controller, key = _host(repository, "a")
    _run(controller, (Phase(4, 50),))
    tally = controller.tally
    assert tally is not None
    changes = tally.take_changes()
    now = datetime.now(UTC)
    repository.flush(key, changes, tally.all_steps, now)
    # The client timed out after the commit: the rows go back and the retry writes them again.
    tally.give_back(changes)
    _flush(repository, controller, key)
    _flush(repository, controller, key)  # nothing changed: an empty flush
    assert _pooled_steps(repository) == controller.ingested == 50
    _assert_sums_equal_the_host_rows(repository)


def test_a_restarted_host_continues_its_totals(repository: FleetRepository) -> None:
    first, key = _host(repository, "a")
    _run(first, (Phase(4, 30),))
    _flush(repository, first, key)
    again, _ = _host(repository, "a")  # the same host id, after a restart
    _run(again, (Phase(4, 20),), seed=1)
    _flush(repository, again, key)
    assert _pooled_steps(repository) == 50
    assert repository.hosts()[0].steps == 50


def test_a_new_host_starts_from_what_the_fleet_learned_and_other_hardware_does_not(
    repository: FleetRepository,
) -> None:
    veteran, key = _host(repository, "veteran")
    _run(veteran, (Phase(1, 300), Phase(64, 300), Phase(256, 300)))
    _flush(repository, veteran, key)
    learned = {(d.ctx_bucket, d.batch_bucket): d.k for d in veteran.decisions()}
    measured = {(d.ctx_bucket, d.batch_bucket): d.samples for d in veteran.decisions()}
    assert len(set(learned.values())) > 1  # speculation on at small batch, off at large

    newcomer, new_key = _host(repository, "newcomer")
    view = repository.pooled(new_key)
    assert view.hosts == 1 and view.totals.steps == 900
    newcomer.fold(view)
    assert newcomer.ingested == 0
    pooled = {(d.ctx_bucket, d.batch_bucket): d for d in newcomer.decisions()}
    assert pooled.keys() == learned.keys()
    # The veteran's K, or one the veteran itself prices as tied with it (within its hysteresis):
    # the fleet keeps totals, the veteran a robust window of its latest steps, and two arms
    # within a fraction of a percent may fall either way between the two.
    tied = 1 + veteran.config.settings.hysteresis
    for cell, d in pooled.items():
        prices = {a.k: p for a, p in veteran.cells[cell].predictions(veteran.acceptance_of(cell[0])).items()}
        assert prices[d.k] * tied >= prices[learned[cell]], (cell, d.k, learned[cell])
    assert sum(d.k == learned[cell] for cell, d in pooled.items()) >= len(learned) - 1
    assert all(d.hosts == 1 and d.samples == 0 for d in pooled.values())
    assert {cell: d.fleet_samples for cell, d in pooled.items()} == measured
    for (ctx, batch), d in pooled.items():  # published before its first step
        assert newcomer.live.k_for(BATCH_BUCKETS[batch].hi, CONTEXT_BUCKETS[ctx].lo) == d.k

    _, other_key = _host(repository, "l4-host", hardware="sim:l4")
    other_view = repository.pooled(other_key)
    assert other_view.hosts == 0 and other_view.totals.steps == 0


def test_the_view_ranks_each_host_among_the_hosts_that_flushed_lately(repository: FleetRepository) -> None:
    keys = {h: FleetKey(h, MODEL, HARDWARE) for h in ("gpu-b", "gpu-a", "gpu-c")}
    for key in keys.values():
        repository.flush(key, FleetTotals(), 0, datetime.now(UTC))
    repository.flush(FleetKey("l4-host", MODEL, "sim:l4"), FleetTotals(), 0, datetime.now(UTC))
    shares = {h: repository.pooled(key).share for h, key in keys.items()}
    assert shares == {
        "gpu-a": ProbeShare(0, 3),
        "gpu-b": ProbeShare(1, 3),
        "gpu-c": ProbeShare(2, 3),
    }  # the same order on every host, and other hardware is not counted
    time.sleep(1.5)
    for host in ("gpu-a", "gpu-c"):  # gpu-b went quiet
        repository.flush(keys[host], FleetTotals(), 0, datetime.now(UTC))
    assert repository.pooled(keys["gpu-a"], live_seconds=1.0).share == ProbeShare(0, 2)
    assert repository.pooled(keys["gpu-c"], live_seconds=1.0).share == ProbeShare(1, 2)


def test_refreshing_twice_does_not_double_the_evidence(repository: FleetRepository) -> None:
    veteran, key = _host(repository, "veteran")
    _run(veteran, (Phase(8, 200),))
    _flush(repository, veteran, key)
    newcomer, new_key = _host(repository, "newcomer")
    _run(newcomer, (Phase(8, 20),), seed=3)
    for _ in range(3):
        newcomer.fold(repository.pooled(new_key))
    cells = newcomer.cells.values()
    assert sum(s.count for cell in cells for s in cell.evidence.fleet.values()) == 200  # the veteran's, once
    assert sum(cell.evidence.samples for cell in cells) == 20  # its own, apart


def test_fleet_status_lists_hosts_and_their_steps(
    repository: FleetRepository, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for index in range(2):
        controller, key = _host(repository, f"gpu-{index}")
        _run(controller, (Phase(2, 10 * (index + 1)),), seed=index)
        _flush(repository, controller, key)
    assert main(["fleet", "status", "--db", postgres_url]) == 0
    out = capsys.readouterr().out
    assert "gpu-0" in out and "gpu-1" in out
    assert f"{MODEL} on {HARDWARE}: 2 hosts, 30 steps" in out


def test_a_host_that_changed_no_override_does_not_erase_another_hosts(postgres_url: str) -> None:
    first, second = Store(postgres_url), Store(postgres_url)
    pinning, other = Controller(MODEL, HARDWARE), Controller(MODEL, HARDWARE)
    pinning.set_overrides((Override("pin", 2, 0, 3),))
    first.save(pinning.export_state())
    _run(other, (Phase(4, 20),))
    second.save(other.export_state())  # its flush carries no override change
    saved = Store(postgres_url).load(MODEL, HARDWARE)
    assert saved is not None and saved.overrides == (Override("pin", 2, 0, 3),)
    first.close()
    second.close()


def test_a_flush_taken_before_a_hosts_refresh_never_writes_back_what_another_host_changed(
    postgres_url: str,
) -> None:
    """Host b's flush took its state (not frozen, no overrides) just before its refresh read a's
    freeze and pin, and commits after: what a set stays. What b's own operator changes, b writes."""
    stores = Store(postgres_url), Store(postgres_url)
    a, b = Controller(MODEL, HARDWARE), Controller(MODEL, HARDWARE)
    for controller, store in zip((a, b), stores, strict=True):
        _run(controller, (Phase(4, 20),))
        store.save(controller.take_unsaved().state)
    in_flight = b.take_unsaved()  # b's flush, about to commit
    a.freeze(True)
    a.set_overrides((Override("pin", 2, 0, 3),))
    stores[0].save(a.take_unsaved().state)
    shared = stores[1].operator_state(MODEL, HARDWARE)  # b's refresh, while its flush is in flight
    assert shared == (True, (Override("pin", 2, 0, 3),))
    b.adopt_controls(*shared, reason="fleet")
    stores[1].save(in_flight.state)
    assert stores[1].operator_state(MODEL, HARDWARE) == shared
    stores[1].save(b.take_unsaved().state)  # b's next flush: adopted, so nothing of b's to write
    assert stores[1].operator_state(MODEL, HARDWARE) == shared
    b.freeze(False)  # an operator on b
    stores[1].save(b.take_unsaved().state)
    assert stores[0].operator_state(MODEL, HARDWARE) == (False, (Override("pin", 2, 0, 3),))
    for store in stores:
        store.close()


def test_the_migrations_build_the_schema_the_models_declare(postgres_url: str, tmp_path: Path) -> None:
    for url in (postgres_url, f"sqlite:///{tmp_path}/schema.db"):
        engine = make_engine(url)
        upgrade(engine)
        with engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        engine.dispose()
        assert differences == [], url


def test_thresholds_and_exports_read_what_the_fleet_learned(
    repository: FleetRepository, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hosts of a fleet keep their statistics in the fleet tables, not in the decision rows:
    an operator's export must read the pooled view, not say that nothing was learned."""
    phases = (Phase(1, 200), Phase(8, 200), Phase(64, 200))
    for seed, host in enumerate(("gpu-a", "gpu-b")):
        controller, key = _host(repository, host)
        _run(controller, phases, seed)
        _flush(repository, controller, key)
    assert main(["thresholds", "--db", postgres_url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["samples"] > 0 for r in rows)
    assert main(["thresholds", "--db", postgres_url, "--export", "vllm"]) == 0
    captured = capsys.readouterr()
    config = json.loads(captured.out)
    assert config["method"] == "draft_model" and config["speculative_token_schedule"][0][:2] == [1, 1]
    learned = {label: k for r in rows if r["ctx_bucket"] == "1-512" for label, k in r["k_by_bucket"].items()}
    assert learned["1"] == config["speculative_token_schedule"][0][2]


def test_two_live_daemons_under_one_host_id_are_refused_a_restart_is_not(
    repository: FleetRepository,
) -> None:
    from datetime import timedelta

    from adaptivespec.store.fleet import DuplicateHostError

    key = FleetKey("gpu-7", MODEL, HARDWARE)
    first = datetime.now(UTC)
    repository.flush(key, FleetTotals(), 0, first)
    restarted = first + timedelta(seconds=1)  # the same daemon's next life: its last flush came before
    time.sleep(1.1)
    repository.flush(key, FleetTotals(), 0, restarted)
    second = datetime.now(UTC)  # another daemon starts under the same id ...
    repository.flush(key, FleetTotals(), 0, restarted)  # ... while the first one goes on flushing
    with pytest.raises(DuplicateHostError, match="--host-id"):
        repository.flush(key, FleetTotals(), 0, second)
    other = FleetKey("gpu-7", MODEL, "sim:l4")  # the same id on another hardware key is another row
    repository.flush(other, FleetTotals(), 0, second)


def test_daemons_on_one_machine_get_their_own_host_ids() -> None:
    from adaptivespec.server.app import default_host_id

    assert default_host_id(8000) != default_host_id(8001)
    assert default_host_id(8000) == default_host_id(8000)  # a restart keeps its rows
    assert default_host_id(0) != default_host_id(0)
