"""Prometheus metrics in vLLM's naming style (adaptivespec:*), fed from step telemetry.

The registry belongs to the app (no global state). Gauges that describe the present
(running and waiting requests, the K per bucket, the policy version) are read at scrape time.
"""

from __future__ import annotations

import time
from dataclasses import replace

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from adaptivespec.controller.buckets import BATCH_BUCKETS, CONTEXT_BUCKETS
from adaptivespec.controller.controller import Controller
from adaptivespec.engine.engine import Engine
from adaptivespec.engine.records import EngineTotals
from adaptivespec.engine.telemetry import StepTelemetry, Subscription
from adaptivespec.server.fleet_sync import FleetStatus

STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._counted = EngineTotals()  # the engine's totals at the last scrape
        r = self.registry
        self.running = Gauge("adaptivespec:num_requests_running", "Requests in the decode batch.", registry=r)
        self.waiting = Gauge(
            "adaptivespec:num_requests_waiting", "Requests waiting for a batch slot.", registry=r
        )
        self.prefill_backlog = Gauge(
            "adaptivespec:prefill_backlog_tokens",
            "Prompt tokens still to prefill: waiting requests, and the rest of a prompt fed in chunks.",
            registry=r,
        )
        self.prompt_tokens = Counter("adaptivespec:prompt_tokens", "Prompt tokens admitted.", registry=r)
        self.generation_tokens = Counter("adaptivespec:generation_tokens", "Tokens generated.", registry=r)
        self.overlapped_steps = Counter(
            "adaptivespec:decode_steps_overlapped",
            "Decode steps started while the previous step's tokens were streamed (of step_seconds_count).",
            registry=r,
        )
        self.steps_with_prompts = Counter(
            "adaptivespec:decode_steps_with_prompts",
            "Decode steps that carried prompt chunks in their forward (not in step_seconds).",
            registry=r,
        )
        self.step_seconds = Histogram(
            "adaptivespec:step_seconds", "Decode step wall time.", buckets=STEP_BUCKETS, registry=r
        )
        self.drafts = Counter(
            "adaptivespec:spec_decode_num_drafts", "Rows that drafted, summed over steps.", registry=r
        )
        self.draft_tokens = Counter(
            "adaptivespec:spec_decode_num_draft_tokens", "Draft tokens proposed.", registry=r
        )
        self.accepted_tokens = Counter(
            "adaptivespec:spec_decode_num_accepted_tokens", "Draft tokens accepted.", registry=r
        )
        self.catch_up_seconds = Counter(
            "adaptivespec:spec_decode_catch_up_seconds",
            "Switch cost: seconds drafters spent catching up on steps they sat out (at K = 0, or "
            "while another drafter ran), by the arm that switched them on (part of step_seconds).",
            ["method", "k"],
            registry=r,
        )
        self.catch_up_tokens = Counter(
            "adaptivespec:spec_decode_catch_up_tokens",
            "Tokens drafters caught up on after sitting out steps, by the arm that switched them on.",
            ["method", "k"],
            registry=r,
        )
        self.shadow_rows = Counter(
            "adaptivespec:spec_decode_shadow_rows",
            "Rows a drafter that did not run drafted for, scored against the output (shadow drafts).",
            ["method"],
            registry=r,
        )
        self.shadow_kept = Counter(
            "adaptivespec:spec_decode_shadow_kept_tokens",
            "Of those rows' drafts, the tokens a verify would have kept (the output's matched prefix).",
            ["method"],
            registry=r,
        )
        self.k = Gauge(
            "adaptivespec:spec_k",
            "Decided K per bucket (the same as /admin/thresholds).",
            ["ctx_bucket", "batch_bucket"],
            registry=r,
        )
        self.method = Gauge(
            "adaptivespec:spec_method",
            '1 for the drafter decided per bucket (method "" where the decision is K = 0).',
            ["ctx_bucket", "batch_bucket", "method"],
            registry=r,
        )
        self.exploring = Gauge(
            "adaptivespec:spec_k_exploring",
            "1 where the bucket's next step explores another K than the decision.",
            ["ctx_bucket", "batch_bucket"],
            registry=r,
        )
        self.policy_version = Gauge("adaptivespec:policy_version", "Current policy version.", registry=r)
        self.rejections = Counter(
            "adaptivespec:request_rejections", "Requests refused.", ["reason"], registry=r
        )
        self.telemetry_dropped = Gauge(
            "adaptivespec:telemetry_dropped", "Telemetry records dropped.", registry=r
        )
        # Registered at the first scrape with a fleet: a lone host exports no fleet series, so a
        # dashboard reads them as absent, never as a database that is down.
        self._fleet_gauges: FleetGauges | None = None

    def observe(self, record: StepTelemetry) -> None:
        self.step_seconds.observe(record.step_seconds)
        if record.width > 0:
            self.drafts.inc(record.batch_size)
            self.draft_tokens.inc(record.drafted)
            self.accepted_tokens.inc(record.accepted)
        if record.catch_up_tokens:
            arm = (record.method, str(record.k))
            self.catch_up_seconds.labels(*arm).inc(record.catch_up_seconds)
            self.catch_up_tokens.labels(*arm).inc(record.catch_up_tokens)
        for shadow in record.shadow:
            self.shadow_rows.labels(shadow.method).inc(shadow.rows)
            self.shadow_kept.labels(shadow.method).inc(sum(shadow.kept_at_least))

    async def consume(self, subscription: Subscription) -> None:
        while True:
            self.observe(await subscription.get())

    def render(self, engine: Engine, controller: Controller, fleet: FleetStatus | None = None) -> bytes:
        totals = engine.totals
        self.prompt_tokens.inc(totals.prompt_tokens - self._counted.prompt_tokens)
        self.generation_tokens.inc(totals.generation_tokens - self._counted.generation_tokens)
        self.overlapped_steps.inc(totals.overlapped_steps - self._counted.overlapped_steps)
        self.steps_with_prompts.inc(totals.steps_with_prompts - self._counted.steps_with_prompts)
        self._counted = replace(totals)
        self.running.set(len(engine.scheduler.running))
        self.waiting.set(len(engine.scheduler.waiting))
        self.prefill_backlog.set(engine.scheduler.prefill_backlog)
        self.telemetry_dropped.set(engine.telemetry.dropped)
        self.policy_version.set(controller.live.snapshot.version)
        self.method.clear()  # a bucket's drafter changed: its old series goes
        for cell in controller.publisher.published(engine.config.max_context, engine.scheduler.max_batch):
            labels = (CONTEXT_BUCKETS[cell.ctx_bucket].label, BATCH_BUCKETS[cell.batch_bucket].label)
            self.k.labels(*labels).set(cell.decided.k)
            self.method.labels(*labels, cell.decided.method).set(1)
            self.exploring.labels(*labels).set(int(cell.exploring))
        if fleet is not None:
            self._fleet(fleet)
        return generate_latest(self.registry)

    def _fleet(self, status: FleetStatus) -> None:
        if self._fleet_gauges is None:
            self._fleet_gauges = FleetGauges(self.registry)
        self._fleet_gauges.update(status)


class FleetGauges:
    """What a host pooling with a fleet exports about it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.db_up = Gauge(
            "adaptivespec:fleet_db_up",
            "1 while the fleet database answers, 0 while the daemon serves on its last view of it.",
            registry=r,
        )
        self.hosts = Gauge(
            "adaptivespec:fleet_hosts", "Other hosts of this model and hardware pooling.", registry=r
        )
        self.pooled_steps = Gauge(
            "adaptivespec:fleet_pooled_steps",
            "Steps the other hosts measured, as of the last refresh.",
            registry=r,
        )
        self.refresh_seconds = Gauge(
            "adaptivespec:fleet_refresh_seconds", "How long the last fleet refresh took.", registry=r
        )
        self.flush_age = Gauge(
            "adaptivespec:fleet_last_flush_age_seconds",
            "Seconds since this host last flushed.",
            registry=r,
        )
        self.rows_written = Counter(
            "adaptivespec:fleet_rows_written",
            "Rows this host upserted into the fleet tables.",
            registry=r,
        )
        self._rows_counted = 0

    def update(self, status: FleetStatus) -> None:
        self.db_up.set(int(status.state == "ok"))
        self.hosts.set(status.hosts)
        self.pooled_steps.set(status.pooled_steps)
        self.refresh_seconds.set(status.refresh_seconds)
        self.rows_written.inc(status.rows_written - self._rows_counted)
        self._rows_counted = status.rows_written
        if status.last_flush_at is not None:
            self.flush_age.set(max(0.0, time.time() - status.last_flush_at))
