"""The controller: learns the arm, a drafter and K, per (context bucket, batch bucket), live.

`ingest` is synchronous and cheap (tens of microseconds): it validates a record, updates its
drafter's acceptance estimate, the machine's stall tail and the cell's evidence, asks the cell
which arm runs next, and publishes it. The controller owns its collaborators, each with its
own state: the cells (`CellTable`), the operator controls, the version and history
(`DecisionLog`), the publisher of the engine's snapshot, the acceptance estimators, and the
fleet tally. Operator actions, fleet views and saves reach those collaborators only through
the methods here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from adaptivespec.controller.acceptance import Acceptance, AcceptanceEstimator, ArmTokens
from adaptivespec.controller.arms import OFF, Arm, arm, arm_space
from adaptivespec.controller.buckets import CONTEXT_BUCKETS
from adaptivespec.controller.cell import initial_arm
from adaptivespec.controller.cell_table import CellKey, CellTable, cell_key
from adaptivespec.controller.decision_log import DecisionChange, DecisionLog
from adaptivespec.controller.fleet import FleetTotals, FleetView, Tally, by_cell, pooled_positions
from adaptivespec.controller.learning_settings import LearningSettings
from adaptivespec.controller.operator_controls import OperatorControls
from adaptivespec.controller.overrides import Override
from adaptivespec.controller.persistence import (
    Unsaved,
    acceptance_states,
    cell_state,
    restored_arms,
)
from adaptivespec.controller.probe_share import ALONE
from adaptivespec.controller.publisher import Publisher
from adaptivespec.controller.record_check import valid
from adaptivespec.controller.report import CellDecision, decisions, exploration, thresholds
from adaptivespec.controller.snapshot import LivePolicy
from adaptivespec.controller.stall_tail import StallTail
from adaptivespec.controller.state import ControlChanges, ControllerState
from adaptivespec.engine.telemetry import StepTelemetry

INITIAL_SLOPE = 0.15  # relative cost of one more draft token, before anything is measured
SIM_METHODS = ("draft",)  # the simulator's one drafter: what a controller learns over by default


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    settings: LearningSettings = field(default_factory=LearningSettings)
    history_limit: int = 10_000  # decision changes kept in memory until the store takes them


class Controller:
    def __init__(
        self,
        model_key: str,
        hardware_key: str,
        config: ControllerConfig | None = None,
        methods: tuple[str, ...] = SIM_METHODS,
    ) -> None:
        """`methods`: the drafters the runner loaded, in its order (the first is its default)."""
        self.model_key = model_key
        self.hardware_key = hardware_key
        self.config = config or ControllerConfig()
        self.methods = methods
        self.arms = arm_space(methods, self.config.settings.arms)
        self.ingested = 0
        self.rejected = 0
        self.shadow_rows = 0  # rows the drafters that did not run were scored on (shadow drafts)
        self.cells = CellTable(self.config.settings, self.arms)
        self.controls = OperatorControls(max(self.config.settings.arms), methods)
        self.log = DecisionLog(self.config.history_limit)
        self.tally: Tally | None = None  # this host's totals for the fleet, when it pools with one
        self.share = ALONE  # this host's share of new cells' probes, as of the last fleet view
        self.acceptance = self._new_acceptance()
        self.stalls = StallTail()  # how much slower this machine's slow steps are, over every cell
        self.start_arm = initial_arm(self.arms, self.acceptance_of(0), INITIAL_SLOPE)
        self.publisher = Publisher(
            self.cells,
            self.controls,
            self.log,
            arms=self.arms,
            prior=self.start_arm,
            acceptance_of=self.acceptance_of,
        )

    def ingest(self, record: StepTelemetry) -> bool:
        """Learns from one step; returns False (and counts it) if the record is invalid."""
        if not valid(record):
            self.rejected += 1
            return False
        self.ingested += 1
        if self.controls.frozen:
            return True
        key = cell_key(record.batch_size, int(record.mean_context_len))
        ran = arm(self.drafter(record.method), record.k) if self.methods else OFF
        estimator = self.acceptance.get(ran.method)
        if estimator is not None:
            estimator.observe(key[0], ran.k, record.batch_size, record.kept_at_least)
        for shadow in record.shadow:  # what the drafters that did not run would have kept
            other = self.acceptance.get(shadow.method)
            if other is not None:
                other.observe(key[0], shadow.k, shadow.rows, shadow.kept_at_least, shadow=True)
                self.shadow_rows += shadow.rows
        cell = self.cells.cell(key, self.start_arm)
        if ran in cell.arms:  # credited to the arm chosen, whatever the drafter found
            tokens_per_row = record.emitted / record.batch_size
            # The arm's own cost, without switching's: that one is the switch's (observe_switch).
            seconds = record.step_seconds - record.catch_up_seconds
            typical = cell.evidence.typical_seconds(ran)
            # From here on, the step's seconds at its arm's typical width: a drafter that found
            # few drafts verified fewer, which is neither the arm's cost nor a stall.
            width = record.width if record.verified_width is None else record.verified_width
            seconds = cell.evidence.observe(ran, tokens_per_row, seconds, record.verify_seconds, width=width)
            if typical is not None:
                self.stalls.observe(seconds, typical)
            if record.catch_up_tokens:
                cell.evidence.observe_switch(ran.method, record.catch_up_seconds)
            self.cells.changed(key)
            if self.tally is not None:
                where, rows = (key[0], key[1], ran.method, ran.k), record.batch_size
                self.tally.record(where, tokens_per_row, seconds, rows, record.kept_at_least)
        decided_before, lent_before = cell.decided, cell.lent_to_larger_batch
        around = lambda: self.cells.neighbourhood(key)  # noqa: E731 - asked only on a re-prune
        running = cell.next_k(
            self.acceptance_of(key[0]), around, self.share.turned(sum(key)), self.stalls.tail
        )
        if cell.decided != decided_before:
            self.log.learned(key, decided_before, cell.decided)
        if cell.decided != decided_before or cell.lent_to_larger_batch != lent_before:
            # unvisited cells may borrow the new decision, or start from what this one lends them
            self.publisher.after_change(key[0])
        else:
            self.publisher.cell(key, running)
        return True

    def decision(self, batch_size: int, context_len: int) -> Arm | None:
        """The decision of the cell a step of this batch and context counts in (None: a cell
        not yet visited)."""
        key = cell_key(batch_size, context_len)
        return self.cells[key].decided if key in self.cells else None

    def drafter(self, named: str) -> str:
        """The drafter a record names; an unnamed one (a runner with one drafter, or a row saved
        before drafters were named) is the first."""
        return named or (self.methods[0] if self.methods else "")

    def acceptance_of(self, ctx: int) -> Acceptance:
        """Expected tokens per row at each arm (its drafter's estimate at its K), in context
        bucket `ctx`."""
        return ArmTokens(self.acceptance, ctx)

    def _new_acceptance(self) -> dict[str, AcceptanceEstimator]:
        """One estimator per drafter: each drafter keeps its own drafts."""
        positions = max(self.config.settings.arms)
        return {
            method: AcceptanceEstimator(len(CONTEXT_BUCKETS), positions=positions) for method in self.methods
        }

    # ---- what the engine and operators read ----------------------------------------------
    @property
    def live(self) -> LivePolicy:
        return self.publisher.live

    @property
    def version(self) -> int:
        return self.log.version

    @property
    def frozen(self) -> bool:
        return self.controls.frozen

    @property
    def overrides(self) -> tuple[Override, ...]:
        return self.controls.overrides

    def decisions(self) -> list[CellDecision]:
        """The informed cells' decisions, with how sure each is (report.py)."""
        return decisions(self.cells, self.acceptance_of)

    def thresholds(self) -> dict[int, int | None]:
        """Per context bucket: the batch size from which every larger visited bucket decides K=0."""
        return thresholds(self.decisions())

    def exploration(self) -> dict[str, float]:
        """Steps spent on arms the measurements already showed to be worse than the decision,
        the changes of acceptance detected (each made its drafter forget older rows), and the
        rows other drafters were scored on without running (shadow drafts)."""
        changes = sum(estimator.drifts for estimator in self.acceptance.values())
        return {
            **exploration(self.cells),
            "acceptance_changes": float(changes),
            "shadow_rows": float(self.shadow_rows),
        }

    # ---- operator controls: each applied live and recorded in the history ---------------------
    def set_overrides(self, overrides: tuple[Override, ...], reason: str = "override") -> None:
        self.controls.set_overrides(overrides)
        self._operator_event(f"{reason}: {len(overrides)} active")

    def add_override(self, override: Override, reason: str = "override") -> None:
        """Adds one override, replacing any with the same scope, so repeated pins do not pile up."""
        self.set_overrides(self.controls.with_override(override), reason)

    def freeze(self, frozen: bool) -> None:
        """Frozen, the engine runs each cell's decision and nothing is learned or explored."""
        self.controls.freeze(frozen)
        self._operator_event("frozen" if frozen else "unfrozen")

    def adopt_controls(self, frozen: bool, overrides: tuple[Override, ...], reason: str) -> None:
        """The freeze and overrides another host of the fleet set: applied, not this host's change."""
        self.controls.adopt(frozen, overrides)
        self._operator_event(reason)

    def reset(self) -> None:
        """Forgets everything learned for this model and hardware (overrides stay)."""
        self.cells.clear()
        self.acceptance = self._new_acceptance()
        self.log.event("reset")
        self.publisher.restart()

    def _operator_event(self, reason: str) -> None:
        self.log.event(reason)
        self.publisher.everything()

    # ---- the fleet ----------------------------------------------------------------------
    def pool(self, tally: Tally) -> None:
        """From now on, this host's totals also go to `tally`, for the fleet."""
        self.tally = tally

    def stepping_young_cells(self, young_steps: int) -> bool:
        """Whether a cell stepped since the last flush has fewer than `young_steps` steps, here
        and across the fleet: the host then syncs fast (sync_cadence.py)."""
        stepped = self.tally.changed_cells() if self.tally is not None else set()
        return any(key in self.cells and self.cells[key].evidence.steps < young_steps for key in stepped)

    def fold(self, view: FleetView) -> None:
        """Puts what other hosts (and this host's earlier lives: its tally's baseline) measured
        beside the cells' own measurements; a cell only the fleet visited decides from the
        fleet's data. Republishing walks every cell (milliseconds on the event loop), so it
        happens only when a decision changed."""
        before = self._informed_decisions()
        self.share = replace(view.share, refreshes=self.share.refreshes + 1)
        evidence = view.totals.plus(self.tally.baseline if self.tally is not None else FleetTotals())
        cells = by_cell(evidence, self.drafter, self.arms)
        for key, arms in cells.items():
            busiest = max(arms.values(), key=lambda t: t.steps)
            seconds = {a: totals.seconds() for a, totals in arms.items()}
            self.cells.cell(key, self.start_arm).set_fleet(
                seconds, view.hosts_by_cell.get(key, 0), busiest.reward_mean
            )
        positions = pooled_positions(evidence.acceptance)
        for method, estimator in self.acceptance.items():
            estimator.pool(
                {(ctx, j): rows for (ctx, m, j), rows in positions.items() if self.drafter(m) == method}
            )
        for key in cells:
            cell = self.cells[key]
            if not cell.evidence.samples:
                cell.adopt(self.acceptance_of(key[0]))
        if self._informed_decisions() != before:
            self.publisher.everything()

    def _informed_decisions(self) -> dict[CellKey, tuple[bool, Arm]]:
        return {key: (cell.informed, cell.decided) for key, cell in self.cells.items()}

    # ---- persistence ----------------------------------------------------------------------
    def export_state(
        self, keys: frozenset[CellKey] | None = None, changed: ControlChanges | None = None
    ) -> ControllerState:
        """Every cell (or those in `keys`), the acceptance rates, overrides, version and freeze;
        `changed`: which controls a save writes (default: those changed here and not yet taken)."""
        chosen = sorted(self.cells if keys is None else keys & self.cells.keys())
        confidence = {(d.ctx_bucket, d.batch_bucket): d.confidence for d in self.decisions()}
        cells = tuple(cell_state(key, self.cells[key], confidence.get(key, 0.0)) for key in chosen)
        controls = self.controls
        return ControllerState(
            self.model_key,
            self.hardware_key,
            self.version,
            controls.frozen,
            cells,
            acceptance_states(self.acceptance),
            controls.overrides,
            controls.pending if changed is None else changed,
        )

    def take_unsaved(self) -> Unsaved:
        """What the next save must write; the controller forgets it until `give_back`."""
        cells = self.cells.take_changed()
        state = self.export_state(cells, self.controls.take_changes())
        return Unsaved(state, self.log.take(), cells)

    def give_back(self, unsaved: Unsaved) -> None:
        """After a failed save: all of it is unsaved again, the history oldest first."""
        self.cells.give_back(unsaved.cells)
        self.log.give_back(unsaved.history)
        self.controls.give_back(unsaved.state.changed)

    def history(self) -> tuple[DecisionChange, ...]:
        """The decision changes not yet saved, oldest first."""
        return tuple(self.log)

    def restore(self, state: ControllerState, statistics: bool = True) -> None:
        """Loads learned state and publishes it before the first step: a warm restart does not
        re-explore. `statistics=False` is for a host that pools with a fleet: the shared cell
        rows hold the statistics of whichever host wrote last, while the fleet's totals hold
        every host's steps, so only the decisions are taken here (the fleet's evidence then
        moves them, with hysteresis)."""
        for saved in state.cells:
            cell = self.cells.cell((saved.ctx_bucket, saved.batch_bucket), self.start_arm)
            cell.restore(self._known(saved.decided_method, saved.decided))
            if statistics:
                cell.evidence.restore(saved.samples, saved.reward_scale, restored_arms(saved, self._known))
        for acc in state.acceptance:
            estimator = self.acceptance.get(self.drafter(acc.method))
            if estimator is not None:
                estimator.seed(acc.ctx_bucket, acc.rates)
        self.log.restore(state.version)
        self.controls.adopt(state.frozen, state.overrides)
        self.cells.take_changed()
        self.publisher.everything()

    def _known(self, method: str, k: int) -> Arm | None:
        """A saved arm, if this controller can run it. Rows saved before drafters were named carry
        no method: they are the first drafter's (a model key names one set of drafters)."""
        saved = arm(self.drafter(method), k)
        return saved if saved in self.arms else None
