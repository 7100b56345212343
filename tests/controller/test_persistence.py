"""What a flush takes, what a failed flush gives back, and what a restart resumes from."""

from __future__ import annotations

from pathlib import Path

from adaptivespec.controller.controller import Controller, ControllerConfig
from adaptivespec.sim import specs
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.loop import SimLoop
from adaptivespec.sim.workload import Phase, Workload
from adaptivespec.store.repository import Store

COST = StepCostModel(specs.hardware("h100-sxm"), specs.model("llama-3.1-8b"), specs.model("llama-3.2-1b"))


def _run(controller: Controller, phases: tuple[Phase, ...], seed: int = 0, acceptance: float = 0.7) -> None:
    workload = Workload(acceptance_mean=acceptance, load=phases)
    SimLoop(COST, workload, seed, "m", "h").run(controller.live, on_step=controller.ingest)


def test_every_flush_saves_each_cell_whose_statistics_changed(tmp_path: Path) -> None:
    """Not only cells whose decision changed: statistics gathered since are what a restart resumes."""
    store = Store(f"sqlite:///{tmp_path}/s.db")
    controller = Controller("m", "h")
    _run(controller, (Phase(256, 400),))  # far past the threshold: K = 0 stays the decision
    first = controller.take_unsaved()
    store.save(first.state, first.history)
    _run(controller, (Phase(256, 100),), seed=1)  # more steps
    second = controller.take_unsaved()
    moved = {(h.ctx_bucket, h.batch_bucket) for h in second.history}
    assert second.cells - moved  # cells whose decision did not change are saved too
    assert len(second.state.cells) == len(second.cells)
    store.save(second.state, second.history)
    saved = store.load("m", "h")
    assert saved is not None
    for cell in saved.cells:
        live = controller.cells[(cell.ctx_bucket, cell.batch_bucket)]
        assert cell.samples == live.evidence.samples
        saved_arms = {(a.method, a.k): a.seconds_count for a in cell.arms}
        assert saved_arms == {(a.method, a.k): s.count for a, s in live.evidence.seconds.items()}
    assert controller.take_unsaved().cells == frozenset()  # nothing new, nothing to write


def test_a_failed_flush_loses_nothing_and_the_retry_writes_it_all(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/f.db")
    controller = Controller("m", "h")
    _run(controller, (Phase(1, 300), Phase(8, 300)))
    changes = len(controller.history())
    failed = controller.take_unsaved()
    assert failed.cells and len(failed.history) == changes
    _run(controller, (Phase(64, 200),), seed=2)  # learning goes on while the save is failing
    controller.give_back(failed)  # the save raised
    retry = controller.take_unsaved()
    assert failed.cells < retry.cells
    assert retry.history[: len(failed.history)] == failed.history  # oldest first, none lost
    store.save(retry.state, retry.history)
    saved = store.load("m", "h")
    assert saved is not None and {(c.ctx_bucket, c.batch_bucket) for c in saved.cells} == set(
        controller.cells
    )
    assert store.history("m", "h", limit=1000)[1] == len(retry.history)


def test_a_fresh_controller_lends_its_decisions_to_unvisited_cells() -> None:
    controller = Controller("m", "h")
    _run(controller, (Phase(1, 600),), acceptance=0.9)
    cells = controller.cells.items()
    visited = sorted(ctx for (ctx, batch), cell in cells if batch == 0 and cell.evidence.samples)
    decided = {ctx: controller.cells[(ctx, 0)].decided for ctx in visited}
    assert set(decided.values()) != {controller.start_arm}  # the sim's decisions differ from the prior
    for ctx in visited:
        assert controller.live.snapshot.table[ctx][1] == decided[ctx]  # batch 2 was never visited
    far = max(visited) + 2  # a context never visited borrows from the nearest one that was
    assert (far, 0) not in controller.cells
    assert controller.live.snapshot.table[far][0] == decided[max(visited)]


def test_a_warm_restart_resumes_the_decisions_without_exploring(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/r.db")
    controller = Controller("m", "h")
    _run(controller, (Phase(1, 300), Phase(16, 300)))
    store.save(controller.export_state())
    resumed = Controller("m", "h")
    saved = store.load("m", "h")
    assert saved is not None
    resumed.restore(saved)
    for key, cell in controller.cells.items():
        assert resumed.live.snapshot.table[key[0]][key[1]] == cell.decided
    assert resumed.take_unsaved().cells == frozenset()


def test_history_given_back_keeps_the_newest_within_its_bound() -> None:
    controller = Controller("m", "h", ControllerConfig(history_limit=3))
    controller.freeze(True)
    controller.freeze(False)
    taken = controller.take_unsaved()
    controller.freeze(True)
    controller.freeze(False)
    controller.give_back(taken)
    assert [h.reason for h in controller.history()] == ["unfrozen", "frozen", "unfrozen"]
    assert [h.version for h in controller.history()] == [2, 3, 4]
