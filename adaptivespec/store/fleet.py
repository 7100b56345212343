"""The fleet's tables: each host upserts its own totals, and reads everyone else's summed.

A flush is one short transaction. It upserts the host's own rows (absolute totals, in rows no
other host writes) and adds the difference from what those rows held to the pooled sums of the
(model, hardware). The difference is taken against the database, not against what the host
believes it wrote, so a flush retried after it did commit adds nothing twice. The sums then
always equal the GROUP BY of the host rows, and a refresh reads them, minus the host's own
rows: a few hundred rows whatever the number of hosts. Hosts of another model or hardware are
never summed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select, tuple_
from sqlalchemy.orm import Session

from adaptivespec.controller.fleet import (
    ArmKey,
    ArmTotals,
    FleetTotals,
    FleetView,
    PositionKey,
    PositionTotals,
)
from adaptivespec.controller.probe_share import ProbeShare
from adaptivespec.controller.sync_cadence import SyncCadence
from adaptivespec.errors import AdaptiveSpecError
from adaptivespec.store.models import (
    FleetAcceptanceTotal,
    FleetArmTotal,
    FleetHost,
    FleetPooledAcceptance,
    FleetPooledArm,
)
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
    def __init__(self, engine: Engine, now: Callable[[], datetime] | None = None) -> None:
        """`now`: the clock of timestamps and liveness; the wall clock, or a bench's virtual one."""
        self.engine = engine
        self._now = now or _now

    def flush(self, key: FleetKey, changes: FleetTotals, steps: int, started_at: datetime) -> int:
        """Writes one host's changed totals, its host row and the pooled sums in one transaction;
        returns the rows written.

        `started_at` tells daemons apart: the host row keeps the last flusher's. If another
        daemon with this host id flushed after this one started, both are live under one id
        and would overwrite each other's totals: DuplicateHostError, and nothing is written.
        (A restart is not a duplicate: its earlier life flushed before it started.)"""
        host: dict[str, object] = {
            **_ids(key),
            "steps": steps,
            "started_at": started_at,
            "last_flush_at": self._now(),
        }
        with Session(self.engine) as session, session.begin():
            _claim(session, key, started_at)
            upsert(session, FleetHost, [host])  # this host's flushes take turns
            before = _totals(session, key, only=changes)
            arms, arm_sums = _arm_rows(key, changes, before)
            positions, position_sums = _position_rows(key, changes, before)
            upsert(session, FleetArmTotal, arms)
            upsert(session, FleetAcceptanceTotal, positions)
            upsert(session, FleetPooledArm, arm_sums, add=True)
            upsert(session, FleetPooledAcceptance, position_sums, add=True)
        return 1 + 2 * (len(arms) + len(positions))

    def own(self, key: FleetKey) -> FleetTotals:
        """What this host id flushed before (its earlier lives): the base its totals continue from."""
        with Session(self.engine) as session:
            return _totals(session, key)

    def pooled(self, key: FleetKey, live_seconds: float = SyncCadence().live_seconds) -> FleetView:
        """Every other host's totals of the same (model, hardware): the pooled sums minus this
        host's own rows (which only this host writes, so they cannot change in between). Hosts
        that flushed in the last `live_seconds` are live: the view says how many, and where this
        host's id sorts among theirs."""
        a, p, h = FleetPooledArm, FleetPooledAcceptance, FleetHost
        arm_sums = _of(select(a.ctx_bucket, a.batch_bucket, a.method, a.k, a.hosts, *_arm_sums(a)), a, key)
        position_sums = _of(select(p.ctx_bucket, p.method, p.position, p.kept, p.at_risk), p, key)
        live = h.last_flush_at >= self._now() - timedelta(seconds=live_seconds)
        host_counts = (  # other hosts; those of them live; those live whose ids sort before this one
            func.count(),
            func.count().filter(live),
            func.count().filter(live, h.host_id < key.host_id),
        )
        others = _of(select(*host_counts).select_from(h), h, key).where(h.host_id != key.host_id)
        with Session(self.engine) as session:
            mine = _totals(session, key)
            arm_rows = session.execute(arm_sums).all()
            position_rows = session.execute(position_sums).all()
            hosts, live_peers, live_before = session.execute(others).one()
        arms: dict[ArmKey, ArmTotals] = {}
        hosts_by_cell: dict[tuple[int, int], int] = {}
        for ctx, batch, method, k, with_rows, steps, *sums in arm_rows:
            summed, own = ArmTotals(int(steps), *sums), mine.arms.get((ctx, batch, method, k))
            theirs = summed.minus(own) if own is not None else summed
            their_hosts = with_rows - (own is not None)
            if theirs.steps > 0 and their_hosts > 0:
                arms[(ctx, batch, method, k)] = theirs
                hosts_by_cell[(ctx, batch)] = max(hosts_by_cell.get((ctx, batch), 0), their_hosts)
        acceptance: dict[PositionKey, PositionTotals] = {}
        for ctx, method, j, kept, at_risk in position_rows:
            own_counts = mine.acceptance.get((ctx, method, j), PositionTotals())
            counts = PositionTotals(int(kept) - own_counts.kept, int(at_risk) - own_counts.at_risk)
            if counts.at_risk > 0:
                acceptance[(ctx, method, j)] = counts
        share = ProbeShare(rank=int(live_before), hosts=int(live_peers) + 1)
        return FleetView(FleetTotals(arms, acceptance), int(hosts), hosts_by_cell, share)

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


class DuplicateHostError(AdaptiveSpecError):
    """Another live daemon flushes under this host id."""


def _claim(session: Session, key: FleetKey, started_at: datetime) -> None:
    h = FleetHost
    row = session.execute(
        _mine(select(h.started_at, h.last_flush_at), h, key).with_for_update()
    ).one_or_none()
    if row is None or _utc(row.started_at) == _utc(started_at) or _utc(row.last_flush_at) < _utc(started_at):
        return
    raise DuplicateHostError(
        f"host id {key.host_id!r} is in use by another live daemon of {key.model_key} on "
        f"{key.hardware_key} (it flushed at {_utc(row.last_flush_at).isoformat()}, after this one "
        "started); the two would overwrite each other's totals. Give each daemon its own "
        "--host-id (ADAPTIVESPEC_HOST_ID), or stop the other one"
    )


def _utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes: they were written in UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _now() -> datetime:
    return datetime.now(UTC)


def _ids(key: FleetKey, host: bool = True) -> dict[str, object]:
    ids: dict[str, object] = {"model_key": key.model_key, "hardware_key": key.hardware_key}
    return {"host_id": key.host_id, **ids} if host else ids


Rows = list[dict[str, object]]


def _arm_rows(key: FleetKey, changes: FleetTotals, before: FleetTotals) -> tuple[Rows, Rows]:
    """The host's new absolute rows, and what each adds to the pooled sums (against `before`,
    what the database held, so a retry of a committed flush adds nothing)."""
    rows, sums = [], []
    for (ctx, batch, method, k), totals in sorted(changes.arms.items()):
        old = before.arms.get((ctx, batch, method, k))
        cell: dict[str, object] = {"ctx_bucket": ctx, "batch_bucket": batch, "method": method, "k": k}
        rows.append(_ids(key) | cell | _arm_columns(totals))
        added = totals.minus(old) if old is not None else totals
        sums.append(_ids(key, host=False) | cell | _arm_columns(added) | {"hosts": int(old is None)})
    return rows, sums


def _position_rows(key: FleetKey, changes: FleetTotals, before: FleetTotals) -> tuple[Rows, Rows]:
    rows, sums = [], []
    for (ctx, method, j), counts in sorted(changes.acceptance.items()):
        old = before.acceptance.get((ctx, method, j), PositionTotals())
        cell: dict[str, object] = {"ctx_bucket": ctx, "method": method, "position": j}
        rows.append(_ids(key) | cell | {"kept": counts.kept, "at_risk": counts.at_risk})
        added = {"kept": counts.kept - old.kept, "at_risk": counts.at_risk - old.at_risk}
        sums.append(_ids(key, host=False) | cell | added)
    return rows, sums


def _totals(session: Session, key: FleetKey, only: FleetTotals | None = None) -> FleetTotals:
    """This host's rows (those of `only`'s keys, when given), read as plain rows: a flush reads
    what it is about to overwrite, and a refresh what it subtracts."""
    a, p = FleetArmTotal, FleetAcceptanceTotal
    arm_query = _mine(select(a.ctx_bucket, a.batch_bucket, a.method, a.k, *_arm_sums(a)), a, key)
    position_query = _mine(select(p.ctx_bucket, p.method, p.position, p.kept, p.at_risk), p, key)
    if only is not None:
        arm_query = arm_query.where(
            tuple_(a.ctx_bucket, a.batch_bucket, a.method, a.k).in_(list(only.arms) or [(-1, -1, "", -1)])
        )
        position_query = position_query.where(
            tuple_(p.ctx_bucket, p.method, p.position).in_(list(only.acceptance) or [(-1, "", -1)])
        )
    return FleetTotals(
        {(c, b, m, k): ArmTotals(int(n), *sums) for c, b, m, k, n, *sums in session.execute(arm_query)},
        {
            (c, m, j): PositionTotals(int(kept), int(risk))
            for c, m, j, kept, risk in session.execute(position_query)
        },
    )


def _arm_sums(table: type[FleetArmTotal] | type[FleetPooledArm]) -> tuple[Any, ...]:
    return (table.steps, table.reward_sum, table.reward_sq, table.seconds_sum, table.seconds_sq)


def _arm_columns(t: ArmTotals) -> dict[str, Any]:
    return {
        "steps": t.steps,
        "reward_sum": t.reward_sum,
        "reward_sq": t.reward_sq,
        "seconds_sum": t.seconds_sum,
        "seconds_sq": t.seconds_sq,
    }


def _of(statement, table, key: FleetKey):  # type: ignore[no-untyped-def]
    return statement.where(table.model_key == key.model_key, table.hardware_key == key.hardware_key)


def _mine(statement, table, key: FleetKey):  # type: ignore[no-untyped-def]
    return _of(statement, table, key).where(table.host_id == key.host_id)
