"""Reads and writes controller state; each save is one transaction, so a crash keeps every commit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime

from sqlalchemy import Engine, delete, func, select
from sqlalchemy.exc import DatabaseError
from sqlalchemy.orm import Session

from adaptivespec.controller.acceptance import AcceptanceRates
from adaptivespec.controller.decision_log import DecisionChange
from adaptivespec.controller.overrides import Override
from adaptivespec.controller.state import AcceptanceState, ArmState, CellState, ControllerState
from adaptivespec.store.db import StoreError, make_engine, require_current, upgrade
from adaptivespec.store.models import (
    AcceptanceStat,
    ArmStat,
    Decision,
    DecisionHistory,
    OverrideRow,
    PolicyState,
)
from adaptivespec.store.rows import HistoryRow, ThresholdRow
from adaptivespec.store.upsert import upsert


class Store:
    def __init__(self, url: str | None = None, engine: Engine | None = None, migrate: bool = True) -> None:
        """`migrate=False` opens for reading: it refuses a database that is not at the current
        schema instead of migrating it."""
        self.engine = engine or make_engine(url, create=migrate)
        try:
            if migrate:
                upgrade(self.engine)
            else:
                require_current(self.engine)
        except DatabaseError as exc:  # damage quick_check cannot see, or a file that is not SQLite
            self.engine.dispose()
            raise StoreError(
                f"the database at {self.engine.url.render_as_string()} cannot be read: {exc.orig}. "
                f"Run `adaptivespec db check --db {self.engine.url.render_as_string()}`, then restore "
                "it from a backup or move it aside so that the daemon starts on a new one"
            ) from exc

    def close(self) -> None:
        self.engine.dispose()

    def load(self, model_key: str, hardware_key: str) -> ControllerState | None:
        with Session(self.engine) as session:
            policy = session.scalar(_keyed(select(PolicyState), PolicyState, model_key, hardware_key))
            if policy is None:
                return None
            state = ControllerState(
                model_key,
                hardware_key,
                policy.version,
                bool(policy.frozen),
                self._cells(session, model_key, hardware_key),
                tuple(
                    AcceptanceState(r.ctx_bucket, _rates(r), r.count, r.method)
                    for r in session.scalars(
                        _keyed(select(AcceptanceStat), AcceptanceStat, model_key, hardware_key)
                    )
                ),
                tuple(
                    Override(r.kind, r.k, r.ctx_bucket, r.batch_bucket, r.method)
                    for r in session.scalars(
                        _keyed(select(OverrideRow), OverrideRow, model_key, hardware_key).order_by(
                            OverrideRow.id
                        )
                    )
                ),
            )
        return state

    def operator_state(self, model_key: str, hardware_key: str) -> tuple[bool, tuple[Override, ...]] | None:
        """The freeze and overrides operators set for this (model, hardware), on any host of the
        fleet: what a pooling host applies on refresh. None before anything was saved."""
        with Session(self.engine) as session:
            policy = session.scalar(_keyed(select(PolicyState), PolicyState, model_key, hardware_key))
            if policy is None:
                return None
            rows = session.scalars(
                _keyed(select(OverrideRow), OverrideRow, model_key, hardware_key).order_by(OverrideRow.id)
            )
            overrides = tuple(Override(r.kind, r.k, r.ctx_bucket, r.batch_bucket, r.method) for r in rows)
        return bool(policy.frozen), overrides

    @staticmethod
    def _policy_row(session: Session, state: ControllerState, now: datetime) -> dict[str, object]:
        """The shared policy row: the version never goes back (hosts of a fleet count their own
        versions), and the freeze is written only when an operator changed it on the saving
        host (`state.changed`), so that one host's flush never undoes a freeze set on another."""
        keys = (state.model_key, state.hardware_key)
        stored = session.scalar(_keyed(select(PolicyState), PolicyState, *keys).with_for_update())
        if stored is None:
            return {"version": state.version, "updated_at": now, "frozen": int(state.frozen)}
        frozen = state.frozen if state.changed.frozen else bool(stored.frozen)
        return {"version": max(state.version, stored.version), "updated_at": now, "frozen": int(frozen)}

    @staticmethod
    def _cells(session: Session, model_key: str, hardware_key: str) -> tuple[CellState, ...]:
        arms: dict[tuple[int, int], list[ArmState]] = {}
        for r in session.scalars(
            _keyed(select(ArmStat), ArmStat, model_key, hardware_key).order_by(ArmStat.k)
        ):
            arms.setdefault((r.ctx_bucket, r.batch_bucket), []).append(
                ArmState(
                    r.k,
                    r.method,
                    r.reward_mean,
                    r.reward_var,
                    r.reward_count,
                    r.seconds_mean,
                    r.seconds_var,
                    r.seconds_count,
                )
            )
        return tuple(
            CellState(
                d.ctx_bucket,
                d.batch_bucket,
                d.k,
                d.samples,
                d.confidence,
                d.reward_scale,
                tuple(arms.get((d.ctx_bucket, d.batch_bucket), [])),
                d.method,
            )
            for d in session.scalars(_keyed(select(Decision), Decision, model_key, hardware_key))
        )

    def save(self, state: ControllerState, history: Sequence[DecisionChange] = ()) -> None:
        """Writes the given cells (usually the dirty ones), acceptance, overrides and history, atomically."""
        keys = (state.model_key, state.hardware_key)
        now = datetime.now(UTC)
        with Session(self.engine) as session, session.begin():
            key = {"model_key": keys[0], "hardware_key": keys[1]}
            upsert(session, PolicyState, [key | self._policy_row(session, state, now)])
            upsert(session, Decision, [key | _decision(cell, state.version, now) for cell in state.cells])
            upsert(
                session,
                ArmStat,
                [
                    key | {"ctx_bucket": cell.ctx_bucket, "batch_bucket": cell.batch_bucket, **asdict(arm)}
                    for cell in state.cells
                    for arm in cell.arms
                ],
            )
            upsert(
                session,
                AcceptanceStat,
                [
                    key
                    | {
                        "ctx_bucket": a.ctx_bucket,
                        "method": a.method,
                        "first_rate": a.rates.first,
                        "continuation_rate": a.rates.continuation,
                        "count": a.count,
                    }
                    for a in state.acceptance
                ],
            )
            overrides_changed = state.changed.overrides
            if overrides_changed:  # the set is replaced whole
                session.execute(_keyed(delete(OverrideRow), OverrideRow, *keys))
            session.add_all(
                OverrideRow(
                    model_key=keys[0],
                    hardware_key=keys[1],
                    kind=o.kind,
                    k=o.k,
                    method=o.method,
                    ctx_bucket=o.ctx_bucket,
                    batch_bucket=o.batch_bucket,
                )
                for o in (state.overrides if overrides_changed else ())
            )
            session.add_all(
                DecisionHistory(
                    model_key=keys[0],
                    hardware_key=keys[1],
                    ctx_bucket=h.ctx_bucket,
                    batch_bucket=h.batch_bucket,
                    old_k=h.old_k,
                    new_k=h.new_k,
                    old_method=h.old_method,
                    new_method=h.new_method,
                    reason=h.reason,
                    policy_version=h.version,
                    created_at=datetime.fromtimestamp(h.at, UTC),
                )
                for h in history
            )

    def thresholds(self) -> list[ThresholdRow]:
        with Session(self.engine) as session:
            versions = {
                (p.model_key, p.hardware_key): p.version for p in session.scalars(select(PolicyState))
            }
            rows = session.scalars(
                select(Decision).order_by(
                    Decision.model_key, Decision.hardware_key, Decision.ctx_bucket, Decision.batch_bucket
                )
            ).all()
            arm_rows = session.scalars(select(ArmStat)).all()
        grouped: dict[tuple[str, str, int], list[Decision]] = {}
        scale: dict[tuple[str, str, int, int], float] = {}
        for row in rows:
            grouped.setdefault((row.model_key, row.hardware_key, row.ctx_bucket), []).append(row)
            scale[(row.model_key, row.hardware_key, row.ctx_bucket, row.batch_bucket)] = row.reward_scale
        rewards: dict[tuple[str, str, int], dict[int, dict[tuple[str, int], float]]] = {}
        for a in arm_rows:
            cell_scale = scale.get((a.model_key, a.hardware_key, a.ctx_bucket, a.batch_bucket), 0.0)
            by_batch = rewards.setdefault((a.model_key, a.hardware_key, a.ctx_bucket), {})
            by_batch.setdefault(a.batch_bucket, {})[(a.method, a.k)] = a.reward_mean * cell_scale
        return [
            ThresholdRow.of(
                (model, hardware),
                ctx,
                cells,
                samples=sum(d.samples for d in cells),
                version=versions.get((model, hardware), 0),
                updated_at=max(d.updated_at for d in cells).isoformat(),
                rewards=rewards.get((model, hardware, ctx), {}),
            )
            for (model, hardware, ctx), cells in grouped.items()
        ]

    def history(
        self, model_key: str, hardware_key: str, limit: int = 100, offset: int = 0
    ) -> tuple[list[HistoryRow], int]:
        """One (model, hardware)'s decision changes, newest first, and how many there are."""
        with Session(self.engine) as session:
            count = _keyed(
                select(func.count()).select_from(DecisionHistory), DecisionHistory, model_key, hardware_key
            )
            total = session.scalar(count) or 0
            page = _keyed(select(DecisionHistory), DecisionHistory, model_key, hardware_key)
            rows = session.scalars(page.order_by(DecisionHistory.id.desc()).limit(limit).offset(offset)).all()
        return [
            HistoryRow(
                r.model_key,
                r.hardware_key,
                r.ctx_bucket,
                r.batch_bucket,
                r.old_k,
                r.new_k,
                r.reason,
                r.policy_version,
                r.created_at.isoformat(),
                r.old_method,
                r.new_method,
            )
            for r in rows
        ], total


def _decision(cell: CellState, version: int, now: datetime) -> dict[str, object]:
    return {
        "ctx_bucket": cell.ctx_bucket,
        "batch_bucket": cell.batch_bucket,
        "k": cell.decided,
        "method": cell.decided_method,
        "samples": cell.samples,
        "confidence": cell.confidence,
        "reward_scale": cell.reward_scale,
        "policy_version": version,
        "updated_at": now,
    }


def _keyed(statement, table, model_key: str, hardware_key: str):  # type: ignore[no-untyped-def]
    return statement.where(table.model_key == model_key, table.hardware_key == hardware_key)


def _rates(row: AcceptanceStat) -> AcceptanceRates:
    continuation = row.first_rate if row.continuation_rate is None else row.continuation_rate
    return AcceptanceRates(row.first_rate, continuation)
