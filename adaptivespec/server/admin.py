"""The admin API: what the controller learned, its history, overrides and freeze; bearer-token guarded.

Tokens are compared as SHA-256 digests with hmac.compare_digest (constant time, exact case).
Without a configured token the admin routes are refused unless the server listens on
loopback only.
"""

from __future__ import annotations

import hashlib
import hmac
import html
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from adaptivespec.controller.controller import Controller
from adaptivespec.controller.keys import BATCH_BUCKETS, CONTEXT_BUCKETS
from adaptivespec.controller.overrides import Override
from adaptivespec.errors import ConfigError
from adaptivespec.server.protocol import ApiError, parse_json
from adaptivespec.server.state import CONFIG, FLUSH, SERVICES

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path == "/admin" or request.path.startswith("/admin/"):
        _authorise(request)
    return await handler(request)


def _authorise(request: web.Request) -> None:
    config = request.app[CONFIG]
    if config.admin_token is None:
        if config.loopback_only:
            return
        raise ApiError(
            403,
            "admin API is off: set ADAPTIVESPEC_ADMIN_TOKEN, or bind to 127.0.0.1",
            kind="permission_error",
        )
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    expected = hashlib.sha256(config.admin_token.encode()).digest()
    given = hashlib.sha256(token.strip().encode()).digest()
    if scheme.lower() != "bearer" or not hmac.compare_digest(expected, given):
        raise ApiError(401, "missing or wrong admin bearer token", kind="authentication_error")


def _threshold_rows(controller: Controller) -> list[dict[str, Any]]:
    thresholds = controller.thresholds()
    rows: dict[int, dict[str, Any]] = {}
    for d in controller.decisions():
        row = rows.setdefault(
            d.ctx_bucket,
            {
                "model_key": controller.model_key,
                "hardware_key": controller.hardware_key,
                "ctx_bucket": CONTEXT_BUCKETS[d.ctx_bucket].label,
                "threshold": thresholds.get(d.ctx_bucket),
                "k_by_bucket": {},
                "samples": 0,
                "confidence": 1.0,
                "policy_version": controller.version,
            },
        )
        row["k_by_bucket"][BATCH_BUCKETS[d.batch_bucket].label] = d.k
        row["samples"] += d.samples
        row["confidence"] = min(row["confidence"], d.confidence)
    return [rows[ctx] for ctx in sorted(rows)]


async def thresholds(request: web.Request) -> web.Response:
    return web.json_response({"data": _threshold_rows(request.app[SERVICES].controller)})


async def decisions(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    limit = _int_query(request, "limit", 100, 1, 1000)
    offset = _int_query(request, "offset", 0, 0, 10**9)
    flush = request.app.get(FLUSH)
    if flush is not None:
        await flush()
    rows, total = services.store.history(limit=limit, offset=offset)
    return web.json_response(
        {
            "data": [r.__dict__ if hasattr(r, "__dict__") else _row(r) for r in rows],
            "total": total,
            "limit": limit,
            "offset": offset,
        }
    )


def _row(row: object) -> dict[str, Any]:
    return {name: getattr(row, name) for name in row.__slots__}  # type: ignore[attr-defined]


def _int_query(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not lo <= int(raw) <= hi:
        raise ApiError(400, f"{name} must be an integer in [{lo}, {hi}]", param=name)
    return int(raw)


async def add_override(request: web.Request) -> web.Response:
    body = parse_json(await request.read())
    allowed = {"kind", "k", "ctx_bucket", "batch_bucket"}
    if set(body) - allowed:
        raise ApiError(400, f"unknown fields {sorted(set(body) - allowed)}; allowed: {sorted(allowed)}")
    for name in ("k", "ctx_bucket", "batch_bucket"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ApiError(400, f"{name} must be an integer", param=name)
    try:
        kind: Any = body.get("kind")
        override = Override(kind, body.get("k"), body.get("ctx_bucket"), body.get("batch_bucket"))
    except ConfigError as exc:
        raise ApiError(400, str(exc), param="kind") from exc
    controller = request.app[SERVICES].controller
    controller.set_overrides((*controller.overrides, override), reason=f"admin: {override.kind}")
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
    """A heatmap of the learned K over batch x context buckets, with each threshold marked."""
    controller = request.app[SERVICES].controller
    table = controller.live.snapshot.table
    visited = {(d.ctx_bucket, d.batch_bucket) for d in controller.decisions()}
    thresholds = controller.thresholds()
    head = "".join(f"<th>{html.escape(b.label)}</th>" for b in BATCH_BUCKETS)
    body = []
    for ctx, row in enumerate(table):
        cells = []
        for batch, k in enumerate(row):
            shade = 255 - min(k, 8) * 24
            mark = " threshold" if thresholds.get(ctx) == BATCH_BUCKETS[batch].lo else ""
            seen = "" if (ctx, batch) in visited else " unseen"
            cells.append(f'<td class="k{mark}{seen}" style="background:rgb({shade},{shade},255)">{k}</td>')
        body.append(f"<tr><th>{html.escape(CONTEXT_BUCKETS[ctx].label)}</th>{''.join(cells)}</tr>")
    document = _PAGE.format(
        model=html.escape(controller.model_key),
        hardware=html.escape(controller.hardware_key),
        version=controller.version,
        head=head,
        rows="".join(body),
    )
    return web.Response(text=document, content_type="text/html")


_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>adaptivespec</title><style>
body{{font-family:sans-serif;margin:2em}} td,th{{padding:4px 8px;text-align:center;border:1px solid #ccc}}
table{{border-collapse:collapse}} .threshold{{border-left:4px solid #d00}} .unseen{{color:#999}}
</style></head><body><h1>Learned draft length K</h1>
<p>{model} on {hardware}, policy version {version}. Rows: context length; columns: batch size.
Darker = larger K; a red left border marks the learned threshold (speculation off from there on);
grey numbers are buckets not measured yet, which borrow the nearest measured decision.</p>
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
