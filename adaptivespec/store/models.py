"""Typed tables. Learning state is plain columns (never pickle), so any SQL client can read it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Float, Integer, MetaData, String, UniqueConstraint, func
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class _Keyed:
    model_key: Mapped[str] = mapped_column(String(256), index=True)
    hardware_key: Mapped[str] = mapped_column(String(256), index=True)


class PolicyState(_Keyed, Base):
    __tablename__ = "policy_state"
    __table_args__ = (UniqueConstraint("model_key", "hardware_key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, server_default="0")
    frozen: Mapped[int] = mapped_column(Integer, server_default="0")
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Decision(_Keyed, Base):
    """The current decision of one (context bucket, batch bucket) cell."""

    __tablename__ = "decisions"
    __table_args__ = (UniqueConstraint("model_key", "hardware_key", "ctx_bucket", "batch_bucket"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ctx_bucket: Mapped[int] = mapped_column(Integer)
    batch_bucket: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    method: Mapped[str] = mapped_column(String(64), server_default="")  # the drafter at k; "" at k = 0
    samples: Mapped[int] = mapped_column(Integer, server_default="0")
    confidence: Mapped[float] = mapped_column(Float, server_default="0")
    reward_scale: Mapped[float] = mapped_column(Float, server_default="0")
    policy_version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class ArmStat(_Keyed, Base):
    """What one arm (drafter, K) measured in one cell: normalised goodput and step seconds."""

    __tablename__ = "arm_stats"
    __table_args__ = (
        UniqueConstraint("model_key", "hardware_key", "ctx_bucket", "batch_bucket", "method", "k"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ctx_bucket: Mapped[int] = mapped_column(Integer)
    batch_bucket: Mapped[int] = mapped_column(Integer)
    method: Mapped[str] = mapped_column(String(64), server_default="")
    k: Mapped[int] = mapped_column(Integer)
    reward_mean: Mapped[float] = mapped_column(Float)
    reward_var: Mapped[float] = mapped_column(Float)
    reward_count: Mapped[int] = mapped_column(Integer)
    seconds_mean: Mapped[float] = mapped_column(Float)
    seconds_var: Mapped[float] = mapped_column(Float)
    seconds_count: Mapped[int] = mapped_column(Integer)


class AcceptanceStat(_Keyed, Base):
    __tablename__ = "acceptance_stats"
    __table_args__ = (UniqueConstraint("model_key", "hardware_key", "ctx_bucket", "method"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ctx_bucket: Mapped[int] = mapped_column(Integer)
    method: Mapped[str] = mapped_column(String(64), server_default="")  # whose drafts
    first_rate: Mapped[float] = mapped_column(Float)
    continuation_rate: Mapped[float | None] = mapped_column(Float, nullable=True)  # None: = first_rate
    count: Mapped[int] = mapped_column(Integer)


class DecisionHistory(_Keyed, Base):
    """Audit trail: what changed, when, from what to what, and why."""

    __tablename__ = "decision_history"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ctx_bucket: Mapped[int] = mapped_column(Integer)  # -1 for changes that are not one cell's
    batch_bucket: Mapped[int] = mapped_column(Integer)
    old_k: Mapped[int] = mapped_column(Integer)
    new_k: Mapped[int] = mapped_column(Integer)
    old_method: Mapped[str] = mapped_column(String(64), server_default="")
    new_method: Mapped[str] = mapped_column(String(64), server_default="")
    reason: Mapped[str] = mapped_column(String(512))
    policy_version: Mapped[int] = mapped_column(Integer, index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class OverrideRow(_Keyed, Base):
    __tablename__ = "overrides"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    k: Mapped[int | None] = mapped_column(Integer, nullable=True)
    method: Mapped[str | None] = mapped_column(String(64), nullable=True)
    ctx_bucket: Mapped[int | None] = mapped_column(Integer, nullable=True)
    batch_bucket: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class _HostKeyed(_Keyed):
    host_id: Mapped[str] = mapped_column(String(256))


class FleetHost(_HostKeyed, Base):
    """One host serving one (model, hardware): when it started and last flushed, and its steps."""

    __tablename__ = "fleet_hosts"
    __table_args__ = (UniqueConstraint("host_id", "model_key", "hardware_key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    steps: Mapped[int] = mapped_column(BigInteger)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_flush_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class _ArmTotals:
    ctx_bucket: Mapped[int] = mapped_column(Integer)
    batch_bucket: Mapped[int] = mapped_column(Integer)
    method: Mapped[str] = mapped_column(String(64), server_default="")
    k: Mapped[int] = mapped_column(Integer)
    steps: Mapped[int] = mapped_column(BigInteger)
    reward_sum: Mapped[float] = mapped_column(Float)  # tokens per row per second
    reward_sq: Mapped[float] = mapped_column(Float)
    seconds_sum: Mapped[float] = mapped_column(Float)  # step seconds
    seconds_sq: Mapped[float] = mapped_column(Float)


class _PositionTotals:
    ctx_bucket: Mapped[int] = mapped_column(Integer)
    method: Mapped[str] = mapped_column(String(64), server_default="")  # whose drafts
    position: Mapped[int] = mapped_column(Integer)  # draft j, from 1
    kept: Mapped[int] = mapped_column(BigInteger)  # rows that kept draft j
    at_risk: Mapped[int] = mapped_column(BigInteger)  # rows that kept draft j - 1 in steps drafting j


class FleetArmTotal(_ArmTotals, _HostKeyed, Base):
    """One host's cumulative totals for one K in one cell. Each host writes only its own rows,
    and absolute totals, so a retried flush is idempotent and hosts never contend for a row."""

    __tablename__ = "fleet_arm_totals"
    __table_args__ = (
        UniqueConstraint("host_id", "model_key", "hardware_key", "ctx_bucket", "batch_bucket", "method", "k"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)


class FleetAcceptanceTotal(_PositionTotals, _HostKeyed, Base):
    """One host's cumulative draft survival counts at one draft position in one context bucket."""

    __tablename__ = "fleet_acceptance_totals"
    __table_args__ = (
        UniqueConstraint("host_id", "model_key", "hardware_key", "ctx_bucket", "method", "position"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)


class FleetPooledArm(_ArmTotals, _Keyed, Base):
    """Every host's FleetArmTotal rows of one (model, hardware, cell, K), summed; changed in the
    same transaction as the rows it sums, so a refresh reads one row where it would sum N."""

    __tablename__ = "fleet_pooled_arms"
    __table_args__ = (
        UniqueConstraint("model_key", "hardware_key", "ctx_bucket", "batch_bucket", "method", "k"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hosts: Mapped[int] = mapped_column(Integer)  # hosts with a row here


class FleetPooledAcceptance(_PositionTotals, _Keyed, Base):
    __tablename__ = "fleet_pooled_acceptance"
    __table_args__ = (UniqueConstraint("model_key", "hardware_key", "ctx_bucket", "method", "position"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
