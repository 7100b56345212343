"""The admin API: what the controller learned, its history, overrides and freeze; bearer-token guarded.

Who may do what:
- With a token configured, every admin route needs it (`Authorization: Bearer ...`).
  Tokens are compared as SHA-256 digests with hmac.compare_digest (constant time).
- Without one, changes (overrides, freeze) are refused, and the read-only pages are served
  only to a loopback peer that came through no proxy (no Forwarded, X-Forwarded-For or
  X-Real-IP header). A proxy on the same host that forwards without those headers would
  make the read-only pages public: set a token whenever a proxy fronts the daemon.
- The Host header must name this server (loopback, `host`, or `allowed_hosts`), so a web
  page cannot reach the admin API through DNS rebinding, and a change must be sent as
  application/json, which a cross-site form cannot send without a CORS preflight.
"""

from __future__ import annotations

import asyncio
import html
import logging
import re
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from sqlalchemy.exc import SQLAlchemyError

from adaptivespec.controller.buckets import BATCH_BUCKETS, CONTEXT_BUCKETS
from adaptivespec.controller.controller import Controller
from adaptivespec.controller.decision_log import DecisionChange
from adaptivespec.controller.overrides import Override
from adaptivespec.controller.publisher import PublishedCell
from adaptivespec.errors import ConfigError
from adaptivespec.server.protocol import ApiError, parse_json
from adaptivespec.server.state import CONFIG, SERVICES
from adaptivespec.store.rows import HistoryRow

log = logging.getLogger(__name__)


def _threshold_rows(controller: Controller, max_context: int, max_batch: int) -> list[dict[str, Any]]:
    """Per context bucket, the decisions (never an exploration step), and which cells explore now."""
    thresholds = controller.thresholds()
    measured = {(d.ctx_bucket, d.batch_bucket): d for d in controller.decisions()}
    rows: dict[int, dict[str, Any]] = {}
    for cell in controller.publisher.published(max_context, max_batch):
        row = rows.setdefault(
            cell.ctx_bucket,
            {
                "model_key": controller.model_key,
                "hardware_key": controller.hardware_key,
                "ctx_bucket": CONTEXT_BUCKETS[cell.ctx_bucket].label,
                "threshold": thresholds.get(cell.ctx_bucket),
                "k_by_bucket": {},
                "method_by_bucket": {},
                "source_by_bucket": {},
                "exploring": {},
                "exploring_method": {},
                "samples": 0,
                "fleet_samples": 0,
                "hosts_by_bucket": {},
                "confidence": None,
                "policy_version": controller.version,
            },
        )
        label = BATCH_BUCKETS[cell.batch_bucket].label
        row["k_by_bucket"][label] = cell.decided.k
        row["method_by_bucket"][label] = cell.decided.method
        row["source_by_bucket"][label] = cell.source
        if cell.exploring:
            row["exploring"][label] = cell.running.k
            row["exploring_method"][label] = cell.running.method
        decision = measured.get((cell.ctx_bucket, cell.batch_bucket))
        if decision is not None:
            row["samples"] += decision.samples
            row["fleet_samples"] += decision.fleet_samples
            row["hosts_by_bucket"][label] = decision.hosts
            row["confidence"] = min(row["confidence"] or 1.0, decision.confidence)
    return [rows[ctx] for ctx in sorted(rows)]


async def thresholds(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    max_context, max_batch = request.app[CONFIG].engine.max_context, services.engine.scheduler.max_batch
    return web.json_response({"data": _threshold_rows(services.controller, max_context, max_batch)})


async def decisions(request: web.Request) -> web.Response:
    """Decision changes, newest first: those the controller holds until its next flush, then
    the stored ones. A GET only reads: it never flushes, so it works on a read-only store."""
    services = request.app[SERVICES]
    limit = _int_query(request, "limit", 100, 1, 1000)
    offset = _int_query(request, "offset", 0, 0, 10**9)
    controller = services.controller
    keys = (controller.model_key, controller.hardware_key)
    unsaved = [_history_row(keys, change) for change in reversed(controller.history())]
    page = unsaved[offset : offset + limit]
    stored_offset = max(0, offset - len(unsaved))
    try:
        stored, total = await asyncio.to_thread(
            services.store.history, *keys, limit - len(page), stored_offset
        )
    except SQLAlchemyError as exc:
        log.exception("reading the decision history failed")
        raise ApiError(
            503,
            f"the store cannot be read ({type(exc).__name__}); check the database, "
            "then run `adaptivespec db check`",
            kind="server_error",
        ) from exc
    seen = {(r.policy_version, r.ctx_bucket, r.batch_bucket, r.reason) for r in unsaved}
    fresh = [r for r in stored if (r.policy_version, r.ctx_bucket, r.batch_bucket, r.reason) not in seen]
    return web.json_response(
        {
            "data": [_row(r) for r in [*page, *fresh][:limit]],
            "total": total + len(unsaved),
            "limit": limit,
            "offset": offset,
        }
    )


def _history_row(keys: tuple[str, str], change: DecisionChange) -> HistoryRow:
    at = datetime.fromtimestamp(change.at, tz=UTC).isoformat()
    return HistoryRow(
        *keys,
        change.ctx_bucket,
        change.batch_bucket,
        change.old_k,
        change.new_k,
        change.reason,
        change.version,
        at,
        change.old_method,
        change.new_method,
    )


def _row(row: object) -> dict[str, Any]:
    return {name: getattr(row, name) for name in row.__slots__}  # type: ignore[attr-defined]


_QUERY_INT = re.compile(r"[0-9]{1,10}")  # ASCII digits only: str.isdigit() also takes "²"


def _int_query(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if _QUERY_INT.fullmatch(raw) is None or not lo <= int(raw) <= hi:
        raise ApiError(400, f"{name} must be an integer in [{lo}, {hi}]", param=name)
    return int(raw)


async def add_override(request: web.Request) -> web.Response:
    body = parse_json(await request.read())
    allowed = {"kind", "k", "method", "ctx_bucket", "batch_bucket"}
    if set(body) - allowed:
        raise ApiError(400, f"unknown fields {sorted(set(body) - allowed)}; allowed: {sorted(allowed)}")
    for name in ("k", "ctx_bucket", "batch_bucket"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ApiError(400, f"{name} must be an integer", param=name)
    method = body.get("method")
    if method is not None and not isinstance(method, str):
        raise ApiError(400, "method must be a string: one of the drafters loaded", param="method")
    controller = request.app[SERVICES].controller
    try:
        kind: Any = body.get("kind")
        override = Override(kind, body.get("k"), body.get("ctx_bucket"), body.get("batch_bucket"), method)
        controller.add_override(override, reason=f"admin: {override.kind}")
    except ConfigError as exc:
        raise ApiError(400, str(exc)) from exc
    return web.json_response(
        {
            "overrides": [o.__dict__ if hasattr(o, "__dict__") else _row(o) for o in controller.overrides],
            "policy_version": controller.version,
        }
    )


async def clear_overrides(request: web.Request) -> web.Response:
    controller = request.app[SERVICES].controller
    controller.set_overrides((), reason="admin: clear")
    return web.json_response({"overrides": [], "policy_version": controller.version})


async def freeze(request: web.Request) -> web.Response:
    body = parse_json(await request.read())
    frozen = body.get("frozen", True)
    if not isinstance(frozen, bool) or set(body) - {"frozen"}:
        raise ApiError(400, 'body must be {"frozen": true|false}', param="frozen")
    controller = request.app[SERVICES].controller
    controller.freeze(frozen)
    return web.json_response({"frozen": frozen, "policy_version": controller.version})


async def page(request: web.Request) -> web.Response:
    """A heatmap of the decided K over batch x context buckets, with each threshold marked."""
    controller = request.app[SERVICES].controller
    max_batch = request.app[SERVICES].engine.scheduler.max_batch
    thresholds = controller.thresholds()
    head = "".join(f"<th>{html.escape(b.label)}</th>" for b in BATCH_BUCKETS if b.lo <= max_batch)
    rows: dict[int, list[str]] = {}
    for cell in controller.publisher.published(request.app[CONFIG].engine.max_context, max_batch):
        named = len(controller.methods) > 1  # which drafter is worth a word only when there is a choice
        rows.setdefault(cell.ctx_bucket, []).append(_heat_cell(cell, thresholds.get(cell.ctx_bucket), named))
    body = [
        f"<tr><th>{html.escape(CONTEXT_BUCKETS[ctx].label)}</th>{''.join(cells)}</tr>"
        for ctx, cells in sorted(rows.items())
    ]
    document = _PAGE.format(
        model=html.escape(controller.model_key),
        hardware=html.escape(controller.hardware_key),
        version=controller.version,
        head=head,
        rows="".join(body),
    )
    return web.Response(text=document, content_type="text/html")


def _heat_cell(cell: PublishedCell, threshold: int | None, named: bool) -> str:
    decided, running = cell.decided, cell.running
    shade = 255 - min(decided.k, 8) * 24
    classes = ["k", cell.source]
    if threshold == BATCH_BUCKETS[cell.batch_bucket].lo:
        classes.append("threshold")
    note = f' title="exploring {html.escape(str(running))} this step"' if cell.exploring else ""
    mark = "*" if cell.exploring else ""
    style = f"background:rgb({shade},{shade},255)"
    method = f"<br><small>{html.escape(decided.method)}</small>" if named and decided.k else ""
    return f'<td class="{" ".join(classes)}"{note} style="{style}">{decided.k}{mark}{method}</td>'


_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>adaptivespec</title><style>
body{{font-family:sans-serif;margin:2em}} td,th{{padding:4px 8px;text-align:center;border:1px solid #ccc}}
table{{border-collapse:collapse}} .threshold{{border-left:4px solid #d00}} .borrowed,.prior{{color:#999}}
.override{{font-weight:bold;text-decoration:underline}} .fleet{{font-style:italic}}
</style></head><body><h1>Learned drafter and draft length K</h1>
<p>{model} on {hardware}, policy version {version}. Rows: context length; columns: batch size.
Darker = larger K; a red left border marks the learned threshold (speculation off from there on);
grey numbers are buckets not measured yet, which borrow the nearest measured decision (or the
prior, before anything is measured); italic numbers come from other hosts of the fleet, not yet measured
here; underlined numbers are operator overrides; * marks a bucket whose
next step explores another K to measure it. The decisions are those of /admin/thresholds and the metrics.</p>
<table><tr><th>context \\ batch</th>{head}</tr>{rows}</table></body></html>"""


def routes() -> list[web.RouteDef]:
    return [
        web.get("/admin", page),
        web.get("/admin/thresholds", thresholds),
        web.get("/admin/decisions", decisions),
        web.post("/admin/overrides", add_override),
        web.delete("/admin/overrides", clear_overrides),
        web.post("/admin/freeze", freeze),
    ]
