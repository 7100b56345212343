"""The fleet's tables: each host upserts its own totals, and reads everyone else's summed.

Hosts never write the same row (every key starts with the host id), so concurrent flushes do
not contend, and each flush is one short transaction. The pooled view is two GROUP BY queries
over the (model, hardware) indexes: hosts of another model or hardware are never summed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from adaptivespec.controller.fleet import ArmTotals, FleetTotals, FleetView, PositionTotals
from adaptivespec.store.models import FleetAcceptanceTotal, FleetArmTotal, FleetHost
from adaptivespec.store.upsert import upsert


@dataclass(frozen=True, slots=True)
class FleetKey:
    host_id: str
    model_key: str
    hardware_key: str


@dataclass(frozen=True, slots=True)
class HostRow:
    host_id: str
    model_key: str
    hardware_key: str
    steps: int
    started_at: str
    last_flush_at: str


class FleetRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def flush(self, key: FleetKey, changes: FleetTotals, steps: int, started_at: datetime) -> int:
        """Writes one host's changed totals and its host row in one transaction; returns rows written."""
        ids: dict[str, object] = {
            "host_id": key.host_id,
            "model_key": key.model_key,
            "hardware_key": key.hardware_key,
        }
        now = datetime.now(timezone.utc)
        arms = [
            ids | {"ctx_bucket": c, "batch_bucket": b, "k": k, **_arm_columns(t)}
            for (c, b, k), t in sorted(changes.arms.items())
        ]
        positions = [
            ids | {"ctx_bucket": c, "position": j, "kept": t.kept, "at_risk": t.at_risk}
            for (c, j), t in sorted(changes.acceptance.items())
        ]
        host: dict[str, object] = {**ids, "steps": steps, "started_at": started_at, "last_flush_at": now}
        with Session(self.engine) as session, session.begin():
            upsert(session, FleetHost, [host], keep=("started_at",))
            upsert(session, FleetArmTotal, arms)
            upsert(session, FleetAcceptanceTotal, positions)
        return 1 + len(arms) + len(positions)

    def own(self, key: FleetKey) -> FleetTotals:
        """What this host id flushed before (its earlier lives): the base its totals continue from."""
        with Session(self.engine) as session:
            arms = session.scalars(_mine(select(FleetArmTotal), FleetArmTotal, key)).all()
            positions = session.scalars(_mine(select(FleetAcceptanceTotal), FleetAcceptanceTotal, key)).all()
        return FleetTotals(
            {
                (a.ctx_bucket, a.batch_bucket, a.k): ArmTotals(
                    a.steps, a.reward_sum, a.reward_sq, a.seconds_sum, a.seconds_sq
                )
                for a in arms
            },
            {(p.ctx_bucket, p.position): PositionTotals(p.kept, p.at_risk) for p in positions},
        )

    def pooled(self, key: FleetKey) -> FleetView:
        """Every other host's totals of the same (model, hardware), summed."""
        arm = FleetArmTotal
        cell = (arm.ctx_bucket, arm.batch_bucket, arm.k)
        arm_sums = _others(
            select(
                *cell,
                func.sum(arm.steps),
                func.sum(arm.reward_sum),
                func.sum(arm.reward_sq),
                func.sum(arm.seconds_sum),
                func.sum(arm.seconds_sq),
                func.count(func.distinct(arm.host_id)),
            ),
            arm,
            key,
        ).group_by(*cell)
        acc = FleetAcceptanceTotal
        position_sums = _others(
            select(acc.ctx_bucket, acc.position, func.sum(acc.kept), func.sum(acc.at_risk)), acc, key
        ).group_by(acc.ctx_bucket, acc.position)
        hosts = _others(select(func.count(func.distinct(arm.host_id))), arm, key)
        with Session(self.engine) as session:
            arm_rows = session.execute(arm_sums).all()
            position_rows = session.execute(position_sums).all()
            host_count = session.scalar(hosts) or 0
        arms: dict[tuple[int, int, int], ArmTotals] = {}
        hosts_by_cell: dict[tuple[int, int], int] = {}
        for c, b, k, steps, r_sum, r_sq, s_sum, s_sq, host_ids in arm_rows:
            arms[(c, b, k)] = ArmTotals(int(steps), float(r_sum), float(r_sq), float(s_sum), float(s_sq))
            hosts_by_cell[(c, b)] = max(hosts_by_cell.get((c, b), 0), int(host_ids))
        acceptance = {(c, j): PositionTotals(int(kept), int(risk)) for c, j, kept, risk in position_rows}
        return FleetView(FleetTotals(arms, acceptance), int(host_count), hosts_by_cell)

    def hosts(self) -> list[HostRow]:
        with Session(self.engine) as session:
            rows = session.scalars(
                select(FleetHost).order_by(FleetHost.model_key, FleetHost.hardware_key, FleetHost.host_id)
            ).all()
        return [
            HostRow(
                r.host_id,
                r.model_key,
                r.hardware_key,
                int(r.steps),
                r.started_at.isoformat(),
                r.last_flush_at.isoformat(),
            )
            for r in rows
        ]


def _arm_columns(t: ArmTotals) -> dict[str, Any]:
    return {
        "steps": t.steps,
        "reward_sum": t.reward_sum,
        "reward_sq": t.reward_sq,
        "seconds_sum": t.seconds_sum,
        "seconds_sq": t.seconds_sq,
    }


def _mine(statement, table, key: FleetKey):  # type: ignore[no-untyped-def]
    return statement.where(
        table.host_id == key.host_id, table.model_key == key.model_key, table.hardware_key == key.hardware_key
    )


def _others(statement, table, key: FleetKey):  # type: ignore[no-untyped-def]
    return statement.where(
        table.host_id != key.host_id, table.model_key == key.model_key, table.hardware_key == key.hardware_key
    )
