"""The store against a real SQLite file and the real Alembic migrations."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import text

from adaptivespec.cli import main
from adaptivespec.controller.controller import Controller
from adaptivespec.controller.overrides import Override
from adaptivespec.sim import specs
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.loop import SimLoop
from adaptivespec.sim.workload import Phase, Workload
from adaptivespec.store.db import StoreError, current_revision, make_engine, upgrade
from adaptivespec.store.repository import Store

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
    assert upgrade(engine) == "0002"
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
    store.save(controller.export_state(), list(controller.history))
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
        assert set(resumed.cells[key].seconds) == set(cell.seconds)
    rows, total = store.history(limit=5)
    assert total == len(controller.history) and len(rows) == 5
    assert rows[0].policy_version > rows[-1].policy_version
    assert store.load("other", "sim:h100") is None


def test_thresholds_command_reads_the_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/d.db"
    store = Store(url)
    controller = _learned((Phase(1, 300), Phase(256, 300)))
    store.save(controller.export_state(), list(controller.history))
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
    assert "0002" in capsys.readouterr().out


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
            controller.ingest(StepTelemetry("pair", "crash", batch, k, 300.0, k * batch, k * batch // 2,
                                            batch + k * batch // 2, 0.001, seconds, seconds + 0.001, 0.0))
            step += 1
        controller.version += 1  # every save is a new committed version
        store.save(controller.export_state(), list(controller.history))
        controller.history.clear()
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
    assert current_revision(engine) == "0002"
    store = Store(url)
    saved = store.load("pair", "crash")
    assert saved is not None and saved.version >= committed[-1]
    assert len(saved.cells) >= 8  # every batch bucket written by the last committed save
