"""The store against a real SQLite file and the real Alembic migrations."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from adaptivespec.cli import main
from adaptivespec.controller.arms import arm
from adaptivespec.controller.controller import Controller
from adaptivespec.controller.overrides import Override
from adaptivespec.controller.state import ControllerState
from adaptivespec.sim import specs
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.loop import SimLoop
from adaptivespec.sim.workload import Phase, Workload
from adaptivespec.store.db import StoreError, current_revision, make_engine, upgrade
from adaptivespec.store.repository import Store

from ..controller.noisy_machine import Machine, Run

COST = StepCostModel(specs.hardware("h100-sxm"), specs.model("llama-3.1-8b"), specs.model("llama-3.2-1b"))


def _learned(phases: tuple[Phase, ...] = (Phase(1, 400), Phase(64, 400))) -> Controller:
    controller = Controller("pair", "sim:h100")
    SimLoop(COST, Workload(load=phases), 0, "pair", "sim:h100").run(
        controller.live, on_step=controller.ingest
    )
    return controller


def test_migrations_from_empty_and_from_the_previous_revision(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/a.db")
    assert upgrade(engine, "0001") == "0001"
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO decisions (model_key, hardware_key, ctx_bucket, batch_bucket, k, samples, "
                "confidence, policy_version) VALUES ('m', 'h', 1, 2, 3, 10, 0.5, 7)"
            )
        )
    assert upgrade(engine) == "0005"
    with engine.connect() as connection:
        row = connection.execute(text("SELECT k, samples, reward_scale FROM decisions")).one()
        assert tuple(row) == (3, 10, 0.0)
        mode = connection.execute(text("PRAGMA journal_mode")).scalar()
        assert mode == "wal"
        assert connection.execute(text("SELECT count(*) FROM arm_stats")).scalar() == 0


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/b.db"
    Store(url).close()
    with sqlite3.connect(tmp_path / "b.db") as raw:
        raw.execute("UPDATE alembic_version SET version_num = '0099_future'")
    with pytest.raises(StoreError, match="0099_future.*does not know.*upgrade adaptivespec"):
        Store(url)


def test_learning_state_round_trips_and_resumes(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/c.db")
    controller = _learned()
    controller.set_overrides((Override("pin", 5, 1, 3),))
    store.save(controller.export_state(), list(controller.history()))
    resumed = Controller("pair", "sim:h100")
    saved = store.load("pair", "sim:h100")
    assert saved is not None
    resumed.restore(saved)
    assert resumed.version == controller.version
    assert resumed.live.k_for(8, 700) == 5  # the override survived
    for key, cell in controller.cells.items():
        assert resumed.cells[key].decided == cell.decided
        if key != (1, 3):  # the pinned cell
            # Before the first step the engine gets the learned decision: no re-exploration.
            assert resumed.live.snapshot.table[key[0]][key[1]] == cell.decided
        assert set(resumed.cells[key].evidence.seconds) == set(cell.evidence.seconds)
    rows, total = store.history("pair", "sim:h100", limit=5)
    assert total == len(controller.history()) and len(rows) == 5
    assert rows[0].policy_version > rows[-1].policy_version
    assert store.load("other", "sim:h100") is None


def test_thresholds_command_reads_the_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/d.db"
    store = Store(url)
    controller = _learned((Phase(1, 300), Phase(256, 300)))
    store.save(controller.export_state(), list(controller.history()))
    store.close()
    assert main(["thresholds", "--db", url, "--json"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)
    assert (
        rows
        and {"model_key", "hardware_key", "ctx_bucket", "threshold", "k_by_bucket", "samples"}
        <= rows[0].keys()
    )
    assert {"confidence", "policy_version", "updated_at"} <= rows[0].keys()
    assert main(["db", "current", "--db", url]) == 0
    assert "0005" in capsys.readouterr().out


WRITER = textwrap.dedent(
    """
    import sys
    from adaptivespec.controller.controller import Controller
    from adaptivespec.engine.telemetry import StepTelemetry
    from adaptivespec.store.repository import Store

    store = Store(sys.argv[1])
    controller = Controller("pair", "crash")
    step = 0
    while True:
        for batch in (1, 2, 4, 8, 16, 32, 64, 128):
            k = controller.live.k_for(batch, 300)
            seconds = 0.01 * (1 + 0.2 * k) * (1 + batch / 32)
            kept = (batch,) * (k // 2) + (0,) * (k - k // 2)  # every row keeps k // 2 drafts
            controller.ingest(StepTelemetry("pair", "crash", batch, k, 300.0, k * batch, k // 2 * batch,
                                            batch + k // 2 * batch, 0.001, seconds, seconds + 0.001, 0.0,
                                            k, kept))
            step += 1
        controller.log.event("checkpoint")  # every save is a new committed version
        store.save(controller.export_state(), controller.log.take())
        print(controller.version, flush=True)
    """
)


def test_sigkill_mid_writes_keeps_every_committed_decision(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/e.db"
    Store(url).close()
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    process = subprocess.Popen([sys.executable, str(script), url], stdout=subprocess.PIPE, text=True)
    committed = []
    assert process.stdout is not None
    for line in process.stdout:
        committed.append(int(line))
        if len(committed) >= 40:
            break
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    with sqlite3.connect(tmp_path / "e.db") as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    engine = make_engine(url)
    assert current_revision(engine) == "0005"
    store = Store(url)
    saved = store.load("pair", "crash")
    assert saved is not None and saved.version >= committed[-1]
    assert len(saved.cells) >= 8  # every batch bucket written by the last committed save


def test_acceptance_saved_before_the_curve_reads_back_as_geometric(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/g.db")
    upgrade(engine, "0002")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO policy_state (model_key, hardware_key, version, frozen, updated_at) "
                "VALUES ('m', 'h', 3, 0, '2026-11-30 00:00:00')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO acceptance_stats (model_key, hardware_key, ctx_bucket, mean, var, count) "
                "VALUES ('m', 'h', 2, 0.7, 0.0, 500)"
            )
        )
    upgrade(engine)
    saved = Store(f"sqlite:///{tmp_path}/g.db").load("m", "h")
    assert saved is not None
    (acceptance,) = saved.acceptance
    assert (acceptance.ctx_bucket, acceptance.count) == (2, 500)
    assert acceptance.rates.first == acceptance.rates.continuation == 0.7


def test_the_acceptance_curve_survives_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/c.db"
    learned = _learned()
    store = Store(url)
    store.save(learned.export_state())
    restored = Controller("pair", "sim:h100")
    saved = store.load("pair", "sim:h100")
    assert saved is not None
    restored.restore(saved)
    for ctx, _ in {key for key in learned.cells}:
        if learned.acceptance["draft"].rows(ctx) >= 100:
            got, want = restored.acceptance["draft"].rates(ctx), learned.acceptance["draft"].rates(ctx)
            assert (got.first, got.continuation) == pytest.approx((want.first, want.continuation), rel=1e-6)


def test_a_percent_sign_in_the_url_reaches_the_database(tmp_path: Path) -> None:
    """URL-encoded passwords carry '%'; Alembic's config file syntax would read it as interpolation."""
    url = f"sqlite:///{tmp_path}/50%off.db"
    Store(url).close()
    assert (tmp_path / "50%off.db").is_file()
    assert current_revision(make_engine(url)) == "0005"


def test_concurrent_writers_of_one_key_never_collide(tmp_path: Path) -> None:
    """Hosts (or flushes) saving the same cells at once: upserts, so no unique-constraint error."""
    url = f"sqlite:///{tmp_path}/w.db"
    Store(url).close()
    states = [_learned((Phase(1, 100 + 50 * i), Phase(8, 100))).export_state() for i in range(4)]
    errors: list[BaseException] = []

    def write(store: Store, state: ControllerState) -> None:
        try:
            for _ in range(15):
                store.save(state)
        except BaseException as exc:  # noqa: BLE001 - any failure is the finding
            errors.append(exc)
        finally:
            store.close()

    stores = [Store(url) for _ in states]  # Alembic's migration runner is not thread-safe; saves are
    threads = [threading.Thread(target=write, args=pair) for pair in zip(stores, states, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    saved = Store(url).load("pair", "sim:h100")
    assert saved is not None
    assert len({(c.ctx_bucket, c.batch_bucket) for c in saved.cells}) == len(saved.cells) > 0


def test_reading_thresholds_never_migrates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    assert main(["thresholds", "--db", f"sqlite:///{empty}"]) == 2
    assert "no adaptivespec schema" in capsys.readouterr().err
    with sqlite3.connect(empty) as raw:
        assert raw.execute("SELECT name FROM sqlite_master").fetchall() == []  # untouched
    old = make_engine(f"sqlite:///{tmp_path}/old.db")
    upgrade(old, "0002")
    assert main(["thresholds", "--db", f"sqlite:///{tmp_path}/old.db"]) == 2
    assert "adaptivespec db upgrade" in capsys.readouterr().err
    assert current_revision(old) == "0002"
    assert main(["thresholds", "--db", f"sqlite:///{tmp_path}/missing.db"]) == 2
    assert "no database at" in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()


def test_history_is_per_model_and_hardware(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/h.db")
    mine, theirs = Controller("pair", "sim:h100"), Controller("other", "sim:h100")
    mine.freeze(True)
    for _ in range(3):
        theirs.freeze(True)
    for controller in (mine, theirs):
        store.save(controller.export_state(), list(controller.history()))
    rows, total = store.history("pair", "sim:h100")
    assert total == 1 and [r.model_key for r in rows] == ["pair"]
    assert store.history("other", "sim:h100")[1] == 3


def test_daemons_starting_at_once_on_one_sqlite_file_migrate_in_turn(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/shared.db"
    errors: list[BaseException] = []

    def start() -> None:
        try:
            Store(url).close()
        except BaseException as exc:  # collected, so the assertion names it
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert current_revision(make_engine(url)) == "0005"


def _two_drafters() -> Controller:
    """A controller that learned over two drafters: one pays at small batch, none at large."""
    controller = Controller("pair", "sim:two", methods=("ngram", "suffix"))
    drafters = {"ngram": Machine(slope=0.06, alpha=0.45), "suffix": Machine(slope=0.06, alpha=0.85)}
    for batch in (1, 64):
        run = Run(drafters["ngram"], batch, seed=batch, drafters=drafters)
        for _ in range(200):
            controller.ingest(run.step(controller.live))
    return controller


def test_arms_keep_their_drafter_through_a_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(f"sqlite:///{tmp_path}/d.db")
    learned = _two_drafters()
    store.save(learned.export_state(), list(learned.history()))
    resumed = Controller("pair", "sim:two", methods=("ngram", "suffix"))
    saved = store.load("pair", "sim:two")
    assert saved is not None
    resumed.restore(saved)
    assert {(d.ctx_bucket, d.batch_bucket, d.method, d.k) for d in resumed.decisions()} == {
        (d.ctx_bucket, d.batch_bucket, d.method, d.k) for d in learned.decisions()
    }
    assert "suffix" in {d.method for d in resumed.decisions()}
    for key, cell in learned.cells.items():
        measured = cell.evidence.seconds.keys()  # every (drafter, K)
        assert resumed.cells[key].evidence.seconds.keys() == measured
        assert resumed.live.snapshot.table[key[0]][key[1]] == cell.decided
    assert resumed.acceptance["suffix"].rates(0).first > resumed.acceptance["ngram"].rates(0).first
    history, _ = store.history("pair", "sim:two")
    assert any(row.new_method == "suffix" for row in history)
    (row,) = [r for r in store.thresholds() if r.model_key == "pair"]
    assert "suffix" in row.method_by_bucket.values() and row.method_options
    store.close()
    assert main(["thresholds", "--db", f"sqlite:///{tmp_path}/d.db"]) == 0
    assert "drafter by batch bucket" in capsys.readouterr().out


def test_rows_saved_before_drafters_were_named_are_the_first_drafters(tmp_path: Path) -> None:
    """Revision 0004's rows have no method: a model key names one set of drafters, and such a
    key had one, so its K > 0 rows are the first drafter's."""
    url = f"sqlite:///{tmp_path}/old.db"
    engine = make_engine(url)
    upgrade(engine, "0004")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO policy_state (model_key, hardware_key, version, frozen, updated_at) "
                "VALUES ('m+ngram2-3:float32', 'h', 3, 0, '2026-11-30 00:00:00')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO decisions (model_key, hardware_key, ctx_bucket, batch_bucket, k, samples, "
                "confidence, policy_version, reward_scale) "
                "VALUES ('m+ngram2-3:float32', 'h', 0, 0, 3, 10, 0.5, 3, 1.0)"
            )
        )
        connection.execute(
            text(
                "INSERT INTO arm_stats (model_key, hardware_key, ctx_bucket, batch_bucket, k, reward_mean, "
                "reward_var, reward_count, seconds_mean, seconds_var, seconds_count) "
                "VALUES ('m+ngram2-3:float32', 'h', 0, 0, 3, 1.0, 0.01, 10, 0.02, 0.0001, 10)"
            )
        )
    engine.dispose()
    store = Store(url)
    saved = store.load("m+ngram2-3:float32", "h")
    assert saved is not None
    controller = Controller("m+ngram2-3:float32", "h", methods=("ngram",))
    controller.restore(saved)
    assert controller.live.k_for(1, 100) == 3 and controller.live.method_for(1, 100) == "ngram"
    assert set(controller.cells[(0, 0)].evidence.seconds) == {arm("ngram", 3)}
